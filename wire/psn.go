package wire

import "strconv"

// PSN is a 24-bit packet sequence number. PSNs wrap from 0xFFFFFF to 0, so
// compare them with Before, After and Distance, never with < or >: a PSN is
// before another when it is less than 2^23 steps behind it (serial number
// arithmetic, RFC 1982).
type PSN uint32

// PSNMask keeps the 24 bits of a PSN.
const PSNMask = 0xFFFFFF

// Add returns p advanced by n (n may be negative), wrapped to 24 bits.
func (p PSN) Add(n int) PSN { return PSN((int64(p) + int64(n)) & PSNMask) }

// Next returns p+1.
func (p PSN) Next() PSN { return (p + 1) & PSNMask }

// Distance returns the signed number of steps from p to q, in
// [-2^23, 2^23): positive when q is after p.
func (p PSN) Distance(q PSN) int {
	d := int32(uint32(q-p)<<8) >> 8 // sign-extend the 24-bit difference
	return int(d)
}

// Before reports whether p comes strictly before q.
func (p PSN) Before(q PSN) bool { return p.Distance(q) > 0 }

// After reports whether p comes strictly after q.
func (p PSN) After(q PSN) bool { return q.Distance(p) > 0 }

// InWindow reports whether p lies in the n PSNs starting at first.
func (p PSN) InWindow(first PSN, n int) bool {
	d := first.Distance(p)
	return d >= 0 && d < n
}

// String returns the PSN as six hex digits.
func (p PSN) String() string {
	s := strconv.FormatUint(uint64(p&PSNMask), 16)
	for len(s) < 6 {
		s = "0" + s
	}
	return "0x" + s
}
