package emunic_test

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/emunictest"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/wire"
)

// TestPipeCorruptionCaughtByICRC corrupts one bit of every frame A sends:
// B refuses nearly all of them, most on the ICRC check; the few it takes
// had the bit flipped where no check looks (source MAC, TTL, UDP checksum,
// BTH byte 4). A fence sent once the link is clean proves every corrupted
// frame was processed before the counters are read.
func TestPipeCorruptionCaughtByICRC(t *testing.T) {
	const writes = 300
	toB := newLink(t, link.Config{Corrupt: 1, Seed: 4})
	a, b := newPipeHosts(t, emunic.PipeConfig{AToB: toB})
	qa, qb := a.QP(t, emunic.UC), b.QP(t, emunic.UC)
	emunictest.Connect(t, a, qa, b, qb, 1024, emunic.QPAttr{})
	src, dst := emunictest.Pattern(1024, 1), make([]byte, 1024)
	smr, dmr := a.MR(t, src), b.MR(t, dst)
	for i := range writes {
		if err := qa.PostSend(emunic.SendWR{ID: uint64(i), Op: emunic.OpWrite, Unsignaled: true, RemoteAddr: dmr.Addr(), RKey: dmr.RKey(),
			SGL: []emunic.SGE{{Addr: smr.Addr(), Length: 1024, LKey: smr.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := toB.SetConfig(link.Config{}); err != nil {
		t.Fatal(err)
	}
	fence(t, a, qa, b, qb)
	c, sb := toB.Counters(), b.Dev.Stats()
	if c.Corrupted != writes || c.Sent != writes+1 {
		t.Fatalf("link counters %+v, want %d corrupted of %d", c, writes, writes+1)
	}
	var refused uint64 // before the device takes a frame as its own
	for _, r := range []emunic.Counter{emunic.RxWrongMAC, emunic.RxNotRoCE, emunic.RxMalformed,
		emunic.RxBadIPChecksum, emunic.RxBadICRC, emunic.RxWrongGID} {
		refused += sb.Get(r)
	}
	if refused+sb.Get(emunic.RxPackets) != writes+1 {
		t.Errorf("B refused %d and took %d frames, want %d in all", refused, sb.Get(emunic.RxPackets), writes+1)
	}
	if bad := sb.Get(emunic.RxBadICRC); bad < writes*9/10 {
		t.Errorf("ICRC caught %d of %d corrupted frames, want at least 90%% (payload bits dominate)", bad, writes)
	}
	t.Logf("of %d corrupted frames: %d bad ICRC, %d refused in all, %d taken", writes, sb.Get(emunic.RxBadICRC), refused, sb.Get(emunic.RxPackets)-1)
}

// ectFrame returns a RoCEv2 frame with traffic class tc.
func ectFrame(t *testing.T, tc uint8) []byte {
	t.Helper()
	f := wire.Fields{SrcIP: netip.MustParseAddr("10.0.0.1"), DstIP: netip.MustParseAddr("10.0.0.2"),
		TrafficClass: tc, TTL: wire.DefaultTTL,
		TransportFields: wire.TransportFields{BTH: wire.BTHFields{Opcode: wire.UCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11}},
		Payload:         make([]byte, 100)}
	b := make([]byte, f.Len())
	n, err := wire.Encode(b, &f)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

// TestPipeECN queues frames behind one another on a link that marks
// everything behind more than a byte of queue: an ECN-capable frame
// arrives CE with valid IPv4 checksum and ICRC, a Not-ECT one unchanged.
func TestPipeECN(t *testing.T) {
	toB := newLink(t, link.Config{Bandwidth: 1e9, ECNMinBytes: 0, ECNMaxBytes: 1, ECNMaxP: 0.5})
	pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: toB})
	t.Cleanup(func() { pa.Close(); pb.Close() })
	first, ect, notECT := ectFrame(t, wire.ECNECT0), ectFrame(t, 0xB8|wire.ECNECT1), ectFrame(t, 0xB8)
	if _, err := pa.Send([][]byte{first, ect, notECT}); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	for len(got) < 3 {
		bufs, sizes := [][]byte{make([]byte, 2048), make([]byte, 2048), make([]byte, 2048)}, make([]int, 3)
		n, err := pb.Recv(bufs, sizes)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			got = append(got, bufs[i][:sizes[i]])
		}
	}
	var p wire.Packet
	for i, want := range []uint8{wire.ECNECT0, 0xB8 | wire.ECNCE, 0xB8} {
		if err := p.Decode(got[i]); err != nil || !p.ICRCValid() || !p.IPv4.ChecksumValid() {
			t.Fatalf("frame %d: decode %v, ICRC valid %v, IPv4 checksum valid %v", i, err, p.ICRCValid(), p.IPv4.ChecksumValid())
		}
		if p.IPv4.TOS() != want {
			t.Errorf("frame %d: TOS %#x, want %#x", i, p.IPv4.TOS(), want)
		}
	}
	if c := toB.Counters(); c.CEMarked != 2 {
		t.Errorf("link marked %d frames, want 2 (the model marks; the pipe applies it to ECN-capable ones)", c.CEMarked)
	}
}

// TestPipeDelayLine sends numbered frames 100 µs apart through 10 ms ± 5 ms
// of delay with duplication, on the fake clock: each copy arrives within
// the jitter of its send time, every copy the link delivers arrives, and
// without Reorder they arrive in send order.
func TestPipeDelayLine(t *testing.T) {
	for _, reorder := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			const n = 2000
			toB := newLink(t, link.Config{Delay: 10 * time.Millisecond, Jitter: 5 * time.Millisecond, Reorder: reorder, Duplicate: 0.1, Seed: 8})
			pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: toB})
			type arrival struct {
				i  int
				at time.Time
			}
			got := make(chan []arrival)
			go func() {
				var out []arrival
				bufs, sizes := [][]byte{make([]byte, 64)}, []int{0}
				for {
					if _, err := pb.Recv(bufs, sizes); err != nil {
						got <- out
						return
					}
					out = append(out, arrival{int(binary.BigEndian.Uint32(bufs[0])), time.Now()})
				}
			}()
			start := time.Now()
			for i := range n {
				if _, err := pa.Send([][]byte{binary.BigEndian.AppendUint32(nil, uint32(i))}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(100 * time.Microsecond)
			}
			time.Sleep(20 * time.Millisecond) // past the latest arrival
			synctest.Wait()
			pb.Close()
			pa.Close()
			arrivals := <-got
			if c := toB.Counters(); int64(len(arrivals)) != c.Delivered() || c.Duplicated < n/20 {
				t.Fatalf("received %d copies, the link delivered %d (%+v)", len(arrivals), c.Delivered(), c)
			}
			overtaken := 0
			for k, a := range arrivals {
				owd := a.at.Sub(start.Add(time.Duration(a.i) * 100 * time.Microsecond))
				if owd < 5*time.Millisecond || owd > 15*time.Millisecond {
					t.Fatalf("frame %d arrived after %v, want 10ms ± 5ms", a.i, owd)
				}
				if k > 0 && a.i < arrivals[k-1].i {
					overtaken++
				}
			}
			if !reorder && overtaken != 0 || reorder && overtaken < n/10 {
				t.Errorf("reorder %v: %d frames arrived before one sent earlier", reorder, overtaken)
			}
		})
	}
}

// BenchmarkPipe moves 1100-byte frames in batches of 32 from one end of a
// pipe to the other: over a perfect link (nil), through the link model
// with every per-frame draw but no delay, and through its delay line.
func BenchmarkPipe(b *testing.B) {
	for _, c := range []struct{ name, link string }{
		{"nil", ""}, {"faults", "loss=1%,dup=1%,corrupt=1%,mtu=1500"}, {"delay", "delay=100us,jitter=10us"},
	} {
		b.Run(c.name, func(b *testing.B) {
			var toB *link.Direction
			if c.link != "" {
				cfg, err := link.ParseConfig(c.link)
				if err != nil {
					b.Fatal(err)
				}
				toB = newLink(b, cfg)
			}
			pa, pb := emunic.NewPipe(emunic.PipeConfig{AToB: toB})
			b.Cleanup(func() { pa.Close(); pb.Close() })
			var received atomic.Int64
			go func() {
				bufs, sizes := make([][]byte, 32), make([]int, 32)
				for i := range bufs {
					bufs[i] = make([]byte, 2048)
				}
				for {
					k, err := pb.Recv(bufs, sizes)
					if err != nil {
						return
					}
					received.Add(int64(k))
				}
			}()
			batch := make([][]byte, 32)
			for i := range batch {
				batch[i] = make([]byte, 1100)
			}
			b.SetBytes(1100)
			b.ReportAllocs()
			for sent := 0; sent < b.N; sent += 32 {
				if _, err := pa.Send(batch[:min(32, b.N-sent)]); err != nil {
					b.Fatal(err)
				}
			}
			want := int64(b.N)
			if toB != nil {
				want = toB.Counters().Delivered()
			}
			for received.Load() < want {
				time.Sleep(10 * time.Microsecond)
			}
		})
	}
}
