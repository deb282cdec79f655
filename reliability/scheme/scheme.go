// Package scheme names SDR's reliability schemes: one type for an
// algorithm and its erasure code, with the one printer and parser that
// the engines, the models, the simulator and the commands share.
//
// A scheme prints as its kind, followed for EC and Hybrid by its code
// when it has one: "sr-rto", "sr-nack", "auto", "ec", "ec-mds(32,8)",
// "hybrid-xor(8,2)". Parse reads that form back, ignoring letter case
// and surrounding spaces.
package scheme

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sdr-rdma/sdr/reliability/ec"
)

// ErrInvalid: a name that is no scheme, or a code the scheme cannot take.
var ErrInvalid = errors.New("scheme: invalid")

// Kind is a reliability algorithm. The zero Kind is invalid, so an unset
// Scheme fails Validate.
type Kind uint8

// The kinds.
const (
	// SRRTO is Selective Repeat driven by per-chunk retransmission
	// timeouts (RTO = RTT + α·RTT).
	SRRTO Kind = iota + 1
	// SRNACK is Selective Repeat where the receiver NACKs holes as soon
	// as a later chunk arrives, with RTO as the sender's fallback.
	SRNACK
	// EC sends k data + m parity chunks per submessage; after the
	// fallback timeout the receiver NACKs the submessages it cannot
	// decode, which are repaired by SR.
	EC
	// Hybrid is EC whose receiver NACKs an undecodable submessage as soon
	// as chunks of a later submessage arrive, not after the fallback
	// timeout.
	Hybrid
	// Auto picks SR or EC and its code per transfer from the measured
	// link (reliability/model).
	Auto
)

var kindNames = [...]string{SRRTO: "sr-rto", SRNACK: "sr-nack", EC: "ec", Hybrid: "hybrid", Auto: "auto"}

// String returns the kind's name ("sr-rto", "sr-nack", "ec", "hybrid",
// "auto"), or "kind(n)" for an invalid value.
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Coded reports whether the kind sends parity (EC and Hybrid).
func (k Kind) Coded() bool { return k == EC || k == Hybrid }

// Valid reports whether k is one of the kinds.
func (k Kind) Valid() bool { return k >= SRRTO && k <= Auto }

// parseKind reads a kind's name in any letter case.
func parseKind(s string) (Kind, bool) {
	for k, name := range kindNames {
		if name != "" && strings.EqualFold(name, s) {
			return Kind(k), true
		}
	}
	return 0, false
}

// Scheme is a reliability scheme: an algorithm and, for EC and Hybrid,
// the erasure code. A coded scheme whose Code is zero takes its user's
// default (DefaultCode, unless the user says otherwise).
type Scheme struct {
	Kind Kind
	Code ec.Params
}

// DefaultCode is the code of EC and Hybrid when none is named: MDS(32,8),
// the paper's.
var DefaultCode = ec.Params{Kind: ec.MDS, K: 32, M: 8}

// Coded reports whether the scheme sends parity (EC and Hybrid).
func (s Scheme) Coded() bool { return s.Kind.Coded() }

// WithDefaultCode returns s with DefaultCode where it is coded and names
// no code.
func (s Scheme) WithDefaultCode() Scheme {
	if s.Coded() && s.Code == (ec.Params{}) {
		s.Code = DefaultCode
	}
	return s
}

// String prints the scheme as Parse reads it: "sr-nack", "ec",
// "ec-mds(32,8)".
func (s Scheme) String() string {
	if s.Coded() && s.Code != (ec.Params{}) {
		return s.Kind.String() + "-" + s.Code.String()
	}
	return s.Kind.String()
}

// Validate checks that the kind is one of the kinds and that only a
// coded scheme names a code, a valid one.
func (s Scheme) Validate() error {
	switch {
	case !s.Kind.Valid():
		return fmt.Errorf("scheme: %v: unknown kind: %w", s, ErrInvalid)
	case !s.Coded() && s.Code != (ec.Params{}):
		return fmt.Errorf("scheme: %v takes no code (%v): %w", s.Kind, s.Code, ErrInvalid)
	case s.Coded() && s.Code != (ec.Params{}):
		if err := s.Code.Validate(); err != nil {
			return fmt.Errorf("scheme: %v: %w: %w", s, ErrInvalid, err)
		}
	}
	return nil
}

// Parse reads a scheme as String prints it: "sr-rto", "sr-nack",
// "auto", "ec" or "hybrid" (no code: the user's default), and EC or
// Hybrid with a code, "ec-mds(32,8)", "hybrid-xor(8,2)".
func Parse(s string) (Scheme, error) {
	in := strings.TrimSpace(s)
	if k, ok := parseKind(in); ok {
		return Scheme{Kind: k}, nil
	}
	name, code, withCode := strings.Cut(in, "-")
	if k, ok := parseKind(name); ok && withCode && k.Coded() {
		p, err := ec.ParseParams(strings.ToLower(code))
		if err != nil {
			return Scheme{}, fmt.Errorf("scheme: %q: %w: %w", s, ErrInvalid, err)
		}
		return Scheme{Kind: k, Code: p}, nil
	}
	return Scheme{}, fmt.Errorf("scheme: %q: want sr-rto, sr-nack, ec, hybrid or auto, ec and hybrid optionally with -mds(K,M) or -xor(K,M): %w", s, ErrInvalid)
}

// MustParse is Parse for names known to be valid (tables, tests); it
// panics on an error.
func MustParse(s string) Scheme {
	sc, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return sc
}
