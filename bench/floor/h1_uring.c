/*
 * The io_uring floor for the HTTP/1.1 page benchmarks, beside bench/floor/h1.c (epoll): one
 * ring, a multishot accept, a multishot receive per connection into provided buffers, and a
 * send of the canned response (the 612-byte page behind a 5-field head) for every receive,
 * parsing nothing; one io_uring_enter per loop turn submits the turn's sends and waits.
 * The ring is set up as selvedge's `io = "uring"` sets its own (single issuer, deferred
 * task work). Raw system calls, no liburing. bench/lib.sh runs it as the server
 * `floor-h1-uring`; by hand:
 *
 *   cc -O2 -o /tmp/floor-uring bench/floor/h1_uring.c
 *   SELVEDGE_ADDR=127.0.0.1:8080 /tmp/floor-uring bench/site/index.html
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ENTRIES 4096
#define BUFS 256
#define BUF_LEN 4096
#define ACCEPT (1ULL << 40)
#define RECV (2ULL << 40)
#define SEND (3ULL << 40)

static char resp[4096];
static int resp_len;

static struct {
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_array;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
    unsigned pending;
    int fd;
} R;

static struct io_uring_buf_ring *br;
static char *bufmem;
static unsigned short br_tail;

static struct io_uring_sqe *sqe(void) {
    unsigned tail = *R.sq_tail;
    if (tail - atomic_load_explicit((_Atomic unsigned *)R.sq_head, memory_order_acquire) > *R.sq_mask) {
        syscall(SYS_io_uring_enter, R.fd, R.pending, 0, 0, NULL, 0);
        R.pending = 0;
    }
    struct io_uring_sqe *s = &R.sqes[tail & *R.sq_mask];
    memset(s, 0, sizeof *s);
    R.sq_array[tail & *R.sq_mask] = tail & *R.sq_mask;
    atomic_store_explicit((_Atomic unsigned *)R.sq_tail, tail + 1, memory_order_release);
    R.pending++;
    return s;
}

static void recv_multi(int fd) {
    struct io_uring_sqe *s = sqe();
    s->opcode = IORING_OP_RECV;
    s->fd = fd;
    s->ioprio = IORING_RECV_MULTISHOT;
    s->flags = IOSQE_BUFFER_SELECT;
    s->buf_group = 0;
    s->user_data = RECV | (unsigned)fd;
}

static void buf_put(unsigned short bid) {
    struct io_uring_buf *b = &br->bufs[br_tail & (BUFS - 1)];
    b->addr = (uint64_t)(uintptr_t)(bufmem + (size_t)bid * BUF_LEN);
    b->len = BUF_LEN;
    b->bid = bid;
    br_tail++;
}

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

    int one = 1, ls = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1024)) { perror("bind"); return 1; }

    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    p.cq_entries = 4 * ENTRIES;
    R.fd = (int)syscall(SYS_io_uring_setup, ENTRIES, &p);
    if (R.fd < 0) { perror("io_uring_setup"); return 1; }
    size_t sq_sz = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_sz = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    if (cq_sz > sq_sz) sq_sz = cq_sz;
    char *sq = mmap(NULL, sq_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, R.fd, IORING_OFF_SQ_RING);
    R.sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_POPULATE, R.fd, IORING_OFF_SQES);
    if (sq == MAP_FAILED || R.sqes == MAP_FAILED) { perror("mmap"); return 1; }
    R.sq_head = (unsigned *)(sq + p.sq_off.head);
    R.sq_tail = (unsigned *)(sq + p.sq_off.tail);
    R.sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    R.sq_array = (unsigned *)(sq + p.sq_off.array);
    R.cq_head = (unsigned *)(sq + p.cq_off.head);
    R.cq_tail = (unsigned *)(sq + p.cq_off.tail);
    R.cq_mask = (unsigned *)(sq + p.cq_off.ring_mask);
    R.cqes = (struct io_uring_cqe *)(sq + p.cq_off.cqes);

    br = mmap(NULL, BUFS * sizeof(struct io_uring_buf), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    bufmem = malloc((size_t)BUFS * BUF_LEN);
    struct io_uring_buf_reg reg = {.ring_addr = (uint64_t)(uintptr_t)br, .ring_entries = BUFS, .bgid = 0};
    if (syscall(SYS_io_uring_register, R.fd, IORING_REGISTER_PBUF_RING, &reg, 1) < 0) {
        perror("IORING_REGISTER_PBUF_RING");
        return 1;
    }
    for (unsigned short i = 0; i < BUFS; i++) buf_put(i);
    atomic_store_explicit((_Atomic unsigned short *)&br->tail, br_tail, memory_order_release);

    struct io_uring_sqe *s = sqe();
    s->opcode = IORING_OP_ACCEPT;
    s->fd = ls;
    s->ioprio = IORING_ACCEPT_MULTISHOT;
    s->user_data = ACCEPT;

    for (;;) {
        syscall(SYS_io_uring_enter, R.fd, R.pending, 1, IORING_ENTER_GETEVENTS, NULL, 0);
        R.pending = 0;
        unsigned head = *R.cq_head;
        unsigned tail = atomic_load_explicit((_Atomic unsigned *)R.cq_tail, memory_order_acquire);
        int returned = 0;
        for (; head != tail; head++) {
            struct io_uring_cqe *c = &R.cqes[head & *R.cq_mask];
            uint64_t kind = c->user_data & ~((1ULL << 40) - 1);
            int fd = (int)(c->user_data & 0xffffffff);
            if (kind == ACCEPT) {
                if (c->res >= 0) {
                    setsockopt(c->res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    recv_multi(c->res);
                }
                if (!(c->flags & IORING_CQE_F_MORE)) {
                    s = sqe();
                    s->opcode = IORING_OP_ACCEPT;
                    s->fd = ls;
                    s->ioprio = IORING_ACCEPT_MULTISHOT;
                    s->user_data = ACCEPT;
                }
            } else if (kind == RECV) {
                if (c->flags & IORING_CQE_F_BUFFER) {
                    buf_put((unsigned short)(c->flags >> IORING_CQE_BUFFER_SHIFT));
                    returned = 1;
                }
                if (c->res > 0) {
                    /* wrk sends one request at a time: one receive takes it, one send answers. */
                    s = sqe();
                    s->opcode = IORING_OP_SEND;
                    s->fd = fd;
                    s->addr = (uint64_t)(uintptr_t)resp;
                    s->len = (unsigned)resp_len;
                    s->msg_flags = MSG_NOSIGNAL;
                    s->user_data = SEND | (unsigned)fd;
                    if (!(c->flags & IORING_CQE_F_MORE)) recv_multi(fd);
                } else if (c->res == -ENOBUFS) {
                    recv_multi(fd);
                } else if (!(c->flags & IORING_CQE_F_MORE)) {
                    close(fd);
                }
            }
        }
        atomic_store_explicit((_Atomic unsigned *)R.cq_head, head, memory_order_release);
        if (returned) atomic_store_explicit((_Atomic unsigned short *)&br->tail, br_tail, memory_order_release);
    }
}
