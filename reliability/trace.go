package reliability

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"strings"
	"sync"
	"time"

	"github.com/sdr-rdma/sdr/reliability/control"
)

// Tracer receives an engine's decisions as they are made, one TraceEvent
// each (Config.Trace): chunks and parity handed over (first pass or
// repair), control datagrams in and out, timeouts, rate and round-trip
// changes, transfers starting and ending, and the sends the NIC refused.
// It is called on the engine's goroutine (the driver's for backlog
// events) and must not block for long. An engine without a tracer pays
// one nil check per decision.
type Tracer interface {
	Trace(e TraceEvent)
}

// TraceKind says what a TraceEvent records.
type TraceKind string

// Trace event kinds.
const (
	// TraceStart: a transfer started (sender) or was posted (receiver);
	// Bytes and Plan describe it.
	TraceStart TraceKind = "start"
	// TraceSend: chunks [First, First+Count) of Part handed over to the
	// NIC (with Packets, only those packets of chunk First); Repair says
	// the run was sent again rather than in the first pass.
	TraceSend TraceKind = "send"
	// TraceSendCoded: transmissions [First, First+Count) of a coded
	// first pass (FirstPassPiece maps them to chunks).
	TraceSendCoded TraceKind = "send-coded"
	// TraceControlOut and TraceControlIn: a control datagram sent or
	// received; Control names its type ("ack", "nack", "pnack", "cts",
	// "probe", "ping", "pong", "fin", "close", "abort"), Cumulative is an ACK's
	// cumulative chunk or a PROBE's first, Count an ACK's chunks held
	// in its bitmap, a NACK's ranges or a PNACK's chunks.
	TraceControlOut TraceKind = "ctl-out"
	TraceControlIn  TraceKind = "ctl-in"
	// TraceTimeout: a retransmission timer fired and resent Count chunks
	// from First.
	TraceTimeout TraceKind = "timeout"
	// TraceRate: the pacing rate changed to Rate (bits/s of payload);
	// Reason says which rule of the rate control moved it, Delivered the
	// round's delivery sample it saw (bits/s).
	TraceRate TraceKind = "rate"
	// TraceRTT: the round-trip estimate changed: SRTT and RTO.
	TraceRTT TraceKind = "rtt"
	// TraceDecode: the receiver rebuilds submessage First from parity.
	TraceDecode TraceKind = "decode"
	// TraceComplete and TraceFail: a transfer ended (Err says why it
	// failed).
	TraceComplete TraceKind = "complete"
	TraceFail     TraceKind = "fail"
	// TraceBacklog: the NIC had no room for Count chunks of a send (the
	// driver keeps them and tries again).
	TraceBacklog TraceKind = "backlog"
)

// TraceEvent is one decision. Only the fields of its Kind are set.
type TraceEvent struct {
	Time       time.Time     `json:"time"`
	Side       string        `json:"side"` // "sender" or "receiver"
	Kind       TraceKind     `json:"kind"`
	Transfer   uint64        `json:"transfer"`
	Part       string        `json:"part,omitempty"` // "data" or "parity"
	First      int           `json:"first,omitempty"`
	Count      int           `json:"count,omitempty"`
	Packets    uint64        `json:"packets,omitempty"`
	Repair     bool          `json:"repair,omitempty"`
	Control    string        `json:"control,omitempty"`
	Cumulative uint32        `json:"cumulative,omitempty"`
	Rate       float64       `json:"rate,omitempty"`
	Delivered  float64       `json:"delivered,omitempty"`
	Reason     string        `json:"reason,omitempty"`
	SRTT       time.Duration `json:"srtt,omitempty"`
	RTO        time.Duration `json:"rto,omitempty"`
	Bytes      int           `json:"bytes,omitempty"`
	Plan       string        `json:"plan,omitempty"`
	Err        string        `json:"err,omitempty"`
}

// The sides of TraceEvent.Side.
const (
	TraceSender   = "sender"
	TraceReceiver = "receiver"
)

// controlEvent describes control message m going out or coming in.
func controlEvent(at time.Time, side string, kind TraceKind, m *control.Message) TraceEvent {
	e := TraceEvent{Time: at, Side: side, Kind: kind, Transfer: m.Transfer, Control: strings.ToLower(m.Type.String())}
	switch m.Type {
	case control.ACK:
		e.Cumulative = m.Cumulative
		for _, w := range m.Bits {
			e.Count += bits.OnesCount64(w)
		}
	case control.NACK:
		e.Count = len(m.Ranges)
	case control.PacketNACK:
		e.Count = len(m.Packets)
	case control.Probe:
		e.Cumulative = m.From
	}
	return e
}

// JSONTracer writes every event as one JSON object per line (JSON Lines),
// the format `sdr trace` draws. Safe for concurrent use: a connection's
// two engines, or several connections, may share one. Close flushes it.
type JSONTracer struct {
	mu  sync.Mutex
	w   *bufio.Writer
	enc *json.Encoder
	err error
}

// NewJSONTracer returns a tracer writing to w.
func NewJSONTracer(w io.Writer) *JSONTracer {
	bw := bufio.NewWriterSize(w, 64<<10)
	return &JSONTracer{w: bw, enc: json.NewEncoder(bw)}
}

// Trace writes e (Tracer). The first write error is kept for Close.
func (t *JSONTracer) Trace(e TraceEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = t.enc.Encode(e)
	}
}

// Close flushes what is buffered and returns the first error.
func (t *JSONTracer) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = t.w.Flush()
	}
	return t.err
}

// ReadTrace decodes a JSON Lines trace.
func ReadTrace(r io.Reader) ([]TraceEvent, error) {
	var events []TraceEvent
	dec := json.NewDecoder(r)
	for {
		var e TraceEvent
		err := dec.Decode(&e)
		if err == io.EOF {
			return events, nil
		}
		if err != nil {
			return events, fmt.Errorf("reliability: trace event %d: %w", len(events)+1, err)
		}
		events = append(events, e)
	}
}
