//go:build dpa

package dpa

import (
	"os"
	"testing"

	"github.com/sdr-rdma/sdr/hwnic/dpa/internal/armrace"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/sdrtest"
)

// hardware returns the BlueField devices named by SDR_DPA_DEVICE (e.g.
// mlx5_0) and SDR_DPA_PEER_DEVICE (the receiver's; the same device,
// looped back through the NIC, when unset), skipping without them.
func hardware(t *testing.T) (a, b Options) {
	name := os.Getenv("SDR_DPA_DEVICE")
	if name == "" {
		t.Skip("SDR_DPA_DEVICE is not set: no BlueField-3 to open")
	}
	peer := os.Getenv("SDR_DPA_PEER_DEVICE")
	if peer == "" {
		peer = name
	}
	gid := 3 // RoCEv2 over IPv4 on a BlueField's default GID table
	return Options{Device: name, Port: 1, GIDIndex: gid}, Options{Device: peer, Port: 1, GIDIndex: gid}
}

// TestHardwareOpen opens the BlueField: device, PD, null MR, FlexIO
// process, window, UMR QP; registers and deregisters memory; refuses a
// device that does not exist.
func TestHardwareOpen(t *testing.T) {
	opts, _ := hardware(t)
	dev, err := New(opts).Open(backend.DeviceAttr{Channels: 2})
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
	if _, err := New(Options{Device: "no-such-device"}).Open(backend.DeviceAttr{Channels: 1}); err == nil {
		t.Error("opened a device that does not exist")
	}
}

// TestHardwareConformance runs the SDK's contract on the DPA backend:
// the handlers on the DPA, UC channel QPs, root and entry mkeys.
func TestHardwareConformance(t *testing.T) {
	a, b := hardware(t)
	sdrtest.Run(t, func(*testing.T) (backend.Backend, backend.Backend) { return New(a), New(b) })
}

// TestHardwareArmRace sends messages right before their receives are
// armed, so that packets reach the null entry mkey and their CQEs race
// the activation on the DPA: Arm's fence markers must keep every such
// completion from counting (hwnic/dpa/internal/armrace, which dpasim's
// tests run in CI).
func TestHardwareArmRace(t *testing.T) {
	a, b := hardware(t)
	armrace.Run(t, New(a), New(b))
}
