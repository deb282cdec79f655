/*
 * hostsim's flexio_dev.h: the subset of the FlexIO device API (DOCA
 * FlexIO SDK, flexio_dev.h, API version 24.10 and later) that
 * ../../handler.c calls, declared with the public signatures and
 * implemented over host memory in ../hostsim.c. Nothing else of the SDK
 * is provided, so a handler that starts using another call fails to
 * build here until the shim implements it.
 */
#ifndef SDR_HOSTSIM_FLEXIO_DEV_H
#define SDR_HOSTSIM_FLEXIO_DEV_H

#include <stdint.h>

/* On the DPA this marks an entry point; on the host it is nothing. */
#define __dpa_global__

typedef uint64_t flexio_uintptr_t;

typedef enum {
	FLEXIO_DEV_STATUS_SUCCESS = 0,
	FLEXIO_DEV_STATUS_FAILED = 1,
} flexio_dev_status_t;

struct flexio_dev_thread_ctx;

typedef void(flexio_dev_event_handler_t)(uint64_t thread_arg);

int flexio_dev_get_thread_ctx(struct flexio_dev_thread_ctx **dtctx);
flexio_dev_status_t flexio_dev_window_config(struct flexio_dev_thread_ctx *dtctx, uint16_t window_config_id,
					     uint32_t mkey);
flexio_dev_status_t flexio_dev_window_ptr_acquire(struct flexio_dev_thread_ctx *dtctx, uint64_t haddr,
						  flexio_uintptr_t *daddr);
/* Both leave the handler: the next event starts it from the top. */
void flexio_dev_thread_reschedule(void) __attribute__((noreturn));
void flexio_dev_thread_finish(void) __attribute__((noreturn));

#endif
