package devicetest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/wire"
)

// vectorFile is the part of sdr/engine/testdata/vectors.json the C engine
// is checked against (the format is described in the file itself).
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
			Op           string `json:"op"`
			MsgID        uint32 `json:"msg_id"`
			Generation   uint32 `json:"generation"`
			Imm          string `json:"imm"`
			Bytes        uint32 `json:"bytes"`
			Result       string `json:"result"`
			CompletesImm bool   `json:"completes_imm"`
		} `json:"events"`
		Expect struct {
			ChunkFlags  []string `json:"chunk_flags"`
			Masks       []string `json:"masks"`
			Imm         string   `json:"imm"`
			ImmComplete bool     `json:"imm_complete"`
			Truncated   bool     `json:"truncated"`
		} `json:"expect"`
	} `json:"cases"`
}

func parseHex(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		t.Fatalf("bad number %q: %v", s, err)
	}
	return v
}

// TestEngineVectors runs every event of the Go engine's vectors through
// engine.h (compiled with gcc) and compares each result, the
// immediate-completion flag and the final state.
func TestEngineVectors(t *testing.T) {
	data, err := os.ReadFile("../../../sdr/engine/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file vectorFile
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) < 11 {
		t.Fatalf("only %d cases in the vector file", len(file.Cases))
	}
	var script bytes.Buffer
	events := 0
	for _, c := range file.Cases {
		l, err := wire.ParseImmLayout(c.Layout)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&script, "case %d %d %d %d %d %d %d %d %d\n", l.MsgIDBits, l.OffsetBits, l.NibbleBits,
			c.MTU, c.ChunkSize, c.Slot.Length, map[bool]int{false: 0, true: 1}[c.Slot.Active], c.Slot.MsgID, c.Slot.Generation)
		for _, e := range c.Events {
			switch e.Op {
			case "":
				fmt.Fprintf(&script, "pkt %d %x %d\n", e.Generation, parseHex(t, e.Imm), e.Bytes)
				events++
			case "activate":
				fmt.Fprintf(&script, "activate %d %d\n", e.MsgID, e.Generation)
			case "deactivate":
				fmt.Fprintln(&script, "deactivate")
			default:
				t.Fatalf("case %q: unknown op %q", c.Name, e.Op)
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
	for _, c := range file.Cases {
		for i, e := range c.Events {
			if e.Op != "" {
				continue
			}
			got := next("result")
			want := []string{e.Result, map[bool]string{false: "0", true: "1"}[e.CompletesImm]}
			if got[0] != want[0] || got[1] != want[1] {
				t.Errorf("%s, event %d (imm %s, %d B, gen %d): C engine %v, vectors %v", c.Name, i, e.Imm, e.Bytes, e.Generation, got, want)
			}
			checked++
		}
		flags, masks, imm := next("flags"), next("masks"), next("imm")
		if len(flags) != len(c.Expect.ChunkFlags) || len(masks) != len(c.Expect.Masks) {
			t.Fatalf("%s: %d flag words and %d masks, want %d and %d", c.Name, len(flags), len(masks), len(c.Expect.ChunkFlags), len(c.Expect.Masks))
		}
		for i, w := range c.Expect.ChunkFlags {
			if parseHex(t, "0x"+flags[i]) != parseHex(t, w) {
				t.Errorf("%s: flag word %d %s, want %s", c.Name, i, flags[i], w)
			}
		}
		for i, m := range c.Expect.Masks {
			if parseHex(t, "0x"+masks[i]) != parseHex(t, m) {
				t.Errorf("%s: chunk %d mask %s, want %s", c.Name, i, masks[i], m)
			}
		}
		if parseHex(t, "0x"+imm[0]) != parseHex(t, c.Expect.Imm) || (imm[1] == "1") != c.Expect.ImmComplete || (imm[2] == "1") != c.Expect.Truncated {
			t.Errorf("%s: immediate %v, want %s complete %v truncated %v", c.Name, imm, c.Expect.Imm, c.Expect.ImmComplete, c.Expect.Truncated)
		}
	}
	if out.Scan() {
		t.Errorf("driver printed more: %q", out.Text())
	}
	if checked != events || checked == 0 {
		t.Fatalf("checked %d of %d events", checked, events)
	}
}
