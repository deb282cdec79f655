// Package interop runs Linux Soft-RoCE (rdma_rxe) in a Debian guest under
// qemu and connects it to an emulated NIC, so that emunic talks to a real
// kernel RDMA stack: the standard verbs tools in the guest, emunic's side
// in Go on the host. build-guest.sh makes the guest (from Debian's archive);
// the host drives it through a 9p command spool, never over the network
// under test.
package interop

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// GuestConfig describes a guest to boot.
type GuestConfig struct {
	// Cache holds vmlinuz, initrd.img and root.img from build-guest.sh.
	Cache string
	// Netns is the network namespace qemu runs in; Tap the tap device
	// there that becomes the guest's eth0.
	Netns, Tap string
	// Addr is the guest's eth0 address with prefix, e.g. 10.77.0.2/24.
	Addr string
	// MAC is the guest's eth0 address.
	MAC string
	// Console receives the guest's serial console (nil: discarded).
	Console *os.File
}

// Guest is a running guest.
type Guest struct {
	// Killed reports, after Close, that the guest did not power off in
	// time and qemu was killed.
	Killed bool

	spool string
	cmd   *exec.Cmd
	done  chan error
	mu    sync.Mutex
	next  int
}

// BootGuest starts qemu and waits until the guest's RoCE device is up.
// Booting takes about 15 s under TCG.
func BootGuest(cfg GuestConfig, timeout time.Duration) (*Guest, error) {
	spool, err := os.MkdirTemp("", "sdr-interop-spool-")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(spool, "guest-addr"), []byte(cfg.Addr+"\n"), 0o644); err != nil {
		return nil, err
	}
	args := []string{"netns", "exec", cfg.Netns, "qemu-system-x86_64",
		"-machine", "pc", "-cpu", "max", "-m", "1024", "-smp", "1", "-nographic", "-no-reboot",
		"-kernel", filepath.Join(cfg.Cache, "vmlinuz"), "-initrd", filepath.Join(cfg.Cache, "initrd.img"),
		"-append", "console=ttyS0 root=/dev/vda rw init=/sdr-init quiet net.ifnames=0",
		"-drive", "file=" + filepath.Join(cfg.Cache, "root.img") + ",if=virtio,format=raw,snapshot=on",
		"-fsdev", "local,id=spool,path=" + spool + ",security_model=none",
		"-device", "virtio-9p-pci,fsdev=spool,mount_tag=spool",
		"-netdev", "tap,id=n0,ifname=" + cfg.Tap + ",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac=" + cfg.MAC}
	g := &Guest{spool: spool, cmd: exec.Command("ip", args...), done: make(chan error, 1)}
	g.cmd.Stdout, g.cmd.Stderr = cfg.Console, cfg.Console
	if err := g.cmd.Start(); err != nil {
		os.RemoveAll(spool)
		return nil, fmt.Errorf("interop: start qemu: %w", err)
	}
	go func() { g.done <- g.cmd.Wait() }()
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(filepath.Join(spool, "ready")); err == nil {
			return g, nil
		}
		select {
		case err := <-g.done:
			os.RemoveAll(spool)
			return nil, fmt.Errorf("interop: qemu exited during boot: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			g.Close()
			return nil, fmt.Errorf("interop: guest not ready after %v", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// CopyIn puts a file into the spool; the guest sees it as /spool/name.
func (g *Guest) CopyIn(name string, data []byte, mode os.FileMode) error {
	return os.WriteFile(filepath.Join(g.spool, name), data, mode)
}

// Command is a script running in the guest.
type Command struct {
	g *Guest
	n int
}

// Start queues a shell script; the guest runs scripts one at a time, in
// order.
func (g *Guest) Start(script string) (*Command, error) {
	g.mu.Lock()
	n := g.next
	g.next++
	g.mu.Unlock()
	tmp := filepath.Join(g.spool, fmt.Sprintf("cmd-%d.tmp", n))
	if err := os.WriteFile(tmp, []byte(script), 0o644); err != nil {
		return nil, err
	}
	return &Command{g: g, n: n}, os.Rename(tmp, filepath.Join(g.spool, fmt.Sprintf("cmd-%d.sh", n)))
}

// Wait waits for the script and returns its output and exit status.
func (c *Command) Wait(timeout time.Duration) (string, int, error) {
	deadline := time.Now().Add(timeout)
	rcPath := filepath.Join(c.g.spool, fmt.Sprintf("rc-%d", c.n))
	for {
		if rc, err := os.ReadFile(rcPath); err == nil {
			out, _ := os.ReadFile(filepath.Join(c.g.spool, fmt.Sprintf("out-%d.txt", c.n)))
			code, err := strconv.Atoi(strings.TrimSpace(string(rc)))
			return string(out), code, err
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(filepath.Join(c.g.spool, fmt.Sprintf("out-%d.txt", c.n)))
			return string(out), -1, fmt.Errorf("interop: guest command %d still running after %v", c.n, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Run runs a script and waits for it.
func (g *Guest) Run(script string, timeout time.Duration) (string, int, error) {
	c, err := g.Start(script)
	if err != nil {
		return "", -1, err
	}
	return c.Wait(timeout)
}

// Close powers the guest off, killing qemu if it has not stopped after
// 30 s (a TCG guest on a busy host can be that slow; the VM is gone either
// way), and removes the spool. It fails only if qemu exited with an error
// of its own.
func (g *Guest) Close() error {
	os.WriteFile(filepath.Join(g.spool, "poweroff"), nil, 0o644)
	var err error
	select {
	case err = <-g.done:
	case <-time.After(30 * time.Second):
		g.Killed = true
		g.cmd.Process.Kill()
		<-g.done
	}
	os.RemoveAll(g.spool)
	if err != nil {
		return fmt.Errorf("interop: qemu: %w", err)
	}
	return nil
}
