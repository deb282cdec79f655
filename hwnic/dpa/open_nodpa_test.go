//go:build !dpa

package dpa

import (
	"errors"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/sdr/backend"
)

func TestOpenWithoutTag(t *testing.T) {
	_, err := New(Options{Device: "mlx5_0"}).Open(backend.DeviceAttr{Channels: 1})
	if !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Open: %v, want ErrNotBuilt", err)
	}
	for _, word := range []string{"-tags dpa,doca", "DOCA", "mlx5_0"} {
		if !strings.Contains(err.Error(), word) {
			t.Errorf("error %q does not name %q", err, word)
		}
	}
}
