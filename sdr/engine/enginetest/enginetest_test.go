package enginetest

import (
	"strings"
	"testing"
)

// TestLoad reads the real file: every case has a layout, and packets
// events parse into results.
func TestLoad(t *testing.T) {
	cases, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	packets := 0
	for _, c := range cases {
		if c.Layout.MsgIDBits == 0 || c.MTU == 0 {
			t.Errorf("case %q: layout %v, MTU %d", c.Name, c.Layout, c.MTU)
		}
		for _, e := range c.Events {
			if e.Op == Packet {
				packets++
			}
		}
	}
	if packets == 0 {
		t.Fatal("no packet events")
	}
}

// TestParseRejects checks that a damaged file fails with the case named,
// rather than yielding a case that tests nothing.
func TestParseRejects(t *testing.T) {
	good := `{"name":"c%d","layout":"10/18/4","mtu":1024,"chunk_size":4096,"slot":{"length":1024},
		"events":[{"imm":"0x1","bytes":1024,"result":"packet"}],"expect":{"chunk_flags":["0x1"],"masks":["0x1"],"imm":"0x0"}}`
	file := func(last string) []byte {
		var cs []string
		for range minCases - 1 {
			cs = append(cs, good)
		}
		return []byte(`{"cases":[` + strings.Join(append(cs, last), ",") + `]}`)
	}
	if _, err := Parse(file(good)); err != nil {
		t.Fatalf("good file: %v", err)
	}
	for bad, want := range map[string]string{
		strings.Replace(good, `"packet"`, `"pakcet"`, 1):              "unknown result",
		strings.Replace(good, `"0x1","bytes"`, `"0xg","bytes"`, 1):    "bad number",
		strings.Replace(good, `"10/18/4"`, `"10/18"`, 1):              "c%d",
		strings.Replace(good, `"imm":"0x1",`, `"op":"reset",`, 1):     "unknown op",
		strings.Replace(good, `"masks":["0x1"]`, `"masks":["1x"]`, 1): "bad number",
	} {
		if _, err := Parse(file(bad)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", bad, err, want)
		}
	}
	if _, err := Parse([]byte(`{"cases":[` + good + `]}`)); err == nil {
		t.Error("a file of one case accepted")
	}
}
