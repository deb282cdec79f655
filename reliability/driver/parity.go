package driver

import (
	"fmt"
	"sync/atomic"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/sdr"
)

// parityArea is a coded transfer's parity buffer, registered, with a coder
// for its layout. buf is the transfer's ParityLen bytes of the area; the
// registration covers the whole allocation.
type parityArea struct {
	buf   []byte
	mr    *sdr.MR
	coder *ec.Coder
}

// maxSpareParity is how many parity areas a connection keeps between
// transfers: at most this many times the largest parity area stays
// allocated and registered while the connection is open.
const maxSpareParity = 4

// parityPool keeps the parity areas of finished transfers for the next
// ones: allocating, faulting in and registering a quarter of a message for
// each transfer cost about as much as encoding it. A pool belongs to one
// loop goroutine (no locking).
type parityPool struct {
	sc    *sdr.Context
	spare []parityArea
}

// get returns an area of l.ParityLen() bytes with a coder for l: the
// smallest spare one large enough, or a new one.
func (p *parityPool) get(l ec.Layout) (parityArea, error) {
	n := l.ParityLen()
	best := -1
	for i, a := range p.spare {
		if cap(a.buf) >= n && (best < 0 || cap(a.buf) < cap(p.spare[best].buf)) {
			best = i
		}
	}
	var a parityArea
	if best >= 0 {
		a = p.spare[best]
		p.spare = append(p.spare[:best], p.spare[best+1:]...)
		if err := a.coder.Reset(l); err != nil {
			p.put(a)
			return parityArea{}, err
		}
		a.buf = a.buf[:n]
		return a, nil
	}
	var err error
	if a.coder, err = ec.NewCoder(l); err != nil {
		return parityArea{}, err
	}
	a.buf = make([]byte, n)
	if a.mr, err = p.sc.RegisterMemory(a.buf); err != nil {
		return parityArea{}, fmt.Errorf("reliability: parity buffer: %w", err)
	}
	return a, nil
}

// put keeps a for a later get, deregistering the smallest area when the
// pool is full.
func (p *parityPool) put(a parityArea) {
	if a.mr == nil {
		return
	}
	p.spare = append(p.spare, a)
	if len(p.spare) <= maxSpareParity {
		return
	}
	smallest := 0
	for i, s := range p.spare {
		if cap(s.buf) < cap(p.spare[smallest].buf) {
			smallest = i
		}
	}
	p.spare[smallest].mr.Deregister()
	p.spare = append(p.spare[:smallest], p.spare[smallest+1:]...)
}

// close deregisters every spare area.
func (p *parityPool) close() {
	for _, a := range p.spare {
		a.mr.Deregister()
	}
	p.spare = nil
}

// parityEncoder computes a transfer's parity submessage by submessage on a
// goroutine of its own, in the order the sender sends them: the first
// packets leave at once and the encoding overlaps the sending of the
// data, instead of the whole message's encoding delaying its first
// packet. The sender's loop waits only for parity due before it is ready.
// The goroutine owns the coder and writes the parity buffer until it has
// stopped; both ends only read the data.
type parityEncoder struct {
	encoded  atomic.Int64  // submessages whose parity is complete (a prefix)
	progress chan struct{} // signaled after each submessage (capacity 1)
	halt     atomic.Bool   // asks the goroutine to stop early
	done     chan struct{} // closed when the goroutine has returned
}

// startEncoder starts encoding data's parity into parity with coder.
func startEncoder(coder *ec.Coder, data, parity []byte) *parityEncoder {
	e := &parityEncoder{progress: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(e.done)
		for sub := range coder.Layout().Submessages() {
			if e.halt.Load() {
				return
			}
			// Cannot fail: data and parity are the layout's lengths.
			_ = coder.EncodeSubmessage(sub, data, parity)
			e.encoded.Store(int64(sub + 1))
			select {
			case e.progress <- struct{}{}:
			default:
			}
		}
	}()
	return e
}

// ready reports whether submessage sub's parity is complete: nil when it
// is, errParityPending while it is not yet (progress signals the next
// submessage), an error when the encoder stopped before it.
func (e *parityEncoder) ready(sub int) error {
	if e.encoded.Load() > int64(sub) {
		return nil
	}
	select {
	case <-e.done:
		if e.encoded.Load() <= int64(sub) {
			return fmt.Errorf("reliability: parity of submessage %d: encoder stopped: %w", sub, reliability.ErrClosed)
		}
		return nil
	default:
		return errParityPending
	}
}

// stop halts the encoding and waits for the goroutine, after which the
// parity buffer and coder are the caller's again.
func (e *parityEncoder) stop() {
	e.halt.Store(true)
	<-e.done
}
