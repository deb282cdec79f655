package simreport

import (
	"time"

	"github.com/sdr-rdma/sdr/testbed/sim"
)

// Row is one point of the run's output.
type Row struct {
	Sweep          string   `json:"sweep"` // "grid" or "distance"
	Scheme         string   `json:"scheme"`
	Ran            string   `json:"ran"` // the scheme simulated (Auto resolved)
	SizeBytes      int64    `json:"size_bytes"`
	Drop           float64  `json:"drop"`
	LossModel      string   `json:"loss_model"`
	RTTms          float64  `json:"rtt_ms"`
	DistanceKm     float64  `json:"distance_km"`
	Samples        int      `json:"samples"`
	MeanMs         float64  `json:"mean_ms"`
	StdErrMs       float64  `json:"stderr_ms"`
	P50Ms          float64  `json:"p50_ms"`
	P99Ms          float64  `json:"p99_ms"`
	P999Ms         float64  `json:"p999_ms"`
	LosslessMs     float64  `json:"lossless_ms"`
	Slowdown       float64  `json:"slowdown"`
	SlowdownP999   float64  `json:"slowdown_p999"`
	ModelMeanMs    *float64 `json:"model_mean_ms"`
	ModelP999Ms    *float64 `json:"model_p999_ms"`
	ModelExact     bool     `json:"model_exact"`
	ModelDeviation *float64 `json:"model_deviation"`
	ChunksLost     float64  `json:"chunks_lost"`
	Retransmitted  float64  `json:"retransmitted"`
	ParitySent     float64  `json:"parity_sent"`
	FallbackShare  float64  `json:"fallback_share"`
	DataChunks     int64    `json:"data_chunks"`
}

func simMs(d time.Duration) float64 { return float64(d) / 1e6 }

func NewRow(r *sim.Result, m PointMeta) Row {
	p := r.Point
	row := Row{Sweep: m.sweep, Scheme: m.scheme.String(), Ran: p.Scheme.String(), SizeBytes: p.Size, Drop: m.drop,
		LossModel: p.Loss.String(), RTTms: simMs(p.RTT), DistanceKm: m.distanceKm, Samples: len(r.Completions),
		MeanMs: simMs(r.Mean), StdErrMs: simMs(r.StdErr), P50Ms: simMs(r.P50), P99Ms: simMs(r.P99), P999Ms: simMs(r.P999),
		LosslessMs: simMs(r.Lossless), Slowdown: r.Slowdown(), SlowdownP999: r.SlowdownP999(),
		ChunksLost: r.ChunksLost, Retransmitted: r.Retransmitted, ParitySent: r.ParitySent, FallbackShare: r.FallbackShare,
		DataChunks: (p.Size + int64(p.ChunkSize) - 1) / int64(p.ChunkSize)}
	if r.Model != nil {
		mean, p999, dev := simMs(r.Model.Mean), simMs(r.Model.P999), r.ModelDeviation()
		row.ModelMeanMs, row.ModelP999Ms, row.ModelDeviation, row.ModelExact = &mean, &p999, &dev, r.Model.Exact
	}
	return row
}
