// The contract's peer-info checks: Connect refuses what no backend
// accepts, or a peer whose geometry differs, and leaves nothing behind.

package sdrtest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/wire"
)

// testMalformedPeerInfo hands Connect blobs no backend can accept, then
// connects the same QPs properly: a failed Connect leaves nothing behind.
func testMalformedPeerInfo(t *testing.T, e *env) {
	sctx, err := sdr.Open(e.im, sdr.DeviceAttr{Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sctx.Close() })
	rctx, err := sdr.Open(e.recv, sdr.DeviceAttr{Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rctx.Close() })
	sa, ra := defaultAttr(), defaultAttr()
	sa.Send, ra.Recv = true, true
	sq, err := sctx.NewQP(sa)
	if err != nil {
		t.Fatal(err)
	}
	rq, err := rctx.NewQP(ra)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := rq.Info()
	if err != nil {
		t.Fatal(err)
	}
	for _, blob := range [][]byte{nil, {}, []byte("{}"), []byte(`{"qpns":[]}`), []byte(`{"qpns":[[]]}`),
		[]byte("null"), []byte("not info"), ri[:len(ri)/2], append(bytes.Clone(ri), ri...)} {
		if err := sq.Connect(blob); !errors.Is(err, sdr.ErrPeerInfo) {
			t.Errorf("Connect(%.40q): %v, want ErrPeerInfo", blob, err)
		}
	}
	if _, err := sq.PostSend(sdr.SendRequest{Length: 0, HasImm: true}); !errors.Is(err, sdr.ErrNotConnected) {
		t.Errorf("send after failed Connects: %v", err)
	}
	si, err := sq.Info()
	if err != nil {
		t.Fatal(err)
	}
	if err := sq.Connect(ri); err != nil {
		t.Fatalf("Connect with good info after failed ones: %v", err)
	}
	if err := sq.Connect(ri); !errors.Is(err, sdr.ErrInvalid) {
		t.Errorf("second Connect: %v", err)
	}
	if err := rq.Connect(si); err != nil {
		t.Fatal(err)
	}
	h, err := rq.PostRecv(nil, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sq.PostSend(sdr.SendRequest{Imm: 0x600D, HasImm: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a message after failed Connects", h, h.Done)
	if imm, _ := h.Imm(); imm != 0x600D {
		t.Errorf("immediate %#x", imm)
	}
}

// testMismatchedPeerInfo connects QPs that disagree on one geometry field
// each and expects a *MismatchError; the receiver then connects to a
// matching sender and works.
func testMismatchedPeerInfo(t *testing.T, e *env) {
	rctx, err := sdr.Open(e.recv, sdr.DeviceAttr{Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rctx.Close() })
	base := defaultAttr()
	ra := base
	ra.Recv = true
	rq, err := rctx.NewQP(ra)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := rq.Info()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		channels int
		change   func(*sdr.QPAttr)
	}{
		{"MTU", 2, func(a *sdr.QPAttr) { a.MTU = mtu / 2; a.ChunkSize = 2 * (mtu / 2) }}, // smaller: every port carries it
		{"chunk size", 2, func(a *sdr.QPAttr) { a.ChunkSize = 2 * mtu }},
		{"slots", 2, func(a *sdr.QPAttr) { a.MaxMessages = 8 }},
		{"slot size", 2, func(a *sdr.QPAttr) { a.MaxInFlightBytes = 8 << 20 }},
		{"generations", 2, func(a *sdr.QPAttr) { a.Generations = 3 }},
		{"channels", 3, func(a *sdr.QPAttr) {}},
		{"layout", 2, func(a *sdr.QPAttr) { a.ImmLayout = wire.LongMessageImmLayout }},
	} {
		sctx, err := sdr.Open(e.im, sdr.DeviceAttr{Channels: c.channels})
		if err != nil {
			t.Fatal(err)
		}
		sa := base
		sa.Send = true
		c.change(&sa)
		sq, err := sctx.NewQP(sa)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		si, err := sq.Info()
		if err != nil {
			t.Fatal(err)
		}
		var mismatch *sdr.MismatchError
		if err := sq.Connect(ri); !errors.Is(err, sdr.ErrPeerMismatch) || !errors.As(err, &mismatch) {
			t.Errorf("%s differs: sender's Connect: %v", c.name, err)
		}
		if err := rq.Connect(si); !errors.Is(err, sdr.ErrPeerMismatch) {
			t.Errorf("%s differs: receiver's Connect: %v", c.name, err)
		}
		sctx.Close()
	}
	// The receiver is still connectable.
	sctx, err := sdr.Open(e.im, sdr.DeviceAttr{Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sctx.Close() })
	sa := base
	sa.Send = true
	sq, err := sctx.NewQP(sa)
	if err != nil {
		t.Fatal(err)
	}
	si, err := sq.Info()
	if err != nil {
		t.Fatal(err)
	}
	if err := sq.Connect(ri); err != nil {
		t.Fatal(err)
	}
	if err := rq.Connect(si); err != nil {
		t.Fatalf("receiver after mismatched Connects: %v", err)
	}
	src := pattern(3*mtu, 10)
	dst := make([]byte, 3*mtu)
	h, err := rq.PostRecv(register(t, rctx, dst), 0, len(dst))
	if err != nil {
		t.Fatal(err)
	}
	send(t, sq, register(t, sctx, src), len(src), 0x5EED)
	waitFor(t, "the message", h, h.Done)
	if !bytes.Equal(dst, src) {
		t.Error("data differs")
	}
}
