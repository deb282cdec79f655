package collective

import (
	"fmt"
	"strings"
	"unsafe"
)

// DataType is the element type of a reduction.
type DataType uint8

// The element types AllReduce and ReduceScatter sum.
const (
	Float32 DataType = iota + 1
	Float64
	Int32
	Int64
)

// Size is the element's size in bytes.
func (d DataType) Size() int {
	switch d {
	case Float32, Int32:
		return 4
	case Float64, Int64:
		return 8
	}
	return 0
}

func (d DataType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	case Int32:
		return "int32"
	case Int64:
		return "int64"
	}
	return fmt.Sprintf("DataType(%d)", uint8(d))
}

// ParseDataType parses a DataType's name.
func ParseDataType(s string) (DataType, error) {
	for _, d := range []DataType{Float32, Float64, Int32, Int64} {
		if strings.EqualFold(s, d.String()) {
			return d, nil
		}
	}
	return 0, fmt.Errorf("collective: data type %q: want float32, float64, int32 or int64", s)
}

// Sum adds src into dst element-wise (dst[i] += src[i]) as elements of
// type d. Both are the same length, a multiple of d.Size(), and aligned
// to it. It allocates nothing; the loops are unrolled eight wide so that
// the compiler keeps eight independent adds in flight.
func Sum(d DataType, dst, src []byte) {
	if len(dst) != len(src) {
		panic("collective: Sum of unequal lengths")
	}
	if len(dst) == 0 {
		return
	}
	switch d {
	case Float32:
		sumSlices(view[float32](dst), view[float32](src))
	case Float64:
		sumSlices(view[float64](dst), view[float64](src))
	case Int32:
		sumSlices(view[int32](dst), view[int32](src))
	case Int64:
		sumSlices(view[int64](dst), view[int64](src))
	default:
		panic("collective: Sum of an unknown data type")
	}
}

// view reinterprets b as elements of T.
func view[T float32 | float64 | int32 | int64](b []byte) []T {
	var zero T
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(zero)))
}

func sumSlices[T float32 | float64 | int32 | int64](dst, src []T) {
	src = src[:len(dst)]
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		d, s := dst[i:i+8:i+8], src[i:i+8:i+8]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
		d[4] += s[4]
		d[5] += s[5]
		d[6] += s[6]
		d[7] += s[7]
	}
	for ; i < len(dst); i++ {
		dst[i] += src[i]
	}
}
