/*
 * probe.c — the bring-up kit's measurement on the DPA (sdr dpa doctor,
 * hwnic/dpa/windowprobe): an RPC that times the window operations the
 * cost model prices. Built into the DPA image beside handler.c (make
 * dpa), and with gcc against hostsim/ for dpasim.
 */
#include "window.h"

#include "sdr_rx.h"

__dpa_rpc__ uint64_t sdr_probe(uint64_t arg);

/*
 * attach configures the thread's window for a and acquires a's line
 * through it three times, as a handler run acquires its three host areas;
 * 0 and the line's address in *line, or -1.
 */
static int attach(const struct sdr_probe_args *a, flexio_uintptr_t *line)
{
	if (flexio_dev_window_config(FLEXIO_DEV_WINDOW_ENTITY_0, (uint16_t)a->window_id, a->mkey) != FLEXIO_DEV_STATUS_SUCCESS)
		return -1;
	for (int i = 0; i < 3; i++)
		if (flexio_dev_window_ptr_acquire(FLEXIO_DEV_WINDOW_ENTITY_0, a->haddr, line) != FLEXIO_DEV_STATUS_SUCCESS)
			return -1;
	return 0;
}

/*
 * sdr_probe is the bring-up kit's measurement (sdr dpa doctor): it times
 * n window operations of kind op (sdr_rx.h's sdr_probe_args, in DPA
 * memory at arg) on a host line with the thread's cycle counter, so that
 * the cost model's guesses (hwnic/dpa's HandlerCost) can be replaced by
 * what this device does. A read uses its value before the next, so that
 * each waits out its round trip; the stores of SDR_PROBE_STORE are
 * written back after the timing; a spin runs no loop of operations, only
 * the clock. Returns the cycles the n took, or
 * SDR_PROBE_FAILED.
 */
__dpa_rpc__ uint64_t sdr_probe(uint64_t arg)
{
	const struct sdr_probe_args *a = (const struct sdr_probe_args *)arg;
	flexio_uintptr_t line, again;
	if (a->op > SDR_PROBE_READ_CACHED || attach(a, &line) != 0)
		return SDR_PROBE_FAILED;
	uint64_t *word = (uint64_t *)line, sum = 0;
	uint64_t start = __dpa_thread_cycles();
	for (uint32_t i = 0; a->op != SDR_PROBE_SPIN && i < a->n; i++) {
		switch (a->op) {
		case SDR_PROBE_READ:
			__dpa_thread_window_read_inv();
			sum += win_load(word) + 1;
			break;
		case SDR_PROBE_READ_CACHED:
			sum += win_load(word) + 1;
			break;
		case SDR_PROBE_READ_INV:
			__dpa_thread_window_read_inv();
			break;
		case SDR_PROBE_STORE:
			window_store(&word[i % SDR_RX_LINE_WORDS], i, __ATOMIC_RELAXED);
			break;
		case SDR_PROBE_WRITEBACK:
			window_store(word, i, __ATOMIC_RELAXED);
			__dpa_thread_window_writeback();
			break;
		case SDR_PROBE_CONFIG:
			if (attach(a, &again) != 0)
				return SDR_PROBE_FAILED;
			break;
		}
	}
	while (a->op == SDR_PROBE_SPIN && __dpa_thread_cycles() - start < a->n)
		;
	uint64_t cycles = __dpa_thread_cycles() - start;
	/* The sum keeps the reads; nothing is left unwritten. */
	window_store(&word[SDR_RX_LINE_WORDS - 1], sum, __ATOMIC_RELAXED);
	__dpa_thread_window_writeback();
	return cycles;
}
