package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestDPAPlan(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"dpa", "plan", "-gbps", "400", "-mtu", "4KiB", "-chunk", "64KiB"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"12.21 Mpps", "16 packets", "256 packets", "0.675 µs", "2.748 µs", "9 (92 % busy)", "34 (99 % busy)",
		"window reads      0.000 µs              1.659 µs (2.074 × 0.800 µs)", "window stores     0.000 µs              0.044 µs (8.883 × 0.005 µs)",
		"writebacks        0.000 µs              0.239 µs (1.195 × 0.200 µs)", "lock held 1.163 µs", "15 arriving together",
		"guess: a PCIe Gen5", "    packet              2      8          1                0        0", "assumptions:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"dpa", "plan", "-gbps", "100000", "-mtu", "64", "-chunk", "64"}, &out, &errb); code != exitOK ||
		!strings.Contains(out.String(), "DOES NOT FIT") {
		t.Errorf("exit %d, output:\n%s", code, out.String())
	}
	for _, args := range [][]string{{"dpa"}, {"dpa", "plan", "-chunk", "5000"}, {"dpa", "plan", "-mtu", "x"}, {"dpa", "plan", "-gbps", "0"}, {"dpa", "plan", "-rtt", "-1us"}, {"dpa", "plan", "-msg", "0"}} {
		if code := run(args, &out, &errb); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// TestDPADoctor runs sdr dpa doctor on dpasim (every step but the
// hardware-only one passes, marked simulated, and the verdict says it
// tells nothing of the hardware) and on a BlueField this build lacks (the
// first step fails, exit 1, with where to look).
func TestDPADoctor(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"dpa", "doctor"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"dpasim", "[1/5] device and firmware", "skipped: hardware only", "[5/5] one SDR message end to end       pass (simulated)",
		"it says nothing of a BlueField-3"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"dpa", "doctor", "-dev", "mlx5_0"}, &out, &errb); code != exitFault ||
		!strings.Contains(out.String(), "FAIL") || !strings.Contains(out.String(), "look at:") {
		t.Errorf("exit %d, output:\n%s", code, out.String())
	}
}
