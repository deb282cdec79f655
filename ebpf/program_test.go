package ebpf_test

import (
	"math"
	"net/netip"
	"testing"

	"github.com/sdr-rdma/sdr/ebpf"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/wire"
)

// XDP actions.
const (
	xdpDrop     = 1
	xdpPass     = 2
	xdpRedirect = 4
)

func roceFrame(t *testing.T, v6 bool, qpn uint32, vlan bool) []byte {
	t.Helper()
	f := wire.Fields{SrcIP: netip.MustParseAddr("10.77.0.2"), DstIP: netip.MustParseAddr("10.77.0.3"),
		TTL: 64, DontFragment: true, SrcPort: wire.SourcePort(qpn, qpn), HasVLAN: vlan, VLANTCI: 5}
	if v6 {
		f.SrcIP, f.DstIP, f.DontFragment = netip.MustParseAddr("fd00::2"), netip.MustParseAddr("fd00::3"), false
	}
	return encode(t, f, qpn)
}

// encode builds a UC WRITE ONLY with Immediate frame to qpn with f's
// framing.
func encode(t *testing.T, f wire.Fields, qpn uint32) []byte {
	t.Helper()
	f.BTH = wire.BTHFields{Opcode: wire.UCWriteOnlyImm, PKey: 0xFFFF, DestQP: qpn, PSN: 1}
	f.Payload = make([]byte, 64)
	buf := make([]byte, f.Len())
	n, err := wire.Encode(buf, &f)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// loadWithSocket loads the program and registers an AF_XDP socket bound
// to the loopback of a scratch namespace for queue 0, so that redirects
// have a target.
func loadWithSocket(t *testing.T, opts ebpf.Options) *ebpf.Program {
	t.Helper()
	privileged.Require(t)
	p, err := ebpf.Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ns, err := hostnet.NewNamespace("xdptest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	var sock *xsk.Socket
	if err := ns.Do(func() (err error) {
		sock, err = xsk.Open(xsk.Config{Ifindex: 1, Queue: 0, Mode: xsk.Copy, NumFrames: 64, RingSize: 32})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sock.Close() })
	if err := p.SetSocket(0, sock.FD()); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSteering(t *testing.T) {
	p := loadWithSocket(t, ebpf.Options{})
	const ours, theirs = 0x47, 0x99
	if err := p.AddQP(ours, netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	ipv4 := roceFrame(t, false, ours, false)
	arp := append(make([]byte, 12), 0x08, 0x06)
	arp = append(arp, make([]byte, 28)...)
	otherPort := append([]byte(nil), ipv4...)
	otherPort[14+20+2], otherPort[14+20+3] = 0x00, 0x35 // UDP 53
	fragment := append([]byte(nil), ipv4...)
	fragment[14+6] |= 0x20 // MF
	tcp := append([]byte(nil), ipv4...)
	tcp[14+9] = 6
	v4UnderV6 := roceFrame(t, true, ours, false)
	v4UnderV6[14] = 0x45 // an IPv4 version nibble under the IPv6 ethertype
	cases := []steerCase{
		{"IPv4 RoCE for our QP", ipv4, xdpRedirect, func(c ebpf.Counters) uint64 { return c.Redirected }},
		{"IPv6 RoCE for our QP", roceFrame(t, true, ours, false), xdpRedirect, func(c ebpf.Counters) uint64 { return c.Redirected }},
		{"VLAN-tagged RoCE", roceFrame(t, false, ours, true), xdpRedirect, func(c ebpf.Counters) uint64 { return c.Redirected }},
		{"RoCE for another QP", roceFrame(t, false, theirs, false), xdpPass, func(c ebpf.Counters) uint64 { return c.NotOurs }},
		{"ARP", arp, xdpPass, func(c ebpf.Counters) uint64 { return c.Passed }},
		{"other UDP port", otherPort, xdpPass, func(c ebpf.Counters) uint64 { return c.Passed }},
		{"TCP", tcp, xdpPass, func(c ebpf.Counters) uint64 { return c.Passed }},
		{"IP fragment", fragment, xdpPass, func(c ebpf.Counters) uint64 { return c.Passed }},
		{"truncated BTH", ipv4[:14+20+8+6], xdpPass, func(c ebpf.Counters) uint64 { return c.Malformed }},
		{"truncated IP header", ipv4[:14+10], xdpPass, func(c ebpf.Counters) uint64 { return c.Malformed }},
		{"IPv4 header under the IPv6 ethertype", v4UnderV6, xdpPass, func(c ebpf.Counters) uint64 { return c.Malformed }},
		// BPF_PROG_TEST_RUN refuses frames shorter than an Ethernet
		// header, so the shortest case is a bare Ethernet header.
		{"Ethernet header only", ipv4[:14], xdpPass, func(c ebpf.Counters) uint64 { return c.Malformed }},
	}
	runCases(t, p, cases)
	// Removing the QP stops the steering; all-RoCE mode steers any QP.
	if err := p.RemoveQP(ours); err != nil {
		t.Fatal(err)
	}
	if action, _ := p.Run(ipv4, 1); action != xdpPass {
		t.Errorf("removed QP: action %d", action)
	}
	if err := p.SetAllRoCE(true); err != nil {
		t.Fatal(err)
	}
	if action, _ := p.Run(roceFrame(t, false, theirs, false), 1); action != xdpRedirect {
		t.Errorf("all-RoCE mode: action %d", action)
	}
}

// TestFaultInjection drops the configured fraction of steered frames,
// within three standard deviations over 200k frames.
func TestFaultInjection(t *testing.T) {
	for _, frags := range []bool{false, true} {
		p := loadWithSocket(t, ebpf.Options{AllRoCE: true, DropProbability: 0.1, Frags: frags})
		frame := roceFrame(t, false, 0x47, false)
		const n = 200000
		before, _ := p.Counters()
		if _, err := p.Run(frame, n); err != nil {
			t.Fatal(err)
		}
		after, _ := p.Counters()
		dropped := float64(after.Dropped - before.Dropped)
		mean, sigma := n*0.1, math.Sqrt(n*0.1*0.9)
		if math.Abs(dropped-mean) > 3*sigma {
			t.Errorf("frags=%v: dropped %v of %d, want %v ± %.0f", frags, dropped, n, mean, 3*sigma)
		}
		if got := after.Redirected - before.Redirected; float64(got)+dropped != n {
			t.Errorf("frags=%v: %d redirected + %v dropped != %d", frags, got, dropped, n)
		}
	}
}

// TestAllFrames steers every frame in all-frames mode — ARP and a
// bare Ethernet header included, which the default mode passes to the kernel —
// and nothing beyond RoCEv2 once the mode is off again.
func TestAllFrames(t *testing.T) {
	p := loadWithSocket(t, ebpf.Options{AllFrames: true})
	arp := make([]byte, 60)
	copy(arp, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x08, 0x06})
	for name, frame := range map[string][]byte{"arp": arp, "roce": roceFrame(t, false, 0x99, false), "bare header": arp[:14]} {
		before, _ := p.Counters()
		if action, err := p.Run(frame, 1); err != nil || action != xdpRedirect {
			t.Errorf("%s: action %d, %v; want redirect", name, action, err)
		}
		if after, _ := p.Counters(); after.Redirected != before.Redirected+1 {
			t.Errorf("%s: counters %+v -> %+v", name, before, after)
		}
	}
	p2 := loadWithSocket(t, ebpf.Options{})
	if action, _ := p2.Run(arp, 1); action != xdpPass {
		t.Errorf("default mode: ARP action %d, want pass", action)
	}
}

// TestFilters drops steered frames a NIC would refuse, counting each
// reason: those sent to another unicast or a multicast MAC, and those for a
// connected QP from any address but its peer's (IPv4 and IPv6); broadcast
// and a UD QP's frames from anyone pass. Frames the program does not steer
// (another QP's) still go to the kernel, whatever their MAC.
func TestFilters(t *testing.T) {
	mac := [6]byte{2, 0, 0, 0, 0, 3}
	p := loadWithSocket(t, ebpf.Options{MAC: mac})
	const rc, ud, rc6, theirs = 0x1234, 0x5678, 0x9ABC, 0x99
	peer, peer6 := netip.MustParseAddr("10.77.0.2"), netip.MustParseAddr("fd00::2")
	for qpn, addr := range map[uint32]netip.Addr{rc: peer, ud: {}, rc6: peer6} {
		if err := p.AddQP(qpn, addr); err != nil {
			t.Fatal(err)
		}
	}
	frame := func(src netip.Addr, dst [6]byte, qpn uint32) []byte {
		f := wire.Fields{SrcIP: src, DstIP: netip.MustParseAddr("10.77.0.3"), DstMAC: dst, TTL: 64, SrcPort: 0xC000}
		if src.Is6() {
			f.DstIP = netip.MustParseAddr("fd00::3")
		}
		return encode(t, f, qpn)
	}
	stranger, stranger6 := netip.MustParseAddr("10.77.0.9"), netip.MustParseAddr("fd00::9")
	broadcast, multicast, other := [6]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, [6]byte{1, 0, 0x5E, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 9}
	redirected := func(c ebpf.Counters) uint64 { return c.Redirected }
	wrongMAC := func(c ebpf.Counters) uint64 { return c.WrongMAC }
	wrongPeer := func(c ebpf.Counters) uint64 { return c.WrongPeer }
	cases := []steerCase{
		{"from the peer", frame(peer, mac, rc), xdpRedirect, redirected},
		{"from the IPv6 peer", frame(peer6, mac, rc6), xdpRedirect, redirected},
		{"broadcast from the peer", frame(peer, broadcast, rc), xdpRedirect, redirected},
		{"UD from anyone", frame(stranger, mac, ud), xdpRedirect, redirected},
		{"from a stranger", frame(stranger, mac, rc), xdpDrop, wrongPeer},
		{"from an IPv6 stranger", frame(stranger6, mac, rc6), xdpDrop, wrongPeer},
		{"IPv4 to an IPv6 peer's QP", frame(peer, mac, rc6), xdpDrop, wrongPeer},
		{"to another MAC", frame(peer, other, rc), xdpDrop, wrongMAC},
		{"to a multicast MAC", frame(peer, multicast, ud), xdpDrop, wrongMAC},
		{"another QP to another MAC", frame(peer, other, theirs), xdpPass, func(c ebpf.Counters) uint64 { return c.NotOurs }},
	}
	runCases(t, p, cases)
	// Re-adding a QP replaces its peer.
	if err := p.AddQP(rc, stranger); err != nil {
		t.Fatal(err)
	}
	if action, _ := p.Run(frame(stranger, mac, rc), 1); action != xdpRedirect {
		t.Errorf("after the peer changed: action %d, want redirect", action)
	}
}

// steerCase is a frame, the XDP action it must get, and the counter that
// action must move by one.
type steerCase struct {
	name    string
	frame   []byte
	action  uint32
	counter func(c ebpf.Counters) uint64
}

// runCases runs each case's frame through p once and checks its action,
// its counter and Seen.
func runCases(t *testing.T, p *ebpf.Program, cases []steerCase) {
	t.Helper()
	for _, c := range cases {
		before, err := p.Counters()
		if err != nil {
			t.Fatal(err)
		}
		action, err := p.Run(c.frame, 1)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		after, _ := p.Counters()
		if action != c.action {
			t.Errorf("%s: action %d, want %d", c.name, action, c.action)
		}
		if c.counter(after) != c.counter(before)+1 || after.Seen != before.Seen+1 {
			t.Errorf("%s: counters %+v -> %+v", c.name, before, after)
		}
	}
}
