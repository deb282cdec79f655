package driver

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/sdr"
)

// parityLayout is MDS(32,8) over 70 chunks of 4 KiB: three submessages,
// the last one short.
func parityLayout(t *testing.T, chunks int) ec.Layout {
	t.Helper()
	l, err := ec.NewLayout(ec.Params{Kind: ec.MDS, K: 32, M: 8}, chunks*4096-100, 4096)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestParityEncoder checks that the background encoder's parity is the
// whole-message Encode's, submessage by submessage as waitFor releases
// them, and that a submessage past the end is refused once it has stopped.
func TestParityEncoder(t *testing.T) {
	l := parityLayout(t, 70)
	data := make([]byte, l.DataLen())
	for i := range data {
		data[i] = byte(i*31 + i>>12)
	}
	want := make([]byte, l.ParityLen())
	ref, err := ec.NewCoder(l)
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.Encode(data, want); err != nil {
		t.Fatal(err)
	}
	coder, err := ec.NewCoder(l)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, l.ParityLen())
	e := startEncoder(coder, data, got)
	for sub := range l.Submessages() {
		if err := awaitParity(e, sub); err != nil {
			t.Fatalf("submessage %d: %v", sub, err)
		}
		first, m := l.ParityRange(sub)
		lo, hi := first*l.ChunkSize(), (first+m)*l.ChunkSize()
		if !bytes.Equal(got[lo:hi], want[lo:hi]) {
			t.Fatalf("submessage %d: parity differs from Encode's", sub)
		}
	}
	e.stop()
	if err := awaitParity(e, l.Submessages()); !errors.Is(err, reliability.ErrClosed) {
		t.Errorf("ready past the last submessage: %v, want reliability.ErrClosed", err)
	}
}

// awaitParity waits, as the sender's loop does, until sub's parity is
// ready or can no longer be.
func awaitParity(e *parityEncoder, sub int) error {
	for {
		err := e.ready(sub)
		if !errors.Is(err, errParityPending) {
			return err
		}
		select {
		case <-e.progress:
		case <-e.done:
		}
	}
}

// TestParityEncoderStop stops an encoder at once: stop returns only when
// the goroutine has, and a submessage it did not reach is refused rather
// than waited for.
func TestParityEncoderStop(t *testing.T) {
	l := parityLayout(t, 4000)
	coder, err := ec.NewCoder(l)
	if err != nil {
		t.Fatal(err)
	}
	e := startEncoder(coder, make([]byte, l.DataLen()), make([]byte, l.ParityLen()))
	e.stop()
	select {
	case <-e.done:
	default:
		t.Fatal("stop returned while the encoder ran")
	}
	n := int(e.encoded.Load())
	t.Logf("encoded %d of %d submessages before stopping", n, l.Submessages())
	if n < l.Submessages() {
		if err := awaitParity(e, n); !errors.Is(err, reliability.ErrClosed) {
			t.Errorf("ready(%d) after stop: %v, want reliability.ErrClosed", n, err)
		}
	}
}

// TestParityPool checks that a finished transfer's parity area serves the
// next one of the same or a smaller size (same registration), that a
// larger one gets a new area, and that the pool keeps at most
// maxSpareParity areas.
func TestParityPool(t *testing.T) {
	pa, _ := emunic.NewPipe(emunic.PipeConfig{})
	dev, err := emunic.NewDevice(emunic.Config{Port: pa, GID: netip.MustParseAddr("10.0.0.1"), MAC: [6]byte{2, 0, 0, 0, 0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	sc, err := sdr.Open(sdrnic.New(dev, sdrnic.Options{}), sdr.DeviceAttr{Channels: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	p := parityPool{sc: sc}
	defer p.close()
	big, small := parityLayout(t, 70), parityLayout(t, 20)
	a, err := p.get(big)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.buf) != big.ParityLen() || a.coder.Layout() != big {
		t.Fatalf("area of %d bytes for %v, want %d", len(a.buf), a.coder.Layout(), big.ParityLen())
	}
	p.put(a)
	b, err := p.get(small)
	if err != nil {
		t.Fatal(err)
	}
	if b.mr != a.mr || len(b.buf) != small.ParityLen() || b.coder.Layout() != small {
		t.Errorf("a smaller transfer got a new area (%d bytes, layout %v), want the spare one cut to %d", len(b.buf), b.coder.Layout(), small.ParityLen())
	}
	c, err := p.get(big)
	if err != nil {
		t.Fatal(err)
	}
	if c.mr == a.mr {
		t.Fatal("an area in use was handed out twice")
	}
	p.put(b)
	p.put(c)
	var inUse []parityArea
	for range maxSpareParity + 2 {
		d, err := p.get(small)
		if err != nil {
			t.Fatal(err)
		}
		inUse = append(inUse, d)
	}
	if len(p.spare) != 0 {
		t.Errorf("%d spare areas while every area is in use", len(p.spare))
	}
	for _, d := range inUse {
		p.put(d)
	}
	if len(p.spare) != maxSpareParity {
		t.Errorf("%d spare areas after %d came back, want the pool's bound %d", len(p.spare), len(inUse), maxSpareParity)
	}
}
