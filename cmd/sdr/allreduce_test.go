package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/collective"
)

func TestAllreduceCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"allreduce", "-ranks", "3", "-b", "64KiB", "-e", "128KiB", "-n", "2", "-w", "0",
		"-link", "rate=1Gbit,delay=1ms,loss=1%", "-schemes", "sr-nack,ec", "-json"}, &out, &errOut)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var rows []allreduceRow
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
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

// TestWrongSums: the check finds a corrupted element, in every type.
func TestWrongSums(t *testing.T) {
	for _, dt := range []collective.DataType{collective.Float32, collective.Float64, collective.Int32, collective.Int64} {
		a, b := make([]byte, 100*dt.Size()), make([]byte, 100*dt.Size())
		fillRank(dt, a, 0)
		fillRank(dt, b, 1)
		collective.Sum(dt, a, b)
		if n := wrongSums(dt, a, 2); n != 0 {
			t.Errorf("%v: %d wrong in a correct sum", dt, n)
		}
		a[17*dt.Size()] ^= 0x40
		if n := wrongSums(dt, a, 2); n != 1 {
			t.Errorf("%v: %d wrong after corrupting one element", dt, n)
		}
	}
}
