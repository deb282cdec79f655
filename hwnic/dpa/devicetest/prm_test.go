package devicetest

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/internal/privileged"
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

// kernelIFC is where Debian's linux-headers packages put the kernel's
// mlx5 PRM layouts (any version: the layouts only grow).
const kernelIFC = "/usr/src/linux-headers-*-common/include/linux/mlx5/mlx5_ifc.h"

// TestPRMAgainstKernel checks every field prm.h writes into a DevX
// mailbox against the kernel's include/linux/mlx5/mlx5_ifc.h, field by
// field (bit offset and width); fields the kernel leaves reserved (it
// does not use them, rdma-core's DevX does) must lie inside the reserved
// range.
func TestPRMAgainstKernel(t *testing.T) {
	headers, _ := filepath.Glob(kernelIFC)
	if len(headers) == 0 {
		privileged.RequireFile(t, kernelIFC, "the kernel's mlx5 PRM layouts from linux-headers-amd64")
		return
	}
	bin := compileC(t, "prm_ifc_test", []string{"-std=gnu11", "-I" + filepath.Join(".."), "-I" + filepath.Dir(headers[len(headers)-1])},
		dev("test/prm_ifc_test.c"))
	if out := strings.TrimSpace(string(runC(t, bin, nil))); out != "ok prm_ifc" {
		t.Fatalf("prm_ifc_test against %s printed:\n%s", headers[len(headers)-1], out)
	}
}
