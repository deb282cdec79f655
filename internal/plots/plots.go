// Package plots writes gonum plots the way every report of this module
// does: PNG and SVG side by side, 16 × 10 cm.
package plots

import (
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
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
