package ebpf_test

import (
	"github.com/sdr-rdma/sdr/testbed"
	"os"
	"testing"
)

// TestMain fails the run if a test leaves a network namespace behind.
func TestMain(m *testing.M) { os.Exit(testbed.RunChecked(m)) }
