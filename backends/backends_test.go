package backends

import (
	"errors"
	"testing"
)

func TestResolve(t *testing.T) {
	for _, tc := range []struct{ name, override, want string }{
		{"", "", Default},
		{"mlx5_0", "", "mlx5_0"},
		{"mlx5_0", "udp:10.0.0.1", "udp:10.0.0.1"},
		{"", "pipe:x", "pipe:x"},
	} {
		got := Resolve(tc.name, func(k string) string {
			if k == Env {
				return tc.override
			}
			return ""
		})
		if got != tc.want {
			t.Errorf("Resolve(%q) with SDR_DEVICE=%q = %q, want %q", tc.name, tc.override, got, tc.want)
		}
	}
}

func TestOpen(t *testing.T) {
	for _, bad := range []string{"mlx5_0", "udp:", "udp:not-an-ip", "bogus:x", "pipe:p/loss=lots",
		"xsk:no-such-interface", "udp:@no-such-interface"} {
		if d, err := Open(bad, Options{}); err == nil {
			d.Close()
			t.Errorf("Open(%q) succeeded", bad)
		}
	}
	if _, err := Open("mlx5_0", Options{}); !errors.Is(err, ErrUnknown) {
		t.Errorf("a bare verbs name: %v, want ErrUnknown", err)
	}
	if _, err := Open("dpa:mlx5_0", Options{RC: true}); err == nil {
		t.Error("RC channels on the BlueField accepted")
	}
	a, err := Open("pipe:backends-test/delay=1ms", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open("pipe:backends-test", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.NIC == nil || b.NIC == nil || a.Addr == b.Addr {
		t.Errorf("pipe ends %v and %v", a.Addr, b.Addr)
	}
	u, err := Open("udp:127.0.11.1", Options{RC: true})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if u.Addr.String() != "127.0.11.1" || u.Backend == nil {
		t.Errorf("udp device at %v", u.Addr)
	}
	// (udp:@lo would bind 127.0.0.1:4791, which other packages' tests
	// use concurrently; the interface lookup is hostnet's, tested there.)
}
