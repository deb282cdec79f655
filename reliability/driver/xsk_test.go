package driver_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/model"
	"github.com/sdr-rdma/sdr/reliability/scheme"
	"github.com/sdr-rdma/sdr/sdr"
)

var xskLarge = flag.Bool("xsk.large", false, "TestReliabilityXSK: 16 MiB transfers at every loss rate, not only at 5 %")

// xskQPAttr gives 4 slots of 64 MiB (two transfers in flight, each a data
// and a parity message) with 4 KiB chunks of four 1 KiB packets. The
// channels set no rate limit: the transfers' loss is the injected one,
// not a pacer's choice (DCQCN still reacts to a full receive ring).
var xskQPAttr = sdr.QPAttr{MTU: 1024, ChunkSize: 4 << 10, MaxMessages: 4, MaxInFlightBytes: 256 << 20}

// xskSocket gives each AF_XDP socket 4 times the default rings (16384
// descriptors, UMEM 128 MiB): the sender is not paced, and the receiving
// side's ring absorbs what arrives while its goroutine waits for a CPU
// (with the default ring a loaded machine loses tens of thousands of
// frames per loss rate there, beyond the injected drops).
var xskSocket = xsk.Config{RingSize: 16384, NumFrames: 32768}

// xskLink is two network namespaces joined by veth, each with an AF_XDP
// port (and its XDP program, whose fault injection drops frames at
// ingress) and an emulated NIC on it. Contexts of any backend options are
// opened on the two NICs per subtest.
type xskLink struct {
	hosts [2]*emunictest.Host
}

func newXSKLink(t *testing.T) *xskLink {
	t.Helper()
	pair, err := hostnet.NewPair(hostnet.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pair.Close(); err != nil {
			t.Errorf("closing the testbed pair: %v", err)
		}
	})
	l := &xskLink{}
	for i, h := range []*hostnet.Host{pair.A, pair.B} {
		l.hosts[i] = emunictest.NewXSKHost(t, h, xsk.PortConfig{Socket: xskSocket}, nil)
	}
	return l
}

// contexts opens an SDR context with 4 channels on each NIC; the test's
// cleanup closes them (and with them their QPs and datagram channels).
func (l *xskLink) contexts(t *testing.T, opts sdrnic.Options) (a, b *sdr.Context) {
	t.Helper()
	var out [2]*sdr.Context
	for i, h := range l.hosts {
		sc, err := sdr.Open(sdrnic.New(h.Dev, opts), sdr.DeviceAttr{Channels: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sc.Close() })
		out[i] = sc
	}
	return out[0], out[1]
}

// setDrop makes both XDP programs drop the fraction p of the frames they
// steer: data toward the receiver and control messages toward the sender
// alike.
func (l *xskLink) setDrop(t *testing.T, p float64) {
	t.Helper()
	for _, h := range l.hosts {
		if err := h.XSK.Program().SetDropProbability(p); err != nil {
			t.Fatal(err)
		}
	}
}

// counters sums over both sides the frames the XDP programs dropped by
// fault injection and handed to their sockets, and the frames the sockets
// lost on their own (receive ring full or dropped by the kernel): the
// loss an unpaced sender adds to the injected one.
func (l *xskLink) counters(t *testing.T) (dropped, redirected, ringLost uint64) {
	t.Helper()
	for _, h := range l.hosts {
		c, err := h.XSK.Program().Counters()
		if err != nil {
			t.Fatal(err)
		}
		dropped += c.Dropped
		redirected += c.Redirected
		st, err := h.XSK.Stats()
		if err != nil {
			t.Fatal(err)
		}
		ringLost += st.Rx_dropped + st.Rx_ring_full
	}
	return dropped, redirected, ringLost
}

// measureRTT times round trips of a small datagram between the two NICs
// (on a lossless link) and returns the median: the RTT the model is given.
func (l *xskLink) measureRTT(t *testing.T) time.Duration {
	t.Helper()
	a, b := l.contexts(t, sdrnic.Options{})
	var dgs [2]*sdr.Datagram
	for i, sc := range []*sdr.Context{a, b} {
		dg, err := sc.NewDatagram(sdr.DatagramAttr{})
		if err != nil {
			t.Fatal(err)
		}
		dgs[i] = dg
	}
	for i, dg := range dgs {
		info, err := dgs[1-i].Info()
		if err != nil {
			t.Fatal(err)
		}
		if err := dg.Connect(info); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	echoed := make(chan error, 1)
	const rounds = 32
	go func() {
		buf := make([]byte, dgs[1].MaxSize())
		for range rounds {
			n, err := dgs[1].Recv(ctx, buf)
			if err == nil {
				err = dgs[1].Send(buf[:n])
			}
			if err != nil {
				echoed <- err
				return
			}
		}
		echoed <- nil
	}()
	var rtts []time.Duration
	buf := make([]byte, dgs[0].MaxSize())
	for i := range rounds {
		start := time.Now()
		if err := dgs[0].Send([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		n, err := dgs[0].Recv(ctx, buf)
		if err != nil {
			t.Fatalf("echo %d: %v", i, err)
		}
		if n != 1 || buf[0] != byte(i) {
			t.Fatalf("echo %d came back as %x", i, buf[:n])
		}
		rtts = append(rtts, time.Since(start))
	}
	if err := <-echoed; err != nil {
		t.Fatal(err)
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2]
}

// xskResult is one transfer's row of the side-by-side table.
type xskResult struct {
	loss   float64
	size   int
	scheme string
	took   time.Duration
	model  string // the prediction, or why there is none
}

// predict renders the model's mean and p99.9 for size bytes with choice c
// on link, or the model's objection.
func predict(link model.Link, size int, c model.Choice) string {
	est, err := model.Predict(link, int64(size), c)
	if err != nil {
		return "no prediction: " + err.Error()
	}
	return fmt.Sprintf("%v mean, %v p99.9 (%v)", est.Mean.Round(10*time.Microsecond), est.P999.Round(10*time.Microsecond), c)
}

// rcStall is how long an RC receive may go without a new chunk before
// rcTransfer calls the transfer failed: the RC requester gives up after
// 8 timeouts without progress (emunic's retry count 7) and sends nothing
// more.
const rcStall = 5 * time.Second

// rcTransfer sends size bytes with immediate imm as one plain SDR message
// over RC channel QPs (the NIC's go-back-N underneath, on sender's NIC)
// and waits until the receive is done; it checks the bytes (SHA-256) and
// the immediate and returns the time from the send to the receive's
// completion. If the receive makes no progress for rcStall it returns an
// error saying how far it got, and how many RC retransmission timeouts
// the sender's NIC took during the transfer.
func rcTransfer(t *testing.T, sender *emunic.Device, sq, rq *sdr.QP, sa, sb *sdr.Context, size int, imm uint32, seed uint64) (took time.Duration, timeouts uint64, err error) {
	t.Helper()
	src := emunictest.Pattern(size, seed)
	dst := make([]byte, size)
	smr, err := sa.RegisterMemory(src)
	if err != nil {
		t.Fatal(err)
	}
	defer smr.Deregister()
	rmr, err := sb.RegisterMemory(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer rmr.Deregister()
	h, err := rq.PostRecv(rmr, 0, size)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := h.Complete(); err != nil {
			t.Errorf("completing the receive: %v", err)
		}
	}()
	timeouts0 := sender.Stats().Get(emunic.Timeouts)
	start := time.Now()
	for {
		_, err := sq.PostSend(sdr.SendRequest{MR: smr, Length: size, Imm: imm, HasImm: true})
		if err == nil {
			break
		}
		if !errors.Is(err, sdr.ErrRetry) || time.Since(start) > rcStall {
			t.Fatalf("RC send of %d bytes: %v", size, err)
		}
		time.Sleep(100 * time.Microsecond) // the send queue drains as ACKs arrive
	}
	for !h.Done() {
		ctx, cancel := context.WithTimeout(context.Background(), rcStall)
		err := h.Wait(ctx)
		cancel()
		if err != nil {
			timeouts := sender.Stats().Get(emunic.Timeouts) - timeouts0
			return 0, timeouts, fmt.Errorf("RC receive of %d bytes stalled at %d of %d chunks after %v (%d RC timeouts at the sender): %w",
				size, h.CompleteChunks(), h.Chunks(), time.Since(start).Round(time.Millisecond), timeouts, err)
		}
	}
	took = time.Since(start)
	if sha256.Sum256(dst) != sha256.Sum256(src) {
		t.Fatalf("RC, %d bytes: received data differs from what was sent", size)
	}
	if got, ok := h.Imm(); !ok || got != imm {
		t.Fatalf("RC immediate %#x (complete %v), want %#x", got, ok, imm)
	}
	return took, sender.Stats().Get(emunic.Timeouts) - timeouts0, nil
}

// TestReliabilityXSK moves 1 and 16 MiB over AF_XDP between two network
// namespaces whose XDP programs drop 0, 0.1, 1 and 5 % of the frames they
// steer, at both ingresses (data and control messages alike), with every
// scheme: every byte and the immediate arrive, every time. RC go-back-N
// carries 1 MiB over the same link as the baseline. Completion times are
// logged beside the model's prediction for the measured link; they are
// not asserted (the machine is shared). 16 MiB runs at 5 % only, the
// hardest rate, and not over RC: at the other rates, and over RC, 16 MiB
// cost the suite over a minute under -race and caught nothing the 1 MiB
// runs did not (-xsk.large runs them).
func TestReliabilityXSK(t *testing.T) {
	privileged.Require(t)
	link := newXSKLink(t)

	// Calibration on the lossless link: the round trip of a datagram and
	// the rate of a 4 MiB SR transfer give the model its link.
	rtt := link.measureRTT(t)
	// The timers start at no less than 5 ms: on a shared machine under
	// the race detector, scheduling delays put the round trip's tail far
	// above the veth's median. Started at 1 ms, SR-RTO resent 5128 chunks
	// of a 16 MiB transfer at 5 % loss where 749 were lost, and
	// now and then never finished within the global timeout.
	// The global timeout leaves room for a 16 MiB transfer at 5 % loss on
	// a loaded machine; transfer's own deadline (30 s) is later, so a
	// transfer that fails says why.
	// Until calibrated the injection clock assumes 1 Gbit/s (the SR-RTO
	// calibration transfer's timers are per chunk, it needs no more).
	// The sender's rate is the calibrated one (FixedRate): the
	// transfers are compared with the model at that rate; the rate
	// control has tests of its own (TestPacesToBottleneck).
	baseCfg := reliability.ReceiverConfig{Config: reliability.Config{RTT: max(rtt, 5*time.Millisecond), Bandwidth: 1e9, FixedRate: true, Timeout: 25 * time.Second}}
	var bandwidth float64
	{
		sa, sb := link.contexts(t, sdrnic.Options{})
		cfg := baseCfg
		cfg.Scheme = scheme.Scheme{Kind: scheme.SRRTO}
		e := connectContexts(t, sa, sb, xskQPAttr, cfg)
		const size = 4 << 20
		_, recvd := transfer(t, e, size, 1, 1)
		bandwidth = size * 8 / recvd.Duration().Seconds()
	}
	// The engines' injection clock runs at half the calibrated rate: the
	// rate swings severalfold with the machine's load, and a clock ahead
	// of the wire fires EC's fallback timer before the first pass has
	// landed, which NACKs every submessage (a retransmission storm that
	// grows with the size). Late timers only delay repair.
	baseCfg.Bandwidth = bandwidth / 2
	t.Logf("link: datagram RTT %v (median of 32), SR-RTO goodput %.2f Gbit/s (4 MiB, lossless)", rtt, bandwidth/1e9)

	schemes := []struct {
		name string
		cfg  reliability.ReceiverConfig
	}{
		{"sr-rto", reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.SRRTO}}},
		{"sr-nack", reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.SRNACK}}},
		{"ec-mds", reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.MDS, K: 16, M: 4}}}},
		{"ec-xor", reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.EC, Code: ec.Params{Kind: ec.XOR, K: 16, M: 4}}}},
		{"hybrid", reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.Hybrid, Code: ec.Params{Kind: ec.MDS, K: 16, M: 4}}}},
		{"auto", reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.Auto}}},
	}
	// Every scheme moves 1 MiB at every rate and 16 MiB at 5 %, the
	// hardest, and with -xsk.large at every rate.
	sizes := func(loss float64) []int {
		if loss == 0.05 || *xskLarge {
			return []int{1 << 20, 16 << 20}
		}
		return []int{1 << 20}
	}
	var results []xskResult
	for _, loss := range []float64{0, 0.001, 0.01, 0.05} {
		link.setDrop(t, loss)
		chunkLoss, err := model.ChunkLoss(loss, xskQPAttr.ChunkSize/xskQPAttr.MTU)
		if err != nil {
			t.Fatal(err)
		}
		mlink := model.Link{Bandwidth: bandwidth, RTT: rtt, Loss: chunkLoss, ChunkSize: xskQPAttr.ChunkSize}
		dropped0, redirected0, ringLost0 := link.counters(t)
		ranBefore := len(results)
		for _, sch := range schemes {
			t.Run(fmt.Sprintf("loss=%v/%s", loss, sch.name), func(t *testing.T) {
				cfg := baseCfg
				cfg.Scheme = sch.cfg.Scheme
				sa, sb := link.contexts(t, sdrnic.Options{})
				e := connectContexts(t, sa, sb, xskQPAttr, cfg)
				for i, size := range sizes(loss) {
					sent, recvd := transfer(t, e, size, 0xA5000000+uint32(i), uint64(size)+uint64(loss*1e4))
					took := recvd.Duration()
					pred := predict(mlink, size, recvd.Plan.ModelChoice())
					t.Logf("%d MiB: %v in %v, model %s; sent %d chunks (%d again, %d parity, %d packets alone), %d decoded, %d fallbacks, %d NACKs",
						size>>20, recvd.Plan, took.Round(time.Millisecond), pred, sent.ChunksSent, sent.Retransmitted,
						sent.ParitySent, sent.PacketsResent, recvd.Decoded, recvd.Fallbacks, recvd.NACKs)
					results = append(results, xskResult{loss, size, sch.name + " " + recvd.Plan.String(), took, pred})
					// At 1 % and 5 % a 16 MiB transfer (16384 packets) loses
					// chunks for certain: something must have repaired them.
					if loss >= 0.01 && size >= 16<<20 && sent.Retransmitted+sent.PacketsResent+recvd.Decoded == 0 {
						t.Errorf("%d MiB at %v%% loss: nothing retransmitted or decoded", size>>20, loss*100)
					}
				}
			})
		}
		t.Run(fmt.Sprintf("loss=%v/rc", loss), func(t *testing.T) {
			sa, sb := link.contexts(t, sdrnic.Options{RC: true})
			sendAttr, recvAttr := xskQPAttr, xskQPAttr
			sendAttr.Send, recvAttr.Recv = true, true
			sq, err := sa.NewQP(sendAttr)
			if err != nil {
				t.Fatal(err)
			}
			rq, err := sb.NewQP(recvAttr)
			if err != nil {
				t.Fatal(err)
			}
			for _, pair := range [][2]*sdr.QP{{sq, rq}, {rq, sq}} {
				info, err := pair[1].Info()
				if err != nil {
					t.Fatal(err)
				}
				if err := pair[0].Connect(info); err != nil {
					t.Fatal(err)
				}
			}
			// RC's go-back-N is the baseline, not under test: 1 MiB shows
			// it recovers; at 5 % its 16 MiB took 11 s of the suite under
			// -race to time out or crawl (-xsk.large runs it).
			rcSizes := []int{1 << 20}
			if *xskLarge {
				rcSizes = sizes(loss)
			}
			for i, size := range rcSizes {
				lossless, err := model.Lossless(mlink, int64(size))
				if err != nil {
					t.Fatal(err)
				}
				pred := fmt.Sprintf("no go-back-N model; lossless %v", lossless.Round(10*time.Microsecond))
				took, timeouts, err := rcTransfer(t, link.hosts[0].Dev, sq, rq, sa, sb, size, 0x5C000000+uint32(i), uint64(size)+7)
				if err != nil {
					// RC giving up under loss (a requester fails after 8
					// timeouts in a row without progress) is the baseline's
					// result, not a fault of this test: it is logged and
					// tabled. A stall without them is unexplained.
					if timeouts < 8 {
						t.Fatalf("%d MiB: %v; fewer than the 8 timeouts that fail an RC requester", size>>20, err)
					}
					t.Logf("%d MiB: rc go-back-N gave up: %v", size>>20, err)
					results = append(results, xskResult{loss, size, "rc go-back-N", 0, "FAILED; " + pred})
					break // the message holds its slot: the QP is spent
				}
				t.Logf("%d MiB: rc go-back-N in %v (%d RC timeouts), %s", size>>20, took.Round(time.Millisecond), timeouts, pred)
				results = append(results, xskResult{loss, size, "rc go-back-N", took, pred})
			}
		})

		// The fence that the loss happened: the programs dropped frames
		// at about the configured rate, and none without injection.
		if ran := len(results); ran == ranBefore {
			continue // -run left out every transfer at this rate
		}
		dropped1, redirected1, ringLost1 := link.counters(t)
		dropped, redirected := dropped1-dropped0, redirected1-redirected0
		t.Logf("loss %v%%: the XDP programs dropped %d of %d steered frames (%.3f%%); the sockets' rings lost %d more",
			loss*100, dropped, dropped+redirected, 100*float64(dropped)/float64(max(1, dropped+redirected)), ringLost1-ringLost0)
		if redirected == 0 {
			t.Fatalf("loss %v%%: no frame reached a socket", loss*100)
		}
		// Injection is Bernoulli per frame: the count stays within 6
		// standard deviations of n·p (a false alarm once in 10^8 runs).
		n := float64(dropped + redirected)
		if mean, sd := n*loss, math.Sqrt(n*loss*(1-loss)); loss == 0 && dropped != 0 ||
			loss > 0 && (dropped == 0 || math.Abs(float64(dropped)-mean) > 6*sd) {
			t.Errorf("loss %v%%: the XDP programs dropped %d of %.0f frames, expected %.0f ± %.0f",
				loss*100, dropped, n, mean, 6*sd)
		}
	}

	var table strings.Builder
	fmt.Fprintf(&table, "%-6s %-7s %-26s %-12s %s\n", "loss", "size", "scheme", "measured", "model")
	for _, r := range results {
		fmt.Fprintf(&table, "%-6s %-7s %-26s %-12v %s\n", fmt.Sprintf("%v%%", r.loss*100), fmt.Sprintf("%d MiB", r.size>>20),
			r.scheme, r.took.Round(time.Millisecond), r.model)
	}
	t.Logf("completion times over AF_XDP, side by side:\n%s", table.String())
}
