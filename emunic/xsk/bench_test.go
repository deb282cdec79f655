package xsk_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/ebpf"
	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/emunic/udp"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/wire"
)

// BenchmarkRawXSK is the floor every AF_XDP result is compared with: one
// of the project's own AF_XDP sockets in namespace A sends RoCEv2 frames
// of a fixed size over a veth pair to another in namespace B (the steering
// program attached, all RoCE steered), with no emulated NIC on either
// side; the receiver busy-polls as the emulated NIC's port does. It
// reports frames/s received and the fraction lost.
func BenchmarkRawXSK(b *testing.B) {
	for _, size := range []int{64, 1100} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) { benchRawXSK(b, size) })
	}
}

func benchRawXSK(b *testing.B, size int) {
	// The receiver is polled as the emulated NIC's port polls its socket.
	pair, tx, rx := newRawSockets(b, xsk.Config{}, xsk.Config{BusyPoll: xsk.DefaultBusyPoll})

	// A UC SEND-Only frame (58 bytes of headers and ICRC, payload padded
	// to 4 bytes) filled up to exactly size bytes with Ethernet trailer.
	f := sendOnlyFields(pair, make([]byte, (size-58)&^3))
	frame := make([]byte, size)
	if _, err := wire.Encode(frame, &f); err != nil {
		b.Fatal(err)
	}
	batch := make([][]byte, 64)
	for i := range batch {
		batch[i] = frame
	}

	const idle = 200 * time.Millisecond
	received := make(chan int)
	go func() {
		bufs := make([][]byte, 64)
		for i := range bufs {
			bufs[i] = make([]byte, 2048)
		}
		sizes := make([]int, 64)
		n := 0
		for {
			got, err := rx.Receive(bufs, sizes)
			if err != nil {
				received <- n
				return
			}
			n += got
		}
	}()
	b.ResetTimer()
	start := time.Now()
	for sent := 0; sent < b.N; {
		k, err := tx.Send(batch[:min(len(batch), b.N-sent)])
		if err != nil {
			b.Fatal(err)
		}
		sent += k
	}
	time.Sleep(idle)
	elapsed := time.Since(start) - idle
	b.StopTimer()
	rx.Close()
	n := <-received
	b.ReportMetric(float64(n)/elapsed.Seconds(), "pkts/s")
	b.ReportMetric(100*(1-float64(n)/float64(b.N)), "%lost")
}

// sendOnlyFields describes a UC SEND-Only frame with payload from pair's
// host A to host B, as the raw benchmark and tests send.
func sendOnlyFields(pair *hostnet.Pair, payload []byte) wire.Fields {
	f := wire.Fields{SrcMAC: pair.A.MAC, DstMAC: pair.B.MAC, SrcIP: pair.A.Addr, DstIP: pair.B.Addr,
		TTL: 64, DontFragment: true, SrcPort: 0xC000, Payload: payload}
	f.BTH = wire.BTHFields{Opcode: wire.UCSendOnly, PKey: 0xFFFF, DestQP: 0x11}
	return f
}

// newRawSockets creates two namespaces joined by a veth pair and opens a
// copy-mode socket with txCfg on A's end and one with rxCfg on B's, to
// which B's steering program (attached, all RoCE steered) delivers; it
// fills in the interfaces and the mode. Everything is closed when the
// test ends. It needs root.
func newRawSockets(tb testing.TB, txCfg, rxCfg xsk.Config) (pair *hostnet.Pair, tx, rx *xsk.Socket) {
	tb.Helper()
	privileged.Require(tb)
	pair, err := hostnet.NewPair(hostnet.PairConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pair.Close() })
	txCfg.Ifindex, txCfg.Mode = pair.A.Ifindex, xsk.Copy
	if err := pair.A.NS.Do(func() (err error) {
		tx, err = xsk.Open(txCfg)
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { tx.Close() })
	rxCfg.Ifindex, rxCfg.Mode = pair.B.Ifindex, xsk.Copy
	var prog *ebpf.Program
	err = pair.B.NS.Do(func() error {
		var err error
		if prog, err = ebpf.Load(ebpf.Options{AllRoCE: true}); err != nil {
			return err
		}
		if err = prog.Attach(pair.B.Ifindex); err != nil {
			return err
		}
		if rx, err = xsk.Open(rxCfg); err != nil {
			return err
		}
		return prog.SetSocket(0, rx.FD())
	})
	if prog != nil {
		tb.Cleanup(func() { prog.Close() })
	}
	if rx != nil {
		tb.Cleanup(func() { rx.Close() })
	}
	if err != nil {
		tb.Fatal(err)
	}
	return pair, tx, rx
}

// BenchmarkUCWriteImm runs emunictest.BenchUCWriteImm between two
// namespaces joined by a veth pair, once over AF_XDP ports and once over
// UDP ports on the same addresses, for the emunic/raw and xsk/udp ratios;
// over AF_XDP also at the large messages sdr write-bw is compared at, and
// on veths of two queues: xsk-2q with one stream (what the multi-queue
// path costs a stream), xsk-2q-2s with two on different queues (what a
// receive goroutine per queue gives).
func BenchmarkUCWriteImm(b *testing.B) {
	sizes := map[string][]int{"xsk": {1024, 64 << 10, 1 << 20, 8 << 20}, "xsk-2q": {1024, 64 << 10}, "xsk-2q-2s": {1024, 64 << 10}, "udp": {1024, 64 << 10}}
	for _, kind := range []string{"xsk", "xsk-2q", "xsk-2q-2s", "udp"} {
		for _, size := range sizes[kind] {
			b.Run(fmt.Sprintf("%s/%dB", kind, size), func(b *testing.B) {
				privileged.Require(b)
				queues, streams := 1, 1
				switch kind {
				case "xsk-2q":
					queues = 2
				case "xsk-2q-2s":
					queues, streams = 2, 2
				}
				pair, err := hostnet.NewPair(hostnet.PairConfig{Queues: queues})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { pair.Close() })
				var hosts []*emunictest.Host
				for _, h := range []*hostnet.Host{pair.A, pair.B} {
					if kind != "udp" {
						hosts = append(hosts, emunictest.NewXSKHost(b, h, xsk.PortConfig{}, nil))
						continue
					}
					var port emunic.Port
					if err := h.NS.Do(func() (err error) {
						port, err = udp.NewPort(h.Addr)
						return err
					}); err != nil {
						b.Fatal(err)
					}
					hosts = append(hosts, emunictest.NewHost(b, port, h.Addr, h.MAC, nil))
				}
				emunictest.BenchUCWriteImm(b, hosts[0], hosts[1], size, streams)
			})
		}
	}
}

// BenchmarkWriteLat is ib_write_lat's measurement over AF_XDP between two
// namespaces joined by a veth pair (see emunictest.BenchWriteLat).
func BenchmarkWriteLat(b *testing.B) {
	privileged.Require(b)
	pair, err := hostnet.NewPair(hostnet.PairConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pair.Close() })
	a := emunictest.NewXSKHost(b, pair.A, xsk.PortConfig{}, nil)
	r := emunictest.NewXSKHost(b, pair.B, xsk.PortConfig{}, nil)
	emunictest.BenchWriteLat(b, a, r)
}
