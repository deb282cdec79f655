package simreport

import (
	"testing"
)

func TestParseScheme(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{
		{"sr-rto", "sr-rto"},
		{"SR-NACK", "sr-nack"},
		{"ec-mds(16, 4)", "ec-mds(16,4)"},
		{"ec-xor(32,8)", "ec-xor(32,8)"},
		{"hybrid", "hybrid-mds(32,8)"},
		{"hybrid-xor(8,2)", "hybrid-xor(8,2)"},
		{"auto", "auto"},
	} {
		got, err := ParseScheme(c.in)
		if err != nil || got.String() != c.want {
			t.Errorf("ParseScheme(%q) = %v, %v; want %s", c.in, got, err, c.want)
		}
	}
	list, err := ParseList("sr-rto, ec-mds(32,8),ec-xor(16,4)", ParseScheme)
	if err != nil || len(list) != 3 || list[2].String() != "ec-xor(16,4)" {
		t.Errorf("list: %+v, %v", list, err)
	}
	sizes, err := ParseList("128KiB,1MiB,2GiB,4096", ParseSize)
	if err != nil || len(sizes) != 4 || sizes[0] != 128<<10 || sizes[2] != 2<<30 || sizes[3] != 4096 {
		t.Errorf("sizes: %v, %v", sizes, err)
	}
}
