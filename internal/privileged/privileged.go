// Package privileged gates tests that need root (network namespaces, veth,
// XDP and AF_XDP) or a system tool. Such a test skips, saying what is
// missing, on a developer's machine; where RequireEnv is set to 1 (CI, by
// .ci/run) the same gate fails the test instead, so a suite cannot pass
// there by skipping what it was meant to run.
package privileged

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RequireEnv names the environment switch that turns every skip of this
// package into a failure.
const RequireEnv = "SDR_REQUIRE_PRIVILEGED"

// Required reports whether RequireEnv is set to 1.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Require skips t, naming what is missing, unless the process runs as
// root; under RequireEnv=1 it fails t instead.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "needs root: creates network namespaces, veth pairs, XDP programs and AF_XDP sockets "+
			"(CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF, CAP_IPC_LOCK)")
	}
}

// RequireTool returns the path of the named program (`make deps` installs
// it), skipping t with why when it is missing; under RequireEnv=1 it fails
// t instead. why says what the test does with the tool.
func RequireTool(t testing.TB, name, why string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		unavailable(t, name+" not found ("+why+"): install it, as `make deps` does")
	}
	return path
}

// RequireFile skips t with why when path (a header or data file that
// `make deps` installs) is missing; under RequireEnv=1 it fails t instead.
func RequireFile(t testing.TB, path, why string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		unavailable(t, path+" not found ("+why+"): install it, as `make deps` does")
	}
}

// OptionalTool returns the path of the named program and true, or logs
// that the check it serves (why) is left out and returns false; under
// RequireEnv=1 a missing tool fails t.
func OptionalTool(t testing.TB, name, why string) (string, bool) {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path, true
	}
	msg := name + " not found: " + why + " left out; install it, as `make deps` does"
	if Required() {
		t.Fatalf("%s (%s=1: nothing may be left out)", msg, RequireEnv)
	}
	t.Log(msg)
	return "", false
}

func unavailable(t testing.TB, reason string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s (%s=1: this test must run, not skip)", reason, RequireEnv)
	}
	t.Skip(reason)
}

// TestBinaryForNobody copies the running test binary into a fresh
// directory that user nobody can reach and returns the copy's path and
// the directory: the way a privileged test reruns itself as an
// unprivileged user (the original usually sits where nobody may not go).
func TestBinaryForNobody(t testing.TB) (bin, dir string) {
	t.Helper()
	dir = t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, filepath.Base(os.Args[0]))
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, dir
}
