/*
 * handler_test — the RX handler (../handler.c) compiled through the
 * FlexIO shim (../hostsim) and driven like the NIC would: CQEs written
 * into the rings in the layout of rdma-core's struct mlx5_cqe64, owner
 * bit last; fence markers as the CQEs of zero-length SEND-with-Imm. Run
 * by handler_test.go, also under ThreadSanitizer. Prints "ok
 * NAME" per test, "FAIL ..." and exits 1 on the first failure.
 */
#include <endian.h>
#include <infiniband/mlx5dv.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine.h"
#include "../hostsim/hostsim.h"
#include "../mlx5.h"
#include "../sdr_rx.h"

extern flexio_dev_event_handler_t sdr_rx_handler;

#define CHECK(cond, ...)                                                            \
	do {                                                                        \
		if (!(cond)) {                                                      \
			printf("FAIL %s:%d: %s: ", __func__, __LINE__, #cond);      \
			printf(__VA_ARGS__);                                        \
			printf("\n");                                               \
			exit(1);                                                    \
		}                                                                   \
	} while (0)

/* The offsets the handler reads are rdma-core's. */
_Static_assert(offsetof(struct mlx5_cqe64, imm_inval_pkey) == SDR_CQE_OFF_IMM, "imm");
_Static_assert(offsetof(struct mlx5_cqe64, byte_cnt) == SDR_CQE_OFF_BYTE_CNT, "byte_cnt");
_Static_assert(offsetof(struct mlx5_cqe64, sop_drop_qpn) == SDR_CQE_OFF_QPN, "qpn");
_Static_assert(offsetof(struct mlx5_cqe64, wqe_counter) == SDR_CQE_OFF_WQE_CNT, "wqe_counter");
_Static_assert(offsetof(struct mlx5_cqe64, op_own) == SDR_CQE_OFF_OP_OWN, "op_own");
_Static_assert(sizeof(struct mlx5_cqe64) == SDR_CQE_SIZE, "cqe size");
_Static_assert(sizeof(struct mlx5_wqe_data_seg) == SDR_RWQE_SIZE, "data seg size");
_Static_assert(MLX5_CQE_RESP_WR_IMM == SDR_CQE_OPCODE_RESP_WR_IMM && MLX5_CQE_RESP_SEND_IMM == SDR_CQE_OPCODE_RESP_SEND_IMM &&
		       MLX5_CQE_RESP_ERR == SDR_CQE_OPCODE_RESP_ERR &&
		       MLX5_CQE_INVALID == SDR_CQE_OPCODE_INVALID && MLX5_INVALID_LKEY == SDR_INVALID_LKEY,
	       "constants");

/* ---- a receiver: host memory, CQ and RQ rings, handler threads ---- */

#define MAX_CH 8
#define NULL_MKEY 0x77
#define WINDOW_MKEY 0x1234

struct channel {
	struct sdr_rx_ctx ctx; /* "DPA memory" */
	struct hostsim_thread *thread;
	uint8_t *cq;
	uint32_t cq_dbr;
	uint32_t rq_dbr[SDR_RX_MAX_GENERATIONS];
	uint8_t *rq[SDR_RX_MAX_GENERATIONS];
	uint32_t pi; /* CQEs produced; written by the producer, read by the runner */
	int done;    /* the producer will write no more */
	pthread_t runner;
};

struct rig {
	struct sdr_layout layout;
	uint32_t mtu, chunk_size, slots, slot_words, channels, gens, log_cq;
	uint64_t stride; /* a slot's words in the host area (sdr_rx_slot_stride) */
	uint8_t *host;   /* one window: slot words, lengths, notify rings (sdr_rx.h's layout) */
	uint64_t *dpa_slots; /* the handlers' slot records ("DPA memory") */
	uint64_t *epochs;    /* the slots' epochs ("DPA memory", the host's) */
	uint64_t *words, *lengths;
	struct sdr_rx_notify *notify[MAX_CH];
	struct channel ch[MAX_CH];
	/* react, when set, is the host acting the moment a handler's window
	 * store becomes visible (on the handler's thread, inside its run). */
	void (*react)(struct rig *r, uint64_t haddr, uint64_t old, uint64_t now);
};

static uint32_t qpn_of(uint32_t gen, uint32_t ch) { return 0x100 + gen * 16 + ch; }

/* ---- the strict window model's check (hostsim_strict_windows) ---- */

static struct rig *checked; /* the rig whose window visible() watches */

/* engine_word finds the slot and engine word index of the host word at
 * haddr; 0 when it is none. */
static int engine_word(struct rig *r, uint64_t haddr, uint32_t *slot, uint32_t *idx)
{
	uint64_t words = (uint64_t)(uintptr_t)r->words;
	if (haddr < words || haddr >= words + 8 * r->slots * r->stride)
		return 0;
	uint64_t w = (haddr - words) / 8;
	*slot = (uint32_t)(w / r->stride);
	*idx = (uint32_t)(w % r->stride - SDR_RX_STATE_WORD); /* wraps above slot_words before the state word */
	return *idx < r->slot_words;
}

/* publishing names the word at haddr if it is one that tells the host to
 * read what was stored before it, and the change old → now moved it: a
 * slot's chunk flags, a notification ring's producer index or overflow
 * flag, a fence number. */
static const char *publishing(struct rig *r, uint64_t haddr, uint64_t old, uint64_t now)
{
	uint32_t slot, idx;
	if (engine_word(r, haddr, &slot, &idx)) {
		struct sdr_geometry g;
		uint32_t length = (uint32_t)__atomic_load_n(&r->lengths[slot], __ATOMIC_ACQUIRE);
		if (sdr_geometry_init(&g, length, r->mtu, r->chunk_size) == 0 && idx >= SDR_HEADER_WORDS + g.chunks)
			return "a slot's chunk flags";
		return NULL;
	}
	for (uint32_t c = 0; c < r->channels; c++) {
		struct sdr_rx_notify *n = r->notify[c];
		if (haddr == (uint64_t)(uintptr_t)&n->pi)
			return "a notification producer index";
		if (haddr == (uint64_t)(uintptr_t)&n->overflows)
			return "a notification overflow count";
		if (haddr == (uint64_t)(uintptr_t)&n->fence && (uint32_t)(old ^ now))
			return "a fence number";
	}
	return NULL;
}

/*
 * visible is called as a handler thread's window store becomes visible to
 * the host. When a publishing word moves, the host goes on to read what
 * the handler stored before it: none of that may still be pending.
 */
static void visible(void *arg, uint64_t haddr, uint64_t old, uint64_t now)
{
	(void)arg;
	struct rig *r = __atomic_load_n(&checked, __ATOMIC_ACQUIRE);
	if (!r || old == now)
		return;
	const char *what = publishing(r, haddr, old, now);
	int pending = what ? hostsim_pending_stores_before(haddr) : 0;
	CHECK(pending == 0, "%s became visible before %d window words the handler stored earlier", what, pending);
	if (r->react)
		r->react(r, haddr, old, now);
}

static struct rig *rig_new(uint32_t channels, uint32_t gens, uint32_t slots, uint32_t slot_size, uint32_t mtu,
			   uint32_t chunk_size, uint32_t log_cq, struct sdr_layout l)
{
	struct rig *r = calloc(1, sizeof(*r));
	CHECK(r, "oom");
	*r = (struct rig){.layout = l, .mtu = mtu, .chunk_size = chunk_size, .slots = slots, .channels = channels,
			  .gens = gens, .log_cq = log_cq};
	struct sdr_geometry g;
	CHECK(sdr_geometry_init(&g, slot_size, mtu, chunk_size) == 0, "geometry");
	r->slot_words = sdr_geometry_words(&g);
	r->stride = sdr_rx_slot_stride(r->slot_words);
	uint32_t log_notify = log_cq + 4;
	size_t notify_size = 8 * sdr_rx_lines((sizeof(struct sdr_rx_notify) + (sizeof(uint32_t) << log_notify)) / 8);
	size_t lengths_size = 8 * sdr_rx_lines(slots);
	size_t size = (size_t)slots * r->stride * 8 + lengths_size + channels * notify_size;
	r->host = aligned_alloc(SDR_RX_LINE, size);
	CHECK(r->host, "oom");
	memset(r->host, 0, size);
	r->words = (uint64_t *)r->host;
	r->lengths = r->words + (size_t)slots * r->stride;
	CHECK(hostsim_window_register(WINDOW_MKEY, (uint64_t)(uintptr_t)r->host, size) == 0, "window");
	__atomic_store_n(&checked, r, __ATOMIC_RELEASE);
	r->dpa_slots = calloc((size_t)slots * (SDR_RX_SLOT_HDR_WORDS + r->slot_words), 8);
	r->epochs = calloc(slots, 8);
	CHECK(r->dpa_slots && r->epochs, "oom");
	for (uint32_t c = 0; c < channels; c++) {
		r->notify[c] = (struct sdr_rx_notify *)(r->host + (size_t)slots * r->stride * 8 + lengths_size + c * notify_size);
		r->notify[c]->log_cap = log_notify;
		struct channel *ch = &r->ch[c];
		ch->cq = aligned_alloc(64, SDR_CQE_SIZE << log_cq);
		CHECK(ch->cq, "oom");
		for (uint32_t i = 0; i < 1u << log_cq; i++) {
			memset(ch->cq + i * SDR_CQE_SIZE, 0, SDR_CQE_SIZE);
			ch->cq[i * SDR_CQE_SIZE + 63] = MLX5_CQE_INVALID << 4; /* as rdma-core initialises a CQ */
		}
		struct sdr_rx_ctx *x = &ch->ctx;
		x->cq_ring = (uint64_t)(uintptr_t)ch->cq;
		x->cq_dbr = (uint64_t)(uintptr_t)&ch->cq_dbr;
		x->cqn = 0x40 + c;
		x->log_cq_size = log_cq;
		x->generations = gens;
		x->log_rq_size = log_cq;
		for (uint32_t g = 0; g < gens; g++) {
			x->qpn[g] = qpn_of(g, c);
			ch->rq[g] = calloc(SDR_RWQE_SIZE, 1u << log_cq);
			CHECK(ch->rq[g], "oom");
			x->rq_ring[g] = (uint64_t)(uintptr_t)ch->rq[g];
			x->rq_dbr[g] = (uint64_t)(uintptr_t)&ch->rq_dbr[g];
		}
		x->null_mkey = NULL_MKEY;
		x->msg_id_bits = l.msg_id_bits, x->offset_bits = l.offset_bits, x->nibble_bits = l.nibble_bits;
		x->mtu = mtu, x->chunk_size = chunk_size, x->max_messages = slots, x->slot_words = r->slot_words;
		x->window_id = c % 4, x->window_mkey = WINDOW_MKEY;
		x->slots_haddr = (uint64_t)(uintptr_t)r->words;
		x->lengths_haddr = (uint64_t)(uintptr_t)r->lengths;
		x->notify_haddr = (uint64_t)(uintptr_t)r->notify[c];
		x->dpa_slots = (uint64_t)(uintptr_t)r->dpa_slots;
		x->dpa_epochs = (uint64_t)(uintptr_t)r->epochs;
		ch->thread = hostsim_thread_create(sdr_rx_handler, (uint64_t)(uintptr_t)x);
		CHECK(ch->thread, "oom");
	}
	return r;
}

static void rig_free(struct rig *r)
{
	__atomic_store_n(&checked, NULL, __ATOMIC_RELEASE);
	hostsim_window_unregister(WINDOW_MKEY);
	for (uint32_t c = 0; c < r->channels; c++) {
		hostsim_thread_destroy(r->ch[c].thread);
		free(r->ch[c].cq);
		for (uint32_t g = 0; g < r->gens; g++)
			free(r->ch[c].rq[g]);
	}
	free(r->host);
	free(r->dpa_slots);
	free(r->epochs);
	free(r);
}

static struct sdr_slot slot_of(struct rig *r, uint32_t slot, uint32_t length)
{
	struct sdr_slot s = {.words = r->words + slot * r->stride + SDR_RX_STATE_WORD, .layout = r->layout};
	CHECK(sdr_geometry_init(&s.geo, length, r->mtu, r->chunk_size) == 0, "geometry");
	return s;
}

/* prepare does what the host does before a receive's entry is set:
 * deactivate the slot and publish the length word with the next arm
 * count. */
static struct sdr_slot prepare(struct rig *r, uint32_t slot, uint32_t length)
{
	struct sdr_slot s = slot_of(r, slot, length);
	sdr_slot_deactivate(&s);
	uint64_t old = __atomic_load_n(&r->lengths[slot], __ATOMIC_ACQUIRE);
	__atomic_store_n(&r->lengths[slot], sdr_rx_length_word((uint32_t)(old >> 32) + 1, length), __ATOMIC_RELEASE);
	return s;
}

/* arm does what the host does for a posted receive, without a fence. */
static void arm(struct rig *r, uint32_t slot, uint32_t length, uint32_t msg_id, uint32_t gen)
{
	struct sdr_slot s = prepare(r, slot, length);
	sdr_slot_activate(&s, msg_id, gen);
}

/*
 * produce writes one CQE as the NIC would: every field through struct
 * mlx5_cqe64, the op_own byte (opcode, owner = pass parity) last. It
 * waits while the ring is full (the consumer index from the CQ doorbell
 * record).
 */
static void produce(struct rig *r, uint32_t c, uint32_t qpn, uint8_t opcode, uint32_t imm, uint32_t bytes)
{
	struct channel *ch = &r->ch[c];
	uint32_t pi = ch->pi;
	while (pi - be32toh(__atomic_load_n(&ch->cq_dbr, __ATOMIC_ACQUIRE)) >= 1u << r->log_cq)
		sched_yield();
	struct mlx5_cqe64 *cqe = (struct mlx5_cqe64 *)(ch->cq + (pi & ((1u << r->log_cq) - 1)) * SDR_CQE_SIZE);
	cqe->imm_inval_pkey = htobe32(imm);
	cqe->byte_cnt = htobe32(bytes);
	cqe->sop_drop_qpn = htobe32(0x5a000000 | qpn); /* high byte: not the QPN */
	cqe->wqe_counter = htobe16((uint16_t)pi);
	__atomic_store_n(&cqe->op_own, (uint8_t)(opcode << 4 | ((pi >> r->log_cq) & 1)), __ATOMIC_RELEASE);
	__atomic_store_n(&ch->pi, pi + 1, __ATOMIC_RELEASE);
}

static void packet(struct rig *r, uint32_t c, uint32_t gen, uint32_t imm, uint32_t bytes)
{
	produce(r, c, qpn_of(gen, c), MLX5_CQE_RESP_WR_IMM, imm, bytes);
}

/* marker writes fence marker seq on channel c's QP of generation gen:
 * the CQE of a zero-length SEND-with-Imm the host sent itself. */
static void marker(struct rig *r, uint32_t c, uint32_t gen, uint32_t seq)
{
	produce(r, c, qpn_of(gen, c), MLX5_CQE_RESP_SEND_IMM, seq, 0);
}

/* published loads channel c's published fence number as the host does. */
static uint32_t published(struct rig *r, uint32_t c) { return __atomic_load_n(&r->notify[c]->fence, __ATOMIC_ACQUIRE); }

/* fence_wait waits, as the host's Arm does, until every channel's
 * handler has published marker seq or a later one; the handlers run on
 * their runner threads meanwhile. */
static void fence_wait(struct rig *r, uint32_t seq)
{
	for (uint32_t c = 0; c < r->channels; c++)
		for (long spins = 0; (int32_t)(published(r, c) - seq) < 0; spins++) {
			CHECK(spins < 100000000, "channel %u never reached fence %u (published %u)", c, seq, published(r, c));
			sched_yield();
		}
}

/* drain runs channel c's handler as the NIC raises events: while it is
 * armed below the producer index. Returns the runs. */
static int drain(struct rig *r, uint32_t c)
{
	struct channel *ch = &r->ch[c];
	int runs = 0;
	uint32_t ci, cqn;
	do {
		CHECK(hostsim_thread_run(ch->thread) == HOSTSIM_RESCHEDULED, "handler finished (failures %lu)",
		      (unsigned long)ch->ctx.failures);
		CHECK(++runs < 10000, "the handler never caught up with the producer (ci %u, pi %u)", ch->ctx.ci, ch->pi);
		CHECK(hostsim_thread_armed(ch->thread, &ci, &cqn), "handler rescheduled without arming its CQ");
		CHECK(cqn == ch->ctx.cqn, "armed CQ %u, want %u", cqn, ch->ctx.cqn);
		CHECK(ci == be32toh(__atomic_load_n(&ch->cq_dbr, __ATOMIC_ACQUIRE)), "armed at %u, doorbell record %u", ci,
		      be32toh(ch->cq_dbr));
	} while (ci != __atomic_load_n(&ch->pi, __ATOMIC_ACQUIRE));
	return runs;
}

/* unseen_overflows is how many notifications the handler dropped on a
 * full ring since the host last acknowledged the count (acknowledge). */
static uint64_t unseen_overflows(struct sdr_rx_notify *n)
{
	return __atomic_load_n(&n->overflows, __ATOMIC_ACQUIRE) - __atomic_load_n(&n->overflows_seen, __ATOMIC_ACQUIRE);
}

static void acknowledge(struct sdr_rx_notify *n)
{
	__atomic_store_n(&n->overflows_seen, __atomic_load_n(&n->overflows, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
}

/* notifications consumes channel c's notify ring, counting entries per slot. */
static uint32_t notifications(struct rig *r, uint32_t c, uint32_t *per_slot)
{
	struct sdr_rx_notify *n = r->notify[c];
	uint64_t pi = __atomic_load_n(&n->pi, __ATOMIC_ACQUIRE), ci = n->ci, first = ci;
	CHECK(unseen_overflows(n) == 0, "notify ring overflowed");
	for (; ci < pi; ci++) {
		uint32_t s = __atomic_load_n(&n->slot[ci & ((1u << n->log_cap) - 1)], __ATOMIC_RELAXED);
		CHECK(s < r->slots, "notified slot %u", s);
		if (per_slot)
			per_slot[s]++;
	}
	__atomic_store_n(&n->ci, ci, __ATOMIC_RELEASE);
	return (uint32_t)(pi - first);
}

static const struct sdr_layout L10 = {10, 18, 4};

/* ---- tests ---- */

static void test_cqe_layout(void)
{
	/* A CQE filled through rdma-core's struct. */
	struct mlx5_cqe64 c;
	memset(&c, 0xee, sizeof(c));
	c.imm_inval_pkey = htobe32(0x12345678);
	c.byte_cnt = htobe32(1000);
	c.sop_drop_qpn = htobe32(0xab000123);
	c.wqe_counter = htobe16(0x0102);
	c.op_own = MLX5_CQE_RESP_WR_IMM << 4 | 1;
	const uint8_t *b = (const uint8_t *)&c;
	CHECK(sdr_cqe_imm(b) == 0x12345678, "imm %#x", sdr_cqe_imm(b));
	CHECK(sdr_cqe_byte_cnt(b) == 1000, "byte count %u", sdr_cqe_byte_cnt(b));
	CHECK(sdr_cqe_qpn(b) == 0x123, "qpn %#x", sdr_cqe_qpn(b));
	CHECK(sdr_cqe_wqe_counter(b) == 0x0102, "wqe counter %#x", sdr_cqe_wqe_counter(b));
	CHECK(sdr_cqe_opcode(sdr_cqe_op_own(b)) == MLX5_CQE_RESP_WR_IMM, "opcode");
	CHECK(mlx5dv_get_cqe_opcode(&c) == sdr_cqe_opcode(sdr_cqe_op_own(b)), "opcode disagrees with rdma-core");
	CHECK(mlx5dv_get_cqe_owner(&c) == (sdr_cqe_op_own(b) & 1), "owner disagrees with rdma-core");

	/* The same CQE written byte by byte from the layout. */
	uint8_t v[64];
	memset(v, 0, sizeof(v));
	v[36] = 0xde, v[37] = 0xad, v[38] = 0xbe, v[39] = 0xef; /* imm_inval_pkey */
	v[44] = 0x00, v[45] = 0x00, v[46] = 0x04, v[47] = 0x00; /* byte_cnt 1024 */
	v[56] = 0x80, v[57] = 0x00, v[58] = 0x12, v[59] = 0x34; /* sop_drop_qpn: QPN 0x1234 */
	v[60] = 0xff, v[61] = 0xfe;                             /* wqe_counter */
	v[63] = 0x10;                                           /* op_own: WRITE-with-Imm, owner 0 */
	CHECK(sdr_cqe_imm(v) == 0xdeadbeef && sdr_cqe_byte_cnt(v) == 1024 && sdr_cqe_qpn(v) == 0x1234 &&
		      sdr_cqe_wqe_counter(v) == 0xfffe,
	      "byte vector");
	CHECK(sdr_cqe_ready(v[63], 0, 3) && !sdr_cqe_ready(v[63], 8, 3) && sdr_cqe_ready(v[63], 16, 3), "owner parity");
	CHECK(!sdr_cqe_ready(0xf0, 0, 3), "an initialised (invalid) CQE is not ready");

	/* A receive WQE against struct mlx5_wqe_data_seg and bytes. */
	struct mlx5_wqe_data_seg d;
	memset(&d, 0xee, sizeof(d));
	sdr_rwqe_set((uint8_t *)&d, 5, MLX5_INVALID_LKEY, 0x1122334455667788ull);
	CHECK(be32toh(d.byte_count) == 5 && be32toh(d.lkey) == MLX5_INVALID_LKEY && be64toh(d.addr) == 0x1122334455667788ull,
	      "data segment");
	const uint8_t want[16] = {0, 0, 0, 5, 0, 0, 1, 0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
	CHECK(memcmp(&d, want, 16) == 0, "data segment bytes");
}

/* Three passes over an 8-entry CQ; the owner bit tells new from old. */
static void test_owner_wrap(void)
{
	struct rig *r = rig_new(1, 1, 4, 64 * 1024, 1024, 8 * 1024, 3, L10);
	arm(r, 1, 24 * 1024, 1, 0);
	for (uint32_t batch = 0; batch < 3; batch++) {
		for (uint32_t k = 0; k < 8; k++)
			packet(r, 0, 0, (1u << 22) | (batch * 8 + k) << 4, 1024);
		CHECK(drain(r, 0) == 1, "one event for 8 CQEs");
		CHECK(r->ch[0].ctx.cqes == (batch + 1) * 8, "pass %u: %lu CQEs", batch, (unsigned long)r->ch[0].ctx.cqes);
		CHECK(r->ch[0].ctx.unknown_qpn == 0 && r->ch[0].ctx.errors == 0 && r->ch[0].ctx.stale == 0,
		      "pass %u: %lu unknown QPNs, %lu errors, %lu stale: CQE fields read as they were before the NIC wrote them",
		      batch, (unsigned long)r->ch[0].ctx.unknown_qpn, (unsigned long)r->ch[0].ctx.errors,
		      (unsigned long)r->ch[0].ctx.stale);
		struct sdr_slot s = slot_of(r, 1, 24 * 1024);
		CHECK(sdr_slot_chunk_done(&s, batch), "chunk %u", batch);
		/* An event with nothing new: the old CQEs of the ring are not taken again. */
		CHECK(drain(r, 0) == 1 && r->ch[0].ctx.cqes == (batch + 1) * 8, "re-run took stale CQEs");
	}
	CHECK(r->ch[0].ctx.ci == 24 && be32toh(r->ch[0].cq_dbr) == 24, "ci %u", r->ch[0].ctx.ci);
	CHECK(be32toh(r->ch[0].rq_dbr[0]) == 24, "rq doorbell %u", be32toh(r->ch[0].rq_dbr[0]));
	CHECK(r->ch[0].ctx.chunks == 3 && r->ch[0].ctx.stale == 0, "chunks %lu", (unsigned long)r->ch[0].ctx.chunks);
	rig_free(r);

	/* More CQEs than one run's budget: it re-arms below the producer and runs again. */
	r = rig_new(1, 1, 4, 256 * 1024, 1024, 64 * 1024, 8, L10);
	arm(r, 0, 200 * 1024, 0, 0);
	for (uint32_t k = 0; k < 200; k++)
		packet(r, 0, 0, k << 4, 1024);
	int runs = drain(r, 0);
	CHECK(runs == (200 + SDR_RX_BUDGET - 1) / SDR_RX_BUDGET, "%d runs", runs);
	CHECK(r->ch[0].ctx.chunks == 4 && r->ch[0].ctx.cqes == 200, "chunks %lu", (unsigned long)r->ch[0].ctx.chunks);
	rig_free(r);
}

/* A stale generation changes nothing but its WQE is re-posted; unknown QPNs and errors. */
static void test_stale_generation(void)
{
	struct rig *r = rig_new(1, 2, 4, 8 * 1024, 1024, 2048, 4, L10);
	arm(r, 2, 4096, 6, 0);
	packet(r, 0, 1, 6u << 22 | 0u << 4, 1024); /* generation 1: stale */
	produce(r, 0, 0x999, MLX5_CQE_RESP_WR_IMM, 6u << 22, 1024); /* nobody's QP */
	produce(r, 0, qpn_of(0, 0), MLX5_CQE_RESP_ERR, 0, 0);        /* an error completion */
	drain(r, 0);
	struct channel *ch = &r->ch[0];
	struct sdr_slot s = slot_of(r, 2, 4096);
	CHECK(s.words[2] == 0 && s.words[1] == 0, "stale packet changed the slot");
	CHECK(ch->ctx.stale == 1 && ch->ctx.unknown_qpn == 1 && ch->ctx.errors == 1, "stale %lu unknown %lu errors %lu",
	      (unsigned long)ch->ctx.stale, (unsigned long)ch->ctx.unknown_qpn, (unsigned long)ch->ctx.errors);
	CHECK(be32toh(ch->rq_dbr[1]) == 1 && be32toh(ch->rq_dbr[0]) == 1, "rq doorbells %u %u", be32toh(ch->rq_dbr[0]),
	      be32toh(ch->rq_dbr[1]));
	struct mlx5_wqe_data_seg *w = (struct mlx5_wqe_data_seg *)ch->rq[1];
	CHECK(be32toh(w->byte_count) == 0 && be32toh(w->lkey) == NULL_MKEY && w->addr == 0, "re-posted WQE");
	CHECK(ch->ctx.cqes == 3 && ch->ctx.ci == 3, "cqes %lu", (unsigned long)ch->ctx.cqes);
	/* The right generation is taken. */
	packet(r, 0, 0, 6u << 22 | 1u << 4, 1024);
	drain(r, 0);
	CHECK(s.words[2] == 2, "mask %#lx", (unsigned long)s.words[2]);
	rig_free(r);
}

/* Duplicates are idempotent; the chunk's last packet stores the flag and notifies once. */
static void test_duplicates_and_last_packet(void)
{
	struct rig *r = rig_new(1, 1, 4, 8 * 1024, 1024, 2048, 4, L10);
	arm(r, 3, 4096, 3, 0);
	for (int i = 0; i < 3; i++)
		packet(r, 0, 0, 3u << 22 | 0u << 4, 1024);
	drain(r, 0);
	uint32_t per_slot[4] = {0};
	CHECK(notifications(r, 0, per_slot) == 0, "a partial chunk notified");
	for (int i = 0; i < 3; i++)
		packet(r, 0, 0, 3u << 22 | 1u << 4, 1024);
	drain(r, 0);
	struct sdr_slot s = slot_of(r, 3, 4096);
	CHECK(s.words[2] == 3 && s.words[3] == 0, "masks %#lx %#lx", (unsigned long)s.words[2], (unsigned long)s.words[3]);
	CHECK(s.words[2 + 2] == 1, "flags %#lx", (unsigned long)s.words[4]);
	CHECK(notifications(r, 0, per_slot) == 1 && per_slot[3] == 1, "notified %u times", per_slot[3]);
	CHECK(r->ch[0].ctx.chunks == 1, "chunks %lu", (unsigned long)r->ch[0].ctx.chunks);
	rig_free(r);
}

/* The user immediate is assembled from the nibbles of packets and carriers. */
static void test_immediate_from_nibbles(void)
{
	struct rig *r = rig_new(1, 1, 8, 8 * 1024, 1024, 4096, 5, L10);
	const uint32_t user = 0xcafef00d, msg = 13, slot = msg % 8;
	arm(r, slot, 3 * 1024, msg, 0);
	const uint32_t order[] = {2, 0, 2, 1, 5, 7, 3, 7, 6, 4};
	uint32_t per_slot[8] = {0};
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		uint32_t off = order[i];
		uint32_t imm = msg << 22 | off << 4 | (user >> (4 * (off % 8)) & 0xf);
		packet(r, 0, 0, imm, off < 3 ? 1024 : 0);
		drain(r, 0);
		notifications(r, 0, per_slot);
		struct sdr_slot s = slot_of(r, slot, 3 * 1024);
		uint64_t w = __atomic_load_n(&s.words[1], __ATOMIC_ACQUIRE);
		int complete = (w >> 32 & 0xff) == 0xff;
		CHECK(complete == (i == sizeof(order) / sizeof(order[0]) - 1), "complete after event %zu", i);
		if (complete)
			CHECK((uint32_t)w == user, "immediate %#x, want %#x", (uint32_t)w, user);
	}
	CHECK(r->ch[0].ctx.imms == 1 && r->ch[0].ctx.chunks == 1, "imms %lu chunks %lu", (unsigned long)r->ch[0].ctx.imms,
	      (unsigned long)r->ch[0].ctx.chunks);
	CHECK(per_slot[slot] == 2, "notified %u times (chunk, immediate)", per_slot[slot]);
	rig_free(r);
}

/* ---- several handler threads on shared slots ---- */

struct runner_arg {
	struct rig *r;
	uint32_t c;
};

static void *runner(void *p)
{
	struct runner_arg *a = p;
	struct channel *ch = &a->r->ch[a->c];
	uint32_t ci = 0, cqn;
	for (;;) {
		uint32_t pi = __atomic_load_n(&ch->pi, __ATOMIC_ACQUIRE);
		if (ci == pi) {
			if (__atomic_load_n(&ch->done, __ATOMIC_ACQUIRE) && pi == __atomic_load_n(&ch->pi, __ATOMIC_ACQUIRE))
				return NULL;
			sched_yield();
			continue;
		}
		CHECK(hostsim_thread_run(ch->thread) == HOSTSIM_RESCHEDULED, "handler finished");
		CHECK(hostsim_thread_armed(ch->thread, &ci, &cqn), "not armed");
	}
}

static void test_threads_on_shared_slots(void)
{
	enum { CH = 4, SLOTS = 8, ROUNDS = 6, PKTS = 37 };
	const uint32_t user = 0x89abcdef;
	struct rig *r = rig_new(CH, 2, SLOTS, 64 * 1024, 1024, 4096, 6, L10);
	struct runner_arg args[CH];
	uint64_t want_chunks = 0, notified = 0;
	for (uint32_t c = 0; c < CH; c++) {
		args[c] = (struct runner_arg){r, c};
		CHECK(pthread_create(&r->ch[c].runner, NULL, runner, &args[c]) == 0, "pthread");
	}
	for (uint32_t round = 0; round < ROUNDS; round++) {
		uint32_t gen = round % 2;
		/* Slot reuse while the previous round's late packets are still arriving. */
		for (uint32_t s = 0; s < SLOTS; s++) {
			uint32_t old = (round + ROUNDS - 1) * SLOTS + s;
			packet(r, s % CH, (round + 1) % 2, old << 22 | 0u << 4, 1024);
			arm(r, s, PKTS * 1024, round * SLOTS + s, gen);
		}
		for (uint32_t k = 0; k < PKTS; k++) {
			for (uint32_t s = 0; s < SLOTS; s++) {
				uint32_t imm = (round * SLOTS + s) << 22 | k << 4 | (user >> (4 * (k % 8)) & 0xf);
				packet(r, (k + s) % CH, gen, imm, 1024);
				packet(r, (k + s + 1) % CH, gen, imm, 1024); /* a duplicate on another thread */
			}
		}
		want_chunks += SLOTS * ((PKTS + 3) / 4);
		/* Wait until every slot is complete, through the flags the host reads. */
		for (uint32_t s = 0; s < SLOTS; s++) {
			struct sdr_slot sl = slot_of(r, s, PKTS * 1024);
			for (;;) {
				int done = 1;
				for (uint32_t i = 0; i < sl.geo.chunks; i++)
					done &= sdr_slot_chunk_done(&sl, i);
				uint64_t w = __atomic_load_n(&sl.words[1], __ATOMIC_ACQUIRE);
				for (uint32_t c = 0; c < CH; c++)
					notified += notifications(r, c, NULL);
				if (done && (w >> 32 & 0xff) == 0xff) {
					CHECK((uint32_t)w == user, "round %u slot %u immediate %#x", round, s, (uint32_t)w);
					break;
				}
				sched_yield();
			}
		}
	}
	for (uint32_t c = 0; c < CH; c++) {
		__atomic_store_n(&r->ch[c].done, 1, __ATOMIC_RELEASE);
		pthread_join(r->ch[c].runner, NULL);
	}
	uint64_t chunks = 0, imms = 0, cqes = 0, stale = 0;
	for (uint32_t c = 0; c < CH; c++) {
		chunks += r->ch[c].ctx.chunks, imms += r->ch[c].ctx.imms, cqes += r->ch[c].ctx.cqes, stale += r->ch[c].ctx.stale;
		CHECK(r->ch[c].ctx.errors == 0 && r->ch[c].ctx.unknown_qpn == 0, "errors");
		CHECK(be32toh(r->ch[c].rq_dbr[0]) + be32toh(r->ch[c].rq_dbr[1]) == (r->ch[c].ctx.cqes & 0xffff), "rq doorbells");
	}
	CHECK(chunks == want_chunks, "%lu chunk completions, want %lu (each exactly once)", (unsigned long)chunks,
	      (unsigned long)want_chunks);
	CHECK(imms == ROUNDS * SLOTS, "%lu immediate completions, want %d", (unsigned long)imms, ROUNDS * SLOTS);
	CHECK(cqes == ROUNDS * SLOTS * (1 + 2 * PKTS), "%lu CQEs", (unsigned long)cqes);
	for (uint32_t c = 0; c < CH; c++)
		notified += notifications(r, c, NULL);
	CHECK(notified >= chunks && notified <= chunks + imms, "%lu notifications for %lu chunks and %lu immediates",
	      (unsigned long)notified, (unsigned long)chunks, (unsigned long)imms);
	CHECK(stale >= ROUNDS * SLOTS, "%lu stale: the late packets", (unsigned long)stale);
	rig_free(r);
}

/* ---- fences ---- */

/* A fence marker publishes its number once the CQEs before it are
 * handled and re-posts its WQE; the number never moves back. */
static void test_fence_marker(void)
{
	struct rig *r = rig_new(1, 2, 4, 8 * 1024, 1024, 1024, 4, L10);
	struct channel *ch = &r->ch[0];
	prepare(r, 2, 4096);                       /* slot 2 inactive: its entry is the null mkey */
	packet(r, 0, 1, 6u << 22 | 0u << 4, 1024); /* a packet of message 6 that reached it */
	marker(r, 0, 1, 1);
	CHECK(published(r, 0) == 0, "published %u before the handler ran", published(r, 0));
	drain(r, 0);
	CHECK(published(r, 0) == 1 && ch->ctx.fences == 1, "published %u after marker 1", published(r, 0));
	CHECK(ch->ctx.stale == 1 && ch->ctx.errors == 0 && ch->ctx.cqes == 2, "stale %lu errors %lu cqes %lu",
	      (unsigned long)ch->ctx.stale, (unsigned long)ch->ctx.errors, (unsigned long)ch->ctx.cqes);
	CHECK(be32toh(ch->rq_dbr[1]) == 2, "the marker's WQE not re-posted: rq doorbell %u", be32toh(ch->rq_dbr[1]));
	struct mlx5_wqe_data_seg *w = (struct mlx5_wqe_data_seg *)(ch->rq[1] + SDR_RWQE_SIZE);
	CHECK(be32toh(w->byte_count) == 0 && be32toh(w->lkey) == NULL_MKEY, "re-posted WQE");

	/* Serial number order, across the wrap: older numbers (an abandoned
	 * fence's markers, taken late) leave it, newer ones move it. */
	const struct {
		uint32_t seq, want;
	} steps[] = {{0, 1}, {0x80000002u, 1}, {0x7fffffffu, 0x7fffffffu}, {0x80000005u, 0x80000005u},
		     {0x7fffffffu, 0x80000005u}, {0xfffffff0u, 0xfffffff0u}, {3, 3}, {0xfffffff8u, 3}};
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		marker(r, 0, i % 2, steps[i].seq);
		drain(r, 0);
		CHECK(published(r, 0) == steps[i].want, "after marker %#x: %#x, want %#x", steps[i].seq, published(r, 0),
		      steps[i].want);
	}
	CHECK(ch->ctx.fences == 9 && ch->ctx.errors == 0, "fences %lu", (unsigned long)ch->ctx.fences);

	/* A SEND-with-Imm with bytes is no marker, nor one of a QP this
	 * thread does not know. */
	produce(r, 0, qpn_of(0, 0), MLX5_CQE_RESP_SEND_IMM, 100, 8);
	produce(r, 0, 0x999, MLX5_CQE_RESP_SEND_IMM, 200, 0);
	drain(r, 0);
	CHECK(published(r, 0) == 3 && ch->ctx.fences == 9, "published %u", published(r, 0));
	CHECK(ch->ctx.errors == 1 && ch->ctx.unknown_qpn == 1, "errors %lu unknown %lu", (unsigned long)ch->ctx.errors,
	      (unsigned long)ch->ctx.unknown_qpn);
	rig_free(r);
}

/* chunks_done counts slot s's complete chunks. */
static uint32_t chunks_done(struct sdr_slot *s)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < s->geo.chunks; i++)
		n += sdr_slot_chunk_done(s, i) != 0;
	return n;
}

/*
 * The race the fence closes. Packets of message (M, G) reached the null
 * mkey before the host set the entry (one per channel, one-packet
 * chunks); their CQEs still wait in the CQs. Armed without a fence, the
 * handlers take them after the activation and their chunks read complete
 * with no data. Armed with the fence (a marker on every channel's QP of
 * G, wait for every handler to publish it, then activate) the handlers
 * drop them; four handler threads run throughout, over rounds of slot
 * reuse in both generations, and the message's own packets after the
 * activation complete it.
 */
static void test_fence_closes_arm_race(void)
{
	enum { CH = 4, SLOTS = 4, ROUNDS = 8, PKTS = 8 };
	const uint32_t user = 0x5eed1e55;

	/* Without the fence; the handlers run late, after the activation. */
	struct rig *r = rig_new(CH, 2, SLOTS, PKTS * 1024, 1024, 1024, 6, L10);
	struct sdr_slot s = prepare(r, 1, PKTS * 1024);
	for (uint32_t c = 0; c < CH; c++)
		packet(r, c, 1, 5u << 22 | c << 4, 1024);
	sdr_slot_activate(&s, 5, 1);
	for (uint32_t c = 0; c < CH; c++)
		drain(r, c);
	CHECK(chunks_done(&s) == CH, "without the fence %u chunks complete with no data, want %d (the race)",
	      chunks_done(&s), CH);
	rig_free(r);

	/* With it. */
	r = rig_new(CH, 2, SLOTS, PKTS * 1024, 1024, 1024, 6, L10);
	struct runner_arg args[CH];
	for (uint32_t c = 0; c < CH; c++) {
		args[c] = (struct runner_arg){r, c};
		CHECK(pthread_create(&r->ch[c].runner, NULL, runner, &args[c]) == 0, "pthread");
	}
	uint32_t seq = 0;
	for (uint32_t round = 0; round < ROUNDS; round++) {
		uint32_t gen = round % 2;
		for (uint32_t slot = 0; slot < SLOTS; slot++) {
			uint32_t msg = round * SLOTS + slot;
			struct sdr_slot sl = prepare(r, slot, PKTS * 1024);
			for (uint32_t c = 0; c < CH; c++)
				packet(r, c, gen, msg << 22 | c << 4, 1024);
			/* Here the host's UMR points the entry at the buffer. */
			seq++;
			for (uint32_t c = 0; c < CH; c++)
				marker(r, c, gen, seq);
			fence_wait(r, seq);
			sdr_slot_activate(&sl, msg, gen);
			CHECK(chunks_done(&sl) == 0, "round %u slot %u: %u chunks counted from the null mkey", round, slot,
			      chunks_done(&sl));
			for (uint32_t k = 0; k < PKTS; k++)
				packet(r, (k + slot) % CH, gen, msg << 22 | k << 4 | (user >> (4 * (k % 8)) & 0xf), 1024);
			for (;;) {
				uint64_t w = __atomic_load_n(&sl.words[1], __ATOMIC_ACQUIRE);
				for (uint32_t c = 0; c < CH; c++)
					notifications(r, c, NULL);
				if (chunks_done(&sl) == PKTS && (w >> 32 & 0xff) == 0xff) {
					CHECK((uint32_t)w == user, "round %u slot %u immediate %#x", round, slot, (uint32_t)w);
					break;
				}
				sched_yield();
			}
		}
	}
	for (uint32_t c = 0; c < CH; c++) {
		__atomic_store_n(&r->ch[c].done, 1, __ATOMIC_RELEASE);
		pthread_join(r->ch[c].runner, NULL);
	}
	uint64_t stale = 0, chunks = 0, fences = 0;
	for (uint32_t c = 0; c < CH; c++) {
		stale += r->ch[c].ctx.stale, chunks += r->ch[c].ctx.chunks, fences += r->ch[c].ctx.fences;
		CHECK(r->ch[c].ctx.errors == 0 && r->ch[c].ctx.unknown_qpn == 0, "errors");
		CHECK(published(r, c) == seq, "channel %u published %u, want %u", c, published(r, c), seq);
	}
	CHECK(stale == ROUNDS * SLOTS * CH, "%lu stale, want every null-mkey packet", (unsigned long)stale);
	CHECK(chunks == ROUNDS * SLOTS * PKTS, "%lu chunks, want %d", (unsigned long)chunks, ROUNDS * SLOTS * PKTS);
	CHECK(fences == ROUNDS * SLOTS * CH, "%lu markers taken", (unsigned long)fences);
	rig_free(r);
}

/* activation_reaction: the host of test_activation_mid_run, which
 * activates slot 1 for message 5 as soon as it sees fence 1 published and
 * then the message's four packets arrive. */
static void activation_reaction(struct rig *r, uint64_t haddr, uint64_t old, uint64_t now)
{
	if (haddr != (uint64_t)(uintptr_t)&r->notify[0]->fence || (uint32_t)old == (uint32_t)now || (uint32_t)now != 1)
		return;
	struct sdr_slot s = slot_of(r, 1, 4096);
	sdr_slot_activate(&s, 5, 0);
	for (uint32_t k = 0; k < 4; k++)
		packet(r, 0, 0, 5u << 22 | k << 4, 1024);
}

/* The host activates a slot while the handler is still in the run that
 * published the fence, and the message's packets come in behind it: the
 * handler's view of the slot's state is older than the activation, and
 * it must look again before it drops them as stale. A packet that reached
 * the slot before the marker (dropped: the slot is inactive) makes the
 * handler load the state in this run before the activation, so that its
 * view holds the inactive state rather than a word it fetches afresh at
 * its first load. */
static void test_activation_mid_run(void)
{
	struct rig *r = rig_new(1, 1, 4, 4096, 1024, 1024, 4, L10);
	prepare(r, 1, 4096);
	r->react = activation_reaction;
	packet(r, 0, 0, 5u << 22 | 3u << 4, 1024);
	marker(r, 0, 0, 1);
	drain(r, 0);
	struct channel *ch = &r->ch[0];
	CHECK(ch->ctx.cqes == 6, "%lu CQEs taken: the packets behind the marker were not produced", (unsigned long)ch->ctx.cqes);
	CHECK(ch->ctx.chunks == 4 && ch->ctx.stale == 1,
	      "%lu chunks, %lu stale (want 4, and the packet before the marker): the handler judged the packets by a stale view",
	      (unsigned long)ch->ctx.chunks, (unsigned long)ch->ctx.stale);
	struct sdr_slot s = slot_of(r, 1, 4096);
	CHECK(chunks_done(&s) == 4, "%u chunks visible to the host", chunks_done(&s));
	rig_free(r);
}

/* rearm_reaction: the host of test_rearm_mid_pass. As channel 0's handler
 * makes its first store of slot 2 in a round visible, the host re-arms
 * slot 1 for message rearm_msg and channel 1's handler takes that
 * message's four packets (a second DPA thread, run inside the first's
 * run). */
static int rearmed;
static uint32_t rearm_msg;
static void rearm_reaction(struct rig *r, uint64_t haddr, uint64_t old, uint64_t now)
{
	(void)old, (void)now;
	uint32_t slot, idx;
	if (rearmed || !engine_word(r, haddr, &slot, &idx) || slot != 2)
		return;
	rearmed = 1;
	arm(r, 1, 4096, rearm_msg, 0);
	for (uint32_t k = 0; k < 4; k++)
		packet(r, 1, 0, rearm_msg << 22 | k << 4, 1024);
	drain(r, 1);
}

/* The host re-arms a slot while a handler is inside a run that began
 * with the slot's previous receive, and another thread counts the new
 * receive's packets meanwhile; then a late packet of the previous
 * receive reaches the first handler, whose view of the slot is still the
 * one from the start of its run. Its record (the other thread's) differs
 * from that view: it must read the host's words afresh before it takes
 * the record for a stale one to clear, or it wipes the new receive's
 * count and takes the late packet. In rounds: the strict model may
 * fetch the state word only at the late packet's load, which then sees
 * the re-arm by itself. */
static void test_rearm_mid_pass(void)
{
	enum { ROUNDS = 16 };
	struct rig *r = rig_new(2, 1, 4, 4096, 1024, 1024, 4, L10);
	struct sdr_rx_ctx *x0 = &r->ch[0].ctx, *x1 = &r->ch[1].ctx;
	r->react = rearm_reaction;
	for (uint32_t round = 0; round < ROUNDS; round++) {
		uint32_t late = 1 + 8 * round, cue = 2 + 8 * round; /* slots 1 and 2 */
		rearm_msg = 5 + 8 * round;                          /* slot 1 again */
		arm(r, 1, 4096, late, 0);
		arm(r, 2, 4096, cue, 0);
		uint64_t chunks0 = x0->chunks, stale0 = x0->stale, chunks1 = x1->chunks;
		packet(r, 0, 0, cue << 22, 1024); /* slot 2's chunk 0: its store is the host's cue */
		packet(r, 0, 0, late << 22, 1024); /* chunk 0 of slot 1's receive before the re-arm, late */
		rearmed = 0;
		drain(r, 0);
		CHECK(rearmed, "round %u: the host never saw a store of slot 2", round);
		CHECK(x1->chunks - chunks1 == 4, "round %u: channel 1 counted %lu of message %u's chunks", round,
		      (unsigned long)(x1->chunks - chunks1), rearm_msg);
		CHECK(x0->chunks - chunks0 == 1 && x0->stale - stale0 == 1,
		      "round %u: channel 0: %lu chunks, %lu stale: it took the late packet of the receive re-armed over", round,
		      (unsigned long)(x0->chunks - chunks0), (unsigned long)(x0->stale - stale0));
		struct sdr_slot s = slot_of(r, 1, 4096);
		CHECK(chunks_done(&s) == 4, "round %u: %u of message %u's chunks visible to the host", round, chunks_done(&s),
		      rearm_msg);
		notifications(r, 0, NULL);
		notifications(r, 1, NULL);
	}
	rig_free(r);
}

/*
 * The host's arm path against a handler that holds a view of a slot from
 * before the slot was disarmed. Channel 0's handler has counted a packet
 * of message old on slot 1 (its record is old's); in its next run it
 * takes packet A of old; as it loads the slot's length word (it has
 * accepted A by its view of the state) the host disarms the slot and
 * begins to re-arm it, sends the marker of the arm path's fence and a
 * late packet B of old arrives behind it; when the handler publishes the
 * marker the host finishes the arm (the slot now holds message new).
 * Then channel 1's handler counts new's packet at offset 2. The slot must
 * end holding new's chunk 2 and nothing of old's (chunks 0, 1 and 3).
 *
 * The arm path bumps the slot's epoch before the fence and clears the
 * slot's words (and writes its length word) after it: A lands before the
 * clear, and B finds the epoch moved and reads the slot afresh. The old
 * arm path cleared before the fence, and nothing told the handler: B,
 * taken after the marker by a view the handler never refreshed, lands in
 * the new receive's words (TestHandlerMutations runs this test with the
 * old path, and with a handler that ignores the epoch). In rounds, as
 * the strict model's choices vary.
 */
static struct {
	uint64_t length; /* the host address of slot 1's length word */
	uint32_t old, new, seq;
	int armed, began, finished; /* armed: the next load of the length word begins the re-arm */
} late;

static void late_packet_loading(void *arg, uint64_t haddr)
{
	struct rig *r = arg;
	if (haddr != late.length || !late.armed || late.began)
		return;
	late.began = 1;
	struct sdr_slot s = slot_of(r, 1, 4096);
	sdr_slot_deactivate(&s); /* Disarm */
	__atomic_store_n(&r->epochs[1], r->epochs[1] + 1, __ATOMIC_RELEASE);
	marker(r, 0, 0, late.seq);
	packet(r, 0, 0, late.old << 22 | 1u << 4, 1024); /* B */
}

static void late_packet_reaction(struct rig *r, uint64_t haddr, uint64_t old, uint64_t now)
{
	if (haddr != (uint64_t)(uintptr_t)&r->notify[0]->fence || (uint32_t)old == (uint32_t)now || (uint32_t)now != late.seq)
		return;
	late.finished = 1;
	uint64_t st = __atomic_load_n(&slot_of(r, 1, 4096).words[0], __ATOMIC_ACQUIRE);
	CHECK(st == 0, "slot 1's state word %#lx, the host disarmed it: a handler's writeback overwrote it", (unsigned long)st);
	struct sdr_slot s = prepare(r, 1, 4096);
	sdr_slot_activate(&s, late.new, 0);
}

static void test_late_packet_rearm(void)
{
	enum { ROUNDS = 16 };
	struct rig *r = rig_new(2, 1, 4, 4096, 1024, 1024, 4, L10);
	late.length = (uint64_t)(uintptr_t)&r->lengths[1];
	hostsim_window_loading(late_packet_loading, r);
	r->react = late_packet_reaction;
	for (uint32_t round = 0; round < ROUNDS; round++) {
		late.old = 1 + 8 * round, late.new = 5 + 8 * round, late.seq = round + 1;
		late.armed = late.began = late.finished = 0;
		arm(r, 1, 4096, late.old, 0);
		packet(r, 0, 0, late.old << 22 | 3u << 4, 1024);
		drain(r, 0);
		late.armed = 1;
		packet(r, 0, 0, late.old << 22, 1024); /* A */
		drain(r, 0);
		CHECK(late.began && late.finished, "round %u: the host's re-arm never ran (began %d, finished %d)", round,
		      late.began, late.finished);
		packet(r, 1, 0, late.new << 22 | 2u << 4, 1024);
		drain(r, 1);
		struct sdr_slot s = slot_of(r, 1, 4096);
		CHECK(s.words[0] == sdr_key(late.new, 0) && s.words[2] == 0 && s.words[3] == 0 && s.words[4] == 1 &&
			      s.words[5] == 0 && sdr_slot_chunk_done(&s, 2) && chunks_done(&s) == 1,
		      "round %u: slot 1 holds masks %#lx %#lx %#lx %#lx, %u chunks complete: a packet of message %u reached "
		      "message %u's words",
		      round, (unsigned long)s.words[2], (unsigned long)s.words[3], (unsigned long)s.words[4],
		      (unsigned long)s.words[5], chunks_done(&s), late.old, late.new);
		notifications(r, 0, NULL);
		notifications(r, 1, NULL);
	}
	hostsim_window_loading(NULL, NULL);
	rig_free(r);
}

/* rearm_loading: the host of test_length_after_state. As channel 0's
 * handler is about to load slot 1's state word for the second time in a
 * run (sync_slot's load after its read-invalidate), the host re-arms the
 * slot for the same message with a longer length, the length word first
 * as the host always writes it. */
static struct {
	uint64_t state; /* the host address of slot 1's state word */
	int loads;      /* its loads in the current run */
	uint32_t msg;
} rearm_at;
static void rearm_loading(void *arg, uint64_t haddr)
{
	if (haddr == rearm_at.state && ++rearm_at.loads == 2)
		arm(arg, 1, 4096, rearm_at.msg, 0);
}

/*
 * A handler that reads a slot's state word must take the length word
 * the host wrote before that state, never an older one. Each round arms
 * slot 1 for one 1024-byte packet and sends that message a packet at
 * offset 2; the host re-arms the same key for 4096 bytes just before the
 * handler's second load of the state word. A length loaded after that
 * state makes the packet chunk 2 of four; the length fetched before the
 * re-arm (a length load performed ahead of the state load) finds it out
 * of range and marks the new receive truncated.
 */
static void test_length_after_state(void)
{
	enum { ROUNDS = 32 };
	struct rig *r = rig_new(1, 1, 4, 4096, 1024, 1024, 4, L10);
	rearm_at.state = (uint64_t)(uintptr_t)slot_of(r, 1, 4096).words;
	hostsim_window_loading(rearm_loading, r);
	for (uint32_t round = 0; round < ROUNDS; round++) {
		rearm_at.msg = 1 + 4 * round, rearm_at.loads = 0;
		arm(r, 1, 1024, rearm_at.msg, 0);
		packet(r, 0, 0, rearm_at.msg << 22 | 2u << 4, 1024);
		drain(r, 0);
		notifications(r, 0, NULL);
		CHECK(rearm_at.loads >= 2, "round %u: the handler loaded slot 1's state %d times, want a reload", round,
		      rearm_at.loads);
		struct sdr_slot s = slot_of(r, 1, 4096);
		CHECK(!(s.words[1] & SDR_TRUNCATED_BIT) && sdr_slot_chunk_done(&s, 2) && chunks_done(&s) == 1,
		      "round %u: the packet judged by the length before the re-arm (immediate word %#lx, %u chunks)", round,
		      (unsigned long)s.words[1], chunks_done(&s));
		CHECK(r->ch[0].ctx.chunks == round + 1 && r->ch[0].ctx.stale == 0, "round %u: %lu chunks, %lu stale", round,
		      (unsigned long)r->ch[0].ctx.chunks, (unsigned long)r->ch[0].ctx.stale);
	}
	hostsim_window_loading(NULL, NULL);
	rig_free(r);
}

/* The notification ring: the handler reads the host's consumer index
 * afresh at each event, so a ring the host keeps draining never
 * overflows; a full one counts each notification it drops instead of
 * overwriting entries the host has not consumed. The host takes a count
 * past the one it acknowledged as "look at every slot": the chunk flags
 * stored before it must be visible first, which laps of acknowledging it
 * and filling the ring again check each time it moves (the strict model
 * performs the stores of one writeback in a random order). */
static void test_notify_overflow(void)
{
	struct rig *r = rig_new(1, 1, 2, 512 * 1024, 1024, 1024, 3, L10); /* 2^7 entries */
	arm(r, 1, 512 * 1024, 1, 0);
	struct sdr_rx_notify *n = r->notify[0];
	uint32_t k = 0;
	for (int phase = 0; phase < 3; phase++) {
		for (uint32_t end = k + (phase < 2 ? 100 : 200); k < end; k++) {
			packet(r, 0, 0, 1u << 22 | k << 4, 1024); /* one packet, one chunk */
			if (k % 8 == 7)
				drain(r, 0);
		}
		drain(r, 0);
		if (phase < 2) {
			CHECK(unseen_overflows(n) == 0, "phase %d: overflow though the host consumed", phase);
			CHECK(notifications(r, 0, NULL) == 100, "phase %d: notifications", phase);
		}
	}
	CHECK(r->ch[0].ctx.chunks == 400, "chunks %lu", (unsigned long)r->ch[0].ctx.chunks);
	CHECK(unseen_overflows(n) == 200 - 128, "%lu overflows counted for 200 notifications into 128 entries",
	      (unsigned long)unseen_overflows(n));
	CHECK(__atomic_load_n(&n->pi, __ATOMIC_ACQUIRE) == 200 + 128, "producer index %lu, want the consumer's 200 + 128",
	      (unsigned long)n->pi);
	for (uint32_t lap = 0; lap < 16; lap++) {
		acknowledge(n);
		notifications(r, 0, NULL);
		uint32_t msg = 3 + 2 * lap; /* slot 1 again */
		arm(r, 1, 512 * 1024, msg, 0);
		for (uint32_t k = 0; k <= 128; k++) {
			packet(r, 0, 0, msg << 22 | k << 4, 1024);
			if (k % 8 == 7)
				drain(r, 0);
		}
		drain(r, 0);
		CHECK(unseen_overflows(n) == 1, "lap %u: %lu overflows after 129 unconsumed notifications", lap,
		      (unsigned long)unseen_overflows(n));
	}
	rig_free(r);
}

/*
 * consumer_reaction: the host of test_consumer_during_run, reading the
 * notification ring and the slots the moment a handler's store becomes
 * visible, on the handler's thread inside its run (as the host's poller
 * runs beside a DPA thread). It checks, at every store it sees, that:
 *
 *   - a chunk flag is set only over that chunk's full packet mask;
 *   - every entry up to the producer index names the slot the test sent
 *     that packet to (an index ahead of its entry reads a stale one);
 *   - the words the host owns are as the host left them: the consumer
 *     index it stores as it consumes (two entries at a time), and each
 *     slot's state word, which
 *     it stores as it re-arms a slot the moment the slot's last
 *     notification of a round is consumed.
 */
enum { CONSUMER_SLOTS = 3, CONSUMER_PKTS = 8, CONSUMER_ROUNDS = 6 };
static int lines_default; /* the model the other tests run on: $HOSTSIM_LINES (main) */
static struct {
	const char *model;                     /* "words" or "lines" (hostsim_strict_lines) */
	uint64_t ci;                           /* what the host stored in the ring's consumer index */
	uint32_t round[1 + CONSUMER_SLOTS];    /* the message round each slot is armed for */
	uint32_t notified[1 + CONSUMER_SLOTS]; /* notifications of that round consumed */
} consumer;

static uint32_t consumer_msg(uint32_t slot, uint32_t round) { return 4 * round + slot; }

static void consumer_reaction(struct rig *r, uint64_t haddr, uint64_t old, uint64_t now)
{
	struct sdr_rx_notify *n = r->notify[0];
	uint32_t slot, idx;
	if (engine_word(r, haddr, &slot, &idx)) {
		struct sdr_slot s = slot_of(r, slot, CONSUMER_PKTS * 1024);
		for (uint32_t c = 0; idx == SDR_HEADER_WORDS + s.geo.chunks && c < s.geo.chunks; c++)
			if ((now & ~old) >> c & 1)
				CHECK(__atomic_load_n(&s.words[SDR_HEADER_WORDS + c], __ATOMIC_ACQUIRE) == sdr_full_mask(&s.geo, c),
				      "%s: slot %u chunk %u: its flag is visible, its packet mask %#lx is not full", consumer.model, slot, c,
				      (unsigned long)s.words[SDR_HEADER_WORDS + c]);
	}
	/* The host drains the ring two entries at a time: the handler then
	 * publishes an entry while the host's consumer index is newer than
	 * the one it loaded. */
	uint64_t pi = __atomic_load_n(&n->pi, __ATOMIC_ACQUIRE);
	for (; pi % 2 == 0 && consumer.ci < pi; consumer.ci++) {
		uint32_t want = 1 + (uint32_t)(consumer.ci % CONSUMER_SLOTS);
		uint32_t got = __atomic_load_n(&n->slot[consumer.ci & ((1u << n->log_cap) - 1)], __ATOMIC_RELAXED);
		CHECK(got == want, "%s: entry %lu names slot %u, want %u: the producer index is visible before its entry",
		      consumer.model, (unsigned long)consumer.ci, got, want);
		struct sdr_slot s = slot_of(r, got, CONSUMER_PKTS * 1024);
		CHECK(chunks_done(&s) > consumer.notified[got], "%s: slot %u notified %u times with %u chunks complete", consumer.model, got,
		      consumer.notified[got] + 1, chunks_done(&s));
		if (++consumer.notified[got] == CONSUMER_PKTS) {
			consumer.notified[got] = 0;
			arm(r, got, CONSUMER_PKTS * 1024, consumer_msg(got, ++consumer.round[got]), 0);
		}
		__atomic_store_n(&n->ci, consumer.ci + 1, __ATOMIC_RELEASE);
	}
	CHECK(__atomic_load_n(&n->ci, __ATOMIC_ACQUIRE) == consumer.ci,
	      "%s: the consumer index the host stored, %lu, reads %lu: a handler's writeback overwrote it",
	      consumer.model, (unsigned long)consumer.ci, (unsigned long)n->ci);
	for (uint32_t slot = 1; slot <= CONSUMER_SLOTS; slot++) {
		struct sdr_slot s = slot_of(r, slot, CONSUMER_PKTS * 1024);
		uint64_t st = __atomic_load_n(&s.words[0], __ATOMIC_ACQUIRE);
		CHECK(st == sdr_key(consumer_msg(slot, consumer.round[slot]), 0),
		      "%s: slot %u's state word %#lx is not the host's %#lx: a handler's writeback overwrote it", consumer.model, slot,
		      (unsigned long)st, (unsigned long)sdr_key(consumer_msg(slot, consumer.round[slot]), 0));
	}
}

/*
 * The host consumes the notification ring and re-arms slots while the
 * handler runs, once with stores moving word by word and once line by
 * line (hostsim_strict_lines), where a line both sides write loses the
 * host's stores: see consumer_reaction for what it checks.
 * Three slots take one-packet chunks in turn, a round of eight per slot
 * and six rounds, four CQEs per handler run, so the ring (64 entries)
 * laps twice and a slot is re-armed in the middle of the run that
 * completes it.
 */
static void test_consumer_during_run(void)
{
	for (int lines = 0; lines < 2; lines++) {
		hostsim_strict_lines(lines);
		struct rig *r = rig_new(1, 1, 4, CONSUMER_PKTS * 1024, 1024, 1024, 2, L10);
		memset(&consumer, 0, sizeof(consumer));
		consumer.model = lines ? "lines" : "words";
		for (uint32_t slot = 1; slot <= CONSUMER_SLOTS; slot++)
			arm(r, slot, CONSUMER_PKTS * 1024, consumer_msg(slot, 0), 0);
		r->react = consumer_reaction;
		for (uint32_t round = 0; round < CONSUMER_ROUNDS; round++)
			for (uint32_t k = 0; k < CONSUMER_PKTS * CONSUMER_SLOTS; k++) {
				uint32_t slot = 1 + k % CONSUMER_SLOTS;
				packet(r, 0, 0, consumer_msg(slot, round) << 22 | (k / CONSUMER_SLOTS) << 4 | 0xa, 1024);
				if (k % 4 == 3)
					drain(r, 0);
			}
		CHECK(consumer.ci == CONSUMER_ROUNDS * CONSUMER_PKTS * CONSUMER_SLOTS && r->ch[0].ctx.stale == 0,
		      "%s: %lu notifications consumed, %lu packets stale", consumer.model, (unsigned long)consumer.ci,
		      (unsigned long)r->ch[0].ctx.stale);
		rig_free(r);
	}
	hostsim_strict_lines(lines_default);
}

/*
 * window_ops counts the window operations of messages received in order
 * and prints them with the packets, completed chunks, messages and
 * handler runs behind them, a line per chunk size; handler_test.go
 * compares them with the cost model's counts (hwnic/dpa's HandlerCost).
 * Each message: 14 chunks, so that its words fill whole lines (a shorter
 * last line stores fewer words than the model's whole line), and an
 * immediate whose nibbles come with its first 8 packets; runs of a full
 * budget. At 16-packet chunks the immediate's last nibble ends no chunk
 * (a notification of its own); at 8-packet chunks it ends the first (one
 * notification for both).
 */
static void window_ops(uint32_t chunk_pkts)
{
	enum { MSGS = 3, CHUNKS = 14 };
	const uint32_t user = 0x5eed1e55, pkts = CHUNKS * chunk_pkts;
	struct rig *r = rig_new(1, 1, 4, pkts * 1024, 1024, chunk_pkts * 1024, 6, L10);
	CHECK(r->slot_words % SDR_RX_LINE_WORDS == 1, "slot words %u: the last line is not whole", r->slot_words);
	struct hostsim_ops before, after;
	hostsim_ops_get(&before);
	uint32_t runs = 0, notified = 0;
	for (uint32_t m = 1; m <= MSGS; m++) {
		arm(r, m, pkts * 1024, m, 0);
		for (uint32_t off = 0; off < pkts; off++) {
			packet(r, 0, 0, m << 22 | off << 4 | (user >> (4 * (off % 8)) & 0xf), 1024);
			if (off % SDR_RX_BUDGET == SDR_RX_BUDGET - 1 || off == pkts - 1)
				runs += (uint32_t)drain(r, 0);
		}
		notified += notifications(r, 0, NULL);
	}
	hostsim_ops_get(&after);
	const struct sdr_rx_ctx *x = &r->ch[0].ctx;
	uint32_t want = MSGS * (CHUNKS + (8 % chunk_pkts != 0));
	CHECK(x->chunks == MSGS * CHUNKS && x->imms == MSGS && notified == want && x->stale == 0,
	      "chunks %lu, immediates %lu, notifications %u (want %u), stale %lu", (unsigned long)x->chunks,
	      (unsigned long)x->imms, notified, want, (unsigned long)x->stale);
	printf("ops chunk_packets=%u packets=%u chunks=%u messages=%u notifications=%u runs=%u loads=%lu stores=%lu "
	       "writebacks=%lu read_invalidates=%lu window_configs=%lu ptr_acquires=%lu\n",
	       chunk_pkts, MSGS * pkts, MSGS * CHUNKS, MSGS, notified, runs, (unsigned long)(after.loads - before.loads),
	       (unsigned long)(after.stores - before.stores), (unsigned long)(after.writebacks - before.writebacks),
	       (unsigned long)(after.read_invalidates - before.read_invalidates),
	       (unsigned long)(after.window_configs - before.window_configs),
	       (unsigned long)(after.ptr_acquires - before.ptr_acquires));
	rig_free(r);
}

static void test_window_ops(void)
{
	window_ops(16);
	window_ops(8);
}

int main(int argc, char **argv)
{
	/* The strict window model, seeded by $HOSTSIM_SEED (default 1),
	 * moving lines rather than words when $HOSTSIM_LINES is 1. */
	const char *seed = getenv("HOSTSIM_SEED"), *lines = getenv("HOSTSIM_LINES");
	hostsim_strict_windows(seed ? strtoull(seed, NULL, 0) : 1, visible, NULL);
	lines_default = lines && strcmp(lines, "1") == 0;
	hostsim_strict_lines(lines_default);
	/* Tests marked named run only when named (they print more than "ok"). */
	static const struct {
		const char *name;
		void (*fn)(void);
		int named;
	} tests[] = {
		{"cqe_layout", test_cqe_layout, 0},
		{"owner_wrap", test_owner_wrap, 0},
		{"stale_generation", test_stale_generation, 0},
		{"duplicates_and_last_packet", test_duplicates_and_last_packet, 0},
		{"immediate_from_nibbles", test_immediate_from_nibbles, 0},
		{"threads_on_shared_slots", test_threads_on_shared_slots, 0},
		{"fence_marker", test_fence_marker, 0},
		{"fence_closes_arm_race", test_fence_closes_arm_race, 0},
		{"notify_overflow", test_notify_overflow, 0},
		{"activation_mid_run", test_activation_mid_run, 0},
		{"rearm_mid_pass", test_rearm_mid_pass, 0},
		{"length_after_state", test_length_after_state, 0},
		{"consumer_during_run", test_consumer_during_run, 0},
		{"late_packet_rearm", test_late_packet_rearm, 0},
		{"window_ops", test_window_ops, 1},
	};
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		if (argc > 1 ? strcmp(argv[1], tests[i].name) != 0 : tests[i].named)
			continue;
		tests[i].fn();
		printf("ok %s\n", tests[i].name);
	}
	return 0;
}
