package hostnet_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/testbed/testbedtest"
)

func TestPairPings(t *testing.T) {
	privileged.Require(t)
	for _, switched := range []bool{false, true} {
		testPairPings(t, switched)
	}
}

func testPairPings(t *testing.T, switched bool) {
	pair, err := hostnet.NewPair(hostnet.PairConfig{MTU: 2048, Switched: switched})
	if err != nil {
		t.Fatal(err)
	}
	a, b := pair.A, pair.B
	spaces := []*hostnet.Namespace{a.NS, b.NS}
	if pair.WAN != nil {
		spaces = append(spaces, pair.WAN)
	}
	defer func() {
		if err := pair.Close(); err != nil {
			t.Error(err)
		}
		for _, ns := range spaces {
			if _, err := os.Stat(hostnet.RunDir + "/" + ns.Name); !os.IsNotExist(err) {
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

// ipNetns runs `ip netns ARGS...` and returns its output.
func ipNetns(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestCoexistsWithIPNetns checks that the testbed and iproute2 share
// /run/netns (docs/DESIGN.md §12.2): starting from a /run/netns that is
// a plain directory (a fresh private /run), the testbed creates
// namespaces, `ip netns add` and `ip netns delete` run while they live
// (were /run/netns not a shared mount, the add would bind-mount it over
// them and both Close calls would fail with EBUSY); iproute2 deletes one of them, the
// testbed closes both: nothing of theirs is left, and iproute2's own
// namespace lives on untouched.
func TestCoexistsWithIPNetns(t *testing.T) {
	privileged.Require(t)
	if !testbedtest.InPrivateMounts(t, time.Minute) {
		return
	}
	var tracked []testbedtest.Leftover
	var spaces []*hostnet.Namespace
	for _, role := range []string{"coexist", "coexist"} {
		ns, err := hostnet.NewNamespace(role)
		if err != nil {
			t.Fatal(err)
		}
		spaces = append(spaces, ns)
		tracked = append(tracked, testbedtest.Track(t, ns.Name, "testbed"))
	}
	ipNetns(t, "add", "iproute2-keep")
	ipNetns(t, "add", "iproute2-gone")
	ipNetns(t, "delete", "iproute2-gone")
	list := ipNetns(t, "list")
	for _, ns := range spaces {
		if !strings.Contains(list, ns.Name) {
			t.Errorf("ip netns list does not show %s:\n%s", ns.Name, list)
		}
		// iproute2 can still enter it.
		if out, err := exec.Command("ip", "-n", ns.Name, "link", "show", "lo").CombinedOutput(); err != nil {
			t.Errorf("ip -n %s: %v\n%s", ns.Name, err, out)
		}
	}
	// iproute2 deletes a testbed namespace as its own: possible only if
	// the add did not hide the testbed's mount beneath a new bind mount.
	ipNetns(t, "delete", spaces[0].Name)
	tracked[0].CheckGone(t)
	for _, ns := range spaces {
		if err := ns.Close(); err != nil { // the first is gone already: no error
			t.Error(err)
		}
	}
	for _, l := range tracked {
		l.CheckGone(t)
	}
	if live := hostnet.Live(); len(live) != 0 {
		t.Errorf("still live: %v", live)
	}
	if out, err := exec.Command("ip", "-n", "iproute2-keep", "link", "show", "lo").CombinedOutput(); err != nil {
		t.Errorf("iproute2's namespace did not survive the testbed's: %v\n%s", err, out)
	}
	ipNetns(t, "delete", "iproute2-keep")
}

// TestCloseShadowed closes a namespace hidden beneath a later bind mount
// of /run/netns on itself after the directory was made private again (as
// an administrator might; iproute2 makes the same shadow when it finds
// /run/netns unprepared): Close removes the hidden mount
// and the file, and nothing of the namespace remains.
func TestCloseShadowed(t *testing.T) {
	privileged.Require(t)
	if !testbedtest.InPrivateMounts(t, time.Minute) {
		return
	}
	ns, err := hostnet.NewNamespace("shadowed")
	if err != nil {
		t.Fatal(err)
	}
	l := testbedtest.Track(t, ns.Name, "shadowed by a bind mount")
	// Shared, the directory's mounts would propagate unmounts to the copies
	// a bind makes of them (the point of the convention): undo it first.
	if err := unix.Mount("", hostnet.RunDir, "none", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(hostnet.RunDir, hostnet.RunDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Fatal(err)
	}
	// A plain unmount and unlink, as `ip netns delete` does, cannot
	// remove it: the hidden mount keeps the file busy.
	unix.Unmount(hostnet.RunDir+"/"+ns.Name, unix.MNT_DETACH)
	if err := unix.Unlink(hostnet.RunDir + "/" + ns.Name); err != unix.EBUSY {
		t.Fatalf("unlink beside a hidden mount: %v, want EBUSY (the test did not shadow the mount)", err)
	}
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	l.CheckGone(t)
	if slices.Contains(hostnet.Live(), ns.Name) {
		t.Errorf("%s still counted live", ns.Name)
	}
}

// TestCleanupLeftovers plants namespaces in every state runs have left
// them (mounted, shadowed with and without the top copy, a bare file) and
// expects CleanupLeftovers to delete each and leave no mount of them.
func TestCleanupLeftovers(t *testing.T) {
	privileged.Require(t)
	if !testbedtest.InPrivateMounts(t, time.Minute) {
		return
	}
	planted := testbedtest.PlantLeftovers(t, hostnet.NamePrefix+"left-")
	ipNetns(t, "add", "iproute2-keep")
	deleted, err := hostnet.CleanupLeftovers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range planted {
		if !slices.Contains(deleted, l.Name) {
			t.Errorf("%s (%s) not reported deleted (deleted %v)", l.Name, l.Kind, deleted)
		}
		l.CheckGone(t)
	}
	if len(deleted) != len(planted) {
		t.Errorf("deleted %v, planted %d", deleted, len(planted))
	}
	if list := ipNetns(t, "list"); !strings.Contains(list, "iproute2-keep") {
		t.Errorf("cleanup took a namespace that is not the testbed's:\n%s", list)
	}
	ipNetns(t, "delete", "iproute2-keep")
}
