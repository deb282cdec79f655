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
}

// CQ is a completion queue: a bounded ring that producers (the device's
// receive goroutine, PostSend, timers) append to and consumers poll in
// batches or wait on without spinning. Safe for concurrent use.
type CQ struct {
	mu       sync.Mutex
	ring     []CQE
	head     int // next to poll
	count    int
	overflow bool
	notify   chan struct{} // holds a token while entries are waiting
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

func (cq *CQ) push(e CQE) {
	cq.mu.Lock()
	if cq.count == len(cq.ring) {
		cq.overflow = true
		cq.mu.Unlock()
		return
	}
	cq.ring[(cq.head+cq.count)%len(cq.ring)] = e
	cq.count++
	cq.mu.Unlock()
	select {
	case cq.notify <- struct{}{}:
	default:
	}
}

// Poll moves up to len(out) completions into out and returns how many. It
// never blocks and allocates nothing.
func (cq *CQ) Poll(out []CQE) int {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	n := min(len(out), cq.count)
	for i := range n {
		out[i] = cq.ring[(cq.head+i)%len(cq.ring)]
	}
	cq.head = (cq.head + n) % len(cq.ring)
	cq.count -= n
	return n
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
