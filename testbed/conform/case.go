package conform

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"strings"

	"github.com/sdr-rdma/sdr/wire"
)

// QPKind is the transport of the fresh QP a case uses.
type QPKind uint8

// QP kinds.
const (
	RC QPKind = iota + 1
	UC
)

// String returns "RC" or "UC".
func (k QPKind) String() string {
	if k == RC {
		return "RC"
	}
	return "UC"
}

// Window says which part of the region a case observes: its own window,
// the region's first window (cases that reach before the region) or its
// last (cases that reach past the end).
type Window uint8

// Windows.
const (
	OwnWindow Window = iota
	StartWindow
	EndWindow
)

// Case is one conformance check: frames crafted by Build, which also
// states the expected outcome through the Env.
type Case struct {
	ID     string
	Desc   string
	QP     QPKind
	Window Window
	// Spec says where the expectation comes from (IBA section, rxe).
	Spec  string
	Build func(e *Env)
}

// Reply is one frame the target sent back, reduced to what the battery
// checks.
type Reply struct {
	QPN      uint32 // BTH destination QP (the battery's side)
	Opcode   wire.Opcode
	PSN      wire.PSN
	Syndrome wire.Syndrome
	MSN      uint32
	Data     []byte // READ response payload
	Orig     uint64 // ATOMIC ACK original value
	// Fault describes a reply that is not a well-formed RoCEv2 packet
	// with a good ICRC.
	Fault string

	anyTimer bool // expected RNR NAK: any timer value matches
}

func (r Reply) String() string {
	if r.Fault != "" {
		return "bad reply: " + r.Fault
	}
	switch r.Opcode {
	case wire.RCAck:
		if r.Syndrome.Kind() == wire.SyndromeACK {
			return fmt.Sprintf("ACK psn=%v msn=%d", r.PSN, r.MSN)
		}
		if r.anyTimer {
			return fmt.Sprintf("RNR_NAK(any timer) psn=%v msn=%d", r.PSN, r.MSN)
		}
		return fmt.Sprintf("%v psn=%v msn=%d", r.Syndrome, r.PSN, r.MSN)
	case wire.RCAtomicAck:
		return fmt.Sprintf("ATOMIC_ACK psn=%v msn=%d orig=%#x", r.PSN, r.MSN, r.Orig)
	case wire.RCReadResponseOnly, wire.RCReadResponseFirst, wire.RCReadResponseMid, wire.RCReadResponseLast:
		return fmt.Sprintf("%s psn=%v msn=%d %dB", r.Opcode.Info().Name, r.PSN, r.MSN, len(r.Data))
	}
	return fmt.Sprintf("%v psn=%v", r.Opcode, r.PSN)
}

// plainACK reports whether r is an ACK (not a NAK) without data.
func (r Reply) plainACK() bool {
	return r.Fault == "" && r.Opcode == wire.RCAck && r.Syndrome.Kind() == wire.SyndromeACK
}

// matches compares everything but QPN.
func (r Reply) matches(w Reply) bool {
	syndrome := r.Syndrome == w.Syndrome
	if w.anyTimer {
		syndrome = r.Syndrome.Kind() == wire.SyndromeRNRNAK
	}
	return r.Fault == "" && r.Opcode == w.Opcode && r.PSN == w.PSN && r.MSN == w.MSN &&
		syndrome && r.Orig == w.Orig && string(r.Data) == string(w.Data)
}

// RNRNak is an expected RNR NAK for psn with whatever RNR timer the
// target's QP asks for (a QP attribute, not the battery's business).
func RNRNak(psn wire.PSN, msn uint32) Reply {
	return Reply{Opcode: wire.RCAck, PSN: psn, MSN: msn, Syndrome: wire.RNRNAK(0), anyTimer: true}
}

// Ack is an expected ACK of psn with msn.
func Ack(psn wire.PSN, msn uint32) Reply {
	return Reply{Opcode: wire.RCAck, PSN: psn, MSN: msn, Syndrome: wire.ACK(wire.CreditsInvalid)}
}

// Nak is an expected NAK with code for psn.
func Nak(code wire.NAKCode, psn wire.PSN, msn uint32) Reply {
	return Reply{Opcode: wire.RCAck, PSN: psn, MSN: msn, Syndrome: wire.NAK(code)}
}

// Completion is a receive completion the target's QP must produce; only
// an Inspector (an in-process target) can check it.
type Completion struct {
	WriteImm bool // RDMA WRITE with immediate (else SEND)
	ByteLen  uint32
	Imm      uint32
	HasImm   bool // SEND with immediate (a WRITE with immediate always has one)
	// Status is "" for success, else the error the completion reports, in
	// emunic's words (emunic.Status.String).
	Status string
}

// write is a memory effect: data at a window offset.
type write struct {
	off  int
	data []byte
}

// Outcome is what the target must do in a case.
type Outcome struct {
	Replies []Reply
	writes  []write
	// Next and MSN are the RC QP's expected PSN and MSN after the case;
	// Broken says the case moved it to the error state.
	Next   wire.PSN
	MSN    uint32
	Broken bool
	// Drop names the emunic counter the case's refused frames must move
	// (for in-process inspection; other targets count differently).
	Drop string
	CQEs []Completion

	// The probe's part (see the package comment), added by the runner:
	// the reply it draws (nil: none) and whether its marker lands.
	probeReply  *Reply
	probeWrote  bool
	probeMarker write
}

type step struct {
	frames [][]byte
	want   []Reply // replies to await before the next step
}

type alternative struct {
	reason string
	out    Outcome
}

// Env is what a case's Build sees: the QP and window it was given, the
// window's bytes before the case, and the builders for frames and
// expectations.
type Env struct {
	// QPN is the case's fresh QP; PSN the first PSN it expects.
	QPN uint32
	PSN wire.PSN
	// VA is the window's first byte; Before its bytes before the case.
	VA     uint64
	Before []byte
	MTU    int
	T      *Target
	// Us is the battery's address; Spoof another on its subnet.
	Us, Spoof netip.Addr
	UsMAC     [6]byte

	kind  QPKind
	steps []step
	out   Outcome
	alt   *Outcome
	alts  []alternative
	rng   *rand.Rand
	ipID  uint16
	skip  string
	probe int // window offset of the probe marker
}

func newEnv(c *Case, t *Target, qpn uint32, va uint64, before []byte, cfg *Config) *Env {
	h := fnv.New64a()
	h.Write([]byte(c.ID))
	seed := h.Sum64()
	e := &Env{QPN: qpn, PSN: t.PSN, VA: va, Before: before, MTU: cfg.MTU, T: t, Us: cfg.SrcIP, Spoof: cfg.SpoofIP,
		UsMAC: cfg.SrcMAC, kind: c.QP, rng: rand.New(rand.NewPCG(seed, seed^0x5DEECE66D)), ipID: uint16(seed)}
	e.out.Next = t.PSN
	e.probe = WindowSize - 8
	if c.Window == EndWindow {
		e.probe = 0
	}
	e.steps = []step{{}}
	return e
}

// P returns the case's first PSN plus i.
func (e *Env) P(i int) wire.PSN { return e.PSN.Add(i) }

// Data returns n pattern bytes particular to the case and call.
func (e *Env) Data(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(e.rng.Uint32())
	}
	return b
}

// Base returns the fields of a request to the case's QP: addresses, the
// UDP source port rxe would use, P_Key 0xFFFF, opcode op and PSN psn,
// AckReq set for the last packet of an RC request (as rxe sets it).
func (e *Env) Base(op wire.Opcode, psn wire.PSN) wire.Fields {
	e.ipID++
	pos := op.Info().Position
	return wire.Fields{DstMAC: e.T.MAC, SrcMAC: e.UsMAC, SrcIP: e.Us, DstIP: e.T.IP, TTL: wire.DefaultTTL,
		IPID: e.ipID, DontFragment: true, SrcPort: wire.SourcePort(e.QPN, e.QPN),
		TransportFields: wire.TransportFields{BTH: wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: e.QPN, PSN: psn,
			AckReq: op.Transport() == wire.TransportRC && (pos == wire.PositionLast || pos == wire.PositionOnly)}}}
}

// Write returns a WRITE packet at window offset off (RETH fields for
// FIRST/ONLY: the main region's R_Key, DMA length dmaLen).
func (e *Env) Write(op wire.Opcode, psn wire.PSN, off int, dmaLen int, payload []byte) wire.Fields {
	f := e.Base(op, psn)
	f.RETH = wire.RETHFields{VA: e.VA + uint64(off), RKey: e.T.MR.RKey, DMALength: uint32(dmaLen)}
	f.Payload = payload
	return f
}

// Read returns a READ request for n bytes at window offset off.
func (e *Env) Read(psn wire.PSN, off, n int) wire.Fields {
	f := e.Base(wire.RCReadRequest, psn)
	f.RETH = wire.RETHFields{VA: e.VA + uint64(off), RKey: e.T.MR.RKey, DMALength: uint32(n)}
	return f
}

// Atomic returns a CMP_SWP or FETCH_ADD request at window offset off.
func (e *Env) Atomic(op wire.Opcode, psn wire.PSN, off int, swapAdd, compare uint64) wire.Fields {
	f := e.Base(op, psn)
	f.AtomicETH = wire.AtomicETHFields{VA: e.VA + uint64(off), RKey: e.T.MR.RKey, SwapAdd: swapAdd, Compare: compare}
	return f
}

// Send encodes f, applies muts, and queues the frame in the current step.
func (e *Env) Send(f wire.Fields, muts ...Mutation) {
	buf := make([]byte, f.Len()+64)
	n, err := wire.Encode(buf, &f)
	if err != nil {
		panic(fmt.Sprintf("conform: case frame cannot be encoded: %v", err)) // a battery bug, not a target's
	}
	frame := buf[:n]
	for _, m := range muts {
		frame = m(frame)
	}
	s := &e.steps[len(e.steps)-1]
	s.frames = append(s.frames, frame)
}

// Step starts a new step: the next frames go out only after the current
// step's expected replies arrived (or timed out).
func (e *Env) Step() { e.steps = append(e.steps, step{}) }

func (e *Env) outcome() *Outcome {
	if e.alt != nil {
		return e.alt
	}
	return &e.out
}

// Expect adds replies the current step must draw.
func (e *Env) Expect(r ...Reply) {
	o := e.outcome()
	o.Replies = append(o.Replies, r...)
	if e.alt == nil {
		s := &e.steps[len(e.steps)-1]
		s.want = append(s.want, r...)
	}
}

// ReadResponses returns the responses to a READ of n bytes at window
// offset off (of the window as it is before the case) starting at psn,
// with MSN msn.
func (e *Env) ReadResponses(psn wire.PSN, off, n int, msn uint32) []Reply {
	data := e.Before[off : off+n]
	count := max(1, (n+e.MTU-1)/e.MTU)
	out := make([]Reply, count)
	for i := range out {
		op := wire.RCReadResponseMid
		switch {
		case count == 1:
			op = wire.RCReadResponseOnly
		case i == 0:
			op = wire.RCReadResponseFirst
		case i == count-1:
			op = wire.RCReadResponseLast
		}
		chunk := data[i*e.MTU : min(n, (i+1)*e.MTU)]
		out[i] = Reply{Opcode: op, PSN: psn.Add(i), Data: chunk}
		if op != wire.RCReadResponseMid { // MIDDLE responses carry no AETH
			out[i].MSN, out[i].Syndrome = msn, wire.ACK(wire.CreditsInvalid)
		}
	}
	return out
}

// Wrote states that the case leaves data at window offset off.
func (e *Env) Wrote(off int, data []byte) {
	o := e.outcome()
	o.writes = append(o.writes, write{off, data})
}

// Leaves states the RC QP's expected PSN and MSN after the case.
func (e *Env) Leaves(next wire.PSN, msn uint32) {
	o := e.outcome()
	o.Next, o.MSN = next, msn
}

// Breaks states that the case moves the RC QP to the error state.
func (e *Env) Breaks() { e.outcome().Broken = true }

// Drops names the emunic drop counter the case's refused frames move.
func (e *Env) Drops(counter string) { e.outcome().Drop = counter }

// Completes states a receive completion the target must produce.
func (e *Env) Completes(c Completion) { e.outcome().CQEs = append(e.outcome().CQEs, c) }

// Alt describes an outcome the specification also allows (reported as
// DIFF, not FAIL); build states it with Expect, Wrote, Leaves, ... as for
// the main outcome, starting from "nothing happened". The probe is sent
// where the main outcome leaves the QP, so an RC alternative must leave
// it expecting the same PSN (or broken).
func (e *Env) Alt(reason string, build func()) {
	o := Outcome{Next: e.PSN}
	e.alt = &o
	build()
	e.alt = nil
	e.alts = append(e.alts, alternative{reason, o})
}

// Skip marks the case as not applicable to this target.
func (e *Env) Skip(reason string) { e.skip = reason }

// describe summarizes an outcome for the report: the case's replies and
// memory effects, then what the probe must find.
func (o *Outcome) describe(kind QPKind) string {
	var parts []string
	if len(o.Replies) == 0 {
		parts = append(parts, "no reply")
	}
	for _, r := range o.Replies {
		parts = append(parts, r.String())
	}
	parts = append(parts, "mem: "+describeWrites(o.writes))
	probe := "probe: no reply"
	if o.probeReply != nil {
		probe = "probe: " + o.probeReply.String()
	}
	if o.probeWrote {
		probe += ", marker written"
	} else {
		probe += ", marker not written"
	}
	if kind == RC && o.Broken {
		probe = "QP to error (" + probe + ")"
	}
	return strings.Join(append(parts, probe), "; ")
}

// replies returns the case's and the probe's expected replies.
func (o *Outcome) replies() []Reply {
	if o.probeReply == nil {
		return o.Replies
	}
	return append(append([]Reply{}, o.Replies...), *o.probeReply)
}

func describeWrites(ws []write) string {
	if len(ws) == 0 {
		return "unchanged"
	}
	var s []string
	for _, w := range ws {
		s = append(s, fmt.Sprintf("+%d..+%d", w.off, w.off+len(w.data)))
	}
	return "written " + strings.Join(s, ",")
}
