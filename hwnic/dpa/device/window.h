/*
 * window.h — how the device code reaches host memory: the FlexIO device
 * API it is written against, the window's loads and stores, and (built
 * for hostsim) the CQE loads hostsim's model watches. Included by
 * handler.c and probe.c.
 */
#ifndef SDR_DPA_WINDOW_H
#define SDR_DPA_WINDOW_H

/*
 * The FlexIO device API generation the device code is written for: 24.10 (DOCA
 * 2.9) and later, where the window calls name a window entity and the
 * queue calls take no thread context. The SDK's headers gate each call
 * on FLEXIO_DEV_VER_USED, so a call of another generation does not
 * compile. A build may state another (-DFLEXIO_DEV_VER_USED=..., as the
 * SDK's samples are built): devicetest's TestDeviceISA builds handler.c
 * at 25.1 and at 24.4, where it must fail, so that the gates bite.
 */
#include <libflexio-dev/flexio_dev_ver.h>
#ifndef FLEXIO_DEV_VER_USED
#define FLEXIO_DEV_VER_USED FLEXIO_DEV_VER(24, 10, 0)
#endif
/* Every FlexIO device call is marked experimental (deprecated unless
 * this is defined, which -Werror would turn into errors). */
#define FLEXIO_DEV_ALLOW_EXPERIMENTAL_API
#include <libflexio-dev/flexio_dev.h>
#include <libflexio-dev/flexio_dev_queue_access.h>
#include <dpaintrin.h>

/*
 * Window words: relaxed __atomic loads and stores, which are the plain
 * ld/sd of RISC-V (no read-modify-write reaches host memory); publishing
 * stores are release, a fence before a plain store. What orders them
 * for the host is the window fences around them.
 *
 * Every load of a window word the host changes is a win_load (the
 * notification ring's log_cap is set before the thread starts), every
 * store a window_store, and every load of a CQE goes through mlx5.h's
 * accessors. Built for hostsim (SDR_HOSTSIM), they go to hostsim's
 * memory model: it keeps stores in the thread's copy of the window until
 * a writeback, and serves loads in an order the fences allow but the
 * program does not impose; plain C accesses would not tell it which
 * words the thread touched, nor when. For the DPA they are the plain
 * accesses.
 */
#ifdef SDR_HOSTSIM
#include <hostsim.h>
#define win_load(p) hostsim_window_load(p)
#define window_store(p, v, order) hostsim_window_store((p), (uint64_t)(v), (int)sizeof(*(p)))
#define SDR_CQE_OP_OWN(cqe) hostsim_cqe_op_own((cqe), SDR_CQE_OFF_OP_OWN)
#define SDR_CQE_BE32(cqe, off) hostsim_cqe_field((cqe), sdr_be32((cqe) + (off)))
#else
static inline uint64_t win_load(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
#define window_store(p, v, order) __atomic_store_n((p), (v), (order))
#endif

#endif /* SDR_DPA_WINDOW_H */
