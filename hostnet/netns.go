// Package hostnet builds test networks out of real kernel objects: hosts
// are network namespaces joined by veth pairs, created and torn down with
// netlink. Everything it creates is named with NamePrefix so that
// CleanupLeftovers can find what a crashed run left behind.
//
// Namespaces are named the way iproute2 names them, so `ip netns` sees
// them and both tools coexist: RunDir is bind-mounted on itself and made
// a shared mount (once, under the same directory lock `ip netns add`
// takes), and each namespace is a bind mount of its nsfs file on
// RunDir/NAME. Without that convention, the first `ip netns add` run
// while a testbed lives bind-mounts RunDir over the testbed's mounts and
// leaves them unreachable (see Namespace.Close for how such shadowed
// mounts are still removed).
package hostnet

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NamePrefix starts the name of every namespace the testbed creates.
const NamePrefix = "sdrtb-"

// RunDir is the directory of named network namespaces, iproute2's
// NETNS_RUN_DIR (/var/run/netns, a symlink to it on current systems).
const RunDir = "/run/netns"

// live holds the namespaces this process created and has not deleted, so
// that test suites can check they leave nothing behind. A name leaves it
// only once its file is gone.
var live sync.Map // name -> struct{}

// Live returns the names of the namespaces this process created and has
// not deleted yet.
func Live() []string {
	var names []string
	live.Range(func(k, _ any) bool {
		names = append(names, k.(string))
		return true
	})
	return names
}

// ErrLeaked reports namespaces a process created and did not delete.
var ErrLeaked = errors.New("namespaces left behind")

// CloseLive deletes every namespace this process created and has not
// deleted: a test binary calls it at exit to find (and remove) what its
// tests leaked. If there was any, the error wraps ErrLeaked and names
// them, with any failure to delete them.
func CloseLive() error {
	left := Live()
	if len(left) == 0 {
		return nil
	}
	errs := []error{fmt.Errorf("hostnet: %w: %d: %v", ErrLeaked, len(left), left)}
	for _, name := range left {
		errs = append(errs, (&Namespace{Name: name}).Close())
	}
	return errors.Join(errs...)
}

// Namespace is a named network namespace (visible to `ip netns`).
type Namespace struct {
	Name string
	// file holds the namespace open (nil once closed, or for a Namespace
	// made of a name only, which Close can still delete).
	file *os.File
}

// handle is the namespace as the netns and netlink packages take it.
func (n *Namespace) handle() netns.NsHandle {
	if n.file == nil {
		return netns.None()
	}
	return netns.NsHandle(n.file.Fd())
}

func uniqueName(role string) string {
	var b [4]byte
	rand.Read(b[:])
	return NamePrefix + role + "-" + hex.EncodeToString(b[:])
}

// prepareRunDir makes RunDir a shared mount, bind-mounting it on itself
// first if it is a plain directory, exactly as `ip netns add` does, under
// the exclusive lock on the directory iproute2 takes for the same steps
// (two processes doing them at once would stack bind mounts). Shared, the
// namespace mounts below it propagate to other mount namespaces, so an
// unmount in one frees the namespace in all of them. It costs a few
// syscalls and is done before every creation: something may have
// unmounted the directory since.
func prepareRunDir() error {
	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return fmt.Errorf("hostnet: %w", err)
	}
	// iproute2 goes on without the lock when it cannot take it; so do we.
	if fd, err := unix.Open(RunDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		defer unix.Close(fd)
		unix.Flock(fd, unix.LOCK_EX) // released by the close
	}
	for bound := false; ; bound = true {
		err := unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			return nil
		}
		// EINVAL: not a mount point yet (or still not, after our bind).
		if !errors.Is(err, unix.EINVAL) || bound {
			return fmt.Errorf("hostnet: make %s a shared mount: %w", RunDir, err)
		}
		if err := unix.Mount(RunDir, RunDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("hostnet: bind-mount %s on itself: %w", RunDir, err)
		}
	}
}

// NewNamespace creates a namespace named NamePrefix+role+random suffix,
// with its loopback up, mounted at RunDir/NAME as `ip netns add` would.
// It costs a namespace (about a millisecond of kernel work) and an open
// file descriptor until Close.
func NewNamespace(role string) (*Namespace, error) {
	if err := prepareRunDir(); err != nil {
		return nil, err
	}
	name := uniqueName(role)
	path := filepath.Join(RunDir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return nil, fmt.Errorf("hostnet: create namespace file: %w", err)
	}
	f.Close()
	live.Store(name, struct{}{})
	ns := &Namespace{Name: name}
	if err := ns.create(path); err != nil {
		return nil, errors.Join(err, ns.Close())
	}
	return ns, nil
}

// create makes a new network namespace on a locked thread, mounts it on
// path, brings its loopback up and returns the thread to where it was.
func (n *Namespace) create(path string) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return fmt.Errorf("hostnet: current namespace: %w", err)
	}
	defer orig.Close()
	h, err := netns.New() // switches this thread into it
	if err != nil {
		return fmt.Errorf("hostnet: create namespace %s: %w", n.Name, err)
	}
	n.file = os.NewFile(uintptr(h), n.Name)
	err = unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path, "none", unix.MS_BIND, "")
	if err != nil {
		err = fmt.Errorf("hostnet: mount namespace %s: %w", n.Name, err)
	} else if lo, lerr := netlink.LinkByName("lo"); lerr != nil {
		err = fmt.Errorf("hostnet: %s: loopback: %w", n.Name, lerr)
	} else if lerr := netlink.LinkSetUp(lo); lerr != nil {
		err = fmt.Errorf("hostnet: %s: bring up lo: %w", n.Name, lerr)
	}
	if serr := netns.Set(orig); serr != nil {
		// This thread is stuck in the new namespace: do not return it to
		// the scheduler (a second lock outlives the deferred unlock, and
		// the runtime ends a thread still locked when its goroutine exits).
		runtime.LockOSThread()
		return errors.Join(err, fmt.Errorf("hostnet: return to the original namespace: %w", serr))
	}
	return err
}

// Do runs fn with the calling goroutine's OS thread inside the namespace.
// Goroutines fn starts do not inherit the namespace; sockets and other
// file descriptors fn opens stay in it.
func (n *Namespace) Do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return fmt.Errorf("hostnet: current namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(n.handle()); err != nil {
		return fmt.Errorf("hostnet: enter %s: %w", n.Name, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		runtime.LockOSThread() // keep the tainted thread out of the pool
		return errors.Join(ferr, fmt.Errorf("hostnet: leave %s: %w", n.Name, err))
	}
	return ferr
}

// Handle returns a netlink handle operating inside the namespace.
func (n *Namespace) Handle() (*netlink.Handle, error) {
	return netlink.NewHandleAt(n.handle())
}

// Close deletes the namespace; its interfaces go with it. It unmounts
// and unlinks RunDir/NAME as `ip netns delete` does; when the mount is
// shadowed (RunDir was bind-mounted over it after it was made, so the
// file cannot be unlinked while the hidden mount holds it), it removes it
// as deleteNamed describes. A namespace already gone is not an error.
func (n *Namespace) Close() error {
	if n.file != nil {
		n.file.Close()
		n.file = nil
	}
	if err := deleteNamed(n.Name); err != nil {
		return err
	}
	live.Delete(n.Name)
	return nil
}

// deleteNamed removes RunDir/name and the mounts on it. First as iproute2
// does: unmount, unlink. If the unlink fails with EBUSY, a mount on the
// file is hidden beneath a later bind mount of RunDir on itself and no
// path reaches it; then, on a throw-away thread in a private copy of the
// mount namespace, it unmounts the copies of the covering mounts and of
// the file's mounts, and unlinks the file there. The file is the same
// dentry in every mount namespace, and the kernel detaches every mount on
// a dentry that is unlinked, in all mount namespaces, so the hidden mount
// goes and the namespace with it. That costs a thread and a copy of the
// mount table, only in this rare case.
func deleteNamed(name string) error {
	path := filepath.Join(RunDir, name)
	unix.Unmount(path, unix.MNT_DETACH) // EINVAL when nothing is mounted
	err := unix.Unlink(path)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("hostnet: delete namespace %s: %w", name, err)
	}
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the runtime ends this thread, whose mount
		// namespace is no longer the process's, when the goroutine returns.
		runtime.LockOSThread()
		done <- unlinkBeneath(path)
	}()
	if err := <-done; err != nil {
		return fmt.Errorf("hostnet: delete namespace %s (its mount is shadowed): %w", name, err)
	}
	return nil
}

// unlinkBeneath runs on a locked thread it may spoil: it moves the thread
// into a private copy of the mount namespace, where unmounting changes
// nothing for anyone else, strips every mount stacked on RunDir and on
// path, and unlinks path.
func unlinkBeneath(path string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare the mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "none", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mount namespace copy private: %w", err)
	}
	for _, p := range []string{RunDir, path} {
		for unix.Unmount(p, unix.MNT_DETACH) == nil {
		}
	}
	return unix.Unlink(path)
}

// CleanupLeftovers deletes every namespace whose name starts with
// NamePrefix: what runs that crashed before their cleanup left behind,
// mounted normally, shadowed by a later bind mount of RunDir, or files a
// failed delete left without a mount. It returns the names it deleted.
func CleanupLeftovers() ([]string, error) { return cleanupMatching(NamePrefix) }

func cleanupMatching(prefix string) ([]string, error) {
	entries, err := os.ReadDir(RunDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hostnet: list namespaces: %w", err)
	}
	var deleted []string
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		if err := deleteNamed(e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		live.Delete(e.Name())
		deleted = append(deleted, e.Name())
	}
	return deleted, errors.Join(errs...)
}
