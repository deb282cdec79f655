/*
 * host.h — the host side of SDR on a BlueField-3 (C, included by the
 * cgo preamble of host_dpa.go under the dpa build tag): the device
 * context, and one SDR QP's transport:
 *
 *   - per channel, a FlexIO event handler running device/handler.c's
 *     sdr_rx_handler, the channel's receive CQ in DPA memory bound to
 *     that handler's thread, and its struct sdr_rx_ctx in DPA memory;
 *   - per generation and channel, a receive QP (UC, no send queue,
 *     created through DevX because FlexIO creates RC QPs only) whose RQ
 *     ring and doorbell record are in DPA memory, where the handler
 *     re-posts WQEs, a send QP (UC, plain verbs, host CQ) on which
 *     host threads post WRITE-with-Imm, and a fence QP (UC, plain verbs)
 *     connected to that receive QP, on which Arm sends the handler its
 *     fence markers (sdr_dpa_fence);
 *   - per generation, the zero-based indirect root mkey (DevX
 *     CREATE_MKEY, one KLM per message ID) whose entry i is an indirect
 *     "entry mkey" of SlotSize bytes, reconfigured by UMR when a receive
 *     is armed (the buffer, then the null mkey up to SlotSize) or
 *     disarmed (the null mkey throughout).
 *
 * Functions return 0 or set *step to the call that failed. Nothing here
 * has run on hardware; see the README's "unverified on hardware".
 */
#ifndef SDR_DPA_HOST_H
#define SDR_DPA_HOST_H

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>
#include "flexio_api.h" /* DOCA's libflexio/flexio.h under the doca tag, else flexio_decl.h */

#include "prm.h"
#include "device/mlx5.h"
#include "device/sdr_rx.h"

/* The DPA application dpacc links into libsdr_dpa.a (make dpa), and
 * the host stub of the handler's entry point dpacc generates for it. */
extern struct flexio_app *sdr_dpa_app;
extern flexio_func_t sdr_rx_handler;
/* and of the bring-up probe, an RPC (probe.c's sdr_probe) */
extern flexio_func_t sdr_probe;

#define SDR_DPA_POST_BATCH 64 /* send work requests per ibv_post_send */
#define SDR_DPA_LOG_MSG_MAX 30
#define SDR_DPA_HOP_LIMIT 64
#define SDR_DPA_UDP_SPORT 0xc000
#define SDR_DPA_FENCE_DEPTH 16 /* a fence QP holds one marker at a time */
#define SDR_DPA_FENCE_PSN 1

struct sdr_dpa_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *null_mr;
	struct flexio_process *process;
	struct flexio_window *window;
	uint32_t pdn, port, gid_index, uar_id, dumem_id;
	/* The timestamp format the device's QPs take (sdr_dpa_ts_format). */
	uint32_t ts_format;
	uint64_t heap_base;
	union ibv_gid gid;
	uint32_t ifindex;
	/* The UMR QP: an RC QP connected to itself on which entry mkeys
	 * are reconfigured; the Go side serializes its use. */
	struct ibv_cq *umr_cq;
	struct ibv_qp *umr_qp;
	struct ibv_qp_ex *umr_qpx;
	struct mlx5dv_qp_ex *umr_mqpx;
	/* The root of the transmit scheduling tree the QPs' rate limits
	 * hang from, made by the first rate limit (sdr_dpa_qp_rate); the
	 * Go side serializes its use with the UMR QP's. */
	struct mlx5dv_sched_node *sched_root;
};

/* One packet for sdr_dpa_post: payload [laddr, +len) to raddr. */
struct sdr_dpa_pkt {
	uint64_t raddr, laddr;
	uint32_t len, imm;
	uint32_t signaled, pad;
	uint64_t wr_id;
};

struct sdr_dpa_chan {
	struct flexio_event_handler *eh;
	struct flexio_cq *cq;
	flexio_uintptr_t cq_ring, cq_dbr, ctx;
	flexio_uintptr_t rq_ring[SDR_RX_MAX_GENERATIONS], rq_dbr[SDR_RX_MAX_GENERATIONS];
	struct mlx5dv_devx_obj *rqp[SDR_RX_MAX_GENERATIONS];
	uint32_t rqpn[SDR_RX_MAX_GENERATIONS];
	struct ibv_qp *sqp[SDR_RX_MAX_GENERATIONS];
	struct ibv_qp *fqp[SDR_RX_MAX_GENERATIONS]; /* fence markers to rqp[g] */
	int running;
};

struct sdr_dpa_qp {
	struct sdr_dpa_dev *d;
	uint32_t gens, chans, entries, log_rq, log_cq;
	uint64_t slot_size;
	struct ibv_cq *send_cq;
	struct ibv_cq *fence_cq; /* the fence QPs' send completions */
	struct ibv_mr *host_mr; /* the host words the handlers reach through the window */
	flexio_uintptr_t dpa_slots;  /* the handlers' slot records (sdr_rx.h), DPA heap */
	flexio_uintptr_t dpa_epochs; /* the slots' epochs (sdr_rx.h), DPA heap, the host's */
	struct sdr_dpa_chan *ch;
	struct mlx5dv_devx_obj *root[SDR_RX_MAX_GENERATIONS];
	uint32_t root_key[SDR_RX_MAX_GENERATIONS];
	struct mlx5dv_mkey **entry; /* [gen * entries + id] */
	/* The scheduling leaf that paces every send QP of the SDR QP
	 * together; NULL while the QP is unpaced. */
	struct mlx5dv_sched_leaf *rate_leaf;
	int rate_attached; /* every send QP has rate_leaf as its requestor element */
};

/* --- the device ------------------------------------------------------ */

static int sdr_dpa_umr_connect(struct sdr_dpa_dev *d)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = d->port,
				.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
	if (ibv_modify_qp(d->umr_qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = d->umr_qp->qp_num;
	a.rq_psn = 1;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = d->gid;
	a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
	a.ah_attr.grh.hop_limit = SDR_DPA_HOP_LIMIT;
	a.ah_attr.port_num = (uint8_t)d->port;
	if (ibv_modify_qp(d->umr_qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(d->umr_qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
						IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

static void sdr_dpa_close(struct sdr_dpa_dev *d)
{
	if (d->sched_root)
		mlx5dv_sched_node_destroy(d->sched_root);
	if (d->umr_qp)
		ibv_destroy_qp(d->umr_qp);
	if (d->umr_cq)
		ibv_destroy_cq(d->umr_cq);
	if (d->window)
		flexio_window_destroy(d->window);
	if (d->process)
		flexio_process_destroy(d->process);
	if (d->null_mr)
		ibv_dereg_mr(d->null_mr);
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	free(d);
}

/* sdr_dpa_open opens the named device and creates what every QP
 * shares; NULL and the failed step in *step on failure. */
static int sdr_dpa_ts_format(struct sdr_dpa_dev *d);

static struct sdr_dpa_dev *sdr_dpa_open(const char *name, uint32_t port, uint32_t gid_index, const char **step)
{
	struct sdr_dpa_dev *d = calloc(1, sizeof(*d));
	if (!d) {
		*step = "memory";
		return NULL;
	}
	d->port = port, d->gid_index = gid_index;
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n; i++)
		if (!d->ctx && !strcmp(ibv_get_device_name(list[i]), name))
			d->ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	struct ibv_gid_entry ge;
	struct mlx5dv_pd dvpd;
	struct mlx5dv_obj obj = {.pd = {.out = &dvpd}};
	struct flexio_process_attr pattr = {0};
	struct flexio_heap_mem_info heap;
	if (!d->ctx) {
		*step = "ibv_open_device (no such device, or no permission)";
		goto fail;
	}
	if (ibv_query_gid_ex(d->ctx, port, gid_index, &ge, 0)) {
		*step = "ibv_query_gid_ex (port or GID index)";
		goto fail;
	}
	d->gid = ge.gid, d->ifindex = ge.ndev_ifindex;
	if (sdr_dpa_ts_format(d)) {
		*step = "QUERY_HCA_CAP (RoCE capabilities: the QPs' timestamp format)";
		goto fail;
	}
	if (!(d->pd = ibv_alloc_pd(d->ctx))) {
		*step = "ibv_alloc_pd";
		goto fail;
	}
	obj.pd.in = d->pd;
	if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_PD)) {
		*step = "mlx5dv_init_obj (PD number)";
		goto fail;
	}
	d->pdn = dvpd.pdn;
	if (!(d->null_mr = ibv_alloc_null_mr(d->pd))) {
		*step = "ibv_alloc_null_mr";
		goto fail;
	}
	pattr.pd = d->pd;
	if (flexio_process_create(d->ctx, sdr_dpa_app, &pattr, &d->process) != FLEXIO_STATUS_SUCCESS) {
		*step = "flexio_process_create (DPA image, EU partition, firmware)";
		goto fail;
	}
	if (flexio_window_create(d->process, d->pd, &d->window) != FLEXIO_STATUS_SUCCESS) {
		*step = "flexio_window_create";
		goto fail;
	}
	if (flexio_process_mem_info_get(d->process, &heap) != FLEXIO_STATUS_SUCCESS) {
		*step = "flexio_process_mem_info_get";
		goto fail;
	}
	d->heap_base = heap.base_addr;
	d->dumem_id = flexio_process_get_dumem_id(d->process);
	d->uar_id = flexio_uar_get_id(flexio_process_get_uar(d->process));
	if (!(d->umr_cq = ibv_create_cq(d->ctx, 64, NULL, NULL, 0))) {
		*step = "ibv_create_cq (UMR)";
		goto fail;
	}
	struct ibv_qp_init_attr_ex qa = {
		.qp_type = IBV_QPT_RC,
		.send_cq = d->umr_cq,
		.recv_cq = d->umr_cq,
		.cap = {.max_send_wr = 64, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 64},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = d->pd,
		.send_ops_flags = IBV_QP_EX_WITH_LOCAL_INV,
	};
	struct mlx5dv_qp_init_attr mqa = {.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS,
					  .send_ops_flags = MLX5DV_QP_EX_WITH_MR_LIST};
	if (!(d->umr_qp = mlx5dv_create_qp(d->ctx, &qa, &mqa))) {
		*step = "mlx5dv_create_qp (UMR QP with MR lists)";
		goto fail;
	}
	d->umr_qpx = ibv_qp_to_qp_ex(d->umr_qp);
	d->umr_mqpx = mlx5dv_qp_ex_from_ibv_qp_ex(d->umr_qpx);
	if (sdr_dpa_umr_connect(d)) {
		*step = "ibv_modify_qp (UMR QP to RTS, connected to itself)";
		goto fail;
	}
	return d;
fail:
	sdr_dpa_close(d);
	return NULL;
}

/* sdr_dpa_entry_set points entry mkey m at [addr, +len) of lkey, then
 * the null mkey up to size (len 0: the null mkey throughout), with a UMR
 * that waits for its completion. A configured mkey is invalidated first.
 * The caller serializes calls on one device. */
static int sdr_dpa_entry_set(struct sdr_dpa_dev *d, struct mlx5dv_mkey *m, int configured, uint64_t addr,
			     uint32_t len, uint32_t lkey, uint64_t size)
{
	struct ibv_sge sge[2] = {{.addr = addr, .length = len, .lkey = lkey},
				 {.addr = 0, .length = (uint32_t)(size - len), .lkey = d->null_mr->lkey}};
	int first = len == 0, n = len == size ? 1 : 2 - first;
	ibv_wr_start(d->umr_qpx);
	if (configured) {
		d->umr_qpx->wr_id = 0;
		d->umr_qpx->wr_flags = 0;
		ibv_wr_local_inv(d->umr_qpx, m->rkey);
	}
	d->umr_qpx->wr_id = 1;
	d->umr_qpx->wr_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
	mlx5dv_wr_mr_list(d->umr_mqpx, m, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, (uint16_t)n, &sge[first]);
	if (ibv_wr_complete(d->umr_qpx))
		return -1;
	/* A UMR completes in microseconds; give up after a second. A failed
	 * UMR leaves the UMR QP in error: the device must be reopened. */
	struct ibv_wc wc;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		int got = ibv_poll_cq(d->umr_cq, 1, &wc);
		if (got < 0)
			return -1;
		if (got == 1)
			return wc.status == IBV_WC_SUCCESS && wc.wr_id == 1 ? 0 : -1;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > 1)
			return -1;
	}
}

/* --- DevX commands ------------------------------------------------------ */

/* sdr_dpa_devx_ok checks a command's return and its mailbox status. */
static int sdr_dpa_devx_ok(int rc, const void *out) { return rc == 0 && sdr_prm_get(out, SDR_PRM_OUT_STATUS) == 0; }

/* sdr_dpa_ts_format sets the timestamp format of d's QPs as the kernel's
 * mlx5_get_qp_default_ts picks it for a RoCE device: the default where
 * the RoCE capability qp_ts_format offers a real-time clock, else free
 * running. */
static int sdr_dpa_ts_format(struct sdr_dpa_dev *d)
{
	uint8_t in[SDR_PRM_QUERY_HCA_CAP_IN] = {0}, out[SDR_PRM_QUERY_HCA_CAP_OUT] = {0};
	SDR_SET(in, 0, SDR_PRM_OPCODE, SDR_PRM_QUERY_HCA_CAP);
	SDR_SET(in, 0, SDR_PRM_OP_MOD, SDR_PRM_CAP_ROCE_CUR);
	if (!sdr_dpa_devx_ok(mlx5dv_devx_general_cmd(d->ctx, in, sizeof(in), out, sizeof(out)), out))
		return -1;
	uint32_t cap = SDR_GET(out, SDR_PRM_CAPABILITY, SDR_ROCE_CAP_QP_TS_FORMAT);
	d->ts_format = cap ? SDR_QPC_TS_FORMAT_DEFAULT : SDR_QPC_TS_FORMAT_FREE_RUNNING;
	return 0;
}

/* sdr_dpa_create_rqp creates a UC receive QP without a send queue whose
 * RQ ring (rq, 2^log_rq 16-byte WQEs) and doorbell record (dbr) are DPA
 * memory, completing to CQ cqn, and moves it to INIT. */
static struct mlx5dv_devx_obj *sdr_dpa_create_rqp(struct sdr_dpa_dev *d, flexio_uintptr_t rq, flexio_uintptr_t dbr,
						   uint32_t log_rq, uint32_t cqn, uint32_t *qpn)
{
	uint8_t in[SDR_PRM_CREATE_QP_IN] = {0}, out[SDR_PRM_CREATE_QP_OUT] = {0};
	SDR_SET(in, 0, SDR_PRM_OPCODE, SDR_PRM_CREATE_QP);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_ST, SDR_QPC_ST_UC);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_PM_STATE, SDR_QPC_PM_STATE_MIGRATED);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_PD, d->pdn);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_UAR_PAGE, d->uar_id);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_LOG_RQ_SIZE, log_rq);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_LOG_RQ_STRIDE, 0); /* 16-byte WQEs: 2^(0+4) */
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_NO_SQ, 1);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_TS_FORMAT, d->ts_format);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_CQN_SND, cqn);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_CQN_RCV, cqn);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_RQ_TYPE, 0); /* regular */
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_DBR_UMEM_VALID, 1);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_DBR_UMEM_ID, d->dumem_id);
	sdr_prm_set64(in, SDR_PRM_QPC + SDR_QPC_DBR_ADDR, dbr - d->heap_base);
	SDR_SET(in, 0, SDR_PRM_WQ_UMEM_ID, d->dumem_id);
	SDR_SET(in, 0, SDR_PRM_WQ_UMEM_VALID, 1);
	sdr_prm_set64(in, SDR_PRM_WQ_UMEM_OFFSET, rq - d->heap_base);
	struct mlx5dv_devx_obj *o = mlx5dv_devx_obj_create(d->ctx, in, sizeof(in), out, sizeof(out));
	if (!o)
		return NULL;
	if (sdr_prm_get(out, SDR_PRM_OUT_STATUS) != 0) {
		mlx5dv_devx_obj_destroy(o);
		return NULL;
	}
	*qpn = sdr_prm_get(out, SDR_PRM_QPN);
	uint8_t min[SDR_PRM_MODIFY_QP_IN] = {0}, mout[SDR_PRM_MODIFY_QP_OUT] = {0};
	SDR_SET(min, 0, SDR_PRM_OPCODE, SDR_PRM_RST2INIT_QP);
	SDR_SET(min, 0, SDR_PRM_QPN, *qpn);
	SDR_SET(min, SDR_PRM_QPC, SDR_QPC_PM_STATE, SDR_QPC_PM_STATE_MIGRATED);
	SDR_SET(min, SDR_PRM_QPC, SDR_QPC_VHCA_PORT_NUM, d->port);
	SDR_SET(min, SDR_PRM_QPC, SDR_QPC_RWE, 1);
	if (!sdr_dpa_devx_ok(mlx5dv_devx_obj_modify(o, min, sizeof(min), mout, sizeof(mout)), mout)) {
		mlx5dv_devx_obj_destroy(o);
		return NULL;
	}
	return o;
}

/* sdr_dpa_rqp_rtr moves a receive QP to RTR toward the peer. */
static int sdr_dpa_rqp_rtr(struct sdr_dpa_dev *d, struct mlx5dv_devx_obj *o, uint32_t qpn, uint32_t remote_qpn,
			   uint32_t psn, uint32_t mtu_enum, const uint8_t *rgid, const uint8_t *rmac)
{
	uint8_t in[SDR_PRM_MODIFY_QP_IN] = {0}, out[SDR_PRM_MODIFY_QP_OUT] = {0};
	SDR_SET(in, 0, SDR_PRM_OPCODE, SDR_PRM_INIT2RTR_QP);
	SDR_SET(in, 0, SDR_PRM_QPN, qpn);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_MTU, mtu_enum);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_LOG_MSG_MAX, SDR_DPA_LOG_MSG_MAX);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_REMOTE_QPN, remote_qpn);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_NEXT_RCV_PSN, psn);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_SRC_ADDR_INDEX, d->gid_index);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_HOP_LIMIT, SDR_DPA_HOP_LIMIT);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_UDP_SPORT, SDR_DPA_UDP_SPORT);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_VHCA_PORT_NUM, d->port);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_RMAC_47_32, (uint32_t)rmac[0] << 8 | rmac[1]);
	SDR_SET(in, SDR_PRM_QPC, SDR_QPC_RMAC_31_0,
		(uint32_t)rmac[2] << 24 | (uint32_t)rmac[3] << 16 | (uint32_t)rmac[4] << 8 | rmac[5]);
	memcpy(in + (SDR_PRM_QPC + SDR_QPC_RGID) / 8, rgid, 16);
	return sdr_dpa_devx_ok(mlx5dv_devx_obj_modify(o, in, sizeof(in), out, sizeof(out)), out) ? 0 : -1;
}

/* sdr_dpa_rqp_err moves a receive QP to the error state (before its
 * destruction, so that the NIC stops writing its CQ). */
static void sdr_dpa_rqp_err(struct mlx5dv_devx_obj *o, uint32_t qpn)
{
	uint8_t in[SDR_PRM_2ERR_QP_IN] = {0}, out[SDR_PRM_MODIFY_QP_OUT] = {0};
	SDR_SET(in, 0, SDR_PRM_OPCODE, SDR_PRM_2ERR_QP);
	SDR_SET(in, 0, SDR_PRM_QPN, qpn);
	mlx5dv_devx_obj_modify(o, in, sizeof(in), out, sizeof(out));
}

/* sdr_dpa_create_root creates the zero-based indirect root mkey of
 * entries KLMs, KLM i covering [i·size, +size) through entry mkey i. */
static struct mlx5dv_devx_obj *sdr_dpa_create_root(struct sdr_dpa_dev *d, struct mlx5dv_mkey **entry, uint32_t entries,
						    uint64_t size, uint32_t *rkey)
{
	size_t inlen = SDR_PRM_CREATE_MKEY_IN + (size_t)entries * SDR_PRM_KLM_SIZE;
	uint8_t *in = calloc(1, inlen), out[SDR_PRM_CREATE_MKEY_OUT] = {0};
	if (!in)
		return NULL;
	const uint32_t variant = 0x5d; /* the key's low byte */
	SDR_SET(in, 0, SDR_PRM_OPCODE, SDR_PRM_CREATE_MKEY);
	SDR_SET(in, 0, SDR_PRM_TRANSLATIONS_ACTUAL, entries);
	SDR_SET(in, SDR_PRM_MKC, SDR_MKC_ACCESS_MODE_1_0, SDR_MKC_ACCESS_MODE_KLMS);
	SDR_SET(in, SDR_PRM_MKC, SDR_MKC_ACCESS_MODE_4_2, 0);
	SDR_SET(in, SDR_PRM_MKC, SDR_MKC_RW, 1);
	SDR_SET(in, SDR_PRM_MKC, SDR_MKC_LW, 1);
	SDR_SET(in, SDR_PRM_MKC, SDR_MKC_LR, 1);
	SDR_SET(in, SDR_PRM_MKC, SDR_MKC_QPN, 0xffffff);
	SDR_SET(in, SDR_PRM_MKC, SDR_MKC_MKEY_7_0, variant);
	SDR_SET(in, SDR_PRM_MKC, SDR_MKC_PD, d->pdn);
	sdr_prm_set64(in, SDR_PRM_MKC + SDR_MKC_START_ADDR, 0);
	sdr_prm_set64(in, SDR_PRM_MKC + SDR_MKC_LEN, (uint64_t)entries * size);
	SDR_SET(in, SDR_PRM_MKC, SDR_MKC_TRANSLATIONS, entries);
	for (uint32_t i = 0; i < entries; i++) {
		uint8_t *klm = in + SDR_PRM_KLMS / 8 + (size_t)i * SDR_PRM_KLM_SIZE;
		sdr_put_be32(klm, (uint32_t)size);
		sdr_put_be32(klm + 4, entry[i]->lkey);
		sdr_put_be64(klm + 8, 0);
	}
	struct mlx5dv_devx_obj *o = mlx5dv_devx_obj_create(d->ctx, in, inlen, out, sizeof(out));
	free(in);
	if (o && sdr_prm_get(out, SDR_PRM_OUT_STATUS) != 0) {
		mlx5dv_devx_obj_destroy(o);
		return NULL;
	}
	if (o)
		*rkey = sdr_prm_get(out, SDR_PRM_MKEY_INDEX) << 8 | variant;
	return o;
}

/* --- DPA memory ---------------------------------------------------------- */

/* sdr_dpa_dev_copy allocates DPA heap memory holding a copy of src; on
 * failure nothing is left allocated and *daddr is 0. */
static int sdr_dpa_dev_copy(struct sdr_dpa_dev *d, void *src, size_t len, flexio_uintptr_t *daddr)
{
	if (flexio_buf_dev_alloc(d->process, len, daddr) != FLEXIO_STATUS_SUCCESS) {
		*daddr = 0;
		return -1;
	}
	if (flexio_host2dev_memcpy(d->process, src, len, *daddr) != FLEXIO_STATUS_SUCCESS) {
		flexio_buf_dev_free(d->process, *daddr);
		*daddr = 0;
		return -1;
	}
	return 0;
}

/* --- the bring-up probe ---------------------------------------------------- */

/* sdr_dpa_probe runs probe.c's sdr_probe on the DPA through
 * flexio_process_call: n operations op on the 64-byte host line at line,
 * which the caller registered as mr, reached through the device's
 * window. The cycles the probe returned (SDR_PROBE_FAILED when it failed
 * on the device) in *cycles; 0, or -1 and the failed step in *step. */
static int sdr_dpa_probe(struct sdr_dpa_dev *d, void *line, struct ibv_mr *mr, uint32_t op, uint32_t n, uint64_t *cycles,
			 const char **step)
{
	struct sdr_probe_args a = {.haddr = (uint64_t)(uintptr_t)line, .window_id = flexio_window_get_id(d->window),
				   .mkey = mr->lkey, .op = op, .n = n};
	flexio_uintptr_t daddr;
	if (sdr_dpa_dev_copy(d, &a, sizeof(a), &daddr) != 0) {
		*step = "flexio_buf_dev_alloc/flexio_host2dev_memcpy (the probe's arguments)";
		return -1;
	}
	int rc = 0;
	if (flexio_process_call(d->process, &sdr_probe, cycles, daddr) != FLEXIO_STATUS_SUCCESS) {
		*step = "flexio_process_call (sdr_probe)";
		rc = -1;
	}
	flexio_buf_dev_free(d->process, daddr);
	return rc;
}

/* --- one SDR QP ----------------------------------------------------------- */

/* sdr_dpa_qp_destroy releases everything in the reverse order of
 * creation: send and fence QPs and their CQs; receive QPs (to error, then destroyed); the
 * channels' CQs and event handlers; DPA memory; root mkeys, then the
 * entry mkeys they reference; the host memory registration. */
static void sdr_dpa_qp_destroy(struct sdr_dpa_qp *q)
{
	struct sdr_dpa_dev *d = q->d;
	for (uint32_t c = 0; q->ch && c < q->chans; c++) {
		struct sdr_dpa_chan *ch = &q->ch[c];
		for (uint32_t g = 0; g < q->gens; g++) {
			if (ch->sqp[g])
				ibv_destroy_qp(ch->sqp[g]);
			if (ch->fqp[g])
				ibv_destroy_qp(ch->fqp[g]);
			if (ch->rqp[g]) {
				sdr_dpa_rqp_err(ch->rqp[g], ch->rqpn[g]);
				mlx5dv_devx_obj_destroy(ch->rqp[g]);
			}
		}
	}
	if (q->rate_leaf) /* after the send QPs it paced */
		mlx5dv_sched_leaf_destroy(q->rate_leaf);
	if (q->send_cq)
		ibv_destroy_cq(q->send_cq);
	if (q->fence_cq)
		ibv_destroy_cq(q->fence_cq);
	for (uint32_t c = 0; q->ch && c < q->chans; c++) {
		struct sdr_dpa_chan *ch = &q->ch[c];
		if (ch->cq)
			flexio_cq_destroy(ch->cq);
		if (ch->eh)
			flexio_event_handler_destroy(ch->eh);
		for (uint32_t g = 0; g < q->gens; g++) {
			flexio_buf_dev_free(d->process, ch->rq_ring[g]);
			flexio_buf_dev_free(d->process, ch->rq_dbr[g]);
		}
		flexio_buf_dev_free(d->process, ch->cq_ring);
		flexio_buf_dev_free(d->process, ch->cq_dbr);
		flexio_buf_dev_free(d->process, ch->ctx);
	}
	free(q->ch);
	if (q->dpa_slots)
		flexio_buf_dev_free(d->process, q->dpa_slots);
	if (q->dpa_epochs)
		flexio_buf_dev_free(d->process, q->dpa_epochs);
	for (uint32_t g = 0; g < q->gens; g++)
		if (q->root[g])
			mlx5dv_devx_obj_destroy(q->root[g]);
	for (uint64_t i = 0; q->entry && i < (uint64_t)q->gens * q->entries; i++)
		if (q->entry[i])
			mlx5dv_destroy_mkey(q->entry[i]);
	free(q->entry);
	if (q->host_mr)
		ibv_dereg_mr(q->host_mr);
	free(q);
}

/* sdr_dpa_qp_rate paces all of q's send QPs together at mbps Mbit/s on
 * average (0: unpaced) through the NIC's transmit scheduler: a leaf
 * under the device's root node, made the send QPs' requestor element the
 * first time, then modified in place; called once the send QPs are
 * connected (RTS). The fence QPs stay unpaced (one marker per arm). */
static int sdr_dpa_qp_rate(struct sdr_dpa_qp *q, uint32_t mbps, const char **step)
{
	struct sdr_dpa_dev *d = q->d;
	struct mlx5dv_sched_attr a = {0};
	if (!d->sched_root) {
		d->sched_root = mlx5dv_sched_node_create(d->ctx, &a);
		if (!d->sched_root) {
			*step = "mlx5dv_sched_node_create (the transmit scheduler's root)";
			return -1;
		}
	}
	a.parent = d->sched_root;
	a.flags = MLX5DV_SCHED_ELEM_ATTR_FLAGS_MAX_AVG_BW;
	a.max_avg_bw = mbps;
	if (q->rate_leaf) {
		if (mlx5dv_sched_leaf_modify(q->rate_leaf, &a)) {
			*step = "mlx5dv_sched_leaf_modify";
			return -1;
		}
	} else {
		q->rate_leaf = mlx5dv_sched_leaf_create(d->ctx, &a);
		if (!q->rate_leaf) {
			*step = "mlx5dv_sched_leaf_create";
			return -1;
		}
	}
	/* Attaching again after a partial failure is harmless: a QP's
	 * element is set, not added. */
	for (uint32_t c = 0; !q->rate_attached && c < q->chans; c++)
		for (uint32_t g = 0; g < q->gens; g++)
			if (mlx5dv_modify_qp_sched_elem(q->ch[c].sqp[g], q->rate_leaf, NULL)) {
				*step = "mlx5dv_modify_qp_sched_elem (a send QP onto its rate leaf)";
				return -1;
			}
	q->rate_attached = 1;
	return 0;
}

/* sdr_dpa_qp_create builds one SDR QP's transport. tmpl holds, per
 * channel, the handler context's host-side fields (layout, geometry,
 * host addresses); the device addresses, QP and CQ numbers, the null
 * mkey and the window are filled in here. The handlers are not started
 * (sdr_dpa_qp_start). */
static struct sdr_dpa_qp *sdr_dpa_qp_create(struct sdr_dpa_dev *d, uint32_t gens, uint32_t chans, uint32_t entries,
					    uint64_t slot_size, uint32_t log_rq, uint32_t log_cq, uint32_t send_depth,
					    void *host, size_t host_len, struct sdr_rx_ctx *tmpl, const char **step)
{
	struct sdr_dpa_qp *q = calloc(1, sizeof(*q));
	if (!q) {
		*step = "memory";
		return NULL;
	}
	q->d = d, q->gens = gens, q->chans = chans, q->entries = entries, q->slot_size = slot_size;
	q->log_rq = log_rq, q->log_cq = log_cq;
	q->ch = calloc(chans, sizeof(*q->ch));
	q->entry = calloc((size_t)gens * entries, sizeof(*q->entry));
	uint8_t *cq_init = calloc((size_t)1 << log_cq, SDR_CQE_SIZE);
	uint8_t *rq_init = calloc((size_t)1 << log_rq, SDR_RWQE_SIZE);
	if (!q->ch || !q->entry || !cq_init || !rq_init) {
		*step = "memory";
		goto fail;
	}
	for (size_t i = 0; i < (size_t)1 << log_cq; i++)
		cq_init[i * SDR_CQE_SIZE + SDR_CQE_OFF_OP_OWN] = SDR_CQE_OPCODE_INVALID << 4;
	for (size_t i = 0; i < (size_t)1 << log_rq; i++)
		sdr_rwqe_set(rq_init + i * SDR_RWQE_SIZE, 0, d->null_mr->lkey, 0);
	uint8_t cq_dbr[8] = {0}, rq_dbr[8] = {0};
	sdr_put_be32(rq_dbr, 1u << log_rq); /* every WQE of the ring posted */

	if (!(q->host_mr = ibv_reg_mr(d->pd, host, host_len, IBV_ACCESS_LOCAL_WRITE))) {
		*step = "ibv_reg_mr (host words for the window)";
		goto fail;
	}
	/* Entry mkeys, each the null mkey throughout, then the roots. */
	for (uint32_t g = 0; g < gens; g++) {
		for (uint32_t i = 0; i < entries; i++) {
			struct mlx5dv_mkey_init_attr ma = {.pd = d->pd, .create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT,
							   .max_entries = 2};
			struct mlx5dv_mkey *m = mlx5dv_create_mkey(&ma);
			if (!m) {
				*step = "mlx5dv_create_mkey (entry)";
				goto fail;
			}
			q->entry[(size_t)g * entries + i] = m;
			if (sdr_dpa_entry_set(d, m, 0, 0, 0, 0, slot_size)) {
				*step = "UMR (entry mkey to the null mkey)";
				goto fail;
			}
		}
		if (!(q->root[g] = sdr_dpa_create_root(d, &q->entry[(size_t)g * entries], entries, slot_size, &q->root_key[g]))) {
			*step = "DevX CREATE_MKEY (root, KLMs)";
			goto fail;
		}
	}
	/* The slot records all channels' handlers share, zeroed (DPA heap). */
	size_t recs = (size_t)tmpl[0].max_messages * (SDR_RX_SLOT_HDR_WORDS + tmpl[0].slot_words) * 8;
	void *zero = calloc(1, recs);
	int bad = !zero || sdr_dpa_dev_copy(d, zero, recs, &q->dpa_slots) ||
		  sdr_dpa_dev_copy(d, zero, (size_t)tmpl[0].max_messages * 8, &q->dpa_epochs);
	free(zero);
	if (bad) {
		*step = "flexio_buf_dev_alloc (slot records and epochs)";
		goto fail;
	}
	if (!(q->send_cq = ibv_create_cq(d->ctx, (int)(send_depth * gens * chans), NULL, NULL, 0))) {
		*step = "ibv_create_cq (send)";
		goto fail;
	}
	if (!(q->fence_cq = ibv_create_cq(d->ctx, (int)(SDR_DPA_FENCE_DEPTH * gens * chans), NULL, NULL, 0))) {
		*step = "ibv_create_cq (fence)";
		goto fail;
	}
	for (uint32_t c = 0; c < chans; c++) {
		struct sdr_dpa_chan *ch = &q->ch[c];
		struct flexio_event_handler_attr ea = {.host_stub_func = sdr_rx_handler,
						       .affinity = {.type = FLEXIO_AFFINITY_NONE}};
		if (flexio_event_handler_create(d->process, &ea, &ch->eh) != FLEXIO_STATUS_SUCCESS) {
			*step = "flexio_event_handler_create (DPA EUs)";
			goto fail;
		}
		if (sdr_dpa_dev_copy(d, cq_init, (size_t)SDR_CQE_SIZE << log_cq, &ch->cq_ring) ||
		    sdr_dpa_dev_copy(d, cq_dbr, sizeof(cq_dbr), &ch->cq_dbr)) {
			*step = "flexio_buf_dev_alloc (CQ ring)";
			goto fail;
		}
		struct flexio_cq_attr ca = {
			.log_cq_depth = (uint8_t)log_cq,
			.element_type = FLEXIO_CQ_ELEMENT_TYPE_DPA_THREAD,
			.thread = flexio_event_handler_get_thread(ch->eh),
			.uar_id = d->uar_id,
			.cq_ring_qmem = {.memtype = FLEXIO_MEMTYPE_DPA, .daddr = ch->cq_ring},
			.cq_dbr_daddr = ch->cq_dbr,
		};
		if (flexio_cq_create(d->process, NULL, &ca, &ch->cq) != FLEXIO_STATUS_SUCCESS) {
			*step = "flexio_cq_create (bound to the handler thread)";
			goto fail;
		}
		uint32_t cqn = flexio_cq_get_cq_num(ch->cq);
		struct sdr_rx_ctx x = tmpl[c];
		x.cq_ring = ch->cq_ring, x.cq_dbr = ch->cq_dbr, x.cqn = cqn, x.log_cq_size = log_cq;
		x.generations = gens, x.log_rq_size = log_rq, x.null_mkey = d->null_mr->lkey;
		x.window_id = flexio_window_get_id(d->window), x.window_mkey = q->host_mr->lkey;
		x.dpa_slots = q->dpa_slots, x.dpa_epochs = q->dpa_epochs;
		for (uint32_t g = 0; g < gens; g++) {
			if (sdr_dpa_dev_copy(d, rq_init, (size_t)SDR_RWQE_SIZE << log_rq, &ch->rq_ring[g]) ||
			    sdr_dpa_dev_copy(d, rq_dbr, sizeof(rq_dbr), &ch->rq_dbr[g])) {
				*step = "flexio_buf_dev_alloc (RQ ring)";
				goto fail;
			}
			if (!(ch->rqp[g] = sdr_dpa_create_rqp(d, ch->rq_ring[g], ch->rq_dbr[g], log_rq, cqn, &ch->rqpn[g]))) {
				*step = "DevX CREATE_QP / RST2INIT_QP (UC receive QP)";
				goto fail;
			}
			x.qpn[g] = ch->rqpn[g], x.rq_ring[g] = ch->rq_ring[g], x.rq_dbr[g] = ch->rq_dbr[g];
			struct ibv_qp_init_attr sa = {.send_cq = q->send_cq, .recv_cq = q->send_cq, .qp_type = IBV_QPT_UC,
						      .cap = {.max_send_wr = send_depth, .max_send_sge = 1, .max_recv_wr = 1,
							      .max_recv_sge = 1}};
			if (!(ch->sqp[g] = ibv_create_qp(d->pd, &sa))) {
				*step = "ibv_create_qp (UC send QP)";
				goto fail;
			}
			struct ibv_qp_init_attr fa = {.send_cq = q->fence_cq, .recv_cq = q->fence_cq, .qp_type = IBV_QPT_UC,
						      .cap = {.max_send_wr = SDR_DPA_FENCE_DEPTH, .max_recv_wr = 1,
							      .max_recv_sge = 1}};
			if (!(ch->fqp[g] = ibv_create_qp(d->pd, &fa))) {
				*step = "ibv_create_qp (UC fence QP)";
				goto fail;
			}
			struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = (uint8_t)d->port};
			if (ibv_modify_qp(ch->sqp[g], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) ||
			    ibv_modify_qp(ch->fqp[g], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
				*step = "ibv_modify_qp (send and fence QPs to INIT)";
				goto fail;
			}
		}
		if (sdr_dpa_dev_copy(d, &x, sizeof(x), &ch->ctx)) {
			*step = "flexio_buf_dev_alloc (handler context)";
			goto fail;
		}
	}
	free(cq_init);
	free(rq_init);
	return q;
fail:
	free(cq_init);
	free(rq_init);
	sdr_dpa_qp_destroy(q);
	return NULL;
}

/* sdr_dpa_qp_start runs every channel's event handler on its context. */
static int sdr_dpa_qp_start(struct sdr_dpa_qp *q)
{
	for (uint32_t c = 0; c < q->chans; c++) {
		if (flexio_event_handler_run(q->ch[c].eh, q->ch[c].ctx) != FLEXIO_STATUS_SUCCESS)
			return -1;
		q->ch[c].running = 1;
	}
	return 0;
}

/* sdr_dpa_sqp_rts moves a UC send QP from INIT to RTS toward QP
 * remote_qpn at GID rgid (the kernel resolves the MAC from the GID). */
static int sdr_dpa_sqp_rts(struct sdr_dpa_dev *d, struct ibv_qp *qp, uint32_t remote_qpn, uint32_t rpsn, uint32_t spsn,
			   enum ibv_mtu m, const uint8_t *rgid)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = m, .dest_qp_num = remote_qpn, .rq_psn = rpsn};
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, rgid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
	a.ah_attr.grh.hop_limit = SDR_DPA_HOP_LIMIT;
	a.ah_attr.port_num = (uint8_t)d->port;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = spsn;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

/* sdr_dpa_connect connects channel QP (gen, c) to the peer's receive QP
 * remote_qpn: the receive QP to RTR, the send QP to RTS, and the fence
 * QP to RTS toward our own receive QP (a loopback through the NIC). */
static int sdr_dpa_connect(struct sdr_dpa_qp *q, uint32_t gen, uint32_t c, uint32_t remote_qpn, uint32_t rpsn,
			   uint32_t spsn, uint32_t mtu, const uint8_t *rgid, const uint8_t *rmac, const char **step)
{
	struct sdr_dpa_dev *d = q->d;
	struct sdr_dpa_chan *ch = &q->ch[c];
	enum ibv_mtu m = mtu == 256 ? IBV_MTU_256 : mtu == 512 ? IBV_MTU_512 : mtu == 1024 ? IBV_MTU_1024 :
			 mtu == 2048 ? IBV_MTU_2048 : IBV_MTU_4096;
	if (sdr_dpa_rqp_rtr(d, ch->rqp[gen], ch->rqpn[gen], remote_qpn, rpsn, (uint32_t)m, rgid, rmac)) {
		*step = "DevX INIT2RTR_QP (receive QP)";
		return -1;
	}
	if (sdr_dpa_sqp_rts(d, ch->sqp[gen], remote_qpn, rpsn, spsn, m, rgid)) {
		*step = "ibv_modify_qp (send QP to RTR, RTS)";
		return -1;
	}
	if (sdr_dpa_sqp_rts(d, ch->fqp[gen], ch->rqpn[gen], 0, SDR_DPA_FENCE_PSN, m, d->gid.raw)) {
		*step = "ibv_modify_qp (fence QP to RTR, RTS toward our own receive QP)";
		return -1;
	}
	return 0;
}

/*
 * sdr_dpa_fence sends fence marker seq to every channel's receive QP of
 * generation gen: a zero-length SEND-with-Imm from the channel's fence
 * QP, which the NIC loops back; its CQE, after those of every packet
 * that QP executed before, makes the channel's handler publish seq
 * (handler.c, fence). It returns once the markers left (their send
 * completions, within a second), or -1 when one failed: the fence QPs
 * are then in error. The caller serializes fences on one QP.
 */
static int sdr_dpa_fence(struct sdr_dpa_qp *q, uint32_t gen, uint32_t seq)
{
	for (uint32_t c = 0; c < q->chans; c++) {
		struct ibv_send_wr wr = {.wr_id = seq, .num_sge = 0, .opcode = IBV_WR_SEND_WITH_IMM,
					 .send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(seq)},
				   *bad;
		if (ibv_post_send(q->ch[c].fqp[gen], &wr, &bad))
			return -1;
	}
	struct ibv_wc wc[16];
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (uint32_t done = 0; done < q->chans;) {
		int n = ibv_poll_cq(q->fence_cq, 16, wc);
		if (n < 0)
			return -1;
		for (int i = 0; i < n; i++)
			if (wc[i].status != IBV_WC_SUCCESS)
				return -1;
		done += (uint32_t)n;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > 1)
			return -1;
	}
	return 0;
}

/*
 * sdr_dpa_slot_epoch writes epoch as slot's epoch into DPA memory
 * (sdr_rx.h's dpa_epochs): the handlers stop trusting their view of the
 * slot's host words from before it. The arm path calls it before the
 * fence whose markers tell it every handler has seen it.
 */
static int sdr_dpa_slot_epoch(struct sdr_dpa_qp *q, uint32_t slot, uint64_t epoch)
{
	flexio_uintptr_t at = q->dpa_epochs + (flexio_uintptr_t)slot * 8;
	return flexio_host2dev_memcpy(q->d->process, &epoch, sizeof(epoch), at) == FLEXIO_STATUS_SUCCESS ? 0 : -1;
}

/* sdr_dpa_post posts n packets (n <= SDR_DPA_POST_BATCH) on send QP
 * (gen, c) as one chain of WRITE-with-Imm work requests. */
static int sdr_dpa_post(struct sdr_dpa_qp *q, uint32_t gen, uint32_t c, const struct sdr_dpa_pkt *p, int n,
			uint32_t lkey, uint32_t rkey)
{
	struct ibv_send_wr wr[SDR_DPA_POST_BATCH], *bad;
	struct ibv_sge sge[SDR_DPA_POST_BATCH];
	if (n < 1 || n > SDR_DPA_POST_BATCH)
		return -1;
	for (int i = 0; i < n; i++) {
		sge[i] = (struct ibv_sge){.addr = p[i].laddr, .length = p[i].len, .lkey = lkey};
		wr[i] = (struct ibv_send_wr){
			.wr_id = p[i].wr_id,
			.next = i + 1 < n ? &wr[i + 1] : NULL,
			.sg_list = &sge[i],
			.num_sge = p[i].len ? 1 : 0,
			.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
			.send_flags = p[i].signaled ? IBV_SEND_SIGNALED : 0,
			.imm_data = htobe32(p[i].imm),
			.wr = {.rdma = {.remote_addr = p[i].raddr, .rkey = rkey}},
		};
	}
	return ibv_post_send(q->ch[c].sqp[gen], wr, &bad);
}

/* sdr_dpa_poll_send reaps up to max send completions: their wr_ids and,
 * as the return value's sign, whether any failed (-1 - count). */
static int sdr_dpa_poll_send(struct sdr_dpa_qp *q, uint64_t *wr_id, uint32_t *qpn, int max)
{
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(q->send_cq, max < 16 ? max : 16, wc), failed = 0;
	for (int i = 0; i < n; i++) {
		wr_id[i] = wc[i].wr_id, qpn[i] = wc[i].qp_num;
		failed |= wc[i].status != IBV_WC_SUCCESS;
	}
	return n < 0 ? -1 : failed ? -1 - n : n;
}

/* sdr_dpa_recv_qpn returns receive QP (gen, c)'s number. */
static uint32_t sdr_dpa_recv_qpn(struct sdr_dpa_qp *q, uint32_t gen, uint32_t c) { return q->ch[c].rqpn[gen]; }

/* sdr_dpa_entry returns entry mkey i (generation · entries + message ID). */
static struct mlx5dv_mkey *sdr_dpa_entry(struct sdr_dpa_qp *q, uint32_t i) { return q->entry[i]; }

/* sdr_dpa_send_qpn returns send QP (gen, c)'s number. */
static uint32_t sdr_dpa_send_qpn(struct sdr_dpa_qp *q, uint32_t gen, uint32_t c) { return q->ch[c].sqp[gen]->qp_num; }

#endif /* SDR_DPA_HOST_H */
