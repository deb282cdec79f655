// Package sim is a discrete-event simulator of one reliable transfer over a
// long-haul link: a virtual clock (an event heap), the link model of
// link for data and control, and the reliability package's own
// engines — reliability.SenderEngine and ReceiverEngine, not a
// re-implementation — so that what it measures is what the engines do, at
// the paper's scale (400 Gbit/s, 25 ms RTT, up to 8 GiB), where no real
// link on a test machine could go.
//
// # One sample
//
// Run builds a fresh engine pair per sample with FixedRTT (the link's
// round trip is known), a 1 ns reorder window (the links keep order, so a
// hole is a loss at once), NoBackoff unless Point.Backoff (each repair round
// waits one RTO, as the models assume), MTU = ChunkSize (the paper's chunk is one 4 KiB
// packet), a small ACK delay (RTT/1000 by default: the models assume
// immediate NACKs) and a large global timeout. The receiver posts one
// transfer of Point.Size bytes at time 0 and its CTS crosses the control
// link; the sender submits the transfer and the simulator carries out
// the engines' actions:
//
//   - ActSend, ActSendCoded: the chunks the sender hands over at one
//     instant (a coded first pass: each submessage's data, then its
//     parity) form one train, serialized on the data direction behind
//     everything sent before; they arrive one propagation delay later,
//     minus the losses the link samples (in O(losses)). Arrivals are
//     handed to ReceiverEngine.HandleChunks in batches: a run of
//     consecutive delivered chunks, split so that a batch spans at most
//     Point.Batch of arrival times and ends at the train's last data
//     chunk, delivered at the arrival of its last chunk.
//   - ActControl: the datagram crosses the control direction (lossless
//     unless Point.ControlLoss says otherwise) and is handed to the peer.
//   - ActDecode: counted (decoding takes no virtual time, as in the
//     models).
//   - ActComplete / ActFail: the receiver's completion ends the
//     measurement; the sample ends when both sides completed. A failure,
//     or an event queue that runs dry before both completed, is an error
//     (ErrFailed, ErrHang).
//
// The completion time is the model's (reliability/model): from the first
// bit the sender injects to the receiver holding every data byte.
//
// # Error bound of the batching
//
// A chunk is seen by the receiver at most Point.Batch after it arrived,
// and never early. Every engine decision driven by arrivals (the
// completing chunk, an ACK, a NACK, the EC fallback timer's start) is
// therefore shifted by at most Batch — usually later, sometimes earlier,
// as a batch shows the receiver more chunks at once than it would have
// seen at its first chunk's arrival — and a completion after r such
// dependent rounds by at most r·Batch: with the default RTT/1000 and the
// few rounds of the paper's grid, under 0.5 % of a round trip
// (TestBatchBound checks 4·Batch against chunk-by-chunk delivery). A batch
// that ends in the completing chunk is exact: lossless transfers complete
// in exactly model.Lossless.
//
// # Cost
//
// Per sample O(chunks) engine work (the sender numbers and acknowledges
// chunk by chunk; bitmaps go by words) plus O(chunks · Batch-span⁻¹)
// events: about N·T/Batch batches (N chunks of injection time T), ACKs
// at most one per AckDelay, and O(losses) for the link and the repairs.
// Sweep runs samples in parallel, one engine pair per goroutine.
package sim

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sdr-rdma/sdr/chunk"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/model"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// Errors; test with errors.Is.
var (
	// ErrInvalid: a Point field is out of range.
	ErrInvalid = errors.New("sim: invalid point")
	// ErrFailed: an engine failed the transfer (timeout or abort).
	ErrFailed = errors.New("sim: transfer failed")
	// ErrHang: no event was left and the transfer had not completed on
	// both sides.
	ErrHang = errors.New("sim: transfer hung")
)

// Point is one configuration to simulate. Zero fields take the defaults
// in brackets.
type Point struct {
	// Size is the message size in bytes (> 0).
	Size int64
	// Scheme is SR-RTO, SR-NACK, EC, Hybrid (with their code
	// [MDS(32,8)]), or Auto — which the simulator resolves with
	// model.Choose on the point's true link (what Auto's estimator
	// converges to; a fresh engine's estimator has seen no loss yet and
	// would pick SR).
	Scheme scheme.Scheme
	// Bandwidth is the link's rate in bit/s [400 Gbit/s].
	Bandwidth float64
	// RTT is the round trip; each direction's delay is RTT/2 [25 ms].
	RTT time.Duration
	// ChunkSize is the chunk (and packet) size [4096].
	ChunkSize int
	// Loss is the data direction's loss process, per chunk.
	Loss link.Loss
	// ControlLoss is the control directions' loss process [none].
	ControlLoss link.Loss
	// Alpha is the timeout factor [2].
	Alpha float64
	// AckDelay is the receiver's ACK coalescing delay [RTT/1000].
	AckDelay time.Duration
	// Batch bounds the span of arrival times one HandleChunks call
	// covers [RTT/1000]; see the package doc for the error it allows.
	Batch time.Duration
	// Timeout is the engines' global timeout [max(1000·RTT, 60 s)].
	Timeout time.Duration
	// Backoff lets the engines double repeated timeouts (their default on
	// real links). Off, every repair round waits one RTO, as in the paper
	// and reliability/model.
	Backoff bool
}

// withDefaults fills zero fields and validates.
func (p Point) withDefaults() (Point, error) {
	p.Scheme = p.Scheme.WithDefaultCode()
	if p.Bandwidth == 0 {
		p.Bandwidth = 400e9
	}
	if p.RTT == 0 {
		p.RTT = 25 * time.Millisecond
	}
	if p.ChunkSize == 0 {
		p.ChunkSize = chunk.SimSize
	}
	if p.Alpha == 0 {
		p.Alpha = model.DefaultAlpha
	}
	if p.AckDelay == 0 {
		p.AckDelay = max(p.RTT/1000, time.Nanosecond)
	}
	if p.Batch == 0 {
		p.Batch = max(p.RTT/1000, time.Nanosecond)
	}
	if p.Timeout == 0 {
		p.Timeout = max(1000*p.RTT, time.Minute)
	}
	switch {
	case p.Size <= 0 || p.Size > 1<<40:
		return p, fmt.Errorf("sim: size %d B: %w", p.Size, ErrInvalid)
	case !(p.Bandwidth > 0) || math.IsInf(p.Bandwidth, 1) || p.RTT <= 0 || p.ChunkSize <= 0:
		return p, fmt.Errorf("sim: link of %g bit/s, RTT %v, %d-B chunks: %w", p.Bandwidth, p.RTT, p.ChunkSize, ErrInvalid)
	case p.Alpha < 0 || p.AckDelay < 0 || p.Batch < 0 || p.Timeout < 0:
		return p, fmt.Errorf("sim: negative timing: %w", ErrInvalid)
	}
	for _, l := range []link.Loss{p.Loss, p.ControlLoss} {
		if err := l.Validate(); err != nil {
			return p, fmt.Errorf("sim: %w: %w", ErrInvalid, err)
		}
	}
	if err := p.Scheme.Validate(); err != nil {
		return p, fmt.Errorf("sim: %w: %w", ErrInvalid, err)
	}
	if p.Scheme.Kind == scheme.Auto {
		c, err := model.Choose(p.ModelLink(), p.Size)
		if err != nil {
			return p, fmt.Errorf("sim: auto: %w", err)
		}
		p.Scheme = c.Scheme
	}
	return p, nil
}

// WithDefaults returns p with its defaults filled in and Auto resolved to
// the scheme it runs, or an error wrapping ErrInvalid.
func (p Point) WithDefaults() (Point, error) { return p.withDefaults() }

// ModelLink is the point's link as reliability/model sees it: the data
// direction's long-run loss rate as the per-chunk loss (a chunk is one
// packet here), capped at model.MaxLoss.
func (p Point) ModelLink() model.Link {
	return model.Link{Bandwidth: p.Bandwidth, RTT: p.RTT, Loss: min(p.Loss.Rate(), model.MaxLoss), ChunkSize: p.ChunkSize}
}

// ModelChoice returns the model's counterpart of the point's scheme, and
// false for Auto, which becomes one of the others per transfer. p must
// have its defaults filled in (WithDefaults).
func (p Point) ModelChoice() (model.Choice, bool) {
	return model.Choice{Scheme: p.Scheme, Alpha: p.Alpha}, p.Scheme.Kind != scheme.Auto
}

// Sample is the outcome of one simulated transfer.
type Sample struct {
	// Completion is from the sender's first injected bit to the
	// receiver's completion.
	Completion time.Duration
	// Sender and Receiver are the engines' statistics.
	Sender, Receiver reliability.Stats
	// ChunksLost counts data and parity chunks the link dropped.
	ChunksLost int64
	// Decodes counts ActDecode actions.
	Decodes int
	// Events counts processed events (batches, datagrams, timers).
	Events int
}

// epoch is virtual time zero.
var epoch = time.Unix(0, 0)

// Run simulates one transfer of point p with the given seed. The same
// point and seed give the same sample. Errors wrap ErrInvalid, ErrFailed
// or ErrHang.
func Run(p Point, seed uint64) (Sample, error) { return RunTraced(p, seed, nil) }

// RunTraced is Run with both engines' decisions traced to t (nil: none);
// the trace's times are the simulation's, from the Unix epoch. Tracing
// changes no decision: the sample is Run's.
func RunTraced(p Point, seed uint64, t reliability.Tracer) (Sample, error) {
	p, err := p.withDefaults()
	if err != nil {
		return Sample{}, err
	}
	var s simulation
	if err := s.init(p, seed, t); err != nil {
		return Sample{}, err
	}
	return s.run()
}

// segment is one send action's chunks in a train, transmissions [at,
// at+count): an ActSend's chunks [first, first+count) of part, or an
// ActSendCoded's transmissions of the coded first pass from first on.
type segment struct {
	part      reliability.Part
	coded     bool
	first, at int
	count     int
}

// piece returns the run of one part that transmission at+o of s starts:
// part, its first chunk and how many follow in s.
func (s *segment) piece(o int, l ec.Layout) (part reliability.Part, first, n int) {
	if !s.coded {
		return s.part, s.first + o, s.count - o
	}
	part, first, n = reliability.FirstPassPiece(l, s.first+o)
	return part, first, min(n, s.count-o)
}

// train carries the send actions a sender issued at one instant as one
// run of the link — back to back, as separate runs at that instant would
// have left — and delivers it batch by batch: an Arrival whose first call
// sends the run (the instant's last action is in by then) and whose every
// later call delivers the pending batch and schedules the next.
type train struct {
	sim        *simulation
	now        time.Time // the instant the train collects
	segs       []segment
	chunks     int // transmissions in segs
	dataEnd    int // the transmission after the last Data segment's
	sent       bool
	run        link.Run
	seg        int // the segment holding transmission next
	next, end  int // the pending batch: transmissions [next, end)
	lost       int // index into run.Lost of the next loss at or after end
	batchLimit int
}

// add appends an ActSend's chunks.
func (t *train) add(part reliability.Part, first, count int) {
	t.segs = append(t.segs, segment{part: part, first: first, at: t.chunks, count: count})
	t.chunks += count
	if part == reliability.Data {
		t.dataEnd = t.chunks
	}
}

// addCoded appends an ActSendCoded's transmissions [first, first+n) of
// the coded first pass over l.
func (t *train) addCoded(first, n int, l ec.Layout) {
	t.segs = append(t.segs, segment{coded: true, first: first, at: t.chunks, count: n})
	// The last data chunk among them: the last transmission, or the one
	// before its submessage's parity (parity chunk sub·M + j is sent
	// j+1 transmissions after it).
	end := t.chunks + n
	if part, chunk, _ := reliability.FirstPassPiece(l, first+n-1); part == reliability.Parity {
		end -= chunk%l.Params().M + 1
	}
	if end > t.chunks {
		t.dataEnd = end
	}
	t.chunks += n
}

// advance sets the next batch after end, reporting false when the run is
// exhausted.
func (t *train) advance() bool {
	t.next = t.end
	for t.lost < len(t.run.Lost) && t.run.Lost[t.lost] == t.next {
		t.lost++
		t.next++
	}
	if t.next >= t.run.N {
		return false
	}
	t.end = t.run.N
	if t.lost < len(t.run.Lost) {
		t.end = t.run.Lost[t.lost]
	}
	t.end = min(t.end, t.next+t.batchLimit)
	if t.next < t.dataEnd {
		t.end = min(t.end, t.dataEnd) // the last data chunk can complete the transfer
	}
	return true
}

// schedule puts the pending batch on the clock or, when the run is
// exhausted, frees the train and schedules the next on the line.
func (t *train) schedule(p *Pair) {
	if t.advance() {
		p.At(t.run.Arrival(t.end-1), t)
		return
	}
	s := t.sim
	s.free = append(s.free, t)
	s.line = s.line[1:]
	if len(s.line) > 0 {
		s.line[0].schedule(p)
	}
}

// Arrive sends the train (its first call) or hands the pending batch to
// the receiver, segment by segment (Arrival).
func (t *train) Arrive(p *Pair) {
	if !t.sent {
		if t.sim.send(t); len(t.sim.line) == 1 {
			t.schedule(p)
		}
		return
	}
	for i := t.next; i < t.end; {
		seg := &t.segs[t.seg]
		if i >= seg.at+seg.count {
			t.seg++
			continue
		}
		part, first, n := seg.piece(i-seg.at, t.sim.layout)
		n = min(n, t.end-i)
		p.Receiver.HandleChunks(p.Now(), 0, part, first, n, true)
		i += n
	}
	t.schedule(p)
}

// simulation is one sample's state and the Network of its Pair: the
// data direction's link model and two control directions. One goroutine
// owns it.
type simulation struct {
	p       Point
	pair    *Pair
	data    *link.Direction
	ctlFwd  *link.Direction // sender → receiver datagrams
	ctlRev  *link.Direction // receiver → sender datagrams
	started bool
	start   time.Time // the first injected bit
	rcvDone bool
	sndDone bool
	out     Sample
	err     error
	layout  ec.Layout // a coded plan's, for ActSendCoded
	collect *train    // the train collecting this instant's ActSends
	// line holds the trains sent and not yet delivered, in the order
	// they arrive (the data direction keeps order): only the first has
	// an event queued, so the queue stays short however many wait.
	line []*train
	free []*train // delivered trains for reuse
}

func (s *simulation) init(p Point, seed uint64, t reliability.Tracer) error {
	s.p = p
	both := reliability.Config{FixedRate: true, RTT: p.RTT, Bandwidth: p.Bandwidth, Alpha: p.Alpha,
		Timeout: p.Timeout, ChunkSize: p.ChunkSize, MTU: p.ChunkSize, NoBackoff: !p.Backoff, Trace: t}
	snd, err := reliability.NewSenderEngine(reliability.SenderConfig{Config: both, FixedRTT: true})
	if err != nil {
		return fmt.Errorf("sim: %w: %w", ErrInvalid, err)
	}
	rcv, err := reliability.NewReceiverEngine(reliability.ReceiverConfig{Config: both, AckDelay: p.AckDelay,
		Scheme:        p.Scheme,
		ReorderWindow: time.Nanosecond}) // the links keep order: a hole is a loss
	if err != nil {
		return fmt.Errorf("sim: %w: %w", ErrInvalid, err)
	}
	s.pair = NewPair(snd, rcv, epoch, s)
	delay := p.RTT / 2
	mk := func(loss link.Loss, stream uint64) (*link.Direction, error) {
		return link.New(link.Config{Bandwidth: p.Bandwidth, Delay: delay, Loss: loss, Seed: mix(seed, stream)})
	}
	if s.data, err = mk(p.Loss, 1); err != nil {
		return fmt.Errorf("sim: data link: %w", err)
	}
	if s.ctlFwd, err = mk(p.ControlLoss, 2); err != nil {
		return fmt.Errorf("sim: control link: %w", err)
	}
	if s.ctlRev, err = mk(p.ControlLoss, 3); err != nil {
		return fmt.Errorf("sim: control link: %w", err)
	}
	return nil
}

// mix derives a stream's seed from a sample's (splitmix64's finalizer).
func mix(seed, stream uint64) uint64 {
	z := seed + stream*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func (s *simulation) run() (Sample, error) {
	pr := s.pair
	plan := pr.Receiver.Plan(int(s.p.Size))
	if plan.ParityChunks() > 0 {
		s.layout, _ = plan.Layout() // a plan the engine made is valid
	}
	if _, err := pr.Receiver.Post(pr.Now(), plan); err != nil {
		return Sample{}, fmt.Errorf("sim: post: %w", err)
	}
	pr.Sender.Submit(pr.Now(), int(s.p.Size))
	pr.Dispatch()
	for s.err == nil && !(s.rcvDone && s.sndDone) {
		if !pr.Step() {
			return s.out, fmt.Errorf("sim: %v of %d B at %v: receiver done %v, sender done %v: %w",
				plan, s.p.Size, pr.Now().Sub(epoch), s.rcvDone, s.sndDone, ErrHang)
		}
	}
	s.out.Events = pr.Steps
	s.out.ChunksLost = s.data.Counters().Lost
	return s.out, s.err
}

// SenderAction carries out a sender's action (Network).
func (s *simulation) SenderAction(pr *Pair, a *reliability.Action) {
	now := pr.Now()
	switch a.Kind {
	case reliability.ActSend:
		s.train(pr).add(a.Part, a.First, a.Count)
	case reliability.ActSendCoded:
		s.train(pr).addCoded(a.First, a.Count, s.layout)
	case reliability.ActControl:
		if f := s.ctlFwd.Send(now, len(a.Datagram)); f.Drop == link.NotDropped {
			pr.ToReceiver(f.Arrive, a.Datagram)
		}
	case reliability.ActComplete:
		s.sndDone = true
		s.out.Sender = *a.Stats
	case reliability.ActFail:
		s.err = fmt.Errorf("sim: sender at %v: %w: %w", now.Sub(epoch), ErrFailed, a.Err)
	}
}

// ReceiverAction carries out a receiver's action (Network).
func (s *simulation) ReceiverAction(pr *Pair, a *reliability.Action) {
	now := pr.Now()
	switch a.Kind {
	case reliability.ActControl:
		if f := s.ctlRev.Send(now, len(a.Datagram)); f.Drop == link.NotDropped {
			pr.ToSender(f.Arrive, a.Datagram)
		}
	case reliability.ActDecode:
		s.out.Decodes++
	case reliability.ActComplete:
		s.rcvDone = true
		s.out.Receiver = *a.Stats
		s.out.Completion = now.Sub(s.start)
	case reliability.ActFail:
		s.err = fmt.Errorf("sim: receiver at %v: %w: %w", now.Sub(epoch), ErrFailed, a.Err)
	}
}

// train returns the train collecting the ActSends of this instant,
// scheduling a new one to leave at it if there is none.
func (s *simulation) train(pr *Pair) *train {
	if s.collect == nil || !s.collect.now.Equal(pr.Now()) {
		s.collect = s.newTrain(pr.Now())
		pr.At(pr.Now(), s.collect)
	}
	return s.collect
}

// send puts t on the data link and the line: everything the sender
// issued at t.now, as one run.
func (s *simulation) send(t *train) {
	s.line = append(s.line, t)
	if s.collect == t {
		s.collect = nil
	}
	t.sent = true
	t.run = s.data.SendRun(t.now, t.chunks, s.p.ChunkSize, t.run.Lost)
	t.batchLimit = t.run.Within(s.p.Batch)
	if !s.started {
		s.started, s.start = true, t.run.Start()
	}
}

func (s *simulation) newTrain(now time.Time) *train {
	t := &train{sim: s}
	if n := len(s.free); n > 0 {
		t = s.free[n-1]
		s.free = s.free[:n-1]
	}
	t.now, t.segs, t.chunks, t.dataEnd, t.sent, t.seg, t.end, t.lost = now, t.segs[:0], 0, 0, false, 0, 0, 0
	return t
}
