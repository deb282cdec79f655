package writebw

import (
	"encoding/json"
	"fmt"
	"io"
)

// Result is what the server measured.
type Result struct {
	Command         string  `json:"command,omitempty"` // the printing side's command line
	Bytes           int     `json:"bytes"`
	Iterations      int     `json:"iterations"`
	BWPeakGbps      float64 `json:"bw_peak_gbps"`
	BWAverageGbps   float64 `json:"bw_average_gbps"`
	MsgRateMpps     float64 `json:"msg_rate_mpps"`
	PacketRateMpps  float64 `json:"packet_rate_mpps"`
	ChunksDelivered int     `json:"chunks_delivered"`
	ChunksTotal     int     `json:"chunks_total"`
	Complete        int     `json:"messages_complete"`
	// With Verify: delivered chunks whose bytes are the client's, those
	// that are not, and messages whose immediate is not their number.
	ChunksVerified int     `json:"chunks_verified"`
	ChunksCorrupt  int     `json:"chunks_corrupt"`
	WrongImm       int     `json:"messages_wrong_imm"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	Device         string  `json:"device"`
	Transport      string  `json:"transport"`
	// ServerNIC is what the server's NIC saw of congestion.
	ServerNIC NICCounters `json:"server_nic"`
	// Reliable is the run's result in reliable mode (-scheme); the fields
	// above are then unset.
	Reliable *ReliableResult `json:"reliable,omitempty"`
	Params
}

func Print(w io.Writer, f *Options, r *Result) {
	r.Command = f.Command
	if r.Reliable != nil && !f.JSON {
		printReliable(w, f, r.Reliable)
		return
	}
	if f.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(r)
		return
	}
	line := "---------------------------------------------------------------------------------------"
	fmt.Fprintln(w, line)
	fmt.Fprintln(w, "                    SDR RDMA_Write BW Test")
	fmt.Fprintf(w, " Command         : %s\n", f.Command)
	fmt.Fprintf(w, " Device (server) : %s\n", r.Device)
	fmt.Fprintf(w, " Transport       : %s\n", r.Transport)
	fmt.Fprintf(w, " MTU             : %d[B]   Chunk: %d[B]   Messages in flight: %d\n", r.MTU, r.ChunkSize, r.InFlight)
	fmt.Fprintf(w, " Loss injection  : %.2f%%\n", 100*r.Loss)
	fmt.Fprintln(w, line)
	fmt.Fprintf(w, " %-10s %-14s %-18s %-20s %-14s\n", "#bytes", "#iterations", "BW peak[Gb/sec]", "BW average[Gb/sec]", "MsgRate[Mpps]")
	fmt.Fprintf(w, " %-10d %-14d %-18.2f %-20.2f %-14.6f\n", r.Bytes, r.Iterations, r.BWPeakGbps, r.BWAverageGbps, r.MsgRateMpps)
	fmt.Fprintln(w, line)
	fmt.Fprintf(w, " Packets: %.4f Mpps   Chunks delivered: %d/%d (%.2f%%)   Complete messages: %d/%d\n",
		r.PacketRateMpps, r.ChunksDelivered, r.ChunksTotal, 100*float64(r.ChunksDelivered)/float64(max(1, r.ChunksTotal)), r.Complete, r.Iterations)
	fmt.Fprintf(w, " Server NIC: %d frames CE-marked or over the RX ring threshold, %d CNPs sent; dropped: %d for a full RX ring, %d for an empty fill ring, %d on a queue without a socket\n",
		r.ServerNIC.CEFrames, r.ServerNIC.CNPsSent, r.ServerNIC.RingFull, r.ServerNIC.FillRingEmpty, r.ServerNIC.NoQueue)
	if len(r.ServerNIC.QueueFrames) > 1 {
		fmt.Fprintf(w, " Server NIC frames by receive queue: %v\n", r.ServerNIC.QueueFrames)
	}
	if r.Verify {
		fmt.Fprintf(w, " Verified: %d chunks hold the client's bytes, %d do not; %d messages with a wrong immediate\n",
			r.ChunksVerified, r.ChunksCorrupt, r.WrongImm)
	}
	fmt.Fprintln(w, line)
}

// ReliableResult is what a reliable write-bw run measured: the client's
// view of each transfer (it learns of completion when the receiver's ACK
// arrives) and the server's verification.
type ReliableResult struct {
	Scheme    string   `json:"scheme"`
	Plans     []string `json:"plans"`
	Window    int      `json:"window"` // transfers under way at once
	Transfers int      `json:"transfers"`
	Verified  int      `json:"transfers_verified"` // bytes and immediate as sent
	Failed    int      `json:"transfers_failed"`
	// FirstError is why the client's first failed transfer failed.
	FirstError    string  `json:"first_error,omitempty"`
	GoodputMbps   float64 `json:"goodput_mbps"`
	P50Ms         float64 `json:"completion_p50_ms"`
	P99Ms         float64 `json:"completion_p99_ms"`
	P999Ms        float64 `json:"completion_p999_ms"`
	Resent        int     `json:"chunks_resent"`
	PacketsResent int     `json:"packets_resent"` // alone, repairing chunks that were mostly there
	Parity        int     `json:"parity_chunks"`
	// SendRetries counts the sends the NIC had no room for at first
	// (sdr.ErrRetry), retried from the sender's backlog.
	SendRetries   int     `json:"send_retries,omitempty"`
	PacingMbps    float64 `json:"pacing_rate_mbps"` // the rate the last transfer ended at
	SRTTMs        float64 `json:"srtt_ms"`
	RTOMs         float64 `json:"rto_ms"`                  // the retransmission timeout the last transfer ended with
	ModelMs       float64 `json:"model_mean_ms,omitempty"` // the model's mean at that rate and round trip
	ModelNote     string  `json:"model_note,omitempty"`
	ElapsedSecond float64 `json:"elapsed_seconds"`
	// How long after the server's completion of a transfer the client
	// learned of it (median and worst; by the two hosts' clocks, so exact
	// when both run on one host).
	LagP50Ms float64 `json:"completion_lag_p50_ms"`
	LagMaxMs float64 `json:"completion_lag_max_ms"`
	// The in-memory link toward the server (-loopback), warm-up included:
	// frames offered, lost at random, dropped by its queue.
	LinkFrames     int64 `json:"link_frames,omitempty"`
	LinkLost       int64 `json:"link_lost,omitempty"`
	LinkQueueDrops int64 `json:"link_queue_drops,omitempty"`
	// Flows holds each connection's result when -flows ran several; the
	// fields above then sum them, goodput as all flows' bytes over the
	// longest flow's run (run with -w 0 so that the flows start together).
	Flows []*ReliableResult `json:"flows,omitempty"`
}

func printReliable(w io.Writer, f *Options, r *ReliableResult) {
	line := "---------------------------------------------------------------------------------------"
	fmt.Fprintln(w, line)
	fmt.Fprintln(w, "                    SDR reliable RDMA_Write BW Test")
	fmt.Fprintf(w, " Command         : %s\n", f.Command)
	fmt.Fprintf(w, " Scheme          : %s (plans: %v)   Transfers in flight: %d\n", r.Scheme, r.Plans, f.Params.reliableWindow())
	fmt.Fprintf(w, " Loss injection  : %.2f%%\n", 100*f.Params.Loss)
	fmt.Fprintln(w, line)
	fmt.Fprintf(w, " %-10s %-10s %-14s %-10s %-10s %-10s %-12s %-10s\n", "#bytes", "#transfers", "goodput[Mb/s]", "p50[ms]", "p99[ms]", "p99.9[ms]", "model[ms]", "verified")
	perFlow := f.Params.Warmup + f.Params.Iterations
	if len(r.Flows) > 0 {
		fmt.Fprintf(w, " %-10d %-10d %-14.1f %-10s %-10s %-10s %-12s %d/%d   (%d flows)\n", f.Params.Size, r.Transfers, r.GoodputMbps,
			"-", "-", "-", "-", r.Verified, len(r.Flows)*perFlow, len(r.Flows))
	} else {
		model := fmt.Sprintf("%.2f", r.ModelMs)
		if r.ModelNote != "" {
			model = "-"
		}
		fmt.Fprintf(w, " %-10d %-10d %-14.1f %-10.2f %-10.2f %-10.2f %-12s %d/%d\n", f.Params.Size, r.Transfers, r.GoodputMbps,
			r.P50Ms, r.P99Ms, r.P999Ms, model, r.Verified, perFlow)
	}
	var sum float64
	for _, fl := range r.Flows {
		sum += fl.GoodputMbps
	}
	for i, fl := range r.Flows {
		fmt.Fprintf(w, " flow %-5d %-10d %-14.1f %-10.2f %-10.2f %-10.2f %-12.1f %d/%d   (share %.1f%%, pacing %.1f Mb/s)\n", i, fl.Transfers,
			fl.GoodputMbps, fl.P50Ms, fl.P99Ms, fl.P999Ms, fl.ModelMs, fl.Verified, perFlow, 100*fl.GoodputMbps/sum, fl.PacingMbps)
	}
	fmt.Fprintln(w, line)
	if len(r.Flows) > 0 {
		fmt.Fprintf(w, " Chunks resent: %d (%d packets alone)   parity: %d (all flows)\n", r.Resent, r.PacketsResent, r.Parity)
	} else {
		fmt.Fprintf(w, " Chunks resent: %d (%d packets alone)   parity: %d   pacing rate reached: %.1f Mb/s   smoothed RTT: %.3f ms   RTO: %.3f ms\n",
			r.Resent, r.PacketsResent, r.Parity, r.PacingMbps, r.SRTTMs, r.RTOMs)
	}
	if r.SendRetries > 0 {
		fmt.Fprintf(w, " Sends the NIC had no room for at first: %d (retried from the sender's backlog)\n", r.SendRetries)
	}
	if r.FirstError != "" {
		fmt.Fprintf(w, " First failure: %s\n", r.FirstError)
	}
	if r.LagMaxMs > 0 {
		fmt.Fprintf(w, " Completion learned by the client: %.3f ms after the server's (median), %.3f ms (worst)\n", r.LagP50Ms, r.LagMaxMs)
	}
	if r.LinkFrames > 0 {
		fmt.Fprintf(w, " Link to the server: %d frames, %d lost at random, %d queue drops (%.2f%%)\n",
			r.LinkFrames, r.LinkLost, r.LinkQueueDrops, 100*float64(r.LinkQueueDrops)/float64(r.LinkFrames))
	}
	if r.ModelNote != "" {
		fmt.Fprintf(w, " Model: %s\n", r.ModelNote)
	} else {
		fmt.Fprintln(w, " Model: reliability/model's mean for one transfer at the pacing rate and RTT reached, with the injected loss")
	}
	fmt.Fprintln(w, line)
}
