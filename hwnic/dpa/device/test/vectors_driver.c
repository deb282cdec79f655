/*
 * vectors_driver runs engine.h over a line script on stdin (written by
 * vectors_test.go from sdr/engine/testdata/vectors.json) and prints each
 * event's result and every case's final state, so that the Go test can
 * compare them with the vectors.
 *
 *   case MSGIDBITS OFFBITS NIBBITS MTU CHUNK LENGTH ACTIVE MSGID GEN
 *   pkt GEN IMM BYTES          -> "result NAME IMMDONE"
 *   activate MSGID GEN | deactivate
 *   end                        -> "flags W..", "masks M..", "imm V COMPLETE TRUNCATED"
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine.h"

static const char *result_name(enum sdr_result r)
{
	switch (r) {
	case SDR_PACKET: return "packet";
	case SDR_CHUNK_COMPLETE: return "chunk_complete";
	case SDR_DUPLICATE: return "duplicate";
	case SDR_IMM_ONLY: return "imm_only";
	case SDR_STALE: return "stale";
	case SDR_OUT_OF_RANGE: return "out_of_range";
	}
	return "unknown";
}

int main(void)
{
	char op[32];
	struct sdr_slot s = {0};
	while (scanf("%31s", op) == 1) {
		if (!strcmp(op, "case")) {
			unsigned m, o, n, mtu, chunk, length, active, msg, gen;
			if (scanf("%u %u %u %u %u %u %u %u %u", &m, &o, &n, &mtu, &chunk, &length, &active, &msg, &gen) != 9)
				return 2;
			s.layout = (struct sdr_layout){(uint8_t)m, (uint8_t)o, (uint8_t)n};
			if (!sdr_layout_valid(s.layout) || sdr_geometry_init(&s.geo, length, mtu, chunk)) {
				printf("error bad geometry\n");
				return 3;
			}
			free(s.words);
			s.words = calloc(sdr_geometry_words(&s.geo), sizeof(uint64_t));
			if (!s.words)
				return 4;
			if (active)
				sdr_slot_activate(&s, msg, gen);
		} else if (!strcmp(op, "pkt")) {
			unsigned gen, bytes;
			uint32_t imm;
			int done;
			if (scanf("%u %" SCNx32 " %u", &gen, &imm, &bytes) != 3)
				return 2;
			enum sdr_result r = sdr_slot_process(&s, gen, imm, bytes, &done);
			printf("result %s %d\n", result_name(r), done);
		} else if (!strcmp(op, "activate")) {
			unsigned msg, gen;
			if (scanf("%u %u", &msg, &gen) != 2)
				return 2;
			sdr_slot_activate(&s, msg, gen);
		} else if (!strcmp(op, "deactivate")) {
			sdr_slot_deactivate(&s);
		} else if (!strcmp(op, "end")) {
			uint32_t c = s.geo.chunks;
			printf("flags");
			for (uint32_t i = 0; i < (c + 63) / 64; i++)
				printf(" %" PRIx64, s.words[SDR_HEADER_WORDS + c + i]);
			printf("\nmasks");
			for (uint32_t i = 0; i < c; i++)
				printf(" %" PRIx64, s.words[SDR_HEADER_WORDS + i]);
			uint64_t w = s.words[1], all = (1ull << sdr_layout_nibbles(s.layout)) - 1;
			printf("\nimm %" PRIx32 " %d %d\n", (uint32_t)w, (w >> 32 & all) == all, (w & SDR_TRUNCATED_BIT) != 0);
			/* chunk_done must agree with the flags */
			for (uint32_t i = 0; i <= c; i++)
				if (sdr_slot_chunk_done(&s, i) != (i < c && (s.words[SDR_HEADER_WORDS + c + i / 64] >> (i % 64) & 1)))
					printf("error chunk_done %u\n", i);
		} else {
			printf("error unknown op %s\n", op);
			return 2;
		}
	}
	free(s.words);
	return 0;
}
