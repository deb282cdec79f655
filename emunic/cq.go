package emunic

import (
	"context"
	"fmt"
	"sync"
)

// Status is a work completion status (ibv_wc_status).
type Status uint8

// Completion statuses.
const (
	StatusSuccess Status = iota
	StatusLocalLengthError
	StatusLocalProtectionError
	StatusWRFlushError
	StatusRemoteInvalidRequest
	StatusRemoteAccessError
	StatusRemoteOperationalError
	StatusRetryExceeded
	StatusRNRRetryExceeded
)

var statusNames = [...]string{"success", "local length error", "local protection error",
	"WR flush error", "remote invalid request", "remote access error", "remote operational error",
	"transport retry counter exceeded", "RNR retry counter exceeded"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", s)
}

// WCOpcode is what a completion completed (ibv_wc_opcode).
type WCOpcode uint8

// Completion opcodes. Receive-side opcodes come after WCRecv.
const (
	WCSend WCOpcode = iota
	WCWrite
	WCRead
	WCCompareSwap
	WCFetchAdd
	WCRecv
	WCRecvWriteImm
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCWrite:
		return "RDMA_WRITE"
	case WCRead:
		return "RDMA_READ"
	case WCCompareSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCRecv:
		return "RECV"
	case WCRecvWriteImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("wc_opcode(%d)", o)
}

// CQE is one work completion.
type CQE struct {
	WRID    uint64
	Status  Status
	Opcode  WCOpcode
	ByteLen uint32 // bytes received (receive side) or transferred
	Imm     uint32
	HasImm  bool
	QPN     uint32 // the local QP the work request belonged to
	SrcQP   uint32 // UD: the sender's QP number
	// QPContext is the QP's QPConfig.Context (ibv_qp's qp_context): what
	// a consumer needs of the QP without a lookup by QPN.
	QPContext uint64
}

// CQ is a completion queue: a bounded ring that producers (the device's
// receive goroutines, PostSend, timers) append to and consumers poll in
// batches or wait on without spinning, or hand to a completion handler
// (SetHandler). Safe for concurrent use: mu guards the ring; dispatchMu
// serializes the handler's calls and guards handler and batch.
type CQ struct {
	mu        sync.Mutex
	ring      []CQE
	head      int // next to poll
	count     int
	overflow  bool
	scheduled bool          // a dispatch is due (a receive goroutine's at the end of its batch, or push's)
	hasHandle bool          // handler != nil, for append (under mu)
	notify    chan struct{} // holds a token while entries are waiting

	dispatchMu sync.Mutex
	handler    Handler
	batch      []CQE
}

// Handler is a CQ's completion handler, the shape of a FlexIO event
// handler: the device calls it with a batch of completions inline on its
// receive goroutine, at the end of the receive batch that produced them,
// so that per-packet work runs where the packet lands with no goroutine
// hop. Completions produced elsewhere (send completions, flushes of a QP
// entering ERR, also during Device.Close) reach it from a goroutine the
// CQ starts, and Dispatch's caller runs it too. Its calls are serialized
// and none runs once SetHandler(nil) returned. It must not block for long
// (it holds up the device's receive path) and may post receives and
// sends; the slice is valid only during the call.
type Handler interface {
	Handle(cqes []CQE)
}

// NewCQ returns a completion queue holding up to depth entries. When it is
// full, further completions are dropped and Overflowed reports it, as a
// verbs CQ overrun would (size CQs for the queues they serve).
func NewCQ(depth int) (*CQ, error) {
	if depth <= 0 {
		return nil, fmt.Errorf("emunic: CQ depth %d: %w", depth, ErrInvalidArgument)
	}
	return &CQ{ring: make([]CQE, depth), notify: make(chan struct{}, 1)}, nil
}

// push appends a completion produced outside the receive path (send
// completions, flushes, timeouts). On a CQ with a handler it starts a
// dispatch on a goroutine of its own unless one is already due (that one
// takes this completion too): the producer may hold a QP's lock, which
// the handler may want. A goroutine costs about a microsecond and a
// stack, per burst of such completions rather than per completion; the
// data path's completions (receives, RC ACKs) take the receive
// goroutine's dispatch instead.
func (cq *CQ) push(e CQE) {
	if cq.pushRx(e) {
		go cq.Dispatch()
	}
}

// pushRx appends a completion a device's receive goroutine produced
// (push for the others) and reports whether the CQ has a handler and no
// dispatch was due: the caller must then see to one (the receive
// goroutine dispatches at the end of its batch).
func (cq *CQ) pushRx(e CQE) (schedule bool) {
	cq.mu.Lock()
	if cq.count == len(cq.ring) {
		cq.overflow = true
		cq.mu.Unlock()
		return false
	}
	cq.ring[(cq.head+cq.count)%len(cq.ring)] = e
	cq.count++
	schedule = cq.hasHandle && !cq.scheduled
	cq.scheduled = cq.scheduled || schedule
	cq.mu.Unlock()
	select {
	case cq.notify <- struct{}{}:
	default:
	}
	return schedule
}

// Poll moves up to len(out) completions into out and returns how many. It
// never blocks and allocates nothing.
func (cq *CQ) Poll(out []CQE) int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.pollLocked(out)
}

func (cq *CQ) pollLocked(out []CQE) int {
	n := min(len(out), cq.count)
	for i := range n {
		out[i] = cq.ring[(cq.head+i)%len(cq.ring)]
	}
	cq.head = (cq.head + n) % len(cq.ring)
	cq.count -= n
	return n
}

// SetHandler makes h the CQ's completion handler (nil: none, the CQ is
// polled again) and hands it the completions already waiting. It returns
// once no call of the previous handler runs, so that after SetHandler(nil)
// the old handler's memory may be freed.
func (cq *CQ) SetHandler(h Handler) {
	cq.dispatchMu.Lock()
	cq.handler = h
	cq.mu.Lock()
	cq.hasHandle = h != nil
	cq.mu.Unlock()
	cq.dispatchMu.Unlock()
	if h != nil {
		cq.Dispatch()
	}
}

// Dispatch hands every completion the CQ holds to its handler, after any
// dispatch in progress has finished: once it returns, the handler has
// taken every completion pushed before the call. Without a handler it
// does nothing. A device's receive goroutine calls it at the end of
// each receive batch that completed work on the CQ; a consumer calls it
// as a fence. One lock pair per batch of up to 256 completions; it
// allocates nothing once the batch buffer exists.
func (cq *CQ) Dispatch() {
	cq.dispatchMu.Lock()
	defer cq.dispatchMu.Unlock()
	if cq.handler == nil {
		return
	}
	if cq.batch == nil {
		cq.batch = make([]CQE, min(256, len(cq.ring)))
	}
	for {
		cq.mu.Lock()
		cq.scheduled = false
		n := cq.pollLocked(cq.batch)
		cq.mu.Unlock()
		if n == 0 {
			return
		}
		cq.handler.Handle(cq.batch[:n])
	}
}

// Wait blocks until the CQ holds at least one completion or ctx ends.
func (cq *CQ) Wait(ctx context.Context) error {
	for {
		cq.mu.Lock()
		n := cq.count
		cq.mu.Unlock()
		if n > 0 {
			return nil
		}
		select {
		case <-cq.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Overflowed reports whether a completion was ever dropped for lack of room.
func (cq *CQ) Overflowed() bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.overflow
}
