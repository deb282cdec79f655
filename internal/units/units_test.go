package units

import (
	"errors"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "65536": 65536, "64KiB": 64 << 10, "64kib": 64 << 10, "8MB": 8e6,
		"1GiB": 1 << 30, "2GB": 2e9, "1000B": 1000, "16MiB": 16 << 20} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1.5MiB", "1TiB", "99999999999GiB", "12 apples", "0x10"} {
		if got, err := ParseBytes(in); !errors.Is(err, ErrNotBytes) {
			t.Errorf("ParseBytes(%q) = %d, %v; want ErrNotBytes", in, got, err)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1000: "1KB", 1024: "1KiB", 8e6: "8MB", 8 << 20: "8MiB", 1001: "1001B"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseBytes(FormatBytes(n)); err != nil || back != n {
			t.Errorf("ParseBytes(FormatBytes(%d)) = %d, %v", n, back, err)
		}
	}
}

// FuzzParseBytes: any text either fails with ErrNotBytes or reads a count
// that FormatBytes writes back to the same count.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"64KiB", "8MB", "1000", "1GiB", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err != nil {
			if !errors.Is(err, ErrNotBytes) {
				t.Fatalf("ParseBytes(%q): %v", s, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseBytes(%q) = %d", s, n)
		}
		if back, err := ParseBytes(FormatBytes(n)); err != nil || back != n {
			t.Fatalf("ParseBytes(FormatBytes(%d)) = %d, %v", n, back, err)
		}
	})
}
