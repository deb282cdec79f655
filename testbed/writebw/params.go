package writebw

import (
	"fmt"
	"time"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/driver"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
	"github.com/sdr-rdma/sdr/sdr"
)

// Params are the test parameters the client sends the server.
type Params struct {
	Size       int     `json:"size"`
	Iterations int     `json:"iterations"`
	Warmup     int     `json:"warmup"`
	MTU        int     `json:"mtu"`
	ChunkSize  int     `json:"chunk_size"`
	Channels   int     `json:"channels"`
	InFlight   int     `json:"in_flight"`
	RC         bool    `json:"rc"`
	Loss       float64 `json:"loss"`
	RateGbps   float64 `json:"rate_gbps"`
	Timeout    string  `json:"message_timeout"`
	Verify     bool    `json:"verify"`
	// Reliable mode (-scheme): the scheme, its code, and the chunk as
	// -c gave it (0: the reliability layer's default).
	Scheme        string `json:"scheme,omitempty"`
	Code          string `json:"code,omitempty"`
	ReliableChunk int    `json:"reliable_chunk,omitempty"`
}

func (p *Params) qpAttr(send bool) sdr.QPAttr {
	slots := p.InFlight
	return sdr.QPAttr{MTU: p.MTU, ChunkSize: p.ChunkSize, MaxMessages: slots,
		MaxInFlightBytes: slots * ((p.Size + p.MTU - 1) / p.MTU * p.MTU), Send: send, Recv: !send,
		RateLimit: p.RateGbps * 1e9 / float64(max(1, p.Channels))}
}

func (p *Params) messageTimeout() (time.Duration, error) {
	if p.Timeout != "" {
		return time.ParseDuration(p.Timeout)
	}
	if p.Loss > 0 {
		return 50 * time.Millisecond, nil
	}
	return time.Second, nil
}

// ReliableConfig is the reliability configuration of params: the
// receiver's (scheme, code, rate cap); the sender takes its Config.
func (p *Params) ReliableConfig() (reliability.ReceiverConfig, error) {
	s, err := scheme.Parse(p.Scheme)
	if err != nil {
		return reliability.ReceiverConfig{}, err
	}
	cfg := reliability.ReceiverConfig{Scheme: s}
	if p.Code != "" {
		switch {
		case !s.Coded():
			return cfg, fmt.Errorf("-scheme %s sends no parity: -code %s applies to ec and hybrid", p.Scheme, p.Code)
		case s.Code != (ec.Params{}):
			return cfg, fmt.Errorf("-scheme %s names its code: -code %s is one too many", p.Scheme, p.Code)
		}
		if cfg.Scheme.Code, err = ec.ParseParams(p.Code); err != nil {
			return cfg, err
		}
	}
	if p.RateGbps > 0 {
		cfg.Bandwidth = p.RateGbps * 1e9
	}
	return cfg, nil
}

// reliableAttr is the QP geometry both sides use: the reliable defaults
// (driver.ConnectSender's) unless -c set the chunk, with slots for
// the transfers in flight.
func (p *Params) reliableAttr() sdr.QPAttr {
	a := sdr.QPAttr{MTU: p.MTU, ChunkSize: p.ReliableChunk, MaxMessages: driver.DefaultMaxMessages}
	a.MaxInFlightBytes = max(driver.DefaultMaxInFlightBytes, a.MaxMessages*p.Size)
	return a
}

// reliableWindow is how many transfers each side keeps under way: -q, at
// most maxReliableWindow.
func (p *Params) reliableWindow() int { return max(1, min(p.InFlight, maxReliableWindow)) }

// maxReliableWindow bounds a reliable run's transfers under way, each
// with a receive buffer of its own: 8 (the reliability layer's own
// window) measured no faster than 4 with 64 MiB transfers on a 2 Gbit/s,
// 10 ms path, at twice the memory.
const maxReliableWindow = 4
