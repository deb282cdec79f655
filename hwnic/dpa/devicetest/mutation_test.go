package devicetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/internal/privileged"
)

// orderingStatement matches the statements of handler.c that order memory
// for the hardware: window writebacks and read-invalidates, and fences.
var orderingStatement = regexp.MustCompile(`__dpa_thread_window_writeback\(\);|__dpa_thread_window_read_inv\(\);|__dpa_thread_fence\([^;]*\);`)

// functionDefinition matches the first line of a top-level C function
// definition in handler.c, the name in its group.
var functionDefinition = regexp.MustCompile(`(?m)^(?:static [^(\n]*?|__dpa_global__ void )\**(\w+)\(`)

// enclosingFunction returns the name of the C function whose body holds
// offset off of src (the last top-level definition line before it).
func enclosingFunction(src []byte, off int) string {
	defs := functionDefinition.FindAllSubmatchIndex(src[:off], -1)
	if len(defs) == 0 {
		return ""
	}
	d := defs[len(defs)-1]
	return string(src[d[2]:d[3]])
}

// TestHandlerMutations removes each writeback, read-invalidate and fence
// of handler.c in turn and runs the handler tests on hostsim's strict
// memory model (stores held until a writeback and performed in a random
// order, loads stale until a read-invalidate and performed there or
// later at random, CQE fields loaded before the owner byte unless a read
// fence orders them, doorbell records checked for the fence before
// them): each removal must make a test fail, or the model would not
// catch a handler that the hardware would not run correctly. The table
// of which check caught each removal is logged.
func TestHandlerMutations(t *testing.T) {
	privileged.RequireFile(t, "/usr/include/infiniband/mlx5dv.h", "rdma-core's mlx5 layouts from libibverbs-dev: the handler tests check the CQE layout against them")
	src, err := os.ReadFile(dev("handler.c"))
	if err != nil {
		t.Fatal(err)
	}
	sites := orderingStatement.FindAllIndex(src, -1)
	if len(sites) < 10 {
		t.Fatalf("found %d ordering statements in handler.c: the pattern no longer matches the code", len(sites))
	}
	abs, err := filepath.Abs(dev(""))
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	for _, site := range sites {
		line := 1 + bytes.Count(src[:site[0]], []byte("\n"))
		stmt := string(src[site[0]:site[1]])
		mutant := append(append(append([]byte{}, src[:site[0]]...), "(void)0;"...), src[site[1]:]...)
		dir := t.TempDir()
		file := filepath.Join(dir, "handler.c")
		if err := os.WriteFile(file, mutant, 0o644); err != nil {
			t.Fatal(err)
		}
		bin := compileC(t, fmt.Sprintf("mutant%d", line), []string{"-DSDR_HOSTSIM", "-I" + abs, "-I" + filepath.Join(abs, "hostsim")},
			file, dev("hostsim/hostsim.c"), dev("test/handler_test.c"))
		fn := enclosingFunction(src, site[0])
		caught := runMutant(bin)
		if caught == "" {
			t.Errorf("handler.c:%d (%s): with %s removed every handler test passes", line, fn, stmt)
		}
		fmt.Fprintf(&table, "\n  handler.c:%-4d %-16s %-52s %s", line, fn, stmt, caught)
	}
	t.Logf("each ordering statement removed in turn, and what failed:%s", table.String())
}

// runMutant runs a handler test program built from a mutated handler.c
// and returns how it failed: its first FAIL line or hostsim's abort
// message, "timeout" when it did not finish, or "" when it passed.
func runMutant(bin string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return "timeout (a test waited for what never became visible)"
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "FAIL") || strings.HasPrefix(l, "hostsim:") {
			return l
		}
	}
	if err != nil {
		return err.Error()
	}
	if got := strings.Count(out.String(), "ok "); got != len(handlerTests) {
		return fmt.Sprintf("%d of %d tests ran", got, len(handlerTests))
	}
	return ""
}
