package conform

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/wire"
)

// TestCompare pins the reply matching rules: ACK coalescing and ACKs
// without the A bit are tolerated, a plain ACK for a PSN that another
// reply answers is not, and a missing reply or a memory difference fails.
func TestCompare(t *testing.T) {
	atomicAck := Reply{Opcode: wire.RCAtomicAck, PSN: 5, MSN: 1, Syndrome: wire.ACK(wire.CreditsInvalid), Orig: 9}
	mem := []byte{1, 2, 3, 4}
	for _, c := range []struct {
		name     string
		want     []Reply
		got      []Reply
		after    []byte
		problems int
	}{
		{"exact", []Reply{Ack(1, 1), Ack(2, 2)}, []Reply{Ack(1, 1), Ack(2, 2)}, mem, 0},
		{"coalesced", []Reply{Ack(1, 1), Ack(2, 2)}, []Reply{Ack(2, 2)}, mem, 0},
		{"unrequested ACK before the expected one", []Reply{Ack(3, 1)}, []Reply{Ack(2, 1), Ack(3, 1)}, mem, 0},
		{"redundant ACK after an ATOMIC ACK", []Reply{atomicAck, Ack(6, 2)}, []Reply{atomicAck, Ack(5, 1), Ack(6, 2)}, mem, 1},
		{"ACK covered by a later NAK", []Reply{Ack(1, 1), Nak(wire.NAKRemoteAccessError, 2, 1)}, []Reply{Nak(wire.NAKRemoteAccessError, 2, 1)}, mem, 0},
		{"ACK after a later RNR NAK", []Reply{Ack(1, 1), RNRNak(2, 1)}, []Reply{{Opcode: wire.RCAck, PSN: 2, MSN: 1, Syndrome: wire.RNRNAK(14)}, Ack(1, 1)}, mem, 1},
		{"missing", []Reply{Ack(1, 1)}, nil, mem, 1},
		{"wrong MSN", []Reply{Ack(1, 1)}, []Reply{Ack(1, 2)}, mem, 2},
		{"NAK instead of ACK", []Reply{Ack(1, 1)}, []Reply{Nak(wire.NAKRemoteAccessError, 1, 0)}, mem, 2},
		{"memory written", nil, nil, []byte{1, 2, 9, 4}, 1},
	} {
		r := &runner{}
		problems, _ := r.compare(&Outcome{Replies: c.want}, c.got, mem, c.after)
		if len(problems) != c.problems {
			t.Errorf("%s: problems %q, want %d", c.name, problems, c.problems)
		}
	}
	if got := describeMemory(make([]byte, 64), append(append(make([]byte, 8), 1, 0, 1), make([]byte, 53)...)); got != "changed +8..+11" {
		t.Errorf("describeMemory: %q", got)
	}
	if s := Nak(wire.NAKPSNSequenceError, 0xFFFFF0, 3).String(); !strings.Contains(s, "PSN_SEQ") || !strings.Contains(s, "msn=3") {
		t.Errorf("NAK renders as %q", s)
	}
}

// TestFrameMutations checks the crafted faults: each leaves the rest of
// the frame as the codec sees it (or breaks exactly what it claims).
func TestFrameMutations(t *testing.T) {
	tgt := Target{MAC: [6]byte{2, 0, 0, 0, 0, 2}}
	tgt.IP = selfTargetIP
	e := &Env{QPN: 0x123456, PSN: 7, T: &tgt, Us: selfBatteryIP, UsMAC: selfBatteryMAC, MTU: 1024, steps: []step{{}}, kind: RC}
	frame := func(muts ...Mutation) []byte {
		e.steps = []step{{}}
		e.Send(e.Write(wire.RCWriteOnly, 7, 0, 8, []byte("12345678")), muts...)
		return e.steps[0].frames[0]
	}
	var p wire.Packet
	plain := frame()
	if err := p.Decode(plain); err != nil || !p.ICRCValid() {
		t.Fatalf("plain frame: %v, ICRC valid %v", err, p.ICRCValid())
	}
	if err := p.Decode(frame(BadICRC)); err != nil || p.ICRCValid() {
		t.Errorf("BadICRC: %v, ICRC valid %v", err, p.ICRCValid())
	}
	if err := p.Decode(frame(PadCount(3))); err != nil || !p.ICRCValid() || len(p.Payload) != 5 {
		t.Errorf("PadCount(3): %v, ICRC valid %v, payload %d B", err, p.ICRCValid(), len(p.Payload))
	}
	if err := p.Decode(frame(BadIPChecksum)); err != nil || !p.ICRCValid() || p.IPv4.ChecksumValid() {
		t.Errorf("BadIPChecksum: %v, ICRC valid %v, IP checksum valid %v", err, p.ICRCValid(), p.IPv4.ChecksumValid())
	}
	if err := p.Decode(frame(Fragment)); err == nil {
		t.Errorf("Fragment decodes as RoCEv2")
	}
	if err := p.Decode(frame(WithoutICRC)); err != nil || p.ICRCValid() || !p.IPv4.ChecksumValid() {
		t.Errorf("WithoutICRC: %v, ICRC valid %v", err, p.ICRCValid())
	}
	e.steps = []step{{}}
	e.Send(e.Read(7, 0, 64), AppendPayload([]byte("0123456789abcdef")))
	f := e.steps[0].frames[0]
	if err := p.Decode(f); err == nil {
		t.Errorf("READ with payload decodes")
	} else if fixed := fixICRC(bytes.Clone(f)); !bytes.Equal(f, fixed) {
		t.Errorf("READ with payload: ICRC %x, want %x", f[len(f)-4:], fixed[len(f)-4:])
	}
}
