package collective

import (
	"encoding/binary"
	"math"
)

// The check pattern: rank r's element i is a small integer, exact in
// every DataType, and so is its sum over up to 32 ranks; a reduced buffer
// can then be compared element by element in its own type (a float one
// ulp off counts). sdr allreduce -check and the tests use it.

// patternValue is rank's element i.
func patternValue(rank, i int) int64 { return int64((i*7+rank*13)%101 - 50) }

// FillPattern writes rank's check input into buf (elements of dt).
func FillPattern(dt DataType, buf []byte, rank int) {
	for i := range len(buf) / dt.Size() {
		v := patternValue(rank, i)
		switch dt {
		case Float32:
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(v)))
		case Float64:
			binary.LittleEndian.PutUint64(buf[8*i:], math.Float64bits(float64(v)))
		case Int32:
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(int32(v)))
		case Int64:
			binary.LittleEndian.PutUint64(buf[8*i:], uint64(v))
		}
	}
}

// PatternErrors counts the elements of buf that are not the sum of ranks
// ranks' FillPattern inputs; buf's first element is element first of
// the whole vector (a ReduceScatter part).
func PatternErrors(dt DataType, buf []byte, ranks, first int) int64 {
	var wrong int64
	for i := range len(buf) / dt.Size() {
		var want int64
		for r := range ranks {
			want += patternValue(r, first+i)
		}
		var ok bool
		switch dt {
		case Float32:
			ok = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:])) == float32(want)
		case Float64:
			ok = math.Float64frombits(binary.LittleEndian.Uint64(buf[8*i:])) == float64(want)
		case Int32:
			ok = int32(binary.LittleEndian.Uint32(buf[4*i:])) == int32(want)
		case Int64:
			ok = int64(binary.LittleEndian.Uint64(buf[8*i:])) == want
		}
		if !ok {
			wrong++
		}
	}
	return wrong
}
