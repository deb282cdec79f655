// Package simreport turns a simulator sweep (testbed/sim) into what sdr
// sim reports: the grid of points its flags describe (Jobs), one row per
// point (NewRow), the summary against the models (Summarize), sim.csv,
// sim.json and sim.md (WriteOutputs), the plots (WritePlots), the
// reproduction report (Report), and the shards of a job array (Shard,
// ShardFromSlurm, Merge).
package simreport

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/reliability/scheme"
	"github.com/sdr-rdma/sdr/testbed/sim"
)

// Grid are sdr sim's flags.
type Grid struct {
	// Sizes, Drops, Schemes and Distances are comma-separated lists as
	// sdr sim's flags take them (ParseList, ParseSize, ParseDrop,
	// ParseScheme); Distances is the distance sweep's one-way km.
	Sizes, Drops, Schemes, Distances string
	// RTT of the grid, or Distance (one-way km) instead.
	RTT      time.Duration
	Distance float64
	// Gbps is the links' rate; Alpha the timeout factor; Burst the mean
	// loss burst of Loss "ge".
	Gbps, Alpha, Burst float64
	// DistanceDrop is the distance sweep's drop rate; ControlLoss the
	// control datagrams' loss.
	DistanceDrop, ControlLoss float64
	// FocusSize and FocusDrop pick the report's comparisons.
	FocusSize string
	FocusDrop float64
	// Chunk is the chunk (and packet) size; Samples per point, and
	// LargeSamples for sizes above LargeSize.
	Chunk, Samples, LargeSamples int
	LargeSize                    string
	// Loss is "bernoulli" or "ge".
	Loss string
	// Seed seeds the sweep; Workers simulate in parallel.
	Seed    uint64
	Workers int
	// Backoff lets the engines double repeated timeouts.
	Backoff bool
}

// JobCost is a job's expected cost: samples × data chunks, plus a constant
// per sample.
func JobCost(j sim.Job) float64 { return float64(j.Samples) * (float64(j.Point.Size)/4096 + 1000) }

// PointMeta is what a row needs that the sim point does not carry.
type PointMeta struct {
	sweep      string
	scheme     scheme.Scheme
	drop       float64
	distanceKm float64
	number     int // the point's place in the whole run, from 1
}

// Number is the point's place in the whole run (Jobs' order, from 1),
// whichever shard runs it.
func (m PointMeta) Number() int { return m.number }

// Jobs builds the run's jobs from the flags.
func Jobs(g *Grid) ([]sim.Job, []PointMeta, error) {
	sizes, err := ParseList(g.Sizes, ParseSize)
	if err != nil {
		return nil, nil, fmt.Errorf("-sizes: %w", err)
	}
	drops, err := ParseList(g.Drops, ParseDrop)
	if err != nil {
		return nil, nil, fmt.Errorf("-drops: %w", err)
	}
	schemes, err := ParseList(g.Schemes, ParseScheme)
	if err != nil {
		return nil, nil, fmt.Errorf("-schemes: %w", err)
	}
	var distances []float64
	if strings.TrimSpace(g.Distances) != "" {
		if distances, err = ParseList(g.Distances, simParsePositive); err != nil {
			return nil, nil, fmt.Errorf("-distances: %w", err)
		}
	}
	large, err := ParseSize(g.LargeSize)
	if err != nil {
		return nil, nil, fmt.Errorf("-large-size: %w", err)
	}
	switch {
	case len(sizes) == 0 || len(drops) == 0 || len(schemes) == 0:
		return nil, nil, errors.New("need at least one size, drop rate and scheme")
	case g.Samples < 1 || g.LargeSamples < 0:
		return nil, nil, fmt.Errorf("-samples %d, -large-samples %d", g.Samples, g.LargeSamples)
	case !(g.Gbps > 0) || math.IsInf(g.Gbps, 0):
		return nil, nil, fmt.Errorf("-gbps %v must be positive", g.Gbps)
	case g.Distance < 0 || g.RTT <= 0 && g.Distance == 0:
		return nil, nil, fmt.Errorf("-rtt %v / -distance %v", g.RTT, g.Distance)
	case g.Workers < 1:
		return nil, nil, fmt.Errorf("-workers %d", g.Workers)
	case g.Burst < 1:
		return nil, nil, fmt.Errorf("-burst %v must be at least 1", g.Burst)
	}
	if g.Distance > 0 {
		g.RTT = 2 * link.DelayForDistance(g.Distance)
	}
	if _, err := simLossModel(g, 0.5); err != nil {
		return nil, nil, err
	}
	if _, err := ParseDrop(strconv.FormatFloat(g.ControlLoss, 'g', -1, 64)); err != nil && g.ControlLoss != 0 {
		return nil, nil, fmt.Errorf("-control-loss: %w", err)
	}
	samplesFor := func(size int64) int {
		if size > large && g.LargeSamples > 0 {
			return g.LargeSamples
		}
		return g.Samples
	}
	var jobs []sim.Job
	var meta []PointMeta
	add := func(sweep string, size int64, drop float64, rtt time.Duration, km float64, sc scheme.Scheme) error {
		l, err := simLossModel(g, drop)
		if err != nil {
			return err
		}
		p := sim.Point{Size: size, Scheme: sc, Bandwidth: g.Gbps * 1e9, RTT: rtt, ChunkSize: g.Chunk,
			Loss: l, ControlLoss: link.Bernoulli(g.ControlLoss), Alpha: g.Alpha, Backoff: g.Backoff}
		if _, err := p.WithDefaults(); err != nil {
			return err
		}
		jobs = append(jobs, sim.Job{Point: p, Samples: samplesFor(size)})
		meta = append(meta, PointMeta{sweep: sweep, scheme: sc, drop: drop, distanceKm: km, number: len(meta) + 1})
		return nil
	}
	gridKm := g.RTT.Seconds() / 2 * link.FibreSpeed
	for _, size := range sizes {
		for _, drop := range drops {
			for _, sc := range schemes {
				if err := add("grid", size, drop, g.RTT, gridKm, sc); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	for _, km := range distances {
		for _, sc := range schemes {
			if sc.Kind == scheme.Auto {
				continue // Choose is checked on the grid
			}
			if err := add("distance", slices.Max(sizes), g.DistanceDrop, 2*link.DelayForDistance(km), km, sc); err != nil {
				return nil, nil, err
			}
		}
	}
	return jobs, meta, nil
}

func simLossModel(g *Grid, drop float64) (link.Loss, error) {
	switch g.Loss {
	case "bernoulli":
		return link.Bernoulli(drop), nil
	case "ge":
		return link.GilbertElliott(drop, g.Burst), nil
	}
	return link.Loss{}, fmt.Errorf("-loss %q: want bernoulli or ge", g.Loss)
}
