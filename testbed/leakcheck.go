package testbed

import (
	"fmt"
	"os"
	"testing"
)

// RunChecked runs a package's tests (call it from TestMain) and fails the
// run if any namespace created through this package is still there
// afterwards, deleting it so the next run starts clean.
func RunChecked(m *testing.M) int {
	code := m.Run()
	if left := Live(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "testbed: tests left %d network namespaces behind: %v\n", len(left), left)
		for _, name := range left {
			(&Namespace{Name: name}).Close()
		}
		if code == 0 {
			code = 1
		}
	}
	return code
}
