package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/testbed/ring"
)

// runAllreduceRows runs sdr allreduce -json with args and returns its rows;
// it fails t on a non-zero exit or output that is not the rows.
func runAllreduceRows(t *testing.T, args ...string) []ring.Row {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(append(append([]string{"allreduce"}, args...), "-json"), &out, &errOut); code != exitOK {
		t.Fatalf("sdr allreduce %v: exit %d: %s", args, code, errOut.String())
	}
	var rows []ring.Row
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	return rows
}

func TestAllreduceCommand(t *testing.T) {
	rows := runAllreduceRows(t, "-ranks", "3", "-b", "64KiB", "-e", "128KiB", "-n", "2", "-w", "0",
		"-link", "rate=1Gbit,delay=1ms,loss=1%", "-schemes", "sr-nack,ec")
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 2 sizes × 2 schemes", len(rows))
	}
	for _, r := range rows {
		if !r.Checked || r.Wrong != 0 || r.Count != r.Size/4 || r.MeanMs <= 0 || r.P50Ms > r.P999Ms {
			t.Errorf("row %+v", r)
		}
		if want := r.AlgBWGBps * 2 * 2 / 3; math.Abs(r.BusBWGBps-want) > 1e-9 {
			t.Errorf("%s %d: busbw %v, want algbw·2(N−1)/N = %v", r.Scheme, r.Size, r.BusBWGBps, want)
		}
		if r.ModelMeanMs <= 0 || r.ModelP999Ms < r.ModelMeanMs {
			t.Errorf("%s %d: model bounds %v, %v", r.Scheme, r.Size, r.ModelMeanMs, r.ModelP999Ms)
		}
	}
	if rows[0].Scheme != "sr-nack" || rows[2].Scheme != "ec" || rows[1].Size != 128<<10 {
		t.Errorf("rows out of order: %+v", rows)
	}
}

func TestAllreduceTable(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"allreduce", "-ranks", "2", "-b", "4KiB", "-e", "4KiB", "-n", "1", "-link", "delay=1ms", "-schemes", "sr-rto"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"busbw(GB/s)", "#wrong", "sr-rto", "4096"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if code := run([]string{"allreduce", "-ranks", "1"}, &out, &errOut); code == exitOK {
		t.Error("a ring of one accepted")
	}
}

// TestAllreduceAcrossProcesses starts four sdr processes as srun would
// (SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST; no flags naming
// ranks), each on its own UDP address: rank 0's table must show every
// size verified.
func TestAllreduceAcrossProcesses(t *testing.T) {
	const ranks = 4
	port := freeTCPPort(t)
	outs := make([]bytes.Buffer, ranks)
	cmds := make([]*exec.Cmd, ranks)
	for r := range ranks {
		cmd := exec.Command(os.Args[0], "allreduce", "-b", "256KiB", "-e", "512KiB", "-n", "2", "-schemes", "sr-nack,ec",
			"-coordinator", "127.0.0.1:"+port, "-dev", "udp:127.0.3{rank}.1", "-json")
		cmd.Env = append(os.Environ(), asSDREnv+"=1", fmt.Sprintf("SLURM_PROCID=%d", r), fmt.Sprintf("SLURM_NTASKS=%d", ranks),
			"SLURM_STEP_NODELIST=localhost")
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	timer := time.AfterFunc(2*time.Minute, func() {
		for _, c := range cmds {
			c.Process.Kill()
		}
	})
	defer timer.Stop()
	for r, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("rank %d: %v\n%s", r, err, outs[r].String())
		}
	}
	var rows []ring.Row
	if err := json.Unmarshal(outs[0].Bytes(), &rows); err != nil {
		t.Fatalf("rank 0: %v\n%s", err, outs[0].String())
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows", len(rows))
	}
	for _, row := range rows {
		if row.Wrong != 0 || !row.Checked || row.BusBWGBps <= 0 {
			t.Errorf("%+v", row)
		}
	}
	for r := 1; r < ranks; r++ {
		if outs[r].Len() != 0 {
			t.Errorf("rank %d printed %q; only rank 0 reports", r, outs[r].String())
		}
	}
}

// freeTCPPort returns a loopback TCP port nothing listens on now.
func freeTCPPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

// TestAllreduceNamespaces runs the ring with every hop between network
// namespaces through the AF_XDP link emulator (root).
func TestAllreduceNamespaces(t *testing.T) {
	privileged.Require(t)
	rows := runAllreduceRows(t, "-netns", "-ranks", "3", "-b", "256KiB", "-e", "256KiB", "-n", "2", "-w", "0",
		"-link", "rate=1Gbit,delay=2ms,loss=1%", "-schemes", "sr-nack,ec")
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		if r.Wrong != 0 || !r.Checked || r.MeanMs < 2*2*2 { // at least a round trip per step
			t.Errorf("%+v", r)
		}
	}
}

// TestAllreduceSim runs a small Fig. 13 grid in the simulator: rows for
// every point, the model's bounds around the simulated mean and p99.9,
// and the report files.
func TestAllreduceSim(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	code := run([]string{"allreduce", "-sim", "-samples", "10", "-ranks-list", "4", "-drops", "1e-3,1e-2",
		"-sim-size", "16MiB", "-out", dir, "-json"}, &out, &errOut)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	js := out.Bytes()[bytes.IndexByte(out.Bytes(), '['):] // the table comes first
	var rows []ring.SimRow
	if err := json.Unmarshal(js, &rows); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 2 drops × 3 schemes", len(rows))
	}
	for _, r := range rows {
		if r.ModelMeanMs <= 0 || r.MeanMs < r.ModelMeanMs*0.999 || r.P999Ms > r.ModelP999Ms*1.001 {
			t.Errorf("%+v: outside the model's bounds", r)
		}
		if r.Scheme == "ec-mds(32,8)" && r.SpeedupP999 <= 1 {
			t.Errorf("EC's p99.9 speedup over SR-RTO %v at drop %g", r.SpeedupP999, r.Drop)
		}
	}
	for _, f := range []string{"README.md", "allreduce.json", "speedup_p999.svg", "speedup_p999.png"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

// TestAllreduceLinkSweep: -link repeated sweeps the hops' link; -out
// writes the rows, a README and the speedup plot.
func TestAllreduceLinkSweep(t *testing.T) {
	dir := t.TempDir()
	rows := runAllreduceRows(t, "-ranks", "3", "-b", "64KiB", "-e", "64KiB", "-n", "2", "-w", "0",
		"-link", "rate=1Gbit,delay=1ms,loss=0.1%", "-link", "rate=1Gbit,delay=1ms,loss=2%", "-schemes", "sr-rto,ec",
		"-out", dir)
	if len(rows) != 4 || rows[0].Loss != 0.001 || rows[3].Loss != 0.02 || !strings.Contains(rows[3].Link, "loss=2%") {
		t.Fatalf("rows %+v", rows)
	}
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil || !strings.Contains(string(readme), "p99.9 speedup vs SR-RTO") || !strings.Contains(string(readme), "| 3 | 0.02 | ec |") {
		t.Errorf("README: %v\n%s", err, readme)
	}
	for _, f := range []string{"allreduce.json", "speedup_p999.svg"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

// TestAllreduceOwnHop: -hop gives one hop its own link; its 20 ms one way
// holds up every step of the ring.
func TestAllreduceOwnHop(t *testing.T) {
	args := []string{"-ranks", "3", "-b", "16KiB", "-e", "16KiB", "-n", "2", "-w", "0", "-link", "delay=1ms",
		"-schemes", "sr-nack"}
	rows := runAllreduceRows(t, append(args, "-hop", "1=delay=20ms")...)
	if len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
	// 4 steps, each waiting for hop 1's 20 ms, less what pipelining hides.
	if rows[0].MeanMs < 40 || rows[0].Wrong != 0 || rows[0].ModelMeanMs != 0 {
		t.Errorf("%+v: want at least 40 ms, verified, no single-link model", rows[0])
	}
	var out, errOut bytes.Buffer
	if code := run(append(append([]string{"allreduce"}, args...), "-hop", "3=delay=1ms"), &out, &errOut); code == exitOK {
		t.Error("hop 3 of a 3-rank ring accepted")
	}
}
