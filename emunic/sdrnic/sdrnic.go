// Package sdrnic is the SDR backend on the emulated NIC: each SDR QP owns
// Generations × Channels UC QPs (each carries both directions toward the
// peer's QP of the same generation and channel), one zero-based indirect
// MR per generation whose slot i (at i·SlotSize) points at the buffer of
// the message in slot i, and one worker goroutine per channel that runs
// the per-packet engine on the channel's receive completions and keeps the
// channel QPs' receive queues stocked.
//
// Why one indirect MR per generation: when a message completes, its slot
// is pointed at the null MR in its generation's MR only. The slot's next
// message belongs to the next generation and is installed in that
// generation's MR, so late packets of the completed message (which name
// the old generation's key) land in the null MR and never touch the new
// buffer; the engine drops them as stale too.
package sdrnic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/engine"
	"github.com/sdr-rdma/sdr/wire"
)

// Backend opens SDR devices on one emulated NIC.
type Backend struct {
	dev  *emunic.Device
	opts Options
}

// Options tune the backend.
type Options struct {
	// RC carries the packets on RC instead of UC channel QPs: the
	// NIC's own go-back-N reliability underneath SDR, the baseline the
	// paper compares against.
	RC bool
}

// New returns a backend on dev. The device stays the caller's: closing SDR
// contexts does not close it.
func New(dev *emunic.Device, opts Options) *Backend { return &Backend{dev: dev, opts: opts} }

// recvDepth is how many receive WQEs each channel QP keeps posted; every
// WRITE-with-Imm consumes one and the worker reposts it.
const recvDepth = 4096

// Open creates a device context with the given channel count.
func (b *Backend) Open(attr backend.DeviceAttr) (backend.Device, error) {
	return &device{dev: b.dev, pd: b.dev.AllocPD(), channels: attr.Channels, opts: b.opts}, nil
}

type device struct {
	dev      *emunic.Device
	pd       *emunic.PD
	channels int
	opts     Options

	mu        sync.Mutex
	qps       []*qp
	datagrams []*datagram
}

type memory struct{ mr *emunic.MR }

func (m memory) Bytes() []byte     { return m.mr.Bytes() }
func (m memory) Deregister() error { return m.mr.Deregister() }

func (d *device) RegisterMemory(buf []byte) (backend.Memory, error) {
	mr, err := d.pd.RegisterMR(buf, emunic.AccessLocalWrite)
	if err != nil {
		return nil, err
	}
	return memory{mr}, nil
}

func (d *device) Close() error {
	d.mu.Lock()
	qps, datagrams := d.qps, d.datagrams
	d.qps, d.datagrams = nil, nil
	d.mu.Unlock()
	var errs []error
	for _, q := range qps {
		errs = append(errs, q.Close())
	}
	for _, g := range datagrams {
		errs = append(errs, g.Close())
	}
	return errors.Join(errs...)
}

// qp is one SDR QP's transport.
type qp struct {
	d       *device
	attr    backend.QPAttr
	chans   [][]*emunic.QP       // [generation][channel]
	byQPN   map[uint32]channelQP // receive completions name their QP
	roots   []*emunic.MR         // per generation
	recvCQs []*emunic.CQ         // per channel
	sendCQ  *emunic.CQ
	slots   []atomic.Pointer[armed]
	psn     wire.PSN

	remoteRKeys []uint32
	remoteBases []uint64
	ctx         context.Context
	stop        context.CancelFunc
	workers     sync.WaitGroup
	closeOnce   sync.Once
	sendMu      sync.Mutex
}

// channelQP is a transport QP and the generation it carries.
type channelQP struct {
	qp  *emunic.QP
	gen uint32
}

// armed is a slot's live receive.
type armed struct {
	es       *engine.Slot
	progress chan<- struct{}
}

func (d *device) NewQP(attr backend.QPAttr) (backend.QP, error) {
	q := &qp{d: d, attr: attr, byQPN: map[uint32]channelQP{}, slots: make([]atomic.Pointer[armed], attr.MaxMessages), psn: 1}
	var err error
	if q.sendCQ, err = emunic.NewCQ(1 << 16); err != nil {
		return nil, err
	}
	for range d.channels {
		cq, err := emunic.NewCQ(recvDepth * attr.Generations)
		if err != nil {
			return nil, err
		}
		q.recvCQs = append(q.recvCQs, cq)
	}
	fail := func(err error) (backend.QP, error) {
		q.destroy()
		return nil, fmt.Errorf("sdrnic: new QP: %w", err)
	}
	for g := range attr.Generations {
		root, err := d.pd.RegisterIndirectMR(attr.MaxMessages, uint64(attr.SlotSize), emunic.AccessRemoteWrite)
		if err != nil {
			return fail(err)
		}
		q.roots = append(q.roots, root)
		var row []*emunic.QP
		for c := range d.channels {
			typ := emunic.UC
			if d.opts.RC {
				typ = emunic.RC
			}
			t, err := d.pd.CreateQP(emunic.QPConfig{Type: typ, SendCQ: q.sendCQ, RecvCQ: q.recvCQs[c],
				MaxSendWR: 1 << 16, MaxRecvWR: recvDepth})
			if err != nil {
				return fail(err)
			}
			row = append(row, t)
			q.byQPN[t.QPN()] = channelQP{qp: t, gen: uint32(g)}
			if err := t.Modify(emunic.StateInit, emunic.QPAttr{Access: emunic.AccessRemoteWrite}); err != nil {
				return fail(err)
			}
			for range recvDepth {
				if err := t.PostRecv(emunic.RecvWR{}); err != nil {
					return fail(err)
				}
			}
		}
		q.chans = append(q.chans, row)
	}
	q.ctx, q.stop = context.WithCancel(context.Background())
	for c := range d.channels {
		q.workers.Add(1)
		go q.worker(c)
	}
	d.mu.Lock()
	d.qps = append(d.qps, q)
	d.mu.Unlock()
	return q, nil
}

// Info is the endpoint description that Info returns and Connect takes,
// as JSON. Tools that connect an SDR QP to a peer that is not sdrnic (a
// plain verbs program) translate to and from it.
type Info struct {
	GID       netip.Addr `json:"gid"`
	MAC       [6]byte    `json:"mac"`
	QPNs      [][]uint32 `json:"qpns"`       // [generation][channel]
	RootRKeys []uint32   `json:"root_rkeys"` // per generation
	// RootBases are the virtual addresses of slot 0 per generation: 0 for
	// emunic's zero-based indirect MRs; a plain verbs peer (no indirect
	// MR) gives its region's address.
	RootBases   []uint64 `json:"root_bases,omitempty"`
	PSN         wire.PSN `json:"psn"`
	MTU         int      `json:"mtu"`
	MaxMessages int      `json:"max_messages"`
	SlotSize    int      `json:"slot_size"`
	Layout      string   `json:"imm_layout"`
}

func (q *qp) Info() ([]byte, error) {
	in := Info{GID: q.d.dev.GID(), MAC: q.d.dev.MAC(), PSN: q.psn, MTU: q.attr.MTU,
		MaxMessages: q.attr.MaxMessages, SlotSize: q.attr.SlotSize, Layout: q.attr.Layout.String()}
	for g, row := range q.chans {
		var qpns []uint32
		for _, t := range row {
			qpns = append(qpns, t.QPN())
		}
		in.QPNs = append(in.QPNs, qpns)
		in.RootRKeys = append(in.RootRKeys, q.roots[g].RKey())
	}
	return json.Marshal(in)
}

func (q *qp) Connect(remote []byte) error {
	var in Info
	if err := json.Unmarshal(remote, &in); err != nil {
		return fmt.Errorf("sdrnic: connect: peer info: %w", err)
	}
	if len(in.QPNs) != len(q.chans) || len(in.QPNs[0]) != len(q.chans[0]) || in.MTU != q.attr.MTU ||
		in.MaxMessages != q.attr.MaxMessages || in.SlotSize != q.attr.SlotSize || in.Layout != q.attr.Layout.String() {
		return fmt.Errorf("sdrnic: connect: peer has %d×%d channels, MTU %d, %d slots of %d B, layout %s; we %d×%d, %d, %d of %d, %s: %w",
			len(in.QPNs), len(in.QPNs[0]), in.MTU, in.MaxMessages, in.SlotSize, in.Layout,
			len(q.chans), len(q.chans[0]), q.attr.MTU, q.attr.MaxMessages, q.attr.SlotSize, q.attr.Layout, emunic.ErrInvalidArgument)
	}
	for g, row := range q.chans {
		for c, t := range row {
			if err := t.Modify(emunic.StateRTR, emunic.QPAttr{DestQPN: in.QPNs[g][c], DestGID: in.GID, DestMAC: in.MAC,
				RQPSN: in.PSN, PathMTU: q.attr.MTU}); err != nil {
				return fmt.Errorf("sdrnic: connect: %w", err)
			}
			if err := t.Modify(emunic.StateRTS, emunic.QPAttr{SQPSN: q.psn, RateLimit: q.attr.RateLimit,
				RetryCount: 7, RNRRetry: 7, Timeout: 20 * time.Millisecond}); err != nil {
				return fmt.Errorf("sdrnic: connect: %w", err)
			}
		}
	}
	if len(in.RootRKeys) != len(q.chans) || in.RootBases != nil && len(in.RootBases) != len(q.chans) {
		return fmt.Errorf("sdrnic: connect: %d root keys and %d bases for %d generations: %w",
			len(in.RootRKeys), len(in.RootBases), len(q.chans), emunic.ErrInvalidArgument)
	}
	q.remoteRKeys = in.RootRKeys
	q.remoteBases = in.RootBases
	if q.remoteBases == nil {
		q.remoteBases = make([]uint64, len(in.RootRKeys))
	}
	return nil
}

func (q *qp) Arm(slot int, msgID, gen uint32, mem backend.Memory, off, length int, progress chan<- struct{}) (*engine.Slot, error) {
	geo, err := engine.NewGeometry(length, q.attr.MTU, q.attr.ChunkSize)
	if err != nil {
		return nil, err
	}
	es, err := engine.NewSlot(nil, geo, q.attr.Layout)
	if err != nil {
		return nil, err
	}
	m, ok := mem.(memory)
	if !ok {
		return nil, fmt.Errorf("sdrnic: arm: memory of another backend: %w", emunic.ErrInvalidArgument)
	}
	if length > 0 {
		if err := q.roots[gen].SetSlotRange(slot, m.mr, uint64(off), uint64(length)); err != nil {
			return nil, fmt.Errorf("sdrnic: arm slot %d: %w", slot, err)
		}
	}
	es.Activate(msgID, gen)
	q.slots[slot].Store(&armed{es: es, progress: progress})
	return es, nil
}

func (q *qp) Disarm(slot int) error {
	a := q.slots[slot].Swap(nil)
	if a == nil {
		return nil
	}
	a.es.Deactivate()
	var errs []error
	for _, root := range q.roots {
		errs = append(errs, root.SetSlot(slot, nil))
	}
	return errors.Join(errs...)
}

// worker runs the per-packet engine for channel c.
func (q *qp) worker(c int) {
	defer q.workers.Done()
	cq := q.recvCQs[c]
	var cqes [256]emunic.CQE
	for {
		n := cq.Poll(cqes[:])
		if n == 0 {
			if cq.Wait(q.ctx) != nil {
				return
			}
			continue
		}
		for _, e := range cqes[:n] {
			q.process(e)
		}
	}
}

func (q *qp) process(e emunic.CQE) {
	ch := q.byQPN[e.QPN]
	if e.Status == emunic.StatusSuccess && e.HasImm {
		msgID, _, _ := q.attr.Layout.Unpack(e.Imm)
		if a := q.slots[int(msgID)%q.attr.MaxMessages].Load(); a != nil {
			switch a.es.Process(ch.gen, e.Imm, e.ByteLen) {
			case engine.ChunkComplete, engine.ImmOnly:
				select {
				case a.progress <- struct{}{}:
				default:
				}
			}
		}
	}
	// Keep the receive queue stocked: each WRITE-with-Imm took one WQE.
	ch.qp.PostRecv(emunic.RecvWR{})
}

func (q *qp) Write(w *backend.Write) error {
	if q.remoteRKeys == nil {
		return fmt.Errorf("sdrnic: write before connect: %w", emunic.ErrInvalidState)
	}
	m, _ := w.Mem.(memory)
	layout, mtu := q.attr.Layout, q.attr.MTU
	row := q.chans[w.Gen]
	base := q.remoteBases[w.Gen] + uint64(w.Slot)*uint64(q.attr.SlotSize)
	wr := emunic.SendWR{Op: emunic.OpWriteImm, Unsignaled: true, RKey: q.remoteRKeys[w.Gen]}
	sge := make([]emunic.SGE, 1)
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	send := func(pkt int) error {
		wr.RemoteAddr = base + uint64(pkt)*uint64(mtu)
		wr.Imm = layout.Pack(w.MsgID, uint32(pkt), layout.NibbleOf(w.Imm, uint32(pkt)))
		return row[pkt%len(row)].PostSend(wr)
	}
	for done := 0; done < w.Length; done += mtu {
		n := min(mtu, w.Length-done)
		sge[0] = emunic.SGE{Addr: m.mr.Addr() + uint64(w.Off+done), Length: uint32(n), LKey: m.mr.LKey()}
		wr.SGL = sge
		if err := send(w.FirstPacket + done/mtu); err != nil {
			return fmt.Errorf("sdrnic: write: %w", err)
		}
	}
	wr.SGL = nil
	for _, pkt := range w.Carriers {
		if err := send(pkt); err != nil {
			return fmt.Errorf("sdrnic: write carrier: %w", err)
		}
	}
	return nil
}

func (q *qp) Close() error {
	q.closeOnce.Do(q.destroy)
	return nil
}

func (q *qp) destroy() {
	if q.stop != nil {
		q.stop()
		q.workers.Wait()
	}
	for _, row := range q.chans {
		for _, t := range row {
			t.Destroy()
		}
	}
	for i := range q.slots {
		q.Disarm(i)
	}
	for _, root := range q.roots {
		root.Deregister()
	}
}
