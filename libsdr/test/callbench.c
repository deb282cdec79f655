/*
 * callbench.c - what a call through libsdr's C boundary costs: cheap calls
 * (no packet work behind them) timed in a loop from C, printed as JSON
 * nanoseconds per call. libsdr's Go benchmarks time the same Go code
 * without the boundary (BenchmarkGoSide); the difference is the boundary.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sdr.h>
#include <sdr_mr.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    char why[256];
    sdr_last_error(why, sizeof why);
    fprintf(stderr, "callbench: %s: %s\n", what, why);
    exit(1);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 2000000, i;
    struct sdr_dev_attr da = {1, 0};
    struct sdr_qp_attr qa;
    struct sdr_context *a, *b;
    struct sdr_qp *qa_, *qb;
    struct sdr_mr *mr;
    struct sdr_recv_wr rwr;
    struct sdr_recv_handle *rh;
    struct sdr_send_start_wr start = {SDR_WR_WRITE, 0};
    struct sdr_send_handle *sh;
    uint8_t *buf = (uint8_t *)calloc(1, 1 << 16);
    uint32_t lkey, imm;
    uint64_t bits;
    size_t sz;
    void *ia, *ib;
    int done;
    double t, imm_ns, expand_ns, poll_ns;

    memset(&qa, 0, sizeof qa);
    qa.bitmap_chunk_size_log_bytes = 12;
    qa.max_in_flight_log_bytes = 20;
    qa.max_log_num_msgs = 2;
    qa.mtu = SDR_MTU_1024;
    qa.send_enable = qa.recv_enable = 1;
    if (!(a = sdr_context_create("pipe:callbench", &da)) || !(b = sdr_context_create("pipe:callbench", &da)) ||
        !(qa_ = sdr_qp_create(a, &qa)) || !(qb = sdr_qp_create(b, &qa)))
        die("open");
    if (sdr_qp_info_size_get(qa_, &sz) || !(ia = malloc(sz)) || !(ib = malloc(sz)) ||
        sdr_qp_info_get(qa_, ia) || sdr_qp_info_get(qb, ib) || sdr_qp_connect(qa_, ib) || sdr_qp_connect(qb, ia))
        die("connect");
    if (!(mr = sdr_mr_reg(b, buf, 1 << 16, SDR_ACCESS_REMOTE_WRITE)) || sdr_mr_lkey_get(mr, &lkey))
        die("register");
    rwr.max_length = 1 << 16;
    rwr.lkey = lkey;
    rwr.address = (uint64_t)(uintptr_t)buf;
    if (sdr_recv_post(qb, &rwr, &rh) || sdr_streaming_send_start(qa_, &start, &sh))
        die("post");

    t = now();
    for (i = 0; i < n; i++)
        if (sdr_recv_imm_get(rh, &imm) != SDR_RETRY)
            die("imm get");
    imm_ns = (now() - t) * 1e9 / (double)n;
    t = now();
    for (i = 0; i < n; i++)
        if (sdr_recv_bitmap_chunk_expand(rh, 3, &bits) != SDR_SUCCESS)
            die("chunk expand");
    expand_ns = (now() - t) * 1e9 / (double)n;
    t = now();
    for (i = 0; i < n; i++)
        if (sdr_send_poll(sh, &done, NULL) != SDR_RETRY)
            die("send poll");
    poll_ns = (now() - t) * 1e9 / (double)n;
    printf("{\"calls\":%ld,\"recv_imm_get_ns\":%.1f,\"recv_bitmap_chunk_expand_ns\":%.1f,\"send_poll_ns\":%.1f}\n", n,
           imm_ns, expand_ns, poll_ns);
    if (sdr_streaming_send_end(sh) || sdr_recv_complete(rh) || sdr_context_destroy(a) || sdr_context_destroy(b))
        die("teardown");
    free(ia);
    free(ib);
    free(buf);
    return 0;
}
