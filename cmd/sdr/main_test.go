package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sdr-rdma/sdr/wire"
)

func bundledCaptures(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../wire/testdata/rxe/*.pcap")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bundled captures: %v", err)
	}
	return files
}

func runSDR(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestPcapBundledCaptures(t *testing.T) {
	files := bundledCaptures(t)
	code, out, errOut := runSDR(append([]string{"pcap"}, files...)...)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	packets := strings.Count(out, " ok\n")
	if packets < 300 {
		t.Errorf("%d packets with a good ICRC printed", packets)
	}
	if strings.Contains(out, "BAD") || strings.Contains(out, "MALFORMED") {
		t.Errorf("faults reported on good captures:\n%s", out)
	}
	if got := strings.Count(out, "0 malformed, 0 bad ICRC"); got != len(files) {
		t.Errorf("%d clean summaries for %d files", got, len(files))
	}
	for _, want := range []string{"UC WRITE_ONLY_IMM", "RC ACK", "UD SEND_ONLY", "DETH(qkey=0x11111111 srcqp=0x46)", "AETH(ACK(credits=31) msn=1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestPcapSDRLayout(t *testing.T) {
	code, out, _ := runSDR("pcap", "-sdr", "10/18/4", "../../wire/testdata/rxe/sdr_verbs_basic.pcap")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	// Message 3, packet 63 carries nibble 63 % 8 = 7 of 0xDEADBEEF: 0xd.
	if !strings.Contains(out, "ImmDt=0x00c003fd SDR(msg=3 pkt=63 nibble=0xd)") {
		t.Errorf("last packet's SDR immediate not split:\n%s", out[len(out)-600:])
	}
	if got := strings.Count(out, " SDR(msg="); got != 256 {
		t.Errorf("%d immediates split, want 256", got)
	}
	if code, _, _ := runSDR("pcap", "-sdr", "10/18/5", "../../wire/testdata/rxe/sdr_verbs_basic.pcap"); code != exitUsage {
		t.Errorf("bad layout: exit %d", code)
	}
}

func TestPcapJSON(t *testing.T) {
	code, out, _ := runSDR("pcap", "-json", "../../wire/testdata/rxe/verbs_uc_write_zero_len.pcap")
	if code != exitOK {
		t.Fatalf("exit %d", code)
	}
	var packets []pcapRecord
	var summary pcapSummary
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var typ struct{ Type string }
		if err := json.Unmarshal(sc.Bytes(), &typ); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		switch typ.Type {
		case "packet":
			var rec pcapRecord
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				t.Fatal(err)
			}
			packets = append(packets, rec)
		case "summary":
			if err := json.Unmarshal(sc.Bytes(), &summary); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("unknown record type %q", typ.Type)
		}
	}
	if len(packets) != 2 || summary.RoCEv2 != 2 || summary.Opcodes["UC WRITE_ONLY_IMM"] != 2 {
		t.Fatalf("%d packets, summary %+v", len(packets), summary)
	}
	p := packets[0]
	if p.DestQP != 0x53 || p.PSN != 0x8a06e1 || p.Imm == nil || *p.Imm != 0x1001 || p.RETH == nil ||
		p.RETH.RKey != 0x446a || p.RETH.DMALength != 0 || p.PayloadLen != 0 || !p.ICRCOK {
		t.Errorf("first packet %+v", p)
	}
}

// writeCapture writes frames to a temporary pcap file.
func writeCapture(t *testing.T, frames ...[]byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.pcap")
	w, err := wire.CreatePcap(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		if err := w.WritePacket(time.Unix(1, int64(i)), f); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// captureFrames returns the RoCEv2 frames of a bundled capture.
func captureFrames(t *testing.T, name string) [][]byte {
	t.Helper()
	packets, err := wire.ReadPcapFile("../../wire/testdata/rxe/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	var p wire.Packet
	for _, c := range packets {
		if p.Decode(c.Data) == nil {
			frames = append(frames, c.Data)
		}
	}
	return frames
}

func TestPcapCorruptedICRC(t *testing.T) {
	frames := captureFrames(t, "verbs_uc_write_imm_3000.pcap")
	frames[1][len(frames[1])-20] ^= 0x40 // a payload bit of the second packet
	code, out, _ := runSDR("pcap", writeCapture(t, frames...))
	if code != exitFault {
		t.Fatalf("exit %d, want %d\n%s", code, exitFault, out)
	}
	var bad []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "BAD(want") {
			bad = append(bad, line)
		}
	}
	if len(bad) != 1 || !strings.HasPrefix(strings.TrimSpace(bad[0]), "2 ") || !strings.Contains(bad[0], "UC WRITE_MIDDLE") {
		t.Errorf("want one bad packet, frame 2:\n%s", out)
	}
	if !strings.Contains(out, "1 bad ICRC") {
		t.Errorf("summary does not count the bad ICRC:\n%s", out)
	}
	// -q prints the faulty packet and the summary only.
	_, quiet, _ := runSDR("pcap", "-q", writeCapture(t, frames...))
	if lines := strings.Count(quiet, "\n"); lines != 3 {
		t.Errorf("-q printed %d lines:\n%s", lines, quiet)
	}
}

func TestPcapMalformedAndSkipped(t *testing.T) {
	frames := captureFrames(t, "verbs_rc_send_7_pad.pcap")
	frames[0][14+20+8] = 0x15 // reserved opcode
	arp := make([]byte, 60)
	arp[12], arp[13] = 0x08, 0x06
	code, out, _ := runSDR("pcap", writeCapture(t, append(frames, arp)...))
	if code != exitFault {
		t.Fatalf("exit %d, want %d\n%s", code, exitFault, out)
	}
	if !strings.Contains(out, "    1 ") || !strings.Contains(out, "MALFORMED: wire: BTH opcode: unknown opcode") {
		t.Errorf("malformed packet not named:\n%s", out)
	}
	if !strings.Contains(out, "1 malformed") || !strings.Contains(out, "1 other skipped") {
		t.Errorf("summary:\n%s", out)
	}
}

func TestPcapUsageAndIOErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"nosuchcommand"}, {"pcap"}, {"pcap", "-nosuchflag", "x"}, {"pcap", "/nonexistent.pcap"}} {
		if code, _, _ := runSDR(args...); code != exitUsage {
			t.Errorf("sdr %v: exit %d, want %d", args, code, exitUsage)
		}
	}
	notPcap := filepath.Join(t.TempDir(), "x.pcap")
	if err := os.WriteFile(notPcap, []byte("not a capture"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runSDR("pcap", notPcap); code != exitUsage || !strings.Contains(errOut, "x.pcap") {
		t.Errorf("garbage file: exit %d, stderr %q", code, errOut)
	}
	if code, _, _ := runSDR("help"); code != exitOK {
		t.Errorf("help: exit %d", code)
	}
}

func TestTestbedUsage(t *testing.T) {
	for _, args := range [][]string{{"testbed", "frobnicate"}, {"testbed", "-carrier", "x"}, {"testbed", "-n", "-1"},
		{"testbed", "-link", "rate=fast"}, {"testbed", "-schemes", "rc,tcp"}, {"testbed", "-s", "0"}} {
		if code, _, _ := runSDR(args...); code != exitUsage {
			t.Errorf("sdr %v: exit %d, want %d", args, code, exitUsage)
		}
	}
}
