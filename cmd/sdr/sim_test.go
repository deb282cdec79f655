package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/testbed/sim/simreport"
)

func TestSimOutputs(t *testing.T) {
	dir := t.TempDir()
	out, report := filepath.Join(dir, "out"), filepath.Join(dir, "docs", "reproduction.md")
	var stdout, stderr bytes.Buffer
	args := []string{"sim", "-sizes", "128KiB,1MiB", "-drops", "1e-3,1e-2", "-distances", "100,1000", "-samples", "5",
		"-focus-size", "1MiB", "-focus-drop", "1e-3", "-out", out, "-report", report}
	if code := run(args, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	// 2 sizes × 2 drops × 5 schemes, and 2 distances × 4 schemes (auto
	// is checked on the grid only).
	const points = 2*2*5 + 2*4
	if !strings.Contains(stderr.String(), "28/28 points") || !strings.Contains(stderr.String(), "ETA") {
		t.Errorf("progress on stderr: %q", stderr.String())
	}
	var js simreport.File
	raw, err := os.ReadFile(filepath.Join(out, "sim.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &js); err != nil {
		t.Fatal(err)
	}
	if len(js.Points) != points || js.Summary.Points != points || js.Summary.Samples != 5*points {
		t.Fatalf("sim.json: %d points, summary %+v; want %d", len(js.Points), js.Summary, points)
	}
	for _, p := range js.Points {
		if p.Samples != 5 || !(p.MeanMs >= p.LosslessMs) || !(p.P999Ms >= p.P50Ms) || p.Slowdown < 1 {
			t.Errorf("point %+v: inconsistent statistics", p)
		}
		if p.ModelMeanMs == nil || p.ModelDeviation == nil || p.Ran == "auto" {
			t.Errorf("point %s (ran %s): no model beside it", p.Scheme, p.Ran)
		}
	}
	if js.Summary.ChoosePoints != 4 || js.Summary.ChooseAt == "" {
		t.Errorf("Choose check over %d points (%q), want 4", js.Summary.ChoosePoints, js.Summary.ChooseAt)
	}
	f, err := os.Open(filepath.Join(out, "sim.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) != points+1 || recs[0][0] != "sweep" {
		t.Fatalf("sim.csv: %d records, %v", len(recs), err)
	}
	for _, name := range []string{"slowdown_vs_drop_mean", "slowdown_vs_drop_p999", "slowdown_vs_size", "slowdown_vs_distance", "speedup_heatmap"} {
		png, err := os.ReadFile(filepath.Join(out, name+".png"))
		if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
			t.Errorf("%s.png: %v", name, err)
		}
		svg, err := os.ReadFile(filepath.Join(out, name+".svg"))
		if err != nil || !bytes.Contains(svg, []byte("<svg")) {
			t.Errorf("%s.svg: %v", name, err)
		}
	}
	md, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DO NOT EDIT", "## Slowdown vs drop rate, 1MiB", "## Slowdown vs distance", "## EC/SR speedup",
		"## Against the paper's claims", "6.5×", "12.2×", "1e-3", "../out/speedup_heatmap.svg", js.Summary.ChooseAt} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("report lacks %q", want)
		}
	}
	// The table on stdout names every point.
	if n := strings.Count(stdout.String(), "\n| grid |") + strings.Count(stdout.String(), "\n| distance |"); n != points {
		t.Errorf("stdout table has %d rows, want %d", n, points)
	}
}

func TestSimJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"sim", "-sizes", "128KiB", "-drops", "0", "-schemes", "sr-rto,hybrid", "-distances", "", "-samples", "2", "-json"},
		&stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var js simreport.File
	if err := json.Unmarshal(stdout.Bytes(), &js); err != nil {
		t.Fatalf("stdout is not JSON: %v", err)
	}
	if len(js.Points) != 2 {
		t.Fatalf("%d points, want 2", len(js.Points))
	}
	// Lossless SR completes in exactly the lossless time, and lossless
	// Hybrid in exactly its model's (EC's: the parity goes first).
	if sr := js.Points[0]; sr.Slowdown != 1 || sr.ModelDeviation == nil || *sr.ModelDeviation != 0 {
		t.Errorf("lossless sr-rto: %+v", sr)
	}
	if h := js.Points[1]; h.Scheme != "hybrid-mds(32,8)" || h.ModelDeviation == nil || *h.ModelDeviation != 0 {
		t.Errorf("lossless hybrid: %+v", h)
	}
}

func TestSimUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-sizes", "0"},
		{"-sizes", "12XB"},
		{"-drops", "1.5"},
		{"-schemes", "tcp"},
		{"-schemes", "ec-mds(300,8)"},
		{"-loss", "pareto"},
		{"-burst", "0.5", "-loss", "ge"},
		{"-samples", "0"},
		{"-gbps", "-1"},
		{"-distances", "-5"},
		{"-report", "x.md"},
		{"extra"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"sim"}, args...), &stdout, &stderr); code != exitUsage || stderr.Len() == 0 {
			t.Errorf("sdr sim %q: exit %d, stderr %q; want %d and a message", args, code, stderr.String(), exitUsage)
		}
	}
}

// TestSimShardMerge: a sweep run as three shards (one of them told its
// place by Slurm's job-array variables) and merged gives the whole run's
// sim.csv byte for byte; a missing shard fails the merge.
func TestSimShardMerge(t *testing.T) {
	dir := t.TempDir()
	grid := []string{"sim", "-sizes", "128KiB,1MiB", "-drops", "1e-3,1e-2", "-distances", "1000", "-samples", "4", "-focus-size", "1MiB"}
	runSim := func(extra ...string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run(append(append([]string{}, grid...), extra...), &stdout, &stderr); code != exitOK {
			t.Fatalf("%v: exit %d: %s", extra, code, stderr.String())
		}
	}
	runSim("-out", filepath.Join(dir, "whole"))
	runSim("-shard", "0/3", "-out", filepath.Join(dir, "s0"))
	runSim("-shard", "2/3", "-out", filepath.Join(dir, "s2"))
	t.Setenv("SLURM_ARRAY_TASK_ID", "2") // --array=1-3: task 2 is shard 1
	t.Setenv("SLURM_ARRAY_TASK_MIN", "1")
	t.Setenv("SLURM_ARRAY_TASK_COUNT", "3")
	runSim("-out", filepath.Join(dir, "s1"))
	shards := strings.Join([]string{filepath.Join(dir, "s0"), filepath.Join(dir, "s1"), filepath.Join(dir, "s2")}, ",")
	runSim("-merge", shards, "-out", filepath.Join(dir, "merged"), "-report", filepath.Join(dir, "merged.md"))
	whole, err := os.ReadFile(filepath.Join(dir, "whole", "sim.csv"))
	if err != nil {
		t.Fatal(err)
	}
	merged, err := os.ReadFile(filepath.Join(dir, "merged", "sim.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(whole, merged) {
		t.Errorf("merged sim.csv differs from the whole run's:\n%s\nvs\n%s", merged, whole)
	}
	if n := bytes.Count(whole, []byte("\n")); n != 1+2*2*5+4 {
		t.Errorf("%d lines in the whole run's CSV", n)
	}
	part, err := os.ReadFile(filepath.Join(dir, "s1", "sim.csv"))
	if err != nil || bytes.Count(part, []byte("\n")) >= bytes.Count(whole, []byte("\n")) {
		t.Errorf("shard 1 holds %d lines, not a part: %v", bytes.Count(part, []byte("\n")), err)
	}
	var stdout, stderr bytes.Buffer
	args := append(append([]string{}, grid...), "-merge", filepath.Join(dir, "s0")+","+filepath.Join(dir, "s1"), "-out", filepath.Join(dir, "bad"))
	if code := run(args, &stdout, &stderr); code == exitOK || !strings.Contains(stderr.String(), "no shard has point") {
		t.Errorf("a merge without shard 2: exit %d, %q", code, stderr.String())
	}
}

// TestSimTrace: -trace writes each point's first sample's decisions, one
// file per point named after it, which sdr trace reads and draws: one
// transfer, started by the sender and completed by the receiver.
func TestSimTrace(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args := []string{"sim", "-sizes", "128KiB", "-drops", "1e-2", "-schemes", "sr-nack,ec-xor(8,4)", "-distances", "", "-samples", "2", "-trace", dir}
	if code := run(args, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	names := dirNames(t, dir)
	want := []string{"trace-1-sr-nack-128KiB-loss0.01.jsonl", "trace-2-ec-xor8-4-128KiB-loss0.01.jsonl"}
	if !slices.Equal(names, want) {
		t.Fatalf("trace files %v, want %v", names, want)
	}
	for _, name := range names {
		path := filepath.Join(dir, name)
		events := readTraceFile(t, path)
		count := map[string]int{}
		for _, e := range events {
			count[e.Side+" "+string(e.Kind)]++
		}
		if count["sender start"] != 1 || count["receiver complete"] != 1 || count["sender send"]+count["sender send-coded"] == 0 {
			t.Errorf("%s: %d events, by kind %v; want one transfer started, sent and completed", name, len(events), count)
		}
		stdout.Reset()
		stderr.Reset()
		if code := run([]string{"trace", "-o", dir, path}, &stdout, &stderr); code != exitOK || !strings.Contains(stderr.String(), "transfer 0 drawn") {
			t.Errorf("sdr trace %s: exit %d: %s", name, code, stderr.String())
		}
	}
	// Shards number their points as the whole run does: two shards into
	// one directory write the whole run's files.
	shardDir := t.TempDir()
	for i := range 2 {
		shard := append(slices.Clone(args[:len(args)-1]), shardDir, "-shard", fmt.Sprintf("%d/2", i), "-out", filepath.Join(t.TempDir(), "out"))
		if code := run(shard, &stdout, &stderr); code != exitOK {
			t.Fatalf("shard %d: exit %d: %s", i, code, stderr.String())
		}
	}
	if names := dirNames(t, shardDir); !slices.Equal(names, want) {
		t.Errorf("two shards' trace files %v, want the whole run's %v", names, want)
	}
}
