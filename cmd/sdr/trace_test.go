package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/reliability/traceplot"
	"github.com/sdr-rdma/sdr/testbed/writebw"
)

// TestTraceCommand records a lossy reliable run's trace with write-bw
// -trace and reads it with sdr trace: every transfer the run verified is
// in it, complete, with the first pass of its plan and the repairs the
// sender counted, and the timeline is a PNG that decodes and an SVG.
// Without -scheme, -trace is a usage error.
func TestTraceCommand(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run.jsonl")
	code, out, errOut := runSDR("write-bw", "-loopback", "-scheme", "sr-nack", "-link", "rate=1Gbit,delay=1ms,loss=2%",
		"-s", "512KiB", "-n", "3", "-w", "0", "-json", "-trace", path)
	if code != exitOK {
		t.Fatalf("write-bw: exit %d: %s", code, errOut)
	}
	var r writebw.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Reliable == nil || r.Reliable.Verified != 3 {
		t.Fatalf("write-bw: %v, %+v", err, r.Reliable)
	}

	code, out, errOut = runSDR("trace", "-json", "-transfer", "1", "-o", dir, path)
	if code != exitOK {
		t.Fatalf("sdr trace: exit %d: %s", code, errOut)
	}
	var transfers []traceplot.Transfer
	if err := json.Unmarshal([]byte(out), &transfers); err != nil {
		t.Fatalf("sdr trace -json: %v\n%s", err, out)
	}
	const chunks = 512 << 10 / 4096 // write-bw's reliable chunk: 4 packets of 1024 B
	packets := 0
	for _, tr := range transfers {
		packets += tr.Packets
		if !tr.Ended || tr.Err != "" || tr.Bytes != 512<<10 || tr.FirstPass != chunks || tr.Duration() <= 0 {
			t.Errorf("transfer %+v: want it complete, %d chunks in its first pass", tr, chunks)
		}
	}
	if len(transfers) != 3 || packets != r.Reliable.PacketsResent || repairedChunks(transfers) != r.Reliable.Resent {
		t.Errorf("%d transfers repairing %d packets and %d chunks; write-bw verified 3, resent %d chunks and %d packets",
			len(transfers), packets, repairedChunks(transfers), r.Reliable.Resent, r.Reliable.PacketsResent)
	}
	f, err := os.Open(filepath.Join(dir, "trace-1.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if img, err := png.Decode(f); err != nil || img.Bounds().Dx() < 300 {
		t.Errorf("trace-1.png: %v", err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "trace-1.svg"))
	if err != nil || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("pacing rate")) {
		t.Errorf("trace-1.svg: %v, %d bytes", err, len(svg))
	}

	if code, _, errOut := runSDR("write-bw", "-loopback", "-trace", path); code != exitUsage || !strings.Contains(errOut, "-trace needs -scheme") {
		t.Errorf("-trace without -scheme: exit %d, %q; want a usage error", code, errOut)
	}
}

func repairedChunks(ts []traceplot.Transfer) int {
	n := 0
	for _, t := range ts {
		n += t.Repaired
	}
	return n
}
