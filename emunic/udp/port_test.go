package udp_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/udp"
	"github.com/sdr-rdma/sdr/wire"
)

// TestPortCarriesRoCE sends a batch of RoCEv2 frames from one port to
// another on loopback: each arrives rebuilt as the frame the sender's
// device encoded (headers as the kernel sent them, MACs zero), its ICRC
// valid and its payload intact, a non-RoCE frame in the batch is skipped,
// and Send allocates nothing. Every other frame is built as a device on
// this port builds them (emunic.KernelSender: IP ID 0, the kernel's
// source port), and goes out as it is; the others, with another source
// port and IP ID, are re-encoded for the headers the kernel writes.
func TestPortCarriesRoCE(t *testing.T) {
	a, b := open(t, "127.0.3.1"), open(t, "127.0.3.2")
	if got := a.KernelSourcePort(); got != wire.RoCEv2Port {
		t.Fatalf("KernelSourcePort = %d, want %d", got, wire.RoCEv2Port)
	}
	const n = 70 // more than one sendmmsg batch
	frames := make([][]byte, n+1)
	for i := range n {
		f := wire.Fields{SrcIP: netip.MustParseAddr("127.0.3.1"), DstIP: netip.MustParseAddr("127.0.3.2"),
			TTL: wire.DefaultTTL, DontFragment: true, TrafficClass: wire.ECNECT0, SrcPort: 0xC000, IPID: uint16(i)}
		if i%2 == 0 {
			f.SrcPort, f.IPID = a.KernelSourcePort(), 0
		}
		f.BTH = wire.BTHFields{Opcode: wire.UCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: wire.PSN(i)}
		f.Payload = bytes.Repeat([]byte{byte(i)}, 256)
		frames[i] = make([]byte, emunic.MaxFrameLen)
		size, err := wire.Encode(frames[i], &f)
		if err != nil {
			t.Fatal(err)
		}
		frames[i] = frames[i][:size]
	}
	frames[n] = []byte("not a RoCE frame")
	sent, err := a.Send(frames)
	if err != nil || sent != n {
		t.Fatalf("Send = %d, %v; want %d", sent, err, n)
	}
	bufs, sizes := make([][]byte, n), make([]int, n)
	for i := range bufs {
		bufs[i] = make([]byte, emunic.MaxFrameLen)
	}
	var p wire.Packet
	for got := 0; got < n; {
		k, err := b.Recv(bufs[got:], sizes[got:])
		if err != nil {
			t.Fatal(err)
		}
		for i := got; i < got+k; i++ {
			if err := p.Decode(bufs[i][:sizes[i]]); err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			if !p.ICRCValid() || p.BTH.PSN() != wire.PSN(i) || !bytes.Equal(p.Payload, bytes.Repeat([]byte{byte(i)}, 256)) {
				t.Fatalf("frame %d: ICRC valid %v, PSN %v, payload %x...", i, p.ICRCValid(), p.BTH.PSN(), p.Payload[:4])
			}
		}
		got += k
	}
	if allocs := testing.AllocsPerRun(20, func() { a.Send(frames[:n]) }); allocs != 0 {
		t.Errorf("Send of %d frames: %v allocations", n, allocs)
	}
}

func open(t *testing.T, addr string) *udp.Port {
	t.Helper()
	p, err := udp.NewPort(netip.MustParseAddr(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
