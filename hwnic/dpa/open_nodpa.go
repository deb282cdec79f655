//go:build !dpa

package dpa

import (
	"fmt"

	"github.com/sdr-rdma/sdr/sdr/backend"
)

// Open fails: this build has no BlueField-3 support (see ErrNotBuilt).
func (b *Backend) Open(backend.DeviceAttr) (backend.Device, error) {
	return nil, fmt.Errorf("dpa: open %q: %w", b.opts.Device, ErrNotBuilt)
}
