package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/caps"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/testbed/testbedtest"
	"github.com/sdr-rdma/sdr/testbed/writebw"
)

// The capability tests run the sdr binary as user nobody (uid 65534)
// holding exactly a documented set of capabilities, through setpriv as a
// user would: with the set, the command works; with each member dropped,
// it fails naming that member; and with the check switched off
// (caps.SkipEnv), it fails in the kernel, which proves the member
// necessary rather than merely listed.

// nobody is the unprivileged user the tests drop to.
const nobody = 65534

// sdrBinEnv hands the binary sdrForNobody built to the InPrivateMounts
// child that runs the same test, which then builds none.
const sdrBinEnv = "SDR_CAPS_TEST_SDR"

// sdrForNobody builds the sdr binary from this package's sources into a
// directory user nobody can reach (once per test: an InPrivateMounts
// child takes its parent's), and returns its path and setpriv's.
func sdrForNobody(t *testing.T) (bin, setpriv string) {
	t.Helper()
	privileged.Require(t)
	setpriv = privileged.RequireTool(t, "setpriv", "drops to user nobody with chosen capabilities")
	if bin = os.Getenv(sdrBinEnv); bin != "" {
		return bin, setpriv
	}
	goTool := privileged.RequireTool(t, "go", "builds the sdr binary")
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin = filepath.Join(dir, "sdr")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Setenv(sdrBinEnv, bin)
	return bin, setpriv
}

// capsArg is setpriv's spelling of exactly the set have: "-all,+net_raw".
func capsArg(have []caps.Cap) string {
	s := "-all"
	for _, c := range have {
		s += ",+" + strings.ToLower(strings.TrimPrefix(c.String(), "CAP_"))
	}
	return s
}

// asUser returns a command running bin with args as uid (nobody, or 0 for
// root as in a container) holding exactly have: inheritable, ambient and
// bounding sets all set to it, so neither the uid nor an exec can gain
// more. env is added to the environment.
func asUser(setpriv string, uid int, have []caps.Cap, env []string, bin string, args ...string) *exec.Cmd {
	c := capsArg(have)
	argv := []string{"--inh-caps=" + c, "--ambient-caps=" + c, "--bounding-set=" + c}
	if uid != 0 {
		argv = append(argv, fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups")
	}
	cmd := exec.Command(setpriv, append(append(argv, "--", bin), args...)...)
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// without returns set less c.
func without(set []caps.Cap, c caps.Cap) []caps.Cap {
	var out []caps.Cap
	for _, x := range set {
		if x != c {
			out = append(out, x)
		}
	}
	return out
}

// outcome is how a command run ended.
type outcome struct {
	code        int
	out, errOut string
}

func (o outcome) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", o.code, o.out, o.errOut)
}

// runIn starts cmd from a thread inside ns (the child inherits the
// thread's network namespace; nil: this thread's) and waits for it, at
// most timeout. A command that cannot start or be waited for ends with
// code -1 and the error as its stderr. Any goroutine may call it.
func runIn(ns *hostnet.Namespace, cmd *exec.Cmd, timeout time.Duration) outcome {
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := cmd.Start
	if ns != nil {
		start = func() error { return ns.Do(cmd.Start) }
	}
	if err := start(); err != nil {
		return outcome{code: -1, errOut: err.Error()}
	}
	timer := time.AfterFunc(timeout, func() { cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Wait()
	o := outcome{out: stdout.String(), errOut: stderr.String()}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		o.code = exit.ExitCode()
	} else if err != nil {
		o.code, o.errOut = -1, err.Error()
	}
	return o
}

// checkNamesMissing fails t unless o failed with caps.Check's message
// naming c as missing, rather than with the kernel's refusal.
func checkNamesMissing(t *testing.T, what string, o outcome, c caps.Cap) {
	t.Helper()
	msg := o.errOut
	if o.code == exitOK || !strings.Contains(msg, "(missing: "+c.String()) ||
		!strings.Contains(msg, "see README 'Containers'") || strings.Contains(msg, "operation not permitted") {
		t.Errorf("%s without %v: want a nonzero exit naming it as missing:\n%v", what, c, o)
	}
}

// memlockStandsIn reports whether this process's memlock limit, which
// setpriv's children inherit, is unlimited: then pinning a UMEM needs no
// CAP_IPC_LOCK and dropping it cannot make the kernel refuse.
func memlockStandsIn(t *testing.T) bool {
	s, err := caps.Current()
	if err != nil {
		t.Fatal(err)
	}
	return s.MemlockUnlimited
}

// TestCapsWriteBWOverXSK runs sdr write-bw -dev xsk between two
// namespaces as user nobody with exactly caps.XSK: every chunk arrives
// verified, and no XDP program stays attached once both sides exited.
// With each member dropped, the command refuses to start and names it;
// with the check off, the kernel refuses the server's AF_XDP setup, with
// the refusal the member was found by.
func TestCapsWriteBWOverXSK(t *testing.T) {
	bin, setpriv := sdrForNobody(t)
	pair, err := hostnet.NewPair(hostnet.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	const iters = 20
	flags := []string{"write-bw", "-dev", "xsk", "-i", pair.B.IfName, "-s", "65536", "-n", fmt.Sprint(iters), "-w", "2",
		"-rc", "-json", "-verify", "-timeout", "2s"}
	// transfer runs the server holding serverCaps and a client holding
	// caps.XSK, and returns how each ended.
	transfer := func(serverCaps []caps.Cap, env ...string) (server, client outcome) {
		done := make(chan outcome, 1)
		go func() {
			done <- runIn(pair.B.NS, asUser(setpriv, nobody, serverCaps, env, bin, flags...), 20*time.Second)
		}()
		clientFlags := append(append([]string{}, flags...), pair.B.Addr.String())
		clientFlags[4] = pair.A.IfName
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) { // until the server listens
			client = runIn(pair.A.NS, asUser(setpriv, nobody, caps.XSK, nil, bin, clientFlags...), 20*time.Second)
			if client.code == exitOK || !strings.Contains(client.errOut, "connection refused") || time.Now().After(deadline) {
				break
			}
		}
		return <-done, client
	}

	server, client := transfer(caps.XSK)
	if server.code != exitOK || client.code != exitOK {
		t.Fatalf("with %v: server %v\nclient %v", caps.XSK, server, client)
	}
	var r writebw.Result
	if err := json.Unmarshal([]byte(client.out), &r); err != nil {
		t.Fatalf("%v\n%s", err, client.out)
	}
	checkAllVerified(t, "as nobody with caps.XSK", r, iters, 1)
	for _, h := range []*hostnet.Host{pair.A, pair.B} {
		checkNoXDP(t, h)
	}

	// The kernel's refusal each member was found by (caps.XSK's comment).
	refusal := map[caps.Cap]string{
		caps.NetAdmin: "map create: operation not permitted",
		caps.NetRaw:   "xsk: socket:",
		caps.BPF:      "ebpf: remove memlock limit",
		caps.Perfmon:  "pointer arithmetic with it prohibited",
		caps.IPCLock:  "register UMEM",
	}
	for _, c := range caps.XSK {
		less := without(caps.XSK, c)
		o := runIn(pair.B.NS, asUser(setpriv, nobody, less, nil, bin, flags...), 10*time.Second)
		checkNamesMissing(t, "write-bw -dev xsk", o, c)
		if c == caps.IPCLock && memlockStandsIn(t) {
			t.Logf("memlock limit unlimited: the kernel does not need %v here", c)
			continue
		}
		server, client := transfer(less, caps.SkipEnv+"=1")
		if server.code == exitOK || client.code == exitOK || !strings.Contains(server.errOut, refusal[c]) {
			t.Errorf("without %v, unchecked: want the kernel's refusal %q:\nserver %v\nclient %v", c, refusal[c], server, client)
		}
	}
	for _, h := range []*hostnet.Host{pair.A, pair.B} {
		checkNoXDP(t, h)
	}
}

// checkNoXDP fails t if an XDP program is attached to h's interface.
func checkNoXDP(t *testing.T, h *hostnet.Host) {
	t.Helper()
	nl, err := h.NS.Handle()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	l, err := nl.LinkByName(h.IfName)
	if err != nil {
		t.Fatal(err)
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		t.Errorf("%s in %s: XDP program %d still attached", h.IfName, h.NS.Name, x.ProgId)
	}
}

// privateNetnsDir makes hostnet.RunDir in this InPrivateMounts child's
// fresh /run, or takes the one there, and gives it to uid.
func privateNetnsDir(t *testing.T, uid int) {
	t.Helper()
	if err := os.MkdirAll(hostnet.RunDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(hostnet.RunDir, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// checkNetnsEmpty fails t if anything is left in hostnet.RunDir.
func checkNetnsEmpty(t *testing.T, what string) {
	t.Helper()
	entries, err := os.ReadDir(hostnet.RunDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("%s: %s left in %s", what, e.Name(), hostnet.RunDir)
	}
}

// TestCapsTestbed runs a tiny sdr testbed -carrier netns, in a private
// mount namespace whose /run/netns belongs to user nobody, as nobody with
// exactly caps.Testbed, and as root holding only caps.Testbed (a
// container's case): each completes its transfer, verified, and leaves
// no namespace behind. With each member dropped it refuses to start and
// names it; with the check off the kernel refuses, and the failed run
// leaves nothing behind either. A /run/netns nobody may not write is
// reported as CAP_DAC_OVERRIDE missing.
func TestCapsTestbed(t *testing.T) {
	bin, setpriv := sdrForNobody(t)
	if !testbedtest.InPrivateMounts(t, 2*time.Minute) {
		return
	}
	args := []string{"testbed", "-carrier", "netns", "-s", "64KiB", "-n", "1", "-schemes", "ec", "-o", "", "-json", "-q"}
	for _, uid := range []int{0, nobody} { // ends with /run/netns nobody's
		privateNetnsDir(t, uid)
		o := runIn(nil, asUser(setpriv, uid, caps.Testbed, nil, bin, args...), time.Minute)
		var rep struct { // what the test reads of scenario.Report's JSON
			Carrier string
			Rows    []struct{ Completed, Corrupt int }
		}
		if err := json.Unmarshal([]byte(o.out), &rep); o.code != exitOK || err != nil {
			t.Fatalf("uid %d with %v: %v\n%v", uid, caps.Testbed, err, o)
		}
		if len(rep.Rows) != 1 || rep.Rows[0].Completed != 1 || rep.Rows[0].Corrupt != 0 || !strings.Contains(rep.Carrier, "namespaces") {
			t.Errorf("uid %d with %v: want one transfer over namespaces, completed intact: %+v", uid, caps.Testbed, rep)
		}
		checkNetnsEmpty(t, fmt.Sprintf("uid %d with %v", uid, caps.Testbed))
	}
	for _, c := range caps.Testbed {
		less := without(caps.Testbed, c)
		checkNamesMissing(t, "testbed -carrier netns", runIn(nil, asUser(setpriv, nobody, less, nil, bin, args...), time.Minute), c)
		if c == caps.IPCLock && memlockStandsIn(t) {
			t.Logf("memlock limit unlimited: the kernel does not need %v here", c)
			continue
		}
		o := runIn(nil, asUser(setpriv, nobody, less, []string{caps.SkipEnv + "=1"}, bin, args...), time.Minute)
		if o.code == exitOK || !strings.Contains(o.errOut, "operation not permitted") && !strings.Contains(o.errOut, "register UMEM") {
			t.Errorf("without %v, unchecked: want the kernel's refusal:\n%v", c, o)
		}
		checkNetnsEmpty(t, fmt.Sprintf("failed run without %v", c))
	}
	if err := os.Chown(hostnet.RunDir, 0, 0); err != nil {
		t.Fatal(err)
	}
	checkNamesMissing(t, "testbed -carrier netns", runIn(nil, asUser(setpriv, nobody, caps.Testbed, nil, bin, args...), time.Minute), caps.DACOverride)
}

// TestCapsTestbedClean plants leftover namespaces of every kind in a
// private mount namespace whose /run/netns belongs to user nobody: sdr
// testbed clean as nobody with exactly caps.Clean deletes them all; with
// CAP_SYS_ADMIN dropped it refuses and names it, and with the check off
// the kernel refuses and the mounted ones stay.
func TestCapsTestbedClean(t *testing.T) {
	bin, setpriv := sdrForNobody(t)
	if !testbedtest.InPrivateMounts(t, time.Minute) {
		return
	}
	privateNetnsDir(t, nobody)
	planted := testbedtest.PlantLeftovers(t, hostnet.NamePrefix+"capclean-")
	for _, c := range caps.Clean {
		less := without(caps.Clean, c)
		checkNamesMissing(t, "testbed clean", runIn(nil, asUser(setpriv, nobody, less, nil, bin, "testbed", "clean"), time.Minute), c)
		if o := runIn(nil, asUser(setpriv, nobody, less, []string{caps.SkipEnv + "=1"}, bin, "testbed", "clean"), time.Minute); o.code == exitOK {
			t.Errorf("without %v, unchecked: want the kernel's refusal:\n%v", c, o)
		}
	}
	for _, l := range planted {
		if l.Kind == "file" { // a file without a mount needs no capability to go
			continue
		}
		if _, err := os.Lstat(hostnet.RunDir + "/" + l.Name); err != nil {
			t.Errorf("%s (%s) went without its capabilities: %v", l.Name, l.Kind, err)
		}
	}
	if o := runIn(nil, asUser(setpriv, nobody, caps.Clean, nil, bin, "testbed", "clean"), time.Minute); o.code != exitOK {
		t.Fatalf("with %v: %v", caps.Clean, o)
	}
	for _, l := range planted {
		l.CheckGone(t)
		// The planted namespace of this process's own is gone: forget it.
		(&hostnet.Namespace{Name: l.Name}).Close()
	}
}
