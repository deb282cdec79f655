package devicetest

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/sdr/engine/enginetest"
)

// parseHex parses a hexadecimal number the C driver printed.
func parseHex(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		t.Fatalf("driver printed a bad number %q: %v", s, err)
	}
	return v
}

// TestEngineVectors runs every event of the Go engine's vectors through
// engine.h (compiled with gcc) and compares each result, the
// immediate-completion flag and the final state.
func TestEngineVectors(t *testing.T) {
	cases, err := enginetest.Load()
	if err != nil {
		t.Fatal(err)
	}
	var script bytes.Buffer
	events := 0
	for _, c := range cases {
		l := c.Layout
		fmt.Fprintf(&script, "case %d %d %d %d %d %d %d %d %d\n", l.MsgIDBits, l.OffsetBits, l.NibbleBits,
			c.MTU, c.ChunkSize, c.Slot.Length, map[bool]int{false: 0, true: 1}[c.Slot.Active], c.Slot.MsgID, c.Slot.Generation)
		for _, e := range c.Events {
			switch e.Op {
			case enginetest.Packet:
				fmt.Fprintf(&script, "pkt %d %x %d\n", e.Generation, e.Imm, e.Bytes)
				events++
			case enginetest.Activate:
				fmt.Fprintf(&script, "activate %d %d\n", e.MsgID, e.Generation)
			case enginetest.Deactivate:
				fmt.Fprintln(&script, "deactivate")
			}
		}
		fmt.Fprintln(&script, "end")
	}
	bin := compileC(t, "vectors", nil, dev("test/vectors_driver.c"))
	out := bufio.NewScanner(bytes.NewReader(runC(t, bin, script.Bytes())))
	next := func(what string) []string {
		t.Helper()
		if !out.Scan() {
			t.Fatalf("driver output ended, want %s", what)
		}
		f := strings.Fields(out.Text())
		if len(f) == 0 || f[0] != what {
			t.Fatalf("driver printed %q, want %s", out.Text(), what)
		}
		return f[1:]
	}
	checked := 0
	for _, c := range cases {
		for i, e := range c.Events {
			if e.Op != enginetest.Packet {
				continue
			}
			got := next("result")
			want := []string{e.Result.String(), map[bool]string{false: "0", true: "1"}[e.CompletesImm]}
			if got[0] != want[0] || got[1] != want[1] {
				t.Errorf("%s, event %d (imm %#x, %d B, gen %d): C engine %v, vectors %v", c.Name, i, e.Imm, e.Bytes, e.Generation, got, want)
			}
			checked++
		}
		flags, masks, imm := next("flags"), next("masks"), next("imm")
		if len(flags) != len(c.Expect.ChunkFlags) || len(masks) != len(c.Expect.Masks) {
			t.Fatalf("%s: %d flag words and %d masks, want %d and %d", c.Name, len(flags), len(masks), len(c.Expect.ChunkFlags), len(c.Expect.Masks))
		}
		for i, w := range c.Expect.ChunkFlags {
			if parseHex(t, flags[i]) != w {
				t.Errorf("%s: flag word %d %s, want %#x", c.Name, i, flags[i], w)
			}
		}
		for i, m := range c.Expect.Masks {
			if parseHex(t, masks[i]) != m {
				t.Errorf("%s: chunk %d mask %s, want %#x", c.Name, i, masks[i], m)
			}
		}
		if parseHex(t, imm[0]) != uint64(c.Expect.Imm) || (imm[1] == "1") != c.Expect.ImmComplete || (imm[2] == "1") != c.Expect.Truncated {
			t.Errorf("%s: immediate %v, want %#x complete %v truncated %v", c.Name, imm, c.Expect.Imm, c.Expect.ImmComplete, c.Expect.Truncated)
		}
	}
	if out.Scan() {
		t.Errorf("driver printed more: %q", out.Text())
	}
	if checked != events || checked == 0 {
		t.Fatalf("checked %d of %d events", checked, events)
	}
}
