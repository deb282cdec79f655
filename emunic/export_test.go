package emunic

import "bytes"

// Canaried returns a buffer of n bytes with canary bytes before and after
// it in the same backing array, and a check that the canaries are intact:
// a write past either end of a registered region shows. (Exported for the
// external tests; the fuzz target, inside the package, uses it too.)
func Canaried(n int) (buf []byte, intact func() bool) {
	const guard = 64
	all := bytes.Repeat([]byte{0xCA}, n+2*guard)
	buf = all[guard : guard+n : guard+n]
	return buf, func() bool {
		return bytes.Equal(all[:guard], bytes.Repeat([]byte{0xCA}, guard)) &&
			bytes.Equal(all[guard+n:], bytes.Repeat([]byte{0xCA}, guard))
	}
}
