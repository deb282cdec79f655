package testbed

import (
	"fmt"
	"os"
	"testing"
)

// RunChecked runs a package's tests and fails the run if they left a
// namespace behind, as testbedtest.RunChecked does. Test helpers do not
// belong in this package: new code uses testbedtest.RunChecked, and this
// goes once emunic/sdrnic's TestMain, the last caller, has moved.
func RunChecked(m *testing.M) int {
	code := m.Run()
	if err := CloseLive(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	return code
}
