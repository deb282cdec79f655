package driver

import (
	"sync"
	"time"

	"github.com/sdr-rdma/sdr/reliability"
)

// PathTTL is how long a PathCache keeps what a connection measured: a
// path's rate and round trip drift (routes, other traffic), and an old
// measurement is a guess. TCP's metrics cache keeps its entries an hour;
// ten minutes is the lifetime QUIC servers commonly give their tokens.
const PathTTL = 10 * time.Minute

// PathCache remembers what connections measured of their paths, by a key
// the application chooses (the peer's address, say), so that the next
// connection to the same peer starts at the rate the last one sustained
// rather than probing up to it (reliability.SenderConfig.Resume): TCP's
// metrics cache, QUIC's resumption. Its zero value is empty and ready;
// it is safe for concurrent use.
type PathCache struct {
	mu    sync.Mutex
	paths map[string]cachedPath
	now   func() time.Time // time.Now, or a test's clock
}

type cachedPath struct {
	state reliability.PathState
	at    time.Time
}

// Remember stores what s measured under key, when it measured anything
// worth resuming (a rate sustained after startup and a round trip).
func (c *PathCache) Remember(key string, s *Sender) { c.put(key, s.PathState()) }

func (c *PathCache) put(key string, p reliability.PathState) {
	if p.Rate <= 0 || p.MinRTT <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paths == nil {
		c.paths = map[string]cachedPath{}
	}
	c.paths[key] = cachedPath{state: p, at: c.clock()}
}

// Resume returns cfg with Resume set from key's entry, if one younger
// than PathTTL is there and cfg names none of its own.
func (c *PathCache) Resume(key string, cfg reliability.SenderConfig) reliability.SenderConfig {
	if cfg.Resume != (reliability.PathState{}) {
		return cfg
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.paths[key]
	switch {
	case !ok:
	case c.clock().Sub(e.at) > PathTTL:
		delete(c.paths, key)
	default:
		cfg.Resume = e.state
	}
	return cfg
}

func (c *PathCache) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}
