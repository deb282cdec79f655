package wire

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestTemplateMatchesEncode sets a template from random fields of every
// opcode, over IPv4 and IPv6, with and without a VLAN tag, and expects
// each frame it encodes with a new PSN, IPv4 identification, RETH,
// immediate and payload (of any length, pads included) to equal Encode's
// for the same fields, byte for byte (so lengths, checksums and ICRC too).
func TestTemplateMatchesEncode(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var tmpl Template
	tested := 0
	for code := 0; code < 256; code++ {
		o := Opcode(code)
		if !o.Valid() {
			continue
		}
		tested++
		info := o.Info()
		for _, v6 := range []bool{false, true} {
			for _, vlan := range []bool{false, true} {
				f := randomFields(rng, o, v6, vlan)
				if err := tmpl.Set(&f); err != nil {
					t.Fatalf("%v: set: %v", o, err)
				}
				got, want := make([]byte, 9200), make([]byte, 9200)
				for range 4 {
					v := TemplateFields{PSN: PSN(rng.Uint32() & PSNMask), IPID: uint16(rng.Uint32()), Imm: rng.Uint32(),
						RETH: RETHFields{VA: rng.Uint64(), RKey: rng.Uint32(), DMALength: rng.Uint32()}}
					if info.Payload {
						v.Payload = make([]byte, []int{0, 1, 2, 3, 5, 1024, 4093, 9000}[rng.IntN(8)])
						for i := range v.Payload {
							v.Payload[i] = byte(rng.Uint32())
						}
					}
					f.BTH.PSN, f.IPID, f.Payload = v.PSN, v.IPID, v.Payload
					if v6 {
						f.IPID = 0 // IPv6 has none: the template ignores it
					}
					if info.Headers&HeaderRETH != 0 {
						f.RETH = v.RETH
					}
					if info.Headers&HeaderImmDt != 0 {
						f.Imm = v.Imm
					}
					n, err := tmpl.Encode(got, &v)
					if err != nil {
						t.Fatalf("%v: template encode: %v", o, err)
					}
					m, err := Encode(want, &f)
					if err != nil {
						t.Fatalf("%v: encode: %v", o, err)
					}
					if n != tmpl.FrameLen(len(v.Payload)) || !bytes.Equal(got[:n], want[:m]) {
						t.Fatalf("%v v6=%v vlan=%v payload %d: template frame (FrameLen %d)\n%x\nwant\n%x",
							o, v6, vlan, len(v.Payload), tmpl.FrameLen(len(v.Payload)), got[:n], want[:m])
					}
				}
			}
		}
	}
	if tested < 40 {
		t.Fatalf("%d opcodes tested: the table offers too few", tested)
	}
}

// TestTemplateErrors: a template encodes nothing before Set or after a
// failed Set, nor a PSN beyond 24 bits, payload on an opcode without any,
// a payload the IP length cannot describe, or into a short buffer.
func TestTemplateErrors(t *testing.T) {
	var tmpl Template
	buf := make([]byte, 70000)
	if _, err := tmpl.Encode(buf, &TemplateFields{}); !errors.Is(err, ErrInvalidFields) {
		t.Errorf("zero template: %v, want ErrInvalidFields", err)
	}
	if tmpl.FrameLen(0) != 0 {
		t.Errorf("zero template: frame length %d, want 0", tmpl.FrameLen(0))
	}
	f := sampleFields(nil)
	if err := tmpl.Set(&f); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1024)
	for _, c := range []struct {
		name string
		buf  []byte
		v    TemplateFields
		want error
	}{
		{"PSN beyond 24 bits", buf, TemplateFields{PSN: PSNMask + 1, Payload: payload}, ErrInvalidFields},
		{"payload beyond the IP length", buf, TemplateFields{Payload: make([]byte, 0xFFFF)}, ErrInvalidFields},
		{"short buffer", buf[:tmpl.FrameLen(len(payload))-1], TemplateFields{Payload: payload}, ErrShortBuffer},
	} {
		if _, err := tmpl.Encode(c.buf, &c.v); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if n, err := tmpl.Encode(buf, &TemplateFields{PSN: PSNMask, Payload: payload}); err != nil || n != tmpl.FrameLen(len(payload)) {
		t.Errorf("the largest PSN: %d bytes, %v; want %d", n, err, tmpl.FrameLen(len(payload)))
	}
	ack := f
	ack.BTH.Opcode = RCAck
	if err := tmpl.Set(&ack); err != nil {
		t.Fatal(err)
	}
	if _, err := tmpl.Encode(buf, &TemplateFields{Payload: payload}); !errors.Is(err, ErrInvalidFields) {
		t.Errorf("payload on an ACK: %v, want ErrInvalidFields", err)
	}
	bad := f
	bad.SrcIP = netip.MustParseAddr("fd00::2")
	if err := tmpl.Set(&bad); !errors.Is(err, ErrInvalidFields) {
		t.Fatalf("mixed address families: %v, want ErrInvalidFields", err)
	}
	if _, err := tmpl.Encode(buf, &TemplateFields{}); !errors.Is(err, ErrInvalidFields) {
		t.Errorf("after a failed Set: %v, want ErrInvalidFields", err)
	}
}
