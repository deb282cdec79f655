package emunic

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/sdr-rdma/sdr/wire"
)

// QPType is the transport service of a queue pair.
type QPType uint8

// Transport services.
const (
	RC QPType = iota + 1 // reliable connected: ACKs, go-back-N, READ, atomics
	UC                   // unreliable connected: the SDR data path
	UD                   // unreliable datagram: control messages
)

func (t QPType) String() string {
	return map[QPType]string{RC: "RC", UC: "UC", UD: "UD"}[t]
}

func (t QPType) transport() wire.Transport {
	switch t {
	case RC:
		return wire.TransportRC
	case UC:
		return wire.TransportUC
	}
	return wire.TransportUD
}

// QPState is a queue pair state (IBA 10.3.1).
type QPState uint8

// QP states.
const (
	StateReset QPState = iota
	StateInit
	StateRTR // ready to receive
	StateRTS // ready to send
	StateError
)

func (s QPState) String() string {
	return [...]string{"RESET", "INIT", "RTR", "RTS", "ERR"}[s]
}

// QPConfig creates a queue pair.
type QPConfig struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	// SRQ, when set, supplies receive WQEs instead of the QP's own queue.
	SRQ *SRQ
	// MaxSendWR bounds outstanding send work requests (default 1024).
	MaxSendWR int
	// MaxRecvWR bounds posted receive work requests (default 1024).
	MaxRecvWR int
	// Context is the consumer's value for the QP, carried in its send and
	// receive completions (CQE.QPContext) so that a completion handler
	// finds its state without a lookup.
	Context uint64
}

// QPAttr carries the attributes of the state transitions, as
// ibv_modify_qp does. Which fields a transition reads is said per field.
type QPAttr struct {
	// Access lists the remote operations the QP accepts
	// (AccessRemoteWrite, AccessRemoteRead, AccessRemoteAtomic). INIT.
	Access Access
	// QKey is the UD queue key. INIT.
	QKey uint32

	// DestQPN, DestGID and DestMAC name the peer of a connected QP. RTR.
	DestQPN uint32
	DestGID netip.Addr
	DestMAC [6]byte
	// RQPSN is the first PSN expected from the peer. RTR.
	RQPSN wire.PSN
	// PathMTU is 256, 512, 1024, 2048 or 4096. RTR (UD: RTS; default 1024).
	PathMTU int

	// SQPSN is the first PSN this QP sends. RTS.
	SQPSN wire.PSN
	// Timeout is the RC retransmission timeout (default 100 ms). RTS.
	Timeout time.Duration
	// RetryCount is how often RC retransmits after timeouts or sequence
	// NAKs before failing (0..7; default 7). RTS.
	RetryCount int
	// RNRRetry is how often RC resends after RNR NAKs (7 = forever). RTS.
	RNRRetry int
	// RNRTimer is the back-off this QP asks of senders in its RNR NAKs and
	// waits itself after receiving one (default 1 ms). RTR/RTS.
	RNRTimer time.Duration
	// RateLimit paces the QP's packets in bits per second (0: unpaced). RTS.
	RateLimit float64
}

// QP is a queue pair. Its methods are safe for concurrent use.
type QP struct {
	dev    *Device
	pd     *PD
	typ    QPType
	qpn    uint32
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	ctx    uint64 // QPConfig.Context

	mu    sync.Mutex
	state QPState
	attr  QPAttr
	mtu   int
	tmpl  wire.Fields // frame template toward the peer (connected QPs)

	rq    recvQueue
	maxSQ int

	req requester
	rsp responder

	ackPending bool // a receive goroutine owes the peer a coalesced ACK
}

// CreateQP creates a queue pair in the RESET state.
func (pd *PD) CreateQP(cfg QPConfig) (*QP, error) {
	switch {
	case cfg.Type != RC && cfg.Type != UC && cfg.Type != UD:
		return nil, fmt.Errorf("emunic: create QP: type %d: %w", cfg.Type, ErrInvalidArgument)
	case cfg.SendCQ == nil || cfg.RecvCQ == nil:
		return nil, fmt.Errorf("emunic: create QP: send and receive CQs are required: %w", ErrInvalidArgument)
	case cfg.SRQ != nil && cfg.SRQ.pd != pd:
		return nil, fmt.Errorf("emunic: create QP: SRQ of another PD: %w", ErrInvalidArgument)
	}
	if cfg.MaxSendWR <= 0 {
		cfg.MaxSendWR = 1024
	}
	if cfg.MaxRecvWR <= 0 {
		cfg.MaxRecvWR = 1024
	}
	d := pd.dev
	qp := &QP{dev: d, pd: pd, typ: cfg.Type, sendCQ: cfg.SendCQ, recvCQ: cfg.RecvCQ, srq: cfg.SRQ,
		ctx: cfg.Context, maxSQ: cfg.MaxSendWR, rq: newRecvQueue(cfg.MaxRecvWR)}
	qp.req.init()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return nil, ErrClosed
	}
	old := *d.qps.Load()
	qpn, err := d.allocQPN(old)
	if err != nil {
		return nil, err
	}
	qp.qpn = qpn
	if steer, ok := d.port.(QPSteering); ok && cfg.Type == UD {
		if err := steer.AddQP(qp.qpn, netip.Addr{}); err != nil {
			return nil, fmt.Errorf("emunic: create QP: register with the port: %w", err)
		}
	}
	qps := make(map[uint32]*QP, len(old)+1)
	for k, v := range old {
		qps[k] = v
	}
	qps[qp.qpn] = qp
	d.qps.Store(&qps)
	return qp, nil
}

// multicastQPN is the QPN of multicast packets (IBA 9.6.1.1.1): never a QP's.
const multicastQPN = 0xFFFFFF

// allocQPN picks a QP number not in used: random in [2, 0xFFFFFE] (0 and
// 1 are the special QPs, 0xFFFFFF multicast), or the next in sequence with
// FixedKeys. Caller holds d.mu.
func (d *Device) allocQPN(used map[uint32]*QP) (uint32, error) {
	for tries := 0; tries < 1<<24; tries++ {
		var qpn uint32
		if d.fixedKeys {
			d.nextQPN = (d.nextQPN + 1) & 0xFFFFFF
			qpn = d.nextQPN
		} else {
			qpn = 2 + rand.Uint32N(multicastQPN-2)
		}
		if _, taken := used[qpn]; !taken && qpn > 1 && qpn != multicastQPN {
			return qpn, nil
		}
	}
	return 0, fmt.Errorf("emunic: create QP: QP numbers exhausted: %w", ErrQueueFull)
}

// QPN returns the queue pair number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// Type returns the transport service.
func (qp *QP) Type() QPType { return qp.typ }

// State returns the current state.
func (qp *QP) State() QPState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state
}

// Destroy removes the QP from its device; packets for it are counted as
// unknown from now on. Outstanding work requests are flushed.
func (qp *QP) Destroy() {
	d := qp.dev
	d.mu.Lock()
	old := *d.qps.Load()
	qps := make(map[uint32]*QP, len(old))
	for k, v := range old {
		if k != qp.qpn {
			qps[k] = v
		}
	}
	d.qps.Store(&qps)
	d.mu.Unlock()
	if steer, ok := d.port.(QPSteering); ok {
		steer.RemoveQP(qp.qpn) // best effort: the QP is gone either way
	}
	qp.mu.Lock()
	qp.enterError()
	qp.mu.Unlock()
}

var validMTU = map[int]bool{256: true, 512: true, 1024: true, 2048: true, 4096: true}

// Modify moves the QP to state, reading the attributes that transition
// needs. Allowed: RESET→INIT, INIT→INIT, INIT→RTR, RTR→RTS, RTS→RTS (to
// change timers), any→ERR, any→RESET.
func (qp *QP) Modify(state QPState, attr QPAttr) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	from := qp.state
	bad := func(why string) error {
		return fmt.Errorf("emunic: QP %#x %v→%v: %s: %w", qp.qpn, from, state, why, ErrInvalidArgument)
	}
	switch {
	case state == StateError:
		qp.enterError()
		return nil
	case state == StateReset:
		qp.enterError()
		qp.state = StateReset
		qp.rsp = responder{}
		qp.ackPending = false
		return nil
	case state == StateInit && (from == StateReset || from == StateInit):
		qp.attr.Access, qp.attr.QKey = attr.Access, attr.QKey
	case state == StateRTR && from == StateInit:
		mtu := attr.PathMTU
		if qp.typ == UD && mtu == 0 {
			mtu = 1024
		}
		if !validMTU[mtu] {
			return bad(fmt.Sprintf("path MTU %d", attr.PathMTU))
		}
		if qp.typ != UD {
			if !attr.DestGID.IsValid() || attr.DestGID.Unmap().Is4() != qp.dev.gid.Is4() {
				return bad("destination GID must be of the device's address family")
			}
			if attr.DestQPN == 0 || attr.DestQPN > 0xFFFFFF {
				return bad("destination QPN")
			}
		}
		if steer, ok := qp.dev.port.(QPSteering); ok && qp.typ != UD {
			if err := steer.AddQP(qp.qpn, attr.DestGID.Unmap()); err != nil {
				return fmt.Errorf("emunic: QP %#x to RTR: register with the port: %w", qp.qpn, err)
			}
		}
		qp.attr.DestQPN, qp.attr.DestGID, qp.attr.DestMAC = attr.DestQPN, attr.DestGID.Unmap(), attr.DestMAC
		qp.attr.RQPSN, qp.attr.PathMTU, qp.attr.RNRTimer = attr.RQPSN&wire.PSNMask, mtu, attr.RNRTimer
		if qp.attr.RNRTimer == 0 {
			qp.attr.RNRTimer = time.Millisecond
		}
		qp.mtu = mtu
		qp.rsp = responder{ePSN: qp.attr.RQPSN}
		if qp.typ != UD {
			qp.tmpl = qp.frameTemplate(qp.attr.DestGID, qp.attr.DestMAC, qp.attr.DestQPN)
			qp.req.templates = [4][4]packetTemplate{} // built from the old tmpl
		}
	case state == StateRTS && (from == StateRTR || from == StateRTS):
		if attr.RetryCount < 0 || attr.RetryCount > 7 || attr.RNRRetry < 0 || attr.RNRRetry > 7 || attr.RateLimit < 0 {
			return bad("retry counts are 0..7 and the rate limit is not negative")
		}
		if from == StateRTR {
			psn := attr.SQPSN & wire.PSNMask
			qp.req.nextPSN, qp.req.sendPSN, qp.req.sentPSN, qp.req.ackPSN = psn, psn, psn, psn
			qp.req.rp, qp.req.bucket = dcqcnRP{}, tokenBucket{} // a new connection starts at line rate
		}
		qp.attr.SQPSN, qp.attr.Timeout, qp.attr.RetryCount, qp.attr.RNRRetry = attr.SQPSN, attr.Timeout, attr.RetryCount, attr.RNRRetry
		qp.attr.RateLimit = attr.RateLimit
		if qp.attr.Timeout == 0 {
			qp.attr.Timeout = 100 * time.Millisecond
		}
		if attr.RNRTimer != 0 {
			qp.attr.RNRTimer = attr.RNRTimer
		}
		qp.req.retriesLeft, qp.req.rnrLeft = qp.attr.RetryCount, qp.attr.RNRRetry
		qp.req.rateLimit = attr.RateLimit
		qp.setRate()
	default:
		return fmt.Errorf("emunic: QP %#x: %v→%v: %w", qp.qpn, from, state, ErrInvalidState)
	}
	qp.state = state
	return nil
}

// frameTemplate returns the framing fields toward a peer: rxe's defaults
// (TTL 64, DF, P_Key 0xFFFF) and its UDP source port.
func (qp *QP) frameTemplate(gid netip.Addr, mac [6]byte, destQPN uint32) wire.Fields {
	var f wire.Fields
	f.SrcMAC, f.DstMAC = qp.dev.mac, mac
	src, dst := qp.dev.gid, gid
	if !src.Is4() {
		src, dst = netip.AddrFrom16(src.As16()), netip.AddrFrom16(dst.As16())
	}
	f.SrcIP, f.DstIP = src, dst
	f.TTL, f.DontFragment = wire.DefaultTTL, true
	f.SrcPort = qp.sourcePort(destQPN)
	f.BTH.PKey, f.BTH.DestQP = wire.DefaultPKey, destQPN
	return f
}

// sourcePort returns the UDP source port of the QP's frames toward
// destQPN (a UD QP's are the same toward every destination): also the
// flow a multi-queue port transmits them on (TxBufferLender).
func (qp *QP) sourcePort(destQPN uint32) uint16 {
	switch {
	case qp.dev.kernelSrcPort != 0:
		return qp.dev.kernelSrcPort // the kernel's, which it writes
	case qp.typ == UD:
		return wire.SourcePortUD(qp.qpn)
	default:
		return wire.SourcePort(qp.qpn, destQPN)
	}
}

// fail moves the QP to ERR (its device closed), taking qp.mu.
func (qp *QP) fail() {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	qp.enterError()
}

// enterError moves the QP to ERR and flushes every outstanding work
// request with StatusWRFlushError. Caller holds qp.mu.
func (qp *QP) enterError() {
	if qp.state == StateError {
		return
	}
	qp.state = StateError
	qp.req.stopTimer()
	for _, w := range qp.req.outstanding {
		qp.sendCQ.push(qp.sendCompletion(w, StatusWRFlushError))
	}
	qp.req.outstanding = qp.req.outstanding[:0]
	qp.flushQueued()
	if qp.srq == nil {
		for _, w := range qp.rq.drain() {
			qp.recvCQ.push(CQE{WRID: w.id, Status: StatusWRFlushError, Opcode: WCRecv, QPN: qp.qpn, QPContext: qp.ctx})
		}
	}
}

// RecvWR is a receive work request.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

type recvWQE struct {
	id  uint64
	sgl sgl
}

// recvQueue is a FIFO of posted receives, in a ring that grows up to max
// slots: a queue that is never empty (a consumer reposting as it goes)
// reuses its slots. Guarded by its owner's mutex.
type recvQueue struct {
	wqes ring[recvWQE] // its limit is the queue's bound
}

func newRecvQueue(max int) recvQueue { return recvQueue{wqes: ring[recvWQE]{limit: max}} }

func (q *recvQueue) len() int { return q.wqes.len() }

func (q *recvQueue) push(w recvWQE) bool {
	if q.wqes.len() >= q.wqes.limit {
		return false
	}
	q.wqes.push(w)
	return true
}

func (q *recvQueue) pop() recvWQE { return q.wqes.pop() }

func (q *recvQueue) drain() []recvWQE {
	out := q.wqes.appendTo(nil)
	q.wqes.clear()
	return out
}

// resolveRecv checks a receive work request's SGL.
func (d *Device) resolveRecv(pd *PD, wr RecvWR) (recvWQE, error) {
	list := make(sgl, 0, len(wr.SGL))
	for _, e := range wr.SGL {
		b, err := d.resolveLocal(pd, e, true)
		if err != nil {
			return recvWQE{}, fmt.Errorf("emunic: post recv %d: %w", wr.ID, err)
		}
		list = append(list, b)
	}
	return recvWQE{id: wr.ID, sgl: list}, nil
}

// PostRecv posts a receive work request. Allowed from INIT on; QPs with
// an SRQ take receives from it instead.
func (qp *QP) PostRecv(wr RecvWR) error {
	_, err := qp.PostRecvList([]RecvWR{wr})
	return err
}

// PostRecvList posts receive work requests in order with one acquisition
// of the QP's lock (ibv_post_recv's list of work requests): a completion
// handler that replenishes what a batch consumed posts once per batch
// rather than once per packet. It returns how many were posted; on an
// error the rest of the list is not.
func (qp *QP) PostRecvList(wrs []RecvWR) (int, error) {
	if qp.srq != nil {
		return 0, fmt.Errorf("emunic: post recv: QP %#x uses an SRQ: %w", qp.qpn, ErrInvalidArgument)
	}
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.state == StateReset || qp.state == StateError {
		return 0, fmt.Errorf("emunic: post recv: QP %#x in %v: %w", qp.qpn, qp.state, ErrInvalidState)
	}
	for i, wr := range wrs {
		// Resolving under the QP's lock is safe: it takes the device's
		// key table lock, never a QP's.
		w, err := qp.dev.resolveRecv(qp.pd, wr)
		if err != nil {
			return i, err
		}
		if !qp.rq.push(w) {
			return i, fmt.Errorf("emunic: post recv: QP %#x: %w", qp.qpn, ErrQueueFull)
		}
	}
	return len(wrs), nil
}

// SRQ is a shared receive queue: QPs created with it take their receive
// WQEs from it in posting order.
type SRQ struct {
	pd *PD
	mu sync.Mutex
	q  recvQueue
}

// CreateSRQ creates a shared receive queue of up to maxWR entries.
func (pd *PD) CreateSRQ(maxWR int) (*SRQ, error) {
	if maxWR <= 0 {
		return nil, fmt.Errorf("emunic: create SRQ: %d entries: %w", maxWR, ErrInvalidArgument)
	}
	return &SRQ{pd: pd, q: newRecvQueue(maxWR)}, nil
}

// PostRecv posts a receive work request to the SRQ.
func (s *SRQ) PostRecv(wr RecvWR) error {
	w, err := s.pd.dev.resolveRecv(s.pd, wr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.q.push(w) {
		return fmt.Errorf("emunic: post recv to SRQ: %w", ErrQueueFull)
	}
	return nil
}

// takeRecv removes and returns the next receive WQE for this QP.
func (qp *QP) takeRecv() (recvWQE, bool) {
	if qp.srq != nil {
		qp.srq.mu.Lock()
		defer qp.srq.mu.Unlock()
		if qp.srq.q.len() == 0 {
			return recvWQE{}, false
		}
		return qp.srq.q.pop(), true
	}
	if qp.rq.len() == 0 {
		return recvWQE{}, false
	}
	return qp.rq.pop(), true
}

// hasRecv reports whether a receive WQE is available.
func (qp *QP) hasRecv() bool {
	if qp.srq != nil {
		qp.srq.mu.Lock()
		defer qp.srq.mu.Unlock()
		return qp.srq.q.len() > 0
	}
	return qp.rq.len() > 0
}
