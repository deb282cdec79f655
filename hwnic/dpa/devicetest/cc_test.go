package devicetest

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sdr-rdma/sdr/internal/privileged"
)

// dev returns the path of a file of the device C.
func dev(name string) string { return filepath.Join("..", "device", name) }

// compileC builds a test program from sources with gcc and returns its
// path; it skips when gcc is absent (CI installs it).
func compileC(t *testing.T, name string, flags []string, sources ...string) string {
	t.Helper()
	gcc := privileged.RequireTool(t, "gcc", "compiles the device C")
	out := filepath.Join(t.TempDir(), name)
	args := append([]string{"-std=c11", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE", "-o", out}, flags...)
	args = append(args, sources...)
	args = append(args, "-lpthread")
	cmd := exec.Command(gcc, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, stderr.String())
	}
	return out
}

// runC runs a compiled test program with stdin and returns its stdout,
// failing the test on a non-zero exit (printing stderr, where
// ThreadSanitizer reports).
func runC(t *testing.T, bin string, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), args, err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Fatalf("%s wrote to stderr:\n%s", filepath.Base(bin), stderr.String())
	}
	return stdout.Bytes()
}
