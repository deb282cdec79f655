package wire

import (
	"os"
	"testing"
)

// The SDR data path's packet: UC WRITE-Only-with-Imm, 1024-byte payload,
// IPv4, as emunic sends it.

func BenchmarkEncodeWriteOnlyImm1024(b *testing.B) {
	f := sampleFields(make([]byte, 1024))
	buf := make([]byte, f.Len())
	b.SetBytes(int64(len(f.Payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(buf, &f); err != nil {
			b.Fatal(err)
		}
		f.BTH.PSN = f.BTH.PSN.Next()
	}
}

func BenchmarkDecodeWriteOnlyImm1024(b *testing.B) {
	f := sampleFields(make([]byte, 1024))
	frame := encodeFrame(b, &f)
	var p Packet
	b.SetBytes(int64(len(f.Payload)))
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Decode(frame); err != nil {
			b.Fatal(err)
		}
		if !p.ICRCValid() {
			b.Fatal("bad ICRC")
		}
	}
}

// BenchmarkDecodeHeadersOnly is Decode without the ICRC check: the
// difference to BenchmarkDecodeWriteOnlyImm1024 is the ICRC's share.
func BenchmarkDecodeHeadersOnly(b *testing.B) {
	f := sampleFields(make([]byte, 1024))
	frame := encodeFrame(b, &f)
	var p Packet
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Decode(frame); err != nil {
			b.Fatal(err)
		}
	}
}

// decodedSample returns the benchmarks' 1024 B packet decoded, with
// SetBytes and ReportAllocs set for a per-packet measurement.
func decodedSample(b *testing.B) *Packet {
	f := sampleFields(make([]byte, 1024))
	frame := encodeFrame(b, &f)
	p := new(Packet)
	if err := p.Decode(frame); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	return p
}

// BenchmarkICRC1024 is the ICRC alone over the same packet.
func BenchmarkICRC1024(b *testing.B) {
	p := decodedSample(b)
	for b.Loop() {
		if p.ComputeICRC() != p.ICRC {
			b.Fatal("bad ICRC")
		}
	}
}

// BenchmarkICRCInPlace1024 is BenchmarkICRC1024 for a frame the caller
// owns: headers masked in place, one CRC call.
func BenchmarkICRCInPlace1024(b *testing.B) {
	p := decodedSample(b)
	for b.Loop() {
		if !p.ICRCValidInPlace() {
			b.Fatal("bad ICRC")
		}
	}
}

func readFile(tb testing.TB, path string) []byte {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// The SDR data path's packet again, from a Template: what changes per
// packet is the PSN, IPv4 ID, RETH address, immediate and payload.

func BenchmarkTemplateWriteOnlyImm1024(b *testing.B) {
	f := sampleFields(make([]byte, 1024))
	var tmpl Template
	if err := tmpl.Set(&f); err != nil {
		b.Fatal(err)
	}
	v := TemplateFields{PSN: f.BTH.PSN, IPID: f.IPID, RETH: f.RETH, Imm: f.Imm, Payload: f.Payload}
	buf := make([]byte, f.Len())
	b.SetBytes(int64(len(f.Payload)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tmpl.Encode(buf, &v); err != nil {
			b.Fatal(err)
		}
		v.PSN, v.IPID, v.RETH.VA, v.Imm = v.PSN.Next(), v.IPID+1, v.RETH.VA+1024, v.Imm+1
	}
}
