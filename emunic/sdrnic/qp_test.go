package sdrnic_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/backend/roce"
	"github.com/sdr-rdma/sdr/wire"
)

// gate drops the frames of one pipe direction while closed and counts
// the SDR data frames of each message ID that pass.
type gate struct {
	mu     sync.Mutex
	closed bool
	pkt    wire.Packet
	byMsg  map[uint32]int
}

// rule is the gate's link.Rule: it drops every frame while closed and
// counts the data frames it passes.
func (g *gate) rule(frame []byte) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return true
	}
	if g.pkt.Decode(frame) == nil && g.pkt.ImmDt != nil {
		id, _, _ := wire.DefaultImmLayout.Unpack(g.pkt.Imm())
		if g.byMsg == nil {
			g.byMsg = map[uint32]int{}
		}
		g.byMsg[id]++
	}
	return false
}

// direction returns a perfect link direction behind the gate.
func (g *gate) direction(t *testing.T) *link.Direction {
	d, err := link.New(link.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d.SetRule(g.rule)
	return d
}

func (g *gate) set(closed bool) {
	g.mu.Lock()
	g.closed = closed
	g.mu.Unlock()
}

// frames returns how many data frames of message ID id passed.
func (g *gate) frames(id uint32) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.byMsg[id]
}

// connectedPair opens an SDR QP pair over a pipe with hooks and options.
func connectedPair(t *testing.T, cfg emunic.PipeConfig, opts sdrnic.Options, attr sdr.QPAttr, channels int) (sq, rq *sdr.QP, sctx, rctx *sdr.Context) {
	t.Helper()
	pa, pb := emunic.NewPipe(cfg)
	a, b := devices(t, pa, pb, "10.0.0.1", "10.0.0.2", opts)
	var err error
	if sctx, err = sdr.Open(a, sdr.DeviceAttr{Channels: channels}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sctx.Close() })
	if rctx, err = sdr.Open(b, sdr.DeviceAttr{Channels: channels}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rctx.Close() })
	sa, ra := attr, attr
	sa.Send, ra.Recv = true, true
	if sq, err = sctx.NewQP(sa); err != nil {
		t.Fatal(err)
	}
	if rq, err = rctx.NewQP(ra); err != nil {
		t.Fatal(err)
	}
	si, _ := sq.Info()
	ri, _ := rq.Info()
	if err := sq.Connect(ri); err != nil {
		t.Fatal(err)
	}
	if err := rq.Connect(si); err != nil {
		t.Fatal(err)
	}
	return sq, rq, sctx, rctx
}

// TestRCFullSendQueueWaits drops the receiver's ACKs until the RC
// channel's send queue cannot take another message: the posts still
// return (the SDK queues them), but only the messages the NIC's queue
// took leave, the next waits in the SDK's send queue with none of its
// packets on the wire, and no handle completes (on RC a send completes
// once acknowledged); once ACKs flow again (the sender's timeouts resend,
// within its retry budget) every send completes and every message lands
// in its receive, in order.
func TestRCFullSendQueueWaits(t *testing.T) {
	acks, data := &gate{}, &gate{}
	attr := sdr.QPAttr{MTU: 1024, ChunkSize: 4096, MaxMessages: 8, MaxInFlightBytes: 8 * 8 * 1024}
	sq, rq, sctx, rctx := connectedPair(t, emunic.PipeConfig{AToB: data.direction(t), BToA: acks.direction(t)}, sdrnic.Options{RC: true, SendQueueDepth: 1}, attr, 1)
	const size = 8 * 1024 // 8 packets; the queue is raised to 2×(8+8)/1+2 = 34
	src := make([]byte, size)
	srcMR, err := sctx.RegisterMemory(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 8*size)
	dstMR, err := rctx.RegisterMemory(dst)
	if err != nil {
		t.Fatal(err)
	}
	var hs []*sdr.RecvHandle
	for i := range 6 {
		h, err := rq.PostRecv(dstMR, i*size, size)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	acks.set(true)
	var sends []*sdr.SendHandle
	for i := range 6 {
		h, err := sq.PostSend(sdr.SendRequest{MR: srcMR, Length: size, Imm: uint32(i), HasImm: true})
		if err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
		sends = append(sends, h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The fence: the four messages a 34-request queue takes (8 packets
	// each) are on the wire. Their handles wait for the ACKs (RC).
	for i := range uint32(4) {
		for data.frames(i) < 8 {
			if ctx.Err() != nil {
				t.Fatalf("message %d: %d of 8 frames sent", i, data.frames(i))
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i, h := range sends {
		if h.Poll() {
			t.Fatalf("send %d complete (%v) before any ACK came", i, h.Err())
		}
	}
	if data.frames(4) != 0 {
		t.Fatalf("the fifth message, beyond the NIC's full queue: %d frames on the wire", data.frames(4))
	}
	acks.set(false)
	for i, h := range sends {
		if err := h.Wait(ctx); err != nil {
			t.Fatalf("send %d once ACKs flow: %v", i, err)
		}
	}
	for i, h := range hs {
		for {
			if imm, ok := h.Imm(); ok && h.Done() {
				if imm != uint32(i) {
					t.Fatalf("receive %d got message %d", i, imm)
				}
				break
			}
			if err := h.Wait(ctx); err != nil {
				t.Fatalf("receive %d: %v", i, err)
			}
		}
	}
}

// TestConnectRejectsBadInfo hands Connect peer info that is well formed
// JSON but wrong in shape or value; each fails with ErrPeerInfo and the
// QP connects afterwards.
func TestConnectRejectsBadInfo(t *testing.T) {
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	a, b := devices(t, pa, pb, "10.0.0.1", "10.0.0.2", sdrnic.Options{})
	attr := backend.QPAttr{MTU: 1024, ChunkSize: 4096, MaxMessages: 16, SlotSize: 1 << 20, Generations: 2, Layout: wire.DefaultImmLayout}
	da, err := a.Open(backend.DeviceAttr{Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close() })
	db, err := b.Open(backend.DeviceAttr{Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	qa, err := da.NewQP(attr)
	if err != nil {
		t.Fatal(err)
	}
	qb, err := db.NewQP(attr)
	if err != nil {
		t.Fatal(err)
	}
	good, err := qb.Info()
	if err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*roce.Info){
		"uneven rows":          func(in *roce.Info) { in.QPNs[1] = in.QPNs[1][:1] },
		"no generations":       func(in *roce.Info) { in.QPNs = nil },
		"empty row":            func(in *roce.Info) { in.QPNs = [][]uint32{{}, {}} },
		"QPN 0":                func(in *roce.Info) { in.QPNs[0][1] = 0 },
		"QPN beyond 24 bits":   func(in *roce.Info) { in.QPNs[0][0] = 1 << 24 },
		"missing root key":     func(in *roce.Info) { in.RootRKeys = in.RootRKeys[:1] },
		"zero root key":        func(in *roce.Info) { in.RootRKeys[1] = 0 },
		"bases per gen":        func(in *roce.Info) { in.RootBases = []uint64{0} },
		"no GID":               func(in *roce.Info) { in.GID = netip.Addr{} },
		"huge slot size":       func(in *roce.Info) { in.SlotSize = 1 << 62 },
		"zero chunk size":      func(in *roce.Info) { in.ChunkSize = 0 },
		"bad layout":           func(in *roce.Info) { in.Layout = "10/18/5" },
		"17 generations":       func(in *roce.Info) { in.QPNs = make([][]uint32, 17) },
		"root entries":         func(in *roce.Info) { in.RootEntries = 3 },
		"unknown transport":    func(in *roce.Info) { in.Transport = "ud" },
		"MTU 1000":             func(in *roce.Info) { in.MTU = 1000 },
		"slots not power of 2": func(in *roce.Info) { in.MaxMessages = 12 },
	} {
		var in roce.Info
		if err := json.Unmarshal(good, &in); err != nil {
			t.Fatal(err)
		}
		change(&in)
		blob, _ := json.Marshal(in)
		if err := qa.Connect(blob); !errors.Is(err, backend.ErrPeerInfo) {
			t.Errorf("%s: %v, want ErrPeerInfo", name, err)
		}
	}
	if err := qa.Connect(good); err != nil {
		t.Fatalf("Connect after refused info: %v", err)
	}
}

// TestForeignMemory uses memory registered on another device: Arm and
// Write refuse it with an error instead of panicking.
func TestForeignMemory(t *testing.T) {
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	a, b := devices(t, pa, pb, "10.0.0.1", "10.0.0.2", sdrnic.Options{})
	attr := backend.QPAttr{MTU: 1024, ChunkSize: 4096, MaxMessages: 4, SlotSize: 16384, Generations: 1, Layout: wire.DefaultImmLayout}
	da, _ := a.Open(backend.DeviceAttr{Channels: 1})
	t.Cleanup(func() { da.Close() })
	db, _ := b.Open(backend.DeviceAttr{Channels: 1})
	t.Cleanup(func() { db.Close() })
	qa, err := da.NewQP(attr)
	if err != nil {
		t.Fatal(err)
	}
	qb, _ := db.NewQP(attr)
	ia, _ := qa.Info()
	ib, _ := qb.Info()
	if err := qa.Connect(ib); err != nil {
		t.Fatal(err)
	}
	if err := qb.Connect(ia); err != nil {
		t.Fatal(err)
	}
	foreign, err := db.RegisterMemory(make([]byte, 4096))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qa.Arm(0, 0, 0, foreign, 0, 4096, func() {}); !errors.Is(err, emunic.ErrInvalidArgument) {
		t.Errorf("Arm with another device's memory: %v", err)
	}
	if err := qa.Write(&backend.Write{Mem: foreign, Length: 4096}); !errors.Is(err, emunic.ErrInvalidArgument) {
		t.Errorf("Write from another device's memory: %v", err)
	}
	if err := qa.Write(&backend.Write{Mem: nil, Length: 4096}); !errors.Is(err, emunic.ErrInvalidArgument) {
		t.Errorf("Write from no memory: %v", err)
	}
}

// TestCongestionNotifications sends a message over a bottleneck that
// CE-marks every frame finding a queue: the receiving device answers the
// marks with CNPs, and the sending QP counts them
// (sdr.QP.CongestionNotifications, what the reliability layer's rate
// control reads). Over a link that marks nothing, it counts none.
func TestCongestionNotifications(t *testing.T) {
	for _, marking := range []bool{false, true} {
		cfg := link.Config{Bandwidth: 100e6, QueueBytes: 8 << 20}
		if marking {
			cfg.ECNMinBytes, cfg.ECNMaxBytes, cfg.ECNMaxP = 0, 1, 1
		}
		toRecv, err := link.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		attr := sdr.QPAttr{MTU: 1024, ChunkSize: 4096, MaxMessages: 4, MaxInFlightBytes: 4 << 20}
		sq, rq, sctx, rctx := connectedPair(t, emunic.PipeConfig{AToB: toRecv}, sdrnic.Options{}, attr, 2)
		const size = 256 << 10 // 256 packets, queued behind each other at the bottleneck
		srcMR, err := sctx.RegisterMemory(make([]byte, size))
		if err != nil {
			t.Fatal(err)
		}
		dstMR, err := rctx.RegisterMemory(make([]byte, size))
		if err != nil {
			t.Fatal(err)
		}
		h, err := rq.PostRecv(dstMR, 0, size)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sq.PostSend(sdr.SendRequest{MR: srcMR, Length: size, Imm: 1, HasImm: true}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for !h.Done() { // the fence: every frame arrived, marked or not
			if err := h.Wait(ctx); err != nil {
				t.Fatalf("marking %v: receive: %v", marking, err)
			}
		}
		marked := toRecv.Counters().CEMarked
		var n uint64
		for n == 0 && marking && ctx.Err() == nil { // CNPs cross the other way after the last mark
			if n, err = sq.CongestionNotifications(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		cancel()
		if !marking {
			if n, err = sq.CongestionNotifications(); err != nil || n != 0 || marked != 0 {
				t.Errorf("unmarked link: %d CE frames, %d notifications (%v)", marked, n, err)
			}
			continue
		}
		t.Logf("%d of 256 frames CE-marked, %d notifications", marked, n)
		if marked == 0 || n == 0 {
			t.Errorf("marking link: %d CE frames, %d notifications", marked, n)
		}
	}
}
