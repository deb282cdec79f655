package windowprobe

import (
	"errors"
	"testing"
	"time"
)

// device is a fake DPA: a cycle counter at hz, each operation a fixed
// number of cycles (a read's includes its read-invalidate's, a
// writeback's its store's), a spin sleeping its cycles out.
type device struct {
	hz    float64
	costs map[Op]uint64
	calls int
}

func (d *device) call(op Op, n uint32) (uint64, error) {
	d.calls++
	if op == Spin {
		// The device counts its own clock while it spins: at least n,
		// more if the host's sleep ran over.
		start := time.Now()
		time.Sleep(time.Duration(float64(n) / d.hz * 1e9))
		return max(uint64(n), uint64(time.Since(start).Seconds()*d.hz)), nil
	}
	return uint64(n) * d.costs[op], nil
}

// TestMeasure: the operations' times are their cycles at the calibrated
// clock (a read without its read-invalidate, a writeback without its
// store), and the clock is near the
// device's (the calibration sleeps, which a loaded machine stretches:
// within a factor of two, against the factor of 1000 of a wrong unit).
func TestMeasure(t *testing.T) {
	d := &device{hz: 2e9, costs: map[Op]uint64{Read: 1700, ReadCached: 40, ReadInvalidate: 100, Store: 8, Writeback: 408, Config: 3200}}
	got, err := Measure(d.call, 1000, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got.ClockHz < d.hz/2 || got.ClockHz > d.hz*2 {
		t.Fatalf("clock %.3g Hz, the device's %.3g", got.ClockHz, d.hz)
	}
	// Each operation is its cycles at the calibrated clock, to the
	// nanosecond; a read without its read-invalidate.
	for _, c := range []struct {
		what   string
		got    time.Duration
		cycles float64
	}{{"read", got.Read, 1600}, {"cached read", got.ReadCached, 40}, {"read-invalidate", got.ReadInvalidate, 100},
		{"store", got.Store, 8}, {"writeback", got.Writeback, 400}, {"config", got.Config, 3200}} {
		want := c.cycles / got.ClockHz * 1e9
		if d := float64(c.got) - want; d < -1 || d > 1 {
			t.Errorf("%s %v, want %.1f ns (%.0f cycles at %.4g Hz)", c.what, c.got, want, c.cycles, got.ClockHz)
		}
	}
	if want := time.Duration(1600 / d.hz * 1e9); got.Read < want/2 || got.Read > want*2 {
		t.Errorf("read %v, want about %v", got.Read, want)
	}
	if spins := d.calls - 6*3; got.N != 1000 || got.Rounds != 3 || spins < 3 || spins > 5 {
		t.Errorf("N %d, rounds %d, %d calls: want 1000, 3, and 6 operations × 3 beside 3 to 5 spins", got.N, got.Rounds, d.calls)
	}
}

// TestMeasureFailures: a probe that fails on the device, a clock that
// does not advance and bad arguments are errors, never times.
func TestMeasureFailures(t *testing.T) {
	failing := &device{hz: 1e9, costs: map[Op]uint64{Writeback: Failed}}
	if _, err := Measure(func(op Op, n uint32) (uint64, error) {
		if op == Writeback {
			return Failed, nil
		}
		return failing.call(op, n)
	}, 10, 1); !errors.Is(err, ErrProbe) {
		t.Errorf("a failed writeback probe: %v, want ErrProbe", err)
	}
	if _, err := Measure(func(Op, uint32) (uint64, error) { return 0, nil }, 10, 1); !errors.Is(err, ErrProbe) {
		t.Errorf("a clock that does not advance: %v, want ErrProbe", err)
	}
	boom := errors.New("rpc failed")
	if _, err := Measure(func(Op, uint32) (uint64, error) { return 0, boom }, 10, 1); !errors.Is(err, boom) {
		t.Errorf("a failing call: %v, want it wrapped", err)
	}
	for _, c := range [][2]int{{0, 1}, {1, 0}, {-1, 1}} {
		if _, err := Measure(failing.call, c[0], c[1]); !errors.Is(err, ErrProbe) {
			t.Errorf("Measure(n=%d, rounds=%d): %v", c[0], c[1], err)
		}
	}
}
