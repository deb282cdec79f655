package simreport

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/sdr-rdma/sdr/internal/units"
)

func ParseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	depth, start := 0, 0
	for i := 0; i <= len(s); i++ { // split at commas outside parentheses
		if i < len(s) {
			switch s[i] {
			case '(':
				depth++
				continue
			case ')':
				depth--
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		if item := strings.TrimSpace(s[start:i]); item != "" {
			v, err := parse(item)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		start = i + 1
	}
	return out, nil
}

// ParseSize parses a positive byte count up to 1 TiB (internal/units).
func ParseSize(s string) (int64, error) {
	n, err := units.ParseBytes(s)
	if err != nil || n <= 0 || n > 1<<40 {
		return 0, fmt.Errorf("size %q: want a positive byte count up to 1 TiB, e.g. 128KiB", s)
	}
	return n, nil
}

func ParseDrop(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= 0 && v < 1) {
		return 0, fmt.Errorf("drop rate %q: want a number in [0, 1)", s)
	}
	return v, nil
}

func simParsePositive(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q: want a positive number", s)
	}
	return v, nil
}
