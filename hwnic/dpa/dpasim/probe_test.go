//go:build cgo

package dpasim

import (
	"context"
	"testing"
)

// TestProbeWindow runs probe.c's sdr_probe through hostsim: every
// operation returns a time, the clock calibrates to hostsim's (the
// host's nanoseconds: 1 GHz, within a factor of two on a loaded
// machine), and a read or a writeback through hostsim's window model
// costs more than a plain store into the thread's copy.
func TestProbeWindow(t *testing.T) {
	got, err := New(nil).ProbeWindow(context.Background(), 200, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got.ClockHz < 0.5e9 || got.ClockHz > 2e9 {
		t.Errorf("clock %.3g Hz, want hostsim's 1e9", got.ClockHz)
	}
	if got.Config <= 0 || got.Writeback <= 0 || got.ReadInvalidate <= 0 || !(got.Writeback > got.Store) {
		t.Errorf("%+v: want every operation timed, a writeback dearer than a store", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := New(nil).ProbeWindow(ctx, 10, 1); err == nil {
		t.Error("a canceled probe measured")
	}
}
