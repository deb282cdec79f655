package link

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sdr-rdma/sdr/internal/units"
)

// ParseConfig reads the textual form of a Config, for flags and scenario
// files: comma-separated settings, each at most once, in any order, e.g.
//
//	rate=1Gbit,delay=10ms,jitter=1ms,loss=1%,dup=0.1%,corrupt=0.01%,queue=1MB,ecn=100KB/1MB/10%,mtu=1500,reorder,seed=7
//
// Settings:
//
//	rate=R          Bandwidth: a number with unit bit, Kbit, Mbit, Gbit or Tbit (×1000 each; case-insensitive)
//	delay=D         Delay, jitter=D Jitter: Go durations (10ms, 250us)
//	reorder         Reorder
//	loss=P          Bernoulli loss
//	ge=P/B          Gilbert–Elliott with mean loss P and mean burst B transmissions (GilbertElliott)
//	ge=G/B/L/H      general Gilbert–Elliott: GoodToBad/BadToGood/GoodLoss/BadLoss
//	dup=P, corrupt=P  Duplicate, Corrupt
//	queue=N         QueueBytes
//	ecn=N/N/P       ECNMinBytes/ECNMaxBytes/ECNMaxP
//	mtu=N           MTU
//	seed=N          Seed
//
// P is a probability, as a fraction (0.01) or a percentage (1%). N is a
// byte count: an integer with an optional unit B, KB, MB, GB (×1000 each)
// or KiB, MiB, GiB (×1024 each). The empty string is the perfect link. The
// result is validated; every error wraps ErrInvalid.
func ParseConfig(s string) (Config, error) {
	var c Config
	if strings.TrimSpace(s) == "" {
		return c, nil
	}
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		key, val, hasVal := strings.Cut(strings.TrimSpace(item), "=")
		key = strings.ToLower(key)
		if seen[key] || key == "ge" && seen["loss"] || key == "loss" && seen["ge"] {
			return Config{}, fmt.Errorf("link: %q: %q given twice: %w", s, key, ErrInvalid)
		}
		seen[key] = true
		if key != "reorder" && !hasVal {
			return Config{}, fmt.Errorf("link: %q: %q needs a value: %w", s, key, ErrInvalid)
		}
		if err := c.set(key, val); err != nil {
			return Config{}, fmt.Errorf("link: %q: %s: %w", s, key, err)
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("link: %q: %w", s, err)
	}
	return c, nil
}

// set parses one setting into c.
func (c *Config) set(key, val string) error {
	var err error
	switch key {
	case "rate":
		c.Bandwidth, err = parseRate(val)
	case "delay":
		c.Delay, err = parseDuration(val)
	case "jitter":
		c.Jitter, err = parseDuration(val)
	case "reorder":
		if val != "" {
			return fmt.Errorf("takes no value: %w", ErrInvalid)
		}
		c.Reorder = true
	case "loss":
		c.Loss.P, err = parseProb(val)
	case "ge":
		c.Loss, err = parseGE(val)
	case "dup":
		c.Duplicate, err = parseProb(val)
	case "corrupt":
		c.Corrupt, err = parseProb(val)
	case "queue":
		c.QueueBytes, err = parseBytes(val)
	case "mtu":
		c.MTU, err = parseBytes(val)
	case "ecn":
		f := strings.Split(val, "/")
		if len(f) != 3 {
			return fmt.Errorf("%q is not MIN/MAX/MAXP: %w", val, ErrInvalid)
		}
		if c.ECNMinBytes, err = parseBytes(f[0]); err == nil {
			if c.ECNMaxBytes, err = parseBytes(f[1]); err == nil {
				c.ECNMaxP, err = parseProb(f[2])
			}
		}
	case "seed":
		c.Seed, err = strconv.ParseUint(val, 10, 64)
		if err != nil {
			err = fmt.Errorf("%q: %w", val, ErrInvalid)
		}
	default:
		return fmt.Errorf("unknown setting: %w", ErrInvalid)
	}
	return err
}

// String returns the textual form ParseConfig reads back to c, settings
// at their zero value left out (the perfect link is ""). Numbers are
// printed exactly, with the largest unit that keeps them exact.
func (c Config) String() string {
	var b []string
	add := func(k, v string) { b = append(b, k+"="+v) }
	if c.Bandwidth != 0 {
		add("rate", formatRate(c.Bandwidth))
	}
	if c.Delay != 0 {
		add("delay", c.Delay.String())
	}
	if c.Jitter != 0 {
		add("jitter", c.Jitter.String())
	}
	if c.Reorder {
		b = append(b, "reorder")
	}
	switch l := c.Loss; {
	case l.GE:
		add("ge", formatGE(l))
	case l.P != 0:
		add("loss", formatProb(l.P))
	}
	if c.Duplicate != 0 {
		add("dup", formatProb(c.Duplicate))
	}
	if c.Corrupt != 0 {
		add("corrupt", formatProb(c.Corrupt))
	}
	if c.QueueBytes != 0 {
		add("queue", formatBytes(c.QueueBytes))
	}
	if c.ECNMinBytes != 0 || c.ECNMaxBytes != 0 || c.ECNMaxP != 0 {
		add("ecn", formatBytes(c.ECNMinBytes)+"/"+formatBytes(c.ECNMaxBytes)+"/"+formatProb(c.ECNMaxP))
	}
	if c.MTU != 0 {
		add("mtu", strconv.Itoa(c.MTU))
	}
	if c.Seed != 0 {
		add("seed", strconv.FormatUint(c.Seed, 10))
	}
	return strings.Join(b, ",")
}

// unit is a unit of a rate as printed; parsing matches it
// case-insensitively.
type unit struct {
	name string
	mul  float64
}

// rateUnits are the rate units, largest first (byte counts are
// internal/units').
var rateUnits = []unit{{"Tbit", 1e12}, {"Gbit", 1e9}, {"Mbit", 1e6}, {"Kbit", 1e3}, {"bit", 1}}

// splitUnit returns the number before one of units (or before nothing)
// and the unit's multiplier (1 without one).
func splitUnit(s string, units []unit) (string, float64) {
	for _, u := range units {
		if n := len(s) - len(u.name); n >= 0 && strings.EqualFold(s[n:], u.name) {
			return s[:n], u.mul
		}
	}
	return s, 1
}

func parseRate(s string) (float64, error) {
	num, mul := splitUnit(s, rateUnits)
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || !(v >= 0) || math.IsInf(v*mul, 0) {
		return 0, fmt.Errorf("%q is not a rate: %w", s, ErrInvalid)
	}
	return v*mul + 0, nil // −0 reads as 0
}

func formatRate(r float64) string {
	for _, u := range rateUnits {
		if r < u.mul && u.mul != 1 {
			continue // no "0.5Gbit" while "500Mbit" is exact
		}
		v := strconv.FormatFloat(r/u.mul, 'g', -1, 64)
		if back, err := parseRate(v + u.name); err == nil && back == r {
			return v + u.name
		}
	}
	return strconv.FormatFloat(r, 'g', -1, 64) + "bit"
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: %w", s, ErrInvalid)
	}
	return d, nil
}

func parseProb(s string) (float64, error) {
	num, pct := strings.CutSuffix(s, "%")
	v, err := strconv.ParseFloat(num, 64)
	if pct {
		v /= 100
	}
	if err != nil || !(v >= 0 && v <= 1) {
		return 0, fmt.Errorf("%q is not a probability: %w", s, ErrInvalid)
	}
	return v + 0, nil // −0 reads as 0
}

// formatProb prints p as a percentage when that reads back exactly, else
// as a fraction.
func formatProb(p float64) string {
	if v := strconv.FormatFloat(p*100, 'g', -1, 64) + "%"; p != 0 {
		if q, err := parseProb(v); err == nil && q == p {
			return v
		}
	}
	return strconv.FormatFloat(p, 'g', -1, 64)
}

func parseGE(s string) (Loss, error) {
	f := strings.Split(s, "/")
	var v [4]float64
	for i, x := range f {
		if len(f) != 2 && len(f) != 4 {
			break
		}
		var err error
		if len(f) == 2 && i == 1 {
			v[i], err = strconv.ParseFloat(x, 64) // the burst length
			if err == nil && !(v[i] >= 1 && !math.IsInf(v[i], 1)) {
				err = ErrInvalid
			}
		} else {
			v[i], err = parseProb(x)
		}
		if err != nil {
			return Loss{}, fmt.Errorf("%q: %q: %w", s, x, ErrInvalid)
		}
	}
	switch len(f) {
	case 2:
		if v[0] >= 1 {
			return Loss{}, fmt.Errorf("%q: mean loss below 100%% needed: %w", s, ErrInvalid)
		}
		return GilbertElliott(v[0], v[1]), nil
	case 4:
		return Loss{GE: true, GoodToBad: v[0], BadToGood: v[1], GoodLoss: v[2], BadLoss: v[3]}, nil
	}
	return Loss{}, fmt.Errorf("%q is not RATE/BURST or G2B/B2G/GOODLOSS/BADLOSS: %w", s, ErrInvalid)
}

// formatGE prints l as RATE/BURST when that reads back exactly, else in
// the general form.
func formatGE(l Loss) string {
	if rate, burst := l.Rate(), l.MeanBurst(); !math.IsNaN(burst) && rate < 1 {
		v := formatProb(rate) + "/" + strconv.FormatFloat(burst, 'g', -1, 64)
		if back, err := parseGE(v); err == nil && back == l {
			return v
		}
	}
	return formatProb(l.GoodToBad) + "/" + formatProb(l.BadToGood) + "/" + formatProb(l.GoodLoss) + "/" + formatProb(l.BadLoss)
}

func parseBytes(s string) (int, error) {
	n, err := units.ParseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a byte count: %w", s, ErrInvalid)
	}
	return int(n), nil
}

func formatBytes(n int) string { return units.FormatBytes(int64(n)) }
