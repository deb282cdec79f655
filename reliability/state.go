package reliability

import (
	"fmt"
	"strings"
	"time"
)

// A transfer that ends without progress (Config.Timeout, or the peer's
// abort for it) says in its error what each engine was waiting for: a
// stalled transfer and a slow path then read apart from the error alone,
// without a trace. Each engine states its own side; the peer's half is in
// the peer's error.

// state describes x as the sender sees it at now. It costs O(queued runs
// + timed flights); it runs once, when x fails.
func (s *SenderEngine) state(now time.Time, x *sendXfer) string {
	var repairs, fresh, flights int
	for _, p := range s.repairs {
		if p.transfer == x.id {
			repairs++
		}
	}
	for _, p := range s.fresh {
		if p.transfer == x.id {
			fresh++
		}
	}
	var nextFlight time.Time
	for _, f := range s.flights {
		if f.transfer == x.id {
			flights++
			if nextFlight.IsZero() || f.deadline.Before(nextFlight) {
				nextFlight = f.deadline
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sender: %d of %d chunks acknowledged (first missing %d); queued %d repair and %d first-pass runs; %d flights timed",
		x.ackedN, x.chunks, x.firstUnacked(), repairs, fresh, flights)
	if !nextFlight.IsZero() {
		fmt.Fprintf(&b, " (next %s)", relative(now, nextFlight))
	}
	fmt.Fprintf(&b, "; %d chunks sent again, %d packets, %d probes; pacing %.1f Mbit/s, the wire busy until %s",
		x.stats.Retransmitted, x.stats.PacketsResent, x.stats.Probes, s.rc.rate/1e6, relative(now, s.wireFree))
	if s.rc.startup {
		b.WriteString(" (startup)")
	}
	fmt.Fprintf(&b, "; SRTT %v, RTO %v backed off %d times; last ACK news %s, last answer %s, last new chunk acknowledged %s",
		s.rtt.srtt, s.rtt.rto, s.silent, relative(now, s.lastNews), relative(now, s.lastAnswer), relative(now, x.lastNewAck))
	return b.String()
}

// state describes x as the receiver sees it at now. It costs
// O(submessages); it runs once, when x fails.
func (r *ReceiverEngine) state(now time.Time, x *recvXfer) string {
	var b strings.Builder
	fmt.Fprintf(&b, "receiver: %d of %d data chunks (all below %d, highest %d)", x.have, x.chunks, x.cum, x.highest)
	if x.coded {
		fmt.Fprintf(&b, ", %d of %d parity, %d of %d submessages undecodable", x.haveParity, x.parity, x.undecodable, len(x.decodable))
		if x.ftoAt.IsZero() {
			b.WriteString(", no fallback armed")
		} else {
			fmt.Fprintf(&b, ", fallback %s", relative(now, x.ftoAt))
		}
	}
	fmt.Fprintf(&b, "; last chunk %s; holes NACKed below %d, %d re-NACKs pending", relative(now, x.lastArrival), x.nackedBelow, x.renacks.Len())
	if due := r.renackDue(x); !due.IsZero() {
		fmt.Fprintf(&b, " (next %s)", relative(now, due))
	}
	if !x.tailAt.IsZero() {
		fmt.Fprintf(&b, "; tail probe %s, packet frontier %d", relative(now, x.tailAt), x.tailFrontier)
	}
	fmt.Fprintf(&b, "; RTO %v, reorder window %v", r.rto, r.reorder)
	return b.String()
}

// relative says when t is from now: "never", "3ms ago" or "in 3ms".
func relative(now, t time.Time) string {
	switch {
	case t.IsZero():
		return "never"
	case t.After(now):
		return "in " + t.Sub(now).String()
	}
	return now.Sub(t).String() + " ago"
}
