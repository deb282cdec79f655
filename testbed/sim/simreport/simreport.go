// Package simreport turns a simulator sweep (testbed/sim) into what sdr
// sim reports: the grid of points its flags describe (Jobs), one row per
// point (NewRow), the summary against the models (Summarize), sim.csv,
// sim.json and sim.md (WriteOutputs), the plots (WritePlots), the
// reproduction report (Report), and the shards of a job array (Shard,
// ShardFromSlurm, LoadShards).
package simreport

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/sdr-rdma/sdr/internal/plots"
	"github.com/sdr-rdma/sdr/internal/units"
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

// File is sim.json's shape (and -json's).
type File struct {
	Summary Summary `json:"summary"`
	Points  []Row   `json:"points"`
}

// Summary is what the run concludes.
type Summary struct {
	Command     string        `json:"command"`
	Wall        time.Duration `json:"wall_ns"`
	Workers     int           `json:"workers"`
	Points      int           `json:"points"`
	Samples     int           `json:"samples"`
	WorstDev    float64       `json:"worst_model_deviation"`
	WorstDevAt  string        `json:"worst_model_deviation_at"`
	ExactPoints int           `json:"exact_points"`
	// The same over the exact points whose samples resolve a 5 %
	// difference (simResolved).
	WorstResolvedDev   float64 `json:"worst_resolved_model_deviation"`
	WorstResolvedDevAt string  `json:"worst_resolved_model_deviation_at"`
	ResolvedPoints     int     `json:"resolved_points"`
	ChooseWorst        float64 `json:"choose_worst_over_best"`
	ChooseAt           string  `json:"choose_worst_at"`
	ChoosePoints       int     `json:"choose_points"`
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
}

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
		meta = append(meta, PointMeta{sweep: sweep, scheme: sc, drop: drop, distanceKm: km})
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

func ParseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	depth, start := 0, 0
	for i := 0; i <= len(s); i++ { // split at commas outside parentheses
		if i < len(s) {
			switch s[i] {
			case '(':
				depth++
				continue
			case ')':
				depth--
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		if item := strings.TrimSpace(s[start:i]); item != "" {
			v, err := parse(item)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		start = i + 1
	}
	return out, nil
}

// ParseSize parses a positive byte count up to 1 TiB (internal/units).
func ParseSize(s string) (int64, error) {
	n, err := units.ParseBytes(s)
	if err != nil || n <= 0 || n > 1<<40 {
		return 0, fmt.Errorf("size %q: want a positive byte count up to 1 TiB, e.g. 128KiB", s)
	}
	return n, nil
}

func ParseDrop(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= 0 && v < 1) {
		return 0, fmt.Errorf("drop rate %q: want a number in [0, 1)", s)
	}
	return v, nil
}

func simParsePositive(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q: want a positive number", s)
	}
	return v, nil
}

// ParseScheme parses a scheme as every command does (scheme.Parse); ec
// and hybrid without a code run scheme.DefaultCode, MDS(32,8).
func ParseScheme(s string) (scheme.Scheme, error) {
	sc, err := scheme.Parse(s)
	return sc.WithDefaultCode(), err
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

// simPaperFour are the labels of the paper's comparison.
var simPaperFour = []string{"sr-rto", "sr-nack", "ec-xor(32,8)", "ec-mds(32,8)"}

// Summarize finds the worst model deviation at exact points and the worst
// Choose point (auto against the best of the paper's four).
func Summarize(rows []Row, alpha float64) Summary {
	var s Summary
	for _, r := range rows {
		if r.ModelDeviation != nil && r.ModelExact {
			s.ExactPoints++
			at := fmt.Sprintf("%s, standard error %.2f %%", simPointName(r), 100*r.StdErrMs/r.MeanMs)
			if *r.ModelDeviation >= s.WorstDev {
				s.WorstDev, s.WorstDevAt = *r.ModelDeviation, at
			}
			if simResolved(r, alpha) {
				s.ResolvedPoints++
				if *r.ModelDeviation >= s.WorstResolvedDev {
					s.WorstResolvedDev, s.WorstResolvedDevAt = *r.ModelDeviation, at
				}
			}
		}
	}
	for _, g := range simGroupGrid(rows) {
		auto, ok := g["auto"]
		if !ok {
			continue
		}
		best, bestOK := simBestOf(g, simPaperFour)
		if !bestOK {
			continue
		}
		s.ChoosePoints++
		if over := auto.MeanMs/best.MeanMs - 1; over > s.ChooseWorst || s.ChooseAt == "" {
			s.ChooseWorst = over
			s.ChooseAt = fmt.Sprintf("%s at %g: auto ran %s, %.3f ms; best %s, %.3f ms",
				units.FormatBytes(auto.SizeBytes), auto.Drop, auto.Ran, auto.MeanMs, best.Scheme, best.MeanMs)
		}
	}
	return s
}

// simResolved reports whether a row's samples resolve a 5 % difference
// from the model: a standard error of at most 1 % of the mean, and either
// at least 30 samples expected to see a loss or losses too rare to move
// the mean by 1 % (a repair round costs about an RTO). A rare-loss point
// whose samples saw no loss has a standard error of 0 and is not
// resolved.
func simResolved(r Row, alpha float64) bool {
	pAny := -math.Expm1((float64(r.DataChunks) + r.ParitySent) * math.Log1p(-r.Drop))
	rto := (1 + alpha) * r.RTTms
	return r.StdErrMs <= 0.01*r.MeanMs && (float64(r.Samples)*pAny >= 30 || pAny*rto <= 0.01*r.MeanMs)
}

// simGridKey identifies a grid point across schemes.
type simGridKey struct {
	size int64
	drop float64
}

// simGroupGrid groups the grid's rows by (size, drop), then scheme label.
func simGroupGrid(rows []Row) map[simGridKey]map[string]Row {
	out := map[simGridKey]map[string]Row{}
	for _, r := range rows {
		if r.Sweep != "grid" {
			continue
		}
		k := simGridKey{r.SizeBytes, r.Drop}
		if out[k] == nil {
			out[k] = map[string]Row{}
		}
		out[k][r.Scheme] = r
	}
	return out
}

// simBestOf returns the row with the smallest mean among labels present.
func simBestOf(g map[string]Row, labels []string) (Row, bool) {
	var best Row
	found := false
	for _, l := range labels {
		if r, ok := g[l]; ok && (!found || r.MeanMs < best.MeanMs) {
			best, found = r, true
		}
	}
	return best, found && len(labels) > 0
}

func simPointName(r Row) string {
	if r.Sweep == "distance" {
		return fmt.Sprintf("%s %s at %g over %g km", r.Scheme, units.FormatBytes(r.SizeBytes), r.Drop, r.DistanceKm)
	}
	return fmt.Sprintf("%s %s at %g", r.Scheme, units.FormatBytes(r.SizeBytes), r.Drop)
}

func simOptF(v *float64, format string) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf(format, *v)
}

// Markdown renders the summary and a table of every point.
func Markdown(rows []Row, s Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# sdr sim\n\n`%s`: %d points, %d samples, %v on %d workers.\n\n", s.Command, s.Points, s.Samples,
		s.Wall.Round(time.Millisecond), s.Workers)
	fmt.Fprintf(&b, "- Worst |sim − model| / model over %d points where the model is exact: %.2f %% (%s).\n",
		s.ExactPoints, 100*s.WorstDev, s.WorstDevAt)
	fmt.Fprintf(&b, "- The same over the %d of them whose samples resolve 5 %% (standard error ≤ 1 %%, enough lossy samples): %.2f %% (%s).\n",
		s.ResolvedPoints, 100*s.WorstResolvedDev, s.WorstResolvedDevAt)
	if s.ChoosePoints > 0 {
		fmt.Fprintf(&b, "- Choose (auto) against the best of the paper's four over %d grid points: worst %+.2f %% (%s).\n",
			s.ChoosePoints, 100*s.ChooseWorst, s.ChooseAt)
	}
	b.WriteString("\n| sweep | size | drop | RTT ms | scheme | ran | samples | mean ms | ± | p50 ms | p99 ms | p99.9 ms | slowdown | slowdown p99.9 | model mean ms | model p99.9 ms | exact | dev % |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		dev := "–"
		if r.ModelDeviation != nil {
			dev = fmt.Sprintf("%.2f", 100**r.ModelDeviation)
		}
		fmt.Fprintf(&b, "| %s | %s | %g | %.3g | %s | %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %s | %s | %v | %s |\n",
			r.Sweep, units.FormatBytes(r.SizeBytes), r.Drop, r.RTTms, r.Scheme, r.Ran, r.Samples, r.MeanMs, r.StdErrMs, r.P50Ms, r.P99Ms,
			r.P999Ms, r.Slowdown, r.SlowdownP999, simOptF(r.ModelMeanMs, "%.3f"), simOptF(r.ModelP999Ms, "%.3f"), r.ModelExact, dev)
	}
	return b.String()
}

// WriteOutputs writes sim.csv, sim.json and sim.md into dir.
func WriteOutputs(dir string, rows []Row, s Summary, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(File{s, rows}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sim.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sim.md"), []byte(md), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	w := csv.NewWriter(&b)
	_ = w.Write([]string{"sweep", "scheme", "ran", "size_bytes", "drop", "loss_model", "rtt_ms", "distance_km", "samples",
		"mean_ms", "stderr_ms", "p50_ms", "p99_ms", "p999_ms", "lossless_ms", "slowdown", "slowdown_p999",
		"model_mean_ms", "model_p999_ms", "model_exact", "model_deviation", "chunks_lost", "retransmitted", "parity_sent", "fallback_share"})
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', 8, 64) }
	opt := func(v *float64) string {
		if v == nil {
			return ""
		}
		return g(*v)
	}
	for _, r := range rows {
		_ = w.Write([]string{r.Sweep, r.Scheme, r.Ran, strconv.FormatInt(r.SizeBytes, 10), g(r.Drop), r.LossModel, g(r.RTTms),
			g(r.DistanceKm), strconv.Itoa(r.Samples), g(r.MeanMs), g(r.StdErrMs), g(r.P50Ms), g(r.P99Ms), g(r.P999Ms),
			g(r.LosslessMs), g(r.Slowdown), g(r.SlowdownP999), opt(r.ModelMeanMs), opt(r.ModelP999Ms),
			strconv.FormatBool(r.ModelExact), opt(r.ModelDeviation), g(r.ChunksLost), g(r.Retransmitted), g(r.ParitySent),
			g(r.FallbackShare)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sim.csv"), []byte(b.String()), 0o644)
}

// Plots names the plots written (base names without extension); empty
// when the run lacks the data for one.
type Plots struct {
	dropMean, dropP999, size, distance, heatmap string
}

// WritePlots draws the report's plots as PNG and SVG into dir.
func WritePlots(dir string, rows []Row, g *Grid) (Plots, error) {
	var out Plots
	focusSize, err := ParseSize(g.FocusSize)
	if err != nil {
		return out, fmt.Errorf("-focus-size: %w", err)
	}
	schemes := simSchemeOrder(rows)
	series := func(sel func(Row) bool, x func(Row) float64, y func(Row) float64) map[string]plotter.XYs {
		m := map[string]plotter.XYs{}
		for _, r := range rows {
			if sel(r) && r.Scheme != "auto" {
				m[r.Scheme] = append(m[r.Scheme], plotter.XY{X: x(r), Y: y(r)})
			}
		}
		return m
	}
	type spec struct {
		name, title, xLabel string
		sel                 func(Row) bool
		x                   func(Row) float64
		label               func(float64) string
		p999Too, onlyP999   bool
		logX                bool
		dst                 *string
	}
	grid := func(r Row) bool { return r.Sweep == "grid" }
	specs := []spec{
		{"slowdown_vs_drop_mean", fmt.Sprintf("Mean slowdown vs drop rate, %s", units.FormatBytes(focusSize)), "drop rate",
			func(r Row) bool { return grid(r) && r.SizeBytes == focusSize && r.Drop > 0 },
			func(r Row) float64 { return r.Drop }, DropLabel, false, false, true, &out.dropMean},
		{"slowdown_vs_drop_p999", fmt.Sprintf("p99.9 slowdown vs drop rate, %s", units.FormatBytes(focusSize)), "drop rate",
			func(r Row) bool { return grid(r) && r.SizeBytes == focusSize && r.Drop > 0 },
			func(r Row) float64 { return r.Drop }, DropLabel, false, true, true, &out.dropP999},
		{"slowdown_vs_size", fmt.Sprintf("Slowdown vs message size at drop %g (solid mean, dashed p99.9)", g.FocusDrop), "message size (bytes)",
			func(r Row) bool { return grid(r) && r.Drop == g.FocusDrop },
			func(r Row) float64 { return float64(r.SizeBytes) }, func(x float64) string { return units.FormatBytes(int64(x)) },
			true, false, true, &out.size},
		{"slowdown_vs_distance", "Slowdown vs one-way distance (solid mean, dashed p99.9)", "one-way distance (km)",
			func(r Row) bool { return r.Sweep == "distance" },
			func(r Row) float64 { return r.DistanceKm }, DropLabel, true, false, true, &out.distance},
	}
	for _, sp := range specs {
		mean := series(sp.sel, sp.x, func(r Row) float64 { return r.Slowdown })
		if len(mean) == 0 {
			continue
		}
		p999 := series(sp.sel, sp.x, func(r Row) float64 { return r.SlowdownP999 })
		p := plot.New()
		p.Title.Text = sp.title
		p.X.Label.Text = sp.xLabel
		p.Y.Label.Text = "slowdown vs lossless"
		if sp.onlyP999 {
			p.Y.Label.Text = "p99.9 slowdown vs lossless"
		}
		if sp.logX {
			p.X.Scale = plot.LogScale{}
		}
		// Ticks at the points' own x values, labelled as the tables do.
		var ticks []plot.Tick
		for _, xys := range mean {
			for _, xy := range xys {
				if !slices.ContainsFunc(ticks, func(t plot.Tick) bool { return t.Value == xy.X }) {
					ticks = append(ticks, plot.Tick{Value: xy.X, Label: sp.label(xy.X)})
				}
			}
		}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.Legend.Top = true
		p.Legend.Left = true
		for i, name := range schemes {
			xys := mean[name]
			if sp.onlyP999 {
				xys = p999[name]
			}
			if len(xys) == 0 {
				continue
			}
			l, s, err := plotter.NewLinePoints(xys)
			if err != nil {
				return out, err
			}
			l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
			s.Shape = plotutil.Shape(i)
			p.Add(l, s)
			p.Legend.Add(name, l, s)
			if sp.p999Too {
				d, err := plotter.NewLine(p999[name])
				if err != nil {
					return out, err
				}
				d.Color, d.Dashes = plotutil.Color(i), []vg.Length{vg.Points(4), vg.Points(3)}
				p.Add(d)
			}
		}
		if err := plots.Save(p, dir, sp.name); err != nil {
			return out, err
		}
		*sp.dst = sp.name
	}
	if ok, err := simHeatmap(dir, rows); err != nil {
		return out, err
	} else if ok {
		out.heatmap = "speedup_heatmap"
	}
	return out, nil
}

// simSchemeOrder lists the schemes of the rows in first-seen order.
func simSchemeOrder(rows []Row) []string {
	var out []string
	for _, r := range rows {
		if !slices.Contains(out, r.Scheme) && r.Scheme != "auto" {
			out = append(out, r.Scheme)
		}
	}
	return out
}

// simSpeedupGrid is the EC/SR speedup over size × drop rate: best SR mean over
// best EC mean (> 1: EC finishes first).
type simSpeedupGrid struct {
	sizes []int64
	drops []float64
	z     [][]float64 // [drop][size]
}

func (g *simSpeedupGrid) Dims() (c, r int)   { return len(g.sizes), len(g.drops) }
func (g *simSpeedupGrid) Z(c, r int) float64 { return math.Log2(g.z[r][c]) }
func (g *simSpeedupGrid) X(c int) float64    { return float64(c) }
func (g *simSpeedupGrid) Y(r int) float64    { return float64(r) }

// newSimSpeedupGrid builds the speedup grid from the rows; ok is false when
// the run lacks SR or EC schemes.
func newSimSpeedupGrid(rows []Row) (*simSpeedupGrid, bool) {
	groups := simGroupGrid(rows)
	g := &simSpeedupGrid{}
	for k := range groups {
		if !slices.Contains(g.sizes, k.size) {
			g.sizes = append(g.sizes, k.size)
		}
		if !slices.Contains(g.drops, k.drop) && k.drop > 0 {
			g.drops = append(g.drops, k.drop)
		}
	}
	slices.Sort(g.sizes)
	slices.Sort(g.drops)
	for _, d := range g.drops {
		row := make([]float64, len(g.sizes))
		for i, s := range g.sizes {
			gr := groups[simGridKey{s, d}]
			sr, ok1 := simBestOf(gr, simLabelsWith(gr, "sr-"))
			ecr, ok2 := simBestOf(gr, simLabelsWith(gr, "ec-"))
			if !ok1 || !ok2 {
				return nil, false
			}
			row[i] = sr.MeanMs / ecr.MeanMs
		}
		g.z = append(g.z, row)
	}
	return g, len(g.sizes) > 0 && len(g.drops) > 0
}

func simLabelsWith(g map[string]Row, prefix string) []string {
	var out []string
	for l := range g {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

func simHeatmap(dir string, rows []Row) (bool, error) {
	g, ok := newSimSpeedupGrid(rows)
	if !ok {
		return false, nil
	}
	pal := moreland.SmoothBlueRed()
	lim := 0.0
	for _, row := range g.z {
		for _, v := range row {
			lim = max(lim, math.Abs(math.Log2(v)))
		}
	}
	lim = max(lim, 0.1)
	pal.SetMin(-lim)
	pal.SetMax(lim)
	p := plot.New()
	p.Title.Text = "EC/SR speedup (best SR mean / best EC mean; red: EC faster)"
	p.X.Label.Text = "message size"
	p.Y.Label.Text = "drop rate"
	h := plotter.NewHeatMap(g, pal.Palette(255))
	h.Min, h.Max = -lim, lim
	p.Add(h)
	var xt, yt []plot.Tick
	for i, s := range g.sizes {
		xt = append(xt, plot.Tick{Value: float64(i), Label: units.FormatBytes(s)})
	}
	for i, d := range g.drops {
		yt = append(yt, plot.Tick{Value: float64(i), Label: strconv.FormatFloat(d, 'g', -1, 64)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(xt)
	p.Y.Tick.Marker = plot.ConstantTicks(yt)
	var lbl plotter.XYLabels
	for r, row := range g.z {
		for c, v := range row {
			lbl.XYs = append(lbl.XYs, plotter.XY{X: float64(c), Y: float64(r)})
			lbl.Labels = append(lbl.Labels, fmt.Sprintf("%.2f", v))
		}
	}
	labels, err := plotter.NewLabels(lbl)
	if err != nil {
		return false, err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].Color = color.Black
		labels.TextStyle[i].XAlign = -0.5
		labels.TextStyle[i].YAlign = -0.5
	}
	p.Add(labels)
	return true, plots.Save(p, dir, "speedup_heatmap")
}

// Report renders docs/reproduction.md: the paper's comparison from this
// run's rows, the plots (under plotDir, relative to the report), and each
// of the paper's claims set against the numbers.
func Report(rows []Row, sum Summary, g *Grid, plotDir string, plots Plots) string {
	var b strings.Builder
	focusSize, _ := ParseSize(g.FocusSize)
	large, _ := ParseSize(g.LargeSize)
	grid := simGroupGrid(rows)
	drops, sizes := simGridAxes(grid)
	fmt.Fprintf(&b, "<!-- Code generated by sdr sim (make docs); DO NOT EDIT. -->\n\n")
	b.WriteString("# Reproducing the SDR-RDMA comparison in simulation\n\n")
	fmt.Fprintf(&b, "Generated by `%s` in %v on %d workers (%d points, %d samples). ", sum.Command,
		sum.Wall.Round(time.Second), sum.Workers, sum.Points, sum.Samples)
	fmt.Fprintf(&b, "Samples per point: %d", g.Samples)
	if g.LargeSamples > 0 && g.LargeSamples != g.Samples {
		fmt.Fprintf(&b, ", **%d for sizes above %s** (an 8 GiB sample costs 20–270 ms of CPU: the engines' per-chunk work)", g.LargeSamples, units.FormatBytes(large))
	}
	fmt.Fprintf(&b, ". Engines and models at %s. Every number below comes from this run; rerun with `make docs`.\n\n", simRevision())
	fmt.Fprintf(&b, "Setup: %g Gbit/s, RTT %v (one-way %g km of fibre), %d-byte chunks (one packet each), α = %g "+
		"(RTO = %v, %s), %s loss per chunk, control datagrams lost at %g. Each sample is one transfer through the project's "+
		"own engines (`reliability.SenderEngine`/`ReceiverEngine`) in the discrete-event simulator `testbed/sim`, over the "+
		"link model `link`; a completion time runs from the first bit injected to the receiver holding every byte, and "+
		"slowdown, as in the paper, is that time as the sender learns it (RTT/2 later) over the lossless one: "+
		"(t + RTT/2) / (N·T_inj + RTT). The analytic models of `reliability/model` are shown beside.\n\n",
		g.Gbps, g.RTT, g.RTT.Seconds()/2*link.FibreSpeed, g.Chunk, g.Alpha, time.Duration((1+g.Alpha)*float64(g.RTT)), backoffWords(g.Backoff), g.Loss, g.ControlLoss)
	img := func(name, alt string) {
		if name != "" {
			fmt.Fprintf(&b, "![%s](%s/%s.svg)\n\n", alt, plotDir, name)
		}
	}
	cell := func(r Row, ok bool) string {
		if !ok {
			return "–"
		}
		return fmt.Sprintf("%.2f× / %.2f×", r.Slowdown, r.SlowdownP999)
	}
	header := func(first string) {
		fmt.Fprintf(&b, "| %s |", first)
		for _, l := range simPaperFour {
			fmt.Fprintf(&b, " %s |", l)
		}
		b.WriteString("\n|---|")
		for range simPaperFour {
			b.WriteString("---|")
		}
		b.WriteString("\n")
	}

	fmt.Fprintf(&b, "## Slowdown vs drop rate, %s\n\nMean / p99.9 slowdown vs lossless (%.3f ms).\n\n", units.FormatBytes(focusSize), simLossless(rows, focusSize))
	header("drop rate")
	for _, d := range drops {
		g := grid[simGridKey{focusSize, d}]
		fmt.Fprintf(&b, "| %g |", d)
		for _, l := range simPaperFour {
			r, ok := g[l]
			fmt.Fprintf(&b, " %s |", cell(r, ok))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	img(plots.dropMean, "mean slowdown vs drop rate")
	img(plots.dropP999, "p99.9 slowdown vs drop rate")

	fmt.Fprintf(&b, "## Slowdown vs message size at drop %g\n\nMean / p99.9 slowdown vs lossless.\n\n", g.FocusDrop)
	header("size")
	for _, s := range sizes {
		g := grid[simGridKey{s, g.FocusDrop}]
		fmt.Fprintf(&b, "| %s |", units.FormatBytes(s))
		for _, l := range simPaperFour {
			r, ok := g[l]
			fmt.Fprintf(&b, " %s |", cell(r, ok))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	img(plots.size, "slowdown vs size")

	var dist []Row
	for _, r := range rows {
		if r.Sweep == "distance" {
			dist = append(dist, r)
		}
	}
	if len(dist) > 0 {
		fmt.Fprintf(&b, "## Slowdown vs distance, %s at drop %g\n\nMean / p99.9 slowdown vs lossless; RTT = 2 × distance / (200 000 km/s).\n\n",
			units.FormatBytes(dist[0].SizeBytes), dist[0].Drop)
		header("one-way km (RTT)")
		byKm := map[float64]map[string]Row{}
		var kms []float64
		for _, r := range dist {
			if byKm[r.DistanceKm] == nil {
				byKm[r.DistanceKm] = map[string]Row{}
				kms = append(kms, r.DistanceKm)
			}
			byKm[r.DistanceKm][r.Scheme] = r
		}
		for _, km := range kms {
			fmt.Fprintf(&b, "| %g (%g ms) |", km, byKm[km][simSchemeOrder(dist)[0]].RTTms)
			for _, l := range simPaperFour {
				r, ok := byKm[km][l]
				fmt.Fprintf(&b, " %s |", cell(r, ok))
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
		img(plots.distance, "slowdown vs distance")
	}

	sg, sgOK := newSimSpeedupGrid(rows)
	if sgOK {
		b.WriteString("## EC/SR speedup\n\nBest SR mean (SR-RTO, SR-NACK) over best EC mean (XOR, MDS): above 1, EC finishes first.\n\n| drop \\ size |")
		for _, s := range sg.sizes {
			fmt.Fprintf(&b, " %s |", units.FormatBytes(s))
		}
		b.WriteString("\n|---|")
		for range sg.sizes {
			b.WriteString("---|")
		}
		b.WriteString("\n")
		for r, d := range sg.drops {
			fmt.Fprintf(&b, "| %g |", d)
			for c := range sg.sizes {
				fmt.Fprintf(&b, " %.2f |", sg.z[r][c])
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
		img(plots.heatmap, "EC/SR speedup heatmap")
	}

	b.WriteString("## Simulation against the analytic models\n\n")
	fmt.Fprintf(&b, "Over the %d points where `reliability/model` says its mean is exact (error bound ≤ 1 %%), the worst "+
		"|sim − model| / model is %.2f %% (%s); over the %d of them whose samples resolve a 5 %% difference (standard "+
		"error ≤ 1 %% of the mean, and at least 30 samples expected to see a loss unless losses are too rare to matter) "+
		"it is **%.2f %%** (%s). The paper's validation criterion is 5 %%. "+
		"Elsewhere the statistical error of rare-loss points (one RTO in a few percent of transfers) dominates; the "+
		"per-point standard errors are in `sim.md`, and `go test ./testbed/sim -run ModelAgreement -v` runs the "+
		"check with enough samples.", sum.ExactPoints, 100*sum.WorstDev, sum.WorstDevAt, sum.ResolvedPoints,
		100*sum.WorstResolvedDev, sum.WorstResolvedDevAt)
	var over []string
	for _, r := range rows {
		if r.ModelDeviation != nil && r.ModelExact && *r.ModelDeviation > 0.05 && simResolved(r, g.Alpha) {
			se := r.StdErrMs / r.MeanMs
			over = append(over, fmt.Sprintf("%s (%.1f %%, standard error %.1f %%)", simPointName(r), 100**r.ModelDeviation, 100*se))
		}
	}
	if len(over) > 0 {
		fmt.Fprintf(&b, " Resolved points beyond 5 %%: %s.", strings.Join(over, "; "))
	}
	b.WriteString("\n\n")
	if sum.ChoosePoints > 0 {
		fmt.Fprintf(&b, "`model.Choose` (auto) against the best of the four at each of %d grid points: worst %+.2f %% (%s).\n\n",
			sum.ChoosePoints, 100*sum.ChooseWorst, sum.ChooseAt)
	}

	b.WriteString("## Against the paper's claims\n\n")
	simClaimSR(&b, rows, grid, focusSize, g)
	simClaimEC(&b, grid, drops, focusSize)
	simClaimXOR(&b, grid, drops, focusSize)
	simClaimLarge(&b, sg, sgOK)
	return b.String()
}

// simGridAxes returns the grid's drop rates and sizes, sorted.
func simGridAxes(grid map[simGridKey]map[string]Row) (drops []float64, sizes []int64) {
	for k := range grid {
		if !slices.Contains(drops, k.drop) {
			drops = append(drops, k.drop)
		}
		if !slices.Contains(sizes, k.size) {
			sizes = append(sizes, k.size)
		}
	}
	slices.Sort(drops)
	slices.Sort(sizes)
	return drops, sizes
}

// simLossless is the slowdowns' reference at size: the lossless
// completion as the sender learns of it, N·T_inj + RTT (the paper's).
func simLossless(rows []Row, size int64) float64 {
	for _, r := range rows {
		if r.Sweep == "grid" && r.SizeBytes == size {
			return r.LosslessMs + r.RTTms/2
		}
	}
	return math.NaN()
}

// simVerdict compares a reproduced number with the paper's.
func simVerdict(got, paper float64) string {
	switch ratio := got / paper; {
	case math.IsNaN(ratio):
		return "not in this run"
	case ratio > 0.75 && ratio < 1.33:
		return "agrees (within a third)"
	case ratio >= 1.33:
		return "higher than the paper"
	}
	return "lower than the paper"
}

func simClaimSR(b *strings.Builder, rows []Row, grid map[simGridKey]map[string]Row, focus int64, g *Grid) {
	var mean, p999 Row
	for k, g := range grid {
		if k.size != focus {
			continue
		}
		for _, l := range []string{"sr-rto", "sr-nack"} {
			if r, ok := g[l]; ok {
				if r.Slowdown > mean.Slowdown {
					mean = r
				}
				if r.SlowdownP999 > p999.SlowdownP999 {
					p999 = r
				}
			}
		}
	}
	if mean.Scheme == "" {
		return
	}
	lossless := simLossless(rows, focus)
	rto := (1 + g.Alpha) * float64(g.RTT) / 1e6
	fmt.Fprintf(b, "**SR slows down up to 6.5× (mean) and 12.2× (p99.9).** Here, at %s: up to **%.2f×** mean (%s at %g) — %s — "+
		"and **%.2f×** p99.9 (%s at %g) — %s. Why: a lost chunk costs SR-RTO one RTO = (1 + α)·RTT = %.0f ms on a transfer "+
		"that takes %.2f ms without loss (until the sender learns of its completion), so a transfer needing one repair round lands near 1 + RTO/lossless = %.1f× and one "+
		"needing two near %.1f×; at high drop nearly every transfer needs a round (the mean) and its tail a second (p99.9). "+
		"The paper's numbers sit on the same steps.\n\n",
		units.FormatBytes(focus), mean.Slowdown, mean.Scheme, mean.Drop, simVerdict(mean.Slowdown, 6.5),
		p999.SlowdownP999, p999.Scheme, p999.Drop, simVerdict(p999.SlowdownP999, 12.2),
		rto, lossless, 1+rto/lossless, 1+2*rto/lossless)
}

func simClaimEC(b *strings.Builder, grid map[simGridKey]map[string]Row, drops []float64, focus int64) {
	if len(drops) == 0 {
		return
	}
	top := drops[len(drops)-1]
	r, ok := grid[simGridKey{focus, top}]["ec-mds(32,8)"]
	if !ok {
		return
	}
	extra := r.ParitySent + r.Retransmitted
	wire := extra / (float64(r.DataChunks) + extra)
	tolerates := r.FallbackShare < 0.01 && r.SlowdownP999 < 1.5
	word := "does not tolerate it"
	if tolerates {
		word = "tolerates it"
	}
	fmt.Fprintf(b, "**EC(32,8) tolerates drop rates above 1e-2 with ≤ 20 %% extra bandwidth.** Here EC-MDS(32,8) at %s and "+
		"drop %g %s: %.2f× mean, %.2f× p99.9 slowdown, fallback in %.1f %% of transfers; parity and repairs take %.1f %% "+
		"of the chunks on the wire (%.1f %% over the data). The slowdown that remains is the parity's injection time "+
		"(8 of every 40 chunks), not loss. Agrees: 8 parity chunks per 32 are 20 %% of the wire (25 %% over the data, "+
		"which is how the paper's bound reads if it counts against the data). The grid's top drop rate is %g; above it the "+
		"models say MDS(32,8) still decodes at 1e-2 with probability 1 − P(more than 8 of 40 lost).\n\n",
		units.FormatBytes(focus), top, word, r.Slowdown, r.SlowdownP999, 100*r.FallbackShare, 100*wire, 100*extra/float64(r.DataChunks), top)
}

func simClaimXOR(b *strings.Builder, grid map[simGridKey]map[string]Row, drops []float64, focus int64) {
	var parts []string
	from := math.NaN()
	for _, d := range drops {
		r, ok := grid[simGridKey{focus, d}]["ec-xor(32,8)"]
		if !ok {
			continue
		}
		parts = append(parts, fmt.Sprintf("%g: %.1f %%", d, 100*r.FallbackShare))
		if math.IsNaN(from) && r.FallbackShare >= 0.1 {
			from = d
		}
	}
	if len(parts) == 0 {
		return
	}
	v := "agrees"
	switch {
	case math.IsNaN(from):
		v = "differs: XOR never fell back in a tenth of the transfers here"
	case from < 1e-4 || from > 1e-2:
		v = "differs"
	}
	fmt.Fprintf(b, "**XOR falls back from a drop rate of about 1e-3.** Share of EC-XOR(32,8) transfers of %s that needed the "+
		"fallback (NACK + SR repair), by drop rate: %s. It first exceeds 10 %% at %g — %s. XOR survives one loss per "+
		"group of 4 data + 1 parity chunk, so a %s transfer (%d submessages, 8 groups each) falls back once two losses "+
		"hit one group, which becomes likely between 1e-4 and 1e-3; the share grows with the message size.\n\n",
		units.FormatBytes(focus), strings.Join(parts, ", "), from, v, units.FormatBytes(focus), focus/4096/32)
}

func simClaimLarge(b *strings.Builder, sg *simSpeedupGrid, ok bool) {
	if !ok {
		return
	}
	var srWins []string
	for r, d := range sg.drops {
		for c, s := range sg.sizes {
			if sg.z[r][c] < 0.995 { // a tie within rounding is no win
				srWins = append(srWins, fmt.Sprintf("%s at %g (%.2f)", units.FormatBytes(s), d, sg.z[r][c]))
			}
		}
	}
	corner := sg.z[0][len(sg.sizes)-1]
	v := "agrees"
	if corner >= 1 {
		v = "differs: EC is ahead even there"
	}
	fmt.Fprintf(b, "**SR is preferable for very large messages at low drop rates.** SR finishes first (mean speedup below 0.995) at: %s. "+
		"At the largest size and lowest drop rate the speedup is %.2f — %s. Why: EC's parity adds m/k = 25 %% to the "+
		"injection time of every transfer, which for large messages outweighs the rare SR repair round that low drop "+
		"rates cause.\n",
		strings.Join(srWins, ", "), corner, v)
	if len(srWins) == 0 {
		b.WriteString("(SR won nowhere in this run.)\n")
	}
}

func backoffWords(on bool) string {
	if on {
		return "doubled per repeated timeout, the engines' default on real links"
	}
	return "the same for every repair round, as in the paper and the models (-backoff to double it)"
}

func DropLabel(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// simRevision names the source the binary was built from (the VCS stamp of
// go build / go run), so a report says which engines it measured.
func simRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "an unknown revision"
	}
	rev, modified := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return "an unknown revision"
	}
	if modified {
		return "commit " + rev[:min(12, len(rev))] + " (with uncommitted changes)"
	}
	return "commit " + rev[:min(12, len(rev))]
}

// ShardFromSlurm returns the shard a Slurm job array task runs ("" outside one).
func ShardFromSlurm(getenv func(string) string) string {
	id, count := getenv("SLURM_ARRAY_TASK_ID"), getenv("SLURM_ARRAY_TASK_COUNT")
	if id == "" || count == "" {
		return ""
	}
	i, err1 := strconv.Atoi(id)
	n, err2 := strconv.Atoi(count)
	lo, err3 := strconv.Atoi(getenv("SLURM_ARRAY_TASK_MIN"))
	if err1 != nil || err2 != nil {
		return id + "/" + count // Shard reports it
	}
	if err3 == nil {
		i -= lo // arrays may start anywhere: --array=1-4
	}
	return fmt.Sprintf("%d/%d", i, n)
}

// Shard keeps shard i/n of the points: every n-th from the i-th. A
// sample's seed depends on its point and index only, so a shard's points
// come out as they would in the whole run.
func Shard(spec string, jobs []sim.Job, meta []PointMeta) ([]sim.Job, []PointMeta, error) {
	is, ns, ok := strings.Cut(spec, "/")
	i, err1 := strconv.Atoi(is)
	n, err2 := strconv.Atoi(ns)
	if !ok || err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n {
		return nil, nil, fmt.Errorf("%q: want i/n with 0 ≤ i < n", spec)
	}
	var j2 []sim.Job
	var m2 []PointMeta
	for k := i; k < len(jobs); k += n {
		j2, m2 = append(j2, jobs[k]), append(m2, meta[k])
	}
	return j2, m2, nil
}

// pointKey names a point independently of its position in a run.
func pointKey(sweep, scheme string, size int64, drop, distanceKm float64) string {
	return fmt.Sprintf("%s|%s|%d|%g|%g", sweep, scheme, size, drop, distanceKm)
}

// Merge joins the sim.json of the shards in dirs into the rows of the run
// jobs and meta describe (Jobs), in its order: the rows, hence sim.csv,
// are the whole run's, byte for byte. It returns the longest shard's wall
// time and the samples. A point missing from every shard, in two shards
// or not in the run is an error (the shards ran with other flags).
func Merge(dirs []string, jobs []sim.Job, meta []PointMeta) (rows []Row, wall time.Duration, samples int, err error) {
	byKey := map[string]Row{}
	for _, dir := range dirs {
		blob, err := os.ReadFile(filepath.Join(strings.TrimSpace(dir), "sim.json"))
		if err != nil {
			return nil, 0, 0, err
		}
		var shard File
		if err := json.Unmarshal(blob, &shard); err != nil {
			return nil, 0, 0, fmt.Errorf("%s: %w", dir, err)
		}
		wall = max(wall, shard.Summary.Wall)
		for _, r := range shard.Points {
			k := pointKey(r.Sweep, r.Scheme, r.SizeBytes, r.Drop, r.DistanceKm)
			if _, dup := byKey[k]; dup {
				return nil, 0, 0, fmt.Errorf("point %s is in two shards", k)
			}
			byKey[k] = r
		}
	}
	rows = make([]Row, len(jobs))
	for i, j := range jobs {
		k := pointKey(meta[i].sweep, meta[i].scheme.String(), j.Point.Size, meta[i].drop, meta[i].distanceKm)
		r, ok := byKey[k]
		if !ok {
			return nil, 0, 0, fmt.Errorf("no shard has point %s (were the shards run with these flags?)", k)
		}
		delete(byKey, k)
		rows[i] = r
		samples += r.Samples
	}
	if len(byKey) > 0 {
		return nil, 0, 0, fmt.Errorf("%d points of the shards are not in this run (other flags?)", len(byKey))
	}
	return rows, wall, samples, nil
}
