/*
 * sdr_rx.h — what the host and the DPA's RX handler share: one
 * struct sdr_rx_ctx per channel handler thread (in DPA memory, filled by
 * the host before the thread starts) and one notification ring per
 * thread in host memory. Fixed-width fields only, so that the 64-bit
 * host and the DPA (RISC-V, 64-bit) agree on the layout.
 */
#ifndef SDR_DPA_RX_H
#define SDR_DPA_RX_H

#include <stddef.h>
#include <stdint.h>

#define SDR_RX_MAX_GENERATIONS 16
/* CQEs one handler invocation takes before it re-arms and reschedules,
 * so that threads sharing a DPA core take turns. */
#define SDR_RX_BUDGET 64

/*
 * The per-slot length word the host writes (lengths_haddr) before it
 * activates a slot: the posted length in the low 32 bits and the slot's
 * arm count in the high 32, so that the handlers see a re-arm even when
 * the new receive has the same key (message ID and generation) as the
 * last.
 */
static inline uint64_t sdr_rx_length_word(uint32_t arm_seq, uint32_t length)
{
	return (uint64_t)arm_seq << 32 | length;
}

/*
 * The handlers' own copy of the slots, in DPA memory (dpa_slots), one
 * record of SDR_RX_SLOT_HDR_WORDS + slot_words words per slot, shared by
 * the channel threads of one SDR QP:
 *
 *   word 0   the slot's lock: a FlexIO struct spinlock_s (32 bits, an
 *            atomic exchange on DPA memory, as flexio_dev.h's spin_lock)
 *   word 1   the host length word the engine words below belong to
 *   word 2   the slot's epoch (dpa_epochs) they belong to
 *   then     the engine words (engine.h); word 0 of them holds the key
 *            they belong to
 *
 * A handler holds the lock while it processes a packet of the slot and
 * publishes to the host; the engine words are its, plain loads and
 * stores. The host never writes this memory after the QP starts.
 *
 * The slots' epochs (dpa_epochs, one word per slot, DPA memory) are the
 * host's: its arm path bumps a slot's epoch before it clears the slot's
 * host words for a new receive, then fences the handlers (a marker every
 * channel's handler publishes), and clears the words only after that.
 * A handler compares the epoch with its record's under the lock, before
 * it publishes: one that differs makes it read the host's words afresh
 * (after the epoch's load) instead of trusting a view from before the
 * disarm. So a packet it takes before the marker is published before the
 * clear, and one it takes after the marker is judged by the host's words
 * as they are after the bump: no late packet of the slot's old receive
 * reaches the cleared words. The fence is the handlers' acknowledgment.
 */
#define SDR_RX_SLOT_HDR_WORDS 3

/*
 * The host area (slots_haddr, lengths_haddr, notify_haddr) is laid out so
 * that every 64-byte cache line of it has one writer, the handlers or
 * the host: a DPA whose window writeback moves whole lines would
 * otherwise write its stale copy of the host's words back over them (a
 * consumer index, an overflow acknowledgment, a slot's state word). The
 * area starts on a line; in 64-bit words:
 *
 *   slots    max_messages × sdr_rx_slot_stride(slot_words): per slot a
 *            line whose last word is the engine's word 0 (the state, the
 *            host's; the line's other words are unused), then the engine
 *            words 1.. (the handlers'), padded to a whole line. The
 *            engine's words stay contiguous (engine.h's layout).
 *   lengths  max_messages length words (sdr_rx_length_word, the host's),
 *            padded to a whole line
 *   rings    per channel thread a struct sdr_rx_notify and its entries,
 *            padded to a whole line
 *
 * The host writes a slot's engine words 1.. too, clearing them for a new
 * receive, but only once no handler can still publish there (Arm's
 * epoch and fence, dpa_epochs below).
 */
#define SDR_RX_LINE 64
#define SDR_RX_LINE_WORDS (SDR_RX_LINE / 8)
/* The engine's word 0 (the state) is the last of its slot's first line. */
#define SDR_RX_STATE_WORD (SDR_RX_LINE_WORDS - 1)

/* sdr_rx_lines rounds a number of words up to whole lines. */
static inline uint64_t sdr_rx_lines(uint64_t words)
{
	return (words + SDR_RX_LINE_WORDS - 1) / SDR_RX_LINE_WORDS * SDR_RX_LINE_WORDS;
}

/* sdr_rx_slot_stride is a slot's size in the host area, in words: the
 * state word's line, then the engine words 1..slot_words-1 in lines of
 * their own. */
static inline uint64_t sdr_rx_slot_stride(uint32_t slot_words)
{
	return SDR_RX_LINE_WORDS + sdr_rx_lines(slot_words - 1);
}

/*
 * struct sdr_rx_notify: slots the handler wants the host to look at (a
 * chunk or the immediate completed, or a packet was out of range). The
 * handler produces at pi, the host consumes at ci; when the ring is full
 * the handler counts an overflow instead (overflows) and the host, when
 * it finds the count moved past the one it acknowledged (overflows_seen),
 * must look at every armed slot. Two counts, one per writer, where one
 * flag set by one side and cleared by the other would put both in a line.
 *
 * fence is the handler's published progress: the sequence number of the
 * latest fence marker it has taken from its CQ (a zero-length
 * SEND-with-Imm whose immediate is the number, see handler.c), in serial
 * number order (a later number is (int32_t)(a - b) > 0 ahead). Stored
 * with release after everything the CQEs before the marker did, so a
 * host that loads it with acquire and finds its number sees their
 * effects, and no handler is still inside one of their packets.
 *
 * The first line is the handler's, the second the host's (log_cap is set
 * before the thread starts), the entries (the handler's) start on the
 * third.
 */
struct sdr_rx_notify {
	uint64_t pi;        /* handler: entries written */
	uint64_t overflows; /* handler: notifications dropped on a full ring */
	uint32_t fence;     /* handler: the latest fence marker taken */
	uint32_t pad0[11];
	uint64_t ci;             /* host: entries consumed */
	uint64_t overflows_seen; /* host: the overflow count it has acted on */
	uint32_t log_cap;        /* host: the ring holds 2^log_cap entries */
	uint32_t pad1[11];
	uint32_t slot[];
};

#define SDR_RX_SAME_LINE(a, b) ((a) / SDR_RX_LINE == (b) / SDR_RX_LINE)
_Static_assert(offsetof(struct sdr_rx_notify, pi) == 0 && offsetof(struct sdr_rx_notify, overflows) == 8 &&
		       offsetof(struct sdr_rx_notify, fence) == 16 && offsetof(struct sdr_rx_notify, ci) == SDR_RX_LINE &&
		       offsetof(struct sdr_rx_notify, overflows_seen) == SDR_RX_LINE + 8 &&
		       offsetof(struct sdr_rx_notify, log_cap) == SDR_RX_LINE + 16 &&
		       offsetof(struct sdr_rx_notify, slot) == 2 * SDR_RX_LINE,
	       "struct sdr_rx_notify's offsets (hostmem.go has them too)");
_Static_assert(SDR_RX_SAME_LINE(offsetof(struct sdr_rx_notify, pi), offsetof(struct sdr_rx_notify, fence) + 3) &&
		       SDR_RX_SAME_LINE(offsetof(struct sdr_rx_notify, ci), offsetof(struct sdr_rx_notify, log_cap) + 3) &&
		       !SDR_RX_SAME_LINE(offsetof(struct sdr_rx_notify, fence) + 3, offsetof(struct sdr_rx_notify, ci)) &&
		       !SDR_RX_SAME_LINE(offsetof(struct sdr_rx_notify, log_cap) + 3, offsetof(struct sdr_rx_notify, slot)),
	       "the handler's header words, the host's and the entries in lines of their own");
_Static_assert(SDR_RX_STATE_WORD % SDR_RX_LINE_WORDS == SDR_RX_LINE_WORDS - 1,
	       "the state word ends its line: the engine's word 1 starts the next");

/* struct sdr_rx_ctx: one channel handler thread. Addresses are the
 * DPA's (device addresses) unless named haddr. */
struct sdr_rx_ctx {
	/* Set by the host before the thread starts. */
	uint64_t cq_ring;     /* 2^log_cq_size CQEs of 64 bytes */
	uint64_t cq_dbr;      /* the CQ's doorbell record */
	uint32_t cqn, log_cq_size;
	uint32_t generations; /* QPs of this channel, one per generation */
	uint32_t log_rq_size; /* each QP's RQ holds 2^log_rq_size WQEs */
	uint32_t qpn[SDR_RX_MAX_GENERATIONS];
	uint64_t rq_ring[SDR_RX_MAX_GENERATIONS]; /* receive WQEs, 16 bytes each */
	uint64_t rq_dbr[SDR_RX_MAX_GENERATIONS];  /* receive doorbell records */
	uint32_t null_mkey;                       /* what receive WQEs point at */
	uint8_t msg_id_bits, offset_bits, nibble_bits, pad0;
	uint32_t mtu, chunk_size;
	uint32_t max_messages; /* slots: a power of two */
	uint32_t slot_words;   /* engine words of a slot (of the largest receive) */
	uint32_t window_id, window_mkey;
	uint64_t slots_haddr;   /* max_messages slots of sdr_rx_slot_stride(slot_words) words */
	uint64_t lengths_haddr; /* per slot, the length word */
	uint64_t notify_haddr;  /* this thread's struct sdr_rx_notify */

	uint64_t dpa_slots;  /* the QP's struct of slot records in DPA memory, zeroed */
	uint64_t dpa_epochs; /* per slot, its epoch in DPA memory (the host's), zeroed */

	/* Owned by the handler thread from its first run. */
	uint32_t fence_seq; /* the fence number last published */
	uint32_t ci;        /* CQ consumer index */
	uint32_t rq_pi[SDR_RX_MAX_GENERATIONS];
	uint64_t slots, lengths, notify; /* the host areas, through the window (per event) */
	uint64_t notify_pi;              /* entries written to the notification ring */
	uint64_t overflows;              /* notifications dropped on a full ring */

	/* Statistics, written by the handler thread only. */
	uint64_t cqes;        /* CQEs consumed */
	uint64_t stale;       /* packets of an inactive slot, another generation or message */
	uint64_t errors;      /* CQEs that are neither a responder WRITE-with-Imm nor a fence marker */
	uint64_t unknown_qpn; /* CQEs of a QP this thread does not know */
	uint64_t chunks;      /* chunks this thread completed */
	uint64_t imms;        /* immediates this thread completed */
	uint64_t fences;      /* fence markers taken */
	uint64_t failures;    /* window set-up failed: the thread stops */
};

/*
 * The bring-up probe (probe.c's sdr_probe, an RPC the host calls with
 * flexio_process_call): n operations of one kind on a host line reached
 * through window window_id with mkey, timed by the DPA's cycle counter.
 * The host passes the arguments in DPA memory; the RPC returns the
 * cycles, or SDR_PROBE_FAILED.
 */
enum sdr_probe_op {
	SDR_PROBE_SPIN = 0,      /* wait until n cycles have passed (the host calibrates the clock) */
	SDR_PROBE_READ = 1,      /* read-invalidate, then a load whose value is used */
	SDR_PROBE_READ_INV = 2,  /* read-invalidate alone */
	SDR_PROBE_STORE = 3,     /* a store into the line (one writeback after the timing) */
	SDR_PROBE_WRITEBACK = 4, /* a store, then a writeback */
	SDR_PROBE_CONFIG = 5,    /* window configuration and three pointer acquisitions, as a handler run's */
	SDR_PROBE_READ_CACHED = 6, /* a load whose value is used, no read-invalidate (a hit, if the window caches) */
};
#define SDR_PROBE_FAILED UINT64_MAX

struct sdr_probe_args {
	uint64_t haddr; /* a 64-byte line of host memory inside the window's registration */
	uint32_t window_id, mkey;
	uint32_t op, n;
};

#endif /* SDR_DPA_RX_H */
