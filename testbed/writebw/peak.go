package writebw

import (
	"time"
)

// The peak bandwidth is the best peakWindow of delivered bytes, sampled
// every peakSample; a run shorter than the window reports its average.
const (
	peakWindow = 100 * time.Millisecond
	peakSample = 5 * time.Millisecond
)

// deliveryRate is a time series of cumulative delivered bytes.
type deliveryRate struct {
	at    []time.Time
	bytes []int
}

func (r *deliveryRate) add(t time.Time, b int) {
	r.at = append(r.at, t)
	r.bytes = append(r.bytes, b)
}

func (r *deliveryRate) last() time.Time {
	if len(r.at) == 0 {
		return time.Time{}
	}
	return r.at[len(r.at)-1]
}

// peak returns the highest rate in bytes/s between two samples at least
// window apart (the shortest such span from each sample); ok is false
// when the series spans less than window.
func (r *deliveryRate) peak(window time.Duration) (best float64, ok bool) {
	n := len(r.at)
	if n < 2 || r.at[n-1].Sub(r.at[0]) < window {
		return 0, false
	}
	for i, j := 0, 0; i < n; i++ {
		for j < n && r.at[j].Sub(r.at[i]) < window {
			j++
		}
		if j == n {
			break
		}
		best = max(best, float64(r.bytes[j]-r.bytes[i])/r.at[j].Sub(r.at[i]).Seconds())
	}
	return best, true
}
