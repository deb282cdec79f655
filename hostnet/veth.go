package hostnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Host is one end of a link: a namespace and its interface.
type Host struct {
	NS      *Namespace
	IfName  string
	Ifindex int
	MAC     [6]byte
	Addr    netip.Addr
}

// PairConfig describes a two-host network.
type PairConfig struct {
	// Subnet is an IPv4 or IPv6 prefix whose first two addresses after
	// the network's (.1 and .2, ::1 and ::2) the hosts get (default
	// 10.77.0.0/24, the rxe captures' addressing). With an IPv6 subnet
	// the hosts have no IPv4 address: an IPv6-only network, RoCEv2 GIDs
	// as they are on the wire.
	Subnet netip.Prefix
	// MTU of every interface (default 1500).
	MTU int
	// Queues is how many RX and TX queues every veth end has (default 1).
	// With more, a bridge (Switched) transmits each flow on the queue its
	// hash picks, and the veth's peer receives it on that queue, as RSS
	// spreads flows over a real NIC's queues.
	Queues int
	// Switched puts a third namespace ("wan") between the hosts, with a
	// bridge joining one veth pair to each host. Frames an AF_XDP socket
	// sends or receives bypass the packet taps of its own interface, so
	// the wire is observed there: capture on Pair.WANIf.
	Switched bool
}

// Pair is a two-host network.
type Pair struct {
	A, B *Host
	// WAN is the middle namespace of a switched pair (nil otherwise) and
	// WANIf the bridge port toward host A in it, which every frame between
	// the hosts crosses: capture there (a capture on the bridge device
	// misses the unicast frames it forwards between ports).
	WAN   *Namespace
	WANIf string

	spaces []*Namespace
}

// Close deletes every namespace of the pair, and with them their links.
func (p *Pair) Close() error {
	var errs []error
	for _, ns := range p.spaces {
		errs = append(errs, ns.Close())
	}
	return errors.Join(errs...)
}

// NewPair creates two host namespaces joined by a veth pair (or, when
// Switched, by a bridge in a third namespace), each veth end with Queues
// RX and TX queues (XDP on veth wants matching queue counts), addresses .1
// and .2 of the subnet, the MTU, and every link up and operational (the
// kernel passes frames over it). On error nothing is left behind;
// otherwise the caller must Close the pair.
func NewPair(cfg PairConfig) (*Pair, error) {
	if !cfg.Subnet.IsValid() {
		cfg.Subnet = netip.MustParsePrefix("10.77.0.0/24")
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	cfg.Queues = max(1, cfg.Queues)
	p := &Pair{}
	if err := p.build(cfg); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (p *Pair) build(cfg PairConfig) error {
	roles := []string{"a", "b"}
	if cfg.Switched {
		roles = append(roles, "wan")
	}
	for _, role := range roles {
		ns, err := NewNamespace(role)
		if err != nil {
			return err
		}
		p.spaces = append(p.spaces, ns)
	}
	base := cfg.Subnet.Masked().Addr()
	p.A = &Host{NS: p.spaces[0], IfName: "veth0", Addr: base.Next()}
	p.B = &Host{NS: p.spaces[1], IfName: "veth0", Addr: base.Next().Next()}
	if !cfg.Switched {
		if err := AddVeth(p.A.NS, p.A.IfName, p.B.NS, p.B.IfName, cfg.MTU, cfg.Queues); err != nil {
			return err
		}
	} else {
		p.WAN, p.WANIf = p.spaces[2], "to-a"
		h, err := p.WAN.Handle()
		if err != nil {
			return err
		}
		defer h.Close()
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0", MTU: cfg.MTU}}
		if err := h.LinkAdd(br); err != nil {
			return fmt.Errorf("hostnet: add bridge: %w", err)
		}
		for _, side := range []struct {
			host *Host
			port string
		}{{p.A, "to-a"}, {p.B, "to-b"}} {
			if err := AddVeth(p.WAN, side.port, side.host.NS, side.host.IfName, cfg.MTU, cfg.Queues); err != nil {
				return err
			}
			l, err := h.LinkByName(side.port)
			if err == nil {
				err = h.LinkSetMaster(l, br)
			}
			if err == nil {
				err = h.LinkSetUp(l)
			}
			if err != nil {
				return fmt.Errorf("hostnet: bridge port %s: %w", side.port, err)
			}
		}
		if err := h.LinkSetUp(br); err != nil {
			return fmt.Errorf("hostnet: bridge up: %w", err)
		}
	}
	for _, host := range []*Host{p.A, p.B} {
		if err := host.configure(cfg.Subnet); err != nil {
			return err
		}
	}
	for _, host := range []*Host{p.A, p.B} {
		if err := host.waitOperUp(5 * time.Second); err != nil {
			return err
		}
	}
	return nil
}

// waitOperUp waits until the host's interface is operationally up. The
// kernel attaches a link's real queueing discipline when it sees the
// carrier come up, asynchronously (linkwatch, up to a second after the
// link was set up); until then the link drops what it is given, so a
// UDP sender that does not wait for ARP first lost its first frames.
func (host *Host) waitOperUp(timeout time.Duration) error {
	h, err := host.NS.Handle()
	if err != nil {
		return err
	}
	defer h.Close()
	deadline := time.Now().Add(timeout)
	for {
		l, err := h.LinkByName(host.IfName)
		if err != nil {
			return fmt.Errorf("hostnet: %s: %w", host.IfName, err)
		}
		if l.Attrs().OperState == netlink.OperUp {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hostnet: %s/%s not operationally up after %v (state %v)", host.NS.Name, host.IfName, timeout, l.Attrs().OperState)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// AddVeth creates a veth pair with end nameA in nsA and nameB in nsB,
// queues RX and TX queues each (at least one), both at mtu and down.
func AddVeth(nsA *Namespace, nameA string, nsB *Namespace, nameB string, mtu, queues int) error {
	queues = max(1, queues)
	hA, err := nsA.Handle()
	if err != nil {
		return err
	}
	defer hA.Close()
	hB, err := nsB.Handle()
	if err != nil {
		return err
	}
	defer hB.Close()
	// The peer is created under a temporary name: nameB may exist in nsA.
	const tmp = "sdrtb-peer"
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: nameA, MTU: mtu, NumTxQueues: queues, NumRxQueues: queues},
		PeerName:  tmp, PeerNamespace: netlink.NsFd(nsB.handle()),
		PeerNumTxQueues: uint32(queues), PeerNumRxQueues: uint32(queues),
	}
	if err := hA.LinkAdd(veth); err != nil {
		return fmt.Errorf("hostnet: add veth %s/%s: %w", nsA.Name, nameA, err)
	}
	peer, err := hB.LinkByName(tmp)
	if err == nil {
		err = hB.LinkSetName(peer, nameB)
	}
	if err == nil {
		err = hB.LinkSetMTU(peer, mtu)
	}
	if err != nil {
		return fmt.Errorf("hostnet: configure veth peer %s/%s: %w", nsB.Name, nameB, err)
	}
	return nil
}

// configure addresses the host's interface, brings it up and records its
// index and MAC.
func (host *Host) configure(subnet netip.Prefix) error {
	h, err := host.NS.Handle()
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(host.IfName)
	if err != nil {
		return fmt.Errorf("hostnet: %s: %w", host.IfName, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: host.Addr.AsSlice(), Mask: net.CIDRMask(subnet.Bits(), host.Addr.BitLen())}}
	if host.Addr.Is6() {
		// Usable at once: duplicate address detection would hold the
		// address tentative (unusable as a source) for a second or more.
		addr.Flags = unix.IFA_F_NODAD
	}
	if err := h.AddrAdd(l, addr); err != nil {
		return fmt.Errorf("hostnet: address %v: %w", host.Addr, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("hostnet: up %s: %w", host.IfName, err)
	}
	if l, err = h.LinkByName(host.IfName); err != nil {
		return err
	}
	host.Ifindex = l.Attrs().Index
	copy(host.MAC[:], l.Attrs().HardwareAddr)
	return nil
}
