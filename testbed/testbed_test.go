package testbed

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/internal/privileged"
)

func TestPairPings(t *testing.T) {
	privileged.Require(t)
	for _, switched := range []bool{false, true} {
		testPairPings(t, switched)
	}
}

func testPairPings(t *testing.T, switched bool) {
	pair, err := NewPair(PairConfig{MTU: 2048, Switched: switched})
	if err != nil {
		t.Fatal(err)
	}
	a, b := pair.A, pair.B
	defer func() {
		if err := pair.Close(); err != nil {
			t.Error(err)
		}
		for _, ns := range pair.spaces {
			if _, err := os.Stat("/var/run/netns/" + ns.Name); !os.IsNotExist(err) {
				t.Errorf("namespace %s left behind", ns.Name)
			}
		}
	}()
	if switched != (pair.WAN != nil) {
		t.Errorf("switched %v, WAN namespace %v", switched, pair.WAN)
	}
	out, err := exec.Command("ip", "netns", "exec", a.NS.Name, "ping", "-c", "1", "-W", "2", b.Addr.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("ping %v from %s: %v\n%s", b.Addr, a.NS.Name, err, out)
	}
	link, err := exec.Command("ip", "-n", b.NS.Name, "link", "show", b.IfName).CombinedOutput()
	if err != nil || !strings.Contains(string(link), "mtu 2048") {
		t.Errorf("link in B: %v\n%s", err, link)
	}
	if a.MAC == b.MAC || a.Ifindex == 0 {
		t.Errorf("hosts %+v %+v", a, b)
	}
}

func TestCleanupLeftovers(t *testing.T) {
	privileged.Require(t)
	ns, err := NewNamespace("leftover")
	if err != nil {
		t.Fatal(err)
	}
	// Only this test's namespace: tests of other packages may be running.
	deleted, err := cleanupMatching(NamePrefix + "leftover-")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, name := range deleted {
		found = found || name == ns.Name
	}
	if !found {
		t.Errorf("%s not cleaned up (deleted %v)", ns.Name, deleted)
	}
}
