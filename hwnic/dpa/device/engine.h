/*
 * engine.h — SDR's per-packet receive engine in portable C: the algorithm
 * of the Go package sdr/engine, word for word, for the BlueField-3 DPA
 * (dpacc) and for the host (gcc, through the FlexIO shim). No FlexIO
 * dependency, no allocation, no libc.
 *
 * A slot's state is a flat array of 64-bit words, the same layout the Go
 * engine keeps:
 *
 *   word 0          state: bit 63 active, bits 32..61 message ID,
 *                   bits 24..31 generation (bits 0..23: the Go engine's
 *                   in-flight count, always 0 here)
 *   word 1          immediate: bits 0..31 merged value, bits 32..47
 *                   nibbles received, bit 63 truncated
 *   words 2..2+C-1  one packet mask per chunk
 *   then ceil(C/64) chunk flags, one bit per chunk
 *
 * One owner at a time: the caller holds the slot's words exclusively
 * while it processes a packet (handler.c: the slot's lock in DPA
 * memory). So there is no compare-and-swap and no read-modify-write
 * instruction here: the BlueField-3 DPA compiler does not offer
 * compare-and-swap, and the words the host reads are published by the
 * handler with plain stores (handler.c). Loads and stores are relaxed
 * __atomic accesses, which are plain ld/sd on RISC-V and keep the host
 * harness (ThreadSanitizer) precise. The vectors in
 * sdr/engine/testdata/vectors.json pin the behaviour down.
 */
#ifndef SDR_DPA_ENGINE_H
#define SDR_DPA_ENGINE_H

#include <stdint.h>

/* Results of one packet event; the values match the Go engine.Result. */
enum sdr_result {
	SDR_PACKET = 1,         /* a new packet bit was set */
	SDR_CHUNK_COMPLETE = 2, /* the packet completed its chunk */
	SDR_DUPLICATE = 3,      /* the packet bit was already set */
	SDR_IMM_ONLY = 4,       /* a zero-length immediate carrier */
	SDR_STALE = 5,          /* inactive slot, other generation or message */
	SDR_OUT_OF_RANGE = 6,   /* packet offset beyond the posted buffer */
};

#define SDR_ACTIVE_BIT (1ull << 63)
#define SDR_MSGID_SHIFT 32
#define SDR_MSGID_MASK ((1ull << 30) - 1)
#define SDR_GEN_SHIFT 24
#define SDR_INFLIGHT_MASK ((1ull << SDR_GEN_SHIFT) - 1)
#define SDR_TRUNCATED_BIT (1ull << 63)
#define SDR_HEADER_WORDS 2
#define SDR_MAX_CHUNK_PKTS 64
#define SDR_MAX_GENERATION 255u
#define SDR_NIBBLE_SET_MASK ((1ull << 16) - 1)

/* The immediate split: message ID, packet offset, nibble (bits, summing to 32). */
struct sdr_layout {
	uint8_t msg_id_bits, offset_bits, nibble_bits;
};

/* How a posted buffer divides into packets and chunks. */
struct sdr_geometry {
	uint32_t length, mtu, chunk_pkts;
	uint32_t packets, chunks, last_packets;
};

/* One slot: its words (in memory the NIC, DPA and host share) and shape. */
struct sdr_slot {
	uint64_t *words;
	struct sdr_geometry geo;
	struct sdr_layout layout;
};

static inline uint32_t sdr_mask32(uint32_t bits) { return bits >= 32 ? 0xffffffffu : (1u << bits) - 1; }

/* sdr_layout_valid: the fields fill 32 bits, none empty, the nibble width divides 32. */
static inline int sdr_layout_valid(struct sdr_layout l)
{
	return l.msg_id_bits && l.offset_bits && l.nibble_bits &&
	       l.msg_id_bits + l.offset_bits + l.nibble_bits == 32 && 32 % l.nibble_bits == 0;
}

static inline uint32_t sdr_layout_nibbles(struct sdr_layout l) { return 32u / l.nibble_bits; }
static inline uint32_t sdr_layout_max_ids(struct sdr_layout l) { return 1u << l.msg_id_bits; }

static inline void sdr_layout_unpack(struct sdr_layout l, uint32_t imm, uint32_t *msg_id, uint32_t *off, uint32_t *nibble)
{
	*msg_id = imm >> (l.offset_bits + l.nibble_bits);
	*off = imm >> l.nibble_bits & sdr_mask32(l.offset_bits);
	*nibble = imm & sdr_mask32(l.nibble_bits);
}

/* sdr_geometry_init validates and computes a geometry; 0 on success, -1 on bad input. */
static inline int sdr_geometry_init(struct sdr_geometry *g, uint32_t length, uint32_t mtu, uint32_t chunk_size)
{
	if (mtu == 0 || chunk_size == 0 || chunk_size % mtu != 0 || chunk_size / mtu > SDR_MAX_CHUNK_PKTS)
		return -1;
	g->length = length;
	g->mtu = mtu;
	g->chunk_pkts = chunk_size / mtu;
	g->packets = length / mtu + (length % mtu != 0);
	g->chunks = (g->packets + g->chunk_pkts - 1) / g->chunk_pkts;
	g->last_packets = g->packets - (g->chunks > 0 ? g->chunks - 1 : 0) * g->chunk_pkts;
	return 0;
}

/* sdr_geometry_words: how many 64-bit words a slot of this geometry needs. */
static inline uint32_t sdr_geometry_words(const struct sdr_geometry *g)
{
	return SDR_HEADER_WORDS + g->chunks + (g->chunks + 63) / 64;
}

static inline uint64_t sdr_full_mask(const struct sdr_geometry *g, uint32_t chunk)
{
	uint32_t n = chunk == g->chunks - 1 ? g->last_packets : g->chunk_pkts;
	return n == 64 ? ~0ull : (1ull << n) - 1;
}

static inline uint64_t sdr_key(uint32_t msg_id, uint32_t gen)
{
	return SDR_ACTIVE_BIT | (uint64_t)(msg_id & SDR_MSGID_MASK) << SDR_MSGID_SHIFT |
	       (uint64_t)(gen & SDR_MAX_GENERATION) << SDR_GEN_SHIFT;
}

static inline uint64_t sdr_load(const uint64_t *w) { return __atomic_load_n(w, __ATOMIC_RELAXED); }
static inline void sdr_store(uint64_t *w, uint64_t v) { __atomic_store_n(w, v, __ATOMIC_RELAXED); }

/* sdr_slot_deactivate disarms the slot: its packets are stale from now on. */
static inline void sdr_slot_deactivate(struct sdr_slot *s) { sdr_store(&s->words[0], 0); }

/* sdr_slot_clear zeroes every word of the slot. */
static inline void sdr_slot_clear(struct sdr_slot *s)
{
	for (uint32_t i = 0; i < sdr_geometry_words(&s->geo); i++)
		sdr_store(&s->words[i], 0);
}

/*
 * sdr_slot_activate clears the slot's progress and arms it for msg_id
 * (modulo the layout's IDs) of generation gen.
 */
static inline void sdr_slot_activate(struct sdr_slot *s, uint32_t msg_id, uint32_t gen)
{
	sdr_slot_deactivate(s);
	for (uint32_t i = 1; i < sdr_geometry_words(&s->geo); i++)
		sdr_store(&s->words[i], 0);
	sdr_store(&s->words[0], sdr_key(msg_id % sdr_layout_max_ids(s->layout), gen));
}

/* sdr_merge_nibble records packet off's nibble; returns 1 if it was the last one missing. */
static inline int sdr_merge_nibble(struct sdr_slot *s, uint32_t off, uint32_t nibble)
{
	struct sdr_layout l = s->layout;
	uint32_t idx = off % sdr_layout_nibbles(l), shift = idx * l.nibble_bits;
	uint64_t all = (1ull << sdr_layout_nibbles(l)) - 1;
	uint64_t old = sdr_load(&s->words[1]);
	uint32_t value = ((uint32_t)old & ~(sdr_mask32(l.nibble_bits) << shift)) | (nibble & sdr_mask32(l.nibble_bits))
										      << shift;
	uint64_t merged = (old & SDR_TRUNCATED_BIT) | value | ((old >> 32 & SDR_NIBBLE_SET_MASK) | 1ull << idx) << 32;
	if (merged == old)
		return 0;
	sdr_store(&s->words[1], merged);
	return (old >> 32 & all) != all && (merged >> 32 & all) == all;
}

/* sdr_slot_apply updates an active slot for packet off; the caller owns the words. */
static inline enum sdr_result sdr_slot_apply(struct sdr_slot *s, uint32_t off, uint32_t nibble, uint32_t byte_count,
					     int *imm_done)
{
	const struct sdr_geometry *g = &s->geo;
	if (byte_count > 0 && off >= g->packets) {
		sdr_store(&s->words[1], sdr_load(&s->words[1]) | SDR_TRUNCATED_BIT);
		return SDR_OUT_OF_RANGE;
	}
	*imm_done = sdr_merge_nibble(s, off, nibble);
	if (byte_count == 0)
		return SDR_IMM_ONLY;
	uint32_t chunk = off / g->chunk_pkts;
	uint64_t bit = 1ull << (off % g->chunk_pkts);
	uint64_t old = sdr_load(&s->words[SDR_HEADER_WORDS + chunk]);
	if (old & bit)
		return SDR_DUPLICATE;
	sdr_store(&s->words[SDR_HEADER_WORDS + chunk], old | bit);
	if ((old | bit) != sdr_full_mask(g, chunk))
		return SDR_PACKET;
	uint64_t *flags = &s->words[SDR_HEADER_WORDS + g->chunks + chunk / 64];
	sdr_store(flags, sdr_load(flags) | 1ull << (chunk % 64));
	return SDR_CHUNK_COMPLETE;
}

/* sdr_slot_accepts: whether state word st takes a packet of immediate imm on a QP of generation gen. */
static inline int sdr_slot_accepts(uint64_t st, struct sdr_layout l, uint32_t gen, uint32_t imm)
{
	uint32_t msg_id, off, nibble;
	sdr_layout_unpack(l, imm, &msg_id, &off, &nibble);
	return gen <= SDR_MAX_GENERATION && (st & ~SDR_INFLIGHT_MASK) == sdr_key(msg_id, gen);
}

/*
 * sdr_slot_process applies one WRITE-with-Imm completion: immediate imm
 * arriving on a QP of generation gen with byte_count payload bytes (0 for
 * an immediate carrier). *imm_done is set to 1 for exactly the event that
 * completes the immediate, 0 otherwise. The caller owns the words.
 */
static inline enum sdr_result sdr_slot_process(struct sdr_slot *s, uint32_t gen, uint32_t imm, uint32_t byte_count,
					       int *imm_done)
{
	uint32_t msg_id, off, nibble;
	*imm_done = 0;
	if (!sdr_slot_accepts(sdr_load(&s->words[0]), s->layout, gen, imm))
		return SDR_STALE;
	sdr_layout_unpack(s->layout, imm, &msg_id, &off, &nibble);
	return sdr_slot_apply(s, off, nibble, byte_count, imm_done);
}

/* sdr_slot_chunk_done: whether chunk i is complete; 0 outside the buffer. */
static inline int sdr_slot_chunk_done(const struct sdr_slot *s, uint32_t i)
{
	if (i >= s->geo.chunks)
		return 0;
	return (sdr_load(&s->words[SDR_HEADER_WORDS + s->geo.chunks + i / 64]) >> (i % 64)) & 1;
}

#endif /* SDR_DPA_ENGINE_H */
