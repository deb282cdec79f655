//go:build cgo

package dpasim

import (
	"errors"
	"fmt"
	"sync"

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

// Open creates a device context with the given channel count. Its
// datagram channels are sdrnic's on the same emulated device.
func (b *Backend) Open(attr backend.DeviceAttr) (backend.Device, error) {
	if attr.Channels < 1 || attr.Channels > 64 {
		return nil, fmt.Errorf("dpasim: open: %d channels: %w", attr.Channels, emunic.ErrInvalidArgument)
	}
	dg, err := sdrnic.New(b.dev, sdrnic.Options{}).Open(attr)
	if err != nil {
		return nil, fmt.Errorf("dpasim: open: %w", err)
	}
	return &device{dev: b.dev, pd: b.dev.AllocPD(), channels: attr.Channels, datagrams: dg}, nil
}

// device is an open context. qps is guarded by mu.
type device struct {
	dev       *emunic.Device
	pd        *emunic.PD
	channels  int
	datagrams backend.Device

	mu  sync.Mutex
	qps []*qp
}

// memory is a registration of this backend; d tells a device's own
// memory from another's.
type memory struct {
	mr *emunic.MR
	d  *device
}

func (m memory) Bytes() []byte     { return m.mr.Bytes() }
func (m memory) Deregister() error { return m.mr.Deregister() }

func (d *device) RegisterMemory(buf []byte) (backend.Memory, error) {
	mr, err := d.pd.RegisterMR(buf, emunic.AccessLocalWrite)
	if err != nil {
		return nil, fmt.Errorf("dpasim: %w", err)
	}
	return memory{mr: mr, d: d}, nil
}

// own returns mem as this device's memory.
func (d *device) own(mem backend.Memory) (memory, error) {
	m, ok := mem.(memory)
	if !ok || m.d != d {
		return memory{}, fmt.Errorf("memory of another backend or device: %w", emunic.ErrInvalidArgument)
	}
	return m, nil
}

// NewDatagram opens a datagram channel (sdrnic's: control messages are
// not the DPA's work).
func (d *device) NewDatagram(attr backend.DatagramAttr) (backend.Datagram, error) {
	dd, ok := d.datagrams.(backend.DatagramDevice)
	if !ok {
		return nil, errors.New("dpasim: the emulated NIC offers no datagram channels")
	}
	return dd.NewDatagram(attr)
}

func (d *device) Close() error {
	d.mu.Lock()
	qps := d.qps
	d.qps = nil
	d.mu.Unlock()
	var errs []error
	for _, q := range qps {
		errs = append(errs, q.Close())
	}
	errs = append(errs, d.datagrams.Close())
	return errors.Join(errs...)
}
