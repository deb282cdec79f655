package sim

import (
	"time"

	"github.com/sdr-rdma/sdr/internal/minheap"
	"github.com/sdr-rdma/sdr/reliability"
)

// Pair runs a SenderEngine and a ReceiverEngine against each other on a
// virtual clock. It owns time, the queue of scheduled arrivals and the
// engines' timers; what the engines ask for (chunks to send, datagrams,
// decodes, completions) it hands to a Network, which decides what reaches
// the other side and when, and schedules that with At, ToSender and
// ToReceiver. Run's network is the link model; reliability's engine tests
// script the fate of every packet on the same Pair.
//
// A Pair is not safe for concurrent use: one goroutine owns it, the
// engines and the Network.
type Pair struct {
	Sender   *reliability.SenderEngine
	Receiver *reliability.ReceiverEngine
	// TimersFirst fires an engine timer due at the same instant as a
	// scheduled arrival before the arrival [arrivals first]. Both orders
	// happen on a real host; tests run each.
	TimersFirst bool
	// Ties counts timers that fell due at the instant of an arrival.
	Ties int
	// Steps counts the arrivals delivered and timers fired.
	Steps int

	net  Network
	now  time.Time
	q    minheap.Heap[event]
	seq  uint64
	acts []reliability.Action
}

// Network carries out the engines' actions. SenderAction and
// ReceiverAction are called for every action, in the order the engine
// issued them, right after the call that produced them; a will not be
// used after the call returns.
type Network interface {
	SenderAction(p *Pair, a *reliability.Action)
	ReceiverAction(p *Pair, a *reliability.Action)
}

// Arrival is something a Network scheduled with At: at its time the Pair
// calls Arrive, which hands it to an engine.
type Arrival interface {
	Arrive(p *Pair)
}

// ArrivalFunc is an Arrival that runs a function.
type ArrivalFunc func(p *Pair)

// Arrive calls f.
func (f ArrivalFunc) Arrive(p *Pair) { f(p) }

// NewPair returns a pair whose clock reads start.
func NewPair(snd *reliability.SenderEngine, rcv *reliability.ReceiverEngine, start time.Time, net Network) *Pair {
	return &Pair{Sender: snd, Receiver: rcv, net: net, now: start}
}

// Now returns the virtual time.
func (p *Pair) Now() time.Time { return p.now }

// Kinds of scheduled events.
const (
	evArrival    uint8 = iota // an Arrival
	evToSender                // a control datagram reaches the sender
	evToReceiver              // a control datagram reaches the receiver
)

// event is one entry of the queue: at (ns since the Unix epoch), then
// seq, orders events, so that runs are deterministic.
type event struct {
	at      int64
	seq     uint64
	kind    uint8
	arrival Arrival // evArrival
	dgram   []byte  // evToSender, evToReceiver
}

// Less orders events by (at, seq) (minheap.Ordered).
func (e event) Less(o event) bool { return e.at < o.at || e.at == o.at && e.seq < o.seq }

// At schedules a to arrive at t (now, if t is earlier).
func (p *Pair) At(t time.Time, a Arrival) { p.push(t, event{kind: evArrival, arrival: a}) }

// ToSender schedules a control datagram to reach the sender at t.
func (p *Pair) ToSender(t time.Time, dgram []byte) {
	p.push(t, event{kind: evToSender, dgram: dgram})
}

// ToReceiver schedules a control datagram to reach the receiver at t.
func (p *Pair) ToReceiver(t time.Time, dgram []byte) {
	p.push(t, event{kind: evToReceiver, dgram: dgram})
}

func (p *Pair) push(t time.Time, e event) {
	if t.Before(p.now) {
		t = p.now
	}
	e.at = t.UnixNano()
	e.seq = p.seq
	p.seq++
	p.q.Push(e)
}

// Dispatch hands the engines' pending actions to the network: call it
// after calling an engine directly (Post, Submit, Cancel); Step does it
// after every event.
func (p *Pair) Dispatch() {
	p.acts = p.Sender.Actions(p.acts[:0])
	for i := range p.acts {
		p.net.SenderAction(p, &p.acts[i])
	}
	p.acts = p.Receiver.Actions(p.acts[:0])
	for i := range p.acts {
		p.net.ReceiverAction(p, &p.acts[i])
	}
}

// Which step comes next.
const (
	nextNone = iota
	nextEvent
	nextSenderTimer
	nextReceiverTimer
)

// next returns the next step and its time: the earliest of the queue's
// head and the engines' deadlines, the sender's timer before the
// receiver's at a tie, and arrivals before timers unless TimersFirst.
func (p *Pair) next() (time.Time, int) {
	var at time.Time
	which := nextNone
	if p.q.Len() > 0 {
		at, which = time.Unix(0, p.q.Min().at), nextEvent
	}
	earlier := func(d time.Time) bool {
		if which == nextEvent && d.Equal(at) {
			p.Ties++
		}
		return which == nextNone || d.Before(at) || p.TimersFirst && which == nextEvent && d.Equal(at)
	}
	if d, ok := p.Sender.Deadline(); ok && earlier(d) {
		at, which = d, nextSenderTimer
	}
	if d, ok := p.Receiver.Deadline(); ok && earlier(d) {
		at, which = d, nextReceiverTimer
	}
	return at, which
}

// Next returns when the next step happens, and false when nothing is
// scheduled and no timer is armed.
func (p *Pair) Next() (time.Time, bool) {
	ties := p.Ties
	at, which := p.next()
	p.Ties = ties // counted when the step is taken
	return maxTime(p.now, at), which != nextNone
}

// Step advances the clock to the next step, takes it (an arrival is
// delivered, or an engine's timer fires) and dispatches the actions it
// caused. It returns false, doing nothing, when nothing is scheduled and
// no timer is armed.
func (p *Pair) Step() bool {
	at, which := p.next()
	if which == nextNone {
		return false
	}
	p.now = maxTime(p.now, at)
	p.Steps++
	switch which {
	case nextEvent:
		e := p.q.Pop()
		switch e.kind {
		case evArrival:
			e.arrival.Arrive(p)
		case evToSender:
			p.Sender.HandleControl(p.now, e.dgram)
		case evToReceiver:
			p.Receiver.HandleControl(p.now, e.dgram)
		}
	case nextSenderTimer:
		p.Sender.HandleTimer(p.now)
	case nextReceiverTimer:
		p.Receiver.HandleTimer(p.now)
	}
	p.Dispatch()
	return true
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
