package driver_test

import (
	"os"
	"testing"

	"github.com/sdr-rdma/sdr/testbed/testbedtest"
)

// TestMain fails the run if a test leaves a network namespace behind
// (TestReliabilityXSK builds a testbed pair).
func TestMain(m *testing.M) { os.Exit(testbedtest.RunChecked(m)) }
