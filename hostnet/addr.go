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
	ip, err := firstAddr(iface, netip.Addr.Is4)
	if err == nil && !ip.IsValid() {
		ip, err = firstAddr(iface, func(ip netip.Addr) bool { return ip.Is6() && ip.IsGlobalUnicast() })
	}
	switch {
	case err != nil:
		return nil, netip.Addr{}, err
	case !ip.IsValid():
		return nil, netip.Addr{}, fmt.Errorf("%s has no IPv4 address and no IPv6 address beyond link-local", name)
	}
	return iface, ip, nil
}

// FirstIPv4 returns the first IPv4 address of ifc.
func FirstIPv4(ifc *net.Interface) (netip.Addr, error) {
	ip, err := firstAddr(ifc, netip.Addr.Is4)
	if err == nil && !ip.IsValid() {
		err = fmt.Errorf("%s has no IPv4 address", ifc.Name)
	}
	return ip, err
}

// firstAddr returns the first address of ifc (IPv4-mapped ones unmapped)
// that keep takes, or the zero Addr when none does.
func firstAddr(ifc *net.Interface, keep func(netip.Addr) bool) (netip.Addr, error) {
	addrs, err := ifc.Addrs()
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && keep(ip.Unmap()) {
				return ip.Unmap(), nil
			}
		}
	}
	return netip.Addr{}, nil
}
