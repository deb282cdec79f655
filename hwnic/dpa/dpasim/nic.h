/*
 * nic.h — dpasim's NIC side: what a ConnectX does between the wire and
 * the DPA handler. It writes each receive completion as a 64-byte mlx5
 * CQE into a channel's CQ ring (owner bit last), raises the handler's
 * event while the CQ is armed below the producer index, and reads back
 * the doorbell records and notifications the handler writes.
 */
#ifndef SDR_DPASIM_NIC_H
#define SDR_DPASIM_NIC_H

#include <stdint.h>

#include "../device/hostsim/hostsim.h"
#include "../device/sdr_rx.h"

#define DPASIM_LOG_CQ 10

/* One receive completion as the transport reports it. */
struct dpasim_cqe {
	uint32_t qpn, imm, byte_cnt;
	uint8_t opcode;
};

/* One channel: the handler thread's context and the rings it reads. */
struct dpasim_channel {
	struct sdr_rx_ctx ctx; /* "DPA memory" */
	struct hostsim_thread *thread;
	uint8_t *cq;
	uint32_t cq_dbr, pi;
	uint32_t rq_dbr[SDR_RX_MAX_GENERATIONS];
	uint8_t *rq[SDR_RX_MAX_GENERATIONS];
};

struct dpasim_channel *dpasim_channel_new(uint32_t generations, uint32_t log_rq);
void dpasim_channel_free(struct dpasim_channel *ch);
int dpasim_channel_start(struct dpasim_channel *ch);
int dpasim_deliver(struct dpasim_channel *ch, const struct dpasim_cqe *in, int n);
uint32_t dpasim_rq_pi(struct dpasim_channel *ch, uint32_t gen);

#endif

/*
 * The handler benchmark's rig: one channel thread, one generation,
 * `slots` slots of `pkts` packets each, and a ring that holds exactly one
 * message per slot. dpasim_bench_fill re-activates the slots and
 * pre-fills the ring; dpasim_bench_run lets the handler drain it.
 */
struct dpasim_bench;
struct dpasim_bench *dpasim_bench_new(uint32_t slots, uint32_t pkts, uint32_t chunk_pkts);
void dpasim_bench_free(struct dpasim_bench *b);
int dpasim_bench_fill(struct dpasim_bench *b);
int dpasim_bench_run(struct dpasim_bench *b);
uint64_t dpasim_bench_chunks(struct dpasim_bench *b);

/*
 * dpasim_probe runs probe.c's bring-up probe (sdr_probe) on a hostsim
 * thread of its own, as flexio_process_call runs an RPC on the DPA: n
 * operations op (enum sdr_probe_op) on a host line it registers as a
 * window. Returns the cycles (hostsim's: nanoseconds), or
 * SDR_PROBE_FAILED.
 */
uint64_t dpasim_probe(uint32_t op, uint32_t n);
