package model

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// Sentinel errors; every function wraps them with the argument at fault.
var (
	// ErrInvalidLink means a Link field is out of range (see Link).
	ErrInvalidLink = errors.New("invalid link")
	// ErrInvalidArgument means a size, code, (k, m), α, quantile level or
	// rank count is out of range.
	ErrInvalidArgument = errors.New("invalid argument")
)

// Limits on the inputs. They keep every computation finite and bounded in
// time; they are far outside the paper's grid.
const (
	// MaxLoss is the largest per-chunk loss probability accepted. Above it
	// the retransmission rounds that matter grow into the hundreds (and the
	// cost of a prediction with them) while no scheme is worth choosing.
	MaxLoss = 0.5
	// MaxChunks is the largest number of data chunks in one message (2^40).
	MaxChunks = 1 << 40
	// MaxCodeWidth bounds k+m of an erasure code (GF(2^8) Reed–Solomon).
	MaxCodeWidth = 256
	// DefaultAlpha is the paper's "SR-RTO" timeout factor: RTO = RTT + 2·RTT.
	DefaultAlpha = 2.0
)

// Link describes one direction of a long-haul link as the models see it.
type Link struct {
	// Bandwidth is the injection rate in bit/s (> 0).
	Bandwidth float64
	// RTT is the round-trip time (> 0); the one-way delay is RTT/2 and
	// there is no queueing.
	RTT time.Duration
	// Loss is the probability that one chunk is lost, independently of
	// every other chunk, in [0, MaxLoss]. Use ChunkLoss to derive it from a
	// packet loss rate.
	Loss float64
	// ChunkSize is the chunk size in bytes (> 0).
	ChunkSize int
	// RepairLoss is the probability that a lost chunk's repair is lost
	// in turn, in [0, MaxLoss]; 0 takes Loss (the repair resends the
	// whole chunk). A sender that resends only the packets a chunk lacks
	// loses its repairs less often than its chunks: PacketRepairLoss.
	// The SR models read it; the EC model's repairs are whole chunks.
	RepairLoss float64
}

// Validate reports whether every field is in range; the error wraps
// ErrInvalidLink. It costs a few comparisons.
func (l Link) Validate() error {
	switch {
	case !(l.Bandwidth > 0) || math.IsInf(l.Bandwidth, 1):
		return fmt.Errorf("model: bandwidth %v bit/s must be positive and finite: %w", l.Bandwidth, ErrInvalidLink)
	case l.RTT <= 0:
		return fmt.Errorf("model: RTT %v must be positive: %w", l.RTT, ErrInvalidLink)
	case !(l.Loss >= 0 && l.Loss <= MaxLoss):
		return fmt.Errorf("model: loss %v must be in [0, %v]: %w", l.Loss, MaxLoss, ErrInvalidLink)
	case !(l.RepairLoss >= 0 && l.RepairLoss <= MaxLoss):
		return fmt.Errorf("model: repair loss %v must be in [0, %v]: %w", l.RepairLoss, MaxLoss, ErrInvalidLink)
	case l.ChunkSize <= 0:
		return fmt.Errorf("model: chunk size %d must be positive: %w", l.ChunkSize, ErrInvalidLink)
	}
	return nil
}

// InjectionTime is the time to put one chunk on the wire, ChunkSize·8/B
// (one division).
func (l Link) InjectionTime() time.Duration { return seconds(l.injection()) }

func (l Link) injection() float64 { return float64(l.ChunkSize) * 8 / l.Bandwidth }
func (l Link) rtt() float64       { return l.RTT.Seconds() }

// chunks validates l and size and returns the number of data chunks.
func (l Link) chunks(size int64) (float64, error) {
	if err := l.Validate(); err != nil {
		return 0, err
	}
	if size <= 0 {
		return 0, fmt.Errorf("model: message size %d must be positive: %w", size, ErrInvalidArgument)
	}
	n := (size-1)/int64(l.ChunkSize) + 1
	if n > MaxChunks {
		return 0, fmt.Errorf("model: message of %d chunks exceeds %d: %w", n, int64(MaxChunks), ErrInvalidArgument)
	}
	return float64(n), nil
}

// ChunkLoss is the probability that a chunk of packetsPerChunk packets loses
// at least one of them when packets are lost independently with probability
// packetLoss: 1 − (1 − p)^n, computed without cancellation at tiny p.
func ChunkLoss(packetLoss float64, packetsPerChunk int) (float64, error) {
	if !(packetLoss >= 0 && packetLoss < 1) {
		return 0, fmt.Errorf("model: packet loss %v must be in [0, 1): %w", packetLoss, ErrInvalidArgument)
	}
	if packetsPerChunk <= 0 {
		return 0, fmt.Errorf("model: %d packets per chunk must be positive: %w", packetsPerChunk, ErrInvalidArgument)
	}
	return -math.Expm1(float64(packetsPerChunk) * math.Log1p(-packetLoss)), nil
}

// PacketRepairLoss is the probability that the repair of a lost chunk of
// packetsPerChunk packets is lost when it resends only the packets the
// chunk lacks, packets being lost independently with probability
// packetLoss: E[1 − (1−p)^J | J ≥ 1] for the J ~ Binomial(n, p) packets
// lost, which is (1 − (1 − p²)^n) / (1 − (1 − p)^n) — about p, where a
// whole chunk's is about n·p.
func PacketRepairLoss(packetLoss float64, packetsPerChunk int) (float64, error) {
	chunk, err := ChunkLoss(packetLoss, packetsPerChunk)
	if err != nil || chunk == 0 {
		return 0, err
	}
	return -math.Expm1(float64(packetsPerChunk)*math.Log1p(-packetLoss*packetLoss)) / chunk, nil
}

// Lossless is the completion time of a message without loss, N·T_inj +
// RTT/2: the last chunk's last bit leaves at N·T_inj and lands RTT/2 later.
// It is the reference of every slowdown.
func Lossless(l Link, size int64) (time.Duration, error) {
	n, err := l.chunks(size)
	if err != nil {
		return 0, err
	}
	return seconds(n*l.injection() + l.rtt()/2), nil
}

// validCode checks an erasure code as the models take it: one ec
// implements, with k+m ≤ MaxCodeWidth for XOR too (the models' binomial
// tables end there).
func validCode(p ec.Params) error {
	if err := p.Validate(); err != nil || p.K+p.M > MaxCodeWidth {
		return fmt.Errorf("model: code %v (k+m ≤ %d): %w", p, MaxCodeWidth, ErrInvalidArgument)
	}
	return nil
}

// The SR schemes, and codedScheme for the others: the models' shorthand.
var (
	srRTO  = scheme.Scheme{Kind: scheme.SRRTO}
	srNACK = scheme.Scheme{Kind: scheme.SRNACK}
)

// codedScheme returns kind (EC or Hybrid) with the code (code, k, m).
func codedScheme(kind scheme.Kind, code ec.Kind, k, m int) scheme.Scheme {
	return scheme.Scheme{Kind: kind, Code: ec.Params{Kind: code, K: k, M: m}}
}

// Choice is a scheme with its parameters, as Choose returns it.
type Choice struct {
	// Scheme is SR-RTO, SR-NACK, or EC or Hybrid with a code (never
	// Auto, nor a coded scheme without its code).
	Scheme scheme.Scheme
	// Alpha is the timeout factor: RTO = RTT + Alpha·RTT, and for EC the
	// fallback timeout's 0.5·Alpha·RTT term.
	Alpha float64
}

// String renders the choice, e.g. "sr-rto(α=2)" or "ec-mds(32,8,α=2)".
func (c Choice) String() string {
	a := strconv.FormatFloat(c.Alpha, 'g', -1, 64)
	if c.Scheme.Coded() {
		p := c.Scheme.Code
		return fmt.Sprintf("%v-%v(%d,%d,α=%s)", c.Scheme.Kind, p.Kind, p.K, p.M, a)
	}
	return fmt.Sprintf("%v(α=%s)", c.Scheme.Kind, a)
}

// Estimate is a model's prediction of a message's completion time, from the
// first bit the sender injects until the receiver holds every data byte.
type Estimate struct {
	// Mean is the expected completion time.
	Mean time.Duration
	// P999 is the 99.9th percentile of the completion time.
	P999 time.Duration
	// Bound is the largest error of Mean the model's approximations allow
	// under the engine semantics the package documents.
	Bound time.Duration
	// Exact reports Bound ≤ 1 % of Mean: the model describes the engine
	// (not merely bounds it) at this point.
	Exact bool
}

// exactTolerance is the relative error bound under which Estimate.Exact holds.
const exactTolerance = 0.01

func newEstimate(mean, p999, bound float64) Estimate {
	return Estimate{Mean: seconds(mean), P999: seconds(p999), Bound: seconds(bound), Exact: bound <= exactTolerance*mean}
}

func validAlpha(alpha float64) error {
	if !(alpha >= 0) || math.IsInf(alpha, 1) {
		return fmt.Errorf("model: α %v must be non-negative and finite: %w", alpha, ErrInvalidArgument)
	}
	return nil
}

func validLevel(q float64) error {
	if !(q > 0 && q < 1) {
		return fmt.Errorf("model: quantile level %v must be in (0, 1): %w", q, ErrInvalidArgument)
	}
	return nil
}

// seconds converts to a Duration, rounding to the nearest nanosecond.
func seconds(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/1e9 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Round(s * 1e9))
}
