package main

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

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/sdr-rdma/sdr/link"
	"github.com/sdr-rdma/sdr/testbed/sim"
)

// allreduceSimFlags are sdr allreduce -sim's settings: the paper's Fig. 13
// grid by default.
type allreduceSimFlags struct {
	rankList, drops, size string
	samples               int
	seed                  uint64
	out                   string
}

// allreduceSimRow is one point of the grid.
type allreduceSimRow struct {
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

// allreduceSim runs the ring Allreduce grid in the simulator at the
// paper's scale (400 Gbit/s, 25 ms, 4 KiB chunks) and prints a table;
// with -out it writes the rows (JSON, markdown) and the speedup plot.
func allreduceSim(f allreduceFlags, sf allreduceSimFlags, stdout, stderr io.Writer) ([]allreduceSimRow, error) {
	ranks, err := simParseList(sf.rankList, func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 || n > 64 {
			return 0, fmt.Errorf("ranks %q: want 2..64", s)
		}
		return n, nil
	})
	if err != nil {
		return nil, err
	}
	drops, err := simParseList(sf.drops, simParseDrop)
	if err != nil {
		return nil, err
	}
	size, err := simParseSize(sf.size)
	if err != nil {
		return nil, err
	}
	schemes, err := simParseList(f.schemes, parseSimScheme)
	if err != nil {
		return nil, err
	}
	if sf.samples < 1 {
		return nil, fmt.Errorf("-samples %d", sf.samples)
	}
	var jobs []sim.RingJob
	for _, n := range ranks {
		for _, d := range drops {
			for _, s := range schemes {
				jobs = append(jobs, sim.RingJob{Point: sim.Point{Size: size, Scheme: s.scheme, Code: s.code, Loss: link.Bernoulli(d)},
					Ranks: n, Samples: sf.samples})
			}
		}
	}
	began := time.Now()
	results, err := sim.SweepRing(jobs, sim.Options{Seed: sf.seed, Progress: func(p sim.Progress) {
		fmt.Fprintf(stderr, "\r%d/%d points, %d/%d transfers, %v", p.PointsDone, p.Points, p.SamplesDone, p.Samples, p.Elapsed.Round(time.Second))
	}})
	fmt.Fprintln(stderr)
	if err != nil {
		return nil, err
	}
	rows := make([]allreduceSimRow, len(results))
	for i, r := range results {
		rows[i] = allreduceSimRow{Ranks: r.Job.Ranks, Drop: drops[(i/len(schemes))%len(drops)], Scheme: schemes[i%len(schemes)].label,
			MeanMs: ms(r.Mean), P50Ms: ms(r.P50), P999Ms: ms(r.P999)}
		if r.Model != nil {
			rows[i].ModelMeanMs, rows[i].ModelP999Ms = ms(r.Model.MeanLower), ms(r.Model.P999Upper)
		}
	}
	setSpeedups(rows)
	table := allreduceSimTable(rows, size, sf.samples, time.Since(began))
	fmt.Fprint(stdout, table)
	if sf.out != "" {
		title := "Ring Allreduce across datacenters (the paper's Fig. 13) in the simulator"
		if err := writeAllreduceReport(sf.out, title, "sdr allreduce -sim -out "+sf.out, "drop rate (per chunk)", rows, table); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// setSpeedups sets each row's p99.9 speedup over SR-RTO at the same
// ranks and drop rate.
func setSpeedups(rows []allreduceSimRow) {
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

func allreduceSimTable(rows []allreduceSimRow, size int64, samples int, took time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Ring Allreduce of %s in the simulator (testbed/sim): 400 Gbit/s, 25 ms RTT, 4 KiB chunks per hop; %d Allreduces per point, each of ranks·2(ranks−1) simulated transfers (%v)\n\n",
		simSizeName(size), samples, took.Round(time.Second))
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

// writeAllreduceReport writes dir/allreduce.json, dir/README.md (title,
// the command that made it, the table) and the plot of the p99.9 speedup
// over SR-RTO against the drop rate (labelled xLabel).
func writeAllreduceReport(dir, title, command, xLabel string, rows []allreduceSimRow, table string) error {
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
			ticks = append(ticks, plot.Tick{Value: r.Drop, Label: simDropLabel(r.Drop)})
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
	if err := savePlot(p, dir, "speedup_p999"); err != nil {
		return err
	}
	md := "# " + title + "\n\nGenerated by `" + command + "`.\n\n" + table +
		"\n![p99.9 speedup over SR-RTO](speedup_p999.svg)\n"
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(md), 0o644)
}
