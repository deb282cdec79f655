/*
 * sdr_sr - Selective Repeat on SDR's chunk bitmap, in C over libsdr.
 *
 * A sender streams one message with sdr_streaming_send_continue; the
 * receiver polls the receive's bitmap and reports it back every
 * few milliseconds; the sender resends every chunk the latest report lacks
 * and that it has not sent within the last two report intervals (its
 * retransmission timeout) until the receiver has them all, then ends
 * the stream; the receiver then checks the immediate. Both ends run in this program, on
 * two contexts joined by a lossy in-process link by default; the reports
 * travel over a socket pair, as they would over TCP between hosts.
 *
 *   sdr_sr [-d DEV] [-s size] [-c chunk] [-m mtu] [-i report_ms] [-t timeout_s]
 *
 * DEV names both ends' device (default "pipe:sr/loss=5%,delay=1ms": 5 %
 * of packets lost each way, 1 ms one way). Its packets travel on UC
 * channel QPs (SDR_USE_UC_QP=1 unless set otherwise). Exit status 0 when
 * every byte arrived intact.
 *
 * Build: cc -O2 sdr_sr.c $(pkg-config --cflags --libs sdr) -lpthread
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <sdr.h>
#include <sdr_mr.h>

#define IMM 0x5EC0DE11u

struct end {
    struct sdr_context *ctx;
    struct sdr_qp *qp;
    struct sdr_mr *mr;
    uint32_t lkey;
    uint8_t *buf;
};

struct config {
    const char *dev;
    size_t size;
    uint32_t chunk, mtu;
    long report_ms, timeout_s;
};

struct stats {
    long chunks_sent, rounds;
};

static struct config cfg = {"pipe:sr/loss=5%,delay=1ms", 8 << 20, 4096, 1024, 5, 60};
static int control[2]; /* [0]: the receiver's end, [1]: the sender's */

static void die(const char *what)
{
    char why[512];
    sdr_last_error(why, sizeof why);
    fprintf(stderr, "sdr_sr: %s: %s\n", what, why[0] ? why : strerror(errno));
    exit(1);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int log2u(uint64_t v)
{
    int n = 0;
    while ((1ull << n) < v)
        n++;
    return n;
}

static size_t chunks(void) { return (cfg.size + cfg.chunk - 1) / cfg.chunk; }

static void open_end(struct end *e)
{
    struct sdr_dev_attr da = {2, 0};
    struct sdr_qp_attr qa;
    size_t slot = cfg.chunk;
    while (slot < cfg.size)
        slot <<= 1;
    memset(&qa, 0, sizeof qa);
    qa.bitmap_chunk_size_log_bytes = (uint32_t)log2u(cfg.chunk);
    qa.max_log_num_msgs = 1;
    qa.max_in_flight_log_bytes = (size_t)log2u(slot) + 1;
    qa.mtu = (enum sdr_mtu)(SDR_MTU_256 + log2u(cfg.mtu) - 8);
    qa.send_enable = qa.recv_enable = 1;
    e->ctx = sdr_context_create(cfg.dev, &da);
    if (!e->ctx || !(e->qp = sdr_qp_create(e->ctx, &qa)))
        die("open");
    e->buf = (uint8_t *)calloc(1, cfg.size);
    if (!e->buf)
        die("buffer");
    e->mr = sdr_mr_reg(e->ctx, e->buf, cfg.size, SDR_ACCESS_REMOTE_WRITE);
    if (!e->mr || sdr_mr_lkey_get(e->mr, &e->lkey))
        die("register");
}

static void connect_ends(struct end *a, struct end *b)
{
    size_t n = 0;
    void *ia, *ib;
    if (sdr_qp_info_size_get(a->qp, &n))
        die("info size");
    ia = malloc(n);
    ib = malloc(n);
    if (!ia || !ib || sdr_qp_info_get(a->qp, ia) || sdr_qp_info_get(b->qp, ib) ||
        sdr_qp_connect(a->qp, ib) || sdr_qp_connect(b->qp, ia))
        die("connect");
    free(ia);
    free(ib);
}

/* A report is the bitmap's bytes, then one byte: 1 when every chunk is
   complete. */
static size_t report_len(void) { return (chunks() + 7) / 8 + 1; }

static void *receiver(void *arg)
{
    struct end *rx = (struct end *)arg;
    struct sdr_recv_wr wr;
    struct sdr_recv_handle *h = NULL;
    uint8_t *bitmap = NULL, *report = (uint8_t *)malloc(report_len());
    size_t nbytes = 0, i;
    uint32_t imm = 0;
    double deadline = now() + (double)cfg.timeout_s;
    int have_imm = 0;

    wr.max_length = (uint32_t)cfg.size;
    wr.lkey = rx->lkey;
    wr.address = (uint64_t)(uintptr_t)rx->buf;
    if (!report || sdr_recv_post(rx->qp, &wr, &h) || sdr_recv_bitmap_get(h, &bitmap, &nbytes))
        die("post receive");
    if (write(control[0], "R", 1) != 1) /* posted: the sender may start */
        die("control");
    for (;;) {
        struct timespec pause = {0, cfg.report_ms * 1000000L};
        size_t done = 0;
        nanosleep(&pause, NULL);
        for (i = 0; i < nbytes; i++)
            report[i] = __atomic_load_n(&bitmap[i], __ATOMIC_ACQUIRE);
        for (i = 0; i < chunks(); i++)
            done += (report[i / 8] >> (i % 8)) & 1;
        report[nbytes] = done == chunks();
        if (write(control[0], report, report_len()) != (ssize_t)report_len())
            die("control");
        if (report[nbytes])
            break;
        if (now() > deadline) {
            fprintf(stderr, "sdr_sr: timed out with %zu of %zu chunks\n", done, chunks());
            exit(1);
        }
    }
    /* Every chunk is here, so the sender ends the stream: a message of
       fewer packets than the immediate has nibbles gets the rest of it
       from the end's carriers (which a lossy link may lose: this example
       then times out). */
    while (!have_imm) {
        struct timespec pause = {0, 100000L};
        have_imm = sdr_recv_imm_get(h, &imm) == SDR_SUCCESS;
        if (!have_imm && now() > deadline) {
            fprintf(stderr, "sdr_sr: every chunk arrived, the immediate did not\n");
            exit(1);
        }
        nanosleep(&pause, NULL);
    }
    if (imm != IMM) {
        fprintf(stderr, "sdr_sr: immediate %#x, want %#x\n", imm, IMM);
        exit(1);
    }
    if (sdr_recv_complete(h))
        die("complete");
    free(report);
    return NULL;
}

static void send_chunk(struct end *tx, struct sdr_send_handle *sh, size_t c)
{
    struct sdr_send_continue_wr piece;
    size_t off = c * cfg.chunk;
    int rc;
    piece.length = (uint32_t)(off + cfg.chunk <= cfg.size ? cfg.chunk : cfg.size - off);
    piece.local_addr = (uint64_t)(uintptr_t)(tx->buf + off);
    piece.lkey = tx->lkey;
    piece.remote_offset = c;
    while ((rc = sdr_streaming_send_continue(sh, &piece)) == SDR_RETRY)
        ;
    if (rc)
        die("continue");
}

/* read_report reads one whole report from the receiver. */
static void read_report(uint8_t *report)
{
    size_t got = 0;
    while (got < report_len()) {
        ssize_t k = read(control[1], report + got, report_len() - got);
        if (k <= 0)
            die("control");
        got += (size_t)k;
    }
}

static void sender(struct end *tx, struct stats *st)
{
    double *sent_at = (double *)calloc(chunks(), sizeof(double));
    double rto = 2e-3 * (double)cfg.report_ms;
    struct sdr_send_start_wr start = {SDR_WR_WRITE_WITH_IMM, IMM};
    struct sdr_send_handle *sh = NULL;
    uint8_t *report = (uint8_t *)malloc(report_len());
    size_t c, nbytes = report_len() - 1;
    char ready;
    int done = 0;

    if (!report || !sent_at || read(control[1], &ready, 1) != 1)
        die("control");
    if (sdr_streaming_send_start(tx->qp, &start, &sh))
        die("stream start");
    for (c = 0; c < chunks(); c++) {
        send_chunk(tx, sh, c);
        sent_at[c] = now();
    }
    st->chunks_sent = (long)chunks();
    for (;;) {
        read_report(report);
        /* Reports pile up while the link is slow: act on the newest. */
        while (!report[nbytes]) {
            struct pollfd pfd = {control[1], POLLIN, 0};
            if (poll(&pfd, 1, 0) != 1)
                break;
            read_report(report);
        }
        if (report[nbytes])
            break;
        st->rounds++;
        for (c = 0; c < chunks(); c++)
            if (!((report[c / 8] >> (c % 8)) & 1) && now() - sent_at[c] > rto) {
                send_chunk(tx, sh, c);
                sent_at[c] = now();
                st->chunks_sent++;
            }
    }
    if (sdr_streaming_send_end(sh) || sdr_send_poll(sh, &done, NULL) || !done)
        die("stream end");
    free(report);
    free(sent_at);
}

int main(int argc, char **argv)
{
    struct end tx, rx;
    struct stats st = {0, 0};
    pthread_t thread;
    double t0, secs;
    size_t i;
    int opt;
    while ((opt = getopt(argc, argv, "d:s:c:m:i:t:")) != -1) {
        switch (opt) {
        case 'd': cfg.dev = optarg; break;
        case 's': cfg.size = (size_t)strtoull(optarg, NULL, 10); break;
        case 'c': cfg.chunk = (uint32_t)atoi(optarg); break;
        case 'm': cfg.mtu = (uint32_t)atoi(optarg); break;
        case 'i': cfg.report_ms = atol(optarg); break;
        case 't': cfg.timeout_s = atol(optarg); break;
        default:
            fprintf(stderr, "usage: sdr_sr [-d dev] [-s size] [-c chunk] [-m mtu] [-i report_ms] [-t timeout_s]\n");
            return 2;
        }
    }
    if (cfg.size == 0 || cfg.size > (1u << 30)) {
        fprintf(stderr, "sdr_sr: -s between 1 byte and 1 GiB\n");
        return 2;
    }
    if (cfg.mtu < 256 || cfg.mtu > 4096 || (cfg.mtu & (cfg.mtu - 1)) || cfg.chunk < cfg.mtu ||
        cfg.chunk > 64 * cfg.mtu || (cfg.chunk & (cfg.chunk - 1))) {
        fprintf(stderr, "sdr_sr: -m a power of two from 256 to 4096, -c a power of two from -m to 64 of them\n");
        return 2;
    }
    /* Selective Repeat is the reliability here: packets travel on UC
       channel QPs, as the SDK's programs ask with --uc (its default is RC).
       An SDR_USE_UC_QP already set wins. */
    if (setenv("SDR_USE_UC_QP", "1", 0))
        die("setenv");
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, control))
        die("socketpair");
    open_end(&tx);
    open_end(&rx);
    connect_ends(&tx, &rx);
    for (i = 0; i < cfg.size; i++)
        tx.buf[i] = (uint8_t)(i * 2654435761u >> 13);
    t0 = now();
    if (pthread_create(&thread, NULL, receiver, &rx))
        die("thread");
    sender(&tx, &st);
    pthread_join(thread, NULL);
    secs = now() - t0;
    if (memcmp(tx.buf, rx.buf, cfg.size) != 0) {
        fprintf(stderr, "sdr_sr: the received bytes differ\n");
        return 1;
    }
    printf("sdr_sr: %zu bytes over %s in %.1f ms (%.1f Mbit/s): %ld chunks sent for %zu, %ld repair rounds, every byte verified\n",
           cfg.size, cfg.dev, secs * 1e3, (double)cfg.size * 8 / secs / 1e6, st.chunks_sent, chunks(), st.rounds);
    if (sdr_context_destroy(tx.ctx) || sdr_context_destroy(rx.ctx))
        die("teardown");
    free(tx.buf);
    free(rx.buf);
    return 0;
}
