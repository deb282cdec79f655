// Package testbedtest has the test-only helpers around package testbed:
// the leak check every privileged test binary runs at exit, and a way to
// run one test in a private mount namespace where it may break /run/netns
// on purpose without touching anyone else's namespaces.
package testbedtest

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sdr-rdma/sdr/hostnet"
)

// RunChecked runs a package's tests (call it from TestMain) and fails the
// run if any namespace created through package testbed is still there
// afterwards, deleting it so the next run starts clean.
func RunChecked(m *testing.M) int {
	code := m.Run()
	if err := hostnet.CloseLive(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	return code
}

// privateEnv marks the child process InPrivateMounts starts; its value is
// the test the child runs.
const privateEnv = "SDR_TESTBED_PRIVATE_MOUNTS"

// InPrivateMounts runs the calling test in a child process (this test
// binary again, with only this test selected) that has its own mount
// namespace, every mount private, and a fresh tmpfs on /run, so /run/netns
// starts as a plain directory that does not exist yet, whatever the host's
// is. Namespaces the child names there are invisible to other processes
// and go away with it. The caller needs root.
//
// In the child it returns true: the test's body follows. In the parent it
// waits for the child (at most timeout), logs its output, fails t unless
// the child ran the test and passed, and returns false: the caller then
// returns. The child costs a process start and its own TestMain (leak
// check included).
func InPrivateMounts(t *testing.T, timeout time.Duration) bool {
	t.Helper()
	if os.Getenv(privateEnv) == t.Name() {
		if err := unix.Mount("tmpfs", "/run", "tmpfs", 0, "mode=0755"); err != nil {
			t.Fatalf("testbedtest: private /run: %v", err)
		}
		return true
	}
	var pattern []string
	for _, part := range strings.Split(t.Name(), "/") {
		pattern = append(pattern, "^"+regexp.QuoteMeta(part)+"$")
	}
	cmd := exec.Command(os.Args[0], "-test.run", strings.Join(pattern, "/"), "-test.v", "-test.count=1",
		"-test.timeout", timeout.String())
	cmd.Env = append(os.Environ(), privateEnv+"="+t.Name())
	// Go makes every mount of the new namespace private before exec.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	t.Logf("child in a private mount namespace:\n%s", out)
	if err != nil {
		t.Fatalf("testbedtest: child: %v", err)
	}
	// A pattern that matched nothing also exits 0.
	if !strings.Contains(string(out), "--- PASS: "+t.Name()+" ") {
		t.Fatalf("testbedtest: the child did not run and pass %s", t.Name())
	}
	return false
}

// Leftover is a namespace a run left in hostnet.RunDir, and the identity
// of the network namespace mounted there, to prove it unmounted later.
type Leftover struct {
	Name string
	// Kind says how it was left: "mounted" (a run that crashed),
	// "shadowed" (mounted before an `ip netns add` bind-mounted RunDir
	// over it), "shadowed, top copy gone" (the same after a delete that
	// failed half-way) or "file" (a file without a mount).
	Kind string
	ino  uint64 // nsfs inode of the namespace; 0 for a bare file
}

// Track records the namespace mounted at hostnet.RunDir/name now, for
// CheckGone.
func Track(t testing.TB, name, kind string) Leftover {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(hostnet.RunDir+"/"+name, &st); err != nil {
		t.Fatalf("testbedtest: %v", err)
	}
	return Leftover{Name: name, Kind: kind, ino: st.Ino}
}

// CheckGone fails t if the leftover's file is still in hostnet.RunDir or
// any mount of this mount namespace still holds its network namespace or
// sits on its path (a shadowed one included: /proc/self/mountinfo lists
// hidden mounts too).
func (l Leftover) CheckGone(t testing.TB) {
	t.Helper()
	path := hostnet.RunDir + "/" + l.Name
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("%s (%s): %s is still there (%v)", l.Name, l.Kind, path, err)
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	nsRoot := fmt.Sprintf("net:[%d]", l.ino)
	for _, line := range strings.Split(string(info), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == path || l.ino != 0 && f[3] == nsRoot) {
			t.Errorf("%s (%s): still mounted: %s", l.Name, l.Kind, line)
		}
	}
}

// PlantLeftovers leaves namespaces named with prefix (which must start
// with hostnet.NamePrefix) in hostnet.RunDir in every state runs have
// left them, and returns them. Only a child of InPrivateMounts may call
// it: it breaks RunDir's mounts on purpose, before the testbed set them
// up, as older testbed versions and iproute2 together did:
//
//   - two namespaces mounted on RunDir/NAME while RunDir is a plain
//     directory, then `ip netns add` and `ip netns delete` of another
//     name: iproute2 bind-mounts RunDir on itself, recursively, which
//     copies both mounts on top and hides the originals beneath; one
//     keeps its copy ("shadowed"), the other loses it as a delete that
//     failed half-way did ("shadowed, top copy gone", where the old
//     cleanup failed with EINVAL);
//   - one namespace of the testbed's that its run never closed
//     ("mounted");
//   - one bare file ("file").
func PlantLeftovers(t *testing.T, prefix string) []Leftover {
	t.Helper()
	if os.Getenv(privateEnv) != t.Name() || !strings.HasPrefix(prefix, hostnet.NamePrefix) {
		t.Fatal("testbedtest: PlantLeftovers runs only in an InPrivateMounts child, with a testbed prefix")
	}
	var out []Leftover
	for _, kind := range []string{"shadowed", "shadowed, top copy gone"} {
		name := prefix + strings.ReplaceAll(strings.ReplaceAll(kind, ",", ""), " ", "-")
		mountUnconventional(t, name)
		out = append(out, Track(t, name, kind))
	}
	ipNetns(t, "add", prefix+"ip")
	ipNetns(t, "delete", prefix+"ip")
	if err := unix.Unmount(hostnet.RunDir+"/"+out[1].Name, unix.MNT_DETACH); err != nil {
		t.Fatalf("testbedtest: remove the top copy: %v", err)
	}
	ns, err := hostnet.NewNamespace(strings.TrimPrefix(prefix, hostnet.NamePrefix) + "mounted")
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, Track(t, ns.Name, "mounted"))
	file := prefix + "file"
	if err := os.WriteFile(hostnet.RunDir+"/"+file, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	return append(out, Leftover{Name: file, Kind: "file"})
}

// mountUnconventional creates a network namespace and mounts it on
// hostnet.RunDir/name without iproute2's convention, as hostnet did before
// it followed it.
func mountUnconventional(t *testing.T, name string) {
	t.Helper()
	if err := os.MkdirAll(hostnet.RunDir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := hostnet.RunDir + "/" + name
	if err := os.WriteFile(path, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends in the new network namespace.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path, "none", unix.MS_BIND, "")
	}()
	if err := <-errc; err != nil {
		t.Fatalf("testbedtest: plant %s: %v", name, err)
	}
}

// ipNetns runs `ip netns ARGS...` and fails t if it fails.
func ipNetns(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"netns"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip netns %v: %v\n%s", args, err, out)
	}
}

// EchoConn starts a TCP echo server in to's namespace on its address and
// returns a connection to it dialled from from's namespace (5 s to
// connect): TCP across whatever joins the two hosts. Both are closed when
// the test ends.
func EchoConn(tb testing.TB, from, to *hostnet.Host) net.Conn {
	tb.Helper()
	var ln net.Listener
	if err := to.NS.Do(func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(to.Addr.String(), "0"))
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(c, c)
			c.Close()
		}
	}()
	var c net.Conn
	if err := from.NS.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}
