package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDPAPlan(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"dpa", "plan", "-gbps", "400", "-mtu", "4KiB", "-chunk", "64KiB"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"12.21 Mpps", "16 packets", "256 packets", "0.675 µs", "2.753 µs", "9 (92 % busy)", "34 (99 % busy)",
		"window reads      0.000 µs              1.659 µs (2.074 × 0.800 µs)", "window stores     0.000 µs              0.044 µs (8.887 × 0.005 µs)",
		"writebacks        0.000 µs              0.240 µs (1.199 × 0.200 µs)", "lock held 1.163 µs", "15 arriving together",
		"guess: a PCIe Gen5", "    CQE, locked         1      8          1                0        0",
		"    fence marker        0      1          1                0        0", "assumptions:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"dpa", "plan", "-gbps", "100000", "-mtu", "64", "-chunk", "64"}, &out, &errb); code != exitOK ||
		!strings.Contains(out.String(), "DOES NOT FIT") {
		t.Errorf("exit %d, output:\n%s", code, out.String())
	}
	for _, args := range [][]string{{"dpa"}, {"dpa", "plan", "-chunk", "5000"}, {"dpa", "plan", "-mtu", "x"}, {"dpa", "plan", "-gbps", "0"}, {"dpa", "plan", "-rtt", "-1us"}, {"dpa", "plan", "-msg", "0"}, {"dpa", "plan", "-channels", "0"}} {
		if code := run(args, &out, &errb); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// TestDPADoctor runs sdr dpa doctor on dpasim (every step but the
// hardware-only one passes, marked simulated, the window operations and
// the message are timed, the plans printed, the verdict says it tells
// nothing of the hardware, and -report writes all of it as JSON) and on a
// BlueField this build lacks (the first step fails, exit 1, with where to
// look).
func TestDPADoctor(t *testing.T) {
	var out, errb bytes.Buffer
	report := filepath.Join(t.TempDir(), "bringup.json")
	if code := run([]string{"dpa", "doctor", "-report", report}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
	}
	for _, want := range []string{"dpasim", "[1/6] device and firmware", "skipped: hardware only", "[5/6] one SDR message end to end       pass (simulated)",
		"[6/6] window operations timed          pass (simulated): read ", "with the model's guessed costs     2.753 µs per packet, 34 threads",
		"with hostsim's costs (simulated)", "report written to", "it says nothing of a BlueField-3"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The report: the walk, marked simulated, with its measurements,
	// the machine's description and both plans.
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Hardware bool `json:"hardware"`
		Steps    []struct {
			Step, Status string
		} `json:"steps"`
		Window struct {
			Writeback int64   `json:"writeback_ns"`
			ClockHz   float64 `json:"clock_hz"`
		} `json:"window"`
		MessageBytes int                    `json:"message_bytes"`
		Environment  map[string]string      `json:"environment"`
		Guessed      *struct{ Threads int } `json:"plan_guessed"`
		Measured     *struct{ Threads int } `json:"plan_measured"`
		PlanError    string                 `json:"plan_error"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("report: %v\n%s", err, b)
	}
	if doc.Hardware || len(doc.Steps) != 6 || doc.Steps[4].Status != "pass" || doc.Steps[5].Status != "pass" || doc.Window.Writeback <= 0 || doc.Window.ClockHz <= 0 ||
		doc.MessageBytes != 64<<10 || doc.Environment["uname -srm"] == "" || doc.Guessed == nil || doc.Guessed.Threads != 34 || doc.Measured == nil || doc.Measured.Threads < 1 ||
		doc.PlanError != "" {
		t.Errorf("report:\n%s", b)
	}
	out.Reset()
	if code := run([]string{"dpa", "doctor", "-dev", "mlx5_0"}, &out, &errb); code != exitFault ||
		!strings.Contains(out.String(), "FAIL") || !strings.Contains(out.String(), "look at:") {
		t.Errorf("exit %d, output:\n%s", code, out.String())
	}
}
