// Package conform is a RoCEv2 responder conformance battery: crafted
// frames (valid and invalid ICRCs, every BTH field edge, RETH bounds and
// keys, PSN windows, duplicates, READs, atomics, truncations, L2/L3
// faults) sent at any RoCEv2 target through a raw port, each case's
// replies (ACK/NAK syndromes, MSNs, READ response bytes, atomic original
// values) and memory effects compared with what the InfiniBand
// Architecture Specification (Vol 1 ch. 9, annex A17) requires, with
// Linux rxe's behaviour where the specification leaves room.
//
// # What a target provides
//
// A Target names one memory region with remote write, read and atomic
// rights (RKey, VA, Len), a second region with remote read only (for the
// access-rights cases), and connected QPs, all facing the battery's own
// address and MAC with remote QP number equal to their own QP number (so
// the battery tells replies apart by their destination QP) and path MTU
// Config.MTU, all expecting PSN Target.PSN first:
//   - one RC "fence" QP the battery never disturbs;
//   - one fresh RC QP per RC case and one fresh UC QP per UC case (Needs
//     counts them): cases that move a QP to the error state then cannot
//     affect another case;
//   - RC QPs with max_dest_rd_atomic of at least 4 and with remote write,
//     read and atomic access, and four receive WQEs of 8 bytes each
//     (RecvWQEs, RecvBufLen) posted on each QP.
//
// # Fences
//
// Memory is observed through the fence QP: before a case the battery
// READs the case's 4 KiB window, after it READs it again. A target
// processes frames in arrival order (emunic has one receive goroutine per
// receive queue, and the testbed's veths one queue; rxe runs each request
// on its QP's task in softirq order, READ responses after), so the fence READ's response proves every earlier frame was
// processed, and its bytes show what they did. After the case's own
// frames a probe goes to the case QP: on RC a WRITE ONLY of an 8-byte
// marker with AckReq at the PSN the case should have left the QP
// expecting, which must be ACKed with the MSN the case should have left
// (or, when the case must have moved the QP to the error state, must be
// ignored); on UC a WRITE ONLY of the marker that must land. A frame that
// was wrongly executed shows in memory, in the MSN, or in the probe being
// taken as a duplicate (rxe and the specification do not execute a
// duplicate WRITE, so its marker would be missing).
//
// Concurrency: Run owns its port and drives one case at a time; a Target
// and the Battery's cases are plain values, safe to share read-only.
package conform

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/sdr-rdma/sdr/wire"
)

// WindowSize is how many bytes of a memory region one case owns and
// observes.
const WindowSize = 4096

// Region is a registered memory region of the target.
type Region struct {
	RKey uint32
	VA   uint64
	Len  uint64
}

// Target is a RoCEv2 responder under test and the resources it set up
// for the battery (see the package comment).
type Target struct {
	MAC [6]byte
	IP  netip.Addr
	// MR has remote write, read and atomic access; RO remote read only.
	MR, RO Region
	// PSN is the first PSN every QP of the target expects.
	PSN wire.PSN
	// Fence is the RC QP the battery reads memory through.
	Fence uint32
	// RC and UC are fresh connected QPs, one per case of that type.
	RC, UC []uint32
}

// ErrSpec means a target description cannot be parsed or is incomplete.
var ErrSpec = errors.New("conform: bad target description")

// String formats t as the one-line description ParseTarget reads (and the
// guest's conform_target prints):
//
//	CONFORM mac=52:54:00:77:00:02 ip=10.77.0.2 psn=fffff0 rkey=1234 va=7f00 len=1048576
//	        rorkey=5678 rova=8000 rolen=4096 fence=11 rc=12,13 uc=14,15
//
// Numbers other than len and rolen are hexadecimal.
func (t Target) String() string {
	hexList := func(qpns []uint32) string {
		s := make([]string, len(qpns))
		for i, q := range qpns {
			s[i] = strconv.FormatUint(uint64(q), 16)
		}
		return strings.Join(s, ",")
	}
	return fmt.Sprintf("CONFORM mac=%s ip=%s psn=%x rkey=%x va=%x len=%d rorkey=%x rova=%x rolen=%d fence=%x rc=%s uc=%s",
		macString(t.MAC), t.IP, uint32(t.PSN), t.MR.RKey, t.MR.VA, t.MR.Len, t.RO.RKey, t.RO.VA, t.RO.Len, t.Fence,
		hexList(t.RC), hexList(t.UC))
}

func macString(m [6]byte) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

// ParseMAC parses "aa:bb:cc:dd:ee:ff".
func ParseMAC(s string) ([6]byte, error) {
	var m [6]byte
	parts := strings.Split(s, ":")
	if len(parts) != 6 {
		return m, fmt.Errorf("%w: MAC %q", ErrSpec, s)
	}
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 16, 8)
		if err != nil {
			return m, fmt.Errorf("%w: MAC %q", ErrSpec, s)
		}
		m[i] = byte(v)
	}
	return m, nil
}

// ParseQPNs parses a comma-separated list of hexadecimal QP numbers.
func ParseQPNs(s string) ([]uint32, error) {
	if s == "" {
		return nil, nil
	}
	var out []uint32
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(strings.TrimPrefix(f, "0x"), 16, 24)
		if err != nil {
			return nil, fmt.Errorf("%w: QP number %q", ErrSpec, f)
		}
		out = append(out, uint32(v))
	}
	return out, nil
}

// ParseTarget reads the line Target.String writes (the first line of s
// that starts with "CONFORM "). The MAC may be absent (zero: resolve it).
func ParseTarget(s string) (Target, error) {
	var line string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "CONFORM ") {
			line = strings.TrimSpace(l)
			break
		}
	}
	if line == "" {
		return Target{}, fmt.Errorf("%w: no CONFORM line", ErrSpec)
	}
	var t Target
	seen := map[string]bool{}
	for _, kv := range strings.Fields(line)[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return Target{}, fmt.Errorf("%w: %q", ErrSpec, kv)
		}
		seen[k] = true
		var err error
		hex := func() uint64 {
			var n uint64
			if err == nil {
				n, err = strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
			}
			return n
		}
		dec := func() uint64 {
			var n uint64
			if err == nil {
				n, err = strconv.ParseUint(v, 10, 64)
			}
			return n
		}
		switch k {
		case "mac":
			t.MAC, err = ParseMAC(v)
		case "ip":
			t.IP, err = netip.ParseAddr(v)
		case "psn":
			t.PSN = wire.PSN(hex() & wire.PSNMask)
		case "rkey":
			t.MR.RKey = uint32(hex())
		case "va":
			t.MR.VA = hex()
		case "len":
			t.MR.Len = dec()
		case "rorkey":
			t.RO.RKey = uint32(hex())
		case "rova":
			t.RO.VA = hex()
		case "rolen":
			t.RO.Len = dec()
		case "fence":
			t.Fence = uint32(hex())
		case "rc":
			t.RC, err = ParseQPNs(v)
		case "uc":
			t.UC, err = ParseQPNs(v)
		}
		if err != nil {
			return Target{}, fmt.Errorf("%w: %s: %v", ErrSpec, kv, err)
		}
	}
	for _, k := range []string{"ip", "psn", "rkey", "va", "len", "fence"} {
		if !seen[k] {
			return Target{}, fmt.Errorf("%w: %s missing", ErrSpec, k)
		}
	}
	return t, nil
}

// Validate reports what the battery cannot work without.
func (t *Target) Validate() error {
	switch {
	case !t.IP.Is4():
		return fmt.Errorf("%w: the battery builds IPv4 frames; target address %v", ErrSpec, t.IP)
	case t.MR.Len < 3*WindowSize:
		return fmt.Errorf("%w: region of %d bytes; at least %d needed", ErrSpec, t.MR.Len, 3*WindowSize)
	case t.Fence == 0:
		return fmt.Errorf("%w: no fence QP", ErrSpec)
	}
	return nil
}
