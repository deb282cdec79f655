package testbed

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// Host is one end of a point-to-point link: a namespace and its interface.
type Host struct {
	NS      *Namespace
	IfName  string
	Ifindex int
	MAC     [6]byte
	Addr    netip.Addr
}

// PairConfig describes a two-host link.
type PairConfig struct {
	// Subnet is a /24 whose .1 and .2 the hosts get (default 10.77.0.0/24,
	// the rxe captures' addressing).
	Subnet netip.Prefix
	// MTU of both veth ends (default 1500).
	MTU int
}

// NewPair creates two namespaces joined by a veth pair with one RX and one
// TX queue per side (XDP on veth needs matching queue counts), addresses
// .1 and .2 of the subnet, the MTU, and both ends up. The caller must call
// the returned cleanup, which deletes both namespaces, even on failure
// paths.
func NewPair(cfg PairConfig) (a, b *Host, cleanup func() error, err error) {
	if !cfg.Subnet.IsValid() {
		cfg.Subnet = netip.MustParsePrefix("10.77.0.0/24")
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	var spaces []*Namespace
	cleanup = func() error {
		var first error
		for _, ns := range spaces {
			if err := ns.Close(); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	for _, role := range []string{"a", "b"} {
		ns, err := NewNamespace(role)
		if err != nil {
			cleanup()
			return nil, nil, nil, err
		}
		spaces = append(spaces, ns)
	}
	base := cfg.Subnet.Masked().Addr()
	hosts := []*Host{
		{NS: spaces[0], IfName: "veth0", Addr: base.Next()},
		{NS: spaces[1], IfName: "veth0", Addr: base.Next().Next()},
	}
	// Create the pair in namespace A, with the peer directly in B.
	hA, err := spaces[0].Handle()
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	defer hA.Close()
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: hosts[0].IfName, MTU: cfg.MTU, NumTxQueues: 1, NumRxQueues: 1},
		PeerName:  "tmp-peer", PeerNamespace: netlink.NsFd(spaces[1].handle),
	}
	if err := hA.LinkAdd(veth); err != nil {
		cleanup()
		return nil, nil, nil, fmt.Errorf("testbed: add veth: %w", err)
	}
	hB, err := spaces[1].Handle()
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	defer hB.Close()
	if peer, err := hB.LinkByName("tmp-peer"); err == nil {
		err = hB.LinkSetName(peer, hosts[1].IfName)
		if err == nil {
			err = hB.LinkSetMTU(peer, cfg.MTU)
		}
		if err != nil {
			cleanup()
			return nil, nil, nil, fmt.Errorf("testbed: configure veth peer: %w", err)
		}
	}
	for i, h := range []*netlink.Handle{hA, hB} {
		host := hosts[i]
		l, err := h.LinkByName(host.IfName)
		if err != nil {
			cleanup()
			return nil, nil, nil, fmt.Errorf("testbed: %s: %w", host.IfName, err)
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: host.Addr.AsSlice(), Mask: net.CIDRMask(cfg.Subnet.Bits(), 32)}}
		if err := h.AddrAdd(l, addr); err != nil {
			cleanup()
			return nil, nil, nil, fmt.Errorf("testbed: address %v: %w", host.Addr, err)
		}
		if err := h.LinkSetUp(l); err != nil {
			cleanup()
			return nil, nil, nil, fmt.Errorf("testbed: up %s: %w", host.IfName, err)
		}
		if l, err = h.LinkByName(host.IfName); err != nil {
			cleanup()
			return nil, nil, nil, err
		}
		host.Ifindex = l.Attrs().Index
		copy(host.MAC[:], l.Attrs().HardwareAddr)
	}
	return hosts[0], hosts[1], cleanup, nil
}
