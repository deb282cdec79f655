// Package caps checks, before a command touches the kernel, that the
// process holds the Linux capabilities the command needs, so that a user
// in a container or a non-root user with granted capabilities learns
// which one is missing instead of reading a bare "operation not
// permitted" from deep inside a setup step.
//
// Each set below (XSK, Testbed, Clean) is the minimum found by experiment
// on Linux 6.18 (kernel.unprivileged_bpf_disabled=2): the command ran as
// user nobody holding exactly the set as ambient capabilities (setpriv),
// and failed with each member dropped in turn. cmd/sdr's caps_test.go
// repeats that experiment; README.md's "Containers" section and
// docs/containers.md explain every member and the matching docker run
// lines.
package caps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Cap is a Linux capability, numbered as in <linux/capability.h>.
type Cap uint8

// The capabilities the commands of this module need.
const (
	DACOverride Cap = unix.CAP_DAC_OVERRIDE
	NetAdmin    Cap = unix.CAP_NET_ADMIN
	NetRaw      Cap = unix.CAP_NET_RAW
	IPCLock     Cap = unix.CAP_IPC_LOCK
	SysAdmin    Cap = unix.CAP_SYS_ADMIN
	Perfmon     Cap = unix.CAP_PERFMON
	BPF         Cap = unix.CAP_BPF
)

// XSK is what an emulated NIC on an AF_XDP port needs (sdr write-bw -dev
// xsk; every xsk.NewPort), in a network namespace someone else made:
//
//   - CAP_NET_ADMIN: bpf() creates the program's XSKMAP and loads an XDP
//     program only for a holder of CAP_NET_ADMIN (without it: "map xsks:
//     map create: operation not permitted").
//   - CAP_NET_RAW: socket(AF_XDP) (without it: "xsk: socket: operation not
//     permitted").
//   - CAP_BPF: with kernel.unprivileged_bpf_disabled set (2 here, the
//     default of most distributions) bpf() refuses everything else; XDP
//     programs need it whatever the sysctl says. Without it cilium/ebpf
//     cannot even probe how the kernel accounts BPF memory and reports a
//     failed memlock change.
//   - CAP_PERFMON: the verifier allows the steering program's pointer
//     arithmetic only to a holder of CAP_PERFMON ("pointer arithmetic
//     with it prohibited for !root", the Spectre v1 hardening).
//   - CAP_IPC_LOCK: registering the UMEM pins its pages (64 MiB per port
//     by default) beyond RLIMIT_MEMLOCK (8 MiB here) only for a holder of
//     CAP_IPC_LOCK; an unlimited RLIMIT_MEMLOCK (docker run --ulimit
//     memlock=-1) does instead (without either: "register UMEM: no buffer
//     space available").
//
// CAP_SYS_ADMIN also grants what CAP_BPF and CAP_PERFMON grant (the
// kernel's bpf_capable and perfmon_capable), so it may stand in for both,
// but it grants far more. Since Linux 5.11 BPF memory is charged to the
// memory cgroup, so RLIMIT_MEMLOCK does not limit the program and its
// maps and CAP_SYS_RESOURCE is not needed.
var XSK = []Cap{NetAdmin, NetRaw, BPF, Perfmon, IPCLock}

// Testbed is what building the namespace testbed needs (sdr testbed
// -carrier netns: host and wan namespaces, veths, the AF_XDP link
// emulator and the hosts' AF_XDP ports):
//
//   - CAP_SYS_ADMIN: unshare(CLONE_NEWNET) and setns() into the new
//     namespaces, and the bind mounts that name them under /run/netns as
//     iproute2 does (without it: "make /run/netns a shared mount:
//     operation not permitted"). Mounting there needs CAP_SYS_ADMIN in the
//     user namespace that owns the mount namespace, the initial one on a
//     host or in a container without user namespaces: a user namespace of
//     one's own would not do, and bpf() checks CAP_BPF and CAP_NET_ADMIN
//     in the initial user namespace anyway.
//   - CAP_NET_ADMIN: veth pairs, bridges, addresses, neighbours, links up,
//     ethtool's checksum offload, and the XDP programs (without it: "bring
//     up lo: operation not permitted").
//   - CAP_NET_RAW: the AF_XDP sockets, as in XSK.
//   - CAP_IPC_LOCK: the UMEMs (two in the emulator, one per host port), as
//     in XSK.
//
// CAP_BPF and CAP_PERFMON are not listed: CAP_SYS_ADMIN already grants
// what they grant, and the testbed runs with both dropped. A process that
// is not root (uid 0) also needs to write /run/netns: Check reports
// CAP_DAC_OVERRIDE missing when it cannot (pass the directory).
var Testbed = []Cap{SysAdmin, NetAdmin, NetRaw, IPCLock}

// Clean is what deleting a crashed run's namespaces needs (sdr testbed
// clean): CAP_SYS_ADMIN to unmount them (and to unshare a private mount
// namespace for shadowed ones), plus, for a process that is not root, the
// right to write /run/netns, as for Testbed.
var Clean = []Cap{SysAdmin}

// names are the capability names of <linux/capability.h>, by number.
var names = [...]string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
	"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
	"CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// String returns the capability's name as the kernel headers spell it,
// e.g. "CAP_NET_ADMIN".
func (c Cap) String() string {
	if int(c) < len(names) {
		return names[c]
	}
	return fmt.Sprintf("CAP_%d", c)
}

// Set is a set of capabilities, bit c for Cap c, as the kernel reports
// them.
type Set uint64

// Has reports whether c is in s.
func (s Set) Has(c Cap) bool { return c < 64 && s&(1<<c) != 0 }

// State is what the kernel looks at when it decides whether this process
// may do what a command does.
type State struct {
	// Effective is the process's effective capability set.
	Effective Set
	// MemlockUnlimited reports an unlimited RLIMIT_MEMLOCK hard limit,
	// which the AF_XDP code raises the soft limit to: then pinning a UMEM
	// needs no CAP_IPC_LOCK.
	MemlockUnlimited bool
}

// Current reads this process's State: one capget and one getrlimit.
// Capabilities are per thread; every thread of a Go program has the same
// unless the program changed one thread's.
func Current() (State, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return State{}, fmt.Errorf("caps: capget: %w", err)
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		return State{}, fmt.Errorf("caps: getrlimit: %w", err)
	}
	return State{
		Effective:        Set(data[0].Effective) | Set(data[1].Effective)<<32,
		MemlockUnlimited: lim.Max == unix.RLIM_INFINITY,
	}, nil
}

// Granted reports whether s grants what c grants: c is effective, or the
// kernel accepts something else in its place (CAP_SYS_ADMIN for CAP_BPF
// and CAP_PERFMON; an unlimited RLIMIT_MEMLOCK for pinning memory, what
// CAP_IPC_LOCK is needed for here).
func (s State) Granted(c Cap) bool {
	switch {
	case s.Effective.Has(c):
		return true
	case c == BPF || c == Perfmon:
		return s.Effective.Has(SysAdmin)
	case c == IPCLock:
		return s.MemlockUnlimited
	}
	return false
}

// Missing returns the members of need that s does not grant, in need's
// order.
func (s State) Missing(need ...Cap) []Cap {
	var miss []Cap
	for _, c := range need {
		if !s.Granted(c) {
			miss = append(miss, c)
		}
	}
	return miss
}

// MissingError is Check's error: a command lacks capabilities it needs.
type MissingError struct {
	// Command names what needs them, e.g. "sdr testbed -carrier netns".
	Command string
	// Need is everything the command needs; Missing the part the process
	// lacks.
	Need, Missing []Cap
	// Unwritable are directories the command creates files in that the
	// process may not write (CAP_DAC_OVERRIDE is then in Missing).
	Unwritable []string
}

// Error names the command, what it needs, what is missing and where to
// read how to grant it, e.g. "sdr testbed -carrier netns needs
// CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_NET_RAW, CAP_IPC_LOCK (missing:
// CAP_SYS_ADMIN): run as root or grant them, see README 'Containers'".
func (e *MissingError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s needs %s (missing: %s", e.Command, join(e.Need), join(e.Missing))
	var sysAdminSaid bool
	for _, c := range e.Missing {
		switch {
		case (c == BPF || c == Perfmon) && !sysAdminSaid:
			sysAdminSaid = true
			b.WriteString("; CAP_SYS_ADMIN would stand in for CAP_BPF and CAP_PERFMON")
		case c == IPCLock:
			b.WriteString("; an unlimited memlock limit would stand in for CAP_IPC_LOCK")
		case c == DACOverride:
			fmt.Fprintf(&b, "; CAP_DAC_OVERRIDE to write %s, which this user may not", strings.Join(e.Unwritable, ", "))
		}
	}
	b.WriteString("): run as root or grant them, see README 'Containers'")
	return b.String()
}

func join(cs []Cap) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = c.String()
	}
	return strings.Join(s, ", ")
}

// SkipEnv names the environment switch that turns Check off when set to
// 1: an escape hatch for a kernel that decides differently from the one
// these sets were measured on, and what lets the tests prove that the
// kernel itself refuses a command each member is dropped from.
const SkipEnv = "SDR_CAPS_NOCHECK"

// Check returns a *MissingError naming command if this process lacks any
// of need, or cannot write one of dirs (directories the command creates
// and removes files in, such as /run/netns; one that does not exist yet
// counts as its nearest existing parent, where it would be made), and nil
// otherwise or when SkipEnv is 1. It costs a capget, a getrlimit and an
// access check per directory.
func Check(need []Cap, command string, dirs ...string) error {
	if os.Getenv(SkipEnv) == "1" {
		return nil
	}
	s, err := Current()
	if err != nil {
		return err
	}
	e := &MissingError{Command: command, Need: need, Missing: s.Missing(need...)}
	for _, d := range dirs {
		if !writable(d) {
			e.Unwritable = append(e.Unwritable, d)
		}
	}
	if len(e.Unwritable) > 0 {
		e.Need = append(need[:len(need):len(need)], DACOverride)
		e.Missing = append(e.Missing, DACOverride)
	}
	if len(e.Missing) == 0 {
		return nil
	}
	return e
}

// writable reports whether this process, with its effective user and
// capabilities, may create files in dir or, if dir does not exist, in
// the nearest parent that does.
func writable(dir string) bool {
	for {
		err := unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS)
		if !errors.Is(err, unix.ENOENT) {
			return err == nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return false
		}
		dir = parent
	}
}
