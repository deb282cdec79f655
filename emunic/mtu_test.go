package emunic_test

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
)

// mtuPort is a pipe end on an interface of the given MTU.
type mtuPort struct {
	emunic.Port
	mtu int
}

func (p mtuPort) MTU() int { return p.mtu }

// TestActiveMTU derives the port's active MTU from its interface's as
// ib_core does for hardware RoCE ports (96 bytes of headers kept free)
// and refuses larger path MTUs with ErrMTU, naming the interface MTU they
// need; a port on no interface carries 4096.
func TestActiveMTU(t *testing.T) {
	for _, c := range []struct{ ifMTU, active int }{
		{0, 4096}, // no interface
		{1500, 1024}, {9000, 4096}, {4192, 4096}, {4191, 2048}, {2144, 2048}, {2143, 1024}, {352, 256}, {351, 0},
	} {
		pa, pb := emunic.NewPipe(emunic.PipeConfig{})
		defer pb.Close()
		var port emunic.Port = pa
		if c.ifMTU != 0 {
			port = mtuPort{pa, c.ifMTU}
		}
		dev, err := emunic.NewDevice(emunic.Config{Port: port, GID: netip.MustParseAddr("10.0.0.1")})
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		if got := dev.ActiveMTU(); got != c.active {
			t.Errorf("interface MTU %d: active MTU %d, want %d", c.ifMTU, got, c.active)
		}
		if c.active != 0 {
			if err := dev.CheckPathMTU(c.active); err != nil {
				t.Errorf("interface MTU %d: path MTU %d refused: %v", c.ifMTU, c.active, err)
			}
		}
		if c.active == 4096 {
			continue
		}
		above := max(256, 2*c.active)
		err = dev.CheckPathMTU(above)
		if !errors.Is(err, emunic.ErrMTU) || !errors.Is(err, emunic.ErrInvalidArgument) || !strings.Contains(err.Error(), "at least "+strconv.Itoa(above+96)) {
			t.Errorf("interface MTU %d: path MTU %d: %v, want ErrMTU naming an interface MTU of %d", c.ifMTU, above, err, above+96)
		}
	}
}
