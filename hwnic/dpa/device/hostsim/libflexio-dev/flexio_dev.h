/*
 * hostsim's flexio_dev.h: the subset of the FlexIO device API (DOCA
 * FlexIO SDK, libflexio-dev/flexio_dev.h) that ../../handler.c calls,
 * with the public header's version gates reproduced on both sides, so
 * that a call written for another generation fails to compile here as
 * it would under dpacc:
 *
 *   FLEXIO_DEV_VER_USED >= 24.10   flexio_dev_window_config(enum flexio_window_entity, id, mkey)
 *                                   flexio_dev_window_ptr_acquire(enum flexio_window_entity, haddr, &daddr)
 *   FLEXIO_DEV_VER_USED <  24.10   both take a struct flexio_dev_thread_ctx * first
 *                                   (and always act on window entity 0)
 *
 * Both sides are inline wrappers of flexio_dev_multi_window_config and
 * flexio_dev_multi_window_ptr_acquire, as in the SDK. As there, the
 * device calls are experimental: without
 * FLEXIO_DEV_ALLOW_EXPERIMENTAL_API each carries a deprecation warning,
 * which -Werror turns into an error. A translation unit that does not
 * state FLEXIO_DEV_VER_USED gets this shim's current version (25.1, the
 * newest release whose public header was read for it).
 *
 * Implemented over host memory in ../hostsim.c. Nothing else of the SDK
 * is provided, so a handler that starts using another call fails to
 * build here until the shim implements it.
 */
#ifndef SDR_HOSTSIM_FLEXIO_DEV_H
#define SDR_HOSTSIM_FLEXIO_DEV_H

#include <libflexio-dev/flexio_dev_ver.h>
#include <stdint.h>

#define FLEXIO_DEV_CURRENT_VERSION FLEXIO_DEV_VER(25, 1, 0)

#ifndef FLEXIO_DEV_VER_USED
#define FLEXIO_DEV_VER_USED FLEXIO_DEV_CURRENT_VERSION
#elif FLEXIO_DEV_VER_USED == FLEXIO_DEV_VER_LATEST
#undef FLEXIO_DEV_VER_USED
#define FLEXIO_DEV_VER_USED FLEXIO_DEV_CURRENT_VERSION
#endif

#if FLEXIO_DEV_VER_USED > FLEXIO_DEV_CURRENT_VERSION
#error "FLEXIO_DEV_VER_USED is newer than this shim's FlexIO headers"
#endif

#ifdef FLEXIO_DEV_ALLOW_EXPERIMENTAL_API
#define FLEXIO_DEV_EXPERIMENTAL
#else
#define FLEXIO_DEV_EXPERIMENTAL __attribute__((deprecated("Symbol is defined as experimental")))
#endif

/* On the DPA these mark an event handler's and an RPC's entry point; on
 * the host they are nothing. */
#define __dpa_global__
#define __dpa_rpc__

typedef uint64_t flexio_uintptr_t;

typedef enum {
	FLEXIO_DEV_STATUS_SUCCESS = 0,
	FLEXIO_DEV_STATUS_FAILED = 1,
} flexio_dev_status_t;

/* The two window mappings a thread may hold at once. */
enum flexio_window_entity {
	FLEXIO_DEV_WINDOW_ENTITY_0 = 0,
	FLEXIO_DEV_WINDOW_ENTITY_1 = 1,
	FLEXIO_DEV_WINDOW_ENTITY_NUM = 2,
};

struct flexio_dev_thread_ctx;

typedef void(flexio_dev_event_handler_t)(uint64_t thread_arg);

FLEXIO_DEV_EXPERIMENTAL int flexio_dev_get_thread_ctx(struct flexio_dev_thread_ctx **dtctx);
/* Both leave the handler: the next event starts it from the top. */
FLEXIO_DEV_EXPERIMENTAL void flexio_dev_thread_reschedule(void) __attribute__((noreturn));
FLEXIO_DEV_EXPERIMENTAL void flexio_dev_thread_finish(void) __attribute__((noreturn));

FLEXIO_DEV_EXPERIMENTAL flexio_dev_status_t flexio_dev_multi_window_config(enum flexio_window_entity win_entity,
									   uint16_t window_config_id, uint32_t mkey);
FLEXIO_DEV_EXPERIMENTAL flexio_dev_status_t flexio_dev_multi_window_ptr_acquire(enum flexio_window_entity win_entity,
										uint64_t haddr, flexio_uintptr_t *daddr);

#if FLEXIO_DEV_VER_USED >= FLEXIO_DEV_VER(24, 10, 0)
static inline flexio_dev_status_t flexio_dev_window_config(enum flexio_window_entity win_entity,
							   uint16_t window_config_id, uint32_t mkey)
{
	return flexio_dev_multi_window_config(win_entity, window_config_id, mkey);
}

static inline flexio_dev_status_t flexio_dev_window_ptr_acquire(enum flexio_window_entity win_entity, uint64_t haddr,
								flexio_uintptr_t *daddr)
{
	return flexio_dev_multi_window_ptr_acquire(win_entity, haddr, daddr);
}
#else
static inline flexio_dev_status_t flexio_dev_window_config(struct flexio_dev_thread_ctx *dtctx,
							   uint16_t window_config_id, uint32_t mkey)
{
	(void)dtctx;
	return flexio_dev_multi_window_config(FLEXIO_DEV_WINDOW_ENTITY_0, window_config_id, mkey);
}

static inline flexio_dev_status_t flexio_dev_window_ptr_acquire(struct flexio_dev_thread_ctx *dtctx, uint64_t haddr,
								flexio_uintptr_t *daddr)
{
	(void)dtctx;
	return flexio_dev_multi_window_ptr_acquire(FLEXIO_DEV_WINDOW_ENTITY_0, haddr, daddr);
}
#endif

/*
 * The SDK's spin lock over DPA memory: an atomic exchange
 * (amoswap on the DPA), the only read-modify-write the handler uses.
 */
struct spinlock_s {
	uint32_t locked;
};
#define spin_init(lock) __atomic_store_n(&(lock)->locked, 0, __ATOMIC_SEQ_CST)
#define spin_lock(lock)                                                           \
	do {                                                                      \
		while (__atomic_exchange_n(&(lock)->locked, 1, __ATOMIC_SEQ_CST)) \
			;                                                         \
	} while (0)
#define spin_unlock(lock) __atomic_store_n(&(lock)->locked, 0, __ATOMIC_SEQ_CST)

#endif
