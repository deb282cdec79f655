/*
 * hostsim.h — runs FlexIO event handlers as host threads. A
 * hostsim_thread is one DPA thread: hostsim_thread_run delivers one
 * event (runs the handler until it reschedules or finishes) on the
 * calling host thread; hostsim_thread_arm says which consumer index the
 * handler armed its CQ at, so the caller knows when the next event is
 * due. Windows are registered host ranges that flexio_dev_window_config
 * and flexio_dev_window_ptr_acquire check. Thread-safe: each
 * hostsim_thread is run by one host thread at a time; the window table
 * is locked.
 */
#ifndef SDR_HOSTSIM_H
#define SDR_HOSTSIM_H

#include <stdint.h>

/* The harness calls the experimental device API too. */
#ifndef FLEXIO_DEV_ALLOW_EXPERIMENTAL_API
#define FLEXIO_DEV_ALLOW_EXPERIMENTAL_API
#endif
#include <libflexio-dev/flexio_dev.h>

enum hostsim_exit {
	HOSTSIM_RESCHEDULED = 1, /* flexio_dev_thread_reschedule: runs again on the next event */
	HOSTSIM_FINISHED = 2,    /* flexio_dev_thread_finish, or the handler returned */
};

struct hostsim_thread;

/* hostsim_thread_create returns a thread running fn(arg), or NULL without memory. */
struct hostsim_thread *hostsim_thread_create(flexio_dev_event_handler_t *fn, uint64_t arg);
void hostsim_thread_destroy(struct hostsim_thread *t);

/* hostsim_thread_run delivers one event; a finished thread is not run
 * again. It may be called inside another thread's run (from the strict
 * model's visible callback), which goes on when it returns. */
enum hostsim_exit hostsim_thread_run(struct hostsim_thread *t);

/*
 * hostsim_thread_armed reports whether the last run armed a CQ and at
 * which consumer index and CQ number; the arm is consumed (the next run
 * must arm again), as the NIC disarms a CQ when it raises the event.
 */
int hostsim_thread_armed(struct hostsim_thread *t, uint32_t *ci, uint32_t *cqn);

/*
 * hostsim_strict_windows switches on the strict memory model for threads
 * created afterwards (call it first; it stays on for the process). Each
 * thread then reaches a window through a copy of its own, at addresses
 * distinct from the host's, kept across runs as a DPA cache would be:
 *
 *   - its stores reach host memory at a window writeback (an __DPA_MMIO
 *     fence ordering writes), performed in a random order among
 *     themselves, or earlier at random; visible(arg, haddr, old, now) is
 *     called on the storing thread as each 8-byte word becomes visible
 *     to the host, with the word's host value before and after;
 *   - its loads see host memory as of its last read-invalidate (an
 *     __DPA_MMIO fence ordering reads), refreshed word by word in a
 *     random order, or a word refreshed earlier at random; and, chosen
 *     at random per word at each read-invalidate, a window load
 *     (hostsim_window_load) fetches its word again the first time it
 *     loads it: the hardware may perform that load then or at the
 *     fence, so of two loads with no read fence between them the later
 *     may see the older value;
 *   - a load of a CQE's fields (hostsim_cqe_field) with no DPA memory
 *     read fence since the load of the CQE's owner byte
 *     (hostsim_cqe_op_own) may, at random, be performed before it, ahead
 *     of the NIC's write of the CQE: it then returns a value the NIC did
 *     not write (the field's complement, standing in for the previous
 *     lap's);
 *   - a run that ends with stores not written back aborts;
 *   - a receive doorbell record moved with no memory write fence since
 *     the previous one (the WQE unordered), or a CQ armed with no write
 *     fence after its doorbell record moved, aborts.
 *
 * seed makes the random choices repeatable. Window bases and lengths must
 * be multiples of 8.
 */
void hostsim_strict_windows(uint64_t seed, void (*visible)(void *arg, uint64_t haddr, uint64_t old, uint64_t now), void *arg);

/*
 * hostsim_strict_lines switches the strict model between moving 8-byte
 * words (0, the default) and moving 64-byte cache lines (1), as a DPA
 * whose window cache writes back and refetches whole lines would:
 *
 *   - a writeback (or an early perform) writes every line holding a
 *     store of the thread back whole, from the thread's copy: words of
 *     the line it never stored go back as it last fetched them,
 *     overwriting what the host or another thread stored there since;
 *     the lines go in a random order, each line's words at once;
 *   - a read-invalidate (or an early or lazy refresh) fetches whole
 *     lines, but not a line holding stores not yet written back, whose
 *     other words stay as they were.
 *
 * So a line both the handler and the host write loses the host's
 * stores. It may be switched at any time, between runs.
 */
void hostsim_strict_lines(int on);

/* hostsim_window_store is handler.c's window_store built for hostsim
 * (SDR_HOSTSIM): a store of the low size bytes (4 or 8) of value at p.
 * Into the running thread's view when p is in one (the strict model),
 * else a release store. */
void hostsim_window_store(void *p, uint64_t value, int size);

/* hostsim_strict is 1 once hostsim_strict_windows has switched the
 * strict model on. The inline loads below test it first, so that without
 * the model (dpasim's direct windows, which its benchmarks measure) they
 * cost what a plain load does. */
extern int hostsim_strict;

/* hostsim_window_load is handler.c's win_load built for hostsim: a load
 * of the 8-byte word at p, from the running thread's view when p is in
 * one (the strict model: hostsim_window_load_strict), else a relaxed
 * load. */
uint64_t hostsim_window_load_strict(const uint64_t *p);
static inline uint64_t hostsim_window_load(const uint64_t *p)
{
	return hostsim_strict ? hostsim_window_load_strict(p) : __atomic_load_n(p, __ATOMIC_RELAXED);
}

/*
 * hostsim_window_loading registers loading(arg, haddr), called on the
 * loading thread as a strict-model window load of the host word at haddr
 * is about to be served, so that a test's host can change host memory
 * between a thread's read fence and its load; NULL removes it. Like the
 * visible callback, it is the process's one.
 */
void hostsim_window_loading(void (*loading)(void *arg, uint64_t haddr), void *arg);

/*
 * hostsim_cqe_op_own and hostsim_cqe_field are handler.c's CQE loads
 * built for hostsim (mlx5.h's SDR_CQE_OP_OWN and SDR_CQE_BE32): the owner
 * byte at byte off of the CQE at cqe, and a 32-bit field v of it as
 * mlx5.h's sdr_be32 read it, under the strict model's load order. The owner byte is loaded with
 * acquire on the host whatever the model serves, so that the fields'
 * bytes are the NIC's and ThreadSanitizer sees no race; the strict model
 * then notes the load (hostsim_cqe_owner_loaded) and chooses what each
 * field load returns (hostsim_cqe_served: v, or a value the NIC did not
 * write).
 */
void hostsim_cqe_owner_loaded(const uint8_t *cqe);
uint32_t hostsim_cqe_served(const uint8_t *cqe, uint32_t v);
static inline uint8_t hostsim_cqe_op_own(const uint8_t *cqe, int off)
{
	if (hostsim_strict)
		hostsim_cqe_owner_loaded(cqe);
	return __atomic_load_n(&cqe[off], __ATOMIC_ACQUIRE);
}
static inline uint32_t hostsim_cqe_field(const uint8_t *cqe, uint32_t v)
{
	return hostsim_strict ? hostsim_cqe_served(cqe, v) : v;
}

/* hostsim_pending_stores_before returns how many window words hold
 * stores of the running thread, made before its latest store to the word
 * at host address haddr, that are not yet visible to the host and would
 * change what it reads there (0 outside a run or a window). */
int hostsim_pending_stores_before(uint64_t haddr);

/*
 * hostsim_ops counts the window operations handler threads made, as the
 * cost model (hwnic/dpa's CostModel) counts them: loads and stores of
 * window words (on the strict model), writebacks and read-invalidates
 * (a system fence ordering reads counts as one: it orders the window's
 * too), window configurations and pointer acquisitions. Totals since
 * the process started, over every thread; a test takes differences.
 */
struct hostsim_ops {
	uint64_t loads, stores, writebacks, read_invalidates, window_configs, ptr_acquires;
};
void hostsim_ops_get(struct hostsim_ops *out);

/* hostsim_window_register makes [base, base+len) reachable through mkey; 0 on success. */
int hostsim_window_register(uint32_t mkey, uint64_t base, uint64_t len);
void hostsim_window_unregister(uint32_t mkey);

#endif
