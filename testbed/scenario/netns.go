package scenario

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/testbed/linkemu"
)

// Namespaces is the Network of real kernel objects: hosts A and B as
// network namespaces whose veths meet in a "wan" namespace, where the
// AF_XDP link emulator (testbed/linkemu) carries every frame between them
// through the link model; each host's emulated NIC sends and receives
// through an AF_XDP port on its veth. It needs root, or the capabilities
// README.md lists.
type Namespaces struct {
	topo *linkemu.Topology
}

// NamespacesConfig shapes the namespaces' network.
type NamespacesConfig struct {
	// MTU is the RoCE path MTU the interfaces are sized for: an Ethernet
	// MTU of at least 1500 that carries it, headers included.
	MTU int
	// Queues is how many RX and TX queues each veth has (default one): a
	// multi-queue host, whose QPs spread over its queues as RSS spreads
	// them.
	Queues int
	// IPv6 addresses the hosts from fd00:77::/64 only, so that the
	// devices' GIDs and every RoCEv2 frame are IPv6.
	IPv6 bool
}

// IPv6Subnet is the hosts' prefix of an IPv6 network (a unique local
// one, as the IPv4 default is private).
var IPv6Subnet = netip.MustParsePrefix("fd00:77::/64")

// NewNamespaces builds the topology cfg describes, with a clean link
// until Devices configures it. Close removes it all.
func NewNamespaces(cfg NamespacesConfig) (*Namespaces, error) {
	tc := linkemu.TopologyConfig{MTU: max(1500, cfg.MTU+128), Queues: cfg.Queues, StaticNeighbors: true}
	if cfg.IPv6 {
		tc.Subnet = IPv6Subnet
	}
	topo, err := linkemu.NewTopology(tc)
	if err != nil {
		return nil, fmt.Errorf("scenario: namespaces: %w", err)
	}
	return &Namespaces{topo: topo}, nil
}

// Carrier implements Network.
func (n *Namespaces) Carrier() string {
	family := "IPv4"
	if n.topo.A.Addr.Is6() {
		family = "IPv6"
	}
	return "network namespaces (" + family + "), AF_XDP emulated NICs, AF_XDP link emulator in the wan namespace"
}

// Devices implements Network: it reconfigures the emulator's two
// directions and opens an AF_XDP port and a device in each host namespace.
func (n *Namespaces) Devices(forward, reverse link.Config, seed uint64) (a, b *emunic.Device, err error) {
	forward.Seed, reverse.Seed = forward.Seed+seed, reverse.Seed+seed+1
	emu := n.topo.Emulator
	if err := errors.Join(emu.SetConfig(linkemu.AToB, forward), emu.SetConfig(linkemu.BToA, reverse)); err != nil {
		return nil, nil, fmt.Errorf("scenario: configure link: %w", err)
	}
	if a, err = openXSKDevice(n.topo.A); err != nil {
		return nil, nil, err
	}
	if b, err = openXSKDevice(n.topo.B); err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

func openXSKDevice(h *hostnet.Host) (*emunic.Device, error) {
	var port *xsk.Port
	if err := h.NS.Do(func() (err error) {
		port, err = xsk.NewPort(xsk.PortConfig{Interface: h.IfName})
		return err
	}); err != nil {
		return nil, fmt.Errorf("scenario: AF_XDP port in %s: %w", h.NS.Name, err)
	}
	dev, err := emunic.NewDevice(emunic.Config{Port: port, GID: h.Addr, MAC: h.MAC})
	if err != nil {
		port.Close()
		return nil, fmt.Errorf("scenario: device in %s: %w", h.NS.Name, err)
	}
	return dev, nil
}

// Emulator returns the link emulator (for its metrics).
func (n *Namespaces) Emulator() *linkemu.Emulator { return n.topo.Emulator }

// Counters implements Counting with the emulator's counters.
func (n *Namespaces) Counters() (forward, reverse LinkCounters) {
	conv := func(c linkemu.Counters) LinkCounters {
		return LinkCounters{Frames: c.FramesIn, Delivered: c.Forwarded, Lost: c.DroppedLoss, QueueDrops: c.DroppedQueue,
			OtherDrops: c.DroppedMTU + c.DroppedNoBuffer + c.DroppedOversize + c.DroppedTX + c.KernelRXDropped,
			Duplicated: c.Duplicated, Corrupted: c.Corrupted, CEMarked: c.CEMarked, Escaped: c.Escaped}
	}
	return conv(n.topo.Emulator.Counters(linkemu.AToB)), conv(n.topo.Emulator.Counters(linkemu.BToA))
}

// Close implements Network: it stops the emulator and deletes the
// namespaces, their links and XDP programs with them.
func (n *Namespaces) Close() error { return n.topo.Close() }
