package reliability_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/testbed/sim"
)

// The harness runs a SenderEngine and a ReceiverEngine against each other on
// the simulator's virtual clock (testbed/sim's Pair, the one that also runs
// sdr sim), over a link whose fate function decides for every chunk,
// immediate carrier and control datagram whether it arrives (and how often,
// and how late). Chunks are one packet (MTU) here, so data chunk i carries
// immediate nibble i, as SDR's packets do. Real bytes travel: the receiver's
// buffers are filled by arrivals and EC decodes into them for real.

const (
	testMTU   = 256
	testDelay = 5 * time.Millisecond // one way
)

type wireKind uint8

const (
	dataChunk wireKind = iota
	parityChunk
	carrier
	toSender
	toReceiver
)

func (k wireKind) String() string {
	return [...]string{"data", "parity", "carrier", "to-sender", "to-receiver"}[k]
}

// packet is one thing the link carries.
type packet struct {
	kind     wireKind
	transfer uint64
	index    int    // chunk or nibble index; for control, the datagram's ordinal in its direction
	attempt  int    // 0 for the first transmission of this chunk
	datagram []byte // control only
}

// fate returns how many copies of p arrive and the extra delay of each.
type fate func(p packet) (copies int, extra time.Duration)

func lossless(packet) (int, time.Duration) { return 1, 0 }

type txState struct {
	plan         reliability.Plan
	data, parity []byte
}

type rxState struct {
	plan          reliability.Plan
	data, parity  []byte
	dataBits      []uint64
	parityBits    []uint64
	nibbles       uint8
	coder         *ec.Coder
	closed        bool
	decodeFailure error
}

type result struct {
	stats reliability.Stats
	err   error
}

// harness is the engine tests' Network on a testbed/sim Pair: it applies
// the test's fate to every packet and datagram and moves real bytes.
type harness struct {
	tb       testing.TB
	start    time.Time
	pair     *sim.Pair
	s        *reliability.SenderEngine
	r        *reliability.ReceiverEngine
	fate     fate
	bw       float64
	wireFree time.Time
	attempts map[[3]uint64]int
	ctl      [2]int // control datagrams sent per direction

	payload map[uint64][]byte
	tx      map[uint64]*txState
	rx      map[uint64]*rxState
	sent    map[uint64]result
	recvd   map[uint64]result
	// chunkEvents reports arrivals with HandleChunks (as the simulator
	// does) instead of whole bitmaps with HandleProgress.
	chunkEvents bool
}

func newHarness(tb testing.TB, cfg reliability.ReceiverConfig, f fate) *harness {
	tb.Helper()
	if cfg.RTT == 0 {
		cfg.RTT = 2 * testDelay
	}
	if cfg.MTU == 0 {
		cfg.MTU = testMTU
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = cfg.MTU
	}
	if cfg.Bandwidth == 0 {
		cfg.Bandwidth = 1e9
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	cfg.FixedRate = true // the link's rate and round trip are known; bounds below rely on them
	s, err := reliability.NewSenderEngine(reliability.SenderConfig{Config: cfg.Config, FixedRTT: true})
	if err != nil {
		tb.Fatal(err)
	}
	r, err := reliability.NewReceiverEngine(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	h := &harness{tb: tb, start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), s: s, r: r, fate: f, bw: cfg.Bandwidth,
		attempts: map[[3]uint64]int{}, payload: map[uint64][]byte{}, tx: map[uint64]*txState{},
		rx: map[uint64]*rxState{}, sent: map[uint64]result{}, recvd: map[uint64]result{}}
	h.pair = sim.NewPair(s, r, h.start, h)
	return h
}

// now returns the virtual time.
func (h *harness) now() time.Time { return h.pair.Now() }

// transfer posts a receive of length bytes and submits sendLength bytes.
func (h *harness) transfer(length, sendLength int, seed uint64) {
	h.post(length)
	h.submit(sendLength, seed)
}

// post posts a receive of length bytes.
func (h *harness) post(length int) {
	plan := h.r.Plan(length)
	id, err := h.r.Post(h.now(), plan)
	if err != nil {
		h.tb.Fatal(err)
	}
	rx := &rxState{plan: plan, data: make([]byte, length), dataBits: make([]uint64, (plan.DataChunks()+63)/64)}
	if plan.ParityChunks() > 0 {
		rx.parity = make([]byte, plan.ParityLen())
		rx.parityBits = make([]uint64, (plan.ParityChunks()+63)/64)
		l, _ := plan.Layout()
		if rx.coder, err = ec.NewCoder(l); err != nil {
			h.tb.Fatal(err)
		}
	}
	h.rx[id] = rx
	h.pair.Dispatch()
}

// submit submits sendLength bytes drawn from seed and returns the
// transfer's number.
func (h *harness) submit(sendLength int, seed uint64) uint64 {
	p := make([]byte, sendLength)
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	sid := h.s.Submit(h.now(), sendLength)
	h.payload[sid] = p
	h.pair.Dispatch()
	return sid
}

func (h *harness) key(p packet) [3]uint64 {
	return [3]uint64{uint64(p.kind), p.transfer, uint64(p.index)}
}

// carry puts p on the link: it leaves after serialization (chunks only)
// and arrives after the one-way delay, as often as its fate says.
func (h *harness) carry(p packet) {
	depart := h.now()
	if p.kind == dataChunk || p.kind == parityChunk {
		depart = maxTime(depart, h.wireFree).Add(time.Duration(float64(testMTU*8) / h.bw * 1e9))
		h.wireFree = depart
	}
	copies, extra := h.fate(p)
	for range copies {
		at := depart.Add(testDelay + extra)
		switch p.kind {
		case toReceiver:
			h.pair.ToReceiver(at, p.datagram)
		case toSender:
			h.pair.ToSender(at, p.datagram)
		default:
			h.pair.At(at, sim.ArrivalFunc(func(*sim.Pair) { h.arrive(p) }))
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// SenderAction carries out the sender's actions (sim.Network).
func (h *harness) SenderAction(_ *sim.Pair, a *reliability.Action) {
	switch a.Kind {
	case reliability.ActStart:
		tx := &txState{plan: a.Plan, data: h.payload[a.Transfer]}
		if a.Plan.ParityChunks() > 0 && len(tx.data) == a.Plan.Length {
			l, _ := a.Plan.Layout()
			c, err := ec.NewCoder(l)
			if err != nil {
				h.tb.Fatal(err)
			}
			tx.parity = make([]byte, a.Plan.ParityLen())
			if err := c.Encode(tx.data, tx.parity); err != nil {
				h.tb.Fatal(err)
			}
		}
		h.tx[a.Transfer] = tx
	case reliability.ActSend:
		h.sendChunks(a.Transfer, a.Part, a.First, a.Count)
	case reliability.ActSendCoded:
		l, err := h.tx[a.Transfer].plan.Layout()
		if err != nil {
			h.tb.Fatal(err)
		}
		for t := a.First; t < a.First+a.Count; {
			part, first, n := reliability.FirstPassPiece(l, t)
			n = min(n, a.First+a.Count-t)
			h.sendChunks(a.Transfer, part, first, n)
			t += n
		}
	case reliability.ActSendImm:
		n := h.tx[a.Transfer].plan.DataChunks()
		for k := n; k < 8; k++ {
			h.send(packet{kind: carrier, transfer: a.Transfer, index: k})
		}
	case reliability.ActControl:
		h.carry(packet{kind: toReceiver, transfer: a.Transfer, index: h.ctl[0], datagram: a.Datagram})
		h.ctl[0]++
	case reliability.ActComplete, reliability.ActFail:
		if _, dup := h.sent[a.Transfer]; dup {
			h.tb.Fatalf("sender finished transfer %d twice", a.Transfer)
		}
		h.sent[a.Transfer] = result{*a.Stats, a.Err}
	default:
		h.tb.Fatalf("sender asked for %v", a.Kind)
	}
}

// sendChunks sends chunks [first, first+n) of part.
func (h *harness) sendChunks(transfer uint64, part reliability.Part, first, n int) {
	kind := dataChunk
	if part == reliability.Parity {
		kind = parityChunk
	}
	for i := first; i < first+n; i++ {
		h.send(packet{kind: kind, transfer: transfer, index: i})
	}
}

// send carries a chunk or carrier, counting its attempts.
func (h *harness) send(p packet) {
	p.attempt = h.attempts[h.key(p)]
	h.attempts[h.key(p)]++
	h.carry(p)
}

// arrive delivers a chunk or carrier into the receiver's buffers, as the
// SDR engine would, and reports the bitmaps.
func (h *harness) arrive(p packet) {
	rx := h.rx[p.transfer]
	if rx == nil || rx.closed {
		return // a late packet: the slot is gone
	}
	tx := h.tx[p.transfer]
	cs := rx.plan.ChunkSize
	switch p.kind {
	case dataChunk:
		end := min((p.index+1)*cs, len(rx.data))
		copy(rx.data[p.index*cs:end], tx.data[p.index*cs:end])
		rx.dataBits[p.index/64] |= 1 << (p.index % 64)
		if p.index < 8 {
			rx.nibbles |= 1 << p.index
		}
	case parityChunk:
		copy(rx.parity[p.index*cs:(p.index+1)*cs], tx.parity[p.index*cs:(p.index+1)*cs])
		rx.parityBits[p.index/64] |= 1 << (p.index % 64)
	case carrier:
		rx.nibbles |= 1 << p.index
	}
	if h.chunkEvents {
		part, index := reliability.Data, p.index
		switch p.kind {
		case parityChunk:
			part = reliability.Parity
		case carrier:
			index = -1 // nothing but the immediate
		}
		h.r.HandleChunks(h.now(), p.transfer, part, index, 1, rx.nibbles == 0xFF)
	} else {
		h.r.HandleProgress(h.now(), p.transfer, rx.dataBits, rx.parityBits, rx.nibbles == 0xFF)
	}
}

// ReceiverAction carries out the receiver's actions (sim.Network).
func (h *harness) ReceiverAction(_ *sim.Pair, a *reliability.Action) {
	rx := h.rx[a.Transfer]
	switch a.Kind {
	case reliability.ActControl:
		h.carry(packet{kind: toSender, transfer: a.Transfer, index: h.ctl[1], datagram: a.Datagram})
		h.ctl[1]++
	case reliability.ActDecode:
		if err := rx.coder.Reconstruct(a.Sub, rx.data, rx.parity, rx.dataBits, rx.parityBits); err != nil {
			rx.decodeFailure = err
		}
	case reliability.ActComplete, reliability.ActFail:
		if _, dup := h.recvd[a.Transfer]; dup {
			h.tb.Fatalf("receiver finished transfer %d twice", a.Transfer)
		}
		rx.closed = true
		h.recvd[a.Transfer] = result{*a.Stats, a.Err}
	default:
		h.tb.Fatalf("receiver asked for %v", a.Kind)
	}
}

// run advances virtual time until nothing is pending or limit passes; it
// fails the test if the engines still hold timers then (a hang).
func (h *harness) run(limit time.Duration) {
	end := h.start.Add(limit)
	for steps := 0; ; steps++ {
		if steps > 1_000_000 {
			h.tb.Fatal("more than a million events: livelock")
		}
		next, ok := h.pair.Next()
		if !ok {
			return
		}
		if next.After(end) {
			h.tb.Fatalf("still busy at %v (limit %v): a hang", next.Sub(h.start), limit)
		}
		h.pair.Step()
	}
}

// check asserts that transfer id completed on both sides with exact data,
// or failed on both sides.
func (h *harness) check(id uint64) (sent, recvd result) {
	h.tb.Helper()
	sent, okS := h.sent[id]
	recvd, okR := h.recvd[id]
	if !okS || !okR {
		h.tb.Fatalf("transfer %d unfinished: sender %v receiver %v", id, okS, okR)
	}
	if (sent.err == nil) != (recvd.err == nil) {
		h.tb.Fatalf("transfer %d: sender %v, receiver %v", id, sent.err, recvd.err)
	}
	if recvd.err == nil {
		rx := h.rx[id]
		if rx.decodeFailure != nil {
			h.tb.Fatalf("transfer %d: decode: %v", id, rx.decodeFailure)
		}
		if !bytes.Equal(rx.data, h.payload[id]) {
			h.tb.Fatalf("transfer %d: received bytes differ", id)
		}
	}
	return sent, recvd
}

func (r result) String() string {
	return fmt.Sprintf("{%v in %v, err %v}", r.stats.Plan, r.stats.Duration(), r.err)
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 99)) }
