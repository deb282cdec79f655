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

/* hostsim_thread_run delivers one event; a finished thread is not run again. */
enum hostsim_exit hostsim_thread_run(struct hostsim_thread *t);

/*
 * hostsim_thread_armed reports whether the last run armed a CQ and at
 * which consumer index and CQ number; the arm is consumed (the next run
 * must arm again), as the NIC disarms a CQ when it raises the event.
 */
int hostsim_thread_armed(struct hostsim_thread *t, uint32_t *ci, uint32_t *cqn);

/* hostsim_window_register makes [base, base+len) reachable through mkey; 0 on success. */
int hostsim_window_register(uint32_t mkey, uint64_t base, uint64_t len);
void hostsim_window_unregister(uint32_t mkey);

#endif
