/*
 * handler.c — SDR's RX event handler for the BlueField-3 DPA (FlexIO
 * device API). One thread per channel CQ: on each completion event it
 * polls the CQ by owner bit, runs the per-packet engine (engine.h) for
 * every responder WRITE-with-Imm on the slot its immediate names,
 * reports completed chunks and immediates to the host, re-posts the
 * consumed receive WQE and rings that QP's receive doorbell record, then
 * updates the CQ doorbell record, re-arms the CQ and reschedules.
 *
 * The per-packet state of the slots lives in DPA memory, one record per
 * slot shared by the QP's channel threads under a per-slot spin lock
 * (sdr_rx.h); the handler publishes what a packet changed to the slot's
 * engine words in host memory, through a FlexIO window, with plain
 * stores and window writebacks, so that the host reads chunk flags,
 * packet masks and the merged immediate in the Go engine's layout. No
 * read-modify-write reaches host memory and there is no
 * compare-and-swap.
 *
 * A zero-length SEND-with-Imm on one of the channel's QPs is a fence
 * marker (fence below): the handler publishes its immediate, so that the
 * host knows how far it has got in its CQ.
 *
 * Built with dpacc for the DPA (make dpa), and with gcc against
 * hostsim/, which implements exactly the flexio_dev_* calls used here.
 */
#include "window.h"

#include "engine.h"
#include "mlx5.h"
#include "sdr_rx.h"

flexio_dev_event_handler_t sdr_rx_handler;

/*
 * setup configures the thread's window entity 0 and acquires the host
 * areas through it; 0 on success. It runs at every event, as the public
 * FlexIO datapaths do: a thread's window configuration is not kept
 * across its runs.
 */
static int setup(struct sdr_rx_ctx *c)
{
	if (flexio_dev_window_config(FLEXIO_DEV_WINDOW_ENTITY_0, (uint16_t)c->window_id, c->window_mkey) !=
		    FLEXIO_DEV_STATUS_SUCCESS ||
	    flexio_dev_window_ptr_acquire(FLEXIO_DEV_WINDOW_ENTITY_0, c->slots_haddr, &c->slots) !=
		    FLEXIO_DEV_STATUS_SUCCESS ||
	    flexio_dev_window_ptr_acquire(FLEXIO_DEV_WINDOW_ENTITY_0, c->lengths_haddr, &c->lengths) !=
		    FLEXIO_DEV_STATUS_SUCCESS ||
	    flexio_dev_window_ptr_acquire(FLEXIO_DEV_WINDOW_ENTITY_0, c->notify_haddr, &c->notify) !=
		    FLEXIO_DEV_STATUS_SUCCESS)
		return -1;
	return 0;
}

/*
 * notify tells the host to look at slot: the entry, a writeback, then
 * the producer index, then a writeback, so that the host never reads an
 * index ahead of its entry. The consumer index is the host's: read after
 * the event's read-invalidate.
 */
static void notify(struct sdr_rx_ctx *c, uint32_t slot)
{
	struct sdr_rx_notify *n = (struct sdr_rx_notify *)c->notify;
	uint64_t pi = c->notify_pi, ci = win_load(&n->ci);
	if (pi - ci >= (1ull << n->log_cap)) {
		window_store(&n->overflows, ++c->overflows, __ATOMIC_RELEASE);
		__dpa_thread_window_writeback();
		return;
	}
	window_store(&n->slot[pi & ((1ull << n->log_cap) - 1)], slot, __ATOMIC_RELAXED);
	__dpa_thread_window_writeback();
	window_store(&n->pi, pi + 1, __ATOMIC_RELEASE);
	__dpa_thread_window_writeback();
	c->notify_pi = pi + 1;
}

/*
 * sync_slot makes the handlers' record of slot (d, in DPA memory, its lock
 * held) belong to the receive the host has armed there: host state word
 * st and length word lw, in the slot's current epoch. A record of an
 * older receive is cleared. The host writes the length word before it
 * activates the slot; a state word or an epoch that differs from the
 * record's makes the handler re-read the state with the length word
 * after a read fence that orders them after the epoch's load (DPA
 * memory), so that the pair is one receive's and no older than the
 * epoch: a thread whose view is from before the slot was disarmed (its
 * run began before, or it took the arm path's marker since) must not
 * take a late packet of the old receive for the one armed after the
 * bump (sdr_rx.h). The record is cleared only if the pair still differs
 * then: a thread whose view was stale (a late duplicate of the slot's
 * previous receive, accepted by that view) must not wipe what other
 * threads already counted for the receive armed since. Returns the
 * length word the record now belongs to.
 */
static uint64_t sync_slot(struct sdr_rx_ctx *c, uint64_t *d, const uint64_t *host, uint32_t slot, uint64_t *st)
{
	uint64_t *words = d + SDR_RX_SLOT_HDR_WORDS;
	uint64_t epoch = sdr_load((const uint64_t *)c->dpa_epochs + slot);
	uint64_t lw = win_load((const uint64_t *)c->lengths + slot);
	if (words[0] == (*st & ~SDR_INFLIGHT_MASK) && d[1] == lw && d[2] == epoch)
		return lw;
	__dpa_thread_fence(__DPA_SYSTEM, __DPA_R, __DPA_R);
	*st = win_load(host);
	__dpa_thread_fence(__DPA_MMIO, __DPA_R, __DPA_R);
	lw = win_load((const uint64_t *)c->lengths + slot);
	d[2] = epoch;
	if (words[0] == (*st & ~SDR_INFLIGHT_MASK) && d[1] == lw)
		return lw;
	for (uint32_t i = 0; i < c->slot_words; i++)
		words[i] = 0;
	words[0] = *st & ~SDR_INFLIGHT_MASK;
	d[1] = lw;
	return lw;
}

/*
 * publish_line stores to the host the line of the slot's host words that
 * holds engine word i (i > 0: never the state word's line), every word
 * of it from the record: the lock is held, so the record has everything
 * the handlers published, and a writeback that moves the whole line
 * moves no stale word of this thread's copy. Flag word f goes without
 * the bits of held, not yet published.
 */
static void publish_line(const struct sdr_slot *s, uint32_t slot_words, uint64_t *host, uint32_t i, uint32_t f,
			 uint64_t held)
{
	uint32_t first = (i + SDR_RX_STATE_WORD) / SDR_RX_LINE_WORDS * SDR_RX_LINE_WORDS - SDR_RX_STATE_WORD;
	for (uint32_t j = first; j < first + SDR_RX_LINE_WORDS && j < slot_words; j++) {
		if (j == f)
			window_store(&host[j], s->words[j] & ~held, __ATOMIC_RELEASE);
		else
			window_store(&host[j], s->words[j], __ATOMIC_RELAXED);
	}
}

/*
 * publish copies what packet changed in the record to the host's words
 * of the slot, in the order that makes a published bit mean its data:
 * the lines of the immediate and of the chunk's packet mask, a
 * writeback, then the line of the chunk's flag word, a writeback. The
 * lock is held, so the host sees each word's values in the order the
 * handlers produced them.
 */
static void publish(const struct sdr_slot *s, uint32_t slot_words, uint64_t *host, uint32_t off, enum sdr_result r,
		    int imm_changed)
{
	const struct sdr_geometry *g = &s->geo;
	int masked = r == SDR_PACKET || r == SDR_CHUNK_COMPLETE;
	if (!imm_changed && !masked)
		return;
	uint32_t chunk = off / g->chunk_pkts, f = SDR_HEADER_WORDS + g->chunks + chunk / 64;
	uint64_t done = r == SDR_CHUNK_COMPLETE ? 1ull << (chunk % 64) : 0;
	if (imm_changed)
		publish_line(s, slot_words, host, 1, f, done);
	if (masked)
		publish_line(s, slot_words, host, SDR_HEADER_WORDS + chunk, f, done);
	__dpa_thread_window_writeback();
	if (!done)
		return;
	publish_line(s, slot_words, host, f, f, 0);
	__dpa_thread_window_writeback();
}

/*
 * packet runs the engine for one WRITE-with-Imm of generation gen on the
 * slot's record in DPA memory, under the slot's lock, and publishes the
 * change to the host. The host's state word (through the window) says
 * whether the slot takes the packet.
 */
static void packet(struct sdr_rx_ctx *c, uint32_t gen, uint32_t imm, uint32_t byte_count)
{
	struct sdr_layout l = {c->msg_id_bits, c->offset_bits, c->nibble_bits};
	uint32_t msg_id, off, nibble;
	sdr_layout_unpack(l, imm, &msg_id, &off, &nibble);
	uint32_t slot = msg_id & (c->max_messages - 1);
	uint64_t *host = (uint64_t *)c->slots + slot * sdr_rx_slot_stride(c->slot_words) + SDR_RX_STATE_WORD;
	uint64_t *d = (uint64_t *)c->dpa_slots + (uint64_t)slot * (SDR_RX_SLOT_HDR_WORDS + c->slot_words);
	uint64_t st = win_load(host);
	if (!sdr_slot_accepts(st, l, gen, imm)) {
		/* The host may have armed the slot since this thread last
		 * read-invalidated (earlier in this run): look again before
		 * dropping the packet as stale. */
		__dpa_thread_window_read_inv();
		st = win_load(host);
		if (!sdr_slot_accepts(st, l, gen, imm)) {
			c->stale++;
			return;
		}
	}
	spin_lock((struct spinlock_s *)d);
	uint64_t lw = sync_slot(c, d, host, slot, &st);
	enum sdr_result r = SDR_STALE;
	int imm_done = 0;
	struct sdr_slot s = {.words = d + SDR_RX_SLOT_HDR_WORDS, .layout = l};
	if (!sdr_slot_accepts(st, l, gen, imm)) {
		c->stale++;
	} else if (sdr_geometry_init(&s.geo, (uint32_t)lw, c->mtu, c->chunk_size) == 0 &&
		   sdr_geometry_words(&s.geo) <= c->slot_words) {
		uint64_t imm_word = s.words[1];
		r = sdr_slot_apply(&s, off, nibble, byte_count, &imm_done);
		publish(&s, c->slot_words, host, off, r, s.words[1] != imm_word);
	} else {
		r = SDR_OUT_OF_RANGE;
	}
	spin_unlock((struct spinlock_s *)d);
	c->chunks += r == SDR_CHUNK_COMPLETE;
	c->imms += imm_done != 0;
	if (r == SDR_CHUNK_COMPLETE || r == SDR_OUT_OF_RANGE || imm_done)
		notify(c, slot);
}

/*
 * fence publishes fence marker seq: this thread has handled every CQE
 * before it in its CQ. The host arms a receive by pointing the entry of
 * (generation, message) at the buffer, then sends every channel's QP of
 * that generation a marker from itself and waits until each channel's
 * published number reaches its own before it activates the slot. That
 * makes the activation safe on mlx5: a packet that reached the null
 * mkey did so before the entry's UMR completed, so before the marker was
 * posted; a QP executes its packets in order and writes their CQEs in
 * the order they consumed receive WQEs, the CQ keeps that order, and
 * this handler takes its CQ in order. So the packet's CQE is before the
 * marker's, and was handled (dropped: the slot was inactive) by the time
 * the marker is published. Everything those CQEs published was written
 * back before, and the number is written back after.
 *
 * Markers of a fence the host gave up on may be taken after a later one
 * (another generation's QP, no order between QPs): the number only moves
 * forward. This thread is the only writer; it keeps the number in DPA
 * memory rather than reading its own window store back.
 */
static void fence(struct sdr_rx_ctx *c, uint32_t seq)
{
	struct sdr_rx_notify *n = (struct sdr_rx_notify *)c->notify;
	if ((int32_t)(seq - c->fence_seq) > 0) {
		c->fence_seq = seq;
		window_store(&n->fence, seq, __ATOMIC_RELEASE);
		__dpa_thread_window_writeback();
	}
	c->fences++;
}

/* generation returns the generation of this channel's QP qpn, or -1. */
static int generation(const struct sdr_rx_ctx *c, uint32_t qpn)
{
	for (uint32_t g = 0; g < c->generations && g < SDR_RX_MAX_GENERATIONS; g++)
		if (c->qpn[g] == qpn)
			return (int)g;
	return -1;
}

/* repost returns the receive WQE the completion consumed to QP gen. */
static void repost(struct sdr_rx_ctx *c, uint32_t gen)
{
	uint32_t pi = c->rq_pi[gen]++;
	uint8_t *wqe = (uint8_t *)c->rq_ring[gen] + (uint64_t)(pi & ((1u << c->log_rq_size) - 1)) * SDR_RWQE_SIZE;
	sdr_rwqe_set(wqe, 0, c->null_mkey, 0);
	__dpa_thread_fence(__DPA_MEMORY, __DPA_W, __DPA_W);
	flexio_dev_dbr_rq_inc_pi((uint32_t *)c->rq_dbr[gen]);
}

__dpa_global__ void sdr_rx_handler(uint64_t thread_arg)
{
	struct sdr_rx_ctx *c = (struct sdr_rx_ctx *)thread_arg;
	if (setup(c) != 0) {
		c->failures++;
		flexio_dev_thread_finish();
		return;
	}
	/* Host-written state (slot keys, lengths, the notification consumer
	 * index) is read fresh from here on, not from an earlier event. */
	__dpa_thread_window_read_inv();
	const uint8_t *ring = (const uint8_t *)c->cq_ring;
	uint32_t mask = (1u << c->log_cq_size) - 1;
	for (int n = 0; n < SDR_RX_BUDGET; n++) {
		const uint8_t *cqe = ring + (uint64_t)(c->ci & mask) * SDR_CQE_SIZE;
		uint8_t op_own = sdr_cqe_op_own(cqe);
		if (!sdr_cqe_ready(op_own, c->ci, c->log_cq_size))
			break;
		/* The NIC writes the owner byte last: the CQE's other loads
		 * must not be performed before it. */
		__dpa_thread_fence(__DPA_MEMORY, __DPA_R, __DPA_R);
		int gen = generation(c, sdr_cqe_qpn(cqe));
		if (gen < 0) {
			c->unknown_qpn++;
		} else {
			uint8_t op = sdr_cqe_opcode(op_own);
			if (op == SDR_CQE_OPCODE_RESP_WR_IMM)
				packet(c, (uint32_t)gen, sdr_cqe_imm(cqe), sdr_cqe_byte_cnt(cqe));
			else if (op == SDR_CQE_OPCODE_RESP_SEND_IMM && sdr_cqe_byte_cnt(cqe) == 0)
				fence(c, sdr_cqe_imm(cqe));
			else
				c->errors++;
			repost(c, (uint32_t)gen);
		}
		c->ci++;
		c->cqes++;
	}
	flexio_dev_dbr_cq_set_ci((uint32_t *)c->cq_dbr, c->ci);
	__dpa_thread_fence(__DPA_MEMORY, __DPA_W, __DPA_W);
	flexio_dev_cq_arm(c->ci, c->cqn);
	flexio_dev_thread_reschedule();
}
