package model

import (
	"testing"
	"time"
)

func BenchmarkChoose(b *testing.B) {
	for _, bc := range []struct {
		name string
		size int64
		loss float64
	}{
		{"128KiB/1e-3", 128 << 10, 1e-3},
		{"128MiB/1e-5", 128 << 20, 1e-5},
		{"128MiB/1e-2", 128 << 20, 1e-2},
		{"8GiB/1e-6", 8 << 30, 1e-6},
		{"8GiB/1e-2", 8 << 30, 1e-2},
	} {
		l := Link{Bandwidth: 400e9, RTT: 25 * time.Millisecond, Loss: bc.loss, ChunkSize: 4096}
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := Choose(l, bc.size); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
