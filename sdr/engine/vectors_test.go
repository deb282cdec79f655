package engine_test

import (
	"testing"

	"github.com/sdr-rdma/sdr/sdr/engine"
	"github.com/sdr-rdma/sdr/sdr/engine/enginetest"
)

// TestVectors runs the language-neutral vectors every implementation of
// the engine must pass.
func TestVectors(t *testing.T) {
	cases, err := enginetest.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			geo, err := engine.NewGeometry(c.Slot.Length, c.MTU, c.ChunkSize)
			if err != nil {
				t.Fatal(err)
			}
			s, err := engine.NewSlot(nil, geo, c.Layout)
			if err != nil {
				t.Fatal(err)
			}
			if c.Slot.Active {
				s.Activate(c.Slot.MsgID, c.Slot.Generation)
			}
			for i, e := range c.Events {
				switch e.Op {
				case enginetest.Activate:
					s.Activate(e.MsgID, e.Generation)
					continue
				case enginetest.Deactivate:
					s.Deactivate()
					continue
				}
				got, immDone := s.Process(e.Generation, e.Imm, e.Bytes)
				if got != e.Result || immDone != e.CompletesImm {
					t.Errorf("event %d (imm %#x, %d B, gen %d): %v completes immediate %v, want %v %v",
						i, e.Imm, e.Bytes, e.Generation, got, immDone, e.Result, e.CompletesImm)
				}
			}
			flags := s.Bitmap(nil)
			if len(flags) != len(c.Expect.ChunkFlags) {
				t.Fatalf("%d flag words, want %d", len(flags), len(c.Expect.ChunkFlags))
			}
			for i, w := range c.Expect.ChunkFlags {
				if flags[i] != w {
					t.Errorf("flags word %d: %#x, want %#x", i, flags[i], w)
				}
			}
			if len(c.Expect.Masks) != geo.Chunks {
				t.Fatalf("%d masks for %d chunks", len(c.Expect.Masks), geo.Chunks)
			}
			for i, m := range c.Expect.Masks {
				if got := s.ExpandChunk(i); got != m {
					t.Errorf("chunk %d mask %#x, want %#x", i, got, m)
				}
				if s.ChunkDone(i) != (flags[i/64]&(1<<(i%64)) != 0) {
					t.Errorf("ChunkDone(%d) disagrees with the bitmap", i)
				}
			}
			imm, complete := s.Imm()
			if imm != c.Expect.Imm || complete != c.Expect.ImmComplete {
				t.Errorf("immediate %#x complete %v, want %#x %v", imm, complete, c.Expect.Imm, c.Expect.ImmComplete)
			}
			if s.Truncated() != c.Expect.Truncated {
				t.Errorf("truncated %v, want %v", s.Truncated(), c.Expect.Truncated)
			}
		})
	}
}
