package devicetest

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestPRMLayout compiles the host side's DevX mailbox writer (../prm.h)
// with gcc and checks the bytes it writes for the commands the
// BlueField host side issues against hand-worked PRM byte vectors.
func TestPRMLayout(t *testing.T) {
	bin := compileC(t, "prm_test", []string{"-I" + filepath.Join("..")}, dev("test/prm_test.c"))
	if out := strings.TrimSpace(string(runC(t, bin, nil))); out != "ok prm" {
		t.Fatalf("prm_test printed:\n%s", out)
	}
}
