package devicetest

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/internal/privileged"
)

// dpaTarget is the DPA's instruction set as Debian's clang knows it: the
// BlueField-3 DPA cores are RV64IMAC (dpacc adds NVIDIA's own extensions
// on top, which this code does not use).
var dpaTarget = []string{"--target=riscv64-unknown-elf", "-march=rv64imac", "-mabi=lp64", "-ffreestanding",
	"-O2", "-Wall", "-Wextra", "-Werror"}

// compileDPA compiles device source src (handler.c, probe.c) for the
// DPA's ISA (clang, -c only) through the shim headers, with extra flags,
// and returns the object's path and clang's diagnostics.
func compileDPA(t *testing.T, clang, src string, extra ...string) (string, string, error) {
	t.Helper()
	obj := filepath.Join(t.TempDir(), strings.TrimSuffix(src, ".c")+".o")
	args := append(append([]string{}, dpaTarget...), "-I"+dev("hostsim"))
	args = append(args, extra...)
	args = append(args, "-c", "-o", obj, dev(src))
	cmd := exec.Command(clang, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	return obj, stderr.String(), err
}

// lrsc matches the RISC-V load-reserved and store-conditional
// instructions (lr.w, lr.d, sc.w, sc.d with any ordering suffix): what
// a compare-and-swap compiles to, which the BlueField-3 DPA lacks.
var lrsc = regexp.MustCompile(`(?m)^\s*[0-9a-f]+:\s+(?:[0-9a-f]{2} )+\s*(lr|sc)\.[wd]\b`)

// amo matches the A extension's read-modify-write instructions.
var amo = regexp.MustCompile(`(?m)^\s*[0-9a-f]+:\s+(?:[0-9a-f]{2} )+\s*(amo[a-z]+)\.[wd]\b`)

// TestDeviceISA compiles the RX handler (and the bring-up probe beside
// it, to the same rules) for the DPA's instruction set
// with the distribution's clang against the shim headers, which carry
// the public FlexIO version gates: it must build with -Werror at the
// generation it declares (24.10) and at the newest the shim knows
// (25.1), must fail at the generation before (24.4, where the window
// calls and cq_arm take a thread context), and its object must hold no
// LR/SC instruction (no compare-and-swap). The only read-modify-write
// instructions allowed are the spin lock's atomic swaps on DPA memory.
func TestDeviceISA(t *testing.T) {
	clang := privileged.RequireTool(t, "clang-14", "compiles the device C for the DPA's RISC-V ISA")
	objdump := privileged.RequireTool(t, "llvm-objdump-14", "disassembles the DPA object to look for LR/SC")
	for _, c := range []struct{ src, ver, entry string }{
		{"handler.c", "", "sdr_rx_handler"}, {"handler.c", "-DFLEXIO_DEV_VER_USED=FLEXIO_DEV_VER(25,1,0)", "sdr_rx_handler"},
		{"probe.c", "", "sdr_probe"},
	} {
		ver := c.ver
		var extra []string
		if ver != "" {
			extra = append(extra, ver)
		}
		obj, diag, err := compileDPA(t, clang, c.src, extra...)
		if err != nil {
			t.Fatalf("%s for RV64 (%q): %v\n%s", c.src, ver, err, diag)
		}
		out, err := exec.Command(objdump, "-d", obj).Output()
		if err != nil {
			t.Fatalf("%s -d: %v", objdump, err)
		}
		if !strings.Contains(string(out), "<"+c.entry+">:") {
			t.Fatalf("no %s in the object of %s:\n%s", c.entry, c.src, out)
		}
		if m := lrsc.FindAllString(string(out), -1); len(m) != 0 {
			t.Errorf("%s: %d LR/SC instructions (compare-and-swap):\n%s", ver, len(m), strings.Join(m, "\n"))
		}
		for _, m := range amo.FindAllStringSubmatch(string(out), -1) {
			if m[1] != "amoswap" {
				t.Errorf("%s: read-modify-write %s in the device object: only the slot lock's swap is expected", ver, m[0])
			}
		}
		t.Logf("%s %s: %d instructions, 0 LR/SC, %d AMOs (the slot lock's swaps)", c.src, map[bool]string{true: "24.10 (declared)", false: ver}[ver == ""],
			len(regexp.MustCompile(`(?m)^\s*[0-9a-f]+:`).FindAllString(string(out), -1)), len(amo.FindAllString(string(out), -1)))
	}
	_, diag, err := compileDPA(t, clang, "handler.c", "-DFLEXIO_DEV_VER_USED=FLEXIO_DEV_VER(24,4,0)")
	if err == nil {
		t.Fatalf("handler.c compiled at FlexIO 24.4: the shim's version gates do not bite")
	}
	for _, want := range []string{"flexio_dev_window_config", "flexio_dev_window_ptr_acquire", "flexio_dev_cq_arm"} {
		if !strings.Contains(diag, want) {
			t.Errorf("at 24.4 clang did not reject %s:\n%s", want, diag)
		}
	}
}
