/*
 * sendpost.c - how long sdr_send_post takes against the send itself: one
 * 32 MiB message between two contexts joined by an in-process link
 * ("pipe:"), 4 channels, at the rate_limit given in kbit/s per channel
 * (0: none). Prints one JSON line: post_us (the call), sent_us (from the
 * post until sdr_send_poll reports the message injected) and arrived_us
 * (until every chunk of the receive's bitmap is set), measured with
 * CLOCK_MONOTONIC.
 *
 *   sendpost [rate_limit_kbps]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sdr.h>
#include <sdr_mr.h>

enum { SIZE = 32 << 20, CHUNK = 64 << 10 };

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void die(const char *what)
{
    char why[256];
    sdr_last_error(why, sizeof why);
    fprintf(stderr, "sendpost: %s: %s\n", what, why);
    exit(1);
}

struct end {
    struct sdr_context *ctx;
    struct sdr_qp *qp;
    struct sdr_mr *mr;
    uint32_t lkey;
    uint8_t *buf;
};

static void open_end(struct end *e, uint32_t rate_limit)
{
    struct sdr_dev_attr da = {4, 2};
    struct sdr_qp_attr qa;
    memset(&qa, 0, sizeof qa);
    qa.bitmap_chunk_size_log_bytes = 16; /* 64 KiB */
    qa.max_in_flight_log_bytes = 27;     /* 128 MiB: 4 slots of 32 MiB */
    qa.max_log_num_msgs = 2;
    qa.mtu = SDR_MTU_1024;
    qa.send_enable = 1;
    qa.recv_enable = 1;
    qa.rate_limit = rate_limit;
    if (!(e->ctx = sdr_context_create("pipe:sendpost", &da)) || !(e->qp = sdr_qp_create(e->ctx, &qa)))
        die("open");
    if (!(e->buf = (uint8_t *)calloc(1, SIZE)))
        die("calloc");
    if (!(e->mr = sdr_mr_reg(e->ctx, e->buf, SIZE, SDR_ACCESS_REMOTE_WRITE)) || sdr_mr_lkey_get(e->mr, &e->lkey))
        die("mr");
}

int main(int argc, char **argv)
{
    uint32_t rate = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 0;
    struct end tx, rx;
    size_t na = 0, nb = 0, nbytes = 0, i;
    void *ia, *ib;
    struct sdr_recv_wr rwr;
    struct sdr_send_wr swr;
    struct sdr_recv_handle *rh = NULL;
    struct sdr_send_handle *sh = NULL;
    uint8_t *bitmap = NULL;
    double t0, posted, sent = 0, arrived = 0;
    int completed = 0, rc;

    open_end(&tx, rate);
    open_end(&rx, rate);
    if (sdr_qp_info_size_get(tx.qp, &na) || sdr_qp_info_size_get(rx.qp, &nb))
        die("info size");
    ia = malloc(na);
    ib = malloc(nb);
    if (!ia || !ib || sdr_qp_info_get(tx.qp, ia) || sdr_qp_info_get(rx.qp, ib) ||
        sdr_qp_connect(tx.qp, ib) || sdr_qp_connect(rx.qp, ia))
        die("connect");
    memset(&rwr, 0, sizeof rwr);
    rwr.max_length = SIZE;
    rwr.lkey = rx.lkey;
    rwr.address = (uint64_t)(uintptr_t)rx.buf;
    if (sdr_recv_post(rx.qp, &rwr, &rh) || sdr_recv_bitmap_get(rh, &bitmap, &nbytes))
        die("recv post");
    for (i = 0; i < SIZE; i++)
        tx.buf[i] = (uint8_t)(i * 7);
    memset(&swr, 0, sizeof swr);
    swr.opcode = SDR_WR_WRITE_WITH_IMM;
    swr.imm_value = 7;
    swr.length = SIZE;
    swr.lkey = tx.lkey;
    swr.local_addr = (uint64_t)(uintptr_t)tx.buf;

    t0 = now_us();
    if (sdr_send_post(tx.qp, &swr, &sh))
        die("send post");
    posted = now_us();
    for (;;) {
        size_t chunks = 0;
        if (sent == 0) {
            rc = sdr_send_poll(sh, &completed, NULL);
            if (rc == SDR_SUCCESS && completed)
                sent = now_us();
            else if (rc != SDR_RETRY)
                die("send poll");
        }
        for (i = 0; i < SIZE / CHUNK; i++)
            chunks += (__atomic_load_n(&bitmap[i / 8], __ATOMIC_ACQUIRE) >> (i % 8)) & 1;
        if (chunks == SIZE / CHUNK && arrived == 0)
            arrived = now_us();
        if (sent != 0 && arrived != 0)
            break;
    }
    if (memcmp(tx.buf, rx.buf, SIZE) != 0)
        die("the data differs");
    printf("{\"bytes\":%d,\"rate_limit_kbps\":%u,\"post_us\":%.1f,\"sent_us\":%.1f,\"arrived_us\":%.1f}\n", SIZE, rate,
           posted - t0, sent - t0, arrived - t0);
    sdr_recv_complete(rh);
    free(ia);
    free(ib);
    sdr_context_destroy(tx.ctx);
    sdr_context_destroy(rx.ctx);
    return 0;
}
