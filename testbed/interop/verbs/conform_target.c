// conform_target: Linux Soft-RoCE as the target of the conformance battery
// (package testbed/conform). It sets up what the battery needs and prints
// it as one line, then waits until the host is done:
//
//   - a 1 MiB region with remote write, read and atomic access, filled
//     with a pattern, and a 4 KiB region with remote read only;
//   - one RC fence QP, NRC more RC QPs and NUC UC QPs, each connected to
//     the battery at PEER (remote QP number = its own QP number), path MTU
//     1024, expecting PSN P first (and sending from it), max_dest_rd_atomic
//     16, four receive WQEs of 8 bytes each posted (SEND, WRITE with
//     immediate);
//   - on stdout: "CONFORM mac=... ip=... psn=... rkey=... va=... len=...
//     rorkey=... rova=... rolen=... fence=... rc=... uc=..." (hex numbers,
//     decimal lengths), the line conform.ParseTarget reads.
//
// It exits once the file DONE exists (the host creates it through the
// spool), printing the receive completions its QPs produced, one
// "CQE qpn=... status=... opcode=... len=... imm=..." line each.
//
// usage: conform_target [-r NRC] [-u NUC] [-p PSN] [-g GIDX] [-d DONE] PEER
//
// Built on the host against Debian's libibverbs-dev and run in the guest.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REGION (1 << 20)
#define RO_REGION 4096
#define RECV_WQES 4
#define RECV_BUF 8
#define MAX_QPS 512

static void die(const char *what) {
	perror(what);
	exit(2);
}

// connect_qp brings qp from RESET to RTS facing the battery's QP of the
// same number at gid.
static void connect_qp(struct ibv_qp *qp, int rc, unsigned psn, int gidx, const union ibv_gid *gid,
		       unsigned char *bufs, struct ibv_mr *bufmr) {
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | (rc ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC : 0)};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("qp to INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = qp->qp_num;
	a.rq_psn = psn;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (rc) {
		a.max_dest_rd_atomic = 16;
		a.min_rnr_timer = 12;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	if (ibv_modify_qp(qp, &a, mask))
		die("qp to RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (rc) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	if (ibv_modify_qp(qp, &a, mask))
		die("qp to RTS");
	for (int i = 0; i < RECV_WQES; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)(bufs + i * RECV_BUF), .length = RECV_BUF, .lkey = bufmr->lkey};
		struct ibv_recv_wr wr = {.wr_id = qp->qp_num, .sg_list = &sge, .num_sge = 1}, *bad;
		if (ibv_post_recv(qp, &wr, &bad))
			die("post recv");
	}
}

int main(int argc, char **argv) {
	int nrc = 64, nuc = 40, gidx = 1, c;
	unsigned psn = 0xfffff0;
	const char *done = "/spool/conform-done";
	while ((c = getopt(argc, argv, "r:u:p:g:d:")) != -1) {
		switch (c) {
		case 'r': nrc = atoi(optarg); break;
		case 'u': nuc = atoi(optarg); break;
		case 'p': psn = strtoul(optarg, NULL, 16) & 0xffffff; break;
		case 'g': gidx = atoi(optarg); break;
		case 'd': done = optarg; break;
		default: return 2;
		}
	}
	struct in_addr peer4;
	if (optind != argc - 1 || inet_pton(AF_INET, argv[optind], &peer4) != 1 || 1 + nrc + nuc > MAX_QPS) {
		fprintf(stderr, "usage: conform_target [-r NRC] [-u NUC] [-p PSN] [-g GIDX] [-d DONE] PEER_IPV4\n");
		return 2;
	}
	union ibv_gid peer = {0};
	peer.raw[10] = peer.raw[11] = 0xff; // IPv4-mapped
	memcpy(&peer.raw[12], &peer4, 4);

	struct ibv_device **devs = ibv_get_device_list(NULL);
	if (!devs || !devs[0])
		die("no RDMA device");
	struct ibv_context *ctx = ibv_open_device(devs[0]);
	if (!ctx)
		die("open device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, MAX_QPS * (RECV_WQES + 1), NULL, NULL, 0);
	unsigned char *region = aligned_alloc(4096, REGION), *ro = aligned_alloc(4096, RO_REGION);
	unsigned char *bufs = calloc(MAX_QPS * RECV_WQES, RECV_BUF);
	if (!pd || !cq || !region || !ro || !bufs)
		die("verbs resources");
	for (int i = 0; i < REGION; i++)
		region[i] = (unsigned char)(i * 131 + (i >> 8) * 7 + 1);
	memset(ro, 0x5a, RO_REGION);
	struct ibv_mr *mr = ibv_reg_mr(pd, region, REGION, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	struct ibv_mr *romr = ibv_reg_mr(pd, ro, RO_REGION, IBV_ACCESS_REMOTE_READ);
	struct ibv_mr *bufmr = ibv_reg_mr(pd, bufs, MAX_QPS * RECV_WQES * RECV_BUF, IBV_ACCESS_LOCAL_WRITE);
	if (!mr || !romr || !bufmr)
		die("register memory");

	struct ibv_qp *qps[MAX_QPS];
	for (int i = 0; i < 1 + nrc + nuc; i++) {
		int rc = i <= nrc;
		struct ibv_qp_init_attr qia = {.send_cq = cq, .recv_cq = cq, .qp_type = rc ? IBV_QPT_RC : IBV_QPT_UC,
			.cap = {.max_send_wr = 1, .max_recv_wr = RECV_WQES, .max_send_sge = 1, .max_recv_sge = 1}};
		if (!(qps[i] = ibv_create_qp(pd, &qia)))
			die("create qp");
		connect_qp(qps[i], rc, psn, gidx, &peer, bufs + i * RECV_WQES * RECV_BUF, bufmr);
	}

	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, gidx, &gid))
		die("query gid");
	char mac[32] = "";
	FILE *f = fopen("/sys/class/net/eth0/address", "r");
	if (!f || !fgets(mac, sizeof mac, f))
		die("eth0 address");
	fclose(f);
	mac[strcspn(mac, "\n")] = 0;
	printf("CONFORM mac=%s ip=%u.%u.%u.%u psn=%x rkey=%x va=%llx len=%d rorkey=%x rova=%llx rolen=%d fence=%x rc=",
		mac, gid.raw[12], gid.raw[13], gid.raw[14], gid.raw[15], psn, mr->rkey, (unsigned long long)(uintptr_t)region,
		REGION, romr->rkey, (unsigned long long)(uintptr_t)ro, RO_REGION, qps[0]->qp_num);
	for (int i = 1; i <= nrc; i++)
		printf("%s%x", i > 1 ? "," : "", qps[i]->qp_num);
	printf(" uc=");
	for (int i = 0; i < nuc; i++)
		printf("%s%x", i ? "," : "", qps[1 + nrc + i]->qp_num);
	printf("\n");
	fflush(stdout);

	while (access(done, F_OK) != 0)
		usleep(100000);
	struct ibv_wc wc;
	while (ibv_poll_cq(cq, 1, &wc) == 1)
		printf("CQE qpn=%x status=%d opcode=%d len=%u imm=%x\n", wc.qp_num, wc.status, wc.opcode, wc.byte_len,
			wc.wc_flags & IBV_WC_WITH_IMM ? ntohl(wc.imm_data) : 0);
	return 0;
}
