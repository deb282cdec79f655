package xsk_test

import (
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/privileged"
)

// TestRXBacklog sends frames to a port that nobody receives from: its RX
// ring level (the device's congestion signal) rises by one descriptor per
// frame, and falls to zero once Recv took them.
func TestRXBacklog(t *testing.T) {
	privileged.Require(t)
	pair, err := hostnet.NewPair(hostnet.PairConfig{MTU: 1500, Switched: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pair.Close(); err != nil {
			t.Error(err)
		}
	})
	a := emunictest.NewXSKHost(t, pair.A, xsk.PortConfig{}, nil)
	var port *xsk.Port
	if err := pair.B.NS.Do(func() (err error) {
		port, err = xsk.NewPort(xsk.PortConfig{Interface: pair.B.IfName})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	const qpn, frames = 0x4242, 256
	if err := port.AddQP(qpn, pair.A.Addr); err != nil {
		t.Fatal(err)
	}
	if got := port.RXBacklog(); got != 0 {
		t.Fatalf("RX backlog %v before anything was sent", got)
	}
	qa := a.QP(t, emunic.UC)
	if err := emunictest.ConnectQP(qa, emunictest.Peer{QPN: qpn, GID: pair.B.Addr, MAC: pair.B.MAC}, 1024, emunic.QPAttr{}); err != nil {
		t.Fatal(err)
	}
	src := a.MR(t, make([]byte, 1024))
	for i := range frames {
		if err := qa.PostSend(emunic.SendWR{ID: uint64(i), Op: emunic.OpWrite, Unsignaled: true, RemoteAddr: 0, RKey: 1,
			SGL: []emunic.SGE{{Addr: src.Addr(), Length: 1024, LKey: src.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	ring := float64(xsk.DefaultRingSize)
	deadline := time.Now().Add(5 * time.Second)
	for port.RXBacklog() < frames/ring && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := port.RXBacklog(); got != frames/ring {
		t.Fatalf("RX backlog %v after %d frames, want %v", got, frames, frames/ring)
	}
	bufs, sizes := make([][]byte, 64), make([]int, 64)
	for i := range bufs {
		bufs[i] = make([]byte, emunic.MaxFrameLen)
	}
	for got := 0; got < frames; {
		n, err := port.Recv(bufs, sizes)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if got := port.RXBacklog(); got != 0 {
		t.Errorf("RX backlog %v after every frame was received", got)
	}
}
