package ec

import (
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/klauspost/reedsolomon"
)

// The throughput benchmarks: an 8 MiB message under MDS(32,8) and
// XOR(32,8) in 4 KiB and 64 KiB chunks, through this package (impl=ec) and,
// for MDS, through the bare reedsolomon encoder on the same shards
// (impl=bare). Bytes are data bytes. Decode rebuilds the worst decodable
// loss in every submessage: M data chunks (XOR: one per group). Run with
// -cpu 1 for per-core numbers; both use one goroutine.

const benchMessage = 8 << 20

var benchChunks = []int{4 << 10, 64 << 10}

// benchCase is one operation on a whole message, through the package and,
// where there is one, the bare library (nil for XOR).
type benchCase struct {
	name     string
	ec, bare func() error
}

func benchCases(b *testing.B) []benchCase {
	var cases []benchCase
	for _, cs := range benchChunks {
		for _, kind := range []Kind{MDS, XOR} {
			m := newMessage(b, Params{kind, 32, 8}, benchMessage, cs, rand.New(rand.NewPCG(1, 2)))
			l := m.c.Layout()
			subs := make([]int, l.Submessages())
			for s := range subs {
				subs[s] = s
			}
			dataBits, parityBits := lossyBitmaps(l, subs...)
			enc := benchCase{
				name: fmt.Sprintf("op=encode/code=%v/chunk=%dKiB", kind, cs>>10),
				ec:   func() error { return m.c.Encode(m.data, m.parity) },
			}
			dec := benchCase{
				name: fmt.Sprintf("op=decode/code=%v/chunk=%dKiB", kind, cs>>10),
				ec: func() error {
					for _, s := range subs {
						if err := m.c.Reconstruct(s, m.data, m.parity, dataBits, parityBits); err != nil {
							return err
						}
					}
					return nil
				},
			}
			if kind == MDS {
				rs, shards := bareShards(b, m)
				enc.bare = func() error {
					for _, sh := range shards {
						if err := rs.Encode(sh); err != nil {
							return err
						}
					}
					return nil
				}
				dec.bare = func() error {
					for _, sh := range shards {
						for j := range l.Params().M { // lose data shards 0..M-1, keeping their memory
							sh[j] = sh[j][:0]
						}
						if err := rs.ReconstructData(sh); err != nil {
							return err
						}
					}
					return nil
				}
			}
			cases = append(cases, enc, dec)
		}
	}
	return cases
}

// BenchmarkCode measures each operation through the package and the bare
// library, in bytes of message data per second of wall time (B/s) and in
// GB (1e9 bytes) per second of process CPU time (GB/cpu-s): the per-core
// figure, which other load on a shared machine does not deflate.
func BenchmarkCode(b *testing.B) {
	for _, c := range benchCases(b) {
		for impl, f := range map[string]func() error{"ec": c.ec, "bare": c.bare} {
			if f == nil {
				continue
			}
			b.Run(c.name+"/impl="+impl, func(b *testing.B) {
				b.SetBytes(benchMessage)
				cpu0, ok0 := processCPUTime()
				for b.Loop() {
					if err := f(); err != nil {
						b.Fatal(err)
					}
				}
				if cpu1, ok1 := processCPUTime(); ok0 && ok1 && cpu1 > cpu0 {
					b.ReportMetric(float64(b.N)*benchMessage/1e9/(cpu1-cpu0).Seconds(), "GB/cpu-s")
				}
			})
		}
	}
}

// BenchmarkRatio runs the package and the bare library alternately on the
// same message within one benchmark, so that load from other processes on a
// shared machine hits both alike, and reports throughput of each (GB/s,
// 1e9 bytes) and the ratio ec/bare of their throughputs.
func BenchmarkRatio(b *testing.B) {
	for _, c := range benchCases(b) {
		if c.bare == nil {
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			var ec, bare time.Duration
			first := true
			for b.Loop() {
				fs, ds := [2]func() error{c.ec, c.bare}, [2]*time.Duration{&ec, &bare}
				if !first { // alternate the order so neither always runs on a warm cache
					fs[0], fs[1], ds[0], ds[1] = fs[1], fs[0], ds[1], ds[0]
				}
				first = !first
				for i, f := range fs {
					start := time.Now()
					if err := f(); err != nil {
						b.Fatal(err)
					}
					*ds[i] += time.Since(start)
				}
			}
			runs := float64(b.N) * benchMessage / 1e9
			b.ReportMetric(runs/ec.Seconds(), "ec-GB/s")
			b.ReportMetric(runs/bare.Seconds(), "bare-GB/s")
			b.ReportMetric(bare.Seconds()/ec.Seconds(), "ec/bare")
		})
	}
}

// bareShards returns a (K, M) reedsolomon encoder with the package's
// options (rsGoroutines), and per submessage the shard slices over m's data and
// parity that the package itself would pass (m's layout must have no
// shortened submessage or short chunk).
func bareShards(b *testing.B, m message) (reedsolomon.Encoder, [][][]byte) {
	l := m.c.Layout()
	p, cs := l.Params(), l.ChunkSize()
	rs, err := reedsolomon.New(p.K, p.M, reedsolomon.WithMaxGoroutines(rsGoroutines))
	if err != nil {
		b.Fatal(err)
	}
	shards := make([][][]byte, l.Submessages())
	for s := range shards {
		first, _ := l.DataRange(s)
		pFirst, _ := l.ParityRange(s)
		for j := range p.K {
			shards[s] = append(shards[s], m.data[(first+j)*cs:(first+j+1)*cs])
		}
		for j := range p.M {
			shards[s] = append(shards[s], m.parity[(pFirst+j)*cs:(pFirst+j+1)*cs])
		}
	}
	return rs, shards
}

// BenchmarkXORKernel compares crypto/subtle.XORBytes, which XOR uses, with
// a portable 8-bytes-at-a-time loop: dst = a ^ b over one chunk.
func BenchmarkXORKernel(b *testing.B) {
	for _, cs := range benchChunks {
		x, y, dst := make([]byte, cs), make([]byte, cs), make([]byte, cs)
		fill(x, rand.New(rand.NewPCG(1, 1)))
		fill(y, rand.New(rand.NewPCG(2, 2)))
		b.Run(fmt.Sprintf("chunk=%dKiB/impl=subtle", cs>>10), func(b *testing.B) {
			b.SetBytes(int64(cs))
			for b.Loop() {
				subtle.XORBytes(dst, x, y)
			}
		})
		b.Run(fmt.Sprintf("chunk=%dKiB/impl=words", cs>>10), func(b *testing.B) {
			b.SetBytes(int64(cs))
			for b.Loop() {
				for i := 0; i+8 <= len(dst); i += 8 {
					binary.LittleEndian.PutUint64(dst[i:], binary.LittleEndian.Uint64(x[i:])^binary.LittleEndian.Uint64(y[i:]))
				}
			}
		})
	}
}
