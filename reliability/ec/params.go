package ec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Sentinel errors; the package wraps them with context. Test with errors.Is.
var (
	// ErrInvalid means bad parameters, a buffer or bitmap of the wrong
	// length, or a submessage index out of range: a caller's bug.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotDecodable means a submessage has lost more chunks than its code
	// can rebuild; more chunks must arrive (or be repaired) first.
	ErrNotDecodable = errors.New("not decodable")
)

// Kind names an erasure code. The zero Kind is invalid, so an unset Params
// fails Validate.
type Kind uint8

const (
	// MDS is Reed–Solomon: any k' of a submessage's k'+M chunks suffice.
	MDS Kind = iota + 1
	// XOR is M interleaved single-parity groups: each group of a submessage
	// survives one lost chunk.
	XOR
)

// String returns "mds" or "xor" (or "Kind(n)" for an invalid value).
func (k Kind) String() string {
	switch k {
	case MDS:
		return "mds"
	case XOR:
		return "xor"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseKind parses "mds" or "xor", in any letter case.
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(s) {
	case "mds":
		return MDS, nil
	case "xor":
		return XOR, nil
	}
	return 0, fmt.Errorf("ec: kind %q: want mds or xor: %w", s, ErrInvalid)
}

// Params selects a code and its shape: K data chunks and M parity chunks
// per submessage. Validate before use; NewLayout does.
type Params struct {
	Kind Kind
	K, M int
}

// Validate reports whether p describes a code this package implements:
// K >= 1, M >= 1, and K+M <= 256 for MDS (the size of GF(2^8)) or M <= K
// for XOR (a parity group without data would be wasted).
func (p Params) Validate() error {
	switch {
	case p.Kind != MDS && p.Kind != XOR:
		return fmt.Errorf("ec: params %v: unknown kind: %w", p, ErrInvalid)
	case p.K < 1 || p.M < 1:
		return fmt.Errorf("ec: params %v: K and M must be >= 1: %w", p, ErrInvalid)
	case p.Kind == MDS && p.K+p.M > 256:
		return fmt.Errorf("ec: params %v: MDS needs K+M <= 256: %w", p, ErrInvalid)
	case p.Kind == XOR && p.M > p.K:
		return fmt.Errorf("ec: params %v: XOR needs M <= K: %w", p, ErrInvalid)
	}
	return nil
}

// String formats p as kind(K,M), e.g. "mds(32,8)"; ParseParams reads it back.
func (p Params) String() string {
	return p.Kind.String() + "(" + strconv.Itoa(p.K) + "," + strconv.Itoa(p.M) + ")"
}

// ParseParams parses kind(K,M) as String writes it ("mds(32,8)", "xor(32,8)";
// letter case and spaces around the numbers are ignored) and validates it.
func ParseParams(s string) (Params, error) {
	name, rest, ok := strings.Cut(strings.TrimSpace(s), "(")
	args, tail, closed := strings.Cut(rest, ")")
	ks, ms, comma := strings.Cut(args, ",")
	if !ok || !closed || tail != "" || !comma {
		return Params{}, fmt.Errorf("ec: params %q: want kind(K,M): %w", s, ErrInvalid)
	}
	kind, err := ParseKind(strings.TrimSpace(name))
	if err != nil {
		return Params{}, err
	}
	k, errK := strconv.Atoi(strings.TrimSpace(ks))
	m, errM := strconv.Atoi(strings.TrimSpace(ms))
	if errK != nil || errM != nil {
		return Params{}, fmt.Errorf("ec: params %q: K and M must be integers: %w", s, ErrInvalid)
	}
	p := Params{Kind: kind, K: k, M: m}
	if err := p.Validate(); err != nil {
		return Params{}, err
	}
	return p, nil
}

// MarshalText implements encoding.TextMarshaler (String's form), so Params
// works with flag.TextVar and text-based config formats.
func (p Params) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler through ParseParams.
func (p *Params) UnmarshalText(b []byte) error {
	q, err := ParseParams(string(b))
	if err != nil {
		return err
	}
	*p = q
	return nil
}
