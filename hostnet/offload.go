package hostnet

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DisableTxChecksum turns transmit checksum offload off on interface
// ifname of namespace ns, as `ethtool -K IF tx off` does (this machine
// has no ethtool binary). A veth with it on hands TCP and UDP segments to
// its peer with the checksum left for "hardware" to fill in; a frame
// redirected from the peer by XDP to an AF_XDP socket and sent on from
// there leaves with that unfilled checksum, and the receiving stack drops
// it. Off, the stack computes every checksum itself (TSO, which needs the
// offload, goes off with it). It costs two system calls.
func DisableTxChecksum(ns *Namespace, ifname string) error {
	_, err := ethtoolValue(ns, ifname, unix.ETHTOOL_STXCSUM, 0)
	return err
}

// TxChecksum reports whether transmit checksum offload is on for
// interface ifname of namespace ns (`ethtool -k IF`'s tx-checksumming).
func TxChecksum(ns *Namespace, ifname string) (bool, error) {
	v, err := ethtoolValue(ns, ifname, unix.ETHTOOL_GTXCSUM, 0)
	return v != 0, err
}

// ethtoolValue runs one SIOCETHTOOL command that takes and returns a
// struct ethtool_value, inside ns, and returns the value it came back
// with.
func ethtoolValue(ns *Namespace, ifname string, cmd, data uint32) (uint32, error) {
	val := struct{ cmd, data uint32 }{cmd: cmd, data: data}
	err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("hostnet: ethtool socket: %w", err)
		}
		defer unix.Close(fd)
		var ifr struct { // struct ifreq with its union's data pointer
			name [unix.IFNAMSIZ]byte
			data unsafe.Pointer
			_    [16]byte
		}
		copy(ifr.name[:unix.IFNAMSIZ-1], ifname)
		ifr.data = unsafe.Pointer(&val)
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
		runtime.KeepAlive(&val)
		if errno != 0 {
			return fmt.Errorf("hostnet: %s: ethtool command %#x: %w", ifname, cmd, errno)
		}
		return nil
	})
	return val.data, err
}
