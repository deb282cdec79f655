package linkemu

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/link"
)

// childEnv names the namespace a TestKilledLeavesNothing child runs its
// emulator in.
const childEnv = "SDR_LINKEMU_CHILD_NS"

// TestKilledLeavesNothing runs an emulator in a child process and kills
// it (SIGKILL: no cleanup runs): the kernel detaches both XDP programs as
// the child's file descriptors close, since nothing is pinned. The
// namespaces, the parent's, go with the topology, checked by TestMain.
func TestKilledLeavesNothing(t *testing.T) {
	if name := os.Getenv(childEnv); name != "" {
		runChild(t, name)
		return
	}
	privileged.Require(t)
	topo, err := NewTopology(TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer topo.Close()
	if err := topo.Emulator.Close(); err != nil { // the child's takes its place
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestKilledLeavesNothing$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+topo.WAN.Name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "EMULATOR RUNNING") {
				ready <- true
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Wait()
			t.Fatal("the child ended without starting its emulator")
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the child did not start its emulator")
	}
	for _, name := range []string{topo.WANIfA, topo.WANIfB} {
		if !XDPAttached(t, topo.WAN, name) {
			t.Fatalf("%s: no XDP program while the child's emulator runs", name)
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	// The kernel releases a BPF link when its last file descriptor
	// closes, which the dying process's exit does, but the program itself
	// may go a little later (RCU).
	deadline := time.Now().Add(5 * time.Second)
	for _, name := range []string{topo.WANIfA, topo.WANIfB} {
		for XDPAttached(t, topo.WAN, name) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: XDP program still attached after the emulator's process was killed", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// runChild starts an emulator in namespace name on this thread, says so
// and waits to be killed.
func runChild(t *testing.T, name string) {
	runtime.LockOSThread()
	h, err := netns.GetFromPath(hostnet.RunDir + "/" + name)
	if err == nil {
		err = netns.Set(h)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := start("to-a", "to-b", link.Config{}, link.Config{}); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("EMULATOR RUNNING\n")
	select {}
}

// XDPAttached reports whether an XDP program is attached to interface
// name of ns (exported for the package's external tests).
func XDPAttached(t *testing.T, ns *hostnet.Namespace, name string) bool {
	t.Helper()
	h, err := ns.Handle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	x := l.Attrs().Xdp
	return x != nil && (x.Attached || x.ProgId != 0)
}
