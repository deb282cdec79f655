package hostnet

import (
	"fmt"
	"net"
	"net/netip"
)

// InterfaceIPv4 returns the named interface and its first IPv4 address:
// the GID an emulated NIC on it takes.
func InterfaceIPv4(name string) (*net.Interface, netip.Addr, error) {
	iface, err := net.InterfaceByName(name)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	ip, err := FirstIPv4(iface)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	return iface, ip, nil
}

// FirstIPv4 returns the first IPv4 address of ifc.
func FirstIPv4(ifc *net.Interface) (netip.Addr, error) {
	addrs, err := ifc.Addrs()
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap().Is4() {
				return ip.Unmap(), nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("%s has no IPv4 address", ifc.Name)
}
