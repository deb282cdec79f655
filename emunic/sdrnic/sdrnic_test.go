package sdrnic_test

import (
	"net/netip"
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/emunic/udp"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/sdrtest"
)

func devices(t *testing.T, pa, pb emunic.Port, gidA, gidB string, opts sdrnic.Options) (backend.Backend, backend.Backend) {
	t.Helper()
	a := emunictest.NewHost(t, pa, netip.MustParseAddr(gidA), [6]byte{2, 0, 0, 0, 0, 1}, nil)
	b := emunictest.NewHost(t, pb, netip.MustParseAddr(gidB), [6]byte{2, 0, 0, 0, 0, 2}, nil)
	return sdrnic.New(a.Dev, opts), sdrnic.New(b.Dev, opts)
}

func TestConformancePipe(t *testing.T) {
	sdrtest.Run(t, func(t *testing.T) (backend.Backend, backend.Backend) {
		pa, pb := emunic.NewPipe(emunic.PipeConfig{})
		return devices(t, pa, pb, "10.0.0.1", "10.0.0.2", sdrnic.Options{})
	})
}

func TestConformanceUDP(t *testing.T) {
	sdrtest.Run(t, func(t *testing.T) (backend.Backend, backend.Backend) {
		// Loopback addresses of this package's own: go test runs the
		// emunic package, which binds 127.0.0.1 and .2, in parallel.
		pa, err := udp.NewPort(netip.MustParseAddr("127.0.1.1"))
		if err != nil {
			t.Fatal(err)
		}
		pb, err := udp.NewPort(netip.MustParseAddr("127.0.1.2"))
		if err != nil {
			t.Fatal(err)
		}
		return devices(t, pa, pb, "127.0.1.1", "127.0.1.2", sdrnic.Options{})
	})
}

func TestConformanceXSK(t *testing.T) {
	privileged.Require(t)
	sdrtest.Run(t, func(t *testing.T) (backend.Backend, backend.Backend) {
		a, b := emunictest.NewXSKPair(t, xsk.PortConfig{})
		out := []backend.Backend{sdrnic.New(a.Dev, sdrnic.Options{}), sdrnic.New(b.Dev, sdrnic.Options{})}
		return out[0], out[1]
	})
}

// TestConformancePipeRC runs the suite with RC channel QPs underneath.
func TestConformancePipeRC(t *testing.T) {
	sdrtest.Run(t, func(t *testing.T) (backend.Backend, backend.Backend) {
		pa, pb := emunic.NewPipe(emunic.PipeConfig{})
		return devices(t, pa, pb, "10.0.0.1", "10.0.0.2", sdrnic.Options{RC: true})
	})
}
