package doctor_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/hwnic/dpa"
	"github.com/sdr-rdma/sdr/hwnic/dpa/doctor"
)

// TestSimulatedWalk runs the bring-up walk on dpasim: every step but the
// hardware-only one passes, in order, the message arrives intact, and the
// window operations (last) and the message are timed.
func TestSimulatedWalk(t *testing.T) {
	target, closeTarget, err := doctor.Simulated()
	if err != nil {
		t.Fatal(err)
	}
	defer closeTarget()
	var out strings.Builder
	rep := doctor.Run(context.Background(), target, 10*time.Second, &out)
	results := rep.Steps
	t.Logf("walk on %s:\n%s", target.Name, out.String())
	if len(results) != 6 {
		t.Fatalf("%d steps reported, want 6", len(results))
	}
	for _, r := range results {
		want := doctor.Pass
		if r.Step == "FlexIO process and window" {
			want = doctor.Skipped
		}
		if r.Status != want {
			t.Errorf("%s: %v (%s), want %v", r.Step, r.Status, r.Detail, want)
		}
	}
	if msg := results[4]; msg.Step != "one SDR message end to end" || !strings.Contains(msg.Detail, "intact") {
		t.Errorf("step 5: %s: %q", msg.Step, msg.Detail)
	}
	// The report reads back as it was written (the statuses by name).
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back doctor.Report
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, rep) {
		t.Errorf("the report read back as %+v (%v), written as %+v", back, err, rep)
	}
	if err := json.Unmarshal([]byte(`{"steps":[{"status":"maybe"}]}`), &back); err == nil {
		t.Error(`a status "maybe" read back without an error`)
	}
	// The measurements a BlueField-3 owner sends back, here hostsim's.
	if w := rep.Window; rep.Failed() || rep.Hardware || w == nil || w.Writeback <= 0 || w.Config <= 0 || w.N != doctor.ProbeOps ||
		rep.MessageBytes != doctor.MessageSize || rep.MessageTime <= 0 {
		t.Errorf("report %+v (window %+v): want no failure, simulated, every window operation and the message timed", rep, w)
	}
}

// TestWalkStopsAtFirstFailure walks a target that cannot open (the
// BlueField backend in a build without it): the first step fails with
// where to look, and no later step runs.
func TestWalkStopsAtFirstFailure(t *testing.T) {
	target := doctor.Target{Name: "no BlueField", Sender: dpa.New(dpa.Options{Device: "mlx5_0"}),
		Receiver: dpa.New(dpa.Options{Device: "mlx5_1"}), Hardware: true}
	var out strings.Builder
	rep := doctor.Run(context.Background(), target, time.Second, &out)
	results := rep.Steps
	if !rep.Failed() || rep.Window != nil || rep.MessageTime != 0 {
		t.Errorf("report %+v: want failed, nothing measured", rep)
	}
	if results[0].Status != doctor.Fail || results[0].Hint == "" || !strings.Contains(results[0].Detail, "dpa") {
		t.Fatalf("first step: %+v", results[0])
	}
	for _, r := range results[1:] {
		if r.Status != doctor.NotRun {
			t.Errorf("%s ran after the first step failed: %v", r.Step, r.Status)
		}
	}
	if !strings.Contains(out.String(), "look at:") {
		t.Errorf("no hint printed:\n%s", out.String())
	}
}
