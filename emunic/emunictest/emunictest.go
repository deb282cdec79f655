// Package emunictest is the one host fixture of emunic's tests, benchmarks
// and interop harness, whatever port carries their frames (pipe, UDP,
// AF_XDP in a testbed namespace): a device with a PD and CQs, QPs brought
// to INIT, connected to RTS, completions awaited, memory registered and
// filled with a checkable pattern; and the UC WRITE-with-Imm benchmark
// every port runs.
//
// The helpers taking a testing.TB fail the test on error and must run on
// the test's goroutine; their error-returning counterparts (Attach,
// Host.NewQP, ConnectQP, NextCQE) serve code that runs elsewhere, such as
// the interop harness's peers.
package emunictest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/wire"
)

// QKey is the Q_Key of every QP the fixture creates (ibv_ud_pingpong's).
const QKey = 0x11111111

// CQDepth is the depth of a Host's CQs: enough for any test's burst.
const CQDepth = 1 << 16

// WaitTimeout bounds WaitCQE: far beyond any completion on a live link,
// short enough that a lost one fails the test instead of hanging it.
const WaitTimeout = 20 * time.Second

// Host is a device with a PD and a send and a receive CQ. Net and XSK are
// set for a host on an AF_XDP port in a testbed namespace (NewXSKHost).
type Host struct {
	Dev    *emunic.Device
	PD     *emunic.PD
	SendCQ *emunic.CQ
	RecvCQ *emunic.CQ
	Net    *hostnet.Host
	XSK    *xsk.Port
}

// Attach gives dev a new PD and a send and a receive CQ of depth cqDepth,
// or with oneCQ a single CQ for both, as the verbs example programs use.
// It allocates the CQs' rings; nothing needs closing but the device.
func Attach(dev *emunic.Device, cqDepth int, oneCQ bool) (*Host, error) {
	h := &Host{Dev: dev, PD: dev.AllocPD()}
	var err error
	if h.SendCQ, err = emunic.NewCQ(cqDepth); err != nil {
		return nil, fmt.Errorf("emunictest: send CQ: %w", err)
	}
	h.RecvCQ = h.SendCQ
	if !oneCQ {
		if h.RecvCQ, err = emunic.NewCQ(cqDepth); err != nil {
			return nil, fmt.Errorf("emunictest: receive CQ: %w", err)
		}
	}
	return h, nil
}

// NewHost opens a device on port with address gid and Ethernet address
// mac, writing every frame to tap if it is not nil, and attaches a PD and
// CQs. The device is closed when the test ends.
func NewHost(tb testing.TB, port emunic.Port, gid netip.Addr, mac [6]byte, tap *wire.PcapWriter) *Host {
	tb.Helper()
	dev, err := emunic.NewDevice(emunic.Config{Port: port, GID: gid, MAC: mac, Tap: tap})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dev.Close() })
	h, err := Attach(dev, CQDepth, false)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// NewXSKHost opens an AF_XDP port on th's interface inside th's namespace
// (cfg.Interface is set from th) and a host on it with th's address and
// MAC, its tap as NewHost's. The port and device are closed when the test
// ends. It needs root.
func NewXSKHost(tb testing.TB, th *hostnet.Host, cfg xsk.PortConfig, tap *wire.PcapWriter) *Host {
	tb.Helper()
	cfg.Interface = th.IfName
	var port *xsk.Port
	if err := th.NS.Do(func() (err error) {
		port, err = xsk.NewPort(cfg)
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	h := NewHost(tb, port, th.Addr, th.MAC, tap)
	h.Net, h.XSK = th, port
	return h
}

// NewXSKPair creates two host namespaces joined by a veth pair and an
// emulated NIC on an AF_XDP port in each (NewXSKHost); the namespaces are
// deleted when the test ends. It needs root.
func NewXSKPair(tb testing.TB, cfg xsk.PortConfig) (a, b *Host) {
	tb.Helper()
	pair, err := hostnet.NewPair(hostnet.PairConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pair.Close() })
	return NewXSKHost(tb, pair.A, cfg, nil), NewXSKHost(tb, pair.B, cfg, nil)
}

// NewQP creates a QP of typ on the host's CQs, room for maxRecvWR
// receives, and moves it to INIT with every remote access right and Q_Key
// QKey. The caller destroys it (or lets the device's Close do so).
func (h *Host) NewQP(typ emunic.QPType, maxRecvWR int) (*emunic.QP, error) {
	qp, err := h.PD.CreateQP(emunic.QPConfig{Type: typ, SendCQ: h.SendCQ, RecvCQ: h.RecvCQ, MaxRecvWR: maxRecvWR})
	if err != nil {
		return nil, fmt.Errorf("emunictest: create %v QP: %w", typ, err)
	}
	access := emunic.AccessRemoteWrite | emunic.AccessRemoteRead | emunic.AccessRemoteAtomic
	if err := qp.Modify(emunic.StateInit, emunic.QPAttr{Access: access, QKey: QKey}); err != nil {
		qp.Destroy()
		return nil, fmt.Errorf("emunictest: %v QP to INIT: %w", typ, err)
	}
	return qp, nil
}

// QP is NewQP with room for 16384 receives, failing tb on error.
func (h *Host) QP(tb testing.TB, typ emunic.QPType) *emunic.QP {
	tb.Helper()
	qp, err := h.NewQP(typ, 1<<14)
	if err != nil {
		tb.Fatal(err)
	}
	return qp
}

// MR registers buf with every access right, failing tb on error.
func (h *Host) MR(tb testing.TB, buf []byte) *emunic.MR {
	tb.Helper()
	mr, err := h.PD.RegisterMR(buf, emunic.AccessLocalWrite|emunic.AccessRemoteWrite|emunic.AccessRemoteRead|emunic.AccessRemoteAtomic)
	if err != nil {
		tb.Fatal(err)
	}
	return mr
}

// Peer is what a QP needs to know of the remote QP it connects to.
type Peer struct {
	QPN uint32
	GID netip.Addr
	MAC [6]byte
	// PSN is the peer's first send PSN: the one this QP expects.
	PSN wire.PSN
}

// ConnectQP moves qp from INIT to RTR facing peer at path MTU mtu, then
// to RTS with rts (its SQPSN, timeouts, retry counts and rate).
func ConnectQP(qp *emunic.QP, peer Peer, mtu int, rts emunic.QPAttr) error {
	err := qp.Modify(emunic.StateRTR, emunic.QPAttr{DestQPN: peer.QPN, DestGID: peer.GID, DestMAC: peer.MAC,
		RQPSN: peer.PSN, PathMTU: mtu})
	if err != nil {
		return fmt.Errorf("emunictest: QP %#x to RTR: %w", qp.QPN(), err)
	}
	if err := qp.Modify(emunic.StateRTS, rts); err != nil {
		return fmt.Errorf("emunictest: QP %#x to RTS: %w", qp.QPN(), err)
	}
	return nil
}

// First send PSNs of Connect: A's wraps the 24-bit space within 16
// packets, so every long test crosses the wrap.
const (
	PSNA wire.PSN = 0xFFFFF0
	PSNB wire.PSN = 0x123456
)

// Connect brings qa on a and qb on b (both in INIT) to RTS facing each
// other at path MTU mtu, A sending from PSNA and B from PSNB; rts gives
// both the rest of their RTS attributes.
func Connect(tb testing.TB, a *Host, qa *emunic.QP, b *Host, qb *emunic.QP, mtu int, rts emunic.QPAttr) {
	tb.Helper()
	for _, side := range []struct {
		qp, peerQP *emunic.QP
		peer       *Host
		sq, rq     wire.PSN
	}{{qa, qb, b, PSNA, PSNB}, {qb, qa, a, PSNB, PSNA}} {
		attr := rts
		attr.SQPSN = side.sq
		p := Peer{QPN: side.peerQP.QPN(), GID: side.peer.Dev.GID(), MAC: side.peer.Dev.MAC(), PSN: side.rq}
		if err := ConnectQP(side.qp, p, mtu, attr); err != nil {
			tb.Fatal(err)
		}
	}
}

// NextCQE returns cq's next completion, waiting for it until ctx ends
// (without spinning: the CQ's notification wakes it).
func NextCQE(ctx context.Context, cq *emunic.CQ) (emunic.CQE, error) {
	var out [1]emunic.CQE
	for cq.Poll(out[:]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			return out[0], fmt.Errorf("emunictest: waiting for a completion: %w", err)
		}
	}
	return out[0], nil
}

// WaitCQE is NextCQE bounded by WaitTimeout, failing tb if none comes.
func WaitCQE(tb testing.TB, cq *emunic.CQ) emunic.CQE {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	c, err := NextCQE(ctx, cq)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// Pattern returns n pseudo-random bytes determined by seed: a message no
// other seed's message equals, so misplaced data shows.
func Pattern(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// Verify fails tb, naming what and the first differing offset, unless got
// holds want.
func Verify(tb testing.TB, what string, got, want []byte) {
	tb.Helper()
	if len(got) != len(want) {
		tb.Fatalf("%s: %d bytes, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			tb.Fatalf("%s: byte %d of %d is %#x, want %#x", what, i, len(got), got[i], want[i])
		}
	}
}

// BenchUCWriteImm streams unsignaled UC WRITE-with-Imm messages of size
// bytes from a to r at MTU 1024 over streams QP pairs at once (one poster
// goroutine each, b.N messages between them) and reports delivered
// messages/s, packets/s, payload Gbit/s, the process's CPU time per
// packet, the fraction lost (UDP and AF_XDP may drop when the sender
// outruns the receiver) and the CNPs and rate cuts congestion control
// made. Each stream has CQs of its own, and on a multi-queue AF_XDP port
// stream i leaves (and so arrives) on queue i mod the queue count, as RSS
// would spread distinct flows: the streams share nothing but the devices.
// The receiver keeps each receive queue stocked as an SDR receiver does: a
// completion handler on its CQ reposts each batch's receives with one list
// post, on the device's receive path.
func BenchUCWriteImm(b *testing.B, a, r *Host, size, streams int) {
	queues := 1
	if a.XSK != nil {
		queues = a.XSK.Queues()
	}
	var posts []func(n int)
	var counters []*deliveryCounter
	for i := range streams {
		post, counter := benchStream(b, a, r, size, i%queues, queues)
		posts, counters = append(posts, post), append(counters, counter)
	}
	packets := (size + 1023) / 1024

	before := CPUTime()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Since(epoch)
	var posting sync.WaitGroup
	for i, post := range posts {
		posting.Go(func() { post(b.N/streams + btoi(i < b.N%streams)) })
	}
	posting.Wait()
	delivered := func() (n int64) {
		for _, c := range counters {
			n += c.delivered.Load()
		}
		return n
	}
	// Everything is delivered, or what is missing was lost: nothing more
	// arrived for a while (UC has no retransmission).
	const idle = 200 * time.Millisecond
	for seen := delivered(); seen < int64(b.N); {
		time.Sleep(idle)
		now := delivered()
		if now == seen {
			break
		}
		seen = now
	}
	n := delivered()
	var last int64
	for _, c := range counters {
		last = max(last, c.last.Load())
	}
	elapsed := time.Duration(last) - start
	b.StopTimer()
	cpu := CPUTime() - before
	if n == 0 {
		b.Fatalf("nothing delivered; sender counters %s; receiver counters %s", nonZero(a.Dev.Stats()), nonZero(r.Dev.Stats()))
	}
	for _, c := range counters {
		if f := c.repostFailures.Load(); f > 0 {
			b.Fatalf("%d receives could not be reposted: losses would be the benchmark's", f)
		}
	}
	pkts := float64(n) * float64(packets)
	b.ReportMetric(float64(n)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(pkts/elapsed.Seconds(), "pkts/s")
	b.ReportMetric(float64(n)*float64(size*8)/elapsed.Seconds()/1e9, "Gbit/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/pkts, "cpu-ns/pkt")
	b.ReportMetric(100*(1-float64(n)/float64(b.N)), "%lost")
	// Congestion control at work: CNPs the receiver sent, rate cuts they
	// caused at the sender (both 0 while the receiver keeps up).
	b.ReportMetric(float64(r.Dev.Stats().Get(emunic.TxCNPs)), "cnps")
	b.ReportMetric(float64(a.Dev.Stats().Get(emunic.TxRateCuts)), "cuts")
	// Where AF_XDP loses: frames the receiving sockets' kernel side
	// dropped (a full RX ring, mostly).
	if r.XSK != nil {
		st, err := r.XSK.Stats()
		if err != nil {
			b.Fatalf("receiving socket's statistics: %v", err)
		}
		b.ReportMetric(float64(st.Rx_ring_full+st.Rx_dropped), "rx-drops")
	}
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}

// benchStream connects a UC QP pair for BenchUCWriteImm whose frames leave
// on queue of queues (their UDP source port picks it), each QP on CQs of
// its own, and returns a poster of n messages and the receiver's counter.
func benchStream(b *testing.B, a, r *Host, size, queue, queues int) (post func(n int), counter *deliveryCounter) {
	ha, hr := *a, *r // the hosts with this stream's CQs
	for _, h := range []*Host{&ha, &hr} {
		var err error
		if h.SendCQ, err = emunic.NewCQ(CQDepth); err == nil {
			h.RecvCQ, err = emunic.NewCQ(CQDepth)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	qa, qr := ha.QP(b, emunic.UC), hr.QP(b, emunic.UC)
	// QPNs are random: draw receivers until the flow hashes to the queue.
	for int(wire.SourcePort(qa.QPN(), qr.QPN()))%queues != queue {
		qr.Destroy()
		qr = hr.QP(b, emunic.UC)
	}
	Connect(b, &ha, qa, &hr, qr, 1024, emunic.QPAttr{})
	src := ha.MR(b, make([]byte, size))
	dst := hr.MR(b, make([]byte, size))
	const rqDepth = 8192
	for range rqDepth {
		if err := qr.PostRecv(emunic.RecvWR{}); err != nil {
			b.Fatal(err)
		}
	}
	counter = &deliveryCounter{qp: qr, reposts: make([]emunic.RecvWR, 256)}
	hr.RecvCQ.SetHandler(counter)
	b.Cleanup(func() { hr.RecvCQ.SetHandler(nil) })
	wr := emunic.SendWR{Op: emunic.OpWriteImm, Unsignaled: true, RemoteAddr: dst.Addr(), RKey: dst.RKey(),
		SGL: []emunic.SGE{{Addr: src.Addr(), Length: uint32(size), LKey: src.LKey()}}}
	post = func(n int) {
		for i := range n {
			wr.Imm = uint32(i)
			for {
				err := qa.PostSend(wr)
				if err == nil {
					break
				}
				if !errors.Is(err, emunic.ErrQueueFull) {
					b.Error(err)
					return
				}
				// Congestion control cut the QP's rate and its send queue
				// is full: as a verbs application on ENOMEM, retry once the
				// TX scheduler has drained some.
				time.Sleep(20 * time.Microsecond)
			}
		}
	}
	return post, counter
}

// deliveryCounter is BenchUCWriteImm's receive CQ handler: it counts
// completions, notes when the latest arrived and reposts their receives
// (reposts bounds one PostRecvList; a longer batch takes several). It
// runs on the device's receive goroutine; the counts are atomics for the
// benchmark's goroutine to read.
type deliveryCounter struct {
	qp             *emunic.QP
	reposts        []emunic.RecvWR
	delivered      atomic.Int64
	repostFailures atomic.Int64
	last           atomic.Int64 // the latest completion: time.Since(epoch)
}

// epoch is the origin of deliveryCounter's monotonic timestamps.
var epoch = time.Now()

func (c *deliveryCounter) Handle(cqes []emunic.CQE) {
	ok := 0
	for _, cqe := range cqes {
		if cqe.Status == emunic.StatusSuccess {
			ok++
		}
	}
	for rest := len(cqes); rest > 0; {
		k := min(rest, len(c.reposts))
		posted, _ := c.qp.PostRecvList(c.reposts[:k])
		c.repostFailures.Add(int64(k - posted))
		rest -= k
	}
	c.delivered.Add(int64(ok))
	c.last.Store(int64(time.Since(epoch)))
}

// CPUTime returns the process's user and system CPU time.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// nonZero lists a device's non-zero counters, for failure messages.
func nonZero(s emunic.Stats) string {
	var b strings.Builder
	s.Each(func(name string, v uint64) {
		if v != 0 {
			fmt.Fprintf(&b, "%s=%d ", name, v)
		}
	})
	return strings.TrimSpace(b.String())
}
