package reliability

import (
	"time"

	"github.com/sdr-rdma/sdr/reliability/ec"
)

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// minNonZero returns the earlier of a and b, where a zero time is none.
func minNonZero(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// minNonZeroDuration returns the smaller of a and b, where a zero a is
// none.
func minNonZeroDuration(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}

// codeToWire and codeFromWire carry an EC code in a CTS: the kind in the
// flags' low bits, k and m in their bytes.
func codeToWire(p ec.Params) (flags, k, m uint8) { return uint8(p.Kind) & 3, uint8(p.K), uint8(p.M) }

func codeFromWire(flags, k, m uint8) ec.Params {
	return ec.Params{Kind: ec.Kind(flags & 3), K: int(k), M: int(m)}
}

// maxBackoff bounds the doublings of a repeated timeout.
const maxBackoff = 6

// backoff returns d doubled once per earlier attempt beyond the first, at
// most 2^maxBackoff times (TCP's RTO backoff, RFC 6298 §5.5).
func backoff(d time.Duration, attempts int) time.Duration {
	return d << min(max(attempts-1, 0), maxBackoff)
}

// backoff is the package's backoff unless NoBackoff holds.
func (c *Config) backoff(d time.Duration, attempts int) time.Duration {
	if c.NoBackoff {
		return d
	}
	return backoff(d, attempts)
}
