package ec

import (
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

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

func BenchmarkEncode(b *testing.B) {
	for _, cs := range benchChunks {
		for _, kind := range []Kind{MDS, XOR} {
			m := newMessage(b, Params{kind, 32, 8}, benchMessage, cs, rand.New(rand.NewPCG(1, 2)))
			b.Run(fmt.Sprintf("code=%v/chunk=%dKiB/impl=ec", kind, cs>>10), func(b *testing.B) {
				b.SetBytes(benchMessage)
				for b.Loop() {
					if err := m.c.Encode(m.data, m.parity); err != nil {
						b.Fatal(err)
					}
				}
			})
			if kind != MDS {
				continue
			}
			rs, shards := bareShards(b, m)
			b.Run(fmt.Sprintf("code=%v/chunk=%dKiB/impl=bare", kind, cs>>10), func(b *testing.B) {
				b.SetBytes(benchMessage)
				for b.Loop() {
					for _, sh := range shards {
						if err := rs.Encode(sh); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, cs := range benchChunks {
		for _, kind := range []Kind{MDS, XOR} {
			m := newMessage(b, Params{kind, 32, 8}, benchMessage, cs, rand.New(rand.NewPCG(1, 2)))
			l := m.c.Layout()
			subs := make([]int, l.Submessages())
			for s := range subs {
				subs[s] = s
			}
			dataBits, parityBits := lossyBitmaps(l, subs...)
			b.Run(fmt.Sprintf("code=%v/chunk=%dKiB/impl=ec", kind, cs>>10), func(b *testing.B) {
				b.SetBytes(benchMessage)
				for b.Loop() {
					for _, s := range subs {
						if err := m.c.Reconstruct(s, m.data, m.parity, dataBits, parityBits); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
			if kind != MDS {
				continue
			}
			rs, shards := bareShards(b, m)
			k := l.Params().K
			b.Run(fmt.Sprintf("code=%v/chunk=%dKiB/impl=bare", kind, cs>>10), func(b *testing.B) {
				b.SetBytes(benchMessage)
				for b.Loop() {
					for _, sh := range shards {
						for j := range l.Params().M { // lose data shards 0..M-1, keeping their memory
							sh[j] = sh[j][:0]
						}
						if err := rs.ReconstructData(sh); err != nil {
							b.Fatal(err)
						}
						if len(sh[0]) != len(sh[k]) {
							b.Fatal("shard not rebuilt")
						}
					}
				}
			})
		}
	}
}

// bareShards returns a (K, M) reedsolomon encoder, limited to one goroutine
// like the package's, and per submessage the shard slices over m's data and
// parity that the package itself would pass (m's layout must have no
// shortened submessage or short chunk).
func bareShards(b *testing.B, m message) (reedsolomon.Encoder, [][][]byte) {
	l := m.c.Layout()
	p, cs := l.Params(), l.ChunkSize()
	rs, err := reedsolomon.New(p.K, p.M, reedsolomon.WithMaxGoroutines(1))
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
