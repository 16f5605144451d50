/*
 * The floor for the HTTP/1.1 page benchmarks (bench/h1.sh, bench/static.sh): an epoll loop
 * that answers every read with a canned response (the 612-byte page behind a 5-field
 * head), parsing nothing. What a server cannot go below on this machine: the kernel's TCP
 * path for one read and one write per request. bench/lib.sh runs it as the server
 * `floor-h1` (in the default SERVERS of both scripts); by hand:
 *
 *   cc -O2 -o /tmp/floor bench/floor/h1.c
 *   SELVEDGE_ADDR=127.0.0.1:8080 /tmp/floor bench/site/index.html
 *
 * Listens on 127.0.0.1 at the port in SELVEDGE_ADDR (host:port), like examples/hello, and
 * serves the file named by its argument (up to 2 KB).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static char resp[4096];
static int resp_len;

int main(int argc, char **argv) {
    const char *addr = getenv("SELVEDGE_ADDR");
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    int port = colon ? atoi(colon + 1) : 8080;
    const char *page = argc > 1 ? argv[1] : "bench/site/index.html";
    FILE *f = fopen(page, "r");
    if (!f) { perror(page); return 1; }
    char body[2048];
    int blen = (int)fread(body, 1, sizeof body, f);
    fclose(f);
    resp_len = snprintf(resp, sizeof resp,
                        "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\n"
                        "date: Mon, 23 Nov 2026 03:00:00 GMT\r\nserver: floor\r\n"
                        "content-length: %d\r\n\r\n", blen);
    memcpy(resp + resp_len, body, blen);
    resp_len += blen;

    int one = 1, ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1024)) { perror("bind"); return 1; }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    struct epoll_event evs[256];
    char buf[4096];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {
                int c;
                while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct epoll_event e = {.events = EPOLLIN | EPOLLET, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
                }
                continue;
            }
            /* wrk sends one request at a time: one read takes it, one write answers. */
            ssize_t r = read(fd, buf, sizeof buf);
            if (r <= 0 || write(fd, resp, resp_len) < 0) close(fd);
        }
    }
}
