package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/emunic"
	"github.com/sdr-rdma/sdr/emunic/xsk"
	"github.com/sdr-rdma/sdr/hostnet"
	"github.com/sdr-rdma/sdr/internal/privileged"
	"github.com/sdr-rdma/sdr/testbed/conform"
	"github.com/sdr-rdma/sdr/wire"
)

// TestConformSelf runs `sdr conform -self -json -pcap` (AF_XDP between
// namespaces as root, the pipe otherwise): every case passes, the JSON
// report has a row per case, and the capture holds the frames both ways.
func TestConformSelf(t *testing.T) {
	pcap := filepath.Join(t.TempDir(), "conform.pcap")
	var stdout, stderr bytes.Buffer
	code := run([]string{"conform", "-self", "-json", "-timeout", "2s", "-pcap", pcap}, &stdout, &stderr)
	var rep conform.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("exit %d, %v\n%s\n%s", code, err, stdout.String(), stderr.String())
	}
	if code != exitOK || rep.Fail != 0 || len(rep.Results) != len(conform.Battery()) {
		for _, r := range rep.Results {
			if r.Verdict == conform.Fail {
				t.Errorf("%s: expected %s\n\tobserved %s\n\t%s", r.ID, r.Expected, r.Observed, strings.Join(r.Notes, "\n\t"))
			}
		}
		t.Fatalf("exit %d, %d of %d cases failed\n%s", code, rep.Fail, len(rep.Results), stderr.String())
	}
	checkConformPcap(t, pcap, rep.Target)
}

// checkConformPcap expects both the battery's requests and the target's
// replies in the capture, and both bad and good ICRCs (the battery sends
// broken frames on purpose; every reply must be sound).
func checkConformPcap(t *testing.T, path, target string) {
	t.Helper()
	frames, err := wire.ReadPcapFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p wire.Packet
	var requests, replies, badICRC int
	for _, f := range frames {
		if err := p.DecodeCaptured(f.LinkType, f.Data); err != nil {
			continue
		}
		if !p.ICRCValid() {
			badICRC++
			continue
		}
		if strings.Contains(target, "ip="+p.IPv4.Dst().String()+" ") {
			requests++
		} else {
			replies++
		}
	}
	t.Logf("capture: %d frames, %d requests and %d replies with good ICRCs, %d with bad ones", len(frames), requests, replies, badICRC)
	if requests < 100 || replies < 100 || badICRC == 0 {
		t.Errorf("capture holds %d requests, %d replies, %d bad ICRCs", requests, replies, badICRC)
	}
	if tshark, ok := privileged.OptionalTool(t, "tshark", "Wireshark opens the battery's capture"); ok {
		out, err := exec.Command(tshark, "-r", path, "-Y", "infiniband", "-T", "fields", "-e", "infiniband.bth.opcode").Output()
		if err != nil {
			t.Errorf("tshark -r %s: %v", path, err)
		}
		if n := strings.Count(string(out), "\n"); n < requests+replies {
			t.Errorf("tshark dissected %d RoCE packets, want at least %d", n, requests+replies)
		}
	}
}

// TestConformExternal runs `sdr conform -i veth0 -target ...` in one
// namespace at an emunic target on AF_XDP in another: the external path
// (target description, AF_XDP port on the named interface) end to end.
func TestConformExternal(t *testing.T) {
	privileged.Require(t)
	pair, err := hostnet.NewPair(hostnet.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	var port *xsk.Port
	if err := pair.B.NS.Do(func() (err error) {
		port, err = xsk.NewPort(xsk.PortConfig{Interface: pair.B.IfName})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	dev, err := emunic.NewDevice(emunic.Config{Port: port, GID: pair.B.Addr, MAC: pair.B.MAC})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	tgt, err := conform.NewEmunicTarget(dev, conform.Battery(), pair.A.Addr, pair.A.MAC, 1024, conform.SelfPSN, nil)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := -1
	pair.A.NS.Do(func() error {
		code = run([]string{"conform", "-i", pair.A.IfName, "-timeout", "2s", "-target", tgt.Target.String()}, &stdout, &stderr)
		return nil
	})
	out := stdout.String()
	if code != exitOK || !strings.Contains(out, "0 FAIL, 0 SKIP") {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr.String())
	}

	// A fresh target (the first run used up the QPs) by flags instead of
	// a description line.
	fresh := conform.Battery()[:2]
	if tgt, err = conform.NewEmunicTarget(dev, fresh, pair.A.Addr, pair.A.MAC, 1024, conform.SelfPSN, nil); err != nil {
		t.Fatal(err)
	}
	var flagsOut bytes.Buffer
	args := []string{"conform", "-i", pair.A.IfName, "-timeout", "2s", "-run", "^[ru]c-write-only$",
		"-dst-ip", pair.B.Addr.String(), "-qpn", fmt.Sprintf("%x,%x", tgt.Target.Fence, tgt.Target.RC[0]), "-uc-qpn", fmt.Sprintf("%x", tgt.Target.UC[0]),
		"-rkey", fmt.Sprintf("%x", tgt.Target.MR.RKey), "-va", fmt.Sprintf("%x", tgt.Target.MR.VA), "-len", "1048576", "-psn", "fffff0"}
	pair.A.NS.Do(func() error {
		code = run(args, &flagsOut, &stderr) // the target's MAC is resolved through the kernel
		return nil
	})
	if code != exitOK || !strings.Contains(flagsOut.String(), "2 cases: 2 PASS") {
		t.Fatalf("by flags: exit %d\n%s\n%s", code, flagsOut.String(), stderr.String())
	}
}

// TestConformUsage: a missing target or both modes at once are usage
// errors (exit 2), and so is an incomplete target description.
func TestConformUsage(t *testing.T) {
	for _, args := range [][]string{{"conform"}, {"conform", "-self", "-i", "lo"},
		{"conform", "-i", "lo", "-dst-ip", "10.0.0.1"}, {"conform", "-i", "lo", "-target", "CONFORM ip=10.0.0.1"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != exitUsage {
			t.Errorf("%q: exit %d, want %d\n%s", args, code, exitUsage, stderr.String())
		}
	}
	var list bytes.Buffer
	if code := run([]string{"conform", "-list", "-run", "^rc-read"}, &list, &list); code != exitOK || !strings.Contains(list.String(), "\nrc-read ") ||
		strings.Contains(list.String(), "uc-") {
		t.Errorf("-list -run ^rc-read: exit %d\n%s", code, list.String())
	}
	_, err := conform.ParseTarget("CONFORM ip=10.0.0.1 psn=0")
	if !errors.Is(err, conform.ErrSpec) {
		t.Errorf("incomplete description: %v", err)
	}
}
