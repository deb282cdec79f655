package privileged

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

// recorder is a testing.TB that records how a gate ended the test
// instead of ending it: Skip and Fatal stop the calling goroutine.
type recorder struct {
	testing.TB
	skipped, failed, logged string
}

func (r *recorder) Helper()          {}
func (r *recorder) Log(args ...any)  { r.logged = fmt.Sprint(args...) }
func (r *recorder) Skip(args ...any) { r.skipped = fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatalf(f string, args ...any) {
	r.failed = fmt.Sprintf(f, args...)
	runtime.Goexit()
}

// gate runs fn on its own goroutine, which Skip and Fatal end.
func gate(fn func(*recorder)) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	return r
}

const missing = "sdr-no-such-tool"

func TestMissingToolSkipsOrFails(t *testing.T) {
	t.Setenv(RequireEnv, "")
	r := gate(func(r *recorder) { RequireTool(r, missing, "checks nothing") })
	if r.skipped == "" || r.failed != "" || !strings.Contains(r.skipped, missing) {
		t.Errorf("without %s: skipped %q, failed %q", RequireEnv, r.skipped, r.failed)
	}
	r = gate(func(r *recorder) {
		if _, ok := OptionalTool(r, missing, "a cross-check"); ok {
			r.failed = "found a tool that does not exist"
		}
	})
	if r.skipped != "" || r.failed != "" || !strings.Contains(r.logged, "a cross-check left out") {
		t.Errorf("optional without %s: skipped %q, failed %q, logged %q", RequireEnv, r.skipped, r.failed, r.logged)
	}

	t.Setenv(RequireEnv, "1")
	for name, fn := range map[string]func(*recorder){
		"RequireTool":  func(r *recorder) { RequireTool(r, missing, "checks nothing") },
		"OptionalTool": func(r *recorder) { OptionalTool(r, missing, "a cross-check") },
	} {
		r := gate(fn)
		if r.failed == "" || r.skipped != "" || !strings.Contains(r.failed, RequireEnv+"=1") {
			t.Errorf("%s with %s=1: skipped %q, failed %q", name, RequireEnv, r.skipped, r.failed)
		}
	}
}

func TestPresentToolPasses(t *testing.T) {
	t.Setenv(RequireEnv, "1")
	var path string
	r := gate(func(r *recorder) { path = RequireTool(r, "go", "runs the tests") })
	if r.failed != "" || r.skipped != "" || !strings.HasSuffix(path, "/go") {
		t.Errorf("go: path %q, skipped %q, failed %q", path, r.skipped, r.failed)
	}
}

// childEnv makes this test binary, started by TestRequireWithoutRoot as
// an unprivileged user, run Require and print how it ended the test.
const childEnv = "SDR_PRIVILEGED_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		r := gate(func(r *recorder) { Require(r) })
		fmt.Printf("skipped: %q\nfailed: %q\n", r.skipped, r.failed)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRequireWithoutRoot runs Require in a copy of this test binary as
// user nobody: it skips the test, and fails it under RequireEnv=1.
func TestRequireWithoutRoot(t *testing.T) {
	Require(t) // to switch to another user
	bin, dir := TestBinaryForNobody(t)
	for _, c := range []struct{ env, want string }{{"", `skipped: "needs root`}, {"1", `failed: "needs root`}} {
		cmd := exec.Command(bin)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), childEnv+"=1", RequireEnv+"="+c.env)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%s=%q as nobody: want %q: %v\n%s", RequireEnv, c.env, c.want, err, out)
		}
	}
}
