// sdr_verbs: a small libibverbs program for the interop tests. One side
// (the client, "active") performs an RDMA operation ITERS times on a
// connected RC or UC QP; the other ("passive") serves it. The operations:
// write, write_imm, read, send, send_imm. Buffers carry the pattern
// byte(i*7+3); every completion, immediate (0x1000+iteration) and buffer is
// checked, and the exit status says whether all matched.
//
// Out-of-band exchange on TCP port 18517, one 78-byte message each way
// ("LID:QPN:PSN:RKEY:VADDR:GID", NUL-terminated; the passive side brings
// its QP to RTR before answering), then "done" from the active side once
// its operations completed.
//
// Built on the host against Debian's libibverbs-dev and run in the guest.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MSG_LEN 78

static int die(const char *what) {
	perror(what);
	exit(2);
}

struct dest {
	unsigned qpn, psn, rkey;
	unsigned long long vaddr;
	union ibv_gid gid;
};

static void dest_to_msg(const struct dest *d, char *msg) {
	char gid[33];
	for (int i = 0; i < 16; i++)
		sprintf(gid + 2 * i, "%02x", d->gid.raw[i]);
	snprintf(msg, MSG_LEN, "%04x:%06x:%06x:%08x:%016llx:%s", 0, d->qpn, d->psn, d->rkey, d->vaddr, gid);
}

static int msg_to_dest(const char *msg, struct dest *d) {
	char gid[33];
	unsigned lid;
	if (sscanf(msg, "%x:%x:%x:%x:%llx:%32s", &lid, &d->qpn, &d->psn, &d->rkey, &d->vaddr, gid) != 6)
		return -1;
	for (int i = 0; i < 16; i++) {
		unsigned b;
		sscanf(gid + 2 * i, "%2x", &b);
		d->gid.raw[i] = b;
	}
	return 0;
}

static int read_full(int fd, char *buf, int n) {
	for (int got = 0; got < n;) {
		int r = read(fd, buf + got, n - got);
		if (r <= 0)
			return -1;
		got += r;
	}
	return 0;
}

static int connect_qp(struct ibv_qp *qp, int uc, int mtu, int gidx, const struct dest *local, const struct dest *remote) {
	struct ibv_qp_attr a = {0};
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu == 4096 ? IBV_MTU_4096 : mtu == 2048 ? IBV_MTU_2048 : mtu == 512 ? IBV_MTU_512 : mtu == 256 ? IBV_MTU_256 : IBV_MTU_1024;
	a.dest_qp_num = remote->qpn;
	a.rq_psn = remote->psn;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = remote->gid;
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (!uc) {
		a.max_dest_rd_atomic = 1;
		a.min_rnr_timer = 12;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	if (ibv_modify_qp(qp, &a, mask))
		return -1;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = local->psn;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (!uc) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	return ibv_modify_qp(qp, &a, mask);
}

static struct ibv_wc wait_one(struct ibv_cq *cq) {
	struct ibv_wc wc;
	time_t start = time(NULL);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			die("poll cq");
		if (n == 1)
			return wc;
		if (time(NULL) - start > 20) {
			fprintf(stderr, "timeout waiting for a completion\n");
			exit(1);
		}
	}
}

static int check_pattern(const unsigned char *buf, int size) {
	for (int i = 0; i < size; i++)
		if (buf[i] != (unsigned char)(i * 7 + 3)) {
			fprintf(stderr, "byte %d is 0x%02x, want 0x%02x\n", i, buf[i], (unsigned char)(i * 7 + 3));
			return -1;
		}
	return 0;
}

// tcp_connect connects to server:port, retrying for ten seconds while the
// peer starts listening.
static int tcp_connect(const char *server, int port) {
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
	char p[8];
	snprintf(p, sizeof p, "%d", port);
	if (getaddrinfo(server, p, &hints, &res))
		die("resolve server");
	int fd = socket(res->ai_family, SOCK_STREAM, 0);
	for (int tries = 0; connect(fd, res->ai_addr, res->ai_addrlen); tries++) {
		if (tries > 100)
			die("connect");
		usleep(100000);
	}
	freeaddrinfo(res);
	return fd;
}

// tcp_accept accepts one connection on port.
static int tcp_accept(int port) {
	int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 1))
		die("listen");
	int fd = accept(ls, NULL, NULL);
	if (fd < 0)
		die("accept");
	close(ls);
	return fd;
}

// ---- SDR mode (-o sdr_send / sdr_recv) ----
// An SDR message exactly as the SDK sends it on hardware (docs/DESIGN.md §3):
// one UC WRITE-Only-with-Imm per MTU packet, packet k on channel k % C,
// VA = region + slot·SLOT + k·MTU, immediate msg_id(10) | pkt_offset(18) |
// nibble(4) where nibble = bits 4(k%8).. of the user immediate. One
// generation. The exchange is one text line each way:
// "SDR qpns=Q0,Q1,... psn=P rkey=K va=V gid=G".

#define MAX_CH 16

static int read_line(int fd, char *buf, int n) {
	for (int i = 0; i < n - 1; i++) {
		if (read(fd, buf + i, 1) != 1)
			return -1;
		if (buf[i] == '\n') {
			buf[i] = 0;
			return 0;
		}
	}
	return -1;
}

struct sdr_dest {
	unsigned qpn[MAX_CH], psn, rkey;
	int nqp;
	unsigned long long va;
	union ibv_gid gid;
};

static void sdr_line(const struct sdr_dest *d, char *line, int n) {
	int o = snprintf(line, n, "SDR qpns=");
	for (int c = 0; c < d->nqp; c++)
		o += snprintf(line + o, n - o, "%s%x", c ? "," : "", d->qpn[c]);
	char gid[33];
	for (int i = 0; i < 16; i++)
		sprintf(gid + 2 * i, "%02x", d->gid.raw[i]);
	snprintf(line + o, n - o, " psn=%x rkey=%x va=%llx gid=%s\n", d->psn, d->rkey, d->va, gid);
}

static int parse_sdr_line(const char *line, struct sdr_dest *d) {
	char qpns[512], gid[33];
	if (sscanf(line, "SDR qpns=%511s psn=%x rkey=%x va=%llx gid=%32s", qpns, &d->psn, &d->rkey, &d->va, gid) != 5)
		return -1;
	d->nqp = 0;
	for (char *t = strtok(qpns, ","); t && d->nqp < MAX_CH; t = strtok(NULL, ","))
		d->qpn[d->nqp++] = strtoul(t, NULL, 16);
	for (int i = 0; i < 16; i++) {
		unsigned b;
		sscanf(gid + 2 * i, "%2x", &b);
		d->gid.raw[i] = b;
	}
	return 0;
}

static int run_sdr(struct ibv_context *ctx, const char *server, int send, int channels, int size, int msgs, unsigned imm,
                   int gidx, int mtu, int port) {
	int slots = 4, pkts = (size + mtu - 1) / mtu;
	long slot = (long)pkts * mtu, region_len = slots * slot;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, pkts * msgs + 64, NULL, NULL, 0);
	unsigned char *region = aligned_alloc(4096, (region_len + 4095) / 4096 * 4096);
	memset(region, 0, region_len);
	if (send)
		for (long i = 0; i < size; i++)
			region[i] = (unsigned char)(i * 7 + 3);
	struct ibv_mr *mr = ibv_reg_mr(pd, region, region_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!pd || !cq || !mr)
		die("sdr resources");
	struct sdr_dest local = {.nqp = channels, .rkey = mr->rkey, .va = (uintptr_t)region}, remote;
	struct ibv_qp *qps[MAX_CH];
	srand48(getpid() * time(NULL));
	local.psn = lrand48() & 0xffffff;
	if (ibv_query_gid(ctx, 1, gidx, &local.gid))
		die("query gid");
	int per_qp = (pkts * msgs) / channels + 64;
	for (int c = 0; c < channels; c++) {
		struct ibv_qp_init_attr qia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UC,
			.cap = {.max_send_wr = 256, .max_recv_wr = per_qp, .max_send_sge = 1, .max_recv_sge = 1}};
		qps[c] = ibv_create_qp(pd, &qia);
		if (!qps[c])
			die("create qp");
		struct ibv_qp_attr ia = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
		if (ibv_modify_qp(qps[c], &ia, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			die("qp init");
		local.qpn[c] = qps[c]->qp_num;
		if (!send)
			for (int i = 0; i < per_qp; i++) {
				struct ibv_recv_wr wr = {.wr_id = c}, *bad;
				if (ibv_post_recv(qps[c], &wr, &bad))
					die("post recv");
			}
	}
	char line[1024];
	int fd;
	struct dest l1 = {.psn = local.psn}, r1;
	if (server) {
		fd = tcp_connect(server, port);
		sdr_line(&local, line, sizeof line);
		if (write(fd, line, strlen(line)) != (int)strlen(line) || read_line(fd, line, sizeof line) || parse_sdr_line(line, &remote))
			die("sdr exchange");
	} else {
		fd = tcp_accept(port);
		if (read_line(fd, line, sizeof line) || parse_sdr_line(line, &remote))
			die("sdr exchange");
	}
	if (remote.nqp != channels) {
		fprintf(stderr, "peer has %d channels, we %d\n", remote.nqp, channels);
		return 1;
	}
	for (int c = 0; c < channels; c++) {
		l1.psn = local.psn;
		r1.qpn = remote.qpn[c];
		r1.psn = remote.psn;
		r1.gid = remote.gid;
		if (connect_qp(qps[c], 1, mtu, gidx, &l1, &r1))
			die("connect qp");
	}
	if (!server) {
		sdr_line(&local, line, sizeof line);
		if (write(fd, line, strlen(line)) != (int)strlen(line))
			die("sdr exchange");
	}
	printf("SDR %s channels=%d msgs=%d size=%d pkts/msg=%d imm=0x%08x\n", send ? "send" : "recv", channels, msgs, size, pkts, imm);
	int bad = 0;
	if (send) {
		int outstanding = 0;
		for (int m = 0; m < msgs; m++) {
			int s = m % slots;
			for (int k = 0; k < pkts; k++) {
				int c = k % channels, len = k == pkts - 1 ? size - k * mtu : mtu;
				struct ibv_sge sge = {.addr = (uintptr_t)region + (long)k * mtu, .length = len, .lkey = mr->lkey};
				struct ibv_send_wr wr = {.wr_id = k, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
					.send_flags = IBV_SEND_SIGNALED}, *badwr;
				unsigned nib = (imm >> (4 * (k % 8))) & 0xf;
				wr.imm_data = htonl((unsigned)(m & 0x3ff) << 22 | (unsigned)k << 4 | nib);
				wr.wr.rdma.remote_addr = remote.va + s * slot + (long)k * mtu;
				wr.wr.rdma.rkey = remote.rkey;
				if (ibv_post_send(qps[c], &wr, &badwr))
					die("post send");
				if (++outstanding >= 64) {
					struct ibv_wc wc = wait_one(cq);
					bad |= wc.status != IBV_WC_SUCCESS;
					outstanding--;
				}
			}
		}
		while (outstanding-- > 0) {
			struct ibv_wc wc = wait_one(cq);
			bad |= wc.status != IBV_WC_SUCCESS;
		}
		if (write(fd, "done", 5) != 5)
			die("done");
	} else {
		unsigned long long *seen = calloc((size_t)msgs * pkts, sizeof *seen);
		unsigned *merged = calloc(msgs, sizeof *merged);
		for (int got = 0; got < pkts * msgs; got++) {
			struct ibv_wc wc = wait_one(cq);
			unsigned v = ntohl(wc.imm_data), id = v >> 22, off = (v >> 4) & 0x3ffff, nib = v & 0xf;
			if (wc.status != IBV_WC_SUCCESS || !(wc.wc_flags & IBV_WC_WITH_IMM) || id >= (unsigned)msgs || off >= (unsigned)pkts) {
				fprintf(stderr, "bad completion status=%d imm=0x%08x\n", wc.status, v);
				bad = 1;
				continue;
			}
			unsigned want_len = off == (unsigned)pkts - 1 ? size - off * mtu : mtu;
			if (wc.byte_len != want_len || nib != ((imm >> (4 * (off % 8))) & 0xf)) {
				fprintf(stderr, "msg %u packet %u: byte_len %u nibble %x\n", id, off, wc.byte_len, nib);
				bad = 1;
			}
			seen[(size_t)id * pkts + off]++;
			merged[id] = (merged[id] & ~(0xfu << (4 * (off % 8)))) | nib << (4 * (off % 8));
			struct ibv_recv_wr wr = {.wr_id = wc.wr_id}, *badr;
			ibv_post_recv(qps[wc.wr_id], &wr, &badr);
		}
		for (int m = 0; m < msgs; m++) {
			int have = 0;
			for (int k = 0; k < pkts; k++)
				have += seen[(size_t)m * pkts + k] == 1;
			int data_ok = !check_pattern(region + (m % slots) * slot, size);
			printf("msg %d pkts %d/%d imm=0x%08x %s data %s\n", m, have, pkts, merged[m], merged[m] == imm ? "imm_ok" : "IMM_BAD", data_ok ? "ok" : "BAD");
			bad |= have != pkts || merged[m] != imm || !data_ok;
		}
		char done[5];
		if (read_full(fd, done, 5) || strcmp(done, "done"))
			die("no done");
	}
	printf("%s\n", bad ? "MISMATCH" : "OK");
	return bad;
}

int main(int argc, char **argv) {
	const char *type = "rc", *op = "write", *server = NULL;
	int size = 4096, iters = 4, gidx = 1, mtu = 1024, port = 18517, channels = 4, c;
	unsigned imm = 0xDEADBEEF;
	while ((c = getopt(argc, argv, "t:o:s:n:g:m:p:c:i:")) != -1) {
		switch (c) {
		case 't': type = optarg; break;
		case 'o': op = optarg; break;
		case 's': size = atoi(optarg); break;
		case 'n': iters = atoi(optarg); break;
		case 'g': gidx = atoi(optarg); break;
		case 'm': mtu = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		case 'c': channels = atoi(optarg); break;
		case 'i': imm = strtoul(optarg, NULL, 0); break;
		default: fprintf(stderr, "usage: sdr_verbs [-t rc|uc] [-o write|write_imm|read|send|send_imm|sdr_send|sdr_recv] [-s size] [-n iters] [-c channels] [-i imm] [server]\n"); return 2;
		}
	}
	if (optind < argc)
		server = argv[optind];
	int uc = !strcmp(type, "uc");
	int is_read = !strcmp(op, "read"), is_send = !strncmp(op, "send", 4), with_imm = strstr(op, "imm") != NULL;
	int active = server != NULL;

	struct ibv_device **devs = ibv_get_device_list(NULL);
	if (!devs || !devs[0])
		die("no RDMA device");
	struct ibv_context *ctx = ibv_open_device(devs[0]);
	if (!ctx)
		die("open device");
	if (!strncmp(op, "sdr_", 4)) {
		if (channels < 1 || channels > MAX_CH || iters > 4) {
			fprintf(stderr, "sdr mode: 1..%d channels, at most 4 messages (one per slot)\n", MAX_CH);
			return 2;
		}
		return run_sdr(ctx, server, !strcmp(op, "sdr_send"), channels, size, iters, imm, gidx, mtu, port);
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 2 * iters + 16, NULL, NULL, 0);
	unsigned char *buf = aligned_alloc(4096, (size + 4095) / 4096 * 4096 + 4096);
	memset(buf, 0, size + 1);
	if (active != is_read)
		for (int i = 0; i < size; i++)
			buf[i] = (unsigned char)(i * 7 + 3);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, size ? size : 1, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!pd || !cq || !mr)
		die("verbs resources");
	struct ibv_qp_init_attr qia = {.send_cq = cq, .recv_cq = cq, .qp_type = uc ? IBV_QPT_UC : IBV_QPT_RC,
		.cap = {.max_send_wr = iters + 1, .max_recv_wr = iters + 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &qia);
	if (!qp)
		die("create qp");
	struct ibv_qp_attr ia = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
	if (ibv_modify_qp(qp, &ia, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("qp init");

	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = size, .lkey = mr->lkey};
	if (!active && (is_send || with_imm))
		for (int i = 0; i < iters; i++) {
			struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = size ? 1 : 0}, *bad;
			if (ibv_post_recv(qp, &wr, &bad))
				die("post recv");
		}

	struct dest local = {.qpn = qp->qp_num, .rkey = mr->rkey, .vaddr = (uintptr_t)buf}, remote;
	srand48(getpid() * time(NULL));
	local.psn = lrand48() & 0xffffff;
	if (ibv_query_gid(ctx, 1, gidx, &local.gid))
		die("query gid");
	char msg[MSG_LEN];
	int fd;
	if (active) {
		fd = tcp_connect(server, port);
		dest_to_msg(&local, msg);
		if (write(fd, msg, MSG_LEN) != MSG_LEN || read_full(fd, msg, MSG_LEN) || msg_to_dest(msg, &remote))
			die("exchange");
	} else {
		fd = tcp_accept(port);
		if (read_full(fd, msg, MSG_LEN) || msg_to_dest(msg, &remote))
			die("exchange");
		// Ready to receive before answering: the active side starts
		// sending as soon as it has our answer, and a UC packet that
		// reaches a QP not yet in RTR is silently dropped.
		if (connect_qp(qp, uc, mtu, gidx, &local, &remote))
			die("connect qp");
		dest_to_msg(&local, msg);
		if (write(fd, msg, MSG_LEN) != MSG_LEN)
			die("exchange");
	}
	if (active && connect_qp(qp, uc, mtu, gidx, &local, &remote))
		die("connect qp");
	printf("sdr_verbs %s %s size=%d iters=%d local qpn=0x%06x remote qpn=0x%06x\n", type, op, size, iters, local.qpn, remote.qpn);

	int bad = 0;
	if (active) {
		for (int i = 0; i < iters; i++) {
			struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = size ? 1 : 0, .send_flags = IBV_SEND_SIGNALED}, *badwr;
			wr.opcode = is_read ? IBV_WR_RDMA_READ : is_send ? (with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND)
			                                                 : (with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE);
			wr.imm_data = htonl(0x1000 + i + 1);
			wr.wr.rdma.remote_addr = remote.vaddr;
			wr.wr.rdma.rkey = remote.rkey;
			if (ibv_post_send(qp, &wr, &badwr))
				die("post send");
			struct ibv_wc wc = wait_one(cq);
			printf("send completion: status=%s opcode=%d\n", ibv_wc_status_str(wc.status), wc.opcode);
			bad |= wc.status != IBV_WC_SUCCESS;
			if (is_read && check_pattern(buf, size))
				bad = 1;
		}
		if (write(fd, "done", 5) != 5)
			die("done");
	} else {
		if (is_send || with_imm)
			for (int i = 0; i < iters; i++) {
				struct ibv_wc wc = wait_one(cq);
				unsigned imm = wc.wc_flags & IBV_WC_WITH_IMM ? ntohl(wc.imm_data) : 0;
				printf("recv completion: status=%s opcode=%d byte_len=%u imm=0x%08x\n", ibv_wc_status_str(wc.status), wc.opcode, wc.byte_len, imm);
				if (wc.status != IBV_WC_SUCCESS || wc.byte_len != (unsigned)size || (with_imm && imm != 0x1000u + i + 1))
					bad = 1;
			}
		char done[5];
		if (read_full(fd, done, 5) || strcmp(done, "done"))
			die("no done");
		if (!is_read && check_pattern(buf, size))
			bad = 1;
	}
	printf("%s\n", bad ? "MISMATCH" : "OK");
	return bad;
}
