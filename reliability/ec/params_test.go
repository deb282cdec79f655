package ec

import (
	"errors"
	"flag"
	"io"
	"testing"
)

func TestParamsRoundTrip(t *testing.T) {
	for _, p := range []Params{{MDS, 32, 8}, {XOR, 32, 8}, {MDS, 1, 255}, {XOR, 5, 5}, {MDS, 200, 56}} {
		if err := p.Validate(); err != nil {
			t.Fatalf("%v: Validate: %v", p, err)
		}
		q, err := ParseParams(p.String())
		if err != nil || q != p {
			t.Fatalf("ParseParams(%q) = %v, %v; want %v", p.String(), q, err, p)
		}
	}
	if got := (Params{MDS, 32, 8}).String(); got != "mds(32,8)" {
		t.Fatalf("String = %q", got)
	}
	q, err := ParseParams(" XOR( 16 , 4 ) ")
	if err != nil || q != (Params{XOR, 16, 4}) {
		t.Fatalf("lenient parse = %v, %v", q, err)
	}
}

func TestParamsInvalid(t *testing.T) {
	for _, p := range []Params{
		{}, {Kind: 3, K: 4, M: 2}, {MDS, 0, 2}, {MDS, 4, 0}, {MDS, -1, 2},
		{MDS, 250, 7}, {XOR, 4, 5}, {XOR, 0, 0},
	} {
		if err := p.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%v: Validate = %v, want ErrInvalid", p, err)
		}
	}
	for _, s := range []string{
		"", "mds", "mds(", "mds(32)", "mds(32,8", "mds(32,8)x", "rs(32,8)", "mds(a,8)",
		"mds(32,b)", "xor(4,5)", "mds(250,7)", "mds(0,1)", "mds(1,2,3)",
	} {
		if p, err := ParseParams(s); !errors.Is(err, ErrInvalid) || p != (Params{}) {
			t.Errorf("ParseParams(%q) = %v, %v; want zero, ErrInvalid", s, p, err)
		}
	}
	if k, err := ParseKind("lrc"); !errors.Is(err, ErrInvalid) || k != 0 {
		t.Errorf("ParseKind(lrc) = %v, %v", k, err)
	}
	if s := Kind(7).String(); s != "Kind(7)" {
		t.Errorf("Kind(7).String() = %q", s)
	}
}

func TestParamsFlag(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var p Params
	fs.TextVar(&p, "ec", Params{MDS, 32, 8}, "code")
	if p != (Params{MDS, 32, 8}) {
		t.Fatalf("default = %v", p)
	}
	if err := fs.Parse([]string{"-ec", "xor(8,2)"}); err != nil || p != (Params{XOR, 8, 2}) {
		t.Fatalf("parse = %v, %v", p, err)
	}
	if err := fs.Parse([]string{"-ec", "xor(2,8)"}); err == nil {
		t.Fatal("invalid flag value accepted")
	}
}
