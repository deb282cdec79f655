package emunic_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/emunic/udp"
)

// host is a test's device with its PD and CQs.
type host = emunictest.Host

// newHost opens a host on port at address gid with MAC 02:00:00:00:00:mac.
func newHost(t testing.TB, port emunic.Port, gid string, mac byte) *host {
	t.Helper()
	return emunictest.NewHost(t, port, netip.MustParseAddr(gid), [6]byte{0x02, 0, 0, 0, 0, mac}, nil)
}

// newPipeHosts returns two hosts joined by a pipe.
func newPipeHosts(t testing.TB, cfg emunic.PipeConfig) (*host, *host) {
	a, b := emunic.NewPipe(cfg)
	return newHost(t, a, "10.0.0.1", 1), newHost(t, b, "10.0.0.2", 2)
}

// newUDPHosts returns two hosts whose devices talk through UDP sockets on
// two loopback addresses.
func newUDPHosts(t testing.TB) (*host, *host) {
	t.Helper()
	var hosts []*host
	for i, addr := range []string{"127.0.0.1", "127.0.0.2"} {
		port, err := udp.NewPort(netip.MustParseAddr(addr))
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
	{"pipe", func(t testing.TB) (*host, *host) { return newPipeHosts(t, emunic.PipeConfig{}) }},
	{"udp", newUDPHosts},
}

func expectNoCQE(t testing.TB, cq *emunic.CQ) {
	t.Helper()
	var out [1]emunic.CQE
	if cq.Poll(out[:]) != 0 {
		t.Fatalf("unexpected completion %+v", out[0])
	}
}

// fence posts a zero-length WRITE-with-Imm from a to b and waits for both
// of its completions.
func fence(t *testing.T, a *host, qa *emunic.QP, b *host, qb *emunic.QP) {
	t.Helper()
	if err := qb.PostRecv(emunic.RecvWR{ID: 0xFE}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(emunic.SendWR{ID: 0xFE, Op: emunic.OpWriteImm, Imm: 0xFE}); err != nil {
		t.Fatal(err)
	}
	if c := emunictest.WaitCQE(t, a.SendCQ); c.WRID != 0xFE || c.Status != emunic.StatusSuccess {
		t.Fatalf("fence send completion %+v", c)
	}
	if c := emunictest.WaitCQE(t, b.RecvCQ); c.WRID != 0xFE || c.Imm != 0xFE || c.Status != emunic.StatusSuccess {
		t.Fatalf("fence receive completion %+v", c)
	}
}

var messageSizes = []int{0, 1, 1023, 1024, 1025, 4096 + 7, 3 << 20}

func TestConnectedTransfers(t *testing.T) {
	for _, kind := range portKinds {
		for _, typ := range []emunic.QPType{emunic.UC, emunic.RC} {
			for _, op := range []emunic.Op{emunic.OpSend, emunic.OpSendImm, emunic.OpWrite, emunic.OpWriteImm} {
				t.Run(fmt.Sprintf("%s/%v/%d", kind.name, typ, op), func(t *testing.T) {
					testConnectedTransfers(t, kind.hosts, typ, op)
				})
			}
		}
	}
}

func testConnectedTransfers(t *testing.T, hosts func(testing.TB) (*host, *host), typ emunic.QPType, op emunic.Op) {
	a, b := hosts(t)
	qa, qb := a.QP(t, typ), b.QP(t, typ)
	// No retries: on this clean link RC must never need one. The timeout
	// is long so that a loaded machine's scheduling stall of a 3 MiB
	// message's ACKs is not mistaken for a loss.
	emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{Timeout: time.Second})
	for i, size := range messageSizes {
		transfer(t, a, qa, b, qb, op, size, uint64(i))
	}
	st := b.Dev.Stats()
	if st.Drops() != 0 {
		t.Errorf("drops on a clean link: %+v", st)
	}
	wantPackets := uint64(0)
	for _, size := range messageSizes {
		wantPackets += uint64(max(1, (size+1023)/1024))
	}
	if st.Get(emunic.RxPackets) < wantPackets {
		t.Errorf("received %d packets, the messages need %d", st.Get(emunic.RxPackets), wantPackets)
	}
}

// transfer moves one message of size bytes with op from a to b and checks
// data, immediate and completions on both sides.
func transfer(t *testing.T, a *host, qa *emunic.QP, b *host, qb *emunic.QP, op emunic.Op, size int, seed uint64) {
	t.Helper()
	src := emunictest.Pattern(size, seed)
	srcBuf := make([]byte, max(size, 1))
	copy(srcBuf, src)
	srcMR := a.MR(t, srcBuf)
	dst, intact := emunic.Canaried(max(size, 1))
	dstMR := b.MR(t, dst)
	imm := uint32(0xC0DE0000) + uint32(seed)
	withImm := op == emunic.OpSendImm || op == emunic.OpWriteImm
	isSend := op == emunic.OpSend || op == emunic.OpSendImm
	if isSend || withImm {
		if err := qb.PostRecv(emunic.RecvWR{ID: 100 + seed, SGL: []emunic.SGE{{Addr: dstMR.Addr(), Length: uint32(len(dst)), LKey: dstMR.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	wr := emunic.SendWR{ID: seed, Op: op, Imm: imm, RemoteAddr: dstMR.Addr(), RKey: dstMR.RKey()}
	if size > 0 {
		wr.SGL = []emunic.SGE{{Addr: srcMR.Addr(), Length: uint32(size), LKey: srcMR.LKey()}}
	}
	if err := qa.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	sc := emunictest.WaitCQE(t, a.SendCQ)
	if sc.WRID != seed || sc.Status != emunic.StatusSuccess {
		t.Fatalf("size %d: send completion %+v", size, sc)
	}
	if isSend || withImm {
		rc := emunictest.WaitCQE(t, b.RecvCQ)
		wantOp := emunic.WCRecv
		if op == emunic.OpWriteImm {
			wantOp = emunic.WCRecvWriteImm
		}
		if rc.Status != emunic.StatusSuccess || rc.WRID != 100+seed || rc.Opcode != wantOp || rc.ByteLen != uint32(size) ||
			rc.HasImm != withImm || (withImm && rc.Imm != imm) {
			t.Fatalf("size %d: receive completion %+v", size, rc)
		}
	} else {
		// A plain WRITE completes nothing at the receiver: fence it with a
		// zero-length WRITE-with-Imm, which arrives after it on this
		// in-order link, and read the buffer after that completion.
		fence(t, a, qa, b, qb)
	}
	emunictest.Verify(t, fmt.Sprintf("size %d", size), dst[:size], src)
	if !intact() {
		t.Fatalf("size %d: canaries around the destination were overwritten", size)
	}
}
