//go:build !cgo

package dpasim

import (
	"context"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/hwnic/dpa/windowprobe"
	"github.com/sdr-rdma/sdr/sdr/backend"
)

// Backend is unavailable without cgo.
type Backend struct{}

// New returns a backend whose Open fails with ErrNoCgo.
func New(*emunic.Device) *Backend { return &Backend{} }

// Open returns ErrNoCgo.
func (*Backend) Open(backend.DeviceAttr) (backend.Device, error) { return nil, ErrNoCgo }

// ProbeWindow returns ErrNoCgo.
func (*Backend) ProbeWindow(context.Context, int, int) (windowprobe.Times, error) {
	return windowprobe.Times{}, ErrNoCgo
}
