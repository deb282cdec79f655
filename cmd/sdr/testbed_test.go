package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/testbed"
	"github.com/sdr-rdma/sdr/testbed/testbedtest"
)

// TestMain fails the run if a test leaves a network namespace behind.
func TestMain(m *testing.M) { os.Exit(testbedtest.RunChecked(m)) }

// TestTestbedClean plants leftover namespaces of every kind (mounted,
// shadowed beneath a bind mount of /run/netns with and without the top
// copy, a bare file) in a private mount namespace and expects `sdr
// testbed clean` to delete each, and a second run to find nothing.
func TestTestbedClean(t *testing.T) {
	privileged.Require(t)
	if !testbedtest.InPrivateMounts(t, time.Minute) {
		return
	}
	planted := testbedtest.PlantLeftovers(t, testbed.NamePrefix+"clean-")
	code, out, errOut := runSDR("testbed", "clean")
	if code != exitOK {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	for _, l := range planted {
		if !strings.Contains(out, "deleted "+l.Name+"\n") {
			t.Errorf("%s (%s) not reported deleted:\n%s", l.Name, l.Kind, out)
		}
		l.CheckGone(t)
	}
	if want := fmt.Sprintf("%d leftover namespaces deleted", len(planted)); !strings.Contains(out, want) {
		t.Errorf("want %q:\n%s", want, out)
	}
	if code, out, _ := runSDR("testbed", "clean"); code != exitOK || !strings.Contains(out, "0 leftover namespaces deleted") {
		t.Errorf("second clean: exit %d:\n%s", code, out)
	}
}
