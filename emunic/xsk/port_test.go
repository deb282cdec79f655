package xsk_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/testbed"
	"github.com/sdr-rdma/sdr/wire"
)

// xskHost is an emunic device on an AF_XDP port inside a testbed host.
type xskHost struct {
	*testbed.Host
	port   *xsk.Port
	dev    *emunic.Device
	pd     *emunic.PD
	sendCQ *emunic.CQ
	recvCQ *emunic.CQ
	tap    *wire.PcapWriter
}

// newXSKPair builds two namespaces joined by veth with an emunic device on
// an AF_XDP port in each; the devices' pcap taps go to dir.
func newXSKPair(t testing.TB, mtu int, multiBuffer bool, dir string) (*xskHost, *xskHost, *testbed.Pair) {
	t.Helper()
	return newXSKHosts(t, testbed.PairConfig{MTU: mtu, Switched: true}, multiBuffer, dir)
}

// newXSKHosts is newXSKPair for any testbed topology.
func newXSKHosts(t testing.TB, cfg testbed.PairConfig, multiBuffer bool, dir string) (*xskHost, *xskHost, *testbed.Pair) {
	t.Helper()
	privileged.Require(t)
	pair, err := testbed.NewPair(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pair.Close(); err != nil {
			t.Error(err)
		}
	})
	var hosts []*xskHost
	for i, h := range []*testbed.Host{pair.A, pair.B} {
		x := &xskHost{Host: h}
		if err := h.NS.Do(func() (err error) {
			x.port, err = xsk.NewPort(xsk.PortConfig{Interface: h.IfName, MultiBuffer: multiBuffer})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if dir != "" {
			if x.tap, err = wire.CreatePcap(filepath.Join(dir, fmt.Sprintf("emunic-%c.pcap", 'a'+i))); err != nil {
				t.Fatal(err)
			}
		}
		x.dev, err = emunic.NewDevice(emunic.Config{Port: x.port, GID: h.Addr, MAC: h.MAC, Tap: x.tap})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			x.dev.Close()
			x.tap.Close()
		})
		x.pd = x.dev.AllocPD()
		x.sendCQ, _ = emunic.NewCQ(4096)
		x.recvCQ, _ = emunic.NewCQ(4096)
		hosts = append(hosts, x)
	}
	return hosts[0], hosts[1], pair
}

func (x *xskHost) qp(t *testing.T, typ emunic.QPType) *emunic.QP {
	t.Helper()
	qp, err := x.pd.CreateQP(emunic.QPConfig{Type: typ, SendCQ: x.sendCQ, RecvCQ: x.recvCQ})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(emunic.StateInit, emunic.QPAttr{Access: emunic.AccessRemoteWrite | emunic.AccessRemoteRead}); err != nil {
		t.Fatal(err)
	}
	return qp
}

func connectQPs(t *testing.T, a *xskHost, qa *emunic.QP, b *xskHost, qb *emunic.QP, mtu int, peerMAC func(from, to *xskHost) [6]byte) {
	t.Helper()
	for _, s := range []struct {
		h, peer *xskHost
		qp, pqp *emunic.QP
	}{{a, b, qa, qb}, {b, a, qb, qa}} {
		if err := s.qp.Modify(emunic.StateRTR, emunic.QPAttr{DestQPN: s.pqp.QPN(), DestGID: s.peer.Addr,
			DestMAC: peerMAC(s.h, s.peer), RQPSN: 100, PathMTU: mtu}); err != nil {
			t.Fatal(err)
		}
		if err := s.qp.Modify(emunic.StateRTS, emunic.QPAttr{SQPSN: 100, Timeout: 50 * time.Millisecond, RetryCount: 7}); err != nil {
			t.Fatal(err)
		}
	}
}

func (x *xskHost) mr(t *testing.T, buf []byte) *emunic.MR {
	t.Helper()
	mr, err := x.pd.RegisterMR(buf, emunic.AccessLocalWrite|emunic.AccessRemoteWrite|emunic.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

func waitCQE(t *testing.T, cq *emunic.CQ) emunic.CQE {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out [1]emunic.CQE
	for cq.Poll(out[:]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("no completion: %v", err)
		}
	}
	return out[0]
}

func fill(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// exchange runs SEND, WRITE-with-Imm and (RC) READ of size bytes from a to
// b over connected QPs and checks data, immediates and completions.
func exchange(t *testing.T, typ emunic.QPType, a *xskHost, qa *emunic.QP, b *xskHost, qb *emunic.QP, size int, seed byte) {
	t.Helper()
	src := fill(size, seed)
	srcMR := a.mr(t, bytes.Clone(src))
	dst := make([]byte, size)
	dstMR := b.mr(t, dst)
	sge := []emunic.SGE{{Addr: srcMR.Addr(), Length: uint32(size), LKey: srcMR.LKey()}}

	if err := qb.PostRecv(emunic.RecvWR{ID: 1, SGL: []emunic.SGE{{Addr: dstMR.Addr(), Length: uint32(size), LKey: dstMR.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(emunic.SendWR{ID: 1, Op: emunic.OpSendImm, Imm: 0xAB, SGL: sge}); err != nil {
		t.Fatal(err)
	}
	if c := waitCQE(t, b.recvCQ); c.Status != emunic.StatusSuccess || c.ByteLen != uint32(size) || c.Imm != 0xAB {
		t.Fatalf("%v SEND: %+v", typ, c)
	}
	waitCQE(t, a.sendCQ)
	if !bytes.Equal(dst, src) {
		t.Fatalf("%v SEND: data differs", typ)
	}
	clear(dst)
	if err := qb.PostRecv(emunic.RecvWR{ID: 2}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(emunic.SendWR{ID: 2, Op: emunic.OpWriteImm, Imm: 0xCD, SGL: sge, RemoteAddr: dstMR.Addr(), RKey: dstMR.RKey()}); err != nil {
		t.Fatal(err)
	}
	if c := waitCQE(t, b.recvCQ); c.Status != emunic.StatusSuccess || c.Imm != 0xCD || c.ByteLen != uint32(size) {
		t.Fatalf("%v WRITE-Imm: %+v", typ, c)
	}
	waitCQE(t, a.sendCQ)
	if !bytes.Equal(dst, src) {
		t.Fatalf("%v WRITE-Imm: data differs", typ)
	}
	if typ != emunic.RC {
		return
	}
	back := make([]byte, size)
	backMR := a.mr(t, back)
	if err := qa.PostSend(emunic.SendWR{ID: 3, Op: emunic.OpRead, RemoteAddr: dstMR.Addr(), RKey: dstMR.RKey(),
		SGL: []emunic.SGE{{Addr: backMR.Addr(), Length: uint32(size), LKey: backMR.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if c := waitCQE(t, a.sendCQ); c.Status != emunic.StatusSuccess || c.Opcode != emunic.WCRead {
		t.Fatalf("READ: %+v", c)
	}
	if !bytes.Equal(back, src) {
		t.Fatal("READ: data differs")
	}
}

// startTcpdump captures RoCEv2 on the switch between the hosts (AF_XDP
// traffic bypasses the taps of the hosts' own interfaces) until stop is
// called.
func startTcpdump(t *testing.T, pair *testbed.Pair, path string) (stop func()) {
	t.Helper()
	stop, err := testbed.StartCapture(pair.WAN, pair.WANIf, path, "udp port 4791")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return stop
}

// checkCapture decodes a capture as `sdr pcap` does and expects RoCEv2
// packets, none malformed, none with a bad ICRC.
func checkCapture(t *testing.T, path string, minPackets int) {
	t.Helper()
	packets, err := wire.ReadPcapFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p wire.Packet
	roce := 0
	for i, c := range packets {
		err := p.DecodeCaptured(c.LinkType, c.Data)
		if errors.Is(err, wire.ErrNotRoCE) {
			continue
		}
		if err != nil {
			t.Errorf("%s: packet %d: %v", filepath.Base(path), i+1, err)
			continue
		}
		if !p.ICRCValid() {
			t.Errorf("%s: packet %d: bad ICRC", filepath.Base(path), i+1)
		}
		roce++
	}
	if roce < minPackets {
		t.Errorf("%s: %d RoCEv2 packets, want at least %d", filepath.Base(path), roce, minPackets)
	}
	if tshark, err := exec.LookPath("tshark"); err == nil {
		out, err := exec.Command(tshark, "-r", path, "-Y", "infiniband", "-T", "fields", "-e", "infiniband.bth.opcode").Output()
		if err != nil {
			t.Errorf("tshark on %s: %v", path, err)
		}
		if n := strings.Count(string(out), "\n"); n < minPackets {
			t.Errorf("tshark dissected %d RoCE packets in %s, want at least %d", n, filepath.Base(path), minPackets)
		}
	}
}

// TestXSKTrafficBesideKernelTraffic runs UC and RC traffic between two
// emunic devices on AF_XDP ports in two namespaces, while ping and a TCP
// connection between the same namespaces keep working, and checks both the
// devices' taps and a tcpdump of the wire.
func TestXSKTrafficBesideKernelTraffic(t *testing.T) {
	dir := t.TempDir()
	a, b, pair := newXSKPair(t, 1500, false, dir)
	static := func(from, to *xskHost) [6]byte { return to.MAC }
	stop := startTcpdump(t, pair, filepath.Join(dir, "wire.pcap"))

	// Kernel traffic alongside: a TCP echo and a ping.
	var ln net.Listener
	if err := b.NS.Do(func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(b.Addr.String(), "7777"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(c, c)
			c.Close()
		}
	}()
	var tcp net.Conn
	if err := a.NS.Do(func() (err error) {
		tcp, err = net.DialTimeout("tcp", net.JoinHostPort(b.Addr.String(), "7777"), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	var wg sync.WaitGroup
	var pingOut []byte
	var pingErr error
	wg.Go(func() {
		pingOut, pingErr = exec.Command("ip", "netns", "exec", a.NS.Name, "ping", "-c", "5", "-i", "0.2", "-W", "2", b.Addr.String()).CombinedOutput()
	})

	for _, typ := range []emunic.QPType{emunic.UC, emunic.RC} {
		qa, qb := a.qp(t, typ), b.qp(t, typ)
		connectQPs(t, a, qa, b, qb, 1024, static)
		for i, size := range []int{1, 1024, 1025, 64 << 10} {
			exchange(t, typ, a, qa, b, qb, size, byte(i))
		}
		// The TCP connection works between the RDMA transfers.
		msg := []byte(fmt.Sprintf("tcp beside %v", typ))
		tcp.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := tcp.Write(msg); err != nil {
			t.Fatal(err)
		}
		echo := make([]byte, len(msg))
		if _, err := io.ReadFull(tcp, echo); err != nil || !bytes.Equal(echo, msg) {
			t.Fatalf("TCP echo: %q, %v", echo, err)
		}
	}
	wg.Wait()
	if pingErr != nil || !strings.Contains(string(pingOut), " 0% packet loss") {
		t.Errorf("ping beside RDMA traffic: %v\n%s", pingErr, pingOut)
	}
	stop()

	for _, h := range []*xskHost{a, b} {
		c, err := h.port.Program().Counters()
		if err != nil {
			t.Fatal(err)
		}
		if c.Redirected == 0 || c.Passed == 0 || c.Malformed != 0 {
			t.Errorf("%s: XDP counters %+v", h.NS.Name, c)
		}
		st := h.dev.Stats()
		if st.Drops() != 0 {
			t.Errorf("%s: device drops: %v", h.NS.Name, st)
		}
		h.tap.Flush()
	}
	checkCapture(t, filepath.Join(dir, "wire.pcap"), 100)
	checkCapture(t, filepath.Join(dir, "emunic-a.pcap"), 100)
	checkCapture(t, filepath.Join(dir, "emunic-b.pcap"), 100)
}

// TestXSKMTUs runs RC and UC transfers at path MTU 2048 (1500-byte links
// are too small: 2048 B frames need a 2100-byte link MTU) and at 4096 with
// the frags program and multi-buffer AF_XDP.
func TestXSKMTUs(t *testing.T) {
	for _, c := range []struct {
		pathMTU, linkMTU int
		multiBuffer      bool
	}{{2048, 2200, false}, {4096, 4200, true}} {
		t.Run(fmt.Sprint(c.pathMTU), func(t *testing.T) {
			dir := t.TempDir()
			a, b, pair := newXSKPair(t, c.linkMTU, c.multiBuffer, dir)
			stop := startTcpdump(t, pair, filepath.Join(dir, "wire.pcap"))
			static := func(from, to *xskHost) [6]byte { return to.MAC }
			for _, typ := range []emunic.QPType{emunic.UC, emunic.RC} {
				qa, qb := a.qp(t, typ), b.qp(t, typ)
				connectQPs(t, a, qa, b, qb, c.pathMTU, static)
				for i, size := range []int{c.pathMTU - 1, c.pathMTU, c.pathMTU + 1, 256 << 10} {
					exchange(t, typ, a, qa, b, qb, size, byte(i))
				}
			}
			stop()
			checkCapture(t, filepath.Join(dir, "wire.pcap"), 100)
			var p wire.Packet
			packets, _ := wire.ReadPcapFile(filepath.Join(dir, "wire.pcap"))
			largest := 0
			for _, pk := range packets {
				if p.DecodeCaptured(pk.LinkType, pk.Data) == nil {
					largest = max(largest, len(p.Payload))
				}
			}
			if largest != c.pathMTU {
				t.Errorf("largest payload on the wire %d, want %d", largest, c.pathMTU)
			}
		})
	}
}

// TestResolveMAC finds the peer's MAC through the kernel's neighbour table.
func TestResolveMAC(t *testing.T) {
	a, b, _ := newXSKPair(t, 1500, false, "")
	var mac [6]byte
	if err := a.NS.Do(func() (err error) {
		mac, err = xsk.ResolveMAC(a.IfName, b.Addr, 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if mac != b.MAC {
		t.Errorf("resolved %x, want %x", mac, b.MAC)
	}
}
