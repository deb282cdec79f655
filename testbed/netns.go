// Package testbed builds test networks out of real kernel objects: hosts
// are network namespaces joined by veth pairs, created and torn down with
// netlink. Everything it creates is named with NamePrefix so that
// CleanupLeftovers can find what a crashed run left behind.
package testbed

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// NamePrefix starts the name of every namespace the testbed creates.
const NamePrefix = "sdrtb-"

// live counts the namespaces this process created and has not closed, so
// that test suites can check they leave nothing behind.
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

// Namespace is a named network namespace (visible to `ip netns`).
type Namespace struct {
	Name   string
	handle netns.NsHandle
}

func uniqueName(role string) string {
	var b [4]byte
	rand.Read(b[:])
	return NamePrefix + role + "-" + hex.EncodeToString(b[:])
}

// NewNamespace creates a namespace named NamePrefix+role+random suffix,
// with its loopback up.
func NewNamespace(role string) (*Namespace, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("testbed: current namespace: %w", err)
	}
	defer orig.Close()
	name := uniqueName(role)
	h, err := netns.NewNamed(name) // switches this thread into it
	if err != nil {
		netns.Set(orig)
		return nil, fmt.Errorf("testbed: create namespace %s: %w", name, err)
	}
	ns := &Namespace{Name: name, handle: h}
	live.Store(name, struct{}{})
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if serr := netns.Set(orig); serr != nil {
		// This thread is stuck in the new namespace: do not return it to
		// the scheduler (LockOSThread without Unlock ends it).
		runtime.LockOSThread()
		return nil, fmt.Errorf("testbed: return to the original namespace: %w", serr)
	}
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("testbed: %s: bring up lo: %w", name, err)
	}
	return ns, nil
}

// Do runs fn with the calling goroutine's OS thread inside the namespace.
// Goroutines fn starts do not inherit the namespace; sockets and other
// file descriptors fn opens stay in it.
func (n *Namespace) Do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return fmt.Errorf("testbed: current namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(n.handle); err != nil {
		return fmt.Errorf("testbed: enter %s: %w", n.Name, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		runtime.LockOSThread() // keep the tainted thread out of the pool
		return errors.Join(ferr, fmt.Errorf("testbed: leave %s: %w", n.Name, err))
	}
	return ferr
}

// Handle returns a netlink handle operating inside the namespace.
func (n *Namespace) Handle() (*netlink.Handle, error) {
	return netlink.NewHandleAt(n.handle)
}

// Close deletes the namespace; its interfaces go with it.
func (n *Namespace) Close() error {
	live.Delete(n.Name)
	n.handle.Close()
	if err := netns.DeleteNamed(n.Name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("testbed: delete namespace %s: %w", n.Name, err)
	}
	return nil
}

// CleanupLeftovers deletes every namespace whose name starts with
// NamePrefix: what runs that crashed before their cleanup left behind.
// It returns the names it deleted.
func CleanupLeftovers() ([]string, error) { return cleanupMatching(NamePrefix) }

func cleanupMatching(prefix string) ([]string, error) {
	entries, err := os.ReadDir("/var/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("testbed: list namespaces: %w", err)
	}
	var deleted []string
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		if err := netns.DeleteNamed(e.Name()); err != nil {
			errs = append(errs, fmt.Errorf("testbed: delete %s: %w", e.Name(), err))
			continue
		}
		live.Delete(e.Name())
		deleted = append(deleted, e.Name())
	}
	return deleted, errors.Join(errs...)
}
