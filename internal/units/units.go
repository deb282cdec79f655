// Package units reads and writes byte counts the way every command and
// the link model's text form take them: a whole number with an optional
// unit, binary (KiB, MiB, GiB) or decimal (KB, MB, GB), or B.
package units

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ErrNotBytes is returned for text that is no byte count.
var ErrNotBytes = errors.New("not a byte count")

// unit is a suffix and what it multiplies by.
type unit struct {
	name string
	mul  int64
}

// byteUnits lists the units largest first within each family, "B" last
// (the suffix of the others).
var byteUnits = []unit{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}

// ParseBytes reads a byte count: "65536", "64KiB", "8MB", "1GiB" (units
// match case-insensitively). Counts that overflow 2^62 are refused.
func ParseBytes(s string) (int64, error) {
	num, mul := s, int64(1)
	for _, u := range byteUnits {
		if n := len(s) - len(u.name); n >= 0 && strings.EqualFold(s[n:], u.name) {
			num, mul = s[:n], u.mul
			break
		}
	}
	v, err := strconv.ParseUint(strings.TrimSpace(num), 10, 62)
	if err != nil || v > math.MaxInt64/4/uint64(mul) {
		return 0, fmt.Errorf("%q: %w", s, ErrNotBytes)
	}
	return int64(v) * mul, nil
}

// FormatBytes writes n in the first unit of the list that divides it
// ("8MiB", "8MB", "1000B"); ParseBytes reads it back.
func FormatBytes(n int64) string {
	for _, u := range byteUnits {
		if n != 0 && n%u.mul == 0 {
			return strconv.FormatInt(n/u.mul, 10) + u.name
		}
	}
	return "0"
}
