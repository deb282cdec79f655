package simreport

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/sdr-rdma/sdr/internal/plots"
	"github.com/sdr-rdma/sdr/internal/units"
)

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

func DropLabel(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
