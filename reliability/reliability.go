// Package reliability runs software-defined reliability over SDR's partial
// message completion (docs/DESIGN.md §9): Selective Repeat with retransmission
// timeouts (SR-RTO) or receiver NACKs (SR-NACK), Erasure Coding (EC, MDS or
// XOR) with a fallback to SR repair, a hybrid of the two, and Auto, which
// picks one per transfer from the link's measured round trip and loss
// through the paper's models (package reliability/model).
//
// The engines (SenderEngine, ReceiverEngine) are sans-I/O state
// machines: they take events — a transfer submitted or posted, a receive bitmap changed, a
// control datagram arrived, time passed — each with the current time, and
// queue actions — open a transfer's SDR messages, send these chunks, send
// this datagram, decode this submessage, the transfer completed or failed —
// that the caller drains with Actions and carries out. They start no
// goroutines, read no clock and do no I/O, so the same engines run under
// the simulator's virtual clock (testbed/sim), in fake-clock tests, and
// over a real sdr.QP through the drivers of this package (Sender.Write,
// Receiver.Read).
//
// # Protocol
//
// Transfers are numbered 0, 1, 2, … on both sides. The receiver posts the
// buffers of a transfer (the data message, and for EC a parity message
// after it, in SDR's order-based matching) and sends a CTS naming the
// transfer, its exact length and the scheme: one credit per posted
// transfer, so a sender never outruns the receiver's slots. The sender
// starts transfers in order once it holds both the application's data and
// the transfer's CTS, and sends the data chunks (and parity) as streamed
// SDR writes. The receiver acknowledges what its chunk bitmaps show (ACK:
// a cumulative point and a window of the bitmap), asks for missing chunks
// (NACK) — or, where SDR's per-packet view shows most of a chunk there,
// for its missing packets (PNACK) — asks again each round trip a repair
// stays missing, and answers probes (an SR-NACK sender's tail probe marks
// the end of its first pass); the sender retransmits chunks whose
// retransmission timer ran out or that were NACKed, finishes the transfer
// when an ACK says it is complete and confirms that ACK (FIN), which the
// receiver repeats until then. Every control message is one
// datagram over the same link as the data (package reliability/control),
// so it can be lost, duplicated or reordered: every message is idempotent,
// the receiver resends CTSs until data arrives, and the sender probes
// until it hears of completion. A transfer that makes no progress for
// Config.Timeout fails on both sides.
package reliability

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

// Errors. Test with errors.Is.
var (
	// ErrTimeout: the transfer did not complete within the global timeout.
	ErrTimeout = errors.New("reliability: transfer timed out")
	// ErrAborted: the peer gave up on the transfer.
	ErrAborted = errors.New("reliability: transfer aborted by the peer")
	// ErrLengthMismatch: the sender's data and the receiver's buffer differ
	// in length.
	ErrLengthMismatch = errors.New("reliability: sender and receiver lengths differ")
	// ErrInvalid: an argument or configuration is out of range.
	ErrInvalid = errors.New("reliability: invalid argument")
	// ErrClosed: the connection was closed.
	ErrClosed = errors.New("reliability: connection closed")
	// ErrPeerGone: the peer closed the connection, or nothing was heard
	// from it for Config.Timeout; every pending and later call fails.
	ErrPeerGone = errors.New("reliability: peer gone")
	// ErrRoleMismatch: both ends of a connection called ConnectSender, or
	// both ConnectReceiver.
	ErrRoleMismatch = errors.New("reliability: both ends play the same role")
)

// Plan is how one transfer travels, fixed by the receiver's CTS.
type Plan struct {
	Scheme    scheme.Scheme // never Auto; EC and Hybrid with their code
	Length    int           // data bytes
	ChunkSize int           // bytes per chunk (the SDR QP's)
	MTU       int           // bytes per packet (the SDR QP's)
}

// DataChunks returns how many data chunks the transfer has.
func (p Plan) DataChunks() int { return (p.Length + p.ChunkSize - 1) / p.ChunkSize }

// Layout returns the EC layout of a coded plan.
func (p Plan) Layout() (ec.Layout, error) { return ec.NewLayout(p.Scheme.Code, p.Length, p.ChunkSize) }

// ParityChunks returns how many parity chunks a coded plan sends (0 for SR).
func (p Plan) ParityChunks() int {
	if !p.Scheme.Coded() {
		return 0
	}
	l, err := p.Layout()
	if err != nil {
		return 0
	}
	return l.ParityChunks()
}

// ParityLen returns the parity message's length in bytes (0 for SR).
func (p Plan) ParityLen() int { return p.ParityChunks() * p.ChunkSize }

// Messages returns how many SDR messages the transfer takes: the data
// message, and the parity message for coded plans.
func (p Plan) Messages() int {
	if p.Scheme.Coded() {
		return 2
	}
	return 1
}

// immPackets is how many leading packets carry every nibble of the user
// immediate (wire.ImmLayout.Nibbles for both SDR layouts).
const immPackets = 8

func (p Plan) validate() error {
	switch {
	case p.Scheme.Kind == scheme.Auto || p.Scheme.Validate() != nil || p.Scheme.Coded() && p.Scheme.Code == (ec.Params{}):
		return fmt.Errorf("reliability: plan scheme %v: %w", p.Scheme, ErrInvalid)
	case p.Length < 0 || p.ChunkSize <= 0 || p.MTU <= 0 || p.ChunkSize%p.MTU != 0:
		return fmt.Errorf("reliability: plan of %d B in %d-B chunks, MTU %d: %w", p.Length, p.ChunkSize, p.MTU, ErrInvalid)
	case p.Scheme.Code.K > 255 || p.Scheme.Code.M > 255:
		return fmt.Errorf("reliability: plan code %v: %w", p.Scheme.Code, ErrInvalid)
	}
	return nil
}

func (p Plan) String() string { return p.Scheme.String() }

// Config is what both ends of a connection take: what is known of the
// path, the timers' shape and the QP geometry. SenderConfig and
// ReceiverConfig add what only one end uses. Zero fields take the
// defaults in brackets.
type Config struct {
	// RTT is the round-trip time the timers start from [1 ms]; each end
	// refines its own estimate from measurements (PINGs at connect, ACKs)
	// unless the sender's FixedRTT holds it.
	RTT time.Duration
	// Bandwidth caps the sender's pacing rate in bits per second of chunk
	// payload [none: the rate control finds the path's rate]. With
	// FixedRate the sender sends at Bandwidth [10 Gbit/s] and learns
	// nothing. The receiver's models (Auto) take the rate first passes
	// arrive at, within it (Bandwidth itself before the first, and with
	// FixedRate).
	Bandwidth float64
	// FixedRate turns the rate control off: the sender hands chunks over
	// as fast as they come and its injection clock counts them leaving at
	// Bandwidth; the receiver then expects no pacing delay on repairs.
	// For a path whose rate is known and reserved, and the simulator,
	// whose link paces. Both ends must agree.
	FixedRate bool
	// Alpha scales the retransmission timeout RTO = RTT + α·RTT and the
	// EC fallback timeout [2].
	Alpha float64
	// Timeout fails a transfer when the connection has made no progress
	// (no ACK brought news) for this long since it started
	// [max(10 s, 1000·RTT)].
	Timeout time.Duration
	// ControlMTU is the largest control datagram [1024].
	ControlMTU int
	// ChunkSize and MTU are the SDR QP's (the drivers take them from it).
	ChunkSize, MTU int
	// NoBackoff keeps every repeated timeout (a flight's retransmission,
	// a probe, a repeated NACK) at its first value, as in the paper's SR
	// and reliability/model; the simulator (testbed/sim) sets it to
	// compare with the models. By default the sender's back off
	// exponentially while the receiver is silent, and the receiver's
	// repeated NACKs of one hole or submessage at most 2-fold while the
	// transfer's chunks have stopped arriving.
	NoBackoff bool
	// Trace, when set, receives every decision the engine makes (see
	// Tracer; NewJSONTracer writes them for `sdr trace`). Nil costs a nil
	// check per decision.
	Trace Tracer

	rateCap float64 // Bandwidth as the caller set it (0: no cap)
}

// SenderConfig tunes a sender: Config and what only the sending end
// uses.
type SenderConfig struct {
	Config
	// FixedRTT keeps the timers on RTT. Otherwise the sender measures the
	// round trip from ACKs of chunks sent once (Karn's rule) and PINGs:
	// the timers' RTT is then the least sample (at least RTT), and the
	// RTO at least 2·SRTT and SRTT + 4·RTTVAR — on a real host
	// processing and queueing add to the link's round trip, and vary.
	// The simulator, whose round trip is known, fixes it.
	FixedRTT bool
	// Window bounds the transfers a sender has started and not finished
	// [8; the drivers also keep it within half the QP's slots].
	Window int
	// MaxInFlightBytes bounds the data and parity bytes of those
	// transfers [unbounded; the drivers take the QP's].
	MaxInFlightBytes int
	// Resume is what an earlier connection to the same peer measured
	// (SenderEngine.PathState) [none: start cold]. When the first round
	// trip this connection measures is within a factor of two of
	// Resume.MinRTT — the same path, as far as the sender can tell — it
	// paces at Resume.Rate from the first chunk instead of probing up
	// from two initial windows per round trip; otherwise it starts cold.
	// TCP's metrics cache and QUIC's resumption do the same.
	Resume PathState
}

// PathState is what a sender learned of its path: a later connection to
// the same peer can start from it (SenderConfig.Resume).
type PathState struct {
	// Rate is the pacing rate the path sustained after startup, bit/s
	// (0: startup had not ended).
	Rate float64
	// MinRTT is the least round trip measured: the path without queues
	// (0: none measured).
	MinRTT time.Duration
}

// ReceiverConfig tunes a receiver: Config and what only the receiving
// end uses — the receiver chooses each transfer's scheme.
type ReceiverConfig struct {
	Config
	// Scheme is what the receiver asks for [auto], EC and Hybrid with
	// their code [scheme.DefaultCode, MDS(32,8)].
	Scheme scheme.Scheme
	// AckDelay is how long the receiver coalesces bitmap changes into one
	// ACK [RTT/8, at most 1 ms, at least 10 µs].
	AckDelay time.Duration
	// ReorderWindow is how long a chunk may arrive behind later ones
	// before the receiver calls it lost (NACKs, the EC fallback): the
	// channels' handlers (DPA threads) or a reordering link may complete
	// a message's chunks out of order [min(RTT/4, 1 ms): a host's
	// channels reorder by less, and RTT/4 of a 20 ms path cost each
	// SR-NACK repair round 5 ms]. It doubles each time the connection
	// sees reordering (a chunk NACKed arriving sooner than its repair
	// could have) and eases back (RACK's adaptive window). The
	// simulator, whose links keep order, sets 1 ns.
	ReorderWindow time.Duration
}

// setDefaults fills and validates the fields both ends use.
func (c *Config) setDefaults() error {
	if c.RTT == 0 {
		c.RTT = time.Millisecond
	}
	c.rateCap = c.Bandwidth
	if c.Bandwidth == 0 {
		c.Bandwidth = 10e9
	}
	if c.Alpha == 0 {
		c.Alpha = 2
	}
	if c.Timeout == 0 {
		c.Timeout = max(10*time.Second, 1000*c.RTT)
	}
	if c.ControlMTU == 0 {
		c.ControlMTU = 1024
	}
	switch {
	case c.RTT < 0 || c.Bandwidth < 0 || c.Alpha < 0 || c.Timeout < 0:
		return fmt.Errorf("reliability: negative timing in config: %w", ErrInvalid)
	case c.ControlMTU < 256:
		return fmt.Errorf("reliability: control MTU %d (at least 256): %w", c.ControlMTU, ErrInvalid)
	case c.ChunkSize <= 0 || c.MTU <= 0 || c.ChunkSize%c.MTU != 0:
		return fmt.Errorf("reliability: chunk size %d, MTU %d: %w", c.ChunkSize, c.MTU, ErrInvalid)
	}
	return nil
}

func (c *SenderConfig) setDefaults() error {
	if err := c.Config.setDefaults(); err != nil {
		return err
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Window < 1 || c.MaxInFlightBytes < 0 || !(c.Resume.Rate >= 0) || math.IsInf(c.Resume.Rate, 1) || c.Resume.MinRTT < 0 {
		return fmt.Errorf("reliability: window %d, %d B in flight: %w", c.Window, c.MaxInFlightBytes, ErrInvalid)
	}
	return nil
}

func (c *ReceiverConfig) setDefaults() error {
	if err := c.Config.setDefaults(); err != nil {
		return err
	}
	if c.AckDelay == 0 {
		c.AckDelay = min(time.Millisecond, max(10*time.Microsecond, c.RTT/8))
	}
	if c.ReorderWindow == 0 {
		c.ReorderWindow = min(c.RTT/4, time.Millisecond)
	}
	if c.Scheme == (scheme.Scheme{}) {
		c.Scheme.Kind = scheme.Auto
	}
	c.Scheme = c.Scheme.WithDefaultCode()
	if c.AckDelay < 0 || c.ReorderWindow < 0 {
		return fmt.Errorf("reliability: negative timing in config: %w", ErrInvalid)
	}
	if err := c.Scheme.Validate(); err != nil {
		return fmt.Errorf("reliability: %w: %w", ErrInvalid, err)
	}
	return nil
}

// DefaultWindow is SenderConfig.Window's default: transfers in flight.
const DefaultWindow = 8

// rto is the retransmission timeout RTT + α·RTT.
func (c *Config) rto() time.Duration { return c.RTT + time.Duration(c.Alpha*float64(c.RTT)) }

// injection returns how long n chunks take on the wire at Bandwidth: the
// receiver's guess (the sender paces at its own rate, see rateControl).
func (c *Config) injection(n int) time.Duration {
	return time.Duration(float64(n) * float64(c.ChunkSize) * 8 / c.Bandwidth * 1e9)
}

// Part names one of a transfer's SDR messages.
type Part uint8

// Parts.
const (
	Data Part = iota
	Parity
)

func (p Part) String() string {
	if p == Parity {
		return "parity"
	}
	return "data"
}

// ActionKind says what an Action asks of the caller.
type ActionKind uint8

// Action kinds.
const (
	// ActStart (sender): open the transfer's SDR messages (Plan.Messages
	// of them, in order) and, for coded plans, compute the parity.
	ActStart ActionKind = iota + 1
	// ActSend (sender): send chunks [First, First+Count) of Part; with
	// Packets, only those packets of chunk First (bit k: packet k of the
	// chunk; Count is 1).
	ActSend
	// ActSendImm (sender): send the zero-length immediate carriers of a
	// message shorter than the immediate's packets (none otherwise).
	ActSendImm
	// ActControl (both): send Datagram on the control channel.
	ActControl
	// ActDecode (receiver): rebuild the missing data chunks of
	// submessage Sub from the parity.
	ActDecode
	// ActComplete (both): the transfer is done; Stats describe it.
	ActComplete
	// ActFail (both): the transfer failed with Err.
	ActFail
	// ActRate (sender): the pacing rate is now Rate bits per second of
	// chunk payload; the caller sets the NIC's rate limiter to it, so
	// that the packets of a run leave as evenly as the runs do.
	ActRate
	// ActSendCoded (sender): send transmissions [First, First+Count) of a
	// coded plan's first pass, which sends submessage after submessage,
	// each its data chunks then its parity chunks (FirstPassPiece maps a
	// transmission to its chunk): one action per quantum of the pass
	// where ActSends would take two per submessage.
	ActSendCoded
)

var actionNames = []string{ActStart: "start", ActSend: "send", ActSendImm: "send-imm", ActControl: "control",
	ActDecode: "decode", ActComplete: "complete", ActFail: "fail", ActRate: "rate", ActSendCoded: "send-coded"}

func (k ActionKind) String() string {
	if int(k) < len(actionNames) && actionNames[k] != "" {
		return actionNames[k]
	}
	return fmt.Sprintf("action(%d)", uint8(k))
}

// FirstPassPiece returns where transmission t of a coded first pass over
// layout l goes — part, chunk first of it — and how many transmissions
// from t on go to consecutive chunks of that part (the rest of the
// submessage's data, or of its parity). The pass sends submessage after
// submessage, each its data chunks (ec.Layout.DataRange) then its parity
// chunks (ParityRange); t is below l.DataChunks()+l.ParityChunks().
func FirstPassPiece(l ec.Layout, t int) (part Part, first, n int) {
	// Every submessage but the last is whole, so t/(K+M) finds its own.
	per := l.Params().K + l.Params().M
	sub, w := t/per, t%per
	dFirst, k := l.DataRange(sub)
	if w < k {
		return Data, dFirst + w, k - w
	}
	pFirst, m := l.ParityRange(sub)
	return Parity, pFirst + w - k, m - (w - k)
}

// Action is one thing an engine asks its caller to do. Only the fields of
// its Kind are set.
type Action struct {
	Kind     ActionKind
	Transfer uint64
	Plan     Plan // ActStart
	// Discard (ActStart) says the transfer was canceled before it
	// started: open its messages and end them at once, sending nothing.
	Discard bool
	Part    Part   // ActSend
	First   int    // ActSend, ActSendCoded (a transmission of the pass)
	Count   int    // ActSend, ActSendCoded
	Packets uint64 // ActSend: a packet repair of chunk First
	Sub     int    // ActDecode
	// Chunks (ActDecode) are the transfer's chunk bitmaps as the engine
	// judged the submessage decodable from them; the engine no longer
	// changes them.
	Chunks *ChunkBitmaps
	// Datagram is an encoded control message (ActControl); the caller
	// owns it.
	Datagram []byte
	// Stats (ActComplete, ActFail) describe the transfer; a pointer keeps
	// the actions a first pass queues by the thousand small.
	Stats *Stats
	Err   error   // ActFail
	Rate  float64 // ActRate
}

// ChunkBitmaps are a transfer's chunk bitmaps in sdr.RecvHandle.Bitmap's
// format: bit i of word i/64 for chunk i.
type ChunkBitmaps struct {
	Data, Parity []uint64
}

// Stats describe one transfer.
type Stats struct {
	Plan Plan
	// Sender side.
	ChunksSent    int // data chunk transmissions, first pass and repairs
	Retransmitted int // data chunk transmissions after the first
	PacketsResent int // data packets sent again alone (repairs of chunks mostly there)
	ParitySent    int // parity chunk transmissions
	Probes        int // probes sent
	// SendRetries counts the sends the NIC had no room for when the
	// driver made them (sdr.ErrRetry): each waited in the Sender's
	// backlog and was tried again (the engine alone leaves it 0).
	SendRetries int
	// PacingRate is the sender's pacing rate when the transfer ended, in
	// bits per second of chunk payload (Config.Bandwidth with FixedRate).
	PacingRate float64
	// SRTT is the sender's smoothed round trip when the transfer ended
	// (0 before any sample).
	SRTT time.Duration
	// RTO is the retransmission timeout in force when the transfer ended.
	RTO time.Duration
	// FirstPass is how long the first pass (data, and parity for coded
	// plans) took to leave by the sender's injection clock, from its
	// first chunk's departure to its last's: what a model of the transfer
	// takes for injection. Short transfers leave at the connection's
	// pacing rate, below the path's (0 if the transfer ended first).
	FirstPass time.Duration
	// Receiver side.
	Decoded   int // submessages rebuilt from parity
	Fallbacks int // EC fallbacks: NACK rounds for undecodable submessages
	NACKs     int // NACK datagrams (sent by the receiver, received by the sender)
	ACKs      int // ACK datagrams
	// Start is when the sender started the transfer (ActStart) or the
	// receiver posted it; End is when it completed or failed (a Read's:
	// when its buffer was whole, after any decoding).
	Start, End time.Time
}

// Duration is End − Start.
func (s Stats) Duration() time.Duration { return s.End.Sub(s.Start) }
