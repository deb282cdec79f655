package wire

import (
	"bytes"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/internal/privileged"
)

// requireTshark returns the path of tshark, or skips the test (fails it
// under privileged.RequireEnv=1, as in CI, whose test command installs it).
func requireTshark(t *testing.T) string {
	t.Helper()
	return privileged.RequireTool(t, "tshark", "cross-checks the encoder with Wireshark's dissector")
}

// tsharkFields lists, per frame, the Wireshark field values our encoder's
// fields must match (first occurrence of each).
var tsharkFields = []string{
	"_ws.col.Protocol", "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn",
	"infiniband.bth.se", "infiniband.bth.a", "infiniband.bth.padcnt", "infiniband.bth.p_key",
	"infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen", "infiniband.immdt",
	"infiniband.aeth.syndrome", "infiniband.aeth.msn", "infiniband.deth.q_key", "infiniband.deth.srcqp",
	"infiniband.atomiceth.swapdt", "infiniband.atomiceth.cmpdt", "infiniband.atomicacketh.origremdt", "infiniband.ieth",
}

// newerThanTshark lists IBA 1.5 opcodes that Debian 12's Wireshark 4.0
// names but does not dissect beyond the BTH; only their BTH is compared.
var newerThanTshark = map[Opcode]bool{RCFlush: true, RCAtomicWrite: true}

// TestTsharkDissectsEncodedFrames writes frames of every RC, UC and UD
// opcode, IPv4 and IPv6, with and without VLAN, as our encoder builds
// them, and checks that Wireshark's InfiniBand dissector sees RoCEv2 with
// the same header fields. (tshark does not verify the ICRC; the rxe vectors
// and our verifier cover that.) Wireshark files the AtomicETH's VA and
// R_Key under the RETH field names.
func TestTsharkDissectsEncodedFrames(t *testing.T) {
	tshark := requireTshark(t)
	rng := rand.New(rand.NewPCG(7, 8))
	var want []Fields
	for code := 0; code < 256; code++ {
		o := Opcode(code)
		if !o.Valid() || o == CNP {
			continue
		}
		for _, v6 := range []bool{false, true} {
			f := randomFields(rng, o, v6, v6)
			f.SrcPort = SourcePort(f.BTH.DestQP, 0x11)
			want = append(want, f)
		}
	}
	path := filepath.Join(t.TempDir(), "encoded.pcap")
	w, err := CreatePcap(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if err := w.WritePacket(time.Unix(0, int64(i)), encodeFrame(t, &want[i])); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	args := []string{"-r", path, "-T", "fields", "-E", "separator=|", "-E", "occurrence=f"}
	for _, field := range tsharkFields {
		args = append(args, "-e", field)
	}
	cmd := exec.Command(tshark, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("tshark printed %d lines for %d frames:\n%s", len(lines), len(want), out)
	}
	for i, line := range lines {
		got := map[string]string{}
		for j, v := range strings.Split(line, "|") {
			got[tsharkFields[j]] = v
		}
		f := want[i]
		info := f.BTH.Opcode.Info()
		pad := paddedLen(len(f.Payload)) - len(f.Payload)
		expect := map[string]string{
			"_ws.col.Protocol":         "RRoCE",
			"infiniband.bth.opcode":    strconv.Itoa(int(f.BTH.Opcode)),
			"infiniband.bth.destqp":    hex(uint64(f.BTH.DestQP), 6),
			"infiniband.bth.psn":       strconv.Itoa(int(f.BTH.PSN)),
			"infiniband.bth.se":        boolField(f.BTH.SolicitedEvent),
			"infiniband.bth.a":         boolField(f.BTH.AckReq),
			"infiniband.bth.padcnt":    strconv.Itoa(pad),
			"infiniband.bth.p_key":     strconv.Itoa(int(f.BTH.PKey)),
			"infiniband.reth.va":       "",
			"infiniband.reth.r_key":    "",
			"infiniband.reth.dmalen":   "",
			"infiniband.immdt":         "",
			"infiniband.aeth.msn":      "",
			"infiniband.aeth.syndrome": "",
			"infiniband.deth.q_key":    "",
			"infiniband.deth.srcqp":    "",
		}
		if newerThanTshark[f.BTH.Opcode] {
			for field := range expect {
				if strings.HasPrefix(field, "infiniband.reth") {
					delete(expect, field)
				}
			}
			info.Headers = 0
		}
		if info.Headers&HeaderRETH != 0 {
			expect["infiniband.reth.va"] = hex(f.RETH.VA, 16)
			expect["infiniband.reth.r_key"] = hex(uint64(f.RETH.RKey), 8)
			expect["infiniband.reth.dmalen"] = strconv.FormatUint(uint64(f.RETH.DMALength), 10)
		}
		if info.Headers&HeaderAtomicETH != 0 {
			expect["infiniband.reth.va"] = hex(f.AtomicETH.VA, 16)
			expect["infiniband.reth.r_key"] = hex(uint64(f.AtomicETH.RKey), 8)
			expect["infiniband.atomiceth.swapdt"] = strconv.FormatUint(f.AtomicETH.SwapAdd, 10)
			expect["infiniband.atomiceth.cmpdt"] = strconv.FormatUint(f.AtomicETH.Compare, 10)
		}
		if info.Headers&HeaderAtomicAckETH != 0 {
			expect["infiniband.atomicacketh.origremdt"] = strconv.FormatUint(f.OrigRemoteData, 10)
		}
		if info.Headers&HeaderIETH != 0 {
			expect["infiniband.ieth"] = strings.TrimPrefix(hex(uint64(f.InvalidateRKey), 8), "0x")
		}
		if info.Headers&HeaderImmDt != 0 {
			expect["infiniband.immdt"] = strings.TrimPrefix(hex(uint64(f.Imm), 8), "0x")
		}
		if info.Headers&HeaderAETH != 0 {
			expect["infiniband.aeth.msn"] = strconv.Itoa(int(f.AETH.MSN))
			expect["infiniband.aeth.syndrome"] = strconv.Itoa(int(f.AETH.Syndrome))
		}
		if info.Headers&HeaderDETH != 0 {
			expect["infiniband.deth.q_key"] = hex(uint64(f.DETH.QKey), 16)
			expect["infiniband.deth.srcqp"] = hex(uint64(f.DETH.SrcQP), 8)
		}
		for field, v := range expect {
			if got[field] != v {
				t.Errorf("frame %d (%v, IPv6 %v): %s = %q, want %q", i+1, f.BTH.Opcode, f.SrcIP.Is6(), field, got[field], v)
			}
		}
	}
}

func hex(v uint64, digits int) string {
	s := strconv.FormatUint(v, 16)
	return "0x" + strings.Repeat("0", max(0, digits-len(s))) + s
}

func boolField(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
