package scenario

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/model"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// Row is one link, size and scheme's result. Completion times run from
// the sender's first transmission to the receiver's completion: for the
// reliability schemes from the sender's start (after the receiver's
// clear-to-send), for the rc and uc baselines from the post of the send
// (their receive is posted before, in this process).
type Row struct {
	Link      string  `json:"link"`
	Size      int     `json:"size"`
	Scheme    string  `json:"scheme"`
	Transfers int     `json:"transfers"`
	Completed int     `json:"completed"`
	Corrupt   int     `json:"corrupt"`
	MinMs     float64 `json:"min_ms,omitempty"`
	MeanMs    float64 `json:"mean_ms,omitempty"`
	P50Ms     float64 `json:"p50_ms,omitempty"`
	MaxMs     float64 `json:"max_ms,omitempty"`
	// GoodputMbps is verified bytes delivered over the run's wall time.
	GoodputMbps float64 `json:"goodput_mbps"`
	Resent      int     `json:"chunks_resent"`
	Parity      int     `json:"parity_chunks"`
	Plans       string  `json:"plans,omitempty"`
	// ModelMs is reliability/model's mean completion time of the completed
	// transfers, each for the plan it ran on the link at the rate the
	// carrier sustained, or its first pass's rate where lower (0: the
	// models do not cover every transfer, e.g. hybrid).
	ModelMs float64 `json:"model_mean_ms,omitempty"`
	Note    string  `json:"note,omitempty"`
}

// LinkResult is what Run learnt about one link before measuring on it.
type LinkResult struct {
	Link string `json:"link"`
	// RateMbps is the rate the carrier sustained on the link without its
	// impairments (a calibration transfer), which the models use: the
	// configured rate, or less where the emulation cannot keep up.
	RateMbps float64 `json:"rate_mbps"`
	// CalibrationBytes is the size of the clean transfers RateMbps was
	// measured on (the largest size, or calibrationMinBytes if larger),
	// and CalibrationMs the fastest of them, a one-way delay removed.
	CalibrationBytes int     `json:"calibration_bytes"`
	CalibrationMs    float64 `json:"calibration_ms"`
	RTTMs            float64 `json:"rtt_ms"`
	Loss             float64 `json:"frame_loss"`
	// Forward and Reverse are what the link did over the link's points
	// (not the calibration), when the Network counts (Counting).
	Forward, Reverse *LinkCounters `json:",omitempty"`
}

// Report is a whole run.
type Report struct {
	Scenario Scenario     `json:"scenario"`
	Carrier  string       `json:"carrier"`
	Started  time.Time    `json:"started"`
	Elapsed  Duration     `json:"elapsed"`
	Links    []LinkResult `json:"links"`
	Rows     []Row        `json:"rows"`
}

// Corrupt counts the transfers that delivered wrong bytes.
func (r *Report) Corrupt() int {
	n := 0
	for _, row := range r.Rows {
		n += row.Corrupt
	}
	return n
}

// Progress reports a finished measurement: Done of Total rows.
type Progress struct {
	Done, Total int
	Row         Row
}

// Hooks observe a run; nil fields are skipped.
type Hooks struct {
	// Progress is called after each row.
	Progress func(Progress)
	// Devices is called with each fresh pair of devices before use (for
	// metrics).
	Devices func(a, b *emunic.Device)
	// Transfer is called after each measured transfer with its scheme,
	// statistics (for the rc and uc baselines only Start and End) and
	// whether it delivered the message whole and intact.
	Transfer func(scheme string, st reliability.Stats, delivered bool)
	// Trace, when set, is asked for a tracer for each measured point of a
	// reliability scheme (its link, size and scheme): the tracer gets the
	// decisions of that point's connection, and done is called once the
	// point has finished. A nil tracer traces nothing.
	Trace func(link string, size int, scheme string) (t reliability.Tracer, done func())
}

// calibrationTransfers is how many clean transfers of the largest size,
// or of calibrationMinBytes if that is larger, measure a link's sustained
// rate: a transfer much shorter than the path's bandwidth-delay product
// tells how fast a connection starts, not the rate the models need
// (64 KiB on the default link reported 67 Mbit/s of its 500).
const (
	calibrationTransfers = 3
	calibrationMinBytes  = 4 << 20
)

// Run sweeps the scenario's links × sizes × schemes over net, calling the
// hooks as it goes. It stops at ctx's end with the rows so far and ctx's
// error.
func Run(ctx context.Context, sc Scenario, net Network, hooks Hooks) (*Report, error) {
	sc.fill()
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	rep := &Report{Scenario: sc, Carrier: net.Carrier(), Started: time.Now()}
	defer func() { rep.Elapsed = Duration(time.Since(rep.Started)) }()
	total := len(sc.Links) * len(sc.Sizes) * len(sc.Schemes)
	seed := uint64(1)
	for _, spec := range sc.Links {
		forward, reverse, err := spec.Configs()
		if err != nil {
			return rep, err
		}
		lr, err := calibrate(ctx, &sc, net, spec, forward, reverse)
		if err != nil {
			return rep, err
		}
		counting, _ := net.(Counting)
		var fwd0, rev0 LinkCounters
		if counting != nil {
			fwd0, rev0 = counting.Counters()
		}
		rep.Links = append(rep.Links, lr)
		last := &rep.Links[len(rep.Links)-1]
		for _, size := range sc.Sizes {
			for _, scheme := range sc.Schemes {
				seed += 2
				row, err := measure(ctx, &sc, net, &hooks, lr, forward, reverse, seed, size, scheme)
				if err != nil {
					return rep, fmt.Errorf("scenario: %s, %d B, %s: %w", spec, size, scheme, err)
				}
				rep.Rows = append(rep.Rows, row)
				if counting != nil {
					fwd, rev := counting.Counters()
					fwd, rev = fwd.sub(fwd0), rev.sub(rev0)
					last.Forward, last.Reverse = &fwd, &rev
				}
				if hooks.Progress != nil {
					hooks.Progress(Progress{Done: len(rep.Rows), Total: total, Row: row})
				}
			}
		}
	}
	return rep, nil
}

// clean returns c without its random impairments: the calibration link.
func clean(c link.Config) link.Config {
	c.Loss = link.Loss{}
	c.Duplicate, c.Corrupt, c.Jitter = 0, 0, 0
	return c
}

// calibrate measures the rate the carrier sustains on the link without its
// impairments, for the models and for how long raw UC waits.
func calibrate(ctx context.Context, sc *Scenario, net Network, spec LinkSpec, forward, reverse link.Config) (LinkResult, error) {
	lr := LinkResult{Link: spec.String(), RTTMs: ms(forward.Delay + reverse.Delay), Loss: forward.Loss.Rate()}
	size := max(slices.Max(sc.Sizes), calibrationMinBytes)
	a, b, err := net.Devices(clean(forward), clean(reverse), 0)
	if err != nil {
		return lr, fmt.Errorf("scenario: calibrate %s: %w", spec, err)
	}
	defer a.Close()
	defer b.Close()
	p := point{sc: sc, a: a, b: b, size: size, rtt: forward.Delay + reverse.Delay, count: calibrationTransfers,
		timeout: time.Duration(sc.Timeout), bitsPerS: forward.Bandwidth}
	m, err := p.reliable(ctx, reliability.ReceiverConfig{Scheme: scheme.Scheme{Kind: scheme.SRRTO}})
	if err == nil && m.completed == 0 {
		err = errors.New("no clean transfer completed")
	}
	if err != nil {
		return lr, fmt.Errorf("scenario: calibrate %s: %w", spec, err)
	}
	// The fastest clean transfer took a one-way delay plus the message's
	// serialization (the last ACK's way back is not in Stats.Duration).
	fastest := max(slices.Min(m.times)-forward.Delay, time.Microsecond)
	lr.CalibrationBytes, lr.CalibrationMs = size, ms(fastest)
	lr.RateMbps = float64(size) * 8 / fastest.Seconds() / 1e6
	if forward.Bandwidth > 0 {
		lr.RateMbps = min(lr.RateMbps, forward.Bandwidth/1e6)
	}
	return lr, nil
}

func measure(ctx context.Context, sc *Scenario, net Network, hooks *Hooks, lr LinkResult, forward, reverse link.Config, seed uint64, size int, name string) (Row, error) {
	row := Row{Link: lr.Link, Size: size, Scheme: name}
	a, b, err := net.Devices(forward, reverse, seed)
	if err != nil {
		return row, err
	}
	defer a.Close()
	defer b.Close()
	if hooks.Devices != nil {
		hooks.Devices(a, b)
	}
	rtt := forward.Delay + reverse.Delay
	p := point{sc: sc, a: a, b: b, size: size, rtt: rtt, count: sc.Count,
		timeout: time.Duration(sc.Timeout), bitsPerS: lr.RateMbps * 1e6}
	if hooks.Transfer != nil {
		p.observe = func(st reliability.Stats, delivered bool) { hooks.Transfer(name, st, delivered) }
	}
	var m measurement
	switch name {
	case SchemeRC:
		m, err = p.raw(ctx, true)
	case SchemeUC:
		// A raw UC message that lost a packet never completes: wait as
		// long as three clean transfers take, not the full timeout.
		clean := time.Duration(float64(size)*8/(lr.RateMbps*1e6)*1e9) + rtt
		p.timeout = min(p.timeout, 3*clean+2*rtt)
		m, err = p.raw(ctx, false)
	default:
		s, perr := scheme.Parse(name)
		if perr != nil { // Validate refused it already; a new caller might not have validated
			return row, fmt.Errorf("scenario: %w", perr)
		}
		if s.Coded() && s.Code == (ec.Params{}) {
			s.Code = sc.Code
		}
		p.model = func(st reliability.Stats) (time.Duration, bool) { return predict(sc, lr, size, st) }
		cfg := reliability.ReceiverConfig{Scheme: s}
		if hooks.Trace != nil {
			var done func()
			cfg.Trace, done = hooks.Trace(lr.Link, size, name)
			defer done()
		}
		m, err = p.reliable(ctx, cfg)
	}
	if err != nil {
		return row, err
	}
	row.summarize(&m, size)
	return row, nil
}

func (r *Row) summarize(m *measurement, size int) {
	r.Transfers, r.Completed, r.Corrupt = m.transfers, m.completed, m.corrupt
	r.Resent, r.Parity, r.Plans, r.Note = m.resent, m.parity, m.planList(), m.note
	if len(m.times) == 0 {
		return
	}
	slices.Sort(m.times)
	var sum time.Duration
	for _, t := range m.times {
		sum += t
	}
	if m.unmodeled == 0 && len(m.models) > 0 {
		var sum time.Duration
		for _, d := range m.models {
			sum += d
		}
		r.ModelMs = ms(sum / time.Duration(len(m.models)))
	}
	r.MinMs = ms(m.times[0])
	r.MeanMs = ms(sum / time.Duration(len(m.times)))
	r.P50Ms = ms(m.times[len(m.times)/2])
	r.MaxMs = ms(m.times[len(m.times)-1])
	r.GoodputMbps = float64(m.completed) * float64(size) * 8 / m.wall.Seconds() / 1e6
}

// predict is reliability/model's mean completion time of one transfer of
// size bytes that ran st.Plan, on the link at its sustained rate — or at
// the rate its first pass left at, where that was lower: a transfer
// shorter than a few round trips leaves at the connection's pacing rate,
// which a good sender keeps within what the path has shown it (BBR's
// app-limited start does the same), so the model injects as the sender
// did. False where the models do not cover it: chunk loss beyond
// model.MaxLoss.
func predict(sc *Scenario, lr LinkResult, size int, st reliability.Stats) (time.Duration, bool) {
	c := st.Plan.ModelChoice()
	if lr.RateMbps <= 0 {
		return 0, false
	}
	rate := lr.RateMbps * 1e6
	if st.FirstPass > 0 {
		bits := float64(st.Plan.DataChunks()+st.Plan.ParityChunks()) * float64(sc.ChunkSize) * 8
		rate = min(rate, bits/st.FirstPass.Seconds())
	}
	l, err := st.Plan.ModelLink(lr.Loss, rate, time.Duration(lr.RTTMs*1e6))
	if err != nil || l.Loss >= model.MaxLoss {
		return 0, false
	}
	est, err := model.Predict(l, int64(size), c)
	if err != nil || math.IsInf(ms(est.Mean), 0) {
		return 0, false
	}
	return est.Mean, true
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
