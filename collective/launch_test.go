package collective

import "testing"

func TestFirstHost(t *testing.T) {
	for in, want := range map[string]string{
		"":                    "",
		"node1":               "node1",
		"a,b":                 "a",
		"node[07-10,12],gpu1": "node07",
		"rack[3,5]-n[1-2]":    "rack3-n[1-2]",
		"gpu[001-004]":        "gpu001",
		"x[2]":                "x2",
	} {
		got, err := FirstHost(in)
		if err != nil || got != want {
			t.Errorf("FirstHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"node]1[", "node[]"} {
		if _, err := FirstHost(bad); err == nil {
			t.Errorf("FirstHost(%q) accepted", bad)
		}
	}
}

func TestFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if _, ok, err := FromEnv(env(nil)); ok || err != nil {
		t.Errorf("no launcher: ok %v, %v", ok, err)
	}
	l, ok, err := FromEnv(env(map[string]string{"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_STEP_NODELIST": "dc[1-4]"}))
	if !ok || err != nil || l != (Launch{Rank: 2, Size: 4, CoordinatorHost: "dc1", Launcher: "slurm"}) {
		t.Errorf("slurm: %+v, %v, %v", l, ok, err)
	}
	l, ok, _ = FromEnv(env(map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "8"}))
	if !ok || l.Rank != 0 || l.Size != 8 || l.Launcher != "openmpi" {
		t.Errorf("openmpi: %+v", l)
	}
	l, ok, _ = FromEnv(env(map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.9"}))
	if !ok || l.CoordinatorHost != "10.0.0.9" {
		t.Errorf("torchrun: %+v", l)
	}
	for _, bad := range []map[string]string{
		{"PMI_RANK": "4", "PMI_SIZE": "4"},
		{"PMI_RANK": "x", "PMI_SIZE": "4"},
		{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_NODELIST": "n[]"},
	} {
		if _, _, err := FromEnv(env(bad)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
