package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/testbed/ring"
)

// slurm is a one-node Slurm cluster on this machine: munged, slurmctld
// and slurmd from Debian's packages, started by the test and stopped
// with it.
type slurm struct {
	dir, conf string
	env       []string
}

const slurmConf = `ClusterName=sdrtest
SlurmctldHost=%[1]s
SlurmctldPort=%[3]s
SlurmdPort=%[4]s
AuthType=auth/munge
AuthInfo=socket=%[2]s/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=%[2]s/state
SlurmdSpoolDir=%[2]s/spool
SlurmctldPidFile=%[2]s/slurmctld.pid
SlurmdPidFile=%[2]s/slurmd.pid
SlurmctldLogFile=%[2]s/slurmctld.log
SlurmdLogFile=%[2]s/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName=%[1]s CPUs=2 State=UNKNOWN
PartitionName=test Nodes=%[1]s Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
`

// startSlurm brings the cluster up and registers its teardown.
func startSlurm(t *testing.T) *slurm {
	t.Helper()
	privileged.Require(t)
	for _, tool := range []string{"munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo"} {
		privileged.RequireTool(t, tool, "runs a one-node Slurm cluster")
	}
	privileged.RequireFile(t, "/etc/munge/munge.key", "munge's key, made by Debian's munge package")
	dir, err := os.MkdirTemp("", "slurm") // short: munge's socket path is bounded
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, d := range []string{"state", "spool"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ = strings.Cut(host, ".")
	s := &slurm{dir: dir, conf: filepath.Join(dir, "slurm.conf")}
	conf := fmt.Sprintf(slurmConf, host, dir, freeTCPPort(t), freeTCPPort(t))
	if err := os.WriteFile(s.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	s.env = append(os.Environ(), "SLURM_CONF="+s.conf)
	// munged daemonizes; its pid file stops it.
	if out, err := exec.Command("munged", "--force", "--socket="+dir+"/munge.sock", "--pid-file="+dir+"/munged.pid",
		"--log-file="+dir+"/munged.log", "--seed-file="+dir+"/munge.seed", "--key-file=/etc/munge/munge.key").CombinedOutput(); err != nil {
		t.Fatalf("munged: %v\n%s", err, out)
	}
	t.Cleanup(func() { killPidFile(filepath.Join(dir, "munged.pid")) })
	for _, daemon := range []string{"slurmctld", "slurmd"} {
		cmd := exec.Command(daemon, "-D", "-f", s.conf)
		cmd.Env = s.env
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := s.command("sinfo", "-h", "-o", "%t").Output()
		if strings.TrimSpace(string(out)) == "idle" {
			return s
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "slurmctld.log"))
			t.Fatalf("the node is %q after 30 s; slurmctld.log:\n%s", out, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// command is a Slurm client command against this cluster; the test
// binary it launches runs as sdr (asSDREnv).
func (s *slurm) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(append([]string{}, s.env...), asSDREnv+"=1")
	cmd.Dir = s.dir
	return cmd
}

func killPidFile(path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 1 {
		if p, err := os.FindProcess(pid); err == nil {
			p.Kill()
		}
	}
}

// TestSlurm brings up Slurm and runs what docs/collectives.md says to
// run under it: `srun -n 4 sdr allreduce` (rank, size and rank 0's host
// from Slurm's environment; every element verified) and an `sbatch
// --array` of `sdr sim` shards (each told its shard by the job array)
// that `sdr sim -merge` joins into the single run's sim.csv, byte for
// byte.
func TestSlurm(t *testing.T) {
	began := time.Now()
	s := startSlurm(t)
	t.Logf("Slurm up in %v", time.Since(began).Round(time.Millisecond))

	out, err := s.command("srun", "-n", "4", "--overcommit", os.Args[0], "allreduce", "-b", "256KiB", "-e", "512KiB", "-n", "2",
		"-schemes", "sr-nack,ec", "-dev", "udp:127.0.5{rank}.1", "-json").Output()
	if err != nil {
		t.Fatalf("srun: %v\n%s", err, out)
	}
	var rows []ring.Row
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("srun's output: %v\n%s", err, out)
	}
	if len(rows) != 4 {
		t.Errorf("%d rows from srun -n 4 sdr allreduce, want 2 sizes × 2 schemes", len(rows))
	}
	for _, r := range rows {
		if r.Wrong != 0 || !r.Checked {
			t.Errorf("%+v", r)
		}
	}

	grid := []string{"sim", "-sizes", "128KiB,1MiB", "-drops", "1e-3,1e-2", "-distances", "1000", "-samples", "4"}
	script := fmt.Sprintf("#!/bin/sh\nexec %s %s -out %s/shard-$SLURM_ARRAY_TASK_ID\n", os.Args[0], strings.Join(grid, " "), s.dir)
	if err := os.WriteFile(filepath.Join(s.dir, "shard.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := s.command("sbatch", "--wait", "--array=1-3", "-o", s.dir+"/shard-%a.log", s.dir+"/shard.sh").CombinedOutput(); err != nil {
		logs, _ := filepath.Glob(s.dir + "/shard-*.log")
		var b bytes.Buffer
		for _, l := range logs {
			c, _ := os.ReadFile(l)
			b.Write(c)
		}
		t.Fatalf("sbatch: %v\n%s\n%s", err, out, b.String())
	}
	var stdout, stderr bytes.Buffer
	shards := fmt.Sprintf("%[1]s/shard-1,%[1]s/shard-2,%[1]s/shard-3", s.dir)
	if code := run(append(grid, "-merge", shards, "-out", s.dir+"/merged"), &stdout, &stderr); code != exitOK {
		t.Fatalf("merge: exit %d: %s", code, stderr.String())
	}
	if code := run(append(grid, "-out", s.dir+"/whole"), &stdout, &stderr); code != exitOK {
		t.Fatalf("whole run: exit %d: %s", code, stderr.String())
	}
	whole, _ := os.ReadFile(s.dir + "/whole/sim.csv")
	merged, _ := os.ReadFile(s.dir + "/merged/sim.csv")
	if len(whole) == 0 || !bytes.Equal(whole, merged) {
		t.Errorf("the job array's merged sim.csv differs from the single run's")
	}
	for i := 1; i <= 3; i++ {
		part, _ := os.ReadFile(fmt.Sprintf("%s/shard-%d/sim.csv", s.dir, i))
		if bytes.Count(part, []byte("\n")) >= bytes.Count(whole, []byte("\n")) {
			t.Errorf("shard %d ran the whole grid", i)
		}
	}
	t.Logf("TestSlurm took %v", time.Since(began).Round(time.Millisecond))
}
