package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestDPAPlan(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"dpa", "plan", "-gbps", "400", "-mtu", "4KiB", "-chunk", "64KiB"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"12.21 Mpps", "16 packets", "0.675 µs", "2.325 µs", "9 (92 % busy)", "29 (98 % busy)", "assumptions:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"dpa", "plan", "-gbps", "100000", "-mtu", "64", "-chunk", "64"}, &out, &errb); code != exitOK ||
		!strings.Contains(out.String(), "DOES NOT FIT") {
		t.Errorf("exit %d, output:\n%s", code, out.String())
	}
	for _, args := range [][]string{{"dpa"}, {"dpa", "plan", "-chunk", "5000"}, {"dpa", "plan", "-mtu", "x"}, {"dpa", "plan", "-gbps", "0"}, {"dpa", "plan", "-rtt", "-1us"}} {
		if code := run(args, &out, &errb); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}
