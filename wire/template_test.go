package wire

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestTemplateMatchesEncode sets a template from random fields of every
// opcode, over IPv4 and IPv6, with and without a VLAN tag, and payloads
// from empty to a jumbo MTU, and expects each frame it encodes with a new
// PSN, IPv4 identification and payload to equal Encode's for the same
// fields, byte for byte (so lengths, pad, checksums and ICRC too).
func TestTemplateMatchesEncode(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	var tmpl Template
	for code := 0; code < 256; code++ {
		o := Opcode(code)
		if !o.Valid() {
			continue
		}
		for _, v6 := range []bool{false, true} {
			for _, vlan := range []bool{false, true} {
				f := randomFields(rng, o, v6, vlan)
				if o.Info().Payload {
					f.Payload = make([]byte, []int{0, 1, 3, 1024, 4093, 9000}[rng.IntN(6)])
				}
				if err := tmpl.Set(&f); err != nil {
					t.Fatalf("%v: set: %v", o, err)
				}
				if tmpl.PayloadLen() != len(f.Payload) || tmpl.FrameLen() != f.Len() {
					t.Fatalf("%v: template of %d payload bytes, %d-byte frames; want %d, %d", o, tmpl.PayloadLen(), tmpl.FrameLen(), len(f.Payload), f.Len())
				}
				got, want := make([]byte, f.Len()+8), make([]byte, f.Len())
				for range 3 {
					f.BTH.PSN, f.IPID = PSN(rng.Uint32()&PSNMask), uint16(rng.Uint32())
					if v6 {
						f.IPID = 0 // IPv6 has none: the template ignores it
					}
					for i := range f.Payload {
						f.Payload[i] = byte(rng.Uint32())
					}
					n, err := tmpl.Encode(got, f.BTH.PSN, f.IPID, f.Payload)
					if err != nil {
						t.Fatalf("%v: template encode: %v", o, err)
					}
					if _, err := Encode(want, &f); err != nil {
						t.Fatalf("%v: encode: %v", o, err)
					}
					if !bytes.Equal(got[:n], want) {
						t.Fatalf("%v v6=%v vlan=%v payload %d: template frame\n%x\nwant\n%x", o, v6, vlan, len(f.Payload), got[:n], want)
					}
				}
			}
		}
	}
}

// TestTemplateErrors: a template encodes nothing before Set or after a
// failed Set, nor a payload of another length, a PSN beyond 24 bits or
// into a short buffer.
func TestTemplateErrors(t *testing.T) {
	var tmpl Template
	buf := make([]byte, 2048)
	if _, err := tmpl.Encode(buf, 0, 0, nil); !errors.Is(err, ErrInvalidFields) {
		t.Errorf("zero template: %v, want ErrInvalidFields", err)
	}
	if tmpl.PayloadLen() != -1 || tmpl.FrameLen() != 0 {
		t.Errorf("zero template: payload %d, frame %d; want -1, 0", tmpl.PayloadLen(), tmpl.FrameLen())
	}
	f := sampleFields(make([]byte, 1024))
	if err := tmpl.Set(&f); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		buf     []byte
		psn     PSN
		payload []byte
		want    error
	}{
		{"payload longer", buf, 0, make([]byte, 1025), ErrInvalidFields},
		{"payload shorter", buf, 0, make([]byte, 1020), ErrInvalidFields},
		{"PSN beyond 24 bits", buf, PSNMask + 1, f.Payload, ErrInvalidFields},
		{"short buffer", buf[:f.Len()-1], 0, f.Payload, ErrShortBuffer},
	} {
		if _, err := tmpl.Encode(c.buf, c.psn, 0, c.payload); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if n, err := tmpl.Encode(buf, PSNMask, 0, f.Payload); err != nil || n != f.Len() {
		t.Errorf("the largest PSN: %d bytes, %v; want %d", n, err, f.Len())
	}
	bad := f
	bad.SrcIP = netip.MustParseAddr("fd00::2")
	if err := tmpl.Set(&bad); !errors.Is(err, ErrInvalidFields) {
		t.Fatalf("mixed address families: %v, want ErrInvalidFields", err)
	}
	if _, err := tmpl.Encode(buf, 0, 0, f.Payload); !errors.Is(err, ErrInvalidFields) {
		t.Errorf("after a failed Set: %v, want ErrInvalidFields", err)
	}
}
