// Package windowprobe measures what the DPA's FlexIO window operations
// cost a thread, the numbers hwnic/dpa's cost model (HandlerCost, sdr dpa
// plan) otherwise guesses: a read of host memory that misses, a
// read-invalidate, a store, a writeback, a window configuration. The
// timing runs on the DPA (device/probe.c's sdr_probe, an RPC, with the
// thread's cycle counter); this package drives it through a Call the
// backend provides — flexio_process_call on a BlueField-3 (hwnic/dpa),
// a hostsim thread in dpasim — calibrates the cycle counter against the
// host's clock and turns cycles into durations.
package windowprobe

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Op is one of the probe's operations (device/sdr_rx.h's enum
// sdr_probe_op).
type Op uint32

const (
	Spin           Op = iota // wait until n cycles have passed
	Read                     // a read-invalidate, then a load whose value is used
	ReadInvalidate           // a read-invalidate alone
	Store                    // an 8-byte store, not written back
	Writeback                // a store, then a writeback
	Config                   // a window configuration with three pointer acquisitions
	ReadCached               // a load whose value is used, no read-invalidate
)

func (op Op) String() string {
	names := [...]string{"spin", "read", "read-invalidate", "store", "writeback", "window configuration", "cached read"}
	if int(op) < len(names) {
		return names[op]
	}
	return fmt.Sprintf("op %d", uint32(op))
}

// Failed is what the probe returns when it could not reach the window.
const Failed = math.MaxUint64

// Call runs the probe once on the device: n operations op, returning
// the cycles they took (Failed if the probe failed). It may take a while
// (a spin's n cycles).
type Call func(op Op, n uint32) (cycles uint64, err error)

// Times is what one window operation costs a DPA thread, each the
// median over Rounds runs of N operations, to the nearest nanosecond
// (a store's few cycles lose some precision). Read is a read's round
// trip without its read-invalidate, Writeback a writeback without its
// store: the cost model prices them apart. ReadCached is a read with no
// read-invalidate before it: a hit if the window caches, which the cost
// model does not assume.
type Times struct {
	Read           time.Duration `json:"read_ns"`
	ReadCached     time.Duration `json:"read_cached_ns"`
	ReadInvalidate time.Duration `json:"read_invalidate_ns"`
	Store          time.Duration `json:"store_ns"`
	Writeback      time.Duration `json:"writeback_ns"`
	Config         time.Duration `json:"config_ns"`
	// ClockHz is the DPA cycle counter's rate, calibrated by spins
	// against the host's clock.
	ClockHz float64 `json:"clock_hz"`
	N       int     `json:"ops"`
	Rounds  int     `json:"rounds"`
}

// ErrProbe means the probe ran but its answer makes no sense: it failed
// on the device, or the clock did not advance.
var ErrProbe = errors.New("windowprobe: no measurement")

// The calibration: a short spin of shortSpin cycles, then one lasting
// about calibration (long against a call's overhead and a host's
// scheduling hiccup), its cycles bounded by what a clock of at most
// maxClockHz counts in that time.
const (
	shortSpin   = 1 << 20
	calibration = 50 * time.Millisecond
	maxClockHz  = 4e9
)

// Measure calibrates the cycle counter, then runs each operation rounds
// times, n at a time, through call. It takes about 100 ms plus the
// operations' own time.
func Measure(call Call, n, rounds int) (Times, error) {
	if n <= 0 || uint64(n) > math.MaxUint32 || rounds <= 0 {
		return Times{}, fmt.Errorf("windowprobe: %d operations × %d rounds: %w", n, rounds, ErrProbe)
	}
	hz, err := clock(call)
	if err != nil {
		return Times{}, err
	}
	t := Times{ClockHz: hz, N: n, Rounds: rounds}
	median := func(op Op) (float64, error) {
		per := make([]float64, rounds)
		for i := range per {
			c, err := call(op, uint32(n))
			if err != nil {
				return 0, fmt.Errorf("windowprobe: %v: %w", op, err)
			}
			if c == Failed {
				return 0, fmt.Errorf("windowprobe: %v failed on the device: %w", op, ErrProbe)
			}
			per[i] = float64(c) / float64(n)
		}
		slices.Sort(per)
		return per[(rounds-1)/2], nil
	}
	cycles := map[Op]float64{}
	for _, op := range []Op{Read, ReadCached, ReadInvalidate, Store, Writeback, Config} {
		if cycles[op], err = median(op); err != nil {
			return Times{}, err
		}
	}
	ns := func(c float64) time.Duration { return time.Duration(math.Round(max(0, c) / hz * 1e9)) }
	t.Read, t.ReadCached, t.ReadInvalidate = ns(cycles[Read]-cycles[ReadInvalidate]), ns(cycles[ReadCached]), ns(cycles[ReadInvalidate])
	t.Store, t.Writeback, t.Config = ns(cycles[Store]), ns(cycles[Writeback]-cycles[Store]), ns(cycles[Config])
	return t, nil
}

// clock returns the cycle counter's rate from two spins, a short one and
// one of about calibration's length, as the difference of the cycles the
// device counted over the difference of the host's times: the call's own
// overhead, the same in both, cancels. A first call warms the path.
func clock(call Call) (float64, error) {
	spin := func(cycles uint64) (uint64, time.Duration, error) {
		start := time.Now()
		c, err := call(Spin, uint32(cycles))
		if err != nil {
			return 0, 0, fmt.Errorf("windowprobe: spin: %w", err)
		}
		if c == Failed || c < cycles {
			return 0, 0, fmt.Errorf("windowprobe: a spin of %d cycles counted %d: %w", cycles, c, ErrProbe)
		}
		return c, time.Since(start), nil
	}
	if _, _, err := spin(0); err != nil {
		return 0, err
	}
	c1, t1, err := spin(shortSpin)
	if err != nil {
		return 0, err
	}
	// A loaded host stretches the short spin and the guess comes out
	// low: size the long spin again from the last one until it lasts at
	// least half of calibration (three tries).
	hz := min(float64(c1)/max(t1, time.Microsecond).Seconds(), maxClockHz)
	for try := 0; ; try++ {
		c2, t2, err := spin(uint64(max(2*shortSpin, min(hz, maxClockHz)*calibration.Seconds())))
		if err != nil {
			return 0, err
		}
		if c2 <= c1 || t2 <= t1 {
			return 0, fmt.Errorf("windowprobe: spins of %d and %d cycles took %v and %v: %w", c1, c2, t1, t2, ErrProbe)
		}
		hz = float64(c2-c1) / (t2 - t1).Seconds()
		if t2 >= calibration/2 || try == 2 {
			return hz, nil
		}
	}
}
