package scheme

import (
	"errors"
	"testing"

	"github.com/sdr-rdma/sdr/reliability/ec"
)

// TestParse: every form the commands take, and the ones they refuse.
func TestParse(t *testing.T) {
	for in, want := range map[string]Scheme{
		"sr-rto":            {Kind: SRRTO},
		" SR-NACK ":         {Kind: SRNACK},
		"auto":              {Kind: Auto},
		"ec":                {Kind: EC},
		"hybrid":            {Kind: Hybrid},
		"ec-mds(32,8)":      {Kind: EC, Code: ec.Params{Kind: ec.MDS, K: 32, M: 8}},
		"Hybrid-XOR(8, 2)":  {Kind: Hybrid, Code: ec.Params{Kind: ec.XOR, K: 8, M: 2}},
		"ec-xor(16,4)":      {Kind: EC, Code: ec.Params{Kind: ec.XOR, K: 16, M: 4}},
		"hybrid-mds(200,8)": {Kind: Hybrid, Code: ec.Params{Kind: ec.MDS, K: 200, M: 8}},
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("Parse(%q).Validate: %v", in, err)
		}
	}
	for _, in := range []string{"", "tcp", "sr-nack-mds(32,8)", "auto-mds(4,2)", "ec-", "ec-mds", "ec-xor(2,4)", "ec-mds(300,8)", "ec mds(32,8)", "kind(9)"} {
		if got, err := Parse(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %+v, %v; want ErrInvalid", in, got, err)
		}
	}
}

// TestString: a scheme prints as Parse reads it; a code on an SR scheme
// or an unknown kind fails Validate.
func TestString(t *testing.T) {
	for _, s := range []Scheme{{Kind: SRRTO}, {Kind: SRNACK}, {Kind: EC}, {Kind: Auto}, {Kind: Hybrid, Code: DefaultCode}, {Kind: EC, Code: ec.Params{Kind: ec.XOR, K: 8, M: 2}}} {
		if again, err := Parse(s.String()); err != nil || again != s {
			t.Errorf("%+v prints %q, which parses to %+v, %v", s, s, again, err)
		}
	}
	if got := (Scheme{Kind: EC}).WithDefaultCode().String(); got != "ec-mds(32,8)" {
		t.Errorf("ec with the default code prints %q", got)
	}
	if got := (Scheme{Kind: SRNACK}).WithDefaultCode(); got != (Scheme{Kind: SRNACK}) {
		t.Errorf("sr-nack with the default code: %+v, want no code", got)
	}
	for _, bad := range []Scheme{{}, {Kind: 9}, {Kind: SRNACK, Code: DefaultCode}, {Kind: EC, Code: ec.Params{Kind: ec.XOR, K: 2, M: 4}}} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v.Validate() = %v, want ErrInvalid", bad, err)
		}
	}
}

// FuzzParse: any name either parses to a valid scheme whose String parses
// back to it, or fails with ErrInvalid; nothing panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"sr-rto", "SR-NACK", " ec-mds(32,8)", "hybrid-xor(8,2) ", "", "ec", "kind(9)", "ec-xor(2,4)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		s, err := Parse(name)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q): %v, not ErrInvalid", name, err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse(%q) = %+v, which fails Validate: %v", name, s, err)
		}
		if again, err := Parse(s.String()); err != nil || again != s {
			t.Fatalf("Parse(%q) = %+v, but %q parses to %+v, %v", name, s, s, again, err)
		}
	})
}
