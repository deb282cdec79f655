/*
 * hostsim's dpaintrin.h: the DPA's thread fence and the window helpers
 * built on it, with the public header's names. A fence names a memory
 * space and the operations it orders:
 *
 *   __DPA_HEAP, __DPA_MEMORY   DPA memory (the thread's heap, DPA DDR)
 *   __DPA_MMIO                  the window (host memory) and the outbox
 *   __DPA_SYSTEM                everything
 *
 * __dpa_thread_window_read_inv() is the MMIO R,R fence: later window
 * reads see host memory as it is now, not the thread's cached copy;
 * __dpa_thread_window_writeback() is the MMIO W,W fence: earlier window
 * stores are performed (visible to the host) before later ones.
 *
 * Every fence is hostsim_thread_fence, which hostsim.c implements over
 * its window model (a memory fence fences nothing in the window), its
 * model of CQE loads (a memory read fence orders them after the owner
 * byte's) and as a full host fence.
 */
#ifndef SDR_HOSTSIM_DPAINTRIN_H
#define SDR_HOSTSIM_DPAINTRIN_H

#define __DPA_HEAP 0
#define __DPA_MEMORY 1
#define __DPA_MMIO 2
#define __DPA_SYSTEM 3

#define __DPA_R 1
#define __DPA_W 2
#define __DPA_RW 3

void hostsim_thread_fence(int space, int pred, int succ);

/* __dpa_thread_cycles is the thread's cycle counter: on hostsim the
 * host's monotonic clock in nanoseconds (a 1 GHz DPA). */
unsigned long long hostsim_cycles(void);
#define __dpa_thread_cycles() hostsim_cycles()

#define __dpa_thread_fence(space, pred, succ) hostsim_thread_fence((space), (pred), (succ))
#define __dpa_thread_memory_fence(pred, succ) __dpa_thread_fence(__DPA_MEMORY, pred, succ)
#define __dpa_thread_outbox_fence(pred, succ) __dpa_thread_fence(__DPA_MMIO, pred, succ)
#define __dpa_thread_window_fence(pred, succ) __dpa_thread_fence(__DPA_MMIO, pred, succ)
#define __dpa_thread_system_fence() __dpa_thread_fence(__DPA_SYSTEM, __DPA_RW, __DPA_RW)
#define __dpa_thread_window_read_inv() __dpa_thread_fence(__DPA_MMIO, __DPA_R, __DPA_R)
#define __dpa_thread_window_writeback() __dpa_thread_fence(__DPA_MMIO, __DPA_W, __DPA_W)
#define __dpa_thread_memory_writeback() __dpa_thread_fence(__DPA_MEMORY, __DPA_W, __DPA_W)

#endif
