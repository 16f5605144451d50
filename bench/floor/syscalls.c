/*
 * What one request's system calls cost on a loopback TCP connection, by call: `read` against
 * `recvfrom` for the request, `write` against `sendto` for the response. The calls alternate
 * from one request to the next, so both see the same machine state; each is timed alone.
 *
 *   cc -O2 -o /tmp/syscalls bench/floor/syscalls.c && taskset -c 1 /tmp/syscalls 400000
 *
 * A 41-byte request (wrk's GET with a Host field) and an 800-byte response (the page behind
 * its head), on one connection with TCP_NODELAY, the client's side read back each time.
 * The engine reads with recvfrom and writes with sendto: the socket calls skip the file
 * layer's checks and notifications that read and write make on every call.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    long n = (argc > 1 ? atol(argv[1]) : 400000) & ~1L; /* even: both calls as often */
    if (n < 2) n = 2;
    int one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (void *)&a, sizeof a) || getsockname(l, (void *)&a, &al) || listen(l, 1)) {
        perror("listen");
        return 1;
    }
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, (void *)&a, sizeof a)) {
        perror("connect");
        return 1;
    }
    int s = accept(l, NULL, NULL);
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    char req[41], resp[800], buf[4096];
    memset(req, 'q', sizeof req);
    memset(resp, 'r', sizeof resp);
    double t[4] = {0};
    for (long i = 0; i < n; i++) {
        int sock_calls = i & 1;
        if (syscall(SYS_sendto, c, req, sizeof req, MSG_NOSIGNAL, NULL, 0) != sizeof req) {
            perror("client send");
            return 1;
        }
        double t0 = now_ns();
        long got = sock_calls ? syscall(SYS_recvfrom, s, buf, sizeof buf, 0, NULL, NULL)
                              : syscall(SYS_read, s, buf, sizeof buf);
        double t1 = now_ns();
        long put = sock_calls ? syscall(SYS_sendto, s, resp, sizeof resp, MSG_NOSIGNAL, NULL, 0)
                              : syscall(SYS_write, s, resp, sizeof resp);
        double t2 = now_ns();
        if (got != sizeof req || put != sizeof resp) {
            fprintf(stderr, "short: read %ld, wrote %ld\n", got, put);
            return 1;
        }
        t[sock_calls] += t1 - t0;
        t[2 + sock_calls] += t2 - t1;
        if (syscall(SYS_recvfrom, c, buf, sizeof buf, 0, NULL, NULL) != sizeof resp) {
            fprintf(stderr, "client read: short or failed\n");
            return 1;
        }
    }
    double half = n / 2.0;
    printf("request:  read %.0f ns, recvfrom %.0f ns (%+.0f)\n", t[0] / half, t[1] / half, (t[1] - t[0]) / half);
    printf("response: write %.0f ns, sendto %.0f ns (%+.0f)\n", t[2] / half, t[3] / half, (t[3] - t[2]) / half);
    return 0;
}
