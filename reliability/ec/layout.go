package ec

import (
	"fmt"
	"math"

	"github.com/sdr-rdma/sdr/chunk"
)

// Layout maps a message onto data chunks, submessages and the parity area
// (see the package doc). It is a small comparable value; the zero Layout is
// invalid. Every method is O(1) and allocates nothing.
type Layout struct {
	params     Params
	dataLen    int
	chunkSize  int
	dataChunks int
	subs       int
}

// NewLayout lays out a message of dataLen bytes (>= 0) in chunks of
// chunkSize bytes (>= 1) under code p. It fails with ErrInvalid for bad
// parameters or a parity area whose size would overflow int.
func NewLayout(p Params, dataLen, chunkSize int) (Layout, error) {
	if err := p.Validate(); err != nil {
		return Layout{}, err
	}
	if dataLen < 0 || chunkSize < 1 {
		return Layout{}, fmt.Errorf("ec: layout of %d bytes in %d-byte chunks: %w", dataLen, chunkSize, ErrInvalid)
	}
	d := dataLen / chunkSize
	if dataLen%chunkSize != 0 {
		d++
	}
	l := d / p.K
	if d%p.K != 0 {
		l++
	}
	if chunkSize > math.MaxInt/p.M || l > math.MaxInt/(p.M*chunkSize) {
		return Layout{}, fmt.Errorf("ec: layout %v of %d bytes in %d-byte chunks: parity area overflows: %w",
			p, dataLen, chunkSize, ErrInvalid)
	}
	return Layout{params: p, dataLen: dataLen, chunkSize: chunkSize, dataChunks: d, subs: l}, nil
}

// Params returns the code the layout was made for.
func (l Layout) Params() Params { return l.params }

// DataLen returns the message length in bytes.
func (l Layout) DataLen() int { return l.dataLen }

// ChunkSize returns the chunk size in bytes.
func (l Layout) ChunkSize() int { return l.chunkSize }

// DataChunks returns D, the number of data chunks (the last may be short).
func (l Layout) DataChunks() int { return l.dataChunks }

// Submessages returns L = ceil(D/K).
func (l Layout) Submessages() int { return l.subs }

// ParityChunks returns L*M, the number of chunks in the parity area.
func (l Layout) ParityChunks() int { return l.subs * l.params.M }

// ParityLen returns the parity area's length in bytes, L*M*ChunkSize.
func (l Layout) ParityLen() int { return l.subs * l.params.M * l.chunkSize }

// ChunkLen returns the length of data chunk i: ChunkSize, or less for a short
// last chunk; 0 when i is out of range.
func (l Layout) ChunkLen(i int) int {
	if i < 0 || i >= l.dataChunks {
		return 0
	}
	return min(l.chunkSize, l.dataLen-i*l.chunkSize)
}

// Submessage returns the submessage that data chunk i belongs to, or -1 when
// i is out of range.
func (l Layout) Submessage(dataChunk int) int {
	if dataChunk < 0 || dataChunk >= l.dataChunks {
		return -1
	}
	return dataChunk / l.params.K
}

// ParitySubmessage returns the submessage that parity-area chunk i belongs
// to, or -1 when i is out of range.
func (l Layout) ParitySubmessage(parityChunk int) int {
	if parityChunk < 0 || parityChunk >= l.ParityChunks() {
		return -1
	}
	return parityChunk / l.params.M
}

// DataRange returns the data chunks of submessage sub: first, first+1, ...,
// first+n-1, with n == K except in a shortened last submessage. n is 0 when
// sub is out of range.
func (l Layout) DataRange(sub int) (first, n int) {
	if sub < 0 || sub >= l.subs {
		return 0, 0
	}
	first = sub * l.params.K
	return first, min(l.params.K, l.dataChunks-first)
}

// ParityRange returns the parity-area chunks of submessage sub: first, ...,
// first+n-1 with n == M. n is 0 when sub is out of range.
func (l Layout) ParityRange(sub int) (first, n int) {
	if sub < 0 || sub >= l.subs {
		return 0, 0
	}
	return sub * l.params.M, l.params.M
}

// String describes the layout, e.g. "mds(32,8) 8388608 B in 4096 B chunks:
// 2048 data chunks, 64 submessages".
func (l Layout) String() string {
	return fmt.Sprintf("%v %d B in %d B chunks: %d data chunks, %d submessages",
		l.params, l.dataLen, l.chunkSize, l.dataChunks, l.subs)
}

// valid reports whether l came from NewLayout (the zero Layout did not).
func (l Layout) valid() bool { return l.chunkSize >= 1 }

// Decodable reports whether the missing data chunks of submessage sub can be
// rebuilt from the chunks set in dataBits (over all data chunks) and
// parityBits (over all parity-area chunks): for MDS when the received data
// and parity chunks number at least the submessage's data chunks, for XOR
// when no parity group misses more than one chunk. A submessage missing no
// data chunk is decodable. It needs no coder (a receiver's bookkeeping or a
// simulator asks it without building one). Costs O(K/64) for MDS, O(K) for
// XOR; ErrInvalid for a bad submessage or short bitmaps.
func (l Layout) Decodable(sub int, dataBits, parityBits []uint64) (bool, error) {
	if !l.valid() || sub < 0 || sub >= l.subs {
		return false, fmt.Errorf("ec: submessage %d of %d: %w", sub, l.subs, ErrInvalid)
	}
	if len(dataBits) < chunk.Words(l.dataChunks) || len(parityBits) < chunk.Words(l.ParityChunks()) {
		return false, fmt.Errorf("ec: bitmaps of %d data and %d parity words, want %d and %d: %w",
			len(dataBits), len(parityBits), chunk.Words(l.dataChunks), chunk.Words(l.ParityChunks()), ErrInvalid)
	}
	return l.decodable(sub, dataBits, parityBits), nil
}

func (l Layout) decodable(sub int, dataBits, parityBits []uint64) bool {
	first, n := l.DataRange(sub)
	pFirst, m := l.ParityRange(sub)
	if l.params.Kind == MDS {
		return n-chunk.Bitmap(dataBits).Count(first, n) <= chunk.Bitmap(parityBits).Count(pFirst, m)
	}
	for g := range min(m, n) { // groups g >= n hold no real data: nothing to lose
		lost := 0
		if !chunk.Bitmap(parityBits).Has(pFirst + g) {
			lost++
		}
		for j := g; j < n; j += m {
			if !chunk.Bitmap(dataBits).Has(first + j) {
				lost++
			}
		}
		if lost > 1 {
			return false
		}
	}
	return true
}
