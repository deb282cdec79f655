package engine

import (
	"encoding/json"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/sdr-rdma/sdr/wire"
)

type vectorFile struct {
	Cases []struct {
		Name      string `json:"name"`
		Layout    string `json:"layout"`
		MTU       int    `json:"mtu"`
		ChunkSize int    `json:"chunk_size"`
		Slot      struct {
			Length     int    `json:"length"`
			MsgID      uint32 `json:"msg_id"`
			Generation uint32 `json:"generation"`
			Active     bool   `json:"active"`
		} `json:"slot"`
		Events []struct {
			Channel    int    `json:"channel"`
			Generation uint32 `json:"generation"`
			Imm        string `json:"imm"`
			Bytes      uint32 `json:"bytes"`
			Result     string `json:"result"`
		} `json:"events"`
		Expect struct {
			ChunkFlags  []string `json:"chunk_flags"`
			Masks       []string `json:"masks"`
			Imm         string   `json:"imm"`
			ImmComplete bool     `json:"imm_complete"`
		} `json:"expect"`
	} `json:"cases"`
}

func hexValue(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		t.Fatalf("bad number %q: %v", s, err)
	}
	return v
}

// TestVectors runs the language-neutral vectors every implementation of
// the engine must pass.
func TestVectors(t *testing.T) {
	data, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file vectorFile
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) < 5 {
		t.Fatalf("%d cases", len(file.Cases))
	}
	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			layout, err := wire.ParseImmLayout(c.Layout)
			if err != nil {
				t.Fatal(err)
			}
			geo, err := NewGeometry(c.Slot.Length, c.MTU, c.ChunkSize)
			if err != nil {
				t.Fatal(err)
			}
			s, err := NewSlot(nil, geo, layout)
			if err != nil {
				t.Fatal(err)
			}
			if c.Slot.Active {
				s.Activate(c.Slot.MsgID, c.Slot.Generation)
			}
			for i, e := range c.Events {
				want, err := ParseResult(e.Result)
				if err != nil {
					t.Fatal(err)
				}
				if got := s.Process(e.Generation, uint32(hexValue(t, e.Imm)), e.Bytes); got != want {
					t.Errorf("event %d (imm %s, %d B, gen %d): %v, want %v", i, e.Imm, e.Bytes, e.Generation, got, want)
				}
			}
			flags := s.Bitmap(nil)
			if len(flags) != len(c.Expect.ChunkFlags) {
				t.Fatalf("%d flag words, want %d", len(flags), len(c.Expect.ChunkFlags))
			}
			for i, w := range c.Expect.ChunkFlags {
				if flags[i] != hexValue(t, w) {
					t.Errorf("flags word %d: %#x, want %s", i, flags[i], w)
				}
			}
			if len(c.Expect.Masks) != geo.Chunks {
				t.Fatalf("%d masks for %d chunks", len(c.Expect.Masks), geo.Chunks)
			}
			for i, m := range c.Expect.Masks {
				if got := s.ExpandChunk(i); got != hexValue(t, m) {
					t.Errorf("chunk %d mask %#x, want %s", i, got, m)
				}
				if s.ChunkDone(i) != (flags[i/64]&(1<<(i%64)) != 0) {
					t.Errorf("ChunkDone(%d) disagrees with the bitmap", i)
				}
			}
			imm, complete := s.Imm()
			if uint64(imm) != hexValue(t, c.Expect.Imm) || complete != c.Expect.ImmComplete {
				t.Errorf("immediate %#x complete %v, want %s %v", imm, complete, c.Expect.Imm, c.Expect.ImmComplete)
			}
		})
	}
}

func TestGeometry(t *testing.T) {
	for _, c := range []struct{ length, mtu, chunk, packets, chunks int }{
		{0, 1024, 4096, 1, 1}, {1, 1024, 1024, 1, 1}, {4096, 1024, 4096, 4, 1}, {4097, 1024, 4096, 5, 2},
		{8 << 20, 1024, 65536, 8192, 128},
	} {
		g, err := NewGeometry(c.length, c.mtu, c.chunk)
		if err != nil || g.Packets != c.packets || g.Chunks != c.chunks {
			t.Errorf("%+v: %+v %v", c, g, err)
		}
	}
	for _, c := range []struct{ mtu, chunk int }{{1024, 1000}, {1024, 128 << 10}, {0, 1024}} {
		if _, err := NewGeometry(4096, c.mtu, c.chunk); err == nil {
			t.Errorf("mtu %d chunk %d accepted", c.mtu, c.chunk)
		}
	}
}

// TestConcurrentWorkers has several workers process every packet of a
// large message (each packet twice, as duplicates) at once; the result
// must be the same as sequential processing. Run with -race.
func TestConcurrentWorkers(t *testing.T) {
	geo, _ := NewGeometry(8<<20, 1024, 64<<10)
	s, _ := NewSlot(nil, geo, wire.DefaultImmLayout)
	s.Activate(7, 1)
	const workers = 4
	var wg sync.WaitGroup
	completed := make([]int, workers)
	for w := range workers {
		wg.Go(func() {
			for k := w; k < 2*geo.Packets; k += workers {
				off := uint32(k % geo.Packets)
				imm := wire.DefaultImmLayout.Pack(7, off, wire.DefaultImmLayout.NibbleOf(0xCAFEF00D, off))
				if s.Process(1, imm, 1024) == ChunkComplete {
					completed[w]++
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for _, n := range completed {
		total += n
	}
	if total != geo.Chunks || s.CompleteChunks() != geo.Chunks {
		t.Errorf("%d chunk completions reported, %d flags set, want %d", total, s.CompleteChunks(), geo.Chunks)
	}
	if imm, ok := s.Imm(); !ok || imm != 0xCAFEF00D {
		t.Errorf("immediate %#x %v", imm, ok)
	}
}

// BenchmarkProcess measures packet events per second on one core: every
// packet of an 8 MiB message (MTU 1024, 64-packet chunks) in order.
func BenchmarkProcess(b *testing.B) {
	geo, _ := NewGeometry(8<<20, 1024, 64<<10)
	s, _ := NewSlot(nil, geo, wire.DefaultImmLayout)
	imms := make([]uint32, geo.Packets)
	for k := range imms {
		imms[k] = wire.DefaultImmLayout.Pack(3, uint32(k), uint32(k%8))
	}
	b.ReportAllocs()
	b.ResetTimer()
	events := 0
	for i := 0; i < b.N; i++ {
		if i%geo.Packets == 0 {
			b.StopTimer()
			s.Activate(3, 0)
			b.StartTimer()
		}
		s.Process(0, imms[i%geo.Packets], 1024)
		events++
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds()/1e6, "Mevents/s")
}
