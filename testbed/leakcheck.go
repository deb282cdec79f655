package testbed

import (
	"fmt"
	"os"
	"testing"
)

// RunChecked runs a package's tests and fails the run if they left a
// namespace behind, as testbedtest.RunChecked does.
//
// Deprecated: test helpers do not belong in this package; use
// testbedtest.RunChecked. This remains only until every test package has
// moved (emunic/sdrnic's TestMain is the last).
func RunChecked(m *testing.M) int {
	code := m.Run()
	if err := CloseLive(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	return code
}
