package driver_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/emunic/udp"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/driver"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/sdr/backend"
)

// endpoints is one direction of a reliable connection between two
// emulated NICs: a Sender on a, a Receiver on b.
type endpoints struct {
	s *driver.Sender
	r *driver.Receiver
}

// connectPair builds two contexts on two devices joined by ports, an SDR
// QP pair and datagram channels, and the drivers on them.
func connectPair(t testing.TB, pa, pb emunic.Port, gidA, gidB netip.Addr, qa sdr.QPAttr, cfg reliability.ReceiverConfig) endpoints {
	t.Helper()
	sa, sb := openContexts(t, pa, pb, gidA, gidB)
	return connectContexts(t, sa, sb, qa, cfg)
}

// openContexts opens an SDR context (4 channels) on a device on each of
// two ports; the test's cleanup closes them.
func openContexts(t testing.TB, pa, pb emunic.Port, gidA, gidB netip.Addr) (sa, sb *sdr.Context) {
	t.Helper()
	return openContextsWrapped(t, pa, pb, gidA, gidB, nil)
}

// openContextsWrapped is openContexts with the first context's backend
// wrapped by wrapA (nil: not wrapped).
func openContextsWrapped(t testing.TB, pa, pb emunic.Port, gidA, gidB netip.Addr, wrapA func(backend.Backend) backend.Backend) (sa, sb *sdr.Context) {
	t.Helper()
	var ctxs []*sdr.Context
	for i, p := range []emunic.Port{pa, pb} {
		dev, err := emunic.NewDevice(emunic.Config{Port: p, GID: []netip.Addr{gidA, gidB}[i], MAC: [6]byte{2, 0, 0, 0, 0, byte(i + 1)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		var b backend.Backend = sdrnic.New(dev, sdrnic.Options{})
		if i == 0 && wrapA != nil {
			b = wrapA(b)
		}
		sc, err := sdr.Open(b, sdr.DeviceAttr{Channels: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sc.Close() })
		ctxs = append(ctxs, sc)
	}
	return ctxs[0], ctxs[1]
}

// connectContexts connects a Sender on sa to a Receiver on sb with QPs of
// attributes qa; the test's cleanup closes both. cfg configures the
// receiver; the sender takes its Config.
func connectContexts(t testing.TB, sa, sb *sdr.Context, qa sdr.QPAttr, cfg reliability.ReceiverConfig) endpoints {
	t.Helper()
	s, r, err := driver.ConnectLocal(context.Background(), sa, sb, qa, reliability.SenderConfig{Config: cfg.Config}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("closing the sender: %v", err)
		}
	})
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("closing the receiver: %v", err)
		}
	})
	return endpoints{s, r}
}

// pipePair connects two devices over an in-process pipe whose link
// delays every frame by delay one way and loses a fraction loss of them
// (data and control alike).
func pipePair(t *testing.T, delay time.Duration, loss float64, seed uint64, cfg reliability.ReceiverConfig) endpoints {
	pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: lossyLink(t, delay, loss, seed), BToA: lossyLink(t, delay, loss, seed+1)})
	return connectPair(t, pa, pb, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"),
		testQPAttr, cfg)
}

// lossyLink returns a link direction that delays every frame by delay and
// loses a fraction loss of them.
func lossyLink(t *testing.T, delay time.Duration, loss float64, seed uint64) *link.Direction {
	d, err := link.New(link.Config{Delay: delay, Loss: link.Bernoulli(loss), Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// testQPAttr gives 16 slots of 16 MiB.
var testQPAttr = sdr.QPAttr{MTU: 1024, ChunkSize: 16 << 10, MaxMessages: 16, MaxInFlightBytes: 256 << 20}

// transfer writes size random bytes with immediate imm and reads them on
// the other side; it checks the bytes (SHA-256) and the immediate.
func transfer(t *testing.T, e endpoints, size int, imm uint32, seed uint64) (sent, recvd reliability.Stats) {
	t.Helper()
	sent, recvd, _, err := tryTransfer(e, size, imm, seed)
	if err != nil {
		t.Fatal(err)
	}
	return sent, recvd
}

// tryTransfer is transfer that says why it failed instead, and how long
// it took when it did not.
func tryTransfer(e endpoints, size int, imm uint32, seed uint64) (sent, recvd reliability.Stats, took time.Duration, err error) {
	src := make([]byte, size)
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	dst := make([]byte, size)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type readResult struct {
		imm   uint32
		stats reliability.Stats
		err   error
	}
	done := make(chan readResult, 1)
	go func() {
		imm, st, err := e.r.Read(ctx, dst)
		done <- readResult{imm, st, err}
	}()
	start := time.Now()
	sent, err = e.s.Write(ctx, src, imm)
	if err != nil {
		cancel() // the read ends with the write's cause, or at once
		return sent, recvd, 0, fmt.Errorf("write of %d bytes: %w; the read: %v", size, err, (<-done).err)
	}
	rr := <-done
	took = time.Since(start)
	switch {
	case rr.err != nil:
		return sent, rr.stats, 0, fmt.Errorf("read of %d bytes: %w", size, rr.err)
	case sha256.Sum256(dst) != sha256.Sum256(src):
		return sent, rr.stats, 0, fmt.Errorf("%d bytes: received data differs from what was sent", size)
	case rr.imm != imm:
		return sent, rr.stats, 0, fmt.Errorf("immediate %#x, want %#x", rr.imm, imm)
	}
	return sent, rr.stats, took, nil
}

// TestDriversOverLossyPipe moves 1 MiB, 3 B and 0 B messages (and at 1 %
// 4 MiB + 5000 B) through a lossy pipe with a 10 ms round trip
// with every scheme: every byte arrives, every time.
//
// On synctest's fake clock: what it shows does not depend on the
// machine's speed or load.
func TestDriversOverLossyPipe(t *testing.T) {
	schemes := []reliability.ReceiverConfig{
		{Scheme: scheme.Scheme{Kind: scheme.SRRTO}},
		{Scheme: scheme.Scheme{Kind: scheme.SRNACK}},
		{Scheme: scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.MDS, K: 16, M: 4}}},
		{Scheme: scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.XOR, K: 16, M: 4}}},
		{Scheme: scheme.Scheme{Kind: scheme.Hybrid, Code: ec.Params{Kind: ec.MDS, K: 16, M: 4}}},
		{Scheme: scheme.Scheme{Kind: scheme.Auto}},
	}
	for _, loss := range []float64{0, 0.001, 0.01, 0.05} {
		for _, cfg := range schemes {
			name := fmt.Sprintf("%v/loss=%v", cfg.Scheme, loss)
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					cfg.RTT = 10 * time.Millisecond
					cfg.Bandwidth = 2e9
					e := pipePair(t, 5*time.Millisecond, loss, uint64(loss*1e4)+7, cfg)
					sizes := []int{1 << 20, 3, 0}
					if loss == 0.01 {
						sizes = append(sizes, 4<<20+5000) // an odd length; 16 MiB and more: TestDriversLargeMessages
					}
					for i, size := range sizes {
						sent, recvd := transfer(t, e, size, 0xC0DE0000+uint32(i), uint64(i))
						t.Logf("%d B: %v in %v; sent %d chunks (%d again, %d parity), %d decoded, %d fallbacks",
							size, recvd.Plan, recvd.Duration().Round(time.Millisecond), sent.ChunksSent, sent.Retransmitted,
							sent.ParitySent, recvd.Decoded, recvd.Fallbacks)
					}
				})
			})
		}
	}
}

// refusal makes the QPs of a refusingBackend refuse Writes as a NIC
// whose send queues are full does (sdr.ErrRetry): none while its mode is
// 0, every third while 1, all while 2.
type refusal struct {
	mode    atomic.Int32
	calls   atomic.Int64
	refused atomic.Int64
}

func (r *refusal) refuse() bool {
	n := r.calls.Add(1)
	if m := r.mode.Load(); m == 2 || m == 1 && n%3 == 0 {
		r.refused.Add(1)
		return true
	}
	return false
}

// refusingBackend wraps a backend whose QPs refuse Writes by a refusal.
type refusingBackend struct {
	backend.Backend
	r *refusal
}

func (b refusingBackend) Open(a backend.DeviceAttr) (backend.Device, error) {
	d, err := b.Backend.Open(a)
	if err != nil {
		return nil, err
	}
	return refusingDevice{d, b.r}, nil
}

// refusingDevice keeps the wrapped device's datagram channels.
type refusingDevice struct {
	backend.Device
	r *refusal
}

func (d refusingDevice) NewDatagram(a backend.DatagramAttr) (backend.Datagram, error) {
	return d.Device.(backend.DatagramDevice).NewDatagram(a)
}

func (d refusingDevice) NewQP(a backend.QPAttr) (backend.QP, error) {
	q, err := d.Device.NewQP(a)
	if err != nil {
		return nil, err
	}
	return refusingQP{q, d.r}, nil
}

// refusingQP keeps the wrapped QP's optional rate limiter and congestion
// counter (the emulated NIC has both).
type refusingQP struct {
	backend.QP
	r *refusal
}

func (q refusingQP) Write(w *backend.Write) error {
	if q.r.refuse() {
		return fmt.Errorf("refusingQP: %w", backend.ErrRetry)
	}
	return q.QP.Write(w)
}

func (q refusingQP) SetRateLimit(bitsPerSecond float64) error {
	return q.QP.(backend.RateLimiter).SetRateLimit(bitsPerSecond)
}

func (q refusingQP) CongestionNotifications() uint64 {
	return q.QP.(backend.CongestionCounter).CongestionNotifications()
}

// TestDriverSendBacklog runs the drivers over a NIC that refuses sends
// (sdr.ErrRetry, as when pacing holds its send queues full): the refused
// sends wait in the sender's backlog, partly made, while its loop goes
// on. With every third Write refused, transfers of every scheme arrive
// whole over a lossy link (chunk runs, coded passes and packet repairs
// resumed where they stopped). With every Write refused, a canceled
// transfer ends at once (the loop is not waiting the refusals out), one
// left alone fails with sdr.ErrRetry after retryFor, and the connection
// then carries the next transfer.
func TestDriverSendBacklog(t *testing.T) {
	for _, cfg := range []reliability.ReceiverConfig{
		{Scheme: scheme.Scheme{Kind: scheme.SRNACK}},
		{Scheme: scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.MDS, K: 16, M: 4}}},
	} {
		t.Run(cfg.Scheme.String(), func(t *testing.T) {
			r := &refusal{}
			r.mode.Store(1)
			pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: lossyLink(t, time.Millisecond, 0.01, 5), BToA: lossyLink(t, time.Millisecond, 0.01, 6)})
			sa, sb := openContextsWrapped(t, pa, pb, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"),
				func(b backend.Backend) backend.Backend { return refusingBackend{b, r} })
			cfg.RTT, cfg.Bandwidth = 2*time.Millisecond, 2e9
			e := connectContexts(t, sa, sb, testQPAttr, cfg)
			var retries int
			for i, size := range []int{4 << 20, 5000, 0} {
				sent, _ := transfer(t, e, size, uint32(i), uint64(i))
				retries += sent.SendRetries
			}
			if r.refused.Load() == 0 || retries == 0 {
				t.Fatalf("%d Writes refused, %d retries counted: the test needs both", r.refused.Load(), retries)
			}
			t.Logf("every third Write refused: %d of %d, %d sends retried from the backlog", r.refused.Load(), r.calls.Load(), retries)

			r.mode.Store(2)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			readErr := make(chan error, 1)
			go func() {
				_, _, err := e.r.Read(ctx, make([]byte, 1<<20))
				readErr <- err
			}()
			refusedBefore := r.refused.Load()
			go func() {
				// Fence: the transfer's sends have been refused, so they wait.
				for r.refused.Load() < refusedBefore+3 && ctx.Err() == nil {
					time.Sleep(time.Millisecond)
				}
				cancel()
			}()
			start := time.Now()
			_, err := e.s.Write(ctx, make([]byte, 1<<20), 7)
			// The error alone does not tell: a Write whose cancel the loop
			// left waiting reports context.Canceled too, once the refused
			// head fails on its own after RetryFor. What does is returning
			// before then; a prompt cancel takes a few channel operations
			// and at most one 10 ms backoff, so only a stall of the machine
			// of the whole RetryFor could fail a loop that is right.
			took := time.Since(start)
			t.Logf("write canceled while every send is refused: %v after %v", err, took)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("write canceled while every send is refused: %v, want context.Canceled", err)
			}
			if took >= driver.RetryFor {
				t.Fatalf("write canceled while every send is refused returned after %v: the loop waited the refusals out (%v)", took, driver.RetryFor)
			}
			if err := <-readErr; !errors.Is(err, context.Canceled) {
				t.Fatalf("canceled read: %v", err)
			}

			go func() {
				_, _, err := e.r.Read(context.Background(), make([]byte, 1<<20))
				readErr <- err
			}()
			if _, err := e.s.Write(context.Background(), make([]byte, 1<<20), 8); !errors.Is(err, sdr.ErrRetry) {
				t.Fatalf("write while every send is refused: %v, want an sdr.ErrRetry failure", err)
			}
			if err := <-readErr; err == nil {
				t.Fatal("read of a transfer whose sender failed succeeded")
			}
			r.mode.Store(0)
			transfer(t, e, 1<<20, 9, 9)
		})
	}
}

// TestDriverRejects: lengths that differ fail both sides and the next
// transfer still matches; oversized buffers fail before anything is sent.
func TestDriverRejects(t *testing.T) {
	e := pipePair(t, 0, 0, 1, reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.SRRTO}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, _, err := e.r.Read(ctx, make([]byte, 1000))
		errc <- err
	}()
	if _, err := e.s.Write(ctx, make([]byte, 2000), 1); !errors.Is(err, reliability.ErrLengthMismatch) {
		t.Fatalf("write of 2000 into 1000: %v, want ErrLengthMismatch", err)
	}
	if err := <-errc; !errors.Is(err, reliability.ErrLengthMismatch) {
		t.Fatalf("read of 1000 from 2000: %v, want ErrLengthMismatch", err)
	}
	transfer(t, e, 5000, 9, 9)
	if _, err := e.s.Write(ctx, make([]byte, 32<<20), 1); !errors.Is(err, sdr.ErrTooLong) {
		t.Fatalf("write of 32 MiB: %v, want ErrTooLong", err)
	}
	if _, _, err := e.r.Read(ctx, make([]byte, 32<<20)); !errors.Is(err, sdr.ErrTooLong) {
		t.Fatalf("read of 32 MiB: %v, want ErrTooLong", err)
	}
	transfer(t, e, 7000, 10, 10)
}

// TestDriverCancel cancels a Write that waits for the receiver's CTS and
// one whose data the link swallows: both fail on both sides, and the
// connection carries the next transfer.
func TestDriverCancel(t *testing.T) {
	var swallow atomic.Bool
	dropData := func(frame []byte) bool {
		// Ethernet (14) + IPv4 (20) + UDP (8): the BTH opcode; UD (0x64,
		// 0x65) is the control channel.
		return swallow.Load() && len(frame) > 42 && frame[42] != 0x64 && frame[42] != 0x65
	}
	ab, ba := lossyLink(t, 0, 0, 1), lossyLink(t, 0, 0, 2)
	ab.SetRule(dropData)
	ba.SetRule(dropData)
	pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: ab, BToA: ba})
	e := connectPair(t, pa, pb, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"),
		testQPAttr, reliability.ReceiverConfig{Config: reliability.Config{RTT: time.Millisecond}, Scheme: scheme.Scheme{Kind: scheme.SRRTO}})
	read := func(n int) chan error {
		errc := make(chan error, 1)
		go func() {
			_, _, err := e.r.Read(context.Background(), make([]byte, n))
			errc <- err
		}()
		return errc
	}

	// No receive posted yet: the Write waits for its CTS and is canceled.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := e.s.Write(ctx, make([]byte, 1<<20), 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write without a receive: %v, want the context's deadline", err)
	}
	// Its transfer number is still the receiver's next: that read fails.
	if err := <-read(1 << 20); !errors.Is(err, reliability.ErrAborted) {
		t.Fatalf("read of the canceled transfer: %v, want ErrAborted", err)
	}

	// The data never arrives: the Write is canceled mid-transfer.
	swallow.Store(true)
	errc := read(1 << 20)
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := e.s.Write(ctx, make([]byte, 1<<20), 2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write into a black hole: %v, want the context's deadline", err)
	}
	if err := <-errc; !errors.Is(err, reliability.ErrAborted) {
		t.Fatalf("read of the aborted transfer: %v, want ErrAborted", err)
	}
	swallow.Store(false)
	transfer(t, e, 100000, 3, 3)
}

// TestCanceledBeforeTheCall: a Write or Read whose context has already
// ended is a transfer all the same, aborted on both sides, so that later
// ones still match in order. (Before, one abandoned its submission when
// the context had ended by then — or had not, by the scheduler's pick —
// and the peer's next call matched the one after it.) A Read canceled
// after its CTS left also shows the receiver answering the sender's
// probe with its Abort, not with the completing ACK it gave before.
func TestCanceledBeforeTheCall(t *testing.T) {
	e := pipePair(t, 0, 0, 7, reliability.ReceiverConfig{Config: reliability.Config{RTT: time.Millisecond}, Scheme: scheme.Scheme{Kind: scheme.SRNACK}})
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	const n = 100000
	// Each call first, its peer's after it returned: the transfer cannot
	// have completed before its cancel.
	for i := range 8 {
		if _, err := e.s.Write(canceled, make([]byte, n), uint32(i)); !errors.Is(err, context.Canceled) {
			t.Fatalf("write %d with a canceled context: %v", i, err)
		}
		if _, _, err := e.r.Read(context.Background(), make([]byte, n)); !errors.Is(err, reliability.ErrAborted) {
			t.Fatalf("read %d, the canceled write's peer: %v, want ErrAborted", i, err)
		}
	}
	for i := range 4 {
		if _, _, err := e.r.Read(canceled, make([]byte, n)); !errors.Is(err, context.Canceled) {
			t.Fatalf("read %d with a canceled context: %v", i, err)
		}
		if _, err := e.s.Write(context.Background(), make([]byte, n), uint32(i)); !errors.Is(err, reliability.ErrAborted) {
			t.Fatalf("write %d, the canceled read's peer: %v, want ErrAborted", i, err)
		}
	}
	transfer(t, e, n, 3, 3)
}

// TestDriversLargeMessages moves 16 MiB messages through a 5 %-lossy pipe
// with a 10 ms round trip, one packet per chunk as the paper runs lossy
// links: every byte arrives (64 MiB transfers: scripts/soak.sh). The pipe
// queues without bound and the sender does not pace, so these runs also show the timers'
// backoff keeping repairs from piling up behind a first pass the receiving
// host drains slowly.
//
// On synctest's fake clock: what it shows does not depend on the
// machine's speed or load.
func TestDriversLargeMessages(t *testing.T) {
	for _, cfg := range []reliability.ReceiverConfig{
		{Scheme: scheme.Scheme{Kind: scheme.SRNACK}},
		{Scheme: scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.MDS, K: 32, M: 8}}},
		{Scheme: scheme.Scheme{Kind: scheme.Hybrid, Code: ec.Params{Kind: ec.XOR, K: 32, M: 8}}},
		{Scheme: scheme.Scheme{Kind: scheme.Auto}},
	} {
		t.Run(cfg.Scheme.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg.RTT = 10 * time.Millisecond
				pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: lossyLink(t, 5*time.Millisecond, 0.05, 11),
					BToA: lossyLink(t, 5*time.Millisecond, 0.05, 12)})
				e := connectPair(t, pa, pb, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"),
					sdr.QPAttr{MTU: 1024, ChunkSize: 1024, MaxMessages: 4, MaxInFlightBytes: 512 << 20}, cfg)
				const size = 16 << 20
				sent, recvd := transfer(t, e, size, 1, 1)
				t.Logf("%d MiB: %v in %v; sent %d chunks (%d again, %d parity), %d decoded, %d fallbacks",
					size>>20, recvd.Plan, recvd.Duration().Round(time.Millisecond), sent.ChunksSent, sent.Retransmitted,
					sent.ParitySent, recvd.Decoded, recvd.Fallbacks)
			})
		})
	}
}

// TestDriverConcurrentTransfers runs 12 Writes and 12 Reads from as many
// goroutines through a lossy pipe: transfers overlap within the window,
// each Read gets one whole message, identified by its immediate, and every
// message is read exactly once.
//
// On synctest's fake clock: what it shows does not depend on the
// machine's speed or load.
func TestDriverConcurrentTransfers(t *testing.T) {
	for _, cfg := range []reliability.ReceiverConfig{{Scheme: scheme.Scheme{Kind: scheme.SRNACK}}, {Scheme: scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.XOR, K: 8, M: 2}}}} {
		t.Run(cfg.Scheme.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg.RTT = 10 * time.Millisecond
				e := pipePair(t, 5*time.Millisecond, 0.02, 5, cfg)
				const n, size = 12, 300 << 10
				payload := func(i int) []byte {
					p := make([]byte, size)
					rng := rand.New(rand.NewPCG(uint64(i), 3))
					for j := range p {
						p[j] = byte(rng.Uint32())
					}
					return p
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				errs := make(chan error, 2*n)
				seen := make(chan uint32, n)
				for i := range n {
					go func() {
						_, err := e.s.Write(ctx, payload(i), uint32(i))
						errs <- err
					}()
					go func() {
						buf := make([]byte, size)
						imm, _, err := e.r.Read(ctx, buf)
						if err == nil && (imm >= n || !bytes.Equal(buf, payload(int(imm)))) {
							err = fmt.Errorf("read of message %d: wrong bytes", imm)
						}
						seen <- imm
						errs <- err
					}()
				}
				for range 2 * n {
					if err := <-errs; err != nil {
						t.Fatal(err)
					}
				}
				got := map[uint32]bool{}
				for range n {
					imm := <-seen
					if got[imm] {
						t.Fatalf("message %d read twice", imm)
					}
					got[imm] = true
				}
			})
		})
	}
}

// TestDriversOverUDP runs the drivers over emunic's UDP port (kernel
// sockets on loopback addresses of this package's own): the same code over
// another port, with the kernel's buffers as the only loss.
func TestDriversOverUDP(t *testing.T) {
	for _, cfg := range []reliability.ReceiverConfig{{Scheme: scheme.Scheme{Kind: scheme.SRNACK}}, {Scheme: scheme.Scheme{Kind: scheme.Hybrid, Code: ec.Params{Kind: ec.MDS, K: 16, M: 4}}}} {
		t.Run(cfg.Scheme.String(), func(t *testing.T) {
			a, b := netip.MustParseAddr("127.0.3.1"), netip.MustParseAddr("127.0.3.2")
			pa, err := udp.NewPort(a)
			if err != nil {
				t.Fatal(err)
			}
			pb, err := udp.NewPort(b)
			if err != nil {
				t.Fatal(err)
			}
			e := connectPair(t, pa, pb, a, b, testQPAttr, cfg)
			for i, size := range []int{4 << 20, 12345} {
				transfer(t, e, size, uint32(i), uint64(i))
			}
		})
	}
}

// TestPacesToBottleneck moves 8 MiB over a pipe whose link has a
// 100 Mbit/s bottleneck with a 1 MB queue and a 10 ms round trip, without
// loss and with 1 % random loss, with default attributes and config, on
// synctest's fake clock: the host takes no time, so what the test sees is
// the controller's alone, the same on a busy machine as on an idle one.
// The rate control finds the bottleneck: the queue drops at most 2 % of
// the frames (startup's doubling may overshoot for a round trip or two
// before the queue shows; an unpaced sender overruns the bottleneck, and
// the queue then drops most of what it is offered), and the transfer
// moves at 80 % of the bottleneck or more — the random loss does not hold
// the rate down (a controller that cut on loss would sit near its
// 1 Mbit/s floor). On the wall clock a busy host's stalls add to the
// round trips; that is issue 38's rate control, not this claim.
func TestPacesToBottleneck(t *testing.T) {
	const bottleneck = 100e6
	const size = 8 << 20
	for _, tc := range []struct {
		spec string
		seed uint64
	}{
		{"rate=100Mbit,delay=5ms,queue=1MB", 23},
		{"rate=100Mbit,delay=5ms,loss=1%,queue=1MB", 21},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg, err := link.ParseConfig(tc.spec)
				if err != nil {
					t.Fatal(err)
				}
				ab, ba := mustLink(t, cfg, tc.seed), mustLink(t, cfg, tc.seed+1)
				pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: ab, BToA: ba})
				e := connectPair(t, pa, pb, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"),
					sdr.QPAttr{}, reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.SRNACK}})
				start := time.Now()
				sent, _ := transfer(t, e, size, 1, 1)
				el := time.Since(start)
				c := ab.Counters()
				rate := size * 8 / el.Seconds()
				t.Logf("8 MiB in %v (%.1f Mbit/s), pacing at %.1f Mbit/s; link: %d frames, %d lost at random, %d queue drops",
					el, rate/1e6, sent.PacingRate/1e6, c.Sent, c.Lost, c.QueueDrops)
				if c.QueueDrops*50 > c.Sent {
					t.Errorf("%d queue drops of %d frames: the sender overran the bottleneck", c.QueueDrops, c.Sent)
				}
				if rate < 0.8*bottleneck {
					t.Errorf("%.1f Mbit/s on a 100 Mbit/s path: below 80 %% of the bottleneck", rate/1e6)
				}
			})
		})
	}
}

// mustLink returns a link direction of cfg with seed.
func mustLink(t *testing.T, cfg link.Config, seed uint64) *link.Direction {
	t.Helper()
	cfg.Seed = seed
	d, err := link.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRepairsByPacket moves 4 MiB three times in 64-packet chunks over a
// pipe that loses 1 % of the frames each way: a chunk is then lost 47 %
// of the time, almost always by one packet, and the receiver asks for the
// missing packets rather than whole chunks (an MDS submessage only for as
// many as it lacks; SR-RTO's receiver reports them, and its sender's
// timers resend them). The frames sent stay within 1.35 × those of one
// first pass (data, and parity for EC); resending whole chunks sends
// about twice as many.
//
// On synctest's fake clock: what it shows does not depend on the
// machine's speed or load.
func TestRepairsByPacket(t *testing.T) {
	const size, transfers, mtu = 4 << 20, 3, 1024
	attr := sdr.QPAttr{MTU: mtu, ChunkSize: 64 * mtu, MaxMessages: 16, MaxInFlightBytes: 64 << 20}
	for _, tc := range []struct {
		name   string
		cfg    reliability.ReceiverConfig
		parity int // packets of parity per transfer
	}{
		{"sr-nack", reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.SRNACK}}, 0},
		{"sr-rto", reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.SRRTO}}, 0},
		{"ec-mds(32,8)", reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.MDS, K: 32, M: 8}}}, size / mtu / 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ab := lossyLink(t, time.Millisecond, 0.01, 41)
				pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: ab, BToA: lossyLink(t, time.Millisecond, 0.01, 42)})
				e := connectPair(t, pa, pb, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), attr, tc.cfg)
				packetsResent, chunksResent := 0, 0
				for i := range transfers {
					sent, _ := transfer(t, e, size, uint32(i), uint64(i))
					packetsResent += sent.PacketsResent
					chunksResent += sent.Retransmitted
				}
				needed := transfers * (size/mtu + tc.parity)
				c := ab.Counters()
				t.Logf("%d frames sent for %d packets needed (%.3f×), %d lost; %d packets resent alone, %d chunks", c.Sent, needed,
					float64(c.Sent)/float64(needed), c.Lost, packetsResent, chunksResent)
				if packetsResent == 0 {
					t.Error("no packet was resent alone")
				}
				if float64(c.Sent) > 1.35*float64(needed) {
					t.Errorf("%d frames sent for %d packets needed: more than 1.35×", c.Sent, needed)
				}
			})
		})
	}
}

// TestQueuedTransferWaitsItsTurn: three 8 MiB transfers posted at once
// over a 100 Mbit/s path take about 2 s in all, one after the other (the
// sender's pacer sends first passes in order), with a Timeout of 1 s: the
// last one's first chunk comes more than a Timeout after it was posted,
// while the earlier ones progress, and it must not time out. (The
// receiver counted the Timeout from the Post for a transfer with no chunk
// yet, and a write-bw run of 64 MiB transfers at 60 Mbit/s under -race
// failed one of three this way.)
func TestQueuedTransferWaitsItsTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := link.ParseConfig("rate=100Mbit,delay=1ms,queue=1MB")
		if err != nil {
			t.Fatal(err)
		}
		pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: mustLink(t, cfg, 1), BToA: mustLink(t, cfg, 2)})
		rcfg := reliability.ReceiverConfig{Config: reliability.Config{Timeout: time.Second}, Scheme: scheme.Scheme{Kind: scheme.SRNACK}}
		e := connectPair(t, pa, pb, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), sdr.QPAttr{}, rcfg)
		const n, size = 3, 8 << 20
		ctx := context.Background()
		errs := make(chan error, 2*n)
		start := time.Now()
		for i := range n {
			go func() {
				_, err := e.s.Write(ctx, make([]byte, size), uint32(i))
				errs <- err
			}()
			go func() {
				_, _, err := e.r.Read(ctx, make([]byte, size))
				errs <- err
			}()
		}
		for range 2 * n {
			if err := <-errs; err != nil {
				t.Fatalf("after %v: %v", time.Since(start), err)
			}
		}
		if took := time.Since(start); took < 2*time.Second {
			t.Fatalf("%d transfers of %d B took %v at 100 Mbit/s: the last did not wait more than the Timeout", n, size, took)
		}
	})
}
