//go:build !cgo

package dpasim_test

import (
	"errors"
	"testing"

	"github.com/sdr-rdma/sdr/hwnic/dpa/dpasim"
	"github.com/sdr-rdma/sdr/sdr/backend"
)

func TestOpenWithoutCgo(t *testing.T) {
	if _, err := dpasim.New(nil).Open(backend.DeviceAttr{Channels: 1}); !errors.Is(err, dpasim.ErrNoCgo) {
		t.Fatalf("Open: %v, want ErrNoCgo", err)
	}
}
