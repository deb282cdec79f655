package xsk_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/testbed/testbedtest"
	"github.com/sdr-rdma/sdr/wire"
)

// newXSKPair builds two namespaces joined by a switch with an emunic host
// on an AF_XDP port in each; with dir set, the devices' pcap taps write to
// emunic-a.pcap and emunic-b.pcap there (call flush before reading them).
func newXSKPair(t testing.TB, mtu int, dir string) (a, b *emunictest.Host, pair *hostnet.Pair, flush func()) {
	t.Helper()
	return newXSKPairOn(t, hostnet.PairConfig{MTU: mtu, Switched: true}, dir)
}

// newXSKPairOn is newXSKPair on the network cfg describes.
func newXSKPairOn(t testing.TB, cfg hostnet.PairConfig, dir string) (a, b *emunictest.Host, pair *hostnet.Pair, flush func()) {
	t.Helper()
	privileged.Require(t)
	pair, err := hostnet.NewPair(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pair.Close(); err != nil {
			t.Error(err)
		}
	})
	var hosts []*emunictest.Host
	var taps []*wire.PcapWriter
	for i, h := range []*hostnet.Host{pair.A, pair.B} {
		var tap *wire.PcapWriter
		if dir != "" {
			if tap, err = wire.CreatePcap(filepath.Join(dir, fmt.Sprintf("emunic-%c.pcap", 'a'+i))); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tap.Close() }) // after the device's close, registered later
			taps = append(taps, tap)
		}
		hosts = append(hosts, emunictest.NewXSKHost(t, h, xsk.PortConfig{}, tap))
	}
	return hosts[0], hosts[1], pair, func() {
		for _, tap := range taps {
			if err := tap.Flush(); err != nil {
				t.Error(err)
			}
		}
	}
}

// rcRetry lets RC recover a frame the copy-mode rings dropped.
var rcRetry = emunic.QPAttr{Timeout: 50 * time.Millisecond, RetryCount: 7}

// exchange runs SEND, WRITE-with-Imm and (RC) READ of size bytes from a to
// b over connected QPs and checks data, immediates and completions.
func exchange(t *testing.T, typ emunic.QPType, a *emunictest.Host, qa *emunic.QP, b *emunictest.Host, qb *emunic.QP, size int, seed uint64) {
	t.Helper()
	src := emunictest.Pattern(size, seed)
	srcMR := a.MR(t, bytes.Clone(src))
	dst := make([]byte, size)
	dstMR := b.MR(t, dst)
	sge := []emunic.SGE{{Addr: srcMR.Addr(), Length: uint32(size), LKey: srcMR.LKey()}}

	if err := qb.PostRecv(emunic.RecvWR{ID: 1, SGL: []emunic.SGE{{Addr: dstMR.Addr(), Length: uint32(size), LKey: dstMR.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(emunic.SendWR{ID: 1, Op: emunic.OpSendImm, Imm: 0xAB, SGL: sge}); err != nil {
		t.Fatal(err)
	}
	if c := emunictest.WaitCQE(t, b.RecvCQ); c.Status != emunic.StatusSuccess || c.ByteLen != uint32(size) || c.Imm != 0xAB {
		t.Fatalf("%v SEND: %+v", typ, c)
	}
	emunictest.WaitCQE(t, a.SendCQ)
	emunictest.Verify(t, fmt.Sprintf("%v SEND", typ), dst, src)
	clear(dst)
	if err := qb.PostRecv(emunic.RecvWR{ID: 2}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSend(emunic.SendWR{ID: 2, Op: emunic.OpWriteImm, Imm: 0xCD, SGL: sge, RemoteAddr: dstMR.Addr(), RKey: dstMR.RKey()}); err != nil {
		t.Fatal(err)
	}
	if c := emunictest.WaitCQE(t, b.RecvCQ); c.Status != emunic.StatusSuccess || c.Imm != 0xCD || c.ByteLen != uint32(size) {
		t.Fatalf("%v WRITE-Imm: %+v", typ, c)
	}
	emunictest.WaitCQE(t, a.SendCQ)
	emunictest.Verify(t, fmt.Sprintf("%v WRITE-Imm", typ), dst, src)
	if typ != emunic.RC {
		return
	}
	back := make([]byte, size)
	backMR := a.MR(t, back)
	if err := qa.PostSend(emunic.SendWR{ID: 3, Op: emunic.OpRead, RemoteAddr: dstMR.Addr(), RKey: dstMR.RKey(),
		SGL: []emunic.SGE{{Addr: backMR.Addr(), Length: uint32(size), LKey: backMR.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	if c := emunictest.WaitCQE(t, a.SendCQ); c.Status != emunic.StatusSuccess || c.Opcode != emunic.WCRead {
		t.Fatalf("READ: %+v", c)
	}
	emunictest.Verify(t, "READ", back, src)
}

// startTcpdump captures RoCEv2 on the switch between the hosts (AF_XDP
// traffic bypasses the taps of the hosts' own interfaces) until stop is
// called.
func startTcpdump(t *testing.T, pair *hostnet.Pair, path string) (stop func()) {
	t.Helper()
	stop, err := hostnet.StartCapture(pair.WAN, pair.WANIf, path, "udp port 4791")
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
	if tshark, ok := privileged.OptionalTool(t, "tshark", "the Wireshark cross-check of the capture"); ok {
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
	a, b, pair, flush := newXSKPair(t, 1500, dir)
	stop := startTcpdump(t, pair, filepath.Join(dir, "wire.pcap"))

	// Kernel traffic alongside: a TCP echo and a ping.
	tcp := testbedtest.EchoConn(t, a.Net, b.Net)
	var wg sync.WaitGroup
	var pingOut []byte
	var pingErr error
	wg.Go(func() {
		pingOut, pingErr = exec.Command("ip", "netns", "exec", a.Net.NS.Name, "ping", "-c", "5", "-i", "0.2", "-W", "2", b.Net.Addr.String()).CombinedOutput()
	})

	for _, typ := range []emunic.QPType{emunic.UC, emunic.RC} {
		qa, qb := a.QP(t, typ), b.QP(t, typ)
		emunictest.Connect(t, a, qa, b, qb, 1024, rcRetry)
		for i, size := range []int{1, 1024, 1025, 64 << 10} {
			exchange(t, typ, a, qa, b, qb, size, uint64(i))
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

	flush()
	for _, h := range []*emunictest.Host{a, b} {
		c, err := h.XSK.Program().Counters()
		if err != nil {
			t.Fatal(err)
		}
		if c.Redirected == 0 || c.Passed == 0 || c.Malformed != 0 {
			t.Errorf("%s: XDP counters %+v", h.Net.NS.Name, c)
		}
		st := h.Dev.Stats()
		if st.Drops() != 0 {
			t.Errorf("%s: device drops: %v", h.Net.NS.Name, st)
		}
	}
	checkCapture(t, filepath.Join(dir, "wire.pcap"), 100)
	checkCapture(t, filepath.Join(dir, "emunic-a.pcap"), 100)
	checkCapture(t, filepath.Join(dir, "emunic-b.pcap"), 100)
}

// TestXSKMTUs runs RC and UC transfers at path MTU 2048 (1500-byte links
// are too small: a 2048-byte path MTU needs a 2144-byte link MTU) and at 4096,
// on links of just the MTU they need and on jumbo-frame links: the port
// chooses multi-buffer AF_XDP (and the frags program) where a frame may
// not fit one 4 KiB chunk, and the device's active MTU follows the link's.
func TestXSKMTUs(t *testing.T) {
	for _, c := range []struct {
		pathMTU, linkMTU int
		multiBuffer      bool
	}{{2048, 2144, false}, {4096, 4192, true}, {2048, 9000, true}, {4096, 9000, true}} {
		t.Run(fmt.Sprintf("%d/link%d", c.pathMTU, c.linkMTU), func(t *testing.T) {
			dir := t.TempDir()
			a, b, pair, _ := newXSKPair(t, c.linkMTU, dir)
			for _, h := range []*emunictest.Host{a, b} {
				if h.XSK.MultiBuffer() != c.multiBuffer || h.XSK.MTU() != c.linkMTU || h.Dev.ActiveMTU() < c.pathMTU {
					t.Fatalf("port on a %d-byte MTU: multi-buffer %v, MTU %d, active MTU %d; want multi-buffer %v, MTU %d, active MTU ≥ %d",
						c.linkMTU, h.XSK.MultiBuffer(), h.XSK.MTU(), h.Dev.ActiveMTU(), c.multiBuffer, c.linkMTU, c.pathMTU)
				}
			}
			stop := startTcpdump(t, pair, filepath.Join(dir, "wire.pcap"))
			for _, typ := range []emunic.QPType{emunic.UC, emunic.RC} {
				qa, qb := a.QP(t, typ), b.QP(t, typ)
				emunictest.Connect(t, a, qa, b, qb, c.pathMTU, rcRetry)
				for i, size := range []int{c.pathMTU - 1, c.pathMTU, c.pathMTU + 1, 256 << 10} {
					exchange(t, typ, a, qa, b, qb, size, uint64(i))
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
	for _, subnet := range []string{"10.77.0.0/24", "fd00:77::/64"} {
		t.Run(subnet, func(t *testing.T) {
			// Over IPv6 the kernel solicits the neighbour (NDP), which the
			// XDP program passes to it on both sides.
			a, b, _, _ := newXSKPairOn(t, hostnet.PairConfig{Subnet: netip.MustParsePrefix(subnet), Switched: true}, "")
			var mac [6]byte
			if err := a.Net.NS.Do(func() (err error) {
				mac, err = xsk.ResolveMAC(a.Net.IfName, b.Net.Addr, 5*time.Second)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if mac != b.Net.MAC {
				t.Errorf("resolved %x, want %x", mac, b.Net.MAC)
			}
		})
	}
}

// TestPortQueues binds a port to every queue of a four-queue veth and
// refuses one that would leave queues without a socket, naming the fix.
func TestPortQueues(t *testing.T) {
	privileged.Require(t)
	pair, err := hostnet.NewPair(hostnet.PairConfig{Queues: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	err = pair.A.NS.Do(func() error {
		n, err := xsk.QueueCount(pair.A.IfName)
		if err != nil || n != 4 {
			t.Errorf("QueueCount: %d, %v; want 4", n, err)
		}
		p, err := xsk.NewPort(xsk.PortConfig{Interface: pair.A.IfName})
		if err != nil {
			return err
		}
		if p.Queues() != 4 || len(p.QueueFrames()) != 4 {
			t.Errorf("port binds %d queues, counts %d; want 4", p.Queues(), len(p.QueueFrames()))
		}
		if err := p.Close(); err != nil {
			return err
		}
		_, err = xsk.NewPort(xsk.PortConfig{Interface: pair.A.IfName, Queues: 2})
		if !errors.Is(err, xsk.ErrQueues) || !strings.Contains(err.Error(), "ethtool -L veth0 combined 2") {
			t.Errorf("two of four queues: %v; want ErrQueues naming ethtool -L", err)
		} else {
			t.Logf("refused: %v", err)
		}
		p, err = xsk.NewPort(xsk.PortConfig{Interface: pair.A.IfName, Queues: 2, Steered: true})
		if err != nil {
			return fmt.Errorf("two steered queues: %w", err)
		}
		return p.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}
