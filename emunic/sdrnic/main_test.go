package sdrnic_test

import (
	"os"
	"testing"

	"github.com/sdr-rdma/sdr/testbed"
)

// TestMain fails the run if a test leaves a network namespace behind.
func TestMain(m *testing.M) { os.Exit(testbed.RunChecked(m)) }
