package emunic

import "sync/atomic"

// Counter names one device counter. They mirror what `rdma statistic` and
// `ethtool -S` show for a RoCE NIC: traffic each way and every reason a
// frame was dropped or refused.
type Counter int

// Device counters.
const (
	TxPackets Counter = iota
	TxBytes
	RxPackets // RoCEv2 frames addressed to this device
	RxBytes
	RxNotRoCE        // frames that were not RoCEv2 (ARP, other UDP, ...)
	RxMalformed      // RoCEv2 frames the codec rejected
	RxBadICRC        // invariant CRC mismatch
	RxWrongGID       // destination IP is not this device's GID
	RxUnknownQP      // no QP with that number, or QP in RESET/INIT
	RxWrongTransport // opcode of another transport than the QP's
	RxBadQKey        // UD Q_Key mismatch
	RxWrongMAC       // destination MAC neither this device's nor broadcast
	RxBadIPChecksum  // IPv4 header checksum mismatch
	RxBadPKey        // BTH P_Key does not match the QP's partition
	RxWrongPeer      // connected QP: source address not the connected peer's
	RxAbandoned      // UC MIDDLE/LAST of a message already refused or cut by a PSN gap
	RxCNPs           // RoCEv2 congestion notifications (counted, not a fault)
	RxQPAccessDenied // the QP is not enabled for the remote operation (RC: NAK Invalid Request)
	RxBadKey         // R_Key names no live MR of this device
	RxOutOfBounds    // access outside the MR or indirect slot
	RxAccessDenied   // MR or QP lacks the remote access right
	RxPSNError       // out-of-sequence PSN (UC drop, RC NAK)
	RxDuplicate      // RC duplicate PSN, acknowledged again
	RxNoRecvWQE      // nothing posted to receive into (UC drop, RC RNR NAK)
	RxInvalidRequest // opcode sequence, length or MTU violation
	RxLengthError    // message longer than the posted receive buffer
	RxNullMRWrites   // payload bytes discarded into the null MR (not a fault)
	RxQPError        // frames for a QP in the error state
	TxRetransmits    // RC packets sent again (go-back-N or timeout)
	TxACKs           // RC ACKs sent
	TxNAKs           // RC NAKs sent (sequence, access, invalid request)
	TxRNRNAKs        // RC RNR NAKs sent
	RxACKs           // RC ACKs received
	RxNAKs           // RC NAKs received
	RxRNRNAKs        // RC RNR NAKs received
	Timeouts         // RC retransmission timeouts
	PortErrors       // frames the port failed to send
	TxCNPs           // RoCEv2 CNPs sent (DCQCN notification point)
	RxCE             // RoCE frames of connected QPs that arrived CE-marked
	RxBacklogCE      // RoCE frames of connected QPs treated as CE: the receive ring was over its threshold
	TxRateCuts       // DCQCN rate cuts CNPs caused at this device's QPs (reaction point; see QP.CongestionStats)
	RxNoQueue        // frames for the device's QPs that arrived on a receive queue the port has no socket on (the kernel got them)
	numCounters
)

var counterNames = [numCounters]string{
	"tx_packets", "tx_bytes", "rx_packets", "rx_bytes", "rx_not_roce", "rx_malformed",
	"rx_bad_icrc", "rx_wrong_gid", "rx_unknown_qp", "rx_wrong_transport", "rx_bad_qkey",
	"rx_wrong_mac", "rx_bad_ip_checksum", "rx_bad_pkey", "rx_wrong_peer", "rx_abandoned", "rx_cnps",
	"rx_qp_access_denied",
	"rx_bad_key", "rx_out_of_bounds", "rx_access_denied", "rx_psn_error", "rx_duplicate",
	"rx_no_recv_wqe", "rx_invalid_request", "rx_length_error", "rx_null_mr_writes",
	"rx_qp_error", "tx_retransmits", "tx_acks", "tx_naks", "tx_rnr_naks", "rx_acks",
	"rx_naks", "rx_rnr_naks", "timeouts", "port_errors", "tx_cnps", "rx_ce", "rx_backlog_ce",
	"tx_rate_cuts", "rx_no_queue",
}

// String returns the counter's metric-style name, e.g. "rx_bad_icrc".
func (c Counter) String() string { return counterNames[c] }

// counters are the live atomics; each is written by whichever goroutine
// observes the event.
type counters [numCounters]atomic.Uint64

func (c *counters) add(which Counter, n uint64) { c[which].Add(n) }
func (c *counters) inc(which Counter)           { c[which].Add(1) }

// Stats is a snapshot of a device's counters.
type Stats [numCounters]uint64

// Get returns one counter.
func (s Stats) Get(c Counter) uint64 { return s[c] }

// Each calls fn for every counter in order, with its name.
func (s *Stats) Each(fn func(name string, value uint64)) {
	for i, v := range s {
		fn(counterNames[i], v)
	}
}

// DropReasons lists every counter that stands for a refused frame, each a
// named reason; a refused frame moves exactly one of them.
var DropReasons = []Counter{RxNotRoCE, RxMalformed, RxBadICRC, RxWrongGID, RxWrongMAC,
	RxBadIPChecksum, RxUnknownQP, RxWrongTransport, RxWrongPeer, RxBadPKey, RxBadQKey,
	RxBadKey, RxOutOfBounds, RxAccessDenied, RxQPAccessDenied, RxPSNError, RxNoRecvWQE, RxInvalidRequest,
	RxLengthError, RxQPError, RxAbandoned, RxNoQueue}

// Drops returns the sum of every counter that stands for a refused frame.
func (s *Stats) Drops() uint64 {
	var n uint64
	for _, c := range DropReasons {
		n += s[c]
	}
	return n
}

func (c *counters) snapshot() Stats {
	var s Stats
	for i := range c {
		s[i] = c[i].Load()
	}
	return s
}
