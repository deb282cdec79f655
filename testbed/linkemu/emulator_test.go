package linkemu_test

import (
	"io"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/testbed/link"
	"github.com/sdr-rdma/sdr/testbed/linkemu"
)

// newTopology builds a topology for the test and closes it when the test
// ends.
func newTopology(t testing.TB, cfg linkemu.TopologyConfig) *linkemu.Topology {
	t.Helper()
	privileged.Require(t)
	topo, err := linkemu.NewTopology(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := topo.Close(); err != nil {
			t.Error(err)
		}
	})
	return topo
}

// TestPingAndTCP pings across a 10 ms link each way, ARP included (no
// static neighbours), and echoes over a TCP connection: the ping's RTT
// shows both delays, the echo that TCP's checksums survive the detour.
func TestPingAndTCP(t *testing.T) {
	delay := 10 * time.Millisecond
	topo := newTopology(t, linkemu.TopologyConfig{AB: link.Config{Delay: delay}, BA: link.Config{Delay: delay}})
	ping := privileged.RequireTool(t, "ping", "ICMP across the emulator")
	out, err := exec.Command("ip", "netns", "exec", topo.A.NS.Name, ping, "-c", "3", "-i", "0.2", "-W", "2", topo.B.Addr.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("ping: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`= ([0-9.]+)/([0-9.]+)/([0-9.]+)/`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no RTT in ping's output:\n%s", out)
	}
	minRTT, _ := strconv.ParseFloat(string(m[1]), 64)
	if minRTT < 20 || minRTT > 22 {
		t.Errorf("ping's minimum RTT %.3f ms, want 20–22 ms (two 10 ms delays)", minRTT)
	}

	var ln net.Listener
	if err := topo.B.NS.Do(func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(topo.B.Addr.String(), "0"))
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
	var c net.Conn
	if err := topo.A.NS.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := make([]byte, 256<<10)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go c.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("TCP echo: %v", err)
	}
	for i := range got {
		if got[i] != msg[i] {
			t.Fatalf("TCP echo: byte %d differs", i)
		}
	}
	ab := topo.Emulator.Counters(linkemu.AToB)
	t.Logf("a→b: %+v", ab)
	if ab.Forwarded == 0 || ab.FramesIn < ab.Forwarded {
		t.Errorf("a→b counters: %+v", ab)
	}
}
