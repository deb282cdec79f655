package container

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/testbed/scenario"
	"github.com/sdr-rdma/sdr/testbed/writebw"
)

// podman runs the container runtime with docs/containers.md's settings
// for a host like CI's: runc (crun refuses a hybrid cgroup layout) and
// every command bounded by ctx.
type podman struct {
	path string
	ctx  context.Context
}

// run runs podman with args and returns its standard output; a failure
// fails t with what podman printed.
func (p podman) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := p.try(args...)
	if err != nil {
		t.Fatalf("podman %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// cleanup runs podman with args to remove what a test made, also after
// the test's context ended (a timeout, or the test returning before its
// cleanups run), within a minute of its own.
func (p podman) cleanup(args ...string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), time.Minute)
	defer cancel()
	podman{path: p.path, ctx: ctx}.try(args...)
}

func (p podman) try(args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(p.ctx, p.path, append([]string{"--runtime", "runc"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w\n%s%s", err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// limits are the resource limits a container gets: the host's own hard
// limits, since without CAP_SYS_RESOURCE a container may not raise them
// (podman's default of 1048576 open files fails at start otherwise).
var limits = []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}

// The documented capability sets (docs/containers.md). Podman 4.3's
// default seccomp profile allows bpf(2) only with CAP_SYS_ADMIN, so
// write-bw takes SYS_ADMIN where the kernel alone would take BPF and
// PERFMON (the stand-in the page names).
var (
	testbedCaps = []string{"--cap-drop", "ALL", "--cap-add", "SYS_ADMIN,NET_ADMIN,NET_RAW,IPC_LOCK",
		"--security-opt", "systempaths=unconfined"}
	writeBWCaps = []string{"--cap-drop", "ALL", "--cap-add", "SYS_ADMIN,NET_ADMIN,NET_RAW,IPC_LOCK"}
)

// buildImage builds the static sdr binary and an image FROM scratch
// holding only it, tagged name, removed when t ends.
func buildImage(t *testing.T, p podman, name string) {
	dir := t.TempDir()
	goTool := privileged.RequireTool(t, "go", "builds the static binary the image holds")
	build := exec.CommandContext(p.ctx, goTool, "build", "-trimpath", "-o", filepath.Join(dir, "sdr"), "github.com/sdr-rdma/sdr/cmd/sdr")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	containerfile := "FROM scratch\nCOPY sdr /sdr\nENTRYPOINT [\"/sdr\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(containerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	p.run(t, "build", "--quiet", "--tag", name, "--file", filepath.Join(dir, "Containerfile"), dir)
	t.Cleanup(func() { p.cleanup("rmi", "--force", name) })
}

// TestContainers builds the image, runs sdr testbed inside a container
// with the documented capabilities (every transfer verified, over the
// namespaces the container made for itself), then write-bw -dev xsk
// between two containers on a podman network, on RC channels so that
// every chunk may be asserted verified on a loaded host.
func TestContainers(t *testing.T) {
	privileged.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	p := podman{path: privileged.RequireTool(t, "podman", "a real container runtime"), ctx: ctx}
	privileged.RequireTool(t, "runc", "podman's OCI runtime here")
	id := fmt.Sprintf("sdr-ci-%08x", rand.Uint32())
	image := "localhost/" + id
	buildImage(t, p, image)

	t.Run("testbed", func(t *testing.T) {
		args := append([]string{"run", "--rm", "--network", "none"}, limits...)
		args = append(append(args, testbedCaps...), image,
			"testbed", "-carrier", "netns", "-s", "64KiB,1MiB", "-n", "2", "-schemes", "rc,sr-nack,ec", "-o", "", "-json", "-q")
		var rep scenario.Report
		if out := p.run(t, args...); json.Unmarshal([]byte(out), &rep) != nil {
			t.Fatalf("testbed in a container: not a report:\n%s", out)
		}
		if !strings.Contains(rep.Carrier, "namespaces") {
			t.Errorf("testbed in a container ran over %q, want namespaces", rep.Carrier)
		}
		for _, row := range rep.Rows {
			if row.Transfers != 2 || row.Completed != 2 || row.Corrupt != 0 {
				t.Errorf("%s at %d bytes: %d of %d completed, %d corrupt; want 2 of 2 intact", row.Scheme, row.Size, row.Completed, row.Transfers, row.Corrupt)
			}
		}
		if len(rep.Rows) != 6 {
			t.Errorf("%d rows in the report, want 6 (3 schemes × 2 sizes)", len(rep.Rows))
		}
	})

	t.Run("write-bw between containers", func(t *testing.T) {
		p.run(t, "network", "create", id)
		defer p.cleanup("network", "rm", "--force", id)
		server := id + "-server"
		args := append([]string{"run", "--detach", "--name", server, "--network", id}, limits...)
		p.run(t, append(append(args, writeBWCaps...), image, "write-bw", "-dev", "xsk", "-i", "eth0")...)
		defer p.cleanup("rm", "--force", server)
		addr := strings.TrimSpace(p.run(t, "inspect", "--format", "{{(index .NetworkSettings.Networks \""+id+"\").IPAddress}}", server))
		args = append([]string{"run", "--rm", "--network", id}, limits...)
		args = append(append(args, writeBWCaps...), image, "write-bw", "-dev", "xsk", "-i", "eth0", "-rc", "-s", "1048576", "-n", "50", "-verify", "-json", addr)
		var r writebw.Result
		var out string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) { // until the server listens
			var err error
			if out, err = p.try(args...); err == nil || !strings.Contains(err.Error(), "connection refused") || time.Now().After(deadline) {
				if err != nil {
					logs, _ := p.try("logs", server)
					t.Fatalf("write-bw client: %v\nserver:\n%s", err, logs)
				}
				break
			}
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Logf("write-bw between containers: %d/%d chunks verified, %.2f Gbit/s", r.ChunksVerified, r.ChunksTotal, r.BWAverageGbps)
		if r.ChunksTotal == 0 || r.ChunksVerified != r.ChunksTotal || r.Complete != 50 {
			t.Errorf("write-bw between containers: want every chunk of 50 messages verified: %+v", r)
		}
	})
}
