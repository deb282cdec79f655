package simreport

import (
	"testing"

	"github.com/sdr-rdma/sdr/reliability"
	"github.com/sdr-rdma/sdr/reliability/ec"
)

func TestParseScheme(t *testing.T) {
	for _, c := range []struct {
		in     string
		label  string
		scheme reliability.Scheme
		code   ec.Params
	}{
		{"sr-rto", "sr-rto", reliability.SRRTO, ec.Params{}},
		{"SR-NACK", "sr-nack", reliability.SRNACK, ec.Params{}},
		{"ec-mds(16, 4)", "ec-mds(16,4)", reliability.EC, ec.Params{Kind: ec.MDS, K: 16, M: 4}},
		{"ec-xor(32,8)", "ec-xor(32,8)", reliability.EC, ec.Params{Kind: ec.XOR, K: 32, M: 8}},
		{"hybrid", "hybrid-mds(32,8)", reliability.Hybrid, ec.Params{Kind: ec.MDS, K: 32, M: 8}},
		{"hybrid-xor(8,2)", "hybrid-xor(8,2)", reliability.Hybrid, ec.Params{Kind: ec.XOR, K: 8, M: 2}},
		{"auto", "auto", reliability.Auto, ec.Params{}},
	} {
		got, err := ParseScheme(c.in)
		if err != nil || got.label != c.label || got.scheme != c.scheme || got.code != c.code {
			t.Errorf("ParseScheme(%q) = %+v, %v", c.in, got, err)
		}
	}
	list, err := ParseList("sr-rto, ec-mds(32,8),ec-xor(16,4)", ParseScheme)
	if err != nil || len(list) != 3 || list[2].label != "ec-xor(16,4)" {
		t.Errorf("list: %+v, %v", list, err)
	}
	sizes, err := ParseList("128KiB,1MiB,2GiB,4096", ParseSize)
	if err != nil || len(sizes) != 4 || sizes[0] != 128<<10 || sizes[2] != 2<<30 || sizes[3] != 4096 {
		t.Errorf("sizes: %v, %v", sizes, err)
	}
}
