#include "nic.h"

#include <stdlib.h>
#include <string.h>

#include "../device/engine.h"
#include "../device/mlx5.h"

extern flexio_dev_event_handler_t sdr_rx_handler;
uint64_t sdr_probe(uint64_t arg); /* probe.c's RPC (host.h declares it as a host stub, so sdr_rx.h cannot) */

/* window_key numbers the windows this file registers, apart from the
 * QPs' (qp.go's nextWindowKey counts up from 1). */
static uint32_t window_key(void)
{
	static uint32_t keys = 0x80000000u;
	return __atomic_add_fetch(&keys, 1, __ATOMIC_RELAXED);
}

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
 * dpasim_deliver writes completions into the CQ as the NIC would, one at
 * a time, raising the handler's event after each, and stops after the
 * first one that made the handler notify the host, so that the host
 * wakes that receive before any later packet is processed (the order
 * sdrtest's fences rely on). It returns how many it delivered, or -1
 * when the handler stopped.
 */
int dpasim_deliver(struct dpasim_channel *ch, const struct dpasim_cqe *in, int n)
{
	uint32_t mask = (1u << DPASIM_LOG_CQ) - 1;
	const struct sdr_rx_notify *notify = (const struct sdr_rx_notify *)ch->ctx.notify_haddr;
	uint64_t notified = __atomic_load_n(&notify->pi, __ATOMIC_ACQUIRE);
	for (int i = 0; i < n; i++) {
		uint8_t *cqe = ch->cq + (ch->pi & mask) * SDR_CQE_SIZE;
		sdr_put_be32(cqe + SDR_CQE_OFF_IMM, in[i].imm);
		sdr_put_be32(cqe + SDR_CQE_OFF_BYTE_CNT, in[i].byte_cnt);
		sdr_put_be32(cqe + SDR_CQE_OFF_QPN, in[i].qpn & 0xffffff);
		cqe[SDR_CQE_OFF_WQE_CNT] = (uint8_t)(ch->pi >> 8), cqe[SDR_CQE_OFF_WQE_CNT + 1] = (uint8_t)ch->pi;
		__atomic_store_n(&cqe[SDR_CQE_OFF_OP_OWN], (uint8_t)(in[i].opcode << 4 | ((ch->pi >> DPASIM_LOG_CQ) & 1)),
				 __ATOMIC_RELEASE);
		ch->pi++;
		if (events(ch) != 0)
			return -1;
		if (__atomic_load_n(&notify->pi, __ATOMIC_ACQUIRE) != notified ||
		    __atomic_load_n(&notify->overflows, __ATOMIC_ACQUIRE) !=
			    __atomic_load_n(&notify->overflows_seen, __ATOMIC_ACQUIRE))
			return i + 1;
	}
	return n;
}

/* dpasim_rq_pi reads the receive counter the handler rings for generation gen. */
uint32_t dpasim_rq_pi(struct dpasim_channel *ch, uint32_t gen) { return be32_load(&ch->rq_dbr[gen]); }

struct dpasim_bench {
	struct dpasim_channel *ch;
	struct sdr_rx_notify *notify;
	uint64_t *host; /* slot words, lengths, notification ring (sdr_rx.h's layout) */
	uint64_t *dpa_slots, *epochs;
	uint32_t slots, pkts, words, round, key;
	uint64_t stride; /* a slot's words in host (sdr_rx_slot_stride) */
	struct sdr_layout layout;
	struct dpasim_cqe *cqes;
};

#define BENCH_MTU 4096
#define BENCH_QPN 0x77

struct dpasim_bench *dpasim_bench_new(uint32_t slots, uint32_t pkts, uint32_t chunk_pkts)
{
	if (slots == 0 || (slots & (slots - 1)) || slots * pkts != 1u << DPASIM_LOG_CQ)
		return NULL;
	struct dpasim_bench *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->slots = slots, b->pkts = pkts, b->layout = (struct sdr_layout){10, 18, 4};
	struct sdr_geometry g;
	if (sdr_geometry_init(&g, pkts * BENCH_MTU, BENCH_MTU, chunk_pkts * BENCH_MTU) != 0) {
		free(b);
		return NULL;
	}
	b->words = sdr_geometry_words(&g);
	b->stride = sdr_rx_slot_stride(b->words);
	size_t notify_words = sdr_rx_lines((sizeof(struct sdr_rx_notify) + (4u << DPASIM_LOG_CQ) + 7) / 8);
	size_t host_words = (size_t)slots * b->stride + sdr_rx_lines(slots) + notify_words;
	b->host = aligned_alloc(SDR_RX_LINE, host_words * 8);
	if (b->host)
		memset(b->host, 0, host_words * 8);
	b->cqes = calloc(1u << DPASIM_LOG_CQ, sizeof(*b->cqes));
	b->ch = dpasim_channel_new(1, DPASIM_LOG_CQ);
	b->dpa_slots = calloc((size_t)slots * (SDR_RX_SLOT_HDR_WORDS + b->words), 8);
	b->epochs = calloc(slots, 8);
	b->key = window_key();
	if (!b->host || !b->cqes || !b->ch || !b->dpa_slots || !b->epochs ||
	    hostsim_window_register(b->key, (uint64_t)(uintptr_t)b->host, host_words * 8) != 0) {
		dpasim_bench_free(b);
		return NULL;
	}
	uint64_t *lengths = b->host + (size_t)slots * b->stride;
	b->notify = (struct sdr_rx_notify *)(lengths + sdr_rx_lines(slots));
	b->notify->log_cap = DPASIM_LOG_CQ;
	struct sdr_rx_ctx *x = &b->ch->ctx;
	x->qpn[0] = BENCH_QPN;
	x->msg_id_bits = 10, x->offset_bits = 18, x->nibble_bits = 4;
	x->mtu = BENCH_MTU, x->chunk_size = chunk_pkts * BENCH_MTU, x->max_messages = slots, x->slot_words = b->words;
	x->window_mkey = b->key;
	x->slots_haddr = (uint64_t)(uintptr_t)b->host;
	x->lengths_haddr = (uint64_t)(uintptr_t)lengths;
	x->notify_haddr = (uint64_t)(uintptr_t)b->notify;
	x->dpa_slots = (uint64_t)(uintptr_t)b->dpa_slots;
	x->dpa_epochs = (uint64_t)(uintptr_t)b->epochs;
	for (uint32_t s = 0; s < slots; s++)
		lengths[s] = (uint64_t)pkts * BENCH_MTU;
	if (dpasim_channel_start(b->ch) != 0) {
		dpasim_bench_free(b);
		return NULL;
	}
	return b;
}

void dpasim_bench_free(struct dpasim_bench *b)
{
	if (b->key)
		hostsim_window_unregister(b->key);
	dpasim_channel_free(b->ch);
	free(b->host);
	free(b->dpa_slots);
	free(b->epochs);
	free(b->cqes);
	free(b);
}

int dpasim_bench_fill(struct dpasim_bench *b)
{
	uint32_t base = b->round++ * b->slots;
	for (uint32_t s = 0; s < b->slots; s++) {
		struct sdr_slot sl = {.words = b->host + s * b->stride + SDR_RX_STATE_WORD, .layout = b->layout};
		sdr_geometry_init(&sl.geo, b->pkts * BENCH_MTU, BENCH_MTU, b->ch->ctx.chunk_size);
		sdr_slot_activate(&sl, base + s, 0);
	}
	/* Interleave the slots' packets, as several messages in flight arrive. */
	for (uint32_t k = 0; k < b->pkts; k++)
		for (uint32_t s = 0; s < b->slots; s++)
			b->cqes[k * b->slots + s] = (struct dpasim_cqe){
				BENCH_QPN, ((base + s) & 1023) << 22 | k << 4 | (k & 0xf), BENCH_MTU, SDR_CQE_OPCODE_RESP_WR_IMM};
	b->notify->ci = b->notify->pi;
	for (uint32_t i = 0; i < 1u << DPASIM_LOG_CQ; i++) {
		uint8_t *cqe = b->ch->cq + (b->ch->pi & ((1u << DPASIM_LOG_CQ) - 1)) * SDR_CQE_SIZE;
		sdr_put_be32(cqe + SDR_CQE_OFF_IMM, b->cqes[i].imm);
		sdr_put_be32(cqe + SDR_CQE_OFF_BYTE_CNT, b->cqes[i].byte_cnt);
		sdr_put_be32(cqe + SDR_CQE_OFF_QPN, b->cqes[i].qpn);
		__atomic_store_n(&cqe[SDR_CQE_OFF_OP_OWN],
				 (uint8_t)(b->cqes[i].opcode << 4 | ((b->ch->pi >> DPASIM_LOG_CQ) & 1)), __ATOMIC_RELEASE);
		b->ch->pi++;
	}
	return 0;
}

int dpasim_bench_run(struct dpasim_bench *b) { return events(b->ch); }

uint64_t dpasim_bench_chunks(struct dpasim_bench *b) { return b->ch->ctx.chunks; }

/* A probe call: the RPC's arguments and its answer. */
struct probe_call {
	struct sdr_probe_args args;
	uint64_t cycles;
};

/* probe_thread is the probe's thread: the RPC, then finish. */
static void probe_thread(uint64_t arg)
{
	struct probe_call *c = (struct probe_call *)(uintptr_t)arg;
	c->cycles = sdr_probe((uint64_t)(uintptr_t)&c->args);
	flexio_dev_thread_finish();
}

uint64_t dpasim_probe(uint32_t op, uint32_t n)
{
	struct probe_call c = {.args = {.window_id = 0, .mkey = window_key(), .op = op, .n = n}, .cycles = SDR_PROBE_FAILED};
	uint64_t *line = aligned_alloc(SDR_RX_LINE, SDR_RX_LINE);
	if (!line)
		return SDR_PROBE_FAILED;
	memset(line, 0, SDR_RX_LINE);
	c.args.haddr = (uint64_t)(uintptr_t)line;
	struct hostsim_thread *t = NULL;
	if (hostsim_window_register(c.args.mkey, c.args.haddr, SDR_RX_LINE) == 0) {
		if ((t = hostsim_thread_create(probe_thread, (uint64_t)(uintptr_t)&c)) != NULL) {
			hostsim_thread_run(t);
			hostsim_thread_destroy(t);
		}
		hostsim_window_unregister(c.args.mkey);
	}
	free(line);
	return c.cycles;
}
