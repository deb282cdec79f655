package driver_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/driver"
	"github.com/sdr-rdma/sdr/reliability/scheme"
	"github.com/sdr-rdma/sdr/sdr"
)

// cutEndpoints are endpoints over a path that can go silent.
type cutEndpoints struct {
	endpoints
	// cutAfter, when set, is called for every frame the sender's
	// direction carries (under that direction's lock, in send order).
	cutAfter func()
	// toSender is the receiver's direction (its control datagrams).
	toSender *link.Direction
}

// readAsync starts a Read of n bytes on r and returns where its error
// arrives.
func readAsync(ctx context.Context, r *driver.Receiver, n int) <-chan error {
	read := make(chan error, 1)
	go func() {
		_, _, err := r.Read(ctx, make([]byte, n))
		read <- err
	}()
	return read
}

// cutPair connects a Sender and a Receiver over a pipe with a 10 ms round
// trip whose both directions drop everything while the returned flag is
// set: a peer that died without a word.
func cutPair(t *testing.T, cfg reliability.ReceiverConfig) (*cutEndpoints, *atomic.Bool) {
	t.Helper()
	var cut atomic.Bool
	e := &cutEndpoints{}
	dirs := [2]*link.Direction{}
	for i := range dirs {
		dirs[i] = lossyLink(t, 5*time.Millisecond, 0, uint64(30+i))
	}
	dirs[0].SetRule(func([]byte) bool {
		if e.cutAfter != nil {
			e.cutAfter()
		}
		return cut.Load()
	})
	dirs[1].SetRule(func([]byte) bool { return cut.Load() })
	e.toSender = dirs[1]
	pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: dirs[0], BToA: dirs[1]})
	e.endpoints = connectPair(t, pa, pb, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), testQPAttr, cfg)
	return e, &cut
}

// gone fails t unless err is ErrPeerGone. The call that returned it ran
// under a context whose deadline is the claim's bound: a call that had
// waited that long would have failed with the context's error instead, so
// the bound holds without a wall-clock assertion a busy machine could
// break. took is logged only.
func gone(t *testing.T, what string, err error, took time.Duration) {
	t.Helper()
	t.Logf("%s: %v after %v", what, err, took.Round(time.Millisecond))
	if !errors.Is(err, reliability.ErrPeerGone) {
		t.Errorf("%s: %v, want ErrPeerGone before its context's deadline", what, err)
	}
}

// detectWithin is how long after a path goes silent a Write or Read may
// take to fail with ErrPeerGone, for a connection of timeout timeout: the
// timeout itself, with room for a busy machine (the liveness check runs on
// the engines' goroutines); a peer never declared gone, or declared gone
// only after several timeouts, meets the context's deadline instead.
func detectWithin(timeout time.Duration) time.Duration { return 3 * timeout }

// TestPeerSilentBetweenTransfers: after one transfer completes the path
// goes silent both ways (the peer died between transfers). The sender's
// next Write and the receiver's next Read fail with ErrPeerGone under a
// context of detectWithin(Config.Timeout); a Write after that fails with
// it under a context of Timeout/2: at once, from what the sender
// remembers, not by waiting out a Timeout of its own.
//
// On synctest's fake clock: what it shows does not depend on the
// machine's speed or load.
func TestPeerSilentBetweenTransfers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 2 * time.Second
		e, cut := cutPair(t, reliability.ReceiverConfig{Config: reliability.Config{Timeout: timeout}, Scheme: scheme.Scheme{Kind: scheme.SRNACK}})
		transfer(t, e.endpoints, 100000, 1, 1) // the fence: the connection worked
		cut.Store(true)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), detectWithin(timeout))
		defer cancel()
		read := readAsync(ctx, e.r, 1000)
		_, err := e.s.Write(ctx, make([]byte, 1000), 2)
		gone(t, "write", err, time.Since(start))
		gone(t, "read", <-read, time.Since(start))
		start = time.Now()
		later, cancelLater := context.WithTimeout(context.Background(), timeout/2)
		defer cancelLater()
		_, err = e.s.Write(later, make([]byte, 1000), 3)
		gone(t, "a later write", err, time.Since(start))
	})
}

// errTooLate cancels a context detectWithin after a cut.
var errTooLate = errors.New("the peer was not declared gone in time")

// TestPeerSilentMidTransfer: the path goes silent both ways once 2000
// frames of a 16 MiB transfer (16 384 frames) have crossed; the sender's
// Write and the receiver's Read fail with ErrPeerGone under a context
// canceled detectWithin(Config.Timeout) after the cut.
//
// On synctest's fake clock: what it shows does not depend on the
// machine's speed or load.
func TestPeerSilentMidTransfer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 2 * time.Second
		var cutAt atomic.Int64
		e, cut := cutPair(t, reliability.ReceiverConfig{Config: reliability.Config{Timeout: timeout}, Scheme: scheme.Scheme{Kind: scheme.SRNACK}})
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		frames := 0
		e.cutAfter = func() { // runs under the forward direction's lock, in send order
			if frames++; frames == 2000 {
				cutAt.Store(time.Now().UnixNano())
				cut.Store(true)
				time.AfterFunc(detectWithin(timeout), func() { cancel(errTooLate) })
			}
		}
		// Nothing waits forever if the cut never comes.
		stop := time.AfterFunc(time.Minute, func() { cancel(context.DeadlineExceeded) })
		defer stop.Stop()
		const size = 16 << 20
		read := readAsync(ctx, e.r, size)
		_, err := e.s.Write(ctx, make([]byte, size), 1)
		if cutAt.Load() == 0 {
			t.Fatalf("the transfer ended (%v) before 2000 frames crossed", err)
		}
		start := time.Unix(0, cutAt.Load())
		gone(t, "write", err, time.Since(start))
		gone(t, "read", <-read, time.Since(start))
	})
}

// TestCloseAbortsPeer: Close on one side fails the other side's pending
// call with ErrPeerGone because of the CLOSE (not ErrTimeout), under a
// context of Timeout/2 (the liveness timeout cannot have fired), and its
// later calls fail too, at once: again under a context of Timeout/2.
// The receiver, closing after the sender's CLOSE, sends nothing more: the
// sender's QP is gone, and its port would hand the datagrams to its
// kernel.
func TestCloseAbortsPeer(t *testing.T) {
	const timeout = 30 * time.Second
	cfg := reliability.ReceiverConfig{Config: reliability.Config{Timeout: timeout}, Scheme: scheme.Scheme{Kind: scheme.SRNACK}}
	e, _ := cutPair(t, cfg)                // never cut
	transfer(t, e.endpoints, 100000, 1, 1) // the fence: the connection worked
	ctx, cancel := context.WithTimeout(context.Background(), timeout/2)
	defer cancel()
	before := e.toSender.Counters().Sent
	read := readAsync(ctx, e.r, 1000)
	// The fence: the Read is posted once its CTS is on the way (no Write
	// follows, so nothing else crosses toward the sender).
	for e.toSender.Counters().Sent == before {
		select {
		case err := <-read:
			t.Fatalf("the read ended before its CTS left: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	start := time.Now()
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	err := <-read
	gone(t, "the receiver's pending read", err, time.Since(start))
	if errors.Is(err, reliability.ErrTimeout) {
		t.Errorf("the receiver's pending read: %v: the liveness timeout, not the sender's CLOSE", err)
	}
	start = time.Now()
	later, cancelLater := context.WithTimeout(context.Background(), timeout/2)
	defer cancelLater()
	_, _, err = e.r.Read(later, make([]byte, 1000))
	gone(t, "a later read", err, time.Since(start))
	before = e.toSender.Counters().Sent
	if err := e.r.Close(); err != nil {
		t.Fatal(err)
	}
	if sent := e.toSender.Counters().Sent - before; sent != 0 {
		t.Errorf("the receiver sent %d datagrams as it closed after the sender had", sent)
	}
}

// TestConnectSilentPeer: a bootstrap peer that accepts and never answers
// fails the connect at its context's deadline.
func TestConnectSilentPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			time.Sleep(5 * time.Second)
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sc := pipeContext(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = driver.ConnectSender(ctx, sdr.NewBootstrap(conn), sc, sdr.QPAttr{}, reliability.SenderConfig{})
	took := time.Since(start)
	t.Logf("connect to a silent peer: %v after %v", err, took.Round(time.Millisecond))
	// The error names the deadline; the wall-clock bound only catches a
	// connect that ignored its context and ended some other way, late (the
	// peer closes after 5 s): loose enough for a busy machine.
	if !errors.Is(err, context.DeadlineExceeded) || took >= 5*time.Second {
		t.Errorf("connect to a silent peer: %v after %v, want DeadlineExceeded at 300 ms (not the peer's close at 5 s)", err, took)
	}
}

// TestConnectSameRoles: two receivers (and two senders) are refused with
// ErrRoleMismatch on both ends.
func TestConnectSameRoles(t *testing.T) {
	for _, role := range []string{"receivers", "senders"} {
		t.Run(role, func(t *testing.T) {
			a, b := tcpPair(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			connect := func(conn net.Conn) error {
				var err error
				if role == "receivers" {
					var r *driver.Receiver
					if r, err = driver.ConnectReceiver(ctx, sdr.NewBootstrap(conn), pipeContext(t), sdr.QPAttr{}, reliability.ReceiverConfig{}); r != nil {
						r.Close()
					}
				} else {
					var s *driver.Sender
					if s, err = driver.ConnectSender(ctx, sdr.NewBootstrap(conn), pipeContext(t), sdr.QPAttr{}, reliability.SenderConfig{}); s != nil {
						s.Close()
					}
				}
				return err
			}
			errs := make(chan error, 1)
			go func() { errs <- connect(a) }()
			for _, err := range []error{connect(b), <-errs} {
				if !errors.Is(err, reliability.ErrRoleMismatch) {
					t.Errorf("two %s: %v, want ErrRoleMismatch", role, err)
				}
			}
		})
	}
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// pipeContext returns an SDR context on one end of an unconnected pipe.
func pipeContext(t *testing.T) *sdr.Context {
	t.Helper()
	pa, _ := emunic.NewPipe(emunic.PipeConfig{})
	dev, err := emunic.NewDevice(emunic.Config{Port: pa, GID: netip.MustParseAddr("10.0.0.9"), MAC: [6]byte{2, 0, 0, 0, 0, 9}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	sc, err := sdr.Open(sdrnic.New(dev, sdrnic.Options{}), sdr.DeviceAttr{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	return sc
}
