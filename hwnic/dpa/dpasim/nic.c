#include "nic.h"

#include <stdlib.h>
#include <string.h>

#include "../device/mlx5.h"

extern flexio_dev_event_handler_t sdr_rx_handler;

struct dpasim_channel *dpasim_channel_new(uint32_t generations, uint32_t log_rq)
{
	if (generations == 0 || generations > SDR_RX_MAX_GENERATIONS)
		return NULL;
	struct dpasim_channel *ch = calloc(1, sizeof(*ch));
	if (!ch)
		return NULL;
	ch->cq = aligned_alloc(64, SDR_CQE_SIZE << DPASIM_LOG_CQ);
	int ok = ch->cq != NULL;
	for (uint32_t g = 0; g < generations && ok; g++) {
		ch->rq[g] = calloc(SDR_RWQE_SIZE, 1u << log_rq);
		ok = ch->rq[g] != NULL;
	}
	if (!ok) {
		dpasim_channel_free(ch);
		return NULL;
	}
	memset(ch->cq, 0, SDR_CQE_SIZE << DPASIM_LOG_CQ);
	for (uint32_t i = 0; i < 1u << DPASIM_LOG_CQ; i++)
		ch->cq[i * SDR_CQE_SIZE + SDR_CQE_OFF_OP_OWN] = SDR_CQE_OPCODE_INVALID << 4;
	struct sdr_rx_ctx *x = &ch->ctx;
	x->cq_ring = (uint64_t)(uintptr_t)ch->cq;
	x->cq_dbr = (uint64_t)(uintptr_t)&ch->cq_dbr;
	x->log_cq_size = DPASIM_LOG_CQ;
	x->generations = generations;
	x->log_rq_size = log_rq;
	for (uint32_t g = 0; g < generations; g++) {
		x->rq_ring[g] = (uint64_t)(uintptr_t)ch->rq[g];
		x->rq_dbr[g] = (uint64_t)(uintptr_t)&ch->rq_dbr[g];
	}
	return ch;
}

void dpasim_channel_free(struct dpasim_channel *ch)
{
	if (!ch)
		return;
	hostsim_thread_destroy(ch->thread);
	free(ch->cq);
	for (int g = 0; g < SDR_RX_MAX_GENERATIONS; g++)
		free(ch->rq[g]);
	free(ch);
}

/* dpasim_channel_start creates the handler thread once ctx is filled in. */
int dpasim_channel_start(struct dpasim_channel *ch)
{
	ch->thread = hostsim_thread_create(sdr_rx_handler, (uint64_t)(uintptr_t)&ch->ctx);
	return ch->thread ? 0 : -1;
}

static uint32_t be32_load(const uint32_t *p)
{
	uint32_t v = __atomic_load_n(p, __ATOMIC_ACQUIRE);
	return sdr_be32((const uint8_t *)&v);
}

/* events runs the handler for as long as its CQ is armed below the producer. */
static int events(struct dpasim_channel *ch)
{
	for (;;) {
		if (hostsim_thread_run(ch->thread) != HOSTSIM_RESCHEDULED)
			return -1;
		uint32_t ci, cqn;
		if (!hostsim_thread_armed(ch->thread, &ci, &cqn))
			return -1; /* never raised again: the handler is broken */
		if (ci == (ch->pi & 0xffffff))
			return 0;
	}
}

/*
 * dpasim_deliver writes n completions into the CQ as the NIC would and
 * lets the handler take them; 0, or -1 when the handler stopped.
 */
int dpasim_deliver(struct dpasim_channel *ch, const struct dpasim_cqe *in, int n)
{
	uint32_t mask = (1u << DPASIM_LOG_CQ) - 1;
	for (int i = 0; i < n; i++) {
		if (ch->pi - be32_load(&ch->cq_dbr) > mask && events(ch) != 0)
			return -1;
		uint8_t *cqe = ch->cq + (ch->pi & mask) * SDR_CQE_SIZE;
		uint8_t b[4];
		sdr_put_be32(b, in[i].imm);
		memcpy(cqe + SDR_CQE_OFF_IMM, b, 4);
		sdr_put_be32(b, in[i].byte_cnt);
		memcpy(cqe + SDR_CQE_OFF_BYTE_CNT, b, 4);
		sdr_put_be32(b, in[i].qpn & 0xffffff);
		memcpy(cqe + SDR_CQE_OFF_QPN, b, 4);
		cqe[SDR_CQE_OFF_WQE_CNT] = (uint8_t)(ch->pi >> 8), cqe[SDR_CQE_OFF_WQE_CNT + 1] = (uint8_t)ch->pi;
		__atomic_store_n(&cqe[SDR_CQE_OFF_OP_OWN], (uint8_t)(in[i].opcode << 4 | ((ch->pi >> DPASIM_LOG_CQ) & 1)),
				 __ATOMIC_RELEASE);
		ch->pi++;
	}
	return events(ch);
}

/* dpasim_rq_pi reads the receive counter the handler rings for generation gen. */
uint32_t dpasim_rq_pi(struct dpasim_channel *ch, uint32_t gen) { return be32_load(&ch->rq_dbr[gen]); }

/* dpasim_notifications consumes up to max notified slots into out. */
int dpasim_notifications(struct sdr_rx_notify *n, uint32_t *out, int max, int *overflow)
{
	uint64_t pi = __atomic_load_n(&n->pi, __ATOMIC_ACQUIRE), ci = n->ci;
	int k = 0;
	for (; ci < pi && k < max; ci++)
		out[k++] = n->slot[ci & ((1ull << n->log_cap) - 1)];
	__atomic_store_n(&n->ci, ci, __ATOMIC_RELEASE);
	*overflow = __atomic_exchange_n(&n->overflow, 0, __ATOMIC_ACQ_REL);
	return k;
}
