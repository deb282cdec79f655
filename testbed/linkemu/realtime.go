package linkemu

import (
	"fmt"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// rtPriority is the SCHED_FIFO priority of the emulator's threads: above
// every normal task, below the kernel's own real-time threads (50 and
// up for threaded interrupts).
const rtPriority = 10

// realtime puts the calling thread in SCHED_FIFO at rtPriority, as a
// kernel's netem runs in softirq ahead of processes: on a machine busy
// with other work, a normal thread waits milliseconds for a core, and the
// emulated delay with it. A real-time thread only ever blocks in the
// kernel or forwards, and the kernel's real-time throttling
// (sched_rt_runtime_us) leaves other tasks 5 % of each core at worst. It
// needs CAP_SYS_NICE; without it the emulator runs at normal priority.
func realtime() error {
	if err := unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: rtPriority}, 0); err != nil {
		return fmt.Errorf("linkemu: SCHED_FIFO (needs CAP_SYS_NICE): %w", err)
	}
	return nil
}

// threadsPerEmulator is how many threads an emulator keeps locked.
const threadsPerEmulator = 2

// procsMu serializes the GOMAXPROCS changes of emulators starting and
// closing at once.
var procsMu sync.Mutex

// addProcs raises (n > 0) or lowers GOMAXPROCS by n. The emulator's
// threads spend their time blocked in the kernel, and a thread returning
// from a system call needs a P to run Go code again: with none idle it
// waits until the runtime's monitor takes one back from another thread,
// up to 10 ms, which a 1 ms delay budget cannot absorb. One P more per
// emulator thread keeps one idle for each. Extra Ps cost nothing while
// idle; the process's other goroutines may use them too.
func addProcs(n int) {
	procsMu.Lock()
	defer procsMu.Unlock()
	runtime.GOMAXPROCS(max(1, runtime.GOMAXPROCS(0)+n))
}
