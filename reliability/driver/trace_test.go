package driver_test

import (
	"bytes"
	"math/bits"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// TestTrace runs a transfer over a lossy pipe with a JSON tracer on both
// engines, reads the trace back, and checks it against the transfer's
// own statistics: the first pass and the repairs the sender's trace shows
// are the chunks and packets its stats count, each side starts and
// completes the transfer once, the receiver's NACKs and ACKs appear, and
// every side's events are in time order.
func TestTrace(t *testing.T) {
	for _, cfg := range []reliability.ReceiverConfig{
		{Scheme: scheme.Scheme{Kind: scheme.SRNACK}},
		{Scheme: scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.MDS, K: 16, M: 4}}},
	} {
		t.Run(cfg.Scheme.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var buf bytes.Buffer
				tracer := reliability.NewJSONTracer(&buf)
				cfg.RTT, cfg.Bandwidth, cfg.Trace = 10*time.Millisecond, 2e9, tracer
				e := pipePair(t, 5*time.Millisecond, 0.02, 11, cfg)
				sent, recvd := transfer(t, e, 4<<20, 7, 1)
				e.s.Close()
				e.r.Close()
				if err := tracer.Close(); err != nil {
					t.Fatal(err)
				}
				events, err := reliability.ReadTrace(&buf)
				if err != nil {
					t.Fatal(err)
				}
				checkTrace(t, events, sent, recvd)
			})
		})
	}
}

func checkTrace(t *testing.T, events []reliability.TraceEvent, sent, recvd reliability.Stats) {
	t.Helper()
	count := map[string]int{}
	var firstPass, repaired, packets, coded int
	last := map[string]time.Time{}
	for _, e := range events {
		if e.Time.Before(last[e.Side]) {
			t.Fatalf("%s event %+v before the one traced ahead of it (%v)", e.Side, e, last[e.Side])
		}
		last[e.Side] = e.Time
		key := e.Side + " " + string(e.Kind)
		if e.Control != "" {
			key += " " + e.Control
		}
		count[key]++
		switch {
		case e.Kind == reliability.TraceSendCoded:
			coded += e.Count
		case e.Kind != reliability.TraceSend || e.Part != "data":
		case e.Packets != 0:
			packets += bits.OnesCount64(e.Packets)
		case e.Repair:
			repaired += e.Count
		default:
			firstPass += e.Count
		}
	}
	t.Logf("%d events: %v", len(events), count)
	plan := sent.Plan
	if plan.Scheme.Kind == scheme.EC {
		if want := plan.DataChunks() + plan.ParityChunks(); coded != want {
			t.Errorf("the trace's coded first pass has %d transmissions, the plan %d", coded, want)
		}
	} else if firstPass != plan.DataChunks() {
		t.Errorf("the trace's first pass has %d chunks, the plan %d", firstPass, plan.DataChunks())
	}
	if repaired != sent.Retransmitted || packets != sent.PacketsResent {
		t.Errorf("the trace repairs %d chunks and %d packets, the sender's stats count %d and %d", repaired, packets, sent.Retransmitted, sent.PacketsResent)
	}
	for _, side := range []string{"sender", "receiver"} {
		if count[side+" start"] != 1 || count[side+" complete"] != 1 {
			t.Errorf("%s: %d starts and %d completions traced, want one of each", side, count[side+" start"], count[side+" complete"])
		}
	}
	if count["receiver ctl-out ack"] == 0 || count["sender ctl-in ack"] == 0 || count["receiver ctl-out cts"] == 0 {
		t.Errorf("ACKs or CTS missing from the trace: %v", count)
	}
	if sent.Retransmitted+sent.PacketsResent > 0 && count["receiver ctl-out nack"]+count["receiver ctl-out pnack"]+count["sender timeout"] == 0 {
		t.Errorf("repairs with no NACK, PNACK or timeout traced: %v", count)
	}
	if recvd.Decoded > 0 && count["receiver decode"] == 0 {
		t.Errorf("%d submessages decoded, none traced", recvd.Decoded)
	}
}
