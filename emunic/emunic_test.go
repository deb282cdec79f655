package emunic

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/wire"
)

// host is one side of a test: a device with a PD and CQs.
type host struct {
	dev    *Device
	pd     *PD
	sendCQ *CQ
	recvCQ *CQ
}

func newHost(t testing.TB, port Port, gid string, mac byte) *host {
	t.Helper()
	dev, err := NewDevice(Config{Port: port, GID: netip.MustParseAddr(gid), MAC: [6]byte{0x02, 0, 0, 0, 0, mac}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	sendCQ, _ := NewCQ(4096)
	recvCQ, _ := NewCQ(4096)
	return &host{dev: dev, pd: dev.AllocPD(), sendCQ: sendCQ, recvCQ: recvCQ}
}

// newPipeHosts returns two hosts joined by a pipe.
func newPipeHosts(t testing.TB, cfg PipeConfig) (*host, *host) {
	a, b := NewPipe(cfg)
	return newHost(t, a, "10.0.0.1", 1), newHost(t, b, "10.0.0.2", 2)
}

// newUDPHosts returns two hosts whose devices talk through UDP sockets on
// two loopback addresses.
func newUDPHosts(t testing.TB) (*host, *host) {
	t.Helper()
	var hosts []*host
	for i, addr := range []string{"127.0.0.1", "127.0.0.2"} {
		port, err := NewUDPPort(netip.MustParseAddr(addr))
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, newHost(t, port, addr, byte(i+1)))
	}
	return hosts[0], hosts[1]
}

// portKinds lists the ports every transfer test runs over.
var portKinds = []struct {
	name  string
	hosts func(t testing.TB) (*host, *host)
}{
	{"pipe", func(t testing.TB) (*host, *host) { return newPipeHosts(t, PipeConfig{}) }},
	{"udp", newUDPHosts},
}

func (h *host) createQP(t testing.TB, typ QPType) *QP {
	t.Helper()
	qp, err := h.pd.CreateQP(QPConfig{Type: typ, SendCQ: h.sendCQ, RecvCQ: h.recvCQ, MaxRecvWR: 4096})
	if err != nil {
		t.Fatal(err)
	}
	access := AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	if err := qp.Modify(StateInit, QPAttr{Access: access, QKey: 0x11111111}); err != nil {
		t.Fatal(err)
	}
	return qp
}

// connect brings two connected QPs to RTS facing each other.
func connect(t testing.TB, a *host, qa *QP, b *host, qb *QP, mtu int, rts QPAttr) {
	t.Helper()
	psnA, psnB := wire.PSN(0xFFFFF0), wire.PSN(0x123456) // A's PSNs wrap during long tests
	for _, side := range []struct {
		h, peer *host
		qp, pqp *QP
		sq, rq  wire.PSN
	}{{a, b, qa, qb, psnA, psnB}, {b, a, qb, qa, psnB, psnA}} {
		err := side.qp.Modify(StateRTR, QPAttr{DestQPN: side.pqp.QPN(), DestGID: side.peer.dev.GID(),
			DestMAC: side.peer.dev.MAC(), RQPSN: side.rq, PathMTU: mtu})
		if err != nil {
			t.Fatal(err)
		}
		attr := rts
		attr.SQPSN = side.sq
		if err := side.qp.Modify(StateRTS, attr); err != nil {
			t.Fatal(err)
		}
	}
}

func (h *host) register(t testing.TB, buf []byte) *MR {
	t.Helper()
	mr, err := h.pd.RegisterMR(buf, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

// waitCQE waits for one completion.
func waitCQE(t testing.TB, cq *CQ) CQE {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out [1]CQE
	for {
		if cq.Poll(out[:]) == 1 {
			return out[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("waiting for a completion: %v", err)
		}
	}
}

func expectNoCQE(t testing.TB, cq *CQ) {
	t.Helper()
	var out [1]CQE
	if cq.Poll(out[:]) != 0 {
		t.Fatalf("unexpected completion %+v", out[0])
	}
}

func pattern(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// canaried returns a buffer of n bytes with canary bytes before and after
// it in the same backing array, and a check that the canaries are intact.
func canaried(n int) (buf []byte, intact func() bool) {
	const guard = 64
	all := bytes.Repeat([]byte{0xCA}, n+2*guard)
	buf = all[guard : guard+n : guard+n]
	return buf, func() bool {
		return bytes.Equal(all[:guard], bytes.Repeat([]byte{0xCA}, guard)) &&
			bytes.Equal(all[guard+n:], bytes.Repeat([]byte{0xCA}, guard))
	}
}

// fence posts a zero-length WRITE-with-Imm from a to b and waits for both
// of its completions.
func fence(t *testing.T, a *host, qa *QP, b *host, qb *QP) {
	t.Helper()
	if err := qb.PostRecv(RecvWR{ID: 0xFE}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(SendWR{ID: 0xFE, Op: OpWriteImm, Imm: 0xFE}); err != nil {
		t.Fatal(err)
	}
	if c := waitCQE(t, a.sendCQ); c.WRID != 0xFE || c.Status != StatusSuccess {
		t.Fatalf("fence send completion %+v", c)
	}
	if c := waitCQE(t, b.recvCQ); c.WRID != 0xFE || c.Imm != 0xFE || c.Status != StatusSuccess {
		t.Fatalf("fence receive completion %+v", c)
	}
}

var messageSizes = []int{0, 1, 1023, 1024, 1025, 4096 + 7, 3 << 20}

func TestConnectedTransfers(t *testing.T) {
	for _, kind := range portKinds {
		for _, typ := range []QPType{UC, RC} {
			for _, op := range []Op{OpSend, OpSendImm, OpWrite, OpWriteImm} {
				t.Run(fmt.Sprintf("%s/%v/%d", kind.name, typ, op), func(t *testing.T) {
					testConnectedTransfers(t, kind.hosts, typ, op)
				})
			}
		}
	}
}

func testConnectedTransfers(t *testing.T, hosts func(testing.TB) (*host, *host), typ QPType, op Op) {
	a, b := hosts(t)
	qa, qb := a.createQP(t, typ), b.createQP(t, typ)
	connect(t, a, qa, b, qb, 1024, QPAttr{})
	for i, size := range messageSizes {
		transfer(t, a, qa, b, qb, op, size, uint64(i))
	}
	st := b.dev.Stats()
	if st.Drops() != 0 {
		t.Errorf("drops on a clean link: %+v", st)
	}
	wantPackets := uint64(0)
	for _, size := range messageSizes {
		wantPackets += uint64(max(1, (size+1023)/1024))
	}
	if st.Get(RxPackets) < wantPackets {
		t.Errorf("received %d packets, the messages need %d", st.Get(RxPackets), wantPackets)
	}
}

// transfer moves one message of size bytes with op from a to b and checks
// data, immediate and completions on both sides.
func transfer(t *testing.T, a *host, qa *QP, b *host, qb *QP, op Op, size int, seed uint64) {
	t.Helper()
	src := pattern(size, seed)
	srcBuf := make([]byte, max(size, 1))
	copy(srcBuf, src)
	srcMR := a.register(t, srcBuf)
	dst, intact := canaried(max(size, 1))
	dstMR := b.register(t, dst)
	imm := uint32(0xC0DE0000) + uint32(seed)
	withImm := op == OpSendImm || op == OpWriteImm
	isSend := op == OpSend || op == OpSendImm
	if isSend || withImm {
		if err := qb.PostRecv(RecvWR{ID: 100 + seed, SGL: []SGE{{Addr: dstMR.Addr(), Length: uint32(len(dst)), LKey: dstMR.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	wr := SendWR{ID: seed, Op: op, Imm: imm, RemoteAddr: dstMR.Addr(), RKey: dstMR.RKey()}
	if size > 0 {
		wr.SGL = []SGE{{Addr: srcMR.Addr(), Length: uint32(size), LKey: srcMR.LKey()}}
	}
	if err := qa.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	sc := waitCQE(t, a.sendCQ)
	if sc.WRID != seed || sc.Status != StatusSuccess {
		t.Fatalf("size %d: send completion %+v", size, sc)
	}
	if isSend || withImm {
		rc := waitCQE(t, b.recvCQ)
		wantOp := WCRecv
		if op == OpWriteImm {
			wantOp = WCRecvWriteImm
		}
		if rc.Status != StatusSuccess || rc.WRID != 100+seed || rc.Opcode != wantOp || rc.ByteLen != uint32(size) ||
			rc.HasImm != withImm || (withImm && rc.Imm != imm) {
			t.Fatalf("size %d: receive completion %+v", size, rc)
		}
	} else {
		// A plain WRITE completes nothing at the receiver: fence it with a
		// zero-length WRITE-with-Imm, which arrives after it on this
		// in-order link, and read the buffer after that completion.
		fence(t, a, qa, b, qb)
	}
	if !bytes.Equal(dst[:size], src) {
		t.Fatalf("size %d: data differs", size)
	}
	if !intact() {
		t.Fatalf("size %d: canaries around the destination were overwritten", size)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
