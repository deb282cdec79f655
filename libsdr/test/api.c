/*
 * api.c - every call of sdr.h and sdr_mr.h, used as a program would, on
 * two contexts joined by an in-process link. Built with -Wall -Wextra
 * -Werror -pedantic as C and as C++ by libsdr's tests; exits 0 when every
 * check holds and prints the first that does not.
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sdr.h>
#include <sdr_mr.h>

static int failures;

/* rx_event_fd is the receiving QP's event descriptor (test_events), which
   sdr_context_destroy must close with the QP. */
static int rx_event_fd = -1;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            char why[256];                                                       \
            sdr_last_error(why, sizeof why);                                     \
            fprintf(stderr, "%s:%d: %s failed (last error: %s)\n", __FILE__,     \
                    __LINE__, #cond, why);                                       \
            failures++;                                                          \
            return;                                                              \
        }                                                                        \
    } while (0)

enum { MTU = 1024, CHUNK = 4096, MSG = 10 * CHUNK + 100 };

struct end {
    struct sdr_context *ctx;
    struct sdr_qp *qp;
    struct sdr_mr *mr;
    uint32_t lkey;
    uint8_t *buf;
};

static struct sdr_qp_attr qp_attr(void)
{
    struct sdr_qp_attr a;
    memset(&a, 0, sizeof a);
    a.bitmap_chunk_size_log_bytes = 12; /* 4 KiB */
    a.max_in_flight_log_bytes = 22;     /* 4 MiB */
    a.max_log_num_msgs = 4;             /* 16 slots of 256 KiB */
    a.mtu = SDR_MTU_1024;
    a.send_enable = 1;
    a.recv_enable = 1;
    return a;
}

static int open_end(struct end *e, const char *dev)
{
    struct sdr_dev_attr da = {2, 2};
    struct sdr_qp_attr qa = qp_attr();
    e->ctx = sdr_context_create(dev, &da);
    if (!e->ctx)
        return -1;
    e->qp = sdr_qp_create(e->ctx, &qa);
    e->buf = (uint8_t *)calloc(1, 1 << 20);
    if (!e->qp || !e->buf)
        return -1;
    e->mr = sdr_mr_reg(e->ctx, e->buf, 1 << 20, SDR_ACCESS_REMOTE_WRITE);
    if (!e->mr || sdr_mr_lkey_get(e->mr, &e->lkey) != SDR_SUCCESS)
        return -1;
    return 0;
}

static int connect_ends(struct end *a, struct end *b)
{
    size_t na = 0, nb = 0;
    void *ia, *ib;
    int rc = -1;
    if (sdr_qp_info_size_get(a->qp, &na) || sdr_qp_info_size_get(b->qp, &nb) || na != nb)
        return -1;
    ia = malloc(na);
    ib = malloc(nb);
    if (ia && ib && !sdr_qp_info_get(a->qp, ia) && !sdr_qp_info_get(b->qp, ib) &&
        !sdr_qp_connect(a->qp, ib) && !sdr_qp_connect(b->qp, ia))
        rc = 0;
    free(ia);
    free(ib);
    return rc;
}

/* wait_done polls the bitmap pointer, without calling the library, until
   every chunk of a receive is complete. */
static int wait_done(const uint8_t *bitmap, size_t chunks)
{
    long spins;
    for (spins = 0; spins < 2000000000L; spins++) {
        size_t i, done = 0;
        for (i = 0; i < chunks; i++)
            done += (__atomic_load_n(&bitmap[i / 8], __ATOMIC_ACQUIRE) >> (i % 8)) & 1;
        if (done == chunks)
            return 0;
    }
    return -1;
}

/* Polls a posted send until it completes (the QP's send thread injects
   it after sdr_send_post returned); returns sdr_send_poll's last result,
   SDR_RETRY if it never completed. */
static int wait_sent(struct sdr_send_handle *sh, struct sdr_send_status *st)
{
    long spins;
    int completed = 0;
    for (spins = 0; spins < 2000000000L; spins++) {
        int rc = sdr_send_poll(sh, &completed, st);
        if (rc != SDR_RETRY)
            return rc == SDR_SUCCESS && completed == 1 ? SDR_SUCCESS : rc;
        if (completed != 0)
            return SDR_ERROR; /* RETRY must say not completed */
    }
    return SDR_RETRY;
}

static void test_send_post(struct end *tx, struct end *rx)
{
    struct sdr_recv_wr rwr;
    struct sdr_recv_handle *rh = NULL;
    struct sdr_send_wr swr;
    struct sdr_send_handle *sh = NULL;
    struct sdr_send_status st;
    uint8_t *bitmap = NULL;
    size_t nbytes = 0, i;
    uint32_t imm = 0;
    uint64_t packets = 0;
    int completed = 0;

    for (i = 0; i < MSG; i++)
        tx->buf[i] = (uint8_t)(i * 7 + 3);
    rwr.max_length = MSG;
    rwr.lkey = rx->lkey;
    rwr.address = (uint64_t)(uintptr_t)rx->buf;
    CHECK(sdr_recv_post(rx->qp, &rwr, &rh) == SDR_SUCCESS);
    CHECK(sdr_recv_bitmap_get(rh, &bitmap, &nbytes) == SDR_SUCCESS);
    CHECK(bitmap != NULL && nbytes == (11 + 7) / 8);
    CHECK(sdr_recv_imm_get(rh, &imm) == SDR_RETRY); /* nothing sent yet */

    swr.opcode = SDR_WR_WRITE_WITH_IMM;
    swr.imm_value = 0xC0FFEE01u;
    swr.length = MSG;
    swr.lkey = tx->lkey;
    swr.local_addr = (uint64_t)(uintptr_t)tx->buf;
    swr.remote_offset = 0;
    CHECK(sdr_send_post(tx->qp, &swr, &sh) == SDR_SUCCESS);
    CHECK(wait_sent(sh, &st) == SDR_SUCCESS);
    CHECK(sdr_send_poll(sh, &completed, &st) == SDR_ERROR); /* released */

    CHECK(wait_done(bitmap, 11) == 0);
    CHECK(sdr_recv_imm_get(rh, &imm) == SDR_SUCCESS && imm == 0xC0FFEE01u);
    CHECK(sdr_recv_bitmap_chunk_expand(rh, 10, &packets) == SDR_SUCCESS && packets == 1);
    CHECK(sdr_recv_bitmap_chunk_expand(rh, 0, &packets) == SDR_SUCCESS && packets == 0xF);
    CHECK(sdr_recv_bitmap_chunk_expand(rh, 11, &packets) == SDR_ERROR);
    CHECK(memcmp(rx->buf, tx->buf, MSG) == 0);
    CHECK(sdr_recv_complete(rh) == SDR_SUCCESS);
    CHECK(sdr_recv_complete(rh) == SDR_ERROR);
}

/* test_events drives a message by the QPs' event descriptors alone, as an
   event loop would: it waits in poll(2) on both, acks the one that woke
   it, then polls its handles, until the send completed and the receive
   has every chunk and the immediate. */
static void test_events(struct end *tx, struct end *rx)
{
    struct sdr_recv_wr rwr;
    struct sdr_recv_handle *rh = NULL;
    struct sdr_send_wr swr;
    struct sdr_send_handle *sh = NULL;
    uint8_t *bitmap = NULL;
    size_t nbytes = 0, i;
    uint32_t imm = 0;
    int txfd = -1, rxfd = -1, again = -1, sent = 0, arrived = 0, completed = 0;

    CHECK(sdr_qp_event_ack(tx->qp) == SDR_ERROR); /* no descriptor yet */
    CHECK(sdr_qp_event_fd_get(NULL, &txfd) == SDR_ERROR);
    CHECK(sdr_qp_event_fd_get(tx->qp, NULL) == SDR_ERROR);
    CHECK(sdr_qp_event_fd_get(tx->qp, &txfd) == SDR_SUCCESS && txfd >= 0);
    CHECK(sdr_qp_event_fd_get(tx->qp, &again) == SDR_SUCCESS && again == txfd);
    CHECK(sdr_qp_event_fd_get(rx->qp, &rxfd) == SDR_SUCCESS && rxfd >= 0 && rxfd != txfd);
    rx_event_fd = rxfd;

    for (i = 0; i < MSG; i++)
        tx->buf[i] = (uint8_t)(i * 11 + 5);
    memset(rx->buf, 0, MSG);
    rwr.max_length = MSG;
    rwr.lkey = rx->lkey;
    rwr.address = (uint64_t)(uintptr_t)rx->buf;
    CHECK(sdr_recv_post(rx->qp, &rwr, &rh) == SDR_SUCCESS);
    CHECK(sdr_recv_bitmap_get(rh, &bitmap, &nbytes) == SDR_SUCCESS && nbytes == 2);
    swr.opcode = SDR_WR_WRITE_WITH_IMM;
    swr.imm_value = 0xE7E7u;
    swr.length = MSG;
    swr.lkey = tx->lkey;
    swr.local_addr = (uint64_t)(uintptr_t)tx->buf;
    swr.remote_offset = 0;
    CHECK(sdr_send_post(tx->qp, &swr, &sh) == SDR_SUCCESS);
    while (!sent || !arrived) {
        struct pollfd fds[2];
        fds[0].fd = txfd;
        fds[0].events = POLLIN;
        fds[1].fd = rxfd;
        fds[1].events = POLLIN;
        CHECK(poll(fds, 2, 10000) > 0); /* 10 s without an event: a lost wake-up */
        if (fds[0].revents & POLLIN) {
            CHECK(sdr_qp_event_ack(tx->qp) == SDR_SUCCESS);
            if (!sent) {
                int rc = sdr_send_poll(sh, &completed, NULL);
                CHECK(rc != SDR_ERROR);
                sent = rc == SDR_SUCCESS && completed == 1;
            }
        }
        if (fds[1].revents & POLLIN) {
            size_t done = 0;
            CHECK(sdr_qp_event_ack(rx->qp) == SDR_SUCCESS);
            for (i = 0; i < 11; i++)
                done += (__atomic_load_n(&bitmap[i / 8], __ATOMIC_ACQUIRE) >> (i % 8)) & 1;
            arrived = done == 11 && sdr_recv_imm_get(rh, &imm) == SDR_SUCCESS;
        }
    }
    CHECK(imm == 0xE7E7u && memcmp(rx->buf, tx->buf, MSG) == 0);
    CHECK(sdr_recv_complete(rh) == SDR_SUCCESS);
}

/* test_streaming sends a message in pieces, out of order, the first
   chunk last and a short tail in between. */
static void test_streaming(struct end *tx, struct end *rx)
{
    struct sdr_recv_wr rwr;
    struct sdr_recv_handle *rh = NULL;
    struct sdr_send_start_wr start;
    struct sdr_send_continue_wr piece;
    struct sdr_send_handle *sh = NULL;
    uint8_t *bitmap = NULL;
    size_t nbytes = 0, i;
    uint32_t imm = 0;
    int completed = 1;
    const uint32_t len = 3 * CHUNK + 10;

    for (i = 0; i < len; i++)
        tx->buf[i] = (uint8_t)(i * 13 + 1);
    memset(rx->buf, 0, len);
    rwr.max_length = len;
    rwr.lkey = rx->lkey;
    rwr.address = (uint64_t)(uintptr_t)rx->buf;
    CHECK(sdr_recv_post(rx->qp, &rwr, &rh) == SDR_SUCCESS);
    CHECK(sdr_recv_bitmap_get(rh, &bitmap, &nbytes) == SDR_SUCCESS && nbytes == 1);

    start.opcode = SDR_WR_WRITE_WITH_IMM;
    start.imm_value = 42;
    CHECK(sdr_streaming_send_start(tx->qp, &start, &sh) == SDR_SUCCESS);
    CHECK(sdr_send_poll(sh, &completed, NULL) == SDR_RETRY && completed == 0);
    /* chunk 3: the 10-byte tail */
    piece.length = 10;
    piece.local_addr = (uint64_t)(uintptr_t)(tx->buf + 3 * CHUNK);
    piece.lkey = tx->lkey;
    piece.remote_offset = 3;
    CHECK(sdr_streaming_send_continue(sh, &piece) == SDR_SUCCESS);
    /* chunks 1 and 2 */
    piece.length = 2 * CHUNK;
    piece.local_addr = (uint64_t)(uintptr_t)(tx->buf + CHUNK);
    piece.remote_offset = 1;
    CHECK(sdr_streaming_send_continue(sh, &piece) == SDR_SUCCESS);
    /* chunk 0 last */
    piece.length = CHUNK;
    piece.local_addr = (uint64_t)(uintptr_t)tx->buf;
    piece.remote_offset = 0;
    CHECK(sdr_streaming_send_continue(sh, &piece) == SDR_SUCCESS);
    CHECK(sdr_streaming_send_end(sh) == SDR_SUCCESS);
    CHECK(sdr_streaming_send_continue(sh, &piece) == SDR_ERROR); /* ended */
    CHECK(sdr_send_poll(sh, &completed, NULL) == SDR_SUCCESS && completed == 1);

    CHECK(wait_done(bitmap, 4) == 0);
    CHECK(sdr_recv_imm_get(rh, &imm) == SDR_SUCCESS && imm == 42);
    CHECK(memcmp(rx->buf, tx->buf, len) == 0);
    CHECK(sdr_recv_complete(rh) == SDR_SUCCESS);
}

/* test_streaming_imm_without_first_packets ends a stream whose pieces
   never touched its first packets: the immediate still arrives. */
static void test_streaming_imm_without_first_packets(struct end *tx, struct end *rx)
{
    struct sdr_recv_wr rwr;
    struct sdr_recv_handle *rh = NULL;
    struct sdr_send_start_wr start;
    struct sdr_send_continue_wr piece;
    struct sdr_send_handle *sh = NULL;
    uint32_t imm = 0;
    int completed = 0;
    long spins;
    int rc = SDR_RETRY;

    rwr.max_length = 4 * CHUNK;
    rwr.lkey = rx->lkey;
    rwr.address = (uint64_t)(uintptr_t)rx->buf;
    CHECK(sdr_recv_post(rx->qp, &rwr, &rh) == SDR_SUCCESS);
    start.opcode = SDR_WR_WRITE_WITH_IMM;
    start.imm_value = 0x12345678u;
    CHECK(sdr_streaming_send_start(tx->qp, &start, &sh) == SDR_SUCCESS);
    piece.length = CHUNK;
    piece.local_addr = (uint64_t)(uintptr_t)tx->buf;
    piece.lkey = tx->lkey;
    piece.remote_offset = 3;
    CHECK(sdr_streaming_send_continue(sh, &piece) == SDR_SUCCESS);
    CHECK(sdr_streaming_send_end(sh) == SDR_SUCCESS);
    CHECK(sdr_send_poll(sh, &completed, NULL) == SDR_SUCCESS && completed == 1);
    for (spins = 0; spins < 100000000L && rc == SDR_RETRY; spins++)
        rc = sdr_recv_imm_get(rh, &imm);
    CHECK(rc == SDR_SUCCESS && imm == 0x12345678u);
    CHECK(sdr_recv_complete(rh) == SDR_SUCCESS);
}

/* test_misuse: bad arguments and stale handles fail with SDR_ERROR and a
   message, never a crash. */
static void test_misuse(struct end *tx, struct end *rx)
{
    struct sdr_send_wr swr;
    struct sdr_recv_wr rwr;
    struct sdr_send_handle *sh = NULL;
    struct sdr_recv_handle *rh = NULL;
    struct sdr_qp_attr bad = qp_attr();
    struct sdr_dev_attr da = {1, 0};
    char why[256];
    uint32_t key = 0;
    size_t n;
    int i;

    memset(&swr, 0, sizeof swr);
    swr.opcode = SDR_WR_WRITE;
    swr.length = 4096;
    swr.lkey = 999; /* no such key */
    swr.local_addr = (uint64_t)(uintptr_t)tx->buf;
    CHECK(sdr_send_post(tx->qp, &swr, &sh) == SDR_ERROR);
    n = sdr_last_error(why, sizeof why);
    CHECK(n > 0 && strstr(why, "key 999") != NULL);
    swr.lkey = tx->lkey;
    swr.local_addr = (uint64_t)(uintptr_t)(tx->buf + (1 << 20) - 100); /* runs past the region */
    CHECK(sdr_send_post(tx->qp, &swr, &sh) == SDR_ERROR);
    swr.local_addr = (uint64_t)(uintptr_t)tx->buf;
    swr.remote_offset = 1;
    CHECK(sdr_send_post(tx->qp, &swr, &sh) == SDR_ERROR);
    CHECK(sdr_qp_destroy((struct sdr_qp *)(uintptr_t)0xdead) == SDR_ERROR);
    CHECK(sdr_mr_lkey_get((struct sdr_mr *)tx->qp, &key) == SDR_ERROR); /* a QP is not an MR */
    CHECK(sdr_qp_create(tx->ctx, NULL) == NULL);
    bad.mtu = SDR_MTU_64;
    CHECK(sdr_qp_create(tx->ctx, &bad) == NULL);
    bad = qp_attr();
    bad.bitmap_chunk_size_log_bytes = 9; /* smaller than the MTU */
    CHECK(sdr_qp_create(tx->ctx, &bad) == NULL);
    CHECK(sdr_mr_reg(tx->ctx, tx->buf, (size_t)-1, SDR_ACCESS_REMOTE_WRITE) == NULL); /* no crash */
    CHECK(sdr_mr_reg(tx->ctx, (void *)(uintptr_t)-4096, 8192, SDR_ACCESS_REMOTE_WRITE) == NULL);
    {
        static char big[65536];
        n = sdr_last_error(big, (size_t)-1); /* writes the message, not size bytes */
        CHECK(n > 0 && strlen(big) == n);
    }
    CHECK(sdr_context_create("nosuch:device", &da) == NULL);
    sdr_last_error(why, sizeof why);
    CHECK(strstr(why, "unknown device") != NULL);

    /* SDR_RETRY: with 16 slots, the 17th receive waits for the first. */
    rwr.max_length = 1024;
    rwr.lkey = rx->lkey;
    rwr.address = (uint64_t)(uintptr_t)rx->buf;
    {
        struct sdr_recv_handle *hs[16];
        for (i = 0; i < 16; i++)
            CHECK(sdr_recv_post(rx->qp, &rwr, &hs[i]) == SDR_SUCCESS);
        CHECK(sdr_recv_post(rx->qp, &rwr, &rh) == SDR_RETRY);
        for (i = 0; i < 16; i++) {
            swr.opcode = SDR_WR_WRITE;
            swr.length = 1024;
            swr.remote_offset = 0;
            CHECK(sdr_send_post(tx->qp, &swr, &sh) == SDR_SUCCESS);
            CHECK(wait_sent(sh, NULL) == SDR_SUCCESS);
        }
        for (i = 0; i < 16; i++) {
            uint8_t *bm = NULL;
            CHECK(sdr_recv_bitmap_get(hs[i], &bm, &n) == SDR_SUCCESS);
            CHECK(wait_done(bm, 1) == 0);
            CHECK(sdr_recv_complete(hs[i]) == SDR_SUCCESS);
        }
    }
}

static void test_mismatch(void)
{
    struct end a, b;
    struct sdr_qp_attr qa = qp_attr();
    struct sdr_qp *other;
    size_t n = 0;
    void *info;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    CHECK(open_end(&a, "pipe:mismatch") == 0 && open_end(&b, "pipe:mismatch") == 0);
    qa.max_log_num_msgs = 5;
    other = sdr_qp_create(b.ctx, &qa);
    CHECK(other != NULL);
    CHECK(sdr_qp_info_size_get(other, &n) == SDR_SUCCESS);
    info = calloc(1, n);
    CHECK(info != NULL);
    CHECK(sdr_qp_info_get(other, info) == SDR_SUCCESS);
    CHECK(sdr_qp_connect(a.qp, info) == SDR_ERROR); /* 32 slots against 16 */
    memset(info, 0, n);
    CHECK(sdr_qp_connect(a.qp, info) == SDR_ERROR); /* not an info blob */
    free(info);
    CHECK(sdr_qp_destroy(other) == SDR_SUCCESS);
    CHECK(sdr_mr_dereg(a.mr) == SDR_SUCCESS && sdr_mr_dereg(a.mr) == SDR_ERROR);
    CHECK(sdr_context_destroy(a.ctx) == SDR_SUCCESS && sdr_context_destroy(b.ctx) == SDR_SUCCESS);
    CHECK(sdr_qp_destroy(a.qp) == SDR_ERROR); /* went with its context */
    free(a.buf);
    free(b.buf);
}

int main(void)
{
    struct end tx, rx;
    uint32_t rkey = 0;
    memset(&tx, 0, sizeof tx);
    memset(&rx, 0, sizeof rx);
    if (open_end(&tx, "pipe:api") || open_end(&rx, "pipe:api") || connect_ends(&tx, &rx)) {
        char why[256];
        sdr_last_error(why, sizeof why);
        fprintf(stderr, "setup: %s\n", why);
        return 1;
    }
    if (sdr_mr_rkey_get(tx.mr, &rkey) != SDR_SUCCESS || rkey != tx.lkey) {
        fprintf(stderr, "rkey %u, lkey %u\n", rkey, tx.lkey);
        return 1;
    }
    test_send_post(&tx, &rx);
    test_events(&tx, &rx);
    test_streaming(&tx, &rx);
    test_streaming_imm_without_first_packets(&tx, &rx);
    test_misuse(&tx, &rx);
    test_mismatch();
    if (sdr_qp_destroy(tx.qp) || sdr_mr_dereg(tx.mr) || sdr_context_destroy(tx.ctx) ||
        sdr_context_destroy(rx.ctx)) {
        fprintf(stderr, "teardown failed\n");
        return 1;
    }
    /* rx's QP went with its context: so did its event descriptor. */
    if (rx_event_fd < 0 || fcntl(rx_event_fd, F_GETFD) != -1) {
        fprintf(stderr, "event fd %d still open after sdr_context_destroy\n", rx_event_fd);
        return 1;
    }
    free(tx.buf);
    free(rx.buf);
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("api: every call checked\n");
    return 0;
}
