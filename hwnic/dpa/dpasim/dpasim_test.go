//go:build cgo

package dpasim_test

import (
	"net/netip"
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/emunic/udp"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hwnic/dpa/dpasim"
	"github.com/sdr-rdma/sdr/hwnic/dpa/internal/armrace"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/sdrtest"
)

func backends(t *testing.T, pa, pb emunic.Port, gidA, gidB string) (backend.Backend, backend.Backend) {
	t.Helper()
	a := emunictest.NewHost(t, pa, netip.MustParseAddr(gidA), [6]byte{2, 0, 0, 0, 1, 1}, nil)
	b := emunictest.NewHost(t, pb, netip.MustParseAddr(gidB), [6]byte{2, 0, 0, 0, 1, 2}, nil)
	return dpasim.New(a.Dev), dpasim.New(b.Dev)
}

// TestConformancePipe runs the SDK's contract with the DPA handler doing
// the per-packet work, over the in-process pipe.
func TestConformancePipe(t *testing.T) {
	sdrtest.Run(t, func(t *testing.T) (backend.Backend, backend.Backend) {
		pa, pb := emunic.NewPipe(emunic.PipeConfig{})
		return backends(t, pa, pb, "10.0.1.1", "10.0.1.2")
	})
}

// TestConformanceUDP runs it over UDP sockets on loopback addresses of
// this package's own (go test runs packages in parallel).
func TestConformanceUDP(t *testing.T) {
	sdrtest.Run(t, func(t *testing.T) (backend.Backend, backend.Backend) {
		pa, err := udp.NewPort(netip.MustParseAddr("127.0.7.1"))
		if err != nil {
			t.Fatal(err)
		}
		pb, err := udp.NewPort(netip.MustParseAddr("127.0.7.2"))
		if err != nil {
			t.Fatal(err)
		}
		return backends(t, pa, pb, "127.0.7.1", "127.0.7.2")
	})
}

// TestConformanceXSK runs it over AF_XDP between two network namespaces.
func TestConformanceXSK(t *testing.T) {
	privileged.Require(t)
	sdrtest.Run(t, func(t *testing.T) (backend.Backend, backend.Backend) {
		a, b := emunictest.NewXSKPair(t, xsk.PortConfig{})
		return dpasim.New(a.Dev), dpasim.New(b.Dev)
	})
}

// TestArmRace sends messages right before their receives are armed, so
// that packets reach the null entry, arrive during Arm and after it: a
// chunk never reads complete without its data (hwnic/dpa/internal/armrace,
// which the BlueField host side's hardware test runs too).
func TestArmRace(t *testing.T) {
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	a, b := backends(t, pa, pb, "10.0.2.1", "10.0.2.2")
	armrace.Run(t, a, b)
}
