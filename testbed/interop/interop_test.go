package interop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/ebpf"
	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/sdr"
	"github.com/sdr-rdma/sdr/testbed/testbedtest"
	"github.com/sdr-rdma/sdr/wire"
)

// TestMain fails the run if a test leaves a network namespace behind.
func TestMain(m *testing.M) { os.Exit(testbedtest.RunChecked(m)) }

// env is one booted guest and an emunic device next to it.
type env struct {
	net     *Network
	guest   *Guest
	host    *emunictest.Host // on an AF_XDP port beside the guest
	capture string
	stopCap func()
}

// setup builds the network, starts a capture on the bridge, opens the
// emunic device on an AF_XDP port and boots the guest. The interop suite
// runs only through `make interop` (SDR_INTEROP=1), which builds the guest
// first; once asked for, every failing step fails the test.
func setup(t *testing.T) *env { t.Helper(); return setupEnv(t, true) }

// setupEnv is setup, with emunic's AF_XDP port on the host side only when
// withHost is set (the conformance battery brings its own).
func setupEnv(t *testing.T, withHost bool) *env {
	t.Helper()
	if os.Getenv("SDR_INTEROP") == "" {
		t.Skip("interop with Linux Soft-RoCE runs with `make interop` (SDR_INTEROP=1): it boots a Debian guest under qemu")
	}
	privileged.Require(t)
	cache := os.Getenv("SDR_INTEROP_CACHE")
	if cache == "" {
		cache = "/var/cache/sdr-interop"
	}
	for _, f := range []string{"vmlinuz", "initrd.img", "root.img"} {
		if _, err := os.Stat(filepath.Join(cache, f)); err != nil {
			t.Fatalf("guest not built (run testbed/interop/build-guest.sh %s): %v", cache, err)
		}
	}
	e := &env{}
	var err error
	if e.net, err = NewNetwork(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.net.Close(); err != nil {
			t.Error(err)
		}
	})
	e.capture = filepath.Join(t.TempDir(), "bridge.pcap")
	e.stopCap = startCapture(t, e.net, e.capture)
	if withHost {
		e.host = emunictest.NewXSKHost(t, e.net.Host, xsk.PortConfig{}, nil)
	}
	console, err := os.Create(filepath.Join(t.TempDir(), "console.log"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.guest, err = BootGuest(GuestConfig{Cache: cache, Netns: e.net.QEMU.Name, Tap: e.net.Tap,
		Addr: e.net.GuestPrefix, MAC: e.net.GuestMAC, Console: console}, 300*time.Second)
	if err != nil {
		out, _ := os.ReadFile(console.Name())
		t.Fatalf("%v\nconsole:\n%s", err, out)
	}
	t.Logf("guest booted in %v", time.Since(start).Round(100*time.Millisecond))
	t.Cleanup(func() {
		if err := e.guest.Close(); err != nil {
			t.Error(err)
		}
		if e.guest.Killed {
			out, _ := os.ReadFile(console.Name())
			t.Logf("the guest did not power off within 30 s; qemu was killed. Console tail:\n%s", tail(string(out), 15))
		}
	})
	return e
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// startCapture runs tcpdump on the bridge port toward emunic, which every
// frame between the guest and emunic crosses. (A capture on the bridge
// device itself misses unicast frames the bridge forwards between ports.)
func startCapture(t *testing.T, n *Network, path string) func() {
	t.Helper()
	stop, err := hostnet.StartCapture(n.QEMU, n.HostPort, path, "udp port 4791")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return stop
}

// checkCapture expects RoCEv2 packets, all well-formed with good ICRCs,
// and logs how many went each way.
func checkCapture(t *testing.T, path string) int {
	t.Helper()
	packets, err := wire.ReadPcapFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p wire.Packet
	n := 0
	perSource := map[string]int{}
	defer func() { t.Logf("capture: %d RoCEv2 packets, by source %v", n, perSource) }()
	for i, c := range packets {
		err := p.DecodeCaptured(c.LinkType, c.Data)
		if errors.Is(err, wire.ErrNotRoCE) {
			continue
		}
		if err != nil {
			t.Errorf("packet %d: %v", i+1, err)
			continue
		}
		if !p.ICRCValid() {
			t.Errorf("packet %d (%v): bad ICRC", i+1, p.Opcode())
		}
		perSource[p.IPv4.Src().String()]++
		n++
	}
	return n
}

// TestPingPong runs ibv_{rc,uc,ud}_pingpong in the guest against emunic,
// with the guest as server and as client, data validated on both sides.
func TestPingPong(t *testing.T) {
	e := setup(t)
	peerMAC := guestMAC(e.net)
	for _, c := range []struct {
		typ  emunic.QPType
		tool string
		size int
	}{{emunic.RC, "ibv_rc_pingpong", 3000}, {emunic.UC, "ibv_uc_pingpong", 3000}, {emunic.UD, "ibv_ud_pingpong", 512}} {
		for _, guestServer := range []bool{true, false} {
			name := fmt.Sprintf("%s/guest-server=%v", c.tool, guestServer)
			pp := &PingPong{Type: c.typ, Size: c.size, Iters: 5, MTU: 1024, Peer: e.net.GuestAddr, PeerMAC: peerMAC,
				Server: !guestServer, Validate: true}
			cmd := fmt.Sprintf("%s -d rxe0 -g 1 -s %d -n %d -c", c.tool, c.size, pp.Iters)
			if c.typ != emunic.UD { // ibv_ud_pingpong has no -m: UD uses the port's MTU
				cmd += " -m 1024"
			}
			if !guestServer {
				cmd += " " + e.net.Host.Addr.String()
			}
			runBoth(t, e, name, cmd, guestServer, func() error { return pp.Run(e.host.Dev, 60*time.Second) })
		}
	}
	e.stopCap()
	if n := checkCapture(t, e.capture); n < 3*2*2*5 {
		t.Errorf("%d RoCEv2 packets captured", n)
	}
}

// buildVerbs compiles verbs/sdr_verbs.c against the host's libibverbs-dev
// (the guest runs the same Debian release) and copies it into the guest.
func buildVerbs(t *testing.T, g *Guest) { t.Helper(); buildProgram(t, g, "sdr_verbs") }

// buildProgram compiles verbs/NAME.c as buildVerbs does and copies it into
// the guest as /spool/NAME.
func buildProgram(t *testing.T, g *Guest, name string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("gcc", "-O2", "-Wall", "-o", bin, "verbs/"+name+".c", "-libverbs").CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.CopyIn(name, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

func guestMAC(n *Network) [6]byte {
	var mac [6]byte
	fmt.Sscanf(n.GuestMAC, "%x:%x:%x:%x:%x:%x", &mac[0], &mac[1], &mac[2], &mac[3], &mac[4], &mac[5])
	return mac
}

// runBoth runs the guest's command and emunic's side together and reports
// failures of either.
func runBoth(t *testing.T, e *env, name, guestCmd string, guestFirst bool, ours func() error) {
	t.Helper()
	result := make(chan error, 1)
	go func() { result <- e.net.Host.NS.Do(ours) }()
	if !guestFirst {
		time.Sleep(300 * time.Millisecond) // our server listens first
	}
	out, code, err := e.guest.Run(guestCmd, 90*time.Second)
	if err != nil || code != 0 {
		stats, _, _ := e.guest.Run("rdma statistic show link rxe0/1", 10*time.Second)
		t.Errorf("%s: guest exit %d, %v\n%s\nguest rxe counters: %s", name, code, err, out, stats)
	}
	if err := <-result; err != nil {
		t.Errorf("%s: emunic side: %v", name, err)
	}
}

// TestVerbsOperations runs RDMA WRITE, WRITE-with-Imm, READ (RC), SEND and
// SEND-with-Imm between sdr_verbs in the guest and emunic, on RC and UC,
// each side active in turn, checking data and immediates on both sides.
func TestVerbsOperations(t *testing.T) {
	e := setup(t)
	buildVerbs(t, e.guest)
	for _, typ := range []emunic.QPType{emunic.RC, emunic.UC} {
		for _, op := range []string{"write", "write_imm", "read", "send", "send_imm"} {
			if op == "read" && typ == emunic.UC {
				continue
			}
			for _, guestActive := range []bool{true, false} {
				v := &Verbs{Type: typ, Op: op, Size: 3000, Iters: 4, MTU: 1024, Peer: e.net.GuestAddr,
					PeerMAC: guestMAC(e.net), Active: !guestActive}
				cmd := fmt.Sprintf("/spool/sdr_verbs -t %s -o %s -s %d -n %d", strings.ToLower(typ.String()), op, v.Size, v.Iters)
				if guestActive {
					cmd += " " + e.net.Host.Addr.String()
				}
				runBoth(t, e, fmt.Sprintf("%v %s guest-active=%v", typ, op, guestActive), cmd, !guestActive,
					func() error { return v.Run(e.host.Dev, 60*time.Second) })
			}
		}
	}
	e.stopCap()
	if n := checkCapture(t, e.capture); n < 18*4*3 {
		t.Errorf("%d RoCEv2 packets captured", n)
	}
}

// TestRCRecovery drops 10% of RoCE frames in each direction (XDP fault
// injection at emunic's ingress, and the steering program with injection
// on the bridge port toward emunic for the other direction; frames it
// drops never reach the capture there): rxe and
// emunic recover each other's losses with NAKs, go-back-N and timeouts,
// and every RC operation still completes with the right data.
func TestRCRecovery(t *testing.T) {
	e := setup(t)
	buildVerbs(t, e.guest)
	if err := e.host.XSK.Program().SetDropProbability(0.1); err != nil {
		t.Fatal(err)
	}
	var toGuest *ebpf.Program
	if err := e.net.QEMU.Do(func() error {
		var err error
		if toGuest, err = ebpf.Load(ebpf.Options{AllRoCE: true, DropProbability: 0.1}); err != nil {
			return err
		}
		iface, err := net.InterfaceByName(e.net.HostPort)
		if err != nil {
			return err
		}
		return toGuest.Attach(iface.Index)
	}); err != nil {
		t.Fatal(err)
	}
	defer toGuest.Close()
	for _, op := range []string{"write", "send_imm", "read"} {
		for _, guestActive := range []bool{true, false} {
			v := &Verbs{Type: emunic.RC, Op: op, Size: 3000, Iters: 20, MTU: 1024, Peer: e.net.GuestAddr,
				PeerMAC: guestMAC(e.net), Active: !guestActive}
			cmd := fmt.Sprintf("/spool/sdr_verbs -t rc -o %s -s %d -n %d", op, v.Size, v.Iters)
			if guestActive {
				cmd += " " + e.net.Host.Addr.String()
			}
			runBoth(t, e, fmt.Sprintf("RC %s guest-active=%v with loss", op, guestActive), cmd, !guestActive,
				func() error { return v.Run(e.host.Dev, 120*time.Second) })
		}
	}
	toEmunic, _ := e.host.XSK.Program().Counters()
	lost, _ := toGuest.Counters()
	st := e.host.Dev.Stats()
	stats, _, _ := e.guest.Run("rdma statistic show link rxe0/1", 10*time.Second)
	t.Logf("dropped toward emunic %d, toward the guest %d; emunic: %d retransmitted, %d timeouts, %d NAKs received, %d NAKs sent, %d duplicates; rxe: %s",
		toEmunic.Dropped, lost.Dropped, st.Get(emunic.TxRetransmits), st.Get(emunic.Timeouts), st.Get(emunic.RxNAKs),
		st.Get(emunic.TxNAKs), st.Get(emunic.RxDuplicate), strings.TrimSpace(stats))
	if toEmunic.Dropped == 0 || lost.Dropped == 0 || st.Get(emunic.TxRetransmits) == 0 {
		t.Error("the loss left no trace: no drops or no retransmissions")
	}
	e.stopCap()
	checkCapture(t, e.capture)
}

// TestSDRMessages sends SDR messages between the guest's sdr_verbs (plain
// libibverbs, exactly the SDK's wire format) and emunic's SDK: the guest's
// messages complete in emunic receive handles (every chunk, the immediate,
// the data), and emunic's land in the guest's region with the right
// per-packet immediates.
func TestSDRMessages(t *testing.T) {
	e := setup(t)
	buildVerbs(t, e.guest)
	const (
		channels = 4
		size     = 64 << 10
		msgs     = 4
		imm      = 0xDEADBEEF
	)
	newQP := func(send bool) (*sdr.Context, *sdr.QP) {
		sc, err := sdr.Open(sdrnic.New(e.host.Dev, sdrnic.Options{}), sdr.DeviceAttr{Channels: channels})
		if err != nil {
			t.Fatal(err)
		}
		qp, err := sc.NewQP(sdr.QPAttr{MTU: 1024, ChunkSize: 16 << 10, MaxMessages: 4, MaxInFlightBytes: 4 * size,
			Generations: 1, Send: send, Recv: !send})
		if err != nil {
			t.Fatal(err)
		}
		return sc, qp
	}

	// Guest sends, emunic receives.
	rsc, rqp := newQP(false)
	defer rsc.Close()
	region := make([]byte, msgs*size)
	rmr, err := rsc.RegisterMemory(region)
	if err != nil {
		t.Fatal(err)
	}
	var handles []*sdr.RecvHandle
	runBoth(t, e, "guest sdr_send -> emunic", fmt.Sprintf("/spool/sdr_verbs -o sdr_send -c %d -s %d -n %d -i %#x %s",
		channels, size, msgs, imm, e.net.Host.Addr), false, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		peer := &SDRPeer{QP: rqp, Peer: e.net.GuestAddr, PeerMAC: guestMAC(e.net)}
		conn, err := peer.Connect(ctx, e.net.Host.Addr, func() error {
			for m := range msgs {
				h, err := rqp.PostRecv(rmr, m*size, size)
				if err != nil {
					return err
				}
				handles = append(handles, h)
			}
			return nil
		})
		if err != nil {
			return err
		}
		defer conn.Close()
		for m, h := range handles {
			for !h.Done() {
				if err := h.Wait(ctx); err != nil {
					return fmt.Errorf("message %d: %d of %d chunks: %w", m, h.CompleteChunks(), h.Chunks(), err)
				}
			}
			if got, ok := h.Imm(); !ok || got != imm {
				return fmt.Errorf("message %d: immediate %#x complete %v", m, got, ok)
			}
			if string(region[m*size:(m+1)*size]) != string(verbsPattern(size)) {
				return fmt.Errorf("message %d: data differs", m)
			}
		}
		done := make([]byte, 5)
		_, err = io.ReadFull(conn, done)
		return err
	})

	// emunic sends, the guest receives and checks every packet's immediate.
	ssc, sqp := newQP(true)
	defer ssc.Close()
	smr, err := ssc.RegisterMemory(verbsPattern(size))
	if err != nil {
		t.Fatal(err)
	}
	runBoth(t, e, "emunic -> guest sdr_recv", fmt.Sprintf("/spool/sdr_verbs -o sdr_recv -c %d -s %d -n %d -i %#x",
		channels, size, msgs, imm), true, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		peer := &SDRPeer{QP: sqp, Peer: e.net.GuestAddr, PeerMAC: guestMAC(e.net), Active: true}
		conn, err := peer.Connect(ctx, e.net.Host.Addr, nil)
		if err != nil {
			return err
		}
		defer conn.Close()
		for range msgs {
			if _, err := sqp.PostSend(sdr.SendRequest{MR: smr, Length: size, Imm: imm, HasImm: true}); err != nil {
				return err
			}
		}
		_, err = conn.Write([]byte("done\x00"))
		return err
	})
	e.stopCap()
	if n := checkCapture(t, e.capture); n < 2*msgs*size/1024 {
		t.Errorf("%d RoCEv2 packets captured, want at least %d", n, 2*msgs*size/1024)
	}
}
