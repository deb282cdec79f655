package devicetest

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
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
		caught := runMutant(bin, "", "")
		if caught == "" {
			t.Errorf("handler.c:%d (%s): with %s removed every handler test passes", line, fn, stmt)
		}
		fmt.Fprintf(&table, "\n  handler.c:%-4d %-16s %-52s %s", line, fn, stmt, caught)
	}
	t.Logf("each ordering statement removed in turn, and what failed:%s", table.String())
}

// runMutant runs a handler test program built from mutated sources,
// the named test only when test is not empty, with the strict model
// seeded by seed ("" for the program's default), and returns how it
// failed: its first FAIL line or hostsim's abort message, "timeout" when
// it did not finish, or "" when it passed.
func runMutant(bin, test, seed string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var args []string
	if test != "" {
		args = append(args, test)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	if seed != "" {
		cmd.Env = append(os.Environ(), "HOSTSIM_SEED="+seed)
	}
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
	want := len(handlerTests)
	if test != "" {
		want = 1
	}
	if got := strings.Count(out.String(), "ok "); got != want {
		return fmt.Sprintf("%d of %d tests ran", got, want)
	}
	return ""
}

// edit is one change of a mutant: the text old matches (a regular
// expression) becomes new. It must match exactly once.
type edit struct{ old, new string }

// literal is an edit of an exact text.
func literal(old, new string) edit { return edit{regexp.QuoteMeta(old), new} }

// namedMutants are changes the sweep of ordering statements does not
// make, each with the handler test that must fail on it under every
// seed of mutantSeeds: reorders that keep every statement, layouts that
// put a host word in a line the handlers write, and the two halves of
// the re-arm (the handler's epoch check, the arm path's order).
var namedMutants = []struct {
	name, test, file string
	edits            []edit
}{
	{"notify: the producer index stored and written back before its entry", "consumer_during_run", "handler.c", []edit{literal(
		`	window_store(&n->slot[pi & ((1ull << n->log_cap) - 1)], slot, __ATOMIC_RELAXED);
	__dpa_thread_window_writeback();
	window_store(&n->pi, pi + 1, __ATOMIC_RELEASE);
	__dpa_thread_window_writeback();`,
		`	window_store(&n->pi, pi + 1, __ATOMIC_RELEASE);
	__dpa_thread_window_writeback();
	window_store(&n->slot[pi & ((1ull << n->log_cap) - 1)], slot, __ATOMIC_RELAXED);
	__dpa_thread_window_writeback();`)}},
	{"publish: the immediate written back first, then the flag stored before the mask", "consumer_during_run", "handler.c", []edit{literal(
		`	if (imm_changed)
		publish_line(s, slot_words, host, 1, f, done);
	if (masked)
		publish_line(s, slot_words, host, SDR_HEADER_WORDS + chunk, f, done);
	__dpa_thread_window_writeback();
	if (!done)
		return;
	publish_line(s, slot_words, host, f, f, 0);
	__dpa_thread_window_writeback();`,
		`	if (imm_changed) {
		publish_line(s, slot_words, host, 1, f, done);
		__dpa_thread_window_writeback();
	}
	if (done)
		publish_line(s, slot_words, host, f, f, 0);
	if (masked)
		publish_line(s, slot_words, host, SDR_HEADER_WORDS + chunk, f, 0);
	__dpa_thread_window_writeback();`)}},
	{"layout: the consumer index in the handler's header line (its asserts gone)", "consumer_during_run", "sdr_rx.h", []edit{
		literal("\tuint32_t pad0[11];\n\tuint64_t ci; ", "\tuint32_t pad0;\n\tuint64_t ci; "),
		literal("\tuint64_t overflows_seen;", "\tuint32_t pad0b[8];\n\tuint64_t overflows_seen;"),
		{`(?s)_Static_assert\(offsetof\(struct sdr_rx_notify, pi\).*?lines of their own"\);`, ""},
	}},
	{"layout: the state word in the first line of the handlers' words (its assert gone)", "late_packet_rearm", "sdr_rx.h", []edit{
		literal("#define SDR_RX_STATE_WORD (SDR_RX_LINE_WORDS - 1)", "#define SDR_RX_STATE_WORD 0"),
		{`(?s)_Static_assert\(SDR_RX_STATE_WORD.*?starts the next"\);`, ""},
	}},
	{"re-arm: the handler trusts its record whatever the slot's epoch", "late_packet_rearm", "handler.c", []edit{literal(
		"d[1] == lw && d[2] == epoch)", "d[1] == lw)")}},
	{"re-arm: the old arm path, the words cleared before the fence", "late_packet_rearm", "test/handler_test.c", []edit{
		literal("\t__atomic_store_n(&r->epochs[1], r->epochs[1] + 1, __ATOMIC_RELEASE);\n",
			"\tprepare(r, 1, 4096);\n\tsdr_slot_clear(&s);\n"),
		literal("\tstruct sdr_slot s = prepare(r, 1, 4096);\n\tsdr_slot_activate(&s, late.new, 0);",
			"\tstruct sdr_slot s = slot_of(r, 1, 4096);\n\tsdr_slot_activate(&s, late.new, 0);"),
	}},
}

// mutantSeeds seed the strict model for each named mutant.
var mutantSeeds = []string{"1", "2", "3", "7", "42"}

// TestHandlerNamedMutants applies each of namedMutants to a copy of the
// device sources, builds the handler tests from it and runs the mutant's
// test under every seed of mutantSeeds: each run must fail. The table
// of what failed is logged.
func TestHandlerNamedMutants(t *testing.T) {
	privileged.RequireFile(t, "/usr/include/infiniband/mlx5dv.h", "rdma-core's mlx5 layouts from libibverbs-dev: the handler tests check the CQE layout against them")
	var table strings.Builder
	for _, m := range namedMutants {
		dir := copyDevice(t)
		file := filepath.Join(dir, filepath.FromSlash(m.file))
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range m.edits {
			re := regexp.MustCompile(e.old)
			if n := len(re.FindAllIndex(src, -1)); n != 1 {
				t.Fatalf("%s: %q matches %s %d times, want once: the mutant no longer fits the code", m.name, e.old, m.file, n)
			}
			src = re.ReplaceAllLiteral(src, []byte(e.new))
		}
		if err := os.WriteFile(file, src, 0o644); err != nil {
			t.Fatal(err)
		}
		bin := compileC(t, "named_mutant", []string{"-DSDR_HOSTSIM", "-I" + filepath.Join(dir, "hostsim")},
			filepath.Join(dir, "handler.c"), filepath.Join(dir, "hostsim", "hostsim.c"), filepath.Join(dir, "test", "handler_test.c"))
		fmt.Fprintf(&table, "\n  %s (%s):", m.name, m.test)
		for _, seed := range mutantSeeds {
			caught := runMutant(bin, m.test, seed)
			if caught == "" {
				t.Errorf("%s: %s passes at seed %s", m.name, m.test, seed)
			}
			fmt.Fprintf(&table, "\n    seed %-3s %s", seed, caught)
		}
	}
	t.Logf("each named mutant, and what failed at each seed:%s", table.String())
}

// copyDevice copies ../device (the sources a handler test program is
// built from) into a temporary directory and returns its path.
func copyDevice(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir(dev(""), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dev(""), path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
