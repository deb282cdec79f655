package emunic_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/wire"
)

// burstUC sends msgs WRITE-with-Imm messages of size bytes from qa to qb
// at once and waits for their receive completions. It returns how long
// that took.
func burstUC(t *testing.T, a *host, qa *emunic.QP, b *host, qb *emunic.QP, msgs, size int) time.Duration {
	t.Helper()
	src, dst := a.MR(t, make([]byte, size)), b.MR(t, make([]byte, size))
	for range msgs {
		if err := qb.PostRecv(emunic.RecvWR{}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for i := range msgs {
		if err := qa.PostSend(emunic.SendWR{ID: uint64(i), Op: emunic.OpWriteImm, Unsignaled: true, RemoteAddr: dst.Addr(),
			RKey: dst.RKey(), SGL: []emunic.SGE{{Addr: src.Addr(), Length: uint32(size), LKey: src.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	for range msgs {
		if c := emunictest.WaitCQE(t, b.RecvCQ); c.Status != emunic.StatusSuccess {
			t.Fatalf("receive completion %+v", c)
		}
	}
	return time.Since(start)
}

// TestCNPOnCEMark runs a UC burst through a 100 Mbit/s link that marks
// every frame queued behind 3000 bytes CE: the receiver answers with
// CNPs, at most one per 50 µs, each reaching the sender's QP, whose
// DCQCN reaction point cuts its rate. The CNPs in the sender's capture
// are RoCEv2 CNPs as annex A17.9.3 lays them out (checked byte by byte,
// ICRC included, and by Wireshark's dissector when tshark is installed).
func TestCNPOnCEMark(t *testing.T) {
	dir, err := link.New(link.Config{Bandwidth: 100e6, ECNMinBytes: 1500, ECNMaxBytes: 3000, ECNMaxP: 1})
	if err != nil {
		t.Fatal(err)
	}
	pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: dir})
	path := filepath.Join(t.TempDir(), "cnp.pcap")
	tap, err := wire.CreatePcap(path)
	if err != nil {
		t.Fatal(err)
	}
	a := emunictest.NewHost(t, pa, netip.MustParseAddr("10.0.0.1"), [6]byte{2, 0, 0, 0, 0, 1}, tap)
	b := newHost(t, pb, "10.0.0.2", 2)
	qa, qb := a.QP(t, emunic.UC), b.QP(t, emunic.UC)
	emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{})
	took := burstUC(t, a, qa, b, qb, 8, 16<<10)

	sb := b.Dev.Stats()
	cnps := sb.Get(emunic.TxCNPs)
	if sb.Get(emunic.RxCE) == 0 || cnps == 0 {
		t.Fatalf("rx_ce %d, tx_cnps %d: a congested link drew no CNPs", sb.Get(emunic.RxCE), cnps)
	}
	if limit := uint64(took/(50*time.Microsecond)) + 1; cnps > limit {
		t.Errorf("%d CNPs in %v: more than one per 50 µs (%d)", cnps, took, limit)
	}
	if cnps >= sb.Get(emunic.RxCE) {
		t.Errorf("%d CNPs for %d CE-marked frames: the notification point does not coalesce", cnps, sb.Get(emunic.RxCE))
	}
	// Fence: a WRITE-with-Imm from B to A arrives after every CNP B sent.
	fence(t, b, qb, a, qa)
	if got := a.Dev.Stats().Get(emunic.RxCNPs); got != cnps {
		t.Errorf("A counted %d CNPs, B sent %d", got, cnps)
	}
	cs := qa.CongestionStats()
	if cs.CNPs != cnps || cs.RateCuts == 0 {
		t.Errorf("sender's reaction point: %+v after %d CNPs", cs, cnps)
	}
	a.Dev.Close()
	if err := tap.Close(); err != nil {
		t.Fatal(err)
	}
	frame := firstCNP(t, path)
	var p wire.Packet
	if err := p.Decode(frame); err != nil || !p.ICRCValid() {
		t.Fatalf("CNP: %v, ICRC valid %v", err, p.ICRCValid())
	}
	bth := p.BTH
	if bth.DestQP() != qa.QPN() || !bth.BECN() || bth.FECN() || bth.PKey() != 0xFFFF || bth.PSN() != 0 || bth.AckReq() ||
		len(p.Payload) != 0 || p.IPv4.TOS() != 48<<2 {
		t.Errorf("CNP fields: %+v, TOS %#x, %d payload bytes", bth.Fields(), p.IPv4.TOS(), len(p.Payload))
	}
	// The 16 reserved bytes between the BTH and the ICRC are zero.
	if rsv := frame[len(frame)-4-16 : len(frame)-4]; !bytes.Equal(rsv, make([]byte, 16)) {
		t.Errorf("reserved bytes %x", rsv)
	}
	if got := tsharkCNP(t, path); got != "" {
		// Wireshark 4.0 names no opcode 0x81 ("Unknown") but dissects the
		// BTH; the reserved bytes and ICRC follow as vendor data.
		want := fmt.Sprintf("RRoCE|129|0x%06x|65535|0", qa.QPN())
		if got != want {
			t.Errorf("tshark dissects the first CNP as %q, want %q", got, want)
		}
		t.Logf("tshark: %s", got)
	}
	t.Logf("%d CE-marked frames, %d CNPs in %v; sender %+v", sb.Get(emunic.RxCE), cnps, took, cs)
}

// firstCNP returns the first CNP frame of a capture.
func firstCNP(t *testing.T, path string) []byte {
	t.Helper()
	r, err := wire.OpenPcap(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var p wire.Packet
	for {
		data, _, _, err := r.Next()
		if errors.Is(err, io.EOF) {
			t.Fatal("no CNP in the capture")
		}
		if err != nil {
			t.Fatal(err)
		}
		if p.Decode(data) == nil && p.Opcode() == wire.CNP {
			return append([]byte(nil), data...)
		}
	}
}

// tsharkCNP returns Wireshark's protocol, opcode, destination QP, P_Key
// and PSN of the capture's first CNP, or "" without tshark.
func tsharkCNP(t *testing.T, path string) string {
	tshark, ok := privileged.OptionalTool(t, "tshark", "cross-checks the CNP with Wireshark's dissector")
	if !ok {
		return ""
	}
	out, err := exec.Command(tshark, "-r", path, "-Y", "infiniband.bth.opcode == 129", "-T", "fields",
		"-E", "separator=|", "-e", "_ws.col.Protocol", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp",
		"-e", "infiniband.bth.p_key", "-e", "infiniband.bth.psn").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return first
}

// backlogPort reports a full receive ring whatever arrives, standing for
// a receiver that fell behind.
type backlogPort struct{ emunic.Port }

func (backlogPort) RXBacklog() float64 { return 1 }

// TestCNPOnRXBacklog: frames that arrive Not-ECT while the port's receive
// ring is over the threshold draw CNPs as CE marks would; with congestion
// control off they do not.
func TestCNPOnRXBacklog(t *testing.T) {
	for _, off := range []bool{false, true} {
		pa, pb := emunic.NewPipe(emunic.PipeConfig{})
		a := newHost(t, pa, "10.0.0.1", 1)
		dev, err := emunic.NewDevice(emunic.Config{Port: backlogPort{pb}, GID: netip.MustParseAddr("10.0.0.2"),
			MAC: [6]byte{2, 0, 0, 0, 0, 2}, DisableCongestionControl: off})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		b, err := emunictest.Attach(dev, emunictest.CQDepth, false)
		if err != nil {
			t.Fatal(err)
		}
		qa, qb := a.QP(t, emunic.UC), b.QP(t, emunic.UC)
		emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{})
		burstUC(t, a, qa, b, qb, 4, 16<<10)
		s := dev.Stats()
		switch {
		case s.Get(emunic.RxCE) != 0:
			t.Errorf("congestion control off %v: %d frames counted CE-marked on a link that marks none", off, s.Get(emunic.RxCE))
		case s.Get(emunic.RxBacklogCE) != 64:
			t.Errorf("congestion control off %v: %d frames counted over the backlog threshold, want 64", off, s.Get(emunic.RxBacklogCE))
		case off && s.Get(emunic.TxCNPs) != 0:
			t.Errorf("congestion control off: %d CNPs sent", s.Get(emunic.TxCNPs))
		case !off && s.Get(emunic.TxCNPs) == 0:
			t.Error("a backlogged receiver sent no CNP")
		}
	}
}
