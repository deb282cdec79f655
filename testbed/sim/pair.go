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
	q    schedule
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
	p.q.push(e)
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
	if e, ok := p.q.min(); ok {
		at, which = time.Unix(0, e.at), nextEvent
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
		e := p.q.pop()
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

// schedule is the queue of events: a heap, and beside it a FIFO for each
// direction of control datagrams, which takes the pushes that come in
// time order — a direction of the link keeps order, so nearly all do — at
// O(1) instead of the heap's O(log n) over hundreds of datagrams in
// flight. Events leave in (at, seq) order whichever holds them.
type schedule struct {
	heap  minheap.Heap[event]
	fifos [2]fifo // evToSender, evToReceiver
}

// fifo is a queue of events in (at, seq) order.
type fifo struct {
	items []event
	head  int
}

func (f *fifo) empty() bool  { return f.head == len(f.items) }
func (f *fifo) front() event { return f.items[f.head] }
func (f *fifo) takes(e event) bool {
	return f.empty() || !e.Less(f.items[len(f.items)-1])
}

func (f *fifo) pop() event {
	e := f.items[f.head]
	f.items[f.head] = event{}
	if f.head++; f.head > 64 && 2*f.head >= len(f.items) { // keep the slice from creeping on
		f.items, f.head = f.items[:copy(f.items, f.items[f.head:])], 0
	}
	return e
}

func (q *schedule) push(e event) {
	if e.kind != evArrival {
		if f := &q.fifos[e.kind-evToSender]; f.takes(e) {
			f.items = append(f.items, e)
			return
		}
	}
	q.heap.Push(e)
}

// first returns where the least event is: a FIFO's index, or -1 for the
// heap; ok is false when the schedule is empty.
func (q *schedule) first() (where int, ok bool) {
	where = -2
	var least event
	if q.heap.Len() > 0 {
		where, least = -1, q.heap.Min()
	}
	for i := range q.fifos {
		if f := &q.fifos[i]; !f.empty() && (where == -2 || f.front().Less(least)) {
			where, least = i, f.front()
		}
	}
	return where, where != -2
}

func (q *schedule) min() (event, bool) {
	where, ok := q.first()
	switch {
	case !ok:
		return event{}, false
	case where < 0:
		return q.heap.Min(), true
	}
	return q.fifos[where].front(), true
}

func (q *schedule) pop() event {
	if where, _ := q.first(); where >= 0 {
		return q.fifos[where].pop()
	}
	return q.heap.Pop()
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
