/*
 * The floor for bench/fastcgi.sh: an epoll gateway that gives each client connection a
 * FastCGI connection of its own to php-fpm (kept, FCGI_KEEP_CONN) and, for every read from
 * the client, sends one fixed request (BEGIN_REQUEST, a few PARAMS naming the script, the
 * empty PARAMS and STDIN records) in one write, collects STDOUT until END_REQUEST and writes
 * the answer as an HTTP/1.1 response with a Content-Length in one write. It parses no HTTP
 * and passes no request fields: one read and one write per side per request, the least a
 * FastCGI gateway can do on this machine.
 *
 *   SERVERS="selvedge nginx selvedge-floor" bench/fastcgi.sh
 *
 * (fastcgi.sh builds it with cc into its work directory.) Usage: fastcgi PORT SOCKET SCRIPT
 * listening on 127.0.0.1:PORT, php-fpm on the Unix socket SOCKET, SCRIPT the script's path.
 * A client request is taken to arrive in one read (wrk's do), a script's head to be
 * "Name: value" lines a 200 answer can carry as they are, and a script's output to fit in
 * 70,000 bytes (a larger one closes the connection). Each client connection holds a php-fpm
 * process for as long as it stays open, so there must be no more clients than processes.
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
#include <sys/un.h>
#include <unistd.h>

#include "floor.h"

enum { BEGIN = 1, END = 3, PARAMS = 4, STDIN = 5, STDOUT = 6 };

struct end {
    int fd;
    int is_fcgi;
    struct end *peer;
    /* The FastCGI side: records read so far, and the answer's STDOUT bytes. */
    char *in;
    size_t in_len;
    char *out;
    size_t out_len;
};

static char request[4096];
static size_t request_len;

static void record(int type, const char *body, size_t n) {
    char *h = request + request_len;
    h[0] = 1, h[1] = (char)type, h[2] = 0, h[3] = 1;
    h[4] = (char)(n >> 8), h[5] = (char)n, h[6] = 0, h[7] = 0;
    memcpy(h + 8, body, n);
    request_len += 8 + n;
}

static size_t param(char *p, const char *name, const char *value) {
    size_t a = strlen(name), b = strlen(value);
    p[0] = (char)a, p[1] = (char)b;
    memcpy(p + 2, name, a);
    memcpy(p + 2 + a, value, b);
    return 2 + a + b;
}

static void drop(struct end *e) {
    close(e->fd);
    close(e->peer->fd);
    e->fd = e->peer->fd = -1;
}

/* The FastCGI side read: whole records are taken from e->in; on END_REQUEST the response
 * goes to the client. Returns -1 when the connection must close. */
static int from_fcgi(struct end *e) {
    size_t at = 0;
    while (e->in_len - at >= 8) {
        unsigned char *h = (unsigned char *)e->in + at;
        size_t n = (size_t)h[4] << 8 | h[5], pad = h[6];
        if (e->in_len - at < 8 + n + pad) break;
        if (h[1] == STDOUT) {
            if (e->out_len + n > 70000) return -1;
            memcpy(e->out + e->out_len, h + 8, n);
            e->out_len += n;
        } else if (h[1] == END) {
            char *body = memmem(e->out, e->out_len, "\r\n\r\n", 4);
            if (body == NULL) return -1;
            size_t head = (size_t)(body - e->out) + 4, len = e->out_len - head;
            char res[70000];
            int k = snprintf(res, sizeof res, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n", len);
            if (k < 0 || (size_t)k + e->out_len > sizeof res) return -1;
            memcpy(res + k, e->out, e->out_len);
            e->out_len = 0;
            if (send_all(e->peer->fd, res, (size_t)k + head + len) < 0) return -1;
        }
        at += 8 + n + pad;
    }
    memmove(e->in, e->in + at, e->in_len - at);
    e->in_len -= at;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4 || strlen(argv[3]) >= 128) {
        /* Names and values here are under 128 bytes: one-byte lengths. */
        fprintf(stderr, "usage: %s PORT SOCKET SCRIPT (a path under 128 bytes)\n", argv[0]);
        return 2;
    }
    /* The fixed request: responder role, keep the connection. */
    const char begin[8] = {0, 1, 1, 0, 0, 0, 0, 0};
    record(BEGIN, begin, 8);
    char params[2048];
    size_t p = 0;
    p += param(params + p, "SCRIPT_FILENAME", argv[3]);
    p += param(params + p, "SCRIPT_NAME", "/index.php");
    p += param(params + p, "REQUEST_METHOD", "GET");
    p += param(params + p, "REQUEST_URI", "/index.php");
    p += param(params + p, "QUERY_STRING", "");
    p += param(params + p, "SERVER_PROTOCOL", "HTTP/1.1");
    p += param(params + p, "GATEWAY_INTERFACE", "CGI/1.1");
    record(PARAMS, params, p);
    record(PARAMS, "", 0);
    record(STDIN, "", 0);

    int one = 1;
    int l, ep = listen_epoll(atoi(argv[1]), &l);
    if (ep < 0) return 1;
    struct sockaddr_un u = {.sun_family = AF_UNIX};
    strncpy(u.sun_path, argv[2], sizeof u.sun_path - 1);
    static char buf[65536];
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            struct end *e = evs[i].data.ptr;
            if (e == NULL) {
                int c;
                while ((c = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    int f = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                    if (f < 0 || connect(f, (struct sockaddr *)&u, sizeof u) < 0) {
                        if (f >= 0) close(f);
                        close(c);
                        continue;
                    }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct end *ce = calloc(1, sizeof *ce), *fe = calloc(1, sizeof *fe);
                    ce->fd = c, ce->peer = fe;
                    fe->fd = f, fe->peer = ce, fe->is_fcgi = 1;
                    fe->in = malloc(70000), fe->out = malloc(70000);
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = ce};
                    struct epoll_event fev = {.events = EPOLLIN, .data.ptr = fe};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                    epoll_ctl(ep, EPOLL_CTL_ADD, f, &fev);
                }
                continue;
            }
            if (e->fd < 0) continue;
            if (!e->is_fcgi) {
                ssize_t k = recv(e->fd, buf, sizeof buf, MSG_DONTWAIT);
                if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
                if (k <= 0 || send_all(e->peer->fd, request, request_len) < 0) drop(e);
                continue;
            }
            ssize_t k = recv(e->fd, e->in + e->in_len, 70000 - e->in_len, MSG_DONTWAIT);
            if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (k <= 0) {
                drop(e);
                continue;
            }
            e->in_len += (size_t)k;
            if (from_fcgi(e) < 0) drop(e);
        }
    }
}
