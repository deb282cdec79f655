package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/sdr-rdma/sdr/backends"
	"github.com/sdr-rdma/sdr/sdr"
)

// table holds every object C has a handle of.
var table objects

// infoSize is sdr_qp_info_size_get's answer: one size for every QP, so
// that two programs exchanging their info out of band agree on how many
// bytes to read before either knows the other's geometry. The blob is
// infoMagic, the length of the backend's info, the info, zeros.
const (
	infoSize   = 16 << 10
	infoMagic  = 0x51524453 // "SDRQ" little-endian
	infoHeader = 8
)

// contextAttr is sdr_dev_attr.
type contextAttr struct {
	Channels  int
	LogMaxQPs int
}

// contextObj is a struct sdr_context: an open device. mu guards the
// registrations and the QP count.
type contextObj struct {
	handle uintptr
	dev    *backends.Device
	sc     *sdr.Context
	env    env
	maxQPs int

	mu      sync.Mutex
	qps     int
	keys    map[uint32]*mrObj
	nextKey uint32
}

func (c *contextObj) owner() *contextObj { return c }

// newContext opens the named device with the SDK's environment.
func newContext(name string, getenv func(string) string, attr contextAttr) (*contextObj, error) {
	if attr.LogMaxQPs > 16 {
		return nil, fmt.Errorf("libsdr: context: log_max_qps %d above 16: %w", attr.LogMaxQPs, sdr.ErrInvalid)
	}
	e, err := readEnv(getenv)
	if err != nil {
		return nil, err
	}
	dev, err := backends.Open(name, backends.Options{RC: e.channelRC(name)})
	if err != nil {
		return nil, fmt.Errorf("libsdr: %w", err)
	}
	sc, err := sdr.Open(dev.Backend, sdr.DeviceAttr{Channels: attr.Channels})
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("libsdr: context on %s: %w", name, err)
	}
	c := &contextObj{dev: dev, sc: sc, env: e, maxQPs: 1 << attr.LogMaxQPs, keys: map[uint32]*mrObj{}}
	c.handle = table.add(c)
	return c, nil
}

// destroy closes the context and drops every handle made from it.
func (c *contextObj) destroy() error {
	if !table.take(c.handle) {
		return fmt.Errorf("libsdr: context destroy: %w", errHandle)
	}
	table.dropOwned(c)
	err := c.sc.Close()
	c.dev.Close()
	if err != nil {
		return fmt.Errorf("libsdr: context destroy: %w", err)
	}
	return nil
}

// mrObj is a struct sdr_mr: C memory registered in place.
type mrObj struct {
	handle uintptr
	ctx    *contextObj
	mr     *sdr.MR
	base   uintptr
	length int
	key    uint32
}

func (m *mrObj) owner() *contextObj { return m.ctx }

// register registers buf, which starts at addr.
func (c *contextObj) register(addr uintptr, buf []byte) (*mrObj, error) {
	mr, err := c.sc.RegisterMemory(buf)
	if err != nil {
		return nil, fmt.Errorf("libsdr: mr reg: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextKey++
	m := &mrObj{ctx: c, mr: mr, base: addr, length: len(buf), key: c.nextKey}
	c.keys[m.key] = m
	m.handle = table.add(m)
	return m, nil
}

// deregister releases the registration, then its key and handle: a
// registration the backend refuses to release (a receive still posted in
// it) keeps both, and may be deregistered again later.
func (m *mrObj) deregister() error {
	if err := m.mr.Deregister(); err != nil {
		return fmt.Errorf("libsdr: mr dereg: %w", err)
	}
	c := m.ctx
	c.mu.Lock()
	delete(c.keys, m.key)
	c.mu.Unlock()
	table.drop(m.handle)
	return nil
}

// region finds the registration of key holding [addr, addr+length) and
// returns it with addr's offset in it.
func (c *contextObj) region(key uint32, addr uintptr, length int) (*sdr.MR, int, error) {
	c.mu.Lock()
	m := c.keys[key]
	c.mu.Unlock()
	if m == nil {
		return nil, 0, fmt.Errorf("libsdr: no registration has key %d: %w", key, sdr.ErrInvalid)
	}
	if addr < m.base || length < 0 || addr-m.base > uintptr(m.length) || uintptr(length) > uintptr(m.length)-(addr-m.base) {
		return nil, 0, fmt.Errorf("libsdr: [%#x,+%d) outside registration %d [%#x,+%d): %w",
			addr, length, key, m.base, m.length, sdr.ErrInvalid)
	}
	return m.mr, int(addr - m.base), nil
}

// qpAttr is sdr_qp_attr, its log fields still logs.
type qpAttr struct {
	LogChunk, LogInFlight, LogMessages uint64
	MTU                                int // enum sdr_mtu
	Send, Recv                         bool
	RateKbps                           uint64
}

// sdrAttr converts a to the Go SDK's attributes, with the context's
// generations.
func (a qpAttr) sdrAttr(generations int) (sdr.QPAttr, error) {
	if a.MTU < 2 || a.MTU > 6 {
		return sdr.QPAttr{}, fmt.Errorf("libsdr: qp create: MTU enum %d: our backends take SDR_MTU_256 to SDR_MTU_4096: %w", a.MTU, sdr.ErrInvalid)
	}
	if a.LogChunk > 30 || a.LogInFlight > 40 || a.LogMessages > 16 {
		return sdr.QPAttr{}, fmt.Errorf("libsdr: qp create: chunk 2^%d, in flight 2^%d, messages 2^%d: %w",
			a.LogChunk, a.LogInFlight, a.LogMessages, sdr.ErrInvalid)
	}
	return sdr.QPAttr{
		MTU:              64 << a.MTU,
		ChunkSize:        1 << a.LogChunk,
		MaxInFlightBytes: 1 << a.LogInFlight,
		MaxMessages:      1 << a.LogMessages,
		Send:             a.Send,
		Recv:             a.Recv,
		RateLimit:        float64(a.RateKbps) * 1000,
		Generations:      generations,
	}, nil
}

// qpObj is a struct sdr_qp.
type qpObj struct {
	handle uintptr
	ctx    *contextObj
	qp     *sdr.QP
	events qpEvents
	// recvNotify and sendNotify signal events; made once, not per post.
	recvNotify func(*sdr.RecvHandle)
	sendNotify func(*sdr.SendHandle)
}

func (q *qpObj) owner() *contextObj { return q.ctx }

// release closes the QP's event descriptor when the QP's handle goes with
// its context (sdr_context_destroy closes the QPs with the session).
func (q *qpObj) release() { q.events.close() }

// newQP creates a QP, within the context's QP budget.
func (c *contextObj) newQP(a qpAttr) (*qpObj, error) {
	attr, err := a.sdrAttr(c.env.Generations)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.qps >= c.maxQPs {
		return nil, fmt.Errorf("libsdr: qp create: the context holds its %d QPs (log_max_qps): %w", c.maxQPs, sdr.ErrInvalid)
	}
	qp, err := c.sc.NewQP(attr)
	if err != nil {
		return nil, fmt.Errorf("libsdr: qp create: %w", err)
	}
	c.qps++
	q := &qpObj{ctx: c, qp: qp}
	q.recvNotify = func(*sdr.RecvHandle) { q.events.signal() }
	q.sendNotify = func(*sdr.SendHandle) { q.events.signal() }
	q.handle = table.add(q)
	return q, nil
}

// destroy closes the QP and drops the handles of its sends and receives.
func (q *qpObj) destroy() error {
	if !table.take(q.handle) {
		return fmt.Errorf("libsdr: qp destroy: %w", errHandle)
	}
	table.dropWhere(func(o object) bool {
		switch o := o.(type) {
		case *recvObj:
			return o.qp == q
		case *sendObj:
			return o.qp == q
		}
		return false
	})
	q.ctx.mu.Lock()
	q.ctx.qps--
	q.ctx.mu.Unlock()
	err := q.qp.Close()
	q.release()
	if err != nil {
		return fmt.Errorf("libsdr: qp destroy: %w", err)
	}
	return nil
}

// info returns the QP's info blob (infoSize bytes).
func (q *qpObj) info() ([]byte, error) {
	inner, err := q.qp.Info()
	if err != nil {
		return nil, fmt.Errorf("libsdr: qp info: %w", err)
	}
	return frameInfo(inner)
}

// frameInfo wraps a backend's info in infoSize bytes.
func frameInfo(inner []byte) ([]byte, error) {
	if len(inner) > infoSize-infoHeader {
		return nil, fmt.Errorf("libsdr: qp info of %d bytes exceeds %d", len(inner), infoSize-infoHeader)
	}
	blob := make([]byte, infoSize)
	binary.LittleEndian.PutUint32(blob, infoMagic)
	binary.LittleEndian.PutUint32(blob[4:], uint32(len(inner)))
	copy(blob[infoHeader:], inner)
	return blob, nil
}

// unframeInfo returns the backend's info inside a blob.
func unframeInfo(blob []byte) ([]byte, error) {
	if len(blob) < infoHeader || binary.LittleEndian.Uint32(blob) != infoMagic {
		return nil, fmt.Errorf("libsdr: qp connect: not an sdr_qp_info_get blob: %w", sdr.ErrPeerInfo)
	}
	n := binary.LittleEndian.Uint32(blob[4:])
	if n > uint32(len(blob)-infoHeader) {
		return nil, fmt.Errorf("libsdr: qp connect: info of %d bytes in a %d-byte blob: %w", n, len(blob), sdr.ErrPeerInfo)
	}
	return blob[infoHeader : infoHeader+int(n)], nil
}

// connect connects the QP to the peer whose blob this is.
func (q *qpObj) connect(blob []byte) error {
	inner, err := unframeInfo(blob)
	if err != nil {
		return err
	}
	if err := q.qp.Connect(inner); err != nil {
		return fmt.Errorf("libsdr: qp connect: %w", err)
	}
	return nil
}

// recvObj is a struct sdr_recv_handle. Its bitmap words stay pinned
// until complete, so that C may keep the pointer sdr_recv_bitmap_get
// gave.
type recvObj struct {
	handle uintptr
	qp     *qpObj
	h      *sdr.RecvHandle
	words  []uint64
	pin    runtime.Pinner
}

func (r *recvObj) owner() *contextObj { return r.qp.ctx }

// postRecv posts length bytes at addr of registration key.
func (q *qpObj) postRecv(key uint32, addr uintptr, length int) (*recvObj, error) {
	var mr *sdr.MR
	off := 0
	if length > 0 {
		var err error
		if mr, off, err = q.ctx.region(key, addr, length); err != nil {
			return nil, fmt.Errorf("libsdr: recv post: %w", err)
		}
	}
	h, err := q.qp.PostRecvNotify(mr, off, length, q.recvNotify)
	if err != nil {
		return nil, err
	}
	r := &recvObj{qp: q, h: h, words: h.BitmapWords()}
	if len(r.words) > 0 {
		r.pin.Pin(&r.words[0])
	}
	r.handle = table.add(r)
	return r, nil
}

// complete releases the receive, its handle and its bitmap; of
// concurrent calls (or a QP's or context's destroy) one does it.
func (r *recvObj) complete() error {
	if !table.take(r.handle) {
		return fmt.Errorf("libsdr: recv complete: %w", errHandle)
	}
	err := r.h.Complete()
	r.release()
	if err != nil {
		return fmt.Errorf("libsdr: recv complete: %w", err)
	}
	return nil
}

// release unpins the bitmap: called once, by whoever took the handle.
func (r *recvObj) release() { r.pin.Unpin() }

// sendObj is a struct sdr_send_handle: a posted message (sent, complete
// once the QP's send goroutine injected it), or a stream until it ends.
// The stream and sent are safe for concurrent use; ended is set by end
// and read by poll.
type sendObj struct {
	handle uintptr
	qp     *qpObj
	sent   *sdr.SendHandle // sdr_send_post's; nil for a stream
	stream *sdr.Stream     // nil for sdr_send_post
	ended  atomic.Bool
}

func (s *sendObj) owner() *contextObj { return s.qp.ctx }

// errOffsetPost is sdr_send_post with a remote offset: our sends are
// whole messages, their tails go through a stream.
var errOffsetPost = errors.New("libsdr: sdr_send_post sends whole messages (remote_offset 0); send pieces with sdr_streaming_send_*")

// postSend sends one message.
func (q *qpObj) postSend(key uint32, addr uintptr, length int, remoteOffset uint64, imm uint32, hasImm bool) (*sendObj, error) {
	if remoteOffset != 0 {
		return nil, fmt.Errorf("remote offset %d: %w: %w", remoteOffset, errOffsetPost, sdr.ErrInvalid)
	}
	req := sdr.SendRequest{Length: length, Imm: imm, HasImm: hasImm}
	if length > 0 {
		var err error
		if req.MR, req.Off, err = q.ctx.region(key, addr, length); err != nil {
			return nil, fmt.Errorf("libsdr: send post: %w", err)
		}
	}
	sent, err := q.qp.PostSendNotify(req, q.sendNotify)
	if err != nil {
		return nil, err
	}
	s := &sendObj{qp: q, sent: sent}
	s.handle = table.add(s)
	return s, nil
}

// startStream opens a stream of unknown length.
func (q *qpObj) startStream(imm uint32, hasImm bool) (*sendObj, error) {
	st, err := q.qp.StartStream(sdr.StreamRequest{Length: q.qp.MaxMessageSize(), Imm: imm, HasImm: hasImm, Unsized: true})
	if err != nil {
		return nil, err
	}
	s := &sendObj{qp: q, stream: st}
	s.handle = table.add(s)
	return s, nil
}

// continueStream sends a piece of the stream.
func (s *sendObj) continueStream(key uint32, addr uintptr, length int, remoteOffset uint64) error {
	if s.stream == nil {
		return fmt.Errorf("libsdr: stream continue on a posted send: %w", sdr.ErrInvalid)
	}
	mr, off, err := s.qp.ctx.region(key, addr, length)
	if err != nil {
		return fmt.Errorf("libsdr: stream continue: %w", err)
	}
	if remoteOffset > uint64(s.qp.qp.MaxMessageSize()) {
		return fmt.Errorf("libsdr: stream continue at chunk %d: %w", remoteOffset, sdr.ErrTooLong)
	}
	return s.stream.Continue(mr, off, length, int(remoteOffset))
}

// end ends the stream.
func (s *sendObj) end() error {
	if s.stream == nil {
		return fmt.Errorf("libsdr: stream end on a posted send: %w", sdr.ErrInvalid)
	}
	if _, err := s.stream.End(); err != nil {
		return err
	}
	s.ended.Store(true)
	return nil
}

// poll reports whether the send is complete, releasing the handle if so,
// and why a posted message failed (its QP broke or closed before it was
// injected).
func (s *sendObj) poll() (bool, error) {
	if s.sent == nil { // a stream: complete once ended
		if !s.ended.Load() {
			return false, nil
		}
		table.drop(s.handle)
		return true, nil
	}
	if !s.sent.Poll() {
		return false, nil
	}
	table.drop(s.handle)
	if err := s.sent.Err(); err != nil {
		return true, fmt.Errorf("libsdr: send: %w", err)
	}
	return true, nil
}
