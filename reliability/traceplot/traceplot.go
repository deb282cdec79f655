// Package traceplot reads what a reliability trace says of each transfer
// (reliability.ReadTrace's events) and draws one transfer's timeline: the
// chunks the sender handed over against time, first pass and repairs
// marked, and beneath them the pacing rate and the round trip, as qvis
// draws a QUIC connection from its qlog.
//
// A trace holds one connection: transfer numbers are the connection's.
package traceplot

import (
	"cmp"
	"fmt"
	"image/color"
	"math/bits"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/sdr-rdma/sdr/internal/plots"
	"github.com/sdr-rdma/sdr/reliability"
)

// Transfer is what a trace says of one transfer.
type Transfer struct {
	Number uint64 `json:"transfer"`
	Plan   string `json:"plan"`
	Bytes  int    `json:"bytes"`
	// Start and End are the sender's start and end of the transfer (the
	// receiver's where the trace has no sender side).
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Ended says the trace saw the transfer end; Err is why it failed.
	Ended bool   `json:"ended"`
	Err   string `json:"err,omitempty"`
	// What the sender handed over: data chunks in the first pass, coded
	// first-pass transmissions (data and parity), chunks sent again
	// whole and packets sent again alone.
	FirstPass int `json:"first_pass"`
	Coded     int `json:"coded"`
	Repaired  int `json:"repaired_chunks"`
	Packets   int `json:"repaired_packets"`
	// Timeouts counts the retransmission timers that fired, NACKs the
	// NACKs and PNACKs the receiver sent, Decoded the submessages it
	// rebuilt from parity, Backlog the sends the NIC refused.
	Timeouts int `json:"timeouts"`
	NACKs    int `json:"nacks"`
	Decoded  int `json:"decoded"`
	Backlog  int `json:"backlog"`
}

// Duration returns how long the transfer took (0 if it never ended).
func (t Transfer) Duration() time.Duration {
	if !t.Ended {
		return 0
	}
	return t.End.Sub(t.Start)
}

// Transfers sums up every transfer the trace started, in number order.
func Transfers(events []reliability.TraceEvent) []Transfer {
	byNumber := map[uint64]*Transfer{}
	get := func(e *reliability.TraceEvent) *Transfer {
		t := byNumber[e.Transfer]
		if t == nil && e.Kind == reliability.TraceStart {
			t = &Transfer{Number: e.Transfer, Plan: e.Plan, Bytes: e.Bytes, Start: e.Time}
			byNumber[e.Transfer] = t
		}
		return t
	}
	for i := range events {
		e := &events[i]
		t := get(e)
		if t == nil {
			continue
		}
		sender := e.Side == "sender"
		switch e.Kind {
		case reliability.TraceStart:
			if sender {
				t.Start, t.Plan = e.Time, e.Plan // the sender's plan is the one it sent by
			}
		case reliability.TraceComplete, reliability.TraceFail:
			if sender || !t.Ended {
				t.End, t.Ended, t.Err = e.Time, true, e.Err
			}
		case reliability.TraceSend:
			switch {
			case e.Part != "data":
			case e.Packets != 0:
				t.Packets += bits.OnesCount64(e.Packets)
			case e.Repair:
				t.Repaired += e.Count
			default:
				t.FirstPass += e.Count
			}
		case reliability.TraceSendCoded:
			t.Coded += e.Count
		case reliability.TraceTimeout:
			t.Timeouts++
		case reliability.TraceControlOut:
			if e.Control == "nack" || e.Control == "pnack" {
				t.NACKs++
			}
		case reliability.TraceDecode:
			t.Decoded++
		case reliability.TraceBacklog:
			t.Backlog++
		}
	}
	out := make([]Transfer, 0, len(byNumber))
	for _, t := range byNumber {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b Transfer) int { return cmp.Compare(a.Number, b.Number) })
	return out
}

// Series colours: first pass grey, coded first pass blue, repairs red,
// packet repairs orange.
var (
	firstPassColor = color.RGBA{R: 120, G: 120, B: 120, A: 255}
	codedColor     = color.RGBA{R: 40, G: 90, B: 200, A: 255}
	repairColor    = color.RGBA{R: 210, G: 30, B: 30, A: 255}
	packetColor    = color.RGBA{R: 240, G: 140, B: 0, A: 255}
)

// Draw writes transfer number's timeline as dir/name.png and
// dir/name.svg: the chunks handed over against milliseconds since its
// start (the first pass by chunk, a coded first pass by transmission,
// repairs marked, the sender's timeouts as vertical marks), then the
// pacing rate and the round trip (SRTT and RTO) over the same span. It
// returns the transfer's summary.
func Draw(events []reliability.TraceEvent, number uint64, dir, name string) (Transfer, error) {
	var tr Transfer
	found := false
	for _, t := range Transfers(events) {
		if t.Number == number {
			tr, found = t, true
		}
	}
	if !found {
		return tr, fmt.Errorf("traceplot: transfer %d: not in the trace", number)
	}
	end := tr.End
	if !tr.Ended {
		end = events[len(events)-1].Time
	}
	ms := func(at time.Time) float64 { return float64(at.Sub(tr.Start)) / 1e6 }
	var first, coded, repairs, packets, timeouts plotter.XYs
	// The rate and round trip in force when the transfer started (those
	// traced at its start included), then their changes.
	rate0, srtt0, rto0 := stateAt(events, tr.Start)
	rate := plotter.XYs{{Y: rate0 / 1e9}}
	var srtt, rto plotter.XYs
	if srtt0 > 0 {
		srtt, rto = plotter.XYs{{Y: float64(srtt0) / 1e6}}, plotter.XYs{{Y: float64(rto0) / 1e6}}
	}
	for _, e := range events {
		if e.Side != "sender" || e.Time.Before(tr.Start) || e.Time.After(end) {
			continue
		}
		x := ms(e.Time)
		switch e.Kind {
		case reliability.TraceRate:
			if x > 0 {
				rate = append(rate, plotter.XY{X: x, Y: e.Rate / 1e9})
			}
			continue
		case reliability.TraceRTT:
			if x > 0 {
				srtt = append(srtt, plotter.XY{X: x, Y: float64(e.SRTT) / 1e6})
				rto = append(rto, plotter.XY{X: x, Y: float64(e.RTO) / 1e6})
			}
			continue
		}
		if e.Transfer != number {
			continue
		}
		switch e.Kind {
		case reliability.TraceSend:
			series := &first
			switch {
			case e.Part != "data":
				series = &coded // parity of a hybrid or coded repair
			case e.Packets != 0:
				series = &packets
			case e.Repair:
				series = &repairs
			}
			for c := e.First; c < e.First+e.Count; c++ {
				*series = append(*series, plotter.XY{X: x, Y: float64(c)})
			}
		case reliability.TraceSendCoded:
			for c := e.First; c < e.First+e.Count; c++ {
				coded = append(coded, plotter.XY{X: x, Y: float64(c)})
			}
		case reliability.TraceTimeout:
			timeouts = append(timeouts, plotter.XY{X: x, Y: float64(e.First)})
		}
	}
	span := ms(end)
	rate = append(rate, plotter.XY{X: span, Y: rate[len(rate)-1].Y})

	chunks := plot.New()
	chunks.Title.Text = fmt.Sprintf("transfer %d: %s, %d B, %v", tr.Number, tr.Plan, tr.Bytes, tr.Duration().Round(time.Microsecond))
	chunks.Y.Label.Text = "chunk (coded: transmission)"
	for _, s := range []struct {
		xys   plotter.XYs
		label string
		color color.Color
		shape draw.GlyphDrawer
	}{
		{first, "first pass", firstPassColor, draw.CircleGlyph{}},
		{coded, "coded first pass, parity", codedColor, draw.CircleGlyph{}},
		{repairs, "chunk repaired", repairColor, draw.CrossGlyph{}},
		{packets, "packets repaired", packetColor, draw.TriangleGlyph{}},
		{timeouts, "timeout", color.Black, draw.BoxGlyph{}},
	} {
		if len(s.xys) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(s.xys)
		if err != nil {
			return tr, err
		}
		sc.GlyphStyle.Color, sc.GlyphStyle.Shape, sc.GlyphStyle.Radius = s.color, s.shape, vg.Points(1.2)
		chunks.Add(sc)
		chunks.Legend.Add(s.label, sc)
	}
	chunks.Legend.Top, chunks.Legend.Left = true, true

	rates := plot.New()
	rates.Y.Label.Text = "pacing rate (Gbit/s)"
	if l, err := plotter.NewLine(stairs(rate)); err == nil {
		rates.Add(l)
	}

	rtts := plot.New()
	rtts.X.Label.Text = "time since the transfer started (ms)"
	rtts.Y.Label.Text = "round trip (ms)"
	for _, s := range []struct {
		xys   plotter.XYs
		label string
		dash  bool
	}{{srtt, "SRTT", false}, {rto, "RTO", true}} {
		if len(s.xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(stairs(append(s.xys, plotter.XY{X: span, Y: s.xys[len(s.xys)-1].Y})))
		if err != nil {
			return tr, err
		}
		if s.dash {
			l.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
		}
		rtts.Add(l)
		rtts.Legend.Add(s.label, l)
	}
	rtts.Legend.Top = true
	for _, p := range []*plot.Plot{chunks, rates, rtts} {
		p.X.Min, p.X.Max = 0, max(span, 1e-3)
	}
	return tr, plots.SaveStack([]*plot.Plot{chunks, rates, rtts}, dir, name)
}

// stateAt returns the sender's pacing rate, SRTT and RTO in force at t
// (zeros: none traced yet).
func stateAt(events []reliability.TraceEvent, t time.Time) (rate float64, srtt, rto time.Duration) {
	for _, e := range events {
		if e.Side != "sender" || e.Time.After(t) {
			continue
		}
		switch e.Kind {
		case reliability.TraceRate:
			rate = e.Rate
		case reliability.TraceRTT:
			srtt, rto = e.SRTT, e.RTO
		}
	}
	return rate, srtt, rto
}

// stairs turns samples into a step function: each value holds until the
// next sample.
func stairs(xys plotter.XYs) plotter.XYs {
	out := make(plotter.XYs, 0, 2*len(xys))
	for i, p := range xys {
		if i > 0 {
			out = append(out, plotter.XY{X: p.X, Y: xys[i-1].Y})
		}
		out = append(out, p)
	}
	return out
}
