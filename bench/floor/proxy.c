/*
 * The floor for bench/proxy.sh: an epoll relay that gives each client connection an
 * upstream connection of its own (round robin over the upstreams) and passes bytes both
 * ways, parsing nothing: one read and one write per direction per request, the least a
 * proxy can do with HTTP/1.1 on both sides. What no proxy goes below on this machine.
 *
 *   SERVERS="selvedge nginx selvedge-floor" UPSTREAMS=2 bench/proxy.sh
 *
 * (proxy.sh builds it with cc into its work directory.) Usage: proxy PORT UPSTREAM_PORT...
 * listening on 127.0.0.1:PORT, upstreams on 127.0.0.1. A request or answer larger than one
 * read is relayed piece by piece, so any keep-alive exchange passes; a write the socket
 * does not take whole waits for it (blocking), which this benchmark's small messages never
 * need. Its upstream connections are opened as clients connect (a blocking connect, one per
 * client connection: the run's 50, against hundreds of thousands of requests), where the
 * proxies measured beside it keep a pool.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "floor.h"

struct end {
    int fd;
    struct end *peer;
};

static int connect_to(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0) {
        if (s >= 0) close(s);
        return -1;
    }
    return s;
}

/* Closes both sides. The two ends stay allocated (marked closed): an event for the other
 * one may still be in this turn's batch, and a benchmark's connections close only at the end. */
static void drop(struct end *e) {
    close(e->fd);
    close(e->peer->fd);
    e->fd = e->peer->fd = -1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s PORT UPSTREAM_PORT...\n", argv[0]);
        return 2;
    }
    int one = 1, next = 0, nup = argc - 2;
    int l, ep = listen_epoll(atoi(argv[1]), &l);
    if (ep < 0) return 1;
    static char buf[65536];
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            struct end *e = evs[i].data.ptr;
            if (e == NULL) {
                int c;
                while ((c = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    int u = connect_to(atoi(argv[2 + next++ % nup]));
                    if (u < 0) {
                        close(c);
                        continue;
                    }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct end *ce = malloc(sizeof *ce), *ue = malloc(sizeof *ue);
                    ce->fd = c, ce->peer = ue, ue->fd = u, ue->peer = ce;
                    /* The upstream socket is left blocking: reads are MSG_DONTWAIT, after epoll. */
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = ce};
                    struct epoll_event uev = {.events = EPOLLIN, .data.ptr = ue};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                    epoll_ctl(ep, EPOLL_CTL_ADD, u, &uev);
                }
                continue;
            }
            if (e->fd < 0) continue;
            ssize_t k = recv(e->fd, buf, sizeof buf, MSG_DONTWAIT);
            if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (k <= 0 || send_all(e->peer->fd, buf, (size_t)k) < 0) drop(e);
        }
    }
}
