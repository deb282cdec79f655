package emunic_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/emunic/udp"
)

// BenchmarkUCWriteImm measures the SDR data path's transport, UC
// WRITE-with-Imm at MTU 1024, over the in-process pipe (no link model) and
// over UDP sockets on loopback. See emunictest.BenchUCWriteImm for the
// metrics; the AF_XDP port runs the same benchmark in emunic/xsk.
func BenchmarkUCWriteImm(b *testing.B) {
	ports := []struct {
		name string
		make func(b *testing.B) (emunic.Port, emunic.Port)
	}{
		{"pipe", func(b *testing.B) (emunic.Port, emunic.Port) { return emunic.NewPipe(emunic.PipeConfig{}) }},
		{"udp", func(b *testing.B) (emunic.Port, emunic.Port) {
			pa, err := udp.NewPort(netip.MustParseAddr("127.0.0.1"))
			if err != nil {
				b.Fatal(err)
			}
			pb, err := udp.NewPort(netip.MustParseAddr("127.0.0.2"))
			if err != nil {
				b.Fatal(err)
			}
			return pa, pb
		}},
	}
	for _, port := range ports {
		for _, size := range []int{64, 1024, 64 << 10} {
			b.Run(fmt.Sprintf("%s/%dB", port.name, size), func(b *testing.B) {
				pa, pb := port.make(b)
				gidA, gidB := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
				if port.name == "udp" {
					gidA, gidB = netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
				}
				a := emunictest.NewHost(b, pa, gidA, [6]byte{2, 0, 0, 0, 0, 1}, nil)
				r := emunictest.NewHost(b, pb, gidB, [6]byte{2, 0, 0, 0, 0, 2}, nil)
				emunictest.BenchUCWriteImm(b, a, r, size, 1)
			})
		}
	}
}

// BenchmarkWriteLat is ib_write_lat's measurement over the pipe: a 64-byte
// UC WRITE-with-Imm ping-pong between two devices in one process,
// reporting half the round trip's median (t_typical) and 99th percentile
// (t_99) in microseconds. emunic/xsk runs it over AF_XDP.
func BenchmarkWriteLat(b *testing.B) {
	pa, pb := emunic.NewPipe(emunic.PipeConfig{})
	a := emunictest.NewHost(b, pa, netip.MustParseAddr("10.0.0.1"), [6]byte{2, 0, 0, 0, 0, 1}, nil)
	r := emunictest.NewHost(b, pb, netip.MustParseAddr("10.0.0.2"), [6]byte{2, 0, 0, 0, 0, 2}, nil)
	emunictest.BenchWriteLat(b, a, r)
}
