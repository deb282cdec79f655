// Package windowprobe measures what the DPA's FlexIO window operations
// cost a thread, the numbers hwnic/dpa's cost model (HandlerCost, sdr dpa
// plan) otherwise guesses: a read of host memory that misses, a
// read-invalidate, a store, a writeback, a window configuration. The
// timing runs on the DPA (device/handler.c's sdr_probe, an RPC, with the
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
)

// Failed is what the probe returns when it could not reach the window.
const Failed = math.MaxUint64

// Call runs the probe once on the device: n operations op, returning
// the cycles they took (Failed if the probe failed). It may take a while
// (a spin's n cycles).
type Call func(op Op, n uint32) (cycles uint64, err error)

// Times is what one window operation costs a DPA thread, each the
// median over Rounds runs of N operations, to the nearest nanosecond.
// Read is a read's round trip without its read-invalidate (the cost
// model prices them apart).
type Times struct {
	Read           time.Duration `json:"read_ns"`
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

// calibration is how long the spin that calibrates the clock lasts: long
// against the call's own overhead (a host scheduling hiccup of 1 ms is
// 2 %).
const calibration = 50 * time.Millisecond

// Measure calibrates the cycle counter, then runs each operation rounds
// times n at a time through call. It takes about 100 ms plus the
// operations' own time.
func Measure(call Call, n, rounds int) (Times, error) {
	if n <= 0 || n > math.MaxUint32 || rounds <= 0 {
		return Times{}, fmt.Errorf("windowprobe: %d operations × %d rounds: %w", n, rounds, ErrProbe)
	}
	hz, err := clock(call)
	if err != nil {
		return Times{}, err
	}
	t := Times{ClockHz: hz, N: n, Rounds: rounds}
	median := func(op Op) (time.Duration, error) {
		per := make([]float64, rounds)
		for i := range per {
			c, err := call(op, uint32(n))
			if err != nil {
				return 0, fmt.Errorf("windowprobe: op %d: %w", op, err)
			}
			if c == Failed {
				return 0, fmt.Errorf("windowprobe: op %d failed on the device: %w", op, ErrProbe)
			}
			per[i] = float64(c) / float64(n)
		}
		slices.Sort(per)
		return time.Duration(math.Round(per[rounds/2] / hz * 1e9)), nil
	}
	read, err := median(Read)
	if err != nil {
		return Times{}, err
	}
	for _, m := range []struct {
		op Op
		to *time.Duration
	}{{ReadInvalidate, &t.ReadInvalidate}, {Store, &t.Store}, {Writeback, &t.Writeback}, {Config, &t.Config}} {
		if *m.to, err = median(m.op); err != nil {
			return Times{}, err
		}
	}
	t.Read = max(0, read-t.ReadInvalidate)
	return t, nil
}

// clock returns the cycle counter's rate: a short spin for a first guess
// and the call's overhead (a spin of no cycles), then one of about
// calibration's length.
func clock(call Call) (float64, error) {
	spin := func(cycles uint64) (time.Duration, error) {
		start := time.Now()
		c, err := call(Spin, uint32(min(cycles, math.MaxUint32)))
		if err != nil {
			return 0, fmt.Errorf("windowprobe: spin: %w", err)
		}
		if c == Failed || c < cycles {
			return 0, fmt.Errorf("windowprobe: a spin of %d cycles took %d: %w", cycles, c, ErrProbe)
		}
		return time.Since(start), nil
	}
	overhead, err := spin(0)
	if err != nil {
		return 0, err
	}
	const guessCycles = 1 << 20
	short, err := spin(guessCycles)
	if err != nil {
		return 0, err
	}
	guess := guessCycles / max(short-overhead, time.Microsecond).Seconds()
	cycles := uint64(min(guess*calibration.Seconds(), math.MaxUint32))
	long, err := spin(cycles)
	if err != nil {
		return 0, err
	}
	if long <= overhead {
		return 0, fmt.Errorf("windowprobe: a spin of %d cycles took %v, a call %v: %w", cycles, long, overhead, ErrProbe)
	}
	return float64(cycles) / (long - overhead).Seconds(), nil
}
