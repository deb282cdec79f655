package caps

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sdr-rdma/sdr/internal/privileged"
)

// TestNames checks the name table against x/sys/unix's numbering.
func TestNames(t *testing.T) {
	want := map[Cap]string{
		unix.CAP_CHOWN: "CAP_CHOWN", unix.CAP_DAC_OVERRIDE: "CAP_DAC_OVERRIDE", unix.CAP_DAC_READ_SEARCH: "CAP_DAC_READ_SEARCH",
		unix.CAP_FOWNER: "CAP_FOWNER", unix.CAP_FSETID: "CAP_FSETID", unix.CAP_KILL: "CAP_KILL", unix.CAP_SETGID: "CAP_SETGID",
		unix.CAP_SETUID: "CAP_SETUID", unix.CAP_SETPCAP: "CAP_SETPCAP", unix.CAP_LINUX_IMMUTABLE: "CAP_LINUX_IMMUTABLE",
		unix.CAP_NET_BIND_SERVICE: "CAP_NET_BIND_SERVICE", unix.CAP_NET_BROADCAST: "CAP_NET_BROADCAST",
		unix.CAP_NET_ADMIN: "CAP_NET_ADMIN", unix.CAP_NET_RAW: "CAP_NET_RAW", unix.CAP_IPC_LOCK: "CAP_IPC_LOCK",
		unix.CAP_IPC_OWNER: "CAP_IPC_OWNER", unix.CAP_SYS_MODULE: "CAP_SYS_MODULE", unix.CAP_SYS_RAWIO: "CAP_SYS_RAWIO",
		unix.CAP_SYS_CHROOT: "CAP_SYS_CHROOT", unix.CAP_SYS_PTRACE: "CAP_SYS_PTRACE", unix.CAP_SYS_PACCT: "CAP_SYS_PACCT",
		unix.CAP_SYS_ADMIN: "CAP_SYS_ADMIN", unix.CAP_SYS_BOOT: "CAP_SYS_BOOT", unix.CAP_SYS_NICE: "CAP_SYS_NICE",
		unix.CAP_SYS_RESOURCE: "CAP_SYS_RESOURCE", unix.CAP_SYS_TIME: "CAP_SYS_TIME", unix.CAP_SYS_TTY_CONFIG: "CAP_SYS_TTY_CONFIG",
		unix.CAP_MKNOD: "CAP_MKNOD", unix.CAP_LEASE: "CAP_LEASE", unix.CAP_AUDIT_WRITE: "CAP_AUDIT_WRITE",
		unix.CAP_AUDIT_CONTROL: "CAP_AUDIT_CONTROL", unix.CAP_SETFCAP: "CAP_SETFCAP", unix.CAP_MAC_OVERRIDE: "CAP_MAC_OVERRIDE",
		unix.CAP_MAC_ADMIN: "CAP_MAC_ADMIN", unix.CAP_SYSLOG: "CAP_SYSLOG", unix.CAP_WAKE_ALARM: "CAP_WAKE_ALARM",
		unix.CAP_BLOCK_SUSPEND: "CAP_BLOCK_SUSPEND", unix.CAP_AUDIT_READ: "CAP_AUDIT_READ", unix.CAP_PERFMON: "CAP_PERFMON",
		unix.CAP_BPF: "CAP_BPF", unix.CAP_CHECKPOINT_RESTORE: "CAP_CHECKPOINT_RESTORE",
	}
	if len(want) != len(names) {
		t.Errorf("%d names, x/sys/unix has %d capabilities", len(names), len(want))
	}
	for c, name := range want {
		if c.String() != name {
			t.Errorf("capability %d: %q, want %q", c, c.String(), name)
		}
	}
	if got := Cap(63).String(); got != "CAP_63" {
		t.Errorf("unknown capability: %q", got)
	}
}

func set(cs ...Cap) Set {
	var s Set
	for _, c := range cs {
		s |= 1 << c
	}
	return s
}

// TestGranted checks the kernel's stand-ins: CAP_SYS_ADMIN for CAP_BPF
// and CAP_PERFMON (and for nothing else), an unlimited memlock limit for
// CAP_IPC_LOCK.
func TestGranted(t *testing.T) {
	for _, c := range []struct {
		s    State
		need []Cap
		want []Cap
	}{
		{State{}, XSK, XSK},
		{State{Effective: set(XSK...)}, XSK, nil},
		{State{Effective: set(SysAdmin, NetAdmin, NetRaw, IPCLock)}, XSK, nil},
		{State{Effective: set(SysAdmin)}, XSK, []Cap{NetAdmin, NetRaw, IPCLock}},
		{State{Effective: set(NetAdmin, NetRaw, BPF, Perfmon), MemlockUnlimited: true}, XSK, nil},
		{State{Effective: set(NetAdmin, NetRaw, Perfmon, IPCLock)}, XSK, []Cap{BPF}},
		{State{Effective: set(BPF, Perfmon, NetAdmin, NetRaw, IPCLock)}, Testbed, []Cap{SysAdmin}},
		{State{Effective: set(SysAdmin, NetRaw, IPCLock), MemlockUnlimited: true}, Testbed, []Cap{NetAdmin}},
	} {
		got := c.s.Missing(c.need...)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%+v needing %v: missing %v, want %v", c.s, c.need, got, c.want)
		}
	}
}

// TestCurrentMatchesProc compares capget's effective set with the
// kernel's other report of it, /proc/self/status.
func TestCurrentMatchesProc(t *testing.T) {
	s, err := Current()
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapEff:\t"); ok {
			want, err := strconv.ParseUint(hex, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			if s.Effective != Set(want) {
				t.Errorf("capget: %#x, /proc/self/status: %#x", s.Effective, want)
			}
			return
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
}

func TestMissingErrorMessage(t *testing.T) {
	e := &MissingError{Command: "sdr testbed -carrier netns", Need: append(Testbed[:len(Testbed):len(Testbed)], DACOverride),
		Missing: []Cap{SysAdmin, IPCLock, DACOverride}, Unwritable: []string{"/run/netns"}}
	want := "sdr testbed -carrier netns needs CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_NET_RAW, CAP_IPC_LOCK, CAP_DAC_OVERRIDE " +
		"(missing: CAP_SYS_ADMIN, CAP_IPC_LOCK, CAP_DAC_OVERRIDE; an unlimited memlock limit would stand in for CAP_IPC_LOCK; " +
		"CAP_DAC_OVERRIDE to write /run/netns, which this user may not): run as root or grant them, see README 'Containers'"
	if e.Error() != want {
		t.Errorf("got  %s\nwant %s", e.Error(), want)
	}
	e = &MissingError{Command: "-dev xsk", Need: XSK, Missing: []Cap{BPF, Perfmon}}
	if got := e.Error(); strings.Count(got, "CAP_SYS_ADMIN would stand in") != 1 || !strings.Contains(got, "(missing: CAP_BPF, CAP_PERFMON;") {
		t.Errorf("BPF and PERFMON missing: %s", got)
	}
}

// childEnv makes this test binary, started by TestCheckAsNobody as user
// nobody with some ambient capabilities, run Check on the directories in
// os.Args and print the outcome.
const childEnv = "SDR_CAPS_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		err := Check(XSK, "-dev xsk", flagArgs()...)
		var me *MissingError
		switch {
		case err == nil:
			fmt.Println("ok")
		case errors.As(err, &me):
			fmt.Printf("missing %v unwritable %v\n", me.Missing, me.Unwritable)
		default:
			fmt.Println("error", err)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// flagArgs returns the arguments after "--".
func flagArgs() []string {
	for i, a := range os.Args {
		if a == "--" {
			return os.Args[i+1:]
		}
	}
	return nil
}

// TestCheckAsNobody runs Check in a copy of this test binary as user
// nobody holding some of XSK as ambient capabilities: it must report the
// others, and a directory nobody may not write (CAP_DAC_OVERRIDE), but
// not one nobody owns, nor a missing one under it.
func TestCheckAsNobody(t *testing.T) {
	privileged.Require(t)
	bin, dir := privileged.TestBinaryForNobody(t)
	owned := filepath.Join(dir, "owned")
	if err := os.Mkdir(owned, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(owned, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	// The child inherits this process's memlock limit; unlimited, it
	// stands in for CAP_IPC_LOCK.
	me, err := Current()
	if err != nil {
		t.Fatal(err)
	}
	noIPCLock := "CAP_IPC_LOCK "
	if me.MemlockUnlimited {
		noIPCLock = ""
	}
	for _, c := range []struct {
		ambient []Cap
		dirs    []string
		want    string
	}{
		{XSK, []string{owned, filepath.Join(owned, "netns")}, "ok"},
		{[]Cap{NetAdmin, NetRaw, IPCLock}, nil, "missing [CAP_BPF CAP_PERFMON] unwritable []"},
		{[]Cap{NetAdmin, BPF, Perfmon, SysAdmin}, []string{dir}, "missing [CAP_NET_RAW " + noIPCLock + "CAP_DAC_OVERRIDE] unwritable [" + dir + "]"},
		{append([]Cap{DACOverride}, XSK...), []string{dir}, "ok"},
	} {
		cmd := exec.Command(bin, append([]string{"--"}, c.dirs...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), childEnv+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		for _, a := range c.ambient {
			cmd.SysProcAttr.AmbientCaps = append(cmd.SysProcAttr.AmbientCaps, uintptr(a))
		}
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != c.want {
			t.Errorf("nobody with %v, dirs %v: %v: got %q, want %q", c.ambient, c.dirs, err, out, c.want)
		}
	}
}
