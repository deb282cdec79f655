package sdrnic

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/sdr/backend"
)

// grhLen is the Global Route Header room at the start of every UD receive
// buffer (for RoCEv2 over IPv4 the IPv4 header sits in its last 20 bytes).
const grhLen = 40

// datagram is a UD QP with its own receive ring: Depth buffers of
// grhLen+MTU bytes in one registered region, WQE i owning buffer i and
// reposted once Recv has copied it out. Sends go from one registered MTU
// buffer under sendMu (UD sends complete inside PostSend, so the buffer is
// free again when PostSend returns).
type datagram struct {
	d      *Device
	qp     *emunic.QP
	sendCQ *emunic.CQ
	recvCQ *emunic.CQ
	recvMR *emunic.MR
	sendMR *emunic.MR
	mtu    int
	qkey   uint32

	// peer is set once by Connect; Send and Recv read it.
	peer atomic.Pointer[emunic.UDDest]

	sendMu sync.Mutex

	recvMu sync.Mutex // serializes Recv; guards one
	one    [1]emunic.CQE

	closed    context.Context
	close     context.CancelFunc
	closeOnce sync.Once
}

// datagramInfo is what Info returns and Connect takes, as JSON.
type datagramInfo struct {
	GID  netip.Addr `json:"gid"`
	MAC  [6]byte    `json:"mac"`
	QPN  uint32     `json:"qpn"`
	QKey uint32     `json:"qkey"`
	MTU  int        `json:"mtu"`
}

// NewDatagram creates a UD QP on the device for a datagram channel.
func (d *Device) NewDatagram(attr backend.DatagramAttr) (backend.Datagram, error) {
	if err := d.dev.CheckPathMTU(attr.MTU); err != nil {
		return nil, fmt.Errorf("sdrnic: new datagram channel: %w", err)
	}
	g := &datagram{d: d, mtu: attr.MTU, qkey: rand.Uint32() & 0x7FFFFFFF}
	g.closed, g.close = context.WithCancel(context.Background())
	fail := func(err error) (backend.Datagram, error) {
		g.destroy()
		return nil, fmt.Errorf("sdrnic: new datagram channel: %w", err)
	}
	var err error
	if g.sendCQ, err = emunic.NewCQ(16); err != nil {
		return fail(err)
	}
	if g.recvCQ, err = emunic.NewCQ(attr.Depth); err != nil {
		return fail(err)
	}
	if g.recvMR, err = d.pd.RegisterMR(make([]byte, attr.Depth*(grhLen+attr.MTU)), emunic.AccessLocalWrite); err != nil {
		return fail(err)
	}
	if g.sendMR, err = d.pd.RegisterMR(make([]byte, attr.MTU), emunic.AccessLocalWrite); err != nil {
		return fail(err)
	}
	if g.qp, err = d.pd.CreateQP(emunic.QPConfig{Type: emunic.UD, SendCQ: g.sendCQ, RecvCQ: g.recvCQ,
		MaxSendWR: 16, MaxRecvWR: attr.Depth}); err != nil {
		return fail(err)
	}
	if err := g.qp.Modify(emunic.StateInit, emunic.QPAttr{QKey: g.qkey}); err != nil {
		return fail(err)
	}
	for i := range attr.Depth {
		if err := g.repost(uint64(i)); err != nil {
			return fail(err)
		}
	}
	if err := g.qp.Modify(emunic.StateRTR, emunic.QPAttr{}); err != nil {
		return fail(err)
	}
	if err := g.qp.Modify(emunic.StateRTS, emunic.QPAttr{PathMTU: attr.MTU}); err != nil {
		return fail(err)
	}
	d.mu.Lock()
	d.datagrams = append(d.datagrams, g)
	d.mu.Unlock()
	return g, nil
}

// repost gives receive buffer i back to the QP.
func (g *datagram) repost(i uint64) error {
	size := uint64(grhLen + g.mtu)
	return g.qp.PostRecv(emunic.RecvWR{ID: i, SGL: []emunic.SGE{{Addr: g.recvMR.Addr() + i*size, Length: uint32(size), LKey: g.recvMR.LKey()}}})
}

func (g *datagram) Info() ([]byte, error) {
	return json.Marshal(datagramInfo{GID: g.d.dev.GID(), MAC: g.d.dev.MAC(), QPN: g.qp.QPN(), QKey: g.qkey, MTU: g.mtu})
}

func (g *datagram) Connect(remote []byte) error {
	var in datagramInfo
	if err := json.Unmarshal(remote, &in); err != nil {
		return fmt.Errorf("sdrnic: datagram peer info: %w", err)
	}
	if !in.GID.IsValid() || in.QPN == 0 || in.QPN >= 1<<24 || in.MTU != g.mtu {
		return fmt.Errorf("sdrnic: datagram peer info (GID %v, QPN %#x, MTU %d; ours MTU %d): %w",
			in.GID, in.QPN, in.MTU, g.mtu, emunic.ErrInvalidArgument)
	}
	if !g.peer.CompareAndSwap(nil, &emunic.UDDest{QPN: in.QPN, QKey: in.QKey, GID: in.GID, MAC: in.MAC}) {
		return fmt.Errorf("sdrnic: datagram channel connected already: %w", emunic.ErrInvalidState)
	}
	return nil
}

func (g *datagram) Send(p []byte) error {
	peer := g.peer.Load()
	if peer == nil {
		return fmt.Errorf("sdrnic: datagram send before connect: %w", emunic.ErrInvalidState)
	}
	g.sendMu.Lock()
	defer g.sendMu.Unlock()
	wr := emunic.SendWR{Op: emunic.OpSend, Unsignaled: true, UD: peer}
	if len(p) > 0 {
		n := copy(g.sendMR.Bytes(), p)
		wr.SGL = []emunic.SGE{{Addr: g.sendMR.Addr(), Length: uint32(n), LKey: g.sendMR.LKey()}}
	}
	if err := g.qp.PostSend(wr); err != nil {
		return fmt.Errorf("sdrnic: datagram send: %w", err)
	}
	return nil
}

// Recv returns the next datagram from the connected peer; datagrams from
// any other sender (a UD QP accepts every sender with the right Q_Key)
// are dropped here.
func (g *datagram) Recv(ctx context.Context, buf []byte) (int, error) {
	g.recvMu.Lock()
	defer g.recvMu.Unlock()
	for {
		if g.recvCQ.Poll(g.one[:]) == 0 {
			if err := g.wait(ctx); err != nil {
				return 0, err
			}
			continue
		}
		e := g.one[0]
		if e.Status != emunic.StatusSuccess {
			return 0, fmt.Errorf("sdrnic: datagram receive completion %v: %w", e.Status, emunic.ErrClosed)
		}
		size := grhLen + g.mtu
		b := g.recvMR.Bytes()[int(e.WRID)*size : int(e.WRID)*size+int(e.ByteLen)]
		peer := g.peer.Load()
		fromPeer := peer != nil && e.SrcQP == peer.QPN && g.fromPeer(b[:grhLen], peer.GID)
		n := copy(buf, b[grhLen:])
		if err := g.repost(e.WRID); err != nil {
			return 0, fmt.Errorf("sdrnic: datagram repost: %w", err)
		}
		if fromPeer {
			return n, nil
		}
	}
}

// fromPeer reports whether the GRH names gid as the source address.
func (g *datagram) fromPeer(grh []byte, gid netip.Addr) bool {
	if gid.Unmap().Is4() {
		return netip.AddrFrom4([4]byte(grh[20+12:20+16])) == gid.Unmap()
	}
	return netip.AddrFrom16([16]byte(grh[8:24])) == gid
}

// wait blocks until the receive CQ has an entry, ctx ends or the channel
// closes.
func (g *datagram) wait(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(g.closed, cancel)
	defer stop()
	if err := g.recvCQ.Wait(ctx); err != nil {
		if g.closed.Err() != nil {
			return fmt.Errorf("sdrnic: datagram channel closed: %w", emunic.ErrClosed)
		}
		return err
	}
	return nil
}

func (g *datagram) Close() error {
	g.closeOnce.Do(g.destroy)
	return nil
}

func (g *datagram) destroy() {
	g.close()
	if g.qp != nil {
		g.qp.Destroy()
	}
	g.recvMu.Lock() // no Recv is copying out of recvMR any more
	defer g.recvMu.Unlock()
	for _, mr := range []*emunic.MR{g.recvMR, g.sendMR} {
		if mr != nil {
			mr.Deregister()
		}
	}
}
