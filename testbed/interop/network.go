package interop

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/sdr-rdma/sdr/hostnet"
)

// Network joins the guest and an emunic host: namespace QEMU holds a
// bridge with the guest's tap and one end of a veth pair whose other end,
// Host.IfName in namespace Host.NS, carries emunic's AF_XDP port. Captures
// of the bridge see every frame both ways.
type Network struct {
	QEMU   *hostnet.Namespace
	Tap    string
	Bridge string
	// HostPort is the bridge port toward the emunic host: capture there.
	HostPort string
	Host     *hostnet.Host
	// GuestAddr is the guest's address, GuestPrefix it with its prefix.
	GuestAddr   netip.Addr
	GuestPrefix string
	GuestMAC    string
}

// NewNetwork builds the topology (10.77.0.2 guest, 10.77.0.3 emunic, as in
// the rxe captures). The caller must Close it.
func NewNetwork() (*Network, error) {
	n := &Network{Tap: "tap0", Bridge: "br0", HostPort: "to-emunic", GuestAddr: netip.MustParseAddr("10.77.0.2"),
		GuestPrefix: "10.77.0.2/24", GuestMAC: "52:54:00:77:00:02"}
	err := n.build()
	if err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

func (n *Network) build() error {
	var err error
	if n.QEMU, err = hostnet.NewNamespace("qemu"); err != nil {
		return err
	}
	ns, err := hostnet.NewNamespace("emunic")
	if err != nil {
		return err
	}
	n.Host = &hostnet.Host{NS: ns, IfName: "veth0", Addr: netip.MustParseAddr("10.77.0.3")}
	h, err := n.QEMU.Handle()
	if err != nil {
		return err
	}
	defer h.Close()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: n.Bridge}}
	if err := h.LinkAdd(br); err != nil {
		return fmt.Errorf("interop: bridge: %w", err)
	}
	// A tap is made with an ioctl on /dev/net/tun, which acts in the
	// calling thread's namespace whatever the netlink handle says.
	if err := n.QEMU.Do(func() error {
		return netlink.LinkAdd(&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: n.Tap}, Mode: netlink.TUNTAP_MODE_TAP})
	}); err != nil {
		return fmt.Errorf("interop: tap: %w", err)
	}
	if err := hostnet.AddVeth(n.QEMU, n.HostPort, ns, "veth0", 1500, 1); err != nil {
		return err
	}
	for _, name := range []string{n.Tap, n.HostPort} {
		l, err := h.LinkByName(name)
		if err == nil {
			err = h.LinkSetMaster(l, br)
		}
		if err == nil {
			err = h.LinkSetUp(l)
		}
		if err != nil {
			return fmt.Errorf("interop: bridge port %s: %w", name, err)
		}
	}
	if err := h.LinkSetUp(br); err != nil {
		return err
	}
	hh, err := ns.Handle()
	if err != nil {
		return err
	}
	defer hh.Close()
	l, err := hh.LinkByName("veth0")
	if err != nil {
		return err
	}
	if err := hh.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: n.Host.Addr.AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
		return err
	}
	if err := hh.LinkSetUp(l); err != nil {
		return err
	}
	if l, err = hh.LinkByName("veth0"); err != nil {
		return err
	}
	n.Host.Ifindex = l.Attrs().Index
	copy(n.Host.MAC[:], l.Attrs().HardwareAddr)
	return nil
}

// Close deletes both namespaces.
func (n *Network) Close() error {
	var errs []error
	if n.QEMU != nil {
		errs = append(errs, n.QEMU.Close())
	}
	if n.Host != nil && n.Host.NS != nil {
		errs = append(errs, n.Host.NS.Close())
	}
	return errors.Join(errs...)
}
