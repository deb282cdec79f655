package hostnet

import (
	"fmt"
	"net"
	"net/netip"
)

// InterfaceGID returns the named interface and the GID an emulated NIC
// on it takes: its first IPv4 address, or on an IPv6-only interface its
// first IPv6 address of global scope (a unique local fd00::/8 address
// counts; link-local ones do not, as they name no host beyond the link).
func InterfaceGID(name string) (*net.Interface, netip.Addr, error) {
	iface, err := net.InterfaceByName(name)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	addrs, err := iface.Addrs()
	if err != nil {
		return nil, netip.Addr{}, err
	}
	var v6 netip.Addr
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		switch {
		case !ok:
		case ip.Unmap().Is4():
			return iface, ip.Unmap(), nil
		case !v6.IsValid() && ip.IsGlobalUnicast():
			v6 = ip
		}
	}
	if !v6.IsValid() {
		return nil, netip.Addr{}, fmt.Errorf("%s has no IPv4 address and no IPv6 address beyond link-local", name)
	}
	return iface, v6, nil
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
