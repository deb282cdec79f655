package sdrnic_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/sdr"
)

// datagramPair opens a context on each backend and a connected datagram
// channel between them.
func datagramPair(t *testing.T, pa, pb emunic.Port) (a, b *sdr.Datagram, ca, cb *sdr.Context) {
	t.Helper()
	ba, bb := devices(t, pa, pb, "10.0.0.1", "10.0.0.2", sdrnic.Options{})
	var err error
	if ca, err = sdr.Open(ba, sdr.DeviceAttr{}); err != nil {
		t.Fatal(err)
	}
	if cb, err = sdr.Open(bb, sdr.DeviceAttr{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ca.Close(); cb.Close() })
	if a, err = ca.NewDatagram(sdr.DatagramAttr{}); err != nil {
		t.Fatal(err)
	}
	if b, err = cb.NewDatagram(sdr.DatagramAttr{}); err != nil {
		t.Fatal(err)
	}
	connectDatagrams(t, a, b)
	return a, b, ca, cb
}

func connectDatagrams(t *testing.T, a, b *sdr.Datagram) {
	t.Helper()
	ia, err := a.Info()
	if err != nil {
		t.Fatal(err)
	}
	ib, err := b.Info()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Connect(ib); err != nil {
		t.Fatal(err)
	}
	if err := b.Connect(ia); err != nil {
		t.Fatal(err)
	}
}

func recvDatagram(t *testing.T, d *sdr.Datagram) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	buf := make([]byte, d.MaxSize())
	n, err := d.Recv(ctx, buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

func TestDatagramBothWays(t *testing.T) {
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	a, b, _, _ := datagramPair(t, pa, pb)
	for i, size := range []int{0, 1, 100, 1024} {
		msg := bytes.Repeat([]byte{byte(i + 1)}, size)
		if err := a.Send(msg); err != nil {
			t.Fatal(err)
		}
		if got := recvDatagram(t, b); !bytes.Equal(got, msg) {
			t.Fatalf("a→b %d B: got %d B % x", size, len(got), got[:min(8, len(got))])
		}
		if err := b.Send(msg); err != nil {
			t.Fatal(err)
		}
		if got := recvDatagram(t, a); !bytes.Equal(got, msg) {
			t.Fatalf("b→a %d B: got %d B", size, len(got))
		}
	}
	if err := a.Send(make([]byte, a.MaxSize()+1)); !errors.Is(err, sdr.ErrTooLong) {
		t.Fatalf("oversized datagram: %v, want ErrTooLong", err)
	}
}

// A datagram channel crosses the same link as the data: what the link
// drops is lost, the rest arrives in order on a FIFO link.
func TestDatagramLossyLink(t *testing.T) {
	toB, err := link.New(link.Config{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	toB.SetRule(func([]byte) bool { n++; return n%2 == 1 }) // the 1st, 3rd, ... frame
	pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: toB})
	a, b, _, _ := datagramPair(t, pa, pb)
	for i := range 10 {
		if err := a.Send([]byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < 10; i += 2 {
		if got := string(recvDatagram(t, b)); got != fmt.Sprint(i) {
			t.Fatalf("got datagram %q, want %q (every other one dropped)", got, fmt.Sprint(i))
		}
	}
}

// Datagrams from a QP that is not the connected peer are dropped; the
// fence (a datagram from the peer sent after them on the same FIFO link)
// proves they were processed before.
func TestDatagramForeignSenderDropped(t *testing.T) {
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	a, b, ca, _ := datagramPair(t, pa, pb)
	intruder, err := ca.NewDatagram(sdr.DatagramAttr{})
	if err != nil {
		t.Fatal(err)
	}
	ib, _ := b.Info()
	if err := intruder.Connect(ib); err != nil {
		t.Fatal(err)
	}
	if err := intruder.Send([]byte("forged")); err != nil {
		t.Fatal(err)
	}
	if err := a.Send([]byte("fence")); err != nil {
		t.Fatal(err)
	}
	if got := string(recvDatagram(t, b)); got != "fence" {
		t.Fatalf("got %q, want the fence: a foreign datagram was delivered", got)
	}
}

func TestDatagramMisuse(t *testing.T) {
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	_, b, ca, _ := datagramPair(t, pa, pb)
	lone, err := ca.NewDatagram(sdr.DatagramAttr{})
	if err != nil {
		t.Fatal(err)
	}
	if err := lone.Send([]byte("x")); !errors.Is(err, sdr.ErrNotConnected) {
		t.Fatalf("send before connect: %v, want ErrNotConnected", err)
	}
	for _, bad := range []string{``, `{}`, `{"gid":"10.0.0.2","qpn":0,"mtu":1024}`, `{"gid":"10.0.0.2","qpn":5,"mtu":512}`, `[1,2]`} {
		if err := lone.Connect([]byte(bad)); err == nil {
			t.Errorf("connect to %q succeeded", bad)
		}
	}
	if _, err := ca.NewDatagram(sdr.DatagramAttr{MTU: 1000}); !errors.Is(err, sdr.ErrInvalid) {
		t.Fatalf("MTU 1000: %v, want ErrInvalid", err)
	}
	// Close unblocks a waiting Recv.
	done := make(chan error, 1)
	go func() {
		_, err := b.Recv(context.Background(), make([]byte, 64))
		done <- err
	}()
	time.Sleep(10 * time.Millisecond) // let Recv block; the assertion below does not depend on it
	b.Close()
	select {
	case err := <-done:
		if !errors.Is(err, emunic.ErrClosed) {
			t.Fatalf("Recv after Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Recv still blocked after Close")
	}
}
