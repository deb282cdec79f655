// Package scenario runs the testbed's experiments: the same messages moved
// between two emulated NICs over one long-haul link with each reliability
// scheme — the NIC's RC go-back-N as the baseline, raw SDR, and the
// software schemes of package reliability — every byte verified, with
// completion times beside reliability/model's prediction for the link.
//
// A Scenario (flags or a JSON file) names the link of each direction in
// package link's text form, the message sizes, the schemes and the
// repetitions; Run sweeps links × sizes × schemes over a Network, which
// carries the link either as the in-process pipe port (no privileges) or
// between network namespaces through the AF_XDP link emulator
// (testbed/linkemu). Report writes the results as CSV, JSON and Markdown.
package scenario

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/chunk"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// ErrInvalid is wrapped by every error about a scenario out of range.
var ErrInvalid = errors.New("scenario: invalid")

// Baseline schemes beside reliability's: the NIC's own RC go-back-N on the
// SDR QP's channels, and raw SDR over UC with no reliability at all.
const (
	SchemeRC = "rc"
	SchemeUC = "uc"
)

// Scenario describes one experiment. Zero fields take Default's values.
type Scenario struct {
	// Name labels the report.
	Name string `json:"name"`
	// Links are the link settings swept, each in package link's text form
	// (link.ParseConfig).
	Links []LinkSpec `json:"links"`
	// Sizes are the message sizes in bytes.
	Sizes []int `json:"sizes"`
	// Count is the transfers per link, size and scheme.
	Count int `json:"count"`
	// Schemes are SchemeRC, SchemeUC and reliability's schemes as
	// scheme.Parse reads them (sr-rto, sr-nack, ec,
	// hybrid, auto; ec and hybrid optionally with a code, ec-xor(8,2)).
	Schemes []string `json:"schemes"`
	// Code is the erasure code of ec and hybrid where the scheme names
	// none.
	Code ec.Params `json:"code"`
	// MTU, ChunkSize and Channels shape the SDR QP.
	MTU       int `json:"mtu"`
	ChunkSize int `json:"chunk_size"`
	Channels  int `json:"channels"`
	// Timeout bounds one transfer; a transfer that takes longer counts as
	// not completed. Raw UC waits at most three clean transfers' time.
	Timeout Duration `json:"timeout"`
}

// LinkSpec is one link setting: Forward carries data from the sender's
// host A to the receiver's host B, Reverse the ACKs, NACKs and RC
// acknowledgements back (the same as Forward when empty).
type LinkSpec struct {
	Forward string `json:"forward"`
	Reverse string `json:"reverse,omitempty"`
}

// Configs parses both directions.
func (l LinkSpec) Configs() (forward, reverse link.Config, err error) {
	if forward, err = link.ParseConfig(l.Forward); err != nil {
		return forward, reverse, fmt.Errorf("scenario: link %q: %w", l.Forward, err)
	}
	if l.Reverse == "" {
		return forward, forward, nil
	}
	if reverse, err = link.ParseConfig(l.Reverse); err != nil {
		return forward, reverse, fmt.Errorf("scenario: reverse link %q: %w", l.Reverse, err)
	}
	return forward, reverse, nil
}

func (l LinkSpec) String() string {
	if l.Reverse == "" || l.Reverse == l.Forward {
		return l.Forward
	}
	return l.Forward + " | reverse " + l.Reverse
}

// Duration is a time.Duration written as "20ms" in JSON.
type Duration time.Duration

// MarshalText writes the duration in time.Duration's form.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads time.ParseDuration's form.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%w: duration: %v", ErrInvalid, err)
	}
	*d = Duration(v)
	return nil
}

// DefaultLink is the default long-haul link: a 20 ms round trip (10 ms
// each way, about 2000 km of fibre), 1 % of frames lost each way, at a rate
// every carrier on this project's 2-core machines sustains, with a queue
// that holds a few messages.
const DefaultLink = "rate=500Mbit,delay=10ms,loss=1%,queue=8MB"

// Default returns the default scenario: RC go-back-N, SR (RTO and NACK),
// EC MDS(32,8) and auto on the default link, 64 KiB to 4 MiB messages.
func Default() Scenario {
	return Scenario{
		Name:      "long-haul",
		Links:     []LinkSpec{{Forward: DefaultLink}},
		Sizes:     []int{64 << 10, 512 << 10, 4 << 20},
		Count:     6,
		Schemes:   []string{SchemeRC, "sr-rto", "sr-nack", "ec", "auto"},
		Code:      scheme.DefaultCode,
		MTU:       1024,
		ChunkSize: chunk.ScenarioSize,
		Channels:  4,
		Timeout:   Duration(10 * time.Second),
	}
}

// Load reads a scenario from a JSON file; fields it leaves out take
// Default's values.
func Load(path string) (Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, fmt.Errorf("scenario: %w", err)
	}
	var s Scenario
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Scenario{}, fmt.Errorf("scenario: %s: %w", path, errors.Join(ErrInvalid, err))
	}
	s.fill()
	return s, s.Validate()
}

// fill gives zero fields Default's values.
func (s *Scenario) fill() {
	d := Default()
	if s.Name == "" {
		s.Name = d.Name
	}
	if len(s.Links) == 0 {
		s.Links = d.Links
	}
	if len(s.Sizes) == 0 {
		s.Sizes = d.Sizes
	}
	if s.Count == 0 {
		s.Count = d.Count
	}
	if len(s.Schemes) == 0 {
		s.Schemes = d.Schemes
	}
	if s.Code.K == 0 {
		s.Code = d.Code
	}
	if s.MTU == 0 {
		s.MTU = d.MTU
	}
	if s.ChunkSize == 0 {
		s.ChunkSize = d.ChunkSize
	}
	if s.Channels == 0 {
		s.Channels = d.Channels
	}
	if s.Timeout == 0 {
		s.Timeout = d.Timeout
	}
}

// Validate checks every field and returns an error wrapping ErrInvalid.
func (s *Scenario) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	for _, l := range s.Links {
		if _, _, err := l.Configs(); err != nil {
			return errors.Join(ErrInvalid, err)
		}
	}
	for _, size := range s.Sizes {
		if size <= 0 || size > 1<<30 {
			return bad("message size %d outside (0, 1 GiB]", size)
		}
	}
	if s.Count < 1 {
		return bad("count %d < 1", s.Count)
	}
	for _, name := range s.Schemes {
		if name == SchemeRC || name == SchemeUC {
			continue
		}
		if _, err := scheme.Parse(name); err != nil {
			return errors.Join(ErrInvalid, err)
		}
	}
	if i := firstDuplicate(s.Schemes); i >= 0 {
		return bad("scheme %s listed twice", s.Schemes[i])
	}
	if err := s.Code.Validate(); err != nil {
		return errors.Join(ErrInvalid, err)
	}
	switch chunkErr := chunk.Check(s.ChunkSize, s.MTU); {
	case s.MTU != 256 && s.MTU != 512 && s.MTU != 1024 && s.MTU != 2048 && s.MTU != 4096:
		return bad("MTU %d is not an RoCE MTU (256 … 4096)", s.MTU)
	case chunkErr != nil:
		return bad("%v", chunkErr)
	case s.Channels < 1 || s.Channels > 64:
		return bad("channels %d outside 1 … 64", s.Channels)
	case s.Timeout <= 0:
		return bad("timeout %v ≤ 0", time.Duration(s.Timeout))
	}
	return nil
}

func firstDuplicate(names []string) int {
	for i, n := range names {
		if slices.Index(names[:i], n) >= 0 {
			return i
		}
	}
	return -1
}
