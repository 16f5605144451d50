/*
 * What the floors (proxy.c, fastcgi.c) share: the listener and its epoll instance, and a
 * blocking write of a whole buffer on a non-blocking socket. Included by each; each is built alone with `cc -O2 FILE.c`.
 */
#ifndef FLOOR_H
#define FLOOR_H
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/socket.h>

/* Writes all of buf, waiting (poll) while the socket is full. */
static inline int send_all(int fd, const char *buf, size_t n) {
    while (n > 0) {
        ssize_t k = send(fd, buf, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            poll(&p, 1, -1);
            continue;
        }
        if (k <= 0) return -1;
        buf += k;
        n -= (size_t)k;
    }
    return 0;
}

/* A non-blocking listener on 127.0.0.1:port in a new epoll instance, registered with a
 * NULL data pointer (what the event loops take for the listener). Returns the epoll fd and
 * sets *listener, or -1 (said on stderr). */
static inline int listen_epoll(int port, int *listener) {
    int one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1024) < 0) {
        perror("listen");
        return -1;
    }
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
    *listener = l;
    return ep;
}

#endif
