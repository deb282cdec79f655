package ec

import (
	"errors"
	"math"
	"testing"
)

func TestLayout(t *testing.T) {
	for _, tc := range []struct {
		p                                Params
		dataLen, chunkSize               int
		chunks, subs, lastFirst, lastLen int
	}{
		{Params{MDS, 32, 8}, 8 << 20, 4096, 2048, 64, 2016, 32},
		{Params{XOR, 4, 2}, 6*16 + 5, 16, 7, 2, 4, 3},
		{Params{MDS, 4, 2}, 1, 16, 1, 1, 0, 1},
		{Params{MDS, 4, 3}, 5 * 16, 16, 5, 2, 4, 1},
	} {
		l, err := NewLayout(tc.p, tc.dataLen, tc.chunkSize)
		if err != nil {
			t.Fatal(err)
		}
		if l.DataChunks() != tc.chunks || l.Submessages() != tc.subs ||
			l.ParityChunks() != tc.subs*tc.p.M || l.ParityLen() != tc.subs*tc.p.M*tc.chunkSize {
			t.Fatalf("%v: chunks %d subs %d parity %d/%d", l, l.DataChunks(), l.Submessages(), l.ParityChunks(), l.ParityLen())
		}
		if first, n := l.DataRange(tc.subs - 1); first != tc.lastFirst || n != tc.lastLen {
			t.Fatalf("%v: last DataRange = %d,%d", l, first, n)
		}
		// Every data chunk is in exactly the submessage whose range holds it,
		// every parity chunk likewise, and the chunk lengths add up.
		total := 0
		for i := range l.DataChunks() {
			first, n := l.DataRange(l.Submessage(i))
			if i < first || i >= first+n {
				t.Fatalf("%v: chunk %d not in range of submessage %d", l, i, l.Submessage(i))
			}
			total += l.ChunkLen(i)
		}
		if total != tc.dataLen {
			t.Fatalf("%v: chunk lengths add to %d", l, total)
		}
		for i := range l.ParityChunks() {
			first, n := l.ParityRange(l.ParitySubmessage(i))
			if i < first || i >= first+n || n != tc.p.M {
				t.Fatalf("%v: parity chunk %d not in range of submessage %d", l, i, l.ParitySubmessage(i))
			}
		}
		for _, bad := range []int{-1, l.Submessages()} {
			if _, n := l.DataRange(bad); n != 0 {
				t.Fatalf("DataRange(%d) n = %d", bad, n)
			}
			if _, n := l.ParityRange(bad); n != 0 {
				t.Fatalf("ParityRange(%d) n = %d", bad, n)
			}
		}
		if l.Submessage(-1) != -1 || l.Submessage(l.DataChunks()) != -1 ||
			l.ParitySubmessage(-1) != -1 || l.ParitySubmessage(l.ParityChunks()) != -1 ||
			l.ChunkLen(-1) != 0 || l.ChunkLen(l.DataChunks()) != 0 {
			t.Fatalf("%v: out-of-range index accepted", l)
		}
	}
}

func TestLayoutEmpty(t *testing.T) {
	l, err := NewLayout(Params{XOR, 4, 2}, 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	if l.DataChunks() != 0 || l.Submessages() != 0 || l.ParityLen() != 0 {
		t.Fatalf("empty message: %v", l)
	}
	c, err := NewCoder(l)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Encode(nil, nil); err != nil {
		t.Fatalf("Encode of empty message: %v", err)
	}
	if err := c.EncodeSubmessage(0, nil, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("EncodeSubmessage(0) of empty message: %v", err)
	}
}

func TestLayoutInvalid(t *testing.T) {
	for _, tc := range []struct {
		p                  Params
		dataLen, chunkSize int
	}{
		{Params{XOR, 4, 5}, 100, 10},
		{Params{MDS, 4, 2}, -1, 10},
		{Params{MDS, 4, 2}, 100, 0},
		{Params{MDS, 1, 255}, math.MaxInt, 1},
		{Params{MDS, 4, 2}, 10, math.MaxInt},
	} {
		if _, err := NewLayout(tc.p, tc.dataLen, tc.chunkSize); !errors.Is(err, ErrInvalid) {
			t.Errorf("NewLayout(%v, %d, %d) = %v, want ErrInvalid", tc.p, tc.dataLen, tc.chunkSize, err)
		}
	}
}
