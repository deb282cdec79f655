package scenario

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/sdr-rdma/sdr/internal/plots"
	"github.com/sdr-rdma/sdr/internal/units"
)

// WritePlots draws, per link, the mean completion time against the
// message size for each scheme (solid: measured, dashed: the model), and
// the goodput against the size, as PNG and SVG; it returns the plots'
// names.
func (rep *Report) WritePlots(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var names []string
	var schemes []string
	for _, r := range rep.Rows {
		if !slices.Contains(schemes, r.Scheme) {
			schemes = append(schemes, r.Scheme)
		}
	}
	for li, lr := range rep.Links {
		for _, kind := range []string{"completion", "goodput"} {
			p := plot.New()
			p.Title.Text = fmt.Sprintf("%s vs message size: %s", kind, lr.Link)
			p.X.Label.Text = "message size (bytes)"
			p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
			p.Y.Label.Text = "mean completion time (ms; dashed: model)"
			if kind == "goodput" {
				p.Y.Label.Text = "goodput (Mbit/s)"
			}
			var ticks []plot.Tick
			for _, s := range rep.Scenario.Sizes {
				ticks = append(ticks, plot.Tick{Value: float64(s), Label: units.FormatBytes(int64(s))})
			}
			p.X.Tick.Marker = plot.ConstantTicks(ticks)
			p.Y.Tick.Marker = logTicks125{}
			p.Legend.Top, p.Legend.Left = true, true
			drawn := false
			for i, scheme := range schemes {
				var measured, modelled plotter.XYs
				for _, r := range rep.Rows {
					if r.Link != lr.Link || r.Scheme != scheme {
						continue
					}
					y, m := r.MeanMs, r.ModelMs
					if kind == "goodput" {
						y, m = r.GoodputMbps, 0
					}
					if y > 0 && r.Completed > 0 {
						measured = append(measured, plotter.XY{X: float64(r.Size), Y: y})
					}
					if m > 0 {
						modelled = append(modelled, plotter.XY{X: float64(r.Size), Y: m})
					}
				}
				if len(measured) > 0 {
					l, s, err := plotter.NewLinePoints(measured)
					if err != nil {
						return nil, err
					}
					l.Color, s.Color, s.Shape = plotutil.Color(i), plotutil.Color(i), plotutil.Shape(i)
					p.Add(l, s)
					p.Legend.Add(scheme, l, s)
					drawn = true
				}
				if len(modelled) > 0 {
					d, err := plotter.NewLine(modelled)
					if err != nil {
						return nil, err
					}
					d.Color, d.Dashes = plotutil.Color(i), []vg.Length{vg.Points(4), vg.Points(3)}
					p.Add(d)
				}
			}
			if !drawn {
				continue
			}
			name := kind
			if len(rep.Links) > 1 {
				name = fmt.Sprintf("%s_link%d", kind, li+1)
			}
			if err := plots.Save(p, dir, name); err != nil {
				return nil, err
			}
			names = append(names, name)
		}
	}
	return names, nil
}

// logTicks125 labels a log axis at 1, 2 and 5 of every decade, which a
// range of one or two decades needs to be readable.
type logTicks125 struct{}

// Ticks implements plot.Ticker.
func (logTicks125) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for decade := math.Pow(10, math.Floor(math.Log10(lo))); decade <= hi; decade *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := m * decade; v >= lo && v <= hi {
				ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	}
	return ticks
}
