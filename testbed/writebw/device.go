// Opening this side's emulated NIC. write-bw opens it itself, not
// through backends.Open, the way the other tools open a device by name:
// it sets what a device name cannot say (the AF_XDP port's injected loss,
// busy polling and ring sizes, the pcap tap, congestion control off),
// refuses an MTU the interface cannot carry before it contacts the peer,
// and reads the *xsk.Port's ring drops beside the *emunic.Device's
// counters, where backends.Device keeps the device only. Loopback opens
// its two pipe devices itself for the same reasons (the tap, congestion
// control off).

package writebw

import (
	"fmt"
	"net/netip"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/udp"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
)

// openDevice opens this side's emulated NIC as f describes; nic reads
// its congestion counters.
func openDevice(f *Options, server bool) (dev *emunic.Device, desc string, nic func() NICCounters, err error) {
	dev, desc, port, err := openPort(f, server)
	return dev, desc, func() NICCounters { return readNIC(dev, port) }, err
}

// openPort is openDevice, returning the AF_XDP port if it made one.
func openPort(f *Options, server bool) (*emunic.Device, string, *xsk.Port, error) {
	switch f.Dev {
	case "xsk":
		if f.Iface == "" {
			return nil, "", nil, fmt.Errorf("-dev xsk needs -i IFACE: %w", errUsage)
		}
		iface, gid, err := hostnet.InterfaceGID(f.Iface)
		if err != nil {
			return nil, "", nil, err
		}
		loss := 0.0
		if server {
			loss = f.Params.Loss
		}
		busyPoll := f.BusyPoll
		if busyPoll <= 0 {
			busyPoll = -1 // PortConfig's "never"
		}
		port, err := xsk.NewPort(xsk.PortConfig{Interface: f.Iface, DropProbability: loss, BusyPoll: busyPoll, Socket: xskRings})
		if err != nil {
			return nil, "", nil, err
		}
		dev, err := emunic.NewDevice(emunic.Config{Port: port, GID: gid, MAC: [6]byte(iface.HardwareAddr), Tap: f.Tap, DisableCongestionControl: f.NoCC})
		if err != nil {
			port.Close()
			return nil, "", nil, err
		}
		// Refused here, before the peer is contacted: frames longer than
		// the interface's MTU would vanish in the kernel.
		if err = dev.CheckPathMTU(f.Params.MTU); err != nil {
			dev.Close()
			return nil, "", nil, fmt.Errorf("-m %d on %s: %w", f.Params.MTU, f.Iface, err)
		}
		mode := "copy mode: the driver has no zero-copy"
		if port.ZeroCopy() {
			mode = "zero-copy"
		}
		return dev, fmt.Sprintf("emunic/xsk on %s (%v), %d queues, %s", f.Iface, gid, port.Queues(), mode), port, err
	case "udp":
		if server && f.Params.Loss > 0 {
			return nil, "", nil, fmt.Errorf("-loss needs -dev xsk or -loopback: %w", errUsage)
		}
		addr := f.Addr
		if addr == "" && f.Iface != "" {
			_, gid, err := hostnet.InterfaceGID(f.Iface)
			if err != nil {
				return nil, "", nil, err
			}
			addr = gid.String()
		}
		if addr == "" {
			addr = "127.0.0.1"
		}
		gid, err := netip.ParseAddr(addr)
		if err != nil {
			return nil, "", nil, fmt.Errorf("-a %q: %w", addr, err)
		}
		port, err := udp.NewPort(gid)
		if err != nil {
			return nil, "", nil, err
		}
		dev, err := emunic.NewDevice(emunic.Config{Port: port, GID: gid, Tap: f.Tap, DisableCongestionControl: f.NoCC})
		return dev, fmt.Sprintf("emunic/udp on %v", gid), nil, err
	}
	return nil, "", nil, fmt.Errorf("-dev %q: want xsk or udp: %w", f.Dev, errUsage)
}

// xskRings sizes the AF_XDP rings as a NIC's RX ring is raised for a
// bulk receiver (ethtool -G rx 16384): 16384 descriptors of 2 KiB chunks
// absorb about 40 ms of 1 KiB frames at 0.4 Mpps, the time a receiver
// process may wait for a core on a loaded host, before the kernel drops
// for a full ring. The device's RX-ring threshold sends CNPs long before.
var xskRings = xsk.Config{FrameSize: 2048, RingSize: 16384, NumFrames: 65536}
