package model

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/reliability/ec"
	"github.com/sdr-rdma/sdr/reliability/scheme"
)

func TestLinkValidate(t *testing.T) {
	good := paperLink(1e-3)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Link){
		"zero bandwidth":     func(l *Link) { l.Bandwidth = 0 },
		"NaN bandwidth":      func(l *Link) { l.Bandwidth = math.NaN() },
		"infinite bandwidth": func(l *Link) { l.Bandwidth = math.Inf(1) },
		"zero RTT":           func(l *Link) { l.RTT = 0 },
		"negative loss":      func(l *Link) { l.Loss = -1e-9 },
		"loss above max":     func(l *Link) { l.Loss = MaxLoss + 1e-9 },
		"NaN loss":           func(l *Link) { l.Loss = math.NaN() },
		"zero chunk":         func(l *Link) { l.ChunkSize = 0 },
	} {
		l := good
		mutate(&l)
		if err := l.Validate(); !errors.Is(err, ErrInvalidLink) {
			t.Errorf("%s: %v, want ErrInvalidLink", name, err)
		}
		if _, err := SR(l, 4096, DefaultAlpha, false); !errors.Is(err, ErrInvalidLink) {
			t.Errorf("SR with %s: %v, want ErrInvalidLink", name, err)
		}
	}
}

func TestArgumentErrors(t *testing.T) {
	l := paperLink(1e-3)
	mds := ec.Params{Kind: ec.MDS, K: 32, M: 8}
	for name, err := range map[string]error{
		"SR size 0":         second(SR(l, 0, DefaultAlpha, false)),
		"SR size too big":   second(SR(Link{Bandwidth: 1e9, RTT: time.Millisecond, ChunkSize: 1}, MaxChunks+1, DefaultAlpha, false)),
		"SR negative α":     second(SR(l, 4096, -1, false)),
		"SR NaN α":          second(SR(l, 4096, math.NaN(), true)),
		"SR quantile 1":     second(SRQuantile(l, 4096, DefaultAlpha, false, 1)),
		"EC quantile 0":     second(ECQuantile(l, 4096, mds, DefaultAlpha, 0)),
		"EC bad code":       second(EC(l, 4096, ec.Params{Kind: ec.XOR, K: 4, M: 8}, DefaultAlpha)),
		"EC infinite α":     second(EC(l, 4096, mds, math.Inf(1))),
		"Predict scheme":    second(Predict(l, 4096, Choice{Scheme: scheme.Scheme{Kind: 9}})),
		"Quantile scheme":   second(Quantile(l, 4096, Choice{Scheme: scheme.Scheme{Kind: 9}}, 0.5)),
		"Ring one rank":     second(RingAllreduce(l, 1<<20, 1, Choice{Scheme: srRTO, Alpha: 2})),
		"Ring zero bytes":   second(RingAllreduce(l, 0, 4, Choice{Scheme: srRTO, Alpha: 2})),
		"ChunkLoss p=1":     second(ChunkLoss(1, 4)),
		"ChunkLoss packets": second(ChunkLoss(0.1, 0)),
		"Lossless size":     second(Lossless(l, -5)),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestChunkLoss(t *testing.T) {
	got, err := ChunkLoss(1e-9, 16)
	if err != nil {
		t.Fatal(err)
	}
	if want := 16e-9 - 120e-18; math.Abs(got-want) > 1e-15*want {
		t.Errorf("ChunkLoss(1e-9, 16) = %.17g, want %.17g", got, want)
	}
	if got, _ := ChunkLoss(0.5, 2); got != 0.75 {
		t.Errorf("ChunkLoss(0.5, 2) = %v, want 0.75", got)
	}
	if got, _ := ChunkLoss(0.3, 1); got != 0.3 {
		t.Errorf("ChunkLoss(0.3, 1) = %v, want 0.3", got)
	}
}

func TestChoiceNames(t *testing.T) {
	if got := (Choice{Scheme: codedScheme(scheme.EC, ec.XOR, 32, 8), Alpha: 2}).String(); got != "ec-xor(32,8,α=2)" {
		t.Errorf("Choice.String = %q", got)
	}
	if got := (Choice{Scheme: srNACK, Alpha: 1.5}).String(); got != "sr-nack(α=1.5)" {
		t.Errorf("Choice.String = %q", got)
	}
}

// The ring bounds are the step count times the step's mean (lower) and times
// a high quantile of the step (upper), and the upper bound lies above the
// lower one.
func TestRingAllreduce(t *testing.T) {
	l := paperLink(1e-3)
	c := Choice{Scheme: srNACK, Alpha: DefaultAlpha}
	r, err := RingAllreduce(l, 1<<30, 8, c)
	if err != nil {
		t.Fatal(err)
	}
	step, _ := Predict(l, 1<<30/8, c)
	if r.Steps != 14 || r.Step != step || r.MeanLower != seconds(14*step.Mean.Seconds()) {
		t.Errorf("ring: %+v, step %+v", r, step)
	}
	q, _ := Quantile(l, 1<<30/8, c, 1-0.001/(14*8))
	if r.P999Upper != seconds(14*q.Seconds()) || r.P999Upper <= r.MeanLower {
		t.Errorf("ring p99.9 upper %v, want 14 × %v above the mean bound %v", r.P999Upper, q, r.MeanLower)
	}
}
