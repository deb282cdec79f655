package driver

import (
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/reliability"
)

// TestPathCache: an entry resumes a config that names no path of its
// own, until it is PathTTL old; a measurement without a sustained rate is
// not kept.
func TestPathCache(t *testing.T) {
	now := time.Unix(1000, 0)
	c := PathCache{now: func() time.Time { return now }}
	measured := reliability.PathState{Rate: 1e9, MinRTT: 10 * time.Millisecond}
	c.put("a", measured)
	c.put("b", reliability.PathState{MinRTT: time.Millisecond}) // startup never ended
	if got := c.Resume("a", reliability.SenderConfig{}).Resume; got != measured {
		t.Errorf("resume a: %+v, want %+v", got, measured)
	}
	if got := c.Resume("b", reliability.SenderConfig{}).Resume; got != (reliability.PathState{}) {
		t.Errorf("resume b (no rate measured): %+v, want none", got)
	}
	own := reliability.PathState{Rate: 5e8, MinRTT: time.Millisecond}
	if got := c.Resume("a", reliability.SenderConfig{Resume: own}).Resume; got != own {
		t.Errorf("a config's own Resume became %+v", got)
	}
	now = now.Add(PathTTL)
	if got := c.Resume("a", reliability.SenderConfig{}).Resume; got != measured {
		t.Errorf("at PathTTL: %+v, want the entry still", got)
	}
	now = now.Add(time.Second)
	if got := c.Resume("a", reliability.SenderConfig{}).Resume; got != (reliability.PathState{}) || len(c.paths) != 0 {
		t.Errorf("past PathTTL: %+v (%d entries), want it forgotten", got, len(c.paths))
	}
	var zero PathCache
	if got := zero.Resume("a", reliability.SenderConfig{}).Resume; got != (reliability.PathState{}) {
		t.Errorf("the zero cache resumed %+v", got)
	}
}
