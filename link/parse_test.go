package link

import (
	"errors"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Config
		out  string // String of the result
	}{
		{"", Config{}, ""},
		{"rate=1Gbit,delay=10ms,jitter=1ms,loss=1%,dup=0.1%,corrupt=0.01%,queue=1MB,ecn=100KB/1MB/10%,mtu=1500,reorder",
			Config{Bandwidth: 1e9, Delay: 10 * time.Millisecond, Jitter: time.Millisecond, Loss: Bernoulli(0.01),
				Duplicate: 0.001, Corrupt: 0.0001, QueueBytes: 1_000_000, ECNMinBytes: 100_000, ECNMaxBytes: 1_000_000,
				ECNMaxP: 0.1, MTU: 1500, Reorder: true},
			"rate=1Gbit,delay=10ms,jitter=1ms,reorder,loss=1%,dup=0.1%,corrupt=0.01%,queue=1MB,ecn=100KB/1MB/10%,mtu=1500"},
		{" RATE=200mbit , ge=1%/4, seed=7", Config{Bandwidth: 200e6, Loss: GilbertElliott(0.01, 4), Seed: 7},
			"rate=200Mbit,ge=1%/4,seed=7"},
		{"ge=0.01/0.2/0.001/0.3,queue=64KiB", Config{Loss: Loss{GE: true, GoodToBad: 0.01, BadToGood: 0.2, GoodLoss: 0.001, BadLoss: 0.3},
			QueueBytes: 65536}, "ge=1%/20%/0.1%/30%,queue=64KiB"},
		{"rate=123456789,loss=0.0123", Config{Bandwidth: 123456789, Loss: Bernoulli(0.0123)}, "rate=123.456789Mbit,loss=1.23%"},
		{"rate=1.5Kbit,queue=1500", Config{Bandwidth: 1500, QueueBytes: 1500}, "rate=1.5Kbit,queue=1500B"},
	} {
		got, err := ParseConfig(c.in)
		if err != nil {
			t.Errorf("ParseConfig(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseConfig(%q) = %+v, want %+v", c.in, got, c.want)
		}
		if s := got.String(); s != c.out {
			t.Errorf("String() = %q, want %q", s, c.out)
		}
		if back, err := ParseConfig(got.String()); err != nil || back != got {
			t.Errorf("%q does not read back: %+v, %v", got.String(), back, err)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, in := range []string{
		"rate", "rate=fast", "rate=-1bit", "rate=1e400bit", "delay=10", "delay=-1ms", "jitter=2ms,delay=1ms",
		"loss=2", "loss=-1%", "loss=NaN", "loss=1%,ge=1%/2", "ge=1%", "ge=1%/0.5", "ge=100%/4", "ge=1/2/3/4",
		"dup=150%", "corrupt=x", "queue=1.5MB", "queue=-1", "queue=99999999999GB", "mtu=-1", "ecn=1KB/2KB",
		"ecn=2KB/1KB/10%", "ecn=1KB/2KB/10%", "seed=-1", "reorder=yes", "delay=1ms,delay=2ms", "warp=9", ",",
	} {
		if c, err := ParseConfig(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseConfig(%q) = %+v, %v; want ErrInvalid", in, c, err)
		}
	}
}

// FuzzParseConfig: whatever parses is valid, and its String reads back to
// the same configuration and the same text.
func FuzzParseConfig(f *testing.F) {
	f.Add("rate=1Gbit,delay=10ms,jitter=1ms,loss=1%,dup=0.1%,corrupt=0.01%,queue=1MB,ecn=100KB/1MB/10%,mtu=1500,reorder")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseConfig(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseConfig(%q): %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig(%q) returned an invalid %+v: %v", s, c, err)
		}
		text := c.String()
		back, err := ParseConfig(text)
		if err != nil || back != c {
			t.Fatalf("ParseConfig(%q) = %+v; its String %q reads back as %+v, %v", s, c, text, back, err)
		}
		if back.String() != text {
			t.Fatalf("String not stable: %q then %q", text, back.String())
		}
	})
}
