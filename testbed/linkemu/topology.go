package linkemu

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"

	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/link"
)

// TopologyConfig describes two hosts joined by an emulated long-haul link.
type TopologyConfig struct {
	// Subnet and MTU are hostnet.PairConfig's (defaults 10.77.0.0/24 and
	// 1500); MTU at most MaxMTU.
	Subnet netip.Prefix
	MTU    int
	// Queues is hostnet.PairConfig's: RX and TX queues per veth (default
	// 1). The emulator and the hosts' ports bind every one.
	Queues int
	// AB and BA configure the link from host A to host B and back.
	AB, BA link.Config
	// StaticNeighbors gives each host a permanent neighbour entry for the
	// other, so neither needs ARP across the link (which a lossy link
	// delays like any frame). Without it ARP crosses the emulator as every
	// other frame does.
	StaticNeighbors bool
}

// Topology is two host namespaces and the "wan" namespace between them,
// where the emulator forwards between WANIfA (the veth toward host A) and
// WANIfB.
type Topology struct {
	A, B           *hostnet.Host
	WAN            *hostnet.Namespace
	WANIfA, WANIfB string
	Emulator       *Emulator

	pair *hostnet.Pair
}

// NewTopology builds the namespaces and links and starts the emulator. On
// error nothing is left behind; otherwise the caller must Close it.
//
// It builds testbed's switched pair and removes the bridge from the wan
// namespace, so the hosts are set up exactly as every other testbed pair
// (addresses, queues per veth, MTU); the emulator takes the bridge's
// place on the same two veths.
func NewTopology(cfg TopologyConfig) (*Topology, error) {
	pair, err := hostnet.NewPair(hostnet.PairConfig{Subnet: cfg.Subnet, MTU: cfg.MTU, Queues: cfg.Queues, Switched: true})
	if err != nil {
		return nil, fmt.Errorf("linkemu: topology: %w", err)
	}
	t := &Topology{A: pair.A, B: pair.B, WAN: pair.WAN, WANIfA: "to-a", WANIfB: "to-b", pair: pair}
	if err := t.build(cfg); err != nil {
		return nil, errors.Join(err, t.Close())
	}
	return t, nil
}

func (t *Topology) build(cfg TopologyConfig) error {
	if err := removeBridge(t.WAN); err != nil {
		return err
	}
	// The wan namespace's own stack must not speak on the emulated link
	// (IPv6 router solicitations and MLD reports would reach the hosts
	// past the emulator).
	for _, name := range []string{t.WANIfA, t.WANIfB} {
		if err := disableIPv6(t.WAN, name); err != nil {
			return err
		}
	}
	// Frames the hosts' stacks send leave with checksums the veth was
	// to fill in; redirected through XDP they would arrive unfilled.
	for _, h := range []*hostnet.Host{t.A, t.B} {
		if err := hostnet.DisableTxChecksum(h.NS, h.IfName); err != nil {
			return fmt.Errorf("linkemu: topology: %w", err)
		}
	}
	if cfg.StaticNeighbors {
		if err := neighbor(t.A, t.B); err != nil {
			return err
		}
		if err := neighbor(t.B, t.A); err != nil {
			return err
		}
	}
	var err error
	t.Emulator, err = Start(t.WAN, t.WANIfA, t.WANIfB, cfg.AB, cfg.BA)
	return err
}

// removeBridge deletes the switched pair's bridge; its ports stay up.
func removeBridge(wan *hostnet.Namespace) error {
	h, err := wan.Handle()
	if err != nil {
		return fmt.Errorf("linkemu: topology: %w", err)
	}
	defer h.Close()
	br, err := h.LinkByName("br0")
	if err == nil {
		err = h.LinkDel(br)
	}
	if err != nil {
		return fmt.Errorf("linkemu: topology: remove the bridge: %w", err)
	}
	return nil
}

// disableIPv6 turns IPv6 off on interface ifname of ns.
func disableIPv6(ns *hostnet.Namespace, ifname string) error {
	// /proc/sys/net shows the network namespace of the thread that opens it.
	err := ns.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/"+ifname+"/disable_ipv6", []byte("1"), 0)
	})
	if err != nil {
		return fmt.Errorf("linkemu: topology: disable IPv6 on %s: %w", ifname, err)
	}
	return nil
}

// neighbor gives host a permanent neighbour entry for peer.
func neighbor(host, peer *hostnet.Host) error {
	h, err := host.NS.Handle()
	if err != nil {
		return fmt.Errorf("linkemu: topology: %w", err)
	}
	defer h.Close()
	family := netlink.FAMILY_V4
	if peer.Addr.Is6() {
		family = netlink.FAMILY_V6
	}
	n := &netlink.Neigh{LinkIndex: host.Ifindex, Family: family, State: netlink.NUD_PERMANENT,
		IP: peer.Addr.AsSlice(), HardwareAddr: net.HardwareAddr(peer.MAC[:])}
	if err := h.NeighSet(n); err != nil {
		return fmt.Errorf("linkemu: topology: neighbour %v on %s: %w", peer.Addr, host.NS.Name, err)
	}
	return nil
}

// Close stops the emulator and deletes the namespaces with their links.
func (t *Topology) Close() error {
	var errs []error
	if t.Emulator != nil {
		errs = append(errs, t.Emulator.Close())
	}
	return errors.Join(append(errs, t.pair.Close())...)
}
