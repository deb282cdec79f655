package metrics_test

import (
	"io"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/metrics"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/testbed/linkemu"
)

func newDevice(t *testing.T, port emunic.Port, last byte) *emunic.Device {
	t.Helper()
	dev, err := emunic.NewDevice(emunic.Config{Port: port, GID: netip.AddrFrom4([4]byte{10, 0, 0, last}), MAC: [6]byte{2, 0, 0, 0, 0, last}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// waitStat waits until dev's counter c reaches want (frames cross the
// pipe asynchronously).
func waitStat(t *testing.T, dev *emunic.Device, c emunic.Counter, want uint64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); dev.Stats().Get(c) < want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%v stayed at %d, want %d", c, dev.Stats().Get(c), want)
		}
	}
}

// TestDevices exports a device's counters, drops by reason, and keeps a
// replaced device's counts so that the exported counters only grow.
func TestDevices(t *testing.T) {
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	newDevice(t, pa, 1)
	b := newDevice(t, pb, 2)
	devs := metrics.NewDevices()
	devs.Set("b", b)
	// Three frames that are not RoCEv2 reach b.
	junk := make([]byte, 60)
	copy(junk, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06}) // a broadcast ARP frame
	for range 3 {
		if _, err := pa.Send([][]byte{junk}); err != nil {
			t.Fatal(err)
		}
	}
	waitStat(t, b, emunic.RxNotRoCE, 3)
	reg := metrics.NewRegistry(devs)
	if n, err := testutil.GatherAndCount(reg, "emunic_rx_drops_total"); err != nil || n != len(emunic.DropReasons) {
		t.Fatalf("%d drop series, %v", n, err)
	}
	got := func() string {
		var b strings.Builder
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "emunic_rx_drops_total" {
				for _, m := range mf.Metric {
					if m.GetCounter().GetValue() > 0 {
						b.WriteString(m.String() + "\n")
					}
				}
			}
		}
		return b.String()
	}
	if s := got(); !strings.Contains(s, `value:"not_roce"`) || !strings.Contains(s, "value:3") {
		t.Errorf("nonzero drops:\n%s", s)
	}
	// Replace b by a fresh device: the 3 drops stay, the new one's add.
	pc, pd := emunic.NewPipe(emunic.PipeConfig{})
	newDevice(t, pc, 3)
	d := newDevice(t, pd, 4)
	devs.Set("b", d)
	b.Close()
	if _, err := pc.Send([][]byte{junk}); err != nil {
		t.Fatal(err)
	}
	waitStat(t, d, emunic.RxNotRoCE, 1)
	if s := got(); !strings.Contains(s, "value:4") {
		t.Errorf("after replacing the device, nonzero drops:\n%s", s)
	}
	if n := testutil.CollectAndCount(devs, "emunic_rx_packets_total"); n != 1 {
		t.Errorf("%d rx_packets series for one role", n)
	}
}

// TestTransfers counts outcomes and chunks per scheme and fills the
// completion-time histogram.
func TestTransfers(t *testing.T) {
	tr := metrics.NewTransfers()
	reg := metrics.NewRegistry(tr.Collectors()...)
	start := time.Now()
	st := reliability.Stats{Retransmitted: 3, ParitySent: 8, Decoded: 1, Start: start, End: start.Add(40 * time.Millisecond)}
	tr.Observe("ec", st, true)
	tr.Observe("ec", st, false)
	tr.Observe("sr-rto", reliability.Stats{Retransmitted: 5, Start: start, End: start.Add(time.Second)}, true)
	for name, want := range map[string]float64{
		"sdr_reliability_transfers_completed_total": 2, "sdr_reliability_transfers_failed_total": 1,
		"sdr_reliability_chunks_retransmitted_total": 11, "sdr_reliability_parity_chunks_sent_total": 16,
		"sdr_reliability_submessages_decoded_total": 2,
	} {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.Metric {
					sum += m.GetCounter().GetValue()
				}
			}
		}
		if sum != want {
			t.Errorf("%s = %v, want %v", name, sum, want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "sdr_reliability_transfer_seconds"); err != nil || n != 2 {
		t.Errorf("%d histograms, %v", n, err)
	}
}

// TestLinkAndServe serves a link emulator's counters over HTTP while
// pings cross it.
func TestLinkAndServe(t *testing.T) {
	privileged.Require(t)
	ping := privileged.RequireTool(t, "ping", "pings cross the link emulator")
	topo, err := linkemu.NewTopology(linkemu.TopologyConfig{AB: link.Config{Delay: time.Millisecond}, BA: link.Config{Delay: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	if err := topo.A.NS.Do(func() error {
		return exec.Command(ping, "-c", "3", "-i", "0.2", "-W", "2", topo.B.Addr.String()).Run()
	}); err != nil {
		t.Fatalf("ping across the emulator: %v", err)
	}
	emu := topo.Emulator
	srv, err := metrics.Serve("127.0.0.1:0", metrics.NewRegistry(metrics.NewLink(func() (a, b metrics.LinkCounters) {
		return metrics.LinkCounters(emu.Counters(linkemu.AToB)), metrics.LinkCounters(emu.Counters(linkemu.BToA))
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := http.Get("http://" + srv.Addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	fwd := topo.Emulator.Counters(linkemu.AToB).Forwarded
	if fwd < 3 {
		t.Fatalf("a→b forwarded %d frames after 3 pings", fwd)
	}
	for _, want := range []string{"sdr_linkemu_frames_forwarded_total{direction=\"a_to_b\"} ", "sdr_linkemu_dropped_loss_total{direction=\"b_to_a\"} 0\n", "go_goroutines "} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%.2000s", want, text)
		}
	}
}
