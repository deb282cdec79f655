package ring

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/internal/units"
	"github.com/sdr-rdma/sdr/reliability/scheme"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/sdr-rdma/sdr/internal/plots"
	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/testbed/sim"
)

// SimConfig is the simulator's grid: the paper's Fig. 13 by default
// (SimDefaults).
type SimConfig struct {
	// Ranks are the rings (datacenters) to simulate; Drops the chunk drop
	// rates; Size the Allreduce's bytes.
	Ranks []int
	Drops []float64
	Size  int64
	// Schemes as scheme.Parse takes them (ec and hybrid
	// without a code: scheme.DefaultCode).
	Schemes []string
	// Samples is how many Allreduces per point; Seed seeds the sweep.
	Samples int
	Seed    uint64
}

// SimDefaults is the paper's Fig. 13: 128 MiB over 4 and 8 datacenters,
// drop 1e-6 to 1e-2, SR-RTO, SR-NACK and MDS(32,8), 1000 Allreduces a point.
func SimDefaults() SimConfig {
	return SimConfig{Ranks: []int{4, 8}, Drops: []float64{1e-6, 1e-5, 1e-4, 1e-3, 1e-2}, Size: 128 << 20,
		Schemes: []string{"sr-rto", "sr-nack", "ec"}, Samples: 1000, Seed: 1}
}

// SimRow is one point of a grid (or, from WriteReport, of a run).
type SimRow struct {
	Ranks  int     `json:"ranks"`
	Drop   float64 `json:"drop"`
	Scheme string  `json:"scheme"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P999Ms float64 `json:"p999_ms"`
	// ModelMeanMs and ModelP999Ms are reliability/model's ring bounds
	// (the mean from below, the 99.9th percentile from above).
	ModelMeanMs float64 `json:"model_mean_lower_ms,omitempty"`
	ModelP999Ms float64 `json:"model_p999_upper_ms,omitempty"`
	// SpeedupP999 is SR-RTO's p99.9 over this scheme's at the same point.
	SpeedupP999 float64 `json:"p999_speedup_vs_sr_rto,omitempty"`
}

// Simulate runs the grid in the simulator at the paper's scale (400
// Gbit/s, 25 ms RTT, 4 KiB chunks; testbed/sim.SweepRing), reporting
// progress to progress (if not nil), and returns the rows and their
// Markdown table.
func Simulate(c SimConfig, progress io.Writer) ([]SimRow, string, error) {
	var schemes []scheme.Scheme
	for _, name := range c.Schemes {
		s, err := scheme.Parse(name)
		if err != nil {
			return nil, "", err
		}
		schemes = append(schemes, s.WithDefaultCode())
	}
	if c.Samples < 1 || len(c.Ranks) == 0 || len(c.Drops) == 0 || len(schemes) == 0 {
		return nil, "", fmt.Errorf("ring: simulate %d samples of %d rings × %d drops × %d schemes", c.Samples, len(c.Ranks), len(c.Drops), len(schemes))
	}
	var jobs []sim.RingJob
	var rows []SimRow
	for _, n := range c.Ranks {
		for _, d := range c.Drops {
			for _, s := range schemes {
				jobs = append(jobs, sim.RingJob{Point: sim.Point{Size: c.Size, Scheme: s, Loss: link.Bernoulli(d)},
					Ranks: n, Samples: c.Samples})
				rows = append(rows, SimRow{Ranks: n, Drop: d, Scheme: s.String()})
			}
		}
	}
	began := time.Now()
	results, err := sim.SweepRing(jobs, sim.Options{Seed: c.Seed, Progress: func(p sim.Progress) {
		if progress != nil {
			fmt.Fprintf(progress, "\r%d/%d points, %d/%d transfers, %v", p.PointsDone, p.Points, p.SamplesDone, p.Samples, p.Elapsed.Round(time.Second))
		}
	}})
	if progress != nil {
		fmt.Fprintln(progress)
	}
	if err != nil {
		return nil, "", err
	}
	for i, r := range results {
		rows[i].MeanMs, rows[i].P50Ms, rows[i].P999Ms = ms(r.Mean), ms(r.P50), ms(r.P999)
		if r.Model != nil {
			rows[i].ModelMeanMs, rows[i].ModelP999Ms = ms(r.Model.MeanLower), ms(r.Model.P999Upper)
		}
	}
	setSpeedups(rows)
	return rows, simTable(rows, c.Size, c.Samples, time.Since(began)), nil
}

// WriteSimReport writes a grid's rows, README.md (naming command) and plot
// to dir.
func WriteSimReport(dir, command string, rows []SimRow, table string) error {
	return writeReport(dir, "Ring Allreduce across datacenters (the paper's Fig. 13) in the simulator", command,
		"drop rate (per chunk)", rows, table)
}

func dropLabel(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// setSpeedups sets each row's p99.9 speedup over SR-RTO at the same
// ranks and drop rate.
func setSpeedups(rows []SimRow) {
	srRTO := map[[2]float64]float64{}
	for _, r := range rows {
		if r.Scheme == "sr-rto" {
			srRTO[[2]float64{float64(r.Ranks), r.Drop}] = r.P999Ms
		}
	}
	for i := range rows {
		if base, ok := srRTO[[2]float64{float64(rows[i].Ranks), rows[i].Drop}]; ok && rows[i].P999Ms > 0 {
			rows[i].SpeedupP999 = base / rows[i].P999Ms
		}
	}
}

func simTable(rows []SimRow, size int64, samples int, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Ring Allreduce of %s in the simulator (testbed/sim): 400 Gbit/s, 25 ms RTT, 4 KiB chunks per hop; %d Allreduces per point, each of ranks·2(ranks−1) simulated transfers (%v)\n\n",
		units.FormatBytes(size), samples, took.Round(time.Second))
	fmt.Fprintln(&b, "| ranks | drop | scheme | mean (ms) | p50 (ms) | p99.9 (ms) | model mean ≥ (ms) | model p99.9 ≤ (ms) | p99.9 speedup vs SR-RTO |")
	fmt.Fprintln(&b, "|---:|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %d | %g | %s | %.1f | %.1f | %.1f | %s | %s | %s |\n", r.Ranks, r.Drop, r.Scheme, r.MeanMs, r.P50Ms, r.P999Ms,
			orDash(r.ModelMeanMs), orDash(r.ModelP999Ms), speedupCell(r.SpeedupP999))
	}
	return b.String()
}

func speedupCell(x float64) string {
	if x <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", x)
}

// writeReport writes dir/allreduce.json, dir/README.md (title,
// the command that made it, the table) and the plot of the p99.9 speedup
// over SR-RTO against the drop rate (labelled xLabel).
func writeReport(dir, title, command, xLabel string, rows []SimRow, table string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "allreduce.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	p := plot.New()
	p.Title.Text = "Ring Allreduce: p99.9 speedup over SR-RTO vs drop rate"
	p.X.Label.Text = xLabel
	p.Y.Label.Text = "SR-RTO p99.9 / scheme p99.9"
	p.X.Scale = plot.LogScale{}
	p.Legend.Top, p.Legend.Left = true, true
	type key struct {
		ranks  int
		scheme string
	}
	series := map[key]plotter.XYs{}
	var order []key
	var ticks []plot.Tick
	for _, r := range rows {
		if r.SpeedupP999 <= 0 || r.Scheme == "sr-rto" || r.Drop <= 0 {
			continue
		}
		k := key{r.Ranks, r.Scheme}
		if _, ok := series[k]; !ok {
			order = append(order, k)
		}
		series[k] = append(series[k], plotter.XY{X: r.Drop, Y: r.SpeedupP999})
		if !slices.ContainsFunc(ticks, func(t plot.Tick) bool { return t.Value == r.Drop }) {
			ticks = append(ticks, plot.Tick{Value: r.Drop, Label: dropLabel(r.Drop)})
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	for i, k := range order {
		l, s, err := plotter.NewLinePoints(series[k])
		if err != nil {
			return err
		}
		l.Color, s.Color, s.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
		if strings.HasPrefix(k.scheme, "sr") {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l, s)
		p.Legend.Add(fmt.Sprintf("%s, %d DCs", k.scheme, k.ranks), l, s)
	}
	if err := plots.Save(p, dir, "speedup_p999"); err != nil {
		return err
	}
	md := "# " + title + "\n\nGenerated by `" + command + "`.\n\n" + table +
		"\n![p99.9 speedup over SR-RTO](speedup_p999.svg)\n"
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(md), 0o644)
}
