package privileged

import (
	"fmt"
	"runtime"
	"strings"
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
