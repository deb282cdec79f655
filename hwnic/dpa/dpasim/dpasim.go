//go:build cgo

package dpasim

import (
	"fmt"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/sdr/backend"
)

// Backend opens SDR devices on one emulated NIC with the DPA handler
// doing the per-packet work.
type Backend struct {
	dev *emunic.Device
}

// New returns a backend on dev; the device stays the caller's.
func New(dev *emunic.Device) *Backend { return &Backend{dev: dev} }

// Open creates a device context with the given channel count: sdrnic's
// (memory, datagram channels, transports), with NewQP plugging in the C
// handler.
func (b *Backend) Open(attr backend.DeviceAttr) (backend.Device, error) {
	d, err := sdrnic.New(b.dev, sdrnic.Options{}).OpenDevice(attr)
	if err != nil {
		return nil, fmt.Errorf("dpasim: open: %w", err)
	}
	return &device{Device: d, channels: attr.Channels}, nil
}

// device is sdrnic's context whose QPs run the C handler.
type device struct {
	*sdrnic.Device
	channels int
}
