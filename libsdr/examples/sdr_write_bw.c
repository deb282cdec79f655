/*
 * sdr_write_bw - SDR write bandwidth in C over libsdr, like perftest's
 * ib_write_bw and our `sdr write-bw`: the client sends messages as SDR
 * writes, the server posts receives, polls each receive's chunk bitmap,
 * checks the immediate and (by default) every byte, completes it and
 * returns a credit. QP information and credits travel over TCP.
 *
 *   server: sdr_write_bw [-d DEV] [flags]
 *   client: sdr_write_bw [-d DEV] [flags] SERVER
 *
 * Build: cc -O2 sdr_write_bw.c $(pkg-config --cflags --libs sdr)
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <sdr.h>
#include <sdr_mr.h>

struct params {
    const char *dev;      /* -d: device name (NULL: SDR_DEVICE or udp:127.0.0.1) */
    const char *server;   /* client: the server's host */
    int port;             /* -p: TCP port */
    size_t size;          /* -s: message size */
    long iters, warmup;   /* -n, -w */
    uint32_t channels;    /* -C */
    uint32_t mtu;         /* -m */
    uint32_t chunk;       /* -c */
    uint32_t flight;      /* -q: receive slots, a power of two */
    long timeout_ms;      /* -t: give up on a message after this long */
    int verify;           /* -V */
    int json;             /* -j */
};

static void die(const char *what)
{
    char why[512];
    sdr_last_error(why, sizeof why);
    fprintf(stderr, "sdr_write_bw: %s: %s\n", what, why[0] ? why : strerror(errno));
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
    return (1ull << n) == v ? n : -1;
}

static size_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end == 'K' || *end == 'k')
        v <<= 10;
    else if (*end == 'M' || *end == 'm')
        v <<= 20;
    else if (*end == 'G' || *end == 'g')
        v <<= 30;
    return (size_t)v;
}

/* A message's bytes: a fixed pattern, with the message's number stamped
   in the first 8 bytes of each chunk, so that a chunk left over from an
   earlier message in the same buffer does not pass the check. The client
   writes the stamps only; the server compares chunk by chunk. */
static uint8_t *reference; /* the fixed pattern, one message long */

static void make_reference(size_t n)
{
    size_t j;
    reference = (uint8_t *)malloc(n);
    if (!reference) {
        perror("sdr_write_bw: reference");
        exit(1);
    }
    for (j = 0; j < n; j++)
        reference[j] = (uint8_t)(j * 131 + (j >> 8));
}

static void stamp(uint8_t *buf, long i, size_t n, size_t chunk)
{
    uint64_t v = (uint64_t)i;
    size_t off;
    for (off = 0; off + sizeof v <= n; off += chunk)
        memcpy(buf + off, &v, sizeof v);
}

static int check(const uint8_t *buf, long i, size_t n, size_t chunk)
{
    uint64_t v = (uint64_t)i, got;
    size_t off;
    for (off = 0; off < n; off += chunk) {
        size_t len = n - off < chunk ? n - off : chunk;
        if (len >= sizeof v) {
            memcpy(&got, buf + off, sizeof v);
            if (got != v || memcmp(buf + off + sizeof v, reference + off + sizeof v, len - sizeof v) != 0)
                return 0;
        } else if (memcmp(buf + off, reference + off, len) != 0) {
            return 0;
        }
    }
    return 1;
}

static void xwrite(int fd, const void *p, size_t n)
{
    const uint8_t *b = (const uint8_t *)p;
    while (n > 0) {
        ssize_t k = write(fd, b, n);
        if (k <= 0)
            die("bootstrap write");
        b += k;
        n -= (size_t)k;
    }
}

static void xread(int fd, void *p, size_t n)
{
    uint8_t *b = (uint8_t *)p;
    while (n > 0) {
        ssize_t k = read(fd, b, n);
        if (k <= 0)
            die("bootstrap read (peer gone)");
        b += k;
        n -= (size_t)k;
    }
}

static int tcp_connect(const struct params *p)
{
    struct addrinfo hints, *res, *ai;
    struct timespec retry = {0, 100000000};
    char port[16];
    int fd = -1, one = 1;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    snprintf(port, sizeof port, "%d", p->port);
    if (p->server) {
        if (getaddrinfo(p->server, port, &hints, &res))
            die("resolve server");
        for (ai = res; ai; ai = ai->ai_next) {
            int tries;
            fd = socket(ai->ai_family, ai->ai_socktype, 0);
            for (tries = 0; fd >= 0 && tries < 50; tries++) {
                if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
                    goto connected;
                nanosleep(&retry, NULL); /* the server may not listen yet */
            }
            if (fd >= 0)
                close(fd);
            fd = -1;
        }
        die("connect to server");
    } else {
        struct sockaddr_in sa;
        int ln = socket(AF_INET, SOCK_STREAM, 0);
        memset(&sa, 0, sizeof sa);
        sa.sin_family = AF_INET;
        sa.sin_port = htons((uint16_t)p->port);
        setsockopt(ln, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (ln < 0 || bind(ln, (struct sockaddr *)&sa, sizeof sa) || listen(ln, 1))
            die("listen");
        fd = accept(ln, NULL, NULL);
        close(ln);
        if (fd < 0)
            die("accept");
        res = NULL;
    }
connected:
    if (res)
        freeaddrinfo(res);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* exchange_info sends this QP's information and connects to the peer's. */
static void exchange_info(int fd, struct sdr_qp *qp)
{
    size_t n = 0;
    void *mine, *theirs;
    if (sdr_qp_info_size_get(qp, &n))
        die("qp info size");
    mine = malloc(n);
    theirs = malloc(n);
    if (!mine || !theirs || sdr_qp_info_get(qp, mine))
        die("qp info");
    xwrite(fd, mine, n);
    xread(fd, theirs, n);
    if (sdr_qp_connect(qp, theirs))
        die("qp connect");
    free(mine);
    free(theirs);
}

struct result {
    uint64_t bytes, nanos, complete, verified, chunks, chunks_done;
};

static void server(const struct params *p, struct sdr_qp *qp, uint8_t *buf, uint32_t lkey, int fd,
                   struct result *r)
{
    long total = p->warmup + p->iters, i;
    long window = total < (long)p->flight ? total : (long)p->flight;
    size_t chunks = (p->size + p->chunk - 1) / p->chunk;
    struct sdr_recv_handle **h = (struct sdr_recv_handle **)calloc((size_t)window, sizeof *h);
    uint32_t credit = 0;
    double t0;
    memset(r, 0, sizeof *r);
    for (i = 0; i < window; i++) {
        struct sdr_recv_wr wr = {(uint32_t)p->size, lkey, (uint64_t)(uintptr_t)(buf + (size_t)i * p->size)};
        if (sdr_recv_post(qp, &wr, &h[i]))
            die("recv post");
    }
    credit = htonl((uint32_t)window);
    xwrite(fd, &credit, sizeof credit);
    t0 = now();
    for (i = 0; i < total; i++) {
        struct sdr_recv_handle *rh = h[i % window];
        uint8_t *bm = NULL, *data = buf + (size_t)(i % window) * p->size;
        size_t nb = 0, c, done = 0;
        uint32_t imm = 0;
        double start = now(), last = start;
        int imm_ok = 0;
        if (sdr_recv_bitmap_get(rh, &bm, &nb))
            die("bitmap");
        for (;;) { /* poll the bitmap itself: no library call per look */
            size_t d = 0;
            for (c = 0; c < chunks; c++)
                d += (__atomic_load_n(&bm[c / 8], __ATOMIC_ACQUIRE) >> (c % 8)) & 1;
            int progressed = d != done;
            if (progressed)
                done = d, last = now();
            if (!imm_ok)
                imm_ok = sdr_recv_imm_get(rh, &imm) == SDR_SUCCESS;
            if (done == chunks && imm_ok)
                break;
            if ((now() - last) * 1000 > (double)p->timeout_ms)
                break; /* no progress: a lost packet */
            if (!progressed)
                sched_yield(); /* leave the core to the NIC's threads */
        }
        if (i >= p->warmup) {
            r->chunks += chunks;
            r->chunks_done += done;
            if (done == chunks && imm_ok && imm == (uint32_t)i) {
                r->complete++;
                if (!p->verify || check(data, i, p->size, p->chunk))
                    r->verified++;
            }
        }
        if (i == p->warmup - 1)
            t0 = now(); /* measured from the end of the warm-up */
        if (sdr_recv_complete(rh))
            die("recv complete");
        if (i + window < total) {
            struct sdr_recv_wr wr = {(uint32_t)p->size, lkey, (uint64_t)(uintptr_t)data};
            if (sdr_recv_post(qp, &wr, &h[i % window]))
                die("recv post");
            credit = htonl(1);
            xwrite(fd, &credit, sizeof credit);
        }
    }
    r->bytes = (uint64_t)p->iters * p->size;
    r->nanos = (uint64_t)((now() - t0) * 1e9);
    free(h);
}

static void client(const struct params *p, struct sdr_qp *qp, uint8_t *buf, uint32_t lkey, int fd)
{
    long total = p->warmup + p->iters, i, window = total < (long)p->flight ? total : (long)p->flight;
    long credits = 0;
    for (i = 0; i < window; i++)
        memcpy(buf + (size_t)i * p->size, reference, p->size);
    for (i = 0; i < total; i++) {
        uint8_t *data = buf + (size_t)(i % window) * p->size;
        struct sdr_send_wr wr;
        struct sdr_send_handle *sh = NULL;
        int rc, done = 0;
        while (credits == 0) {
            uint32_t c;
            xread(fd, &c, sizeof c);
            credits += ntohl(c);
        }
        stamp(data, i, p->size, p->chunk);
        wr.opcode = SDR_WR_WRITE_WITH_IMM;
        wr.imm_value = (uint32_t)i;
        wr.length = (uint32_t)p->size;
        wr.lkey = lkey;
        wr.local_addr = (uint64_t)(uintptr_t)data;
        wr.remote_offset = 0;
        while ((rc = sdr_send_post(qp, &wr, &sh)) == SDR_RETRY)
            ;
        if (rc)
            die("send post");
        while ((rc = sdr_send_poll(sh, &done, NULL)) == SDR_RETRY)
            ;
        if (rc || !done)
            die("send poll");
        credits--;
    }
}

static void usage(void)
{
    fprintf(stderr,
            "usage: sdr_write_bw [-d dev] [-p port] [-s size] [-n iters] [-w warmup] [-C channels]\n"
            "                    [-m mtu] [-c chunk] [-q flight] [-t timeout_ms] [-V 0|1] [-j] [SERVER]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct params p = {NULL, NULL, 18515, 65536, 1000, 100, 4, 1024, 0, 16, 1000, 1, 0};
    struct sdr_dev_attr da;
    struct sdr_qp_attr qa;
    struct sdr_context *ctx;
    struct sdr_qp *qp;
    struct sdr_mr *mr;
    struct result r;
    uint32_t lkey;
    uint8_t *buf;
    size_t bufsize;
    int opt, fd;
    while ((opt = getopt(argc, argv, "d:p:s:n:w:C:m:c:q:t:V:j")) != -1) {
        switch (opt) {
        case 'd': p.dev = optarg; break;
        case 'p': p.port = atoi(optarg); break;
        case 's': p.size = parse_size(optarg); break;
        case 'n': p.iters = atol(optarg); break;
        case 'w': p.warmup = atol(optarg); break;
        case 'C': p.channels = (uint32_t)atoi(optarg); break;
        case 'm': p.mtu = (uint32_t)atoi(optarg); break;
        case 'c': p.chunk = (uint32_t)parse_size(optarg); break;
        case 'q': p.flight = (uint32_t)atoi(optarg); break;
        case 't': p.timeout_ms = atol(optarg); break;
        case 'V': p.verify = atoi(optarg); break;
        case 'j': p.json = 1; break;
        default: usage();
        }
    }
    if (optind < argc)
        p.server = argv[optind];
    if (p.chunk == 0)
        p.chunk = 64 * p.mtu;
    if (p.size == 0 || p.iters <= 0 || p.warmup < 0 || log2u(p.mtu) < 8 || log2u(p.chunk) < 0 ||
        log2u(p.flight) < 0)
        usage();

    da.num_channels = p.channels;
    da.log_max_qps = 0;
    ctx = sdr_context_create(p.dev, &da);
    if (!ctx)
        die("context");
    memset(&qa, 0, sizeof qa);
    qa.mtu = (enum sdr_mtu)(SDR_MTU_256 + log2u(p.mtu) - 8);
    qa.bitmap_chunk_size_log_bytes = (uint32_t)log2u(p.chunk);
    qa.max_log_num_msgs = (uint32_t)log2u(p.flight);
    qa.max_in_flight_log_bytes = (size_t)(log2u(p.flight));
    {   /* slots of at least the message size */
        size_t slot = p.chunk;
        while (slot < p.size)
            slot <<= 1;
        qa.max_in_flight_log_bytes += (size_t)log2u(slot);
    }
    qa.send_enable = p.server != NULL;
    qa.recv_enable = p.server == NULL;
    qp = sdr_qp_create(ctx, &qa);
    if (!qp)
        die("qp");
    bufsize = (size_t)p.flight * p.size;
    buf = (uint8_t *)aligned_alloc(4096, (bufsize + 4095) / 4096 * 4096);
    if (!buf)
        die("buffer");
    memset(buf, 0, bufsize);
    make_reference(p.size);
    mr = sdr_mr_reg(ctx, buf, bufsize, SDR_ACCESS_REMOTE_WRITE);
    if (!mr || sdr_mr_lkey_get(mr, &lkey))
        die("mr");
    fd = tcp_connect(&p);
    exchange_info(fd, qp);

    if (p.server) {
        uint64_t wire[6];
        int k;
        client(&p, qp, buf, lkey, fd);
        xread(fd, wire, sizeof wire);
        for (k = 0; k < 6; k++)
            ((uint64_t *)&r)[k] = wire[k];
    } else {
        server(&p, qp, buf, lkey, fd, &r);
        xwrite(fd, &r, sizeof r);
    }
    {
        double secs = (double)r.nanos * 1e-9;
        double gbps = secs > 0 ? (double)r.bytes * 8 / secs / 1e9 : 0;
        double mpps = secs > 0 ? (double)p.iters / secs / 1e6 : 0;
        if (p.json) {
            printf("{\"bytes\":%zu,\"iterations\":%ld,\"bw_avg_gbps\":%.4f,\"msg_rate_mpps\":%.6f,"
                   "\"chunks\":%llu,\"chunks_delivered\":%llu,\"complete\":%llu,\"verified\":%llu}\n",
                   p.size, p.iters, gbps, mpps, (unsigned long long)r.chunks,
                   (unsigned long long)r.chunks_done, (unsigned long long)r.complete,
                   (unsigned long long)r.verified);
        } else {
            printf("---------------------------------------------------------------------------------------\n");
            printf("                    SDR RDMA_Write BW Test (libsdr, C)\n");
            printf(" Device          : %s\n", p.dev ? p.dev : "(SDR_DEVICE or udp:127.0.0.1)");
            printf(" Transport       : %u channels\n", p.channels);
            printf(" MTU             : %u[B]   Chunk: %u[B]   Messages in flight: %u\n", p.mtu, p.chunk,
                   p.flight);
            printf("---------------------------------------------------------------------------------------\n");
            printf(" #bytes     #iterations    BW average[Gb/sec]   MsgRate[Mpps]\n");
            printf(" %-10zu %-14ld %-20.2f %-14.6f\n", p.size, p.iters, gbps, mpps);
            printf("---------------------------------------------------------------------------------------\n");
            printf(" Chunks delivered: %llu/%llu   Complete messages: %llu/%ld   Verified: %llu/%ld%s\n",
                   (unsigned long long)r.chunks_done, (unsigned long long)r.chunks,
                   (unsigned long long)r.complete, p.iters, (unsigned long long)r.verified, p.iters,
                   p.verify ? "" : " (not checked: -V 0)");
        }
    }
    close(fd);
    if (sdr_mr_dereg(mr) || sdr_qp_destroy(qp) || sdr_context_destroy(ctx))
        die("teardown");
    free(buf);
    free(reference);
    return r.verified == (uint64_t)p.iters ? 0 : 1;
}
