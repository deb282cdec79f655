/*
 * hostsim's dpaintrin.h: the DPA memory fence, as a full host fence (the
 * DPA's weaker fences are all implied by it). ThreadSanitizer does not
 * model fences; under it the fence is a compiler barrier, and what the
 * handler relies on (the CQE's op_own read with acquire, doorbell
 * records and notifications stored with release) is checked through the
 * atomics themselves.
 */
#ifndef SDR_HOSTSIM_DPAINTRIN_H
#define SDR_HOSTSIM_DPAINTRIN_H

#define __DPA_MEMORY 0
#define __DPA_R 1
#define __DPA_W 2
#define __DPA_RW 3
#ifdef __SANITIZE_THREAD__
#define __dpa_thread_fence(space, pred, succ) __atomic_signal_fence(__ATOMIC_SEQ_CST)
#else
#define __dpa_thread_fence(space, pred, succ) __atomic_thread_fence(__ATOMIC_SEQ_CST)
#endif

#endif
