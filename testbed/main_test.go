package testbed

import (
	"os"
	"testing"
)

// TestMain fails the run if a test leaves a network namespace behind.
func TestMain(m *testing.M) { os.Exit(RunChecked(m)) }
