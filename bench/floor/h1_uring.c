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
 *
 * FLOOR_URING (a comma-separated list) turns on the ring's other features, to measure what
 * each is worth before an engine uses it (bench/lib.sh: floor-h1-uring-sqpoll,
 * floor-h1-uring-fixed):
 *   sqpoll       a kernel thread polls the submission queue (IORING_SETUP_SQPOLL, idle after
 *                FLOOR_SQ_IDLE ms, 50); deferred task work is not allowed with it. The
 *                thread inherits the process's CPU mask, so a pinned floor shares its core.
 *   fixed-files  accepted sockets go straight into the ring's file table (multishot accept
 *                with IORING_FILE_INDEX_ALLOC) and every operation names them by index:
 *                no file lookup per operation, no descriptor at all. TCP_NODELAY is set on
 *                the listener, which accepted sockets inherit.
 *   fixed-buf    the response is a registered buffer, sent with IORING_RECVSEND_FIXED_BUF:
 *                no page pinning per send. The kernel takes a registered buffer only for
 *                zero-copy sends, so these go by IORING_OP_SEND_ZC, each with a second
 *                completion that says when the buffer is free again.
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
#include <sys/uio.h>
#include <unistd.h>

#define ENTRIES 4096
#define BUFS 256
#define BUF_LEN 4096
#define ACCEPT (1ULL << 40)
#define RECV (2ULL << 40)
#define SEND (3ULL << 40)
#define CLOSE (4ULL << 40)
#define FILES 8192

static char resp[4096];
static int resp_len;

static int sqpoll, fixed_files, fixed_buf;
static unsigned long zc_fallbacks;

static struct {
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_array, *sq_flags;
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
    while (tail - atomic_load_explicit((_Atomic unsigned *)R.sq_head, memory_order_acquire) > *R.sq_mask) {
        syscall(SYS_io_uring_enter, R.fd, R.pending, 0, sqpoll ? IORING_ENTER_SQ_WAIT | IORING_ENTER_SQ_WAKEUP : 0,
                NULL, 0);
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
    s->flags = IOSQE_BUFFER_SELECT | (fixed_files ? IOSQE_FIXED_FILE : 0);
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

static void accept_multi(int ls) {
    struct io_uring_sqe *s = sqe();
    s->opcode = IORING_OP_ACCEPT;
    s->fd = ls;
    s->ioprio = IORING_ACCEPT_MULTISHOT;
    if (fixed_files) s->file_index = IORING_FILE_INDEX_ALLOC;
    s->user_data = ACCEPT;
}

static void conn_close(int fd) {
    if (!fixed_files) {
        close(fd);
        return;
    }
    struct io_uring_sqe *s = sqe();
    s->opcode = IORING_OP_CLOSE;
    s->file_index = (unsigned)fd + 1;
    s->user_data = CLOSE;
}

static int has(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; p && (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

int main(int argc, char **argv) {
    const char *features = getenv("FLOOR_URING");
    sqpoll = has(features, "sqpoll");
    fixed_files = has(features, "fixed-files");
    fixed_buf = has(features, "fixed-buf");
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
    if (fixed_files) setsockopt(ls, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER;
    if (sqpoll) {
        const char *idle = getenv("FLOOR_SQ_IDLE");
        p.flags |= IORING_SETUP_SQPOLL;
        p.sq_thread_idle = idle ? (unsigned)atoi(idle) : 50;
    } else {
        p.flags |= IORING_SETUP_DEFER_TASKRUN;
    }
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
    R.sq_flags = (unsigned *)(sq + p.sq_off.flags);
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
    if (fixed_files) {
        static int table[FILES];
        memset(table, 0xff, sizeof table);
        if (syscall(SYS_io_uring_register, R.fd, IORING_REGISTER_FILES, table, FILES) < 0) {
            perror("IORING_REGISTER_FILES");
            return 1;
        }
    }
    if (fixed_buf) {
        struct iovec v = {.iov_base = resp, .iov_len = sizeof resp};
        if (syscall(SYS_io_uring_register, R.fd, IORING_REGISTER_BUFFERS, &v, 1) < 0) {
            perror("IORING_REGISTER_BUFFERS");
            return 1;
        }
    }

    struct io_uring_sqe *s;
    accept_multi(ls);

    for (;;) {
        unsigned enter = IORING_ENTER_GETEVENTS;
        if (sqpoll) {
            /* The kernel thread takes the submissions; wake it only if it went to sleep. */
            atomic_thread_fence(memory_order_seq_cst);
            if (atomic_load_explicit((_Atomic unsigned *)R.sq_flags, memory_order_relaxed) & IORING_SQ_NEED_WAKEUP)
                enter |= IORING_ENTER_SQ_WAKEUP;
        }
        syscall(SYS_io_uring_enter, R.fd, R.pending, 1, enter, NULL, 0);
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
                    if (!fixed_files) setsockopt(c->res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    recv_multi(c->res);
                }
                if (!(c->flags & IORING_CQE_F_MORE)) accept_multi(ls);
            } else if (kind == RECV) {
                if (c->flags & IORING_CQE_F_BUFFER) {
                    buf_put((unsigned short)(c->flags >> IORING_CQE_BUFFER_SHIFT));
                    returned = 1;
                }
                if (c->res > 0) {
                    /* wrk sends one request at a time: one receive takes it, one send answers. */
                    s = sqe();
                    s->opcode = fixed_buf ? IORING_OP_SEND_ZC : IORING_OP_SEND;
                    s->fd = fd;
                    s->addr = (uint64_t)(uintptr_t)resp;
                    s->len = (unsigned)resp_len;
                    s->msg_flags = MSG_NOSIGNAL;
                    if (fixed_files) s->flags = IOSQE_FIXED_FILE;
                    if (fixed_buf) {
                        s->ioprio = IORING_RECVSEND_FIXED_BUF;
                        s->buf_index = 0;
                    }
                    s->user_data = SEND | (unsigned)fd;
                    if (!(c->flags & IORING_CQE_F_MORE)) recv_multi(fd);
                } else if (c->res == -ENOBUFS) {
                    recv_multi(fd);
                } else if (!(c->flags & IORING_CQE_F_MORE)) {
                    conn_close(fd);
                }
            } else if (kind == SEND && c->res == -ENOBUFS && fixed_buf) {
                /* Zero-copy sends over the socket's option-memory limit: this one goes copied. */
                s = sqe();
                s->opcode = IORING_OP_SEND;
                s->fd = fd;
                s->addr = (uint64_t)(uintptr_t)resp;
                s->len = (unsigned)resp_len;
                s->msg_flags = MSG_NOSIGNAL;
                if (fixed_files) s->flags = IOSQE_FIXED_FILE;
                s->user_data = SEND | (unsigned)fd;
                zc_fallbacks++;
            } else if (kind == SEND && c->res < 0 && c->res != -EPIPE && c->res != -ECONNRESET) {
                fprintf(stderr, "send: %s\n", strerror(-c->res));
            }
        }
        atomic_store_explicit((_Atomic unsigned *)R.cq_head, head, memory_order_release);
        if (returned) atomic_store_explicit((_Atomic unsigned short *)&br->tail, br_tail, memory_order_release);
    }
}
