//go:build !dpa

package dpa

import (
	"context"
	"fmt"

	"github.com/sdr-rdma/sdr/hwnic/dpa/windowprobe"
	"github.com/sdr-rdma/sdr/sdr/backend"
)

// Open fails: this build has no BlueField-3 support (see ErrNotBuilt).
func (b *Backend) Open(backend.DeviceAttr) (backend.Device, error) {
	return nil, fmt.Errorf("dpa: open %q: %w", b.opts.Device, ErrNotBuilt)
}

// ProbeWindow fails: this build has no BlueField-3 support (see
// ErrNotBuilt).
func (b *Backend) ProbeWindow(context.Context, int, int) (windowprobe.Times, error) {
	return windowprobe.Times{}, fmt.Errorf("dpa: probe %q: %w", b.opts.Device, ErrNotBuilt)
}
