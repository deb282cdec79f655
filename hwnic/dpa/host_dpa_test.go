//go:build dpa

package dpa

import (
	"errors"
	"os"
	"testing"

	"github.com/sdr-rdma/sdr/sdr/backend"
)

// TestHardwareOpen opens the BlueField named by SDR_DPA_DEVICE (e.g.
// mlx5_0): device, PD, null MR, FlexIO process, window; registers and
// deregisters memory; and pins down that NewQP is not there yet.
func TestHardwareOpen(t *testing.T) {
	name := os.Getenv("SDR_DPA_DEVICE")
	if name == "" {
		t.Skip("SDR_DPA_DEVICE is not set: no BlueField-3 to open")
	}
	dev, err := New(Options{Device: name, Port: 1}).Open(backend.DeviceAttr{Channels: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	mem, err := dev.RegisterMemory(make([]byte, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	if err := mem.Deregister(); err != nil {
		t.Fatal(err)
	}
	if err := mem.Deregister(); err == nil {
		t.Error("second Deregister succeeded")
	}
	if _, err := dev.NewQP(backend.QPAttr{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("NewQP: %v", err)
	}
	if _, err := New(Options{Device: "no-such-device"}).Open(backend.DeviceAttr{Channels: 1}); err == nil {
		t.Error("opened a device that does not exist")
	}
}
