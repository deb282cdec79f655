package sdrnic_test

import (
	"net/netip"
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/sdrnic"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/sdr/backend"
	"github.com/sdr-rdma/sdr/sdr/sdrtest"
	"github.com/sdr-rdma/sdr/testbed"
)

func devices(t *testing.T, pa, pb emunic.Port, gidA, gidB string, opts sdrnic.Options) (backend.Backend, backend.Backend) {
	t.Helper()
	var out []backend.Backend
	for i, p := range []emunic.Port{pa, pb} {
		dev, err := emunic.NewDevice(emunic.Config{Port: p, GID: netip.MustParseAddr([]string{gidA, gidB}[i]), MAC: [6]byte{2, 0, 0, 0, 0, byte(i + 1)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		out = append(out, sdrnic.New(dev, opts))
	}
	return out[0], out[1]
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
		pa, err := emunic.NewUDPPort(netip.MustParseAddr("127.0.1.1"))
		if err != nil {
			t.Fatal(err)
		}
		pb, err := emunic.NewUDPPort(netip.MustParseAddr("127.0.1.2"))
		if err != nil {
			t.Fatal(err)
		}
		return devices(t, pa, pb, "127.0.1.1", "127.0.1.2", sdrnic.Options{})
	})
}

func TestConformanceXSK(t *testing.T) {
	privileged.Require(t)
	sdrtest.Run(t, func(t *testing.T) (backend.Backend, backend.Backend) {
		pair, err := testbed.NewPair(testbed.PairConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pair.Close() })
		var ports []emunic.Port
		for _, h := range []*testbed.Host{pair.A, pair.B} {
			var p *xsk.Port
			if err := h.NS.Do(func() (err error) {
				p, err = xsk.NewPort(xsk.PortConfig{Interface: h.IfName})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			ports = append(ports, p)
		}
		var out []backend.Backend
		for i, h := range []*testbed.Host{pair.A, pair.B} {
			dev, err := emunic.NewDevice(emunic.Config{Port: ports[i], GID: h.Addr, MAC: h.MAC})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { dev.Close() })
			out = append(out, sdrnic.New(dev, sdrnic.Options{}))
		}
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
