// Package plots writes gonum plots the way every report of this module
// does: PNG and SVG side by side, 16 × 10 cm.
package plots

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Save writes p as dir/name.png and dir/name.svg.
func Save(p *plot.Plot, dir, name string) error {
	for _, ext := range []string{".png", ".svg"} {
		if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, filepath.Join(dir, name+ext)); err != nil {
			return err
		}
	}
	return nil
}

// SaveStack writes ps stacked top to bottom, 16 cm wide and 6 cm high
// each, their axes aligned, as dir/name.png and dir/name.svg.
func SaveStack(ps []*plot.Plot, dir, name string) error {
	w, h := 16*vg.Centimeter, vg.Length(len(ps))*6*vg.Centimeter
	rows := make([][]*plot.Plot, len(ps))
	for i, p := range ps {
		rows[i] = []*plot.Plot{p}
	}
	paint := func(c draw.Canvas) {
		tiles := draw.Tiles{Rows: len(ps), Cols: 1, PadTop: vg.Millimeter, PadBottom: vg.Millimeter, PadX: vg.Millimeter, PadY: 2 * vg.Millimeter}
		for i, cs := range plot.Align(rows, tiles, c) {
			ps[i].Draw(cs[0])
		}
	}
	img := vgimg.New(w, h)
	paint(draw.New(img))
	if err := writeFile(filepath.Join(dir, name+".png"), vgimg.PngCanvas{Canvas: img}); err != nil {
		return err
	}
	svg := vgsvg.New(w, h)
	paint(draw.New(svg))
	return writeFile(filepath.Join(dir, name+".svg"), svg)
}

// writeFile writes what w writes to path.
func writeFile(path string, w io.WriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	if _, err := w.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plots: write %s: %w", path, err)
	}
	return f.Close()
}
