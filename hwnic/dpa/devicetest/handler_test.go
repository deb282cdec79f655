package devicetest

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/hwnic/dpa"
	"github.com/sdr-rdma/sdr/internal/privileged"
)

// handlerTests are the tests test/handler_test.c runs, in order.
var handlerTests = []string{"cqe_layout", "owner_wrap", "stale_generation", "duplicates_and_last_packet",
	"immediate_from_nibbles", "threads_on_shared_slots", "fence_marker", "fence_closes_arm_race", "notify_overflow", "activation_mid_run",
	"rearm_mid_pass", "length_after_state", "consumer_during_run", "late_packet_rearm"}

// TestHandler compiles the RX handler unchanged through the FlexIO shim
// and runs its tests (mlx5 layouts from rdma-core's mlx5dv.h, owner-bit
// wrap, stale generations, duplicates, chunk flags, immediates, four
// handler threads on shared slots, fence markers and the Arm race they
// close: a null-mkey packet's CQE counted when taken after the
// activation, dropped when the host waited for the markers first; a host
// consuming and re-arming while the handler runs; a re-arm racing a late
// packet), optimised on hostsim's strict model moving words and moving
// whole cache lines (HOSTSIM_LINES), and under ThreadSanitizer.
func TestHandler(t *testing.T) {
	privileged.RequireFile(t, "/usr/include/infiniband/mlx5dv.h", "rdma-core's mlx5 layouts from libibverbs-dev: the handler tests check the CQE layout against them")
	for _, build := range []struct {
		name  string
		flags []string
		lines string // $HOSTSIM_LINES
	}{
		{"O2", nil, "0"},
		{"O2_lines", nil, "1"},
		{"tsan", []string{"-O1", "-fsanitize=thread"}, "0"},
	} {
		t.Run(build.name, func(t *testing.T) {
			t.Setenv("HOSTSIM_LINES", build.lines)
			flags := append([]string{"-DSDR_HOSTSIM", "-I" + dev("hostsim")}, build.flags...)
			bin := compileC(t, "handler_test", flags, dev("handler.c"), dev("hostsim/hostsim.c"), dev("test/handler_test.c"))
			out := strings.TrimSpace(string(runC(t, bin, nil)))
			var want []string
			for _, name := range handlerTests {
				want = append(want, "ok "+name)
			}
			if out != strings.Join(want, "\n") {
				t.Fatalf("handler tests printed:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
			}
		})
	}
}

// TestHandlerWindowOps counts the window operations of the handler
// receiving three messages at 16- and at 8-packet chunks
// (test/handler_test.c's window_ops, on hostsim's counters) and compares
// each kind with what the cost model of sdr dpa plan charges for those
// packets, chunks, messages, notifications and runs (dpa.HandlerCost; no
// fence marker is sent): a writeback, a read or a line added to handler.c
// without the model following fails here. The model's notification count
// is checked too: the printed one is the handler's.
func TestHandlerWindowOps(t *testing.T) {
	privileged.RequireFile(t, "/usr/include/infiniband/mlx5dv.h", "rdma-core's mlx5 layouts from libibverbs-dev: the handler tests check the CQE layout against them")
	bin := compileC(t, "handler_ops", []string{"-DSDR_HOSTSIM", "-I" + dev("hostsim")}, dev("handler.c"), dev("hostsim/hostsim.c"), dev("test/handler_test.c"))
	out := strings.Split(strings.TrimSpace(string(runC(t, bin, nil, "window_ops"))), "\n")
	if len(out) != 3 || out[2] != "ok window_ops" {
		t.Fatalf("window_ops printed %q", out)
	}
	m := dpa.HandlerCost
	for _, line := range out[:2] {
		var chunkPackets, packets, chunks, messages, notifications, runs, loads, stores, writebacks, invalidates, configs, acquires int
		if _, err := fmt.Sscanf(line, "ops chunk_packets=%d packets=%d chunks=%d messages=%d notifications=%d runs=%d loads=%d stores=%d writebacks=%d read_invalidates=%d window_configs=%d ptr_acquires=%d",
			&chunkPackets, &packets, &chunks, &messages, &notifications, &runs, &loads, &stores, &writebacks, &invalidates, &configs, &acquires); err != nil {
			t.Fatalf("window_ops printed %q: %v", line, err)
		}
		// The model's notifications for these messages, as Plan counts them.
		p, err := dpa.CostModel{PerPacket: 1, MaxThreads: 1, Nibbles: m.Nibbles, Notification: dpa.WindowOps{Reads: 1}}.Plan(
			dpa.Traffic{Rate: 1e9, MTU: 1024, ChunkSize: chunkPackets * 1024, MessageSize: packets / messages * 1024})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Ops.Reads * float64(packets); math.Abs(got-float64(notifications)) > 1e-6 {
			t.Errorf("%d-packet chunks: the model counts %.2f notifications, the handler made %d", chunkPackets, got, notifications)
		}
		want := func(pick func(dpa.WindowOps) int) int {
			return packets*(pick(m.Accept)+pick(m.Packet)) + chunks*pick(m.Chunk) + messages*pick(m.Message) +
				notifications*pick(m.Notification) + runs*pick(m.Run)
		}
		for _, c := range []struct {
			what string
			got  int
			pick func(dpa.WindowOps) int
		}{
			{"reads", loads, func(o dpa.WindowOps) int { return o.Reads }},
			{"stores", stores, func(o dpa.WindowOps) int { return o.Stores }},
			{"writebacks", writebacks, func(o dpa.WindowOps) int { return o.Writebacks }},
			{"read-invalidates", invalidates, func(o dpa.WindowOps) int { return o.ReadInvalidates }},
			{"window configurations", configs, func(o dpa.WindowOps) int { return o.Configs }},
		} {
			if w := want(c.pick); c.got != w {
				t.Errorf("%d-packet chunks, %s: handler.c made %d for %d packets, %d chunks, %d messages, %d notifications, %d runs; the cost model charges %d",
					chunkPackets, c.what, c.got, packets, chunks, messages, notifications, runs, w)
			}
		}
		if acquires != 3*configs {
			t.Errorf("%d pointer acquisitions for %d window configurations: the model prices three with each", acquires, configs)
		}
		t.Logf("%d-packet chunks: %d packets, %d chunks, %d messages, %d notifications, %d runs: %d reads, %d stores, %d writebacks, %d read-invalidates, %d configurations",
			chunkPackets, packets, chunks, messages, notifications, runs, loads, stores, writebacks, invalidates, configs)
	}
}
