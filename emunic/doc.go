// Package emunic is a userspace, packet-level emulated RoCEv2 NIC modelled
// on verbs: a Device owns a Port (how frames reach the wire), a GID and MAC,
// protection domains, memory regions (including zero-based indirect MRs
// whose slots point at MRs or at the null MR), completion queues and queue
// pairs of the UC, RC and UD transports. Every frame it sends or accepts is
// a real RoCEv2 frame built and checked by package wire, so its traffic is
// what Linux Soft-RoCE sends and Wireshark dissects.
//
// Concurrency: each Device runs a receive goroutine per receive queue of
// its port (receiver.go: one for most ports, one per queue of a multi-queue
// AF_XDP port) that drains its queue and runs the responder and the
// requester's ACK handling; PostSend (and
// PostSendList, one doorbell for a list) runs the requester on the caller's
// goroutine. A paced QP (a RateLimit, or a DCQCN rate cut) leaves its
// packets to the device's TX scheduler instead (txsched.go): one goroutine
// that builds them under the QP's lock as the QP's token bucket allows and
// transmits them outside it, so that nothing sleeps under a lock and the
// receive goroutines never wait for a pacer; a post that finds the QP's
// queue empty and its bucket holding tokens for all of it still goes out
// at once. Frames are encoded straight into the port's transmit memory
// when the port lends it (TxBufferLender: the AF_XDP port's UMEM), so
// they are never copied on the way out. A QP's state is guarded by its own
// mutex; memory-region tables are copy-on-write snapshots read without
// locks on the packet path; counters are atomics. Timers (RC retransmission,
// RNR back-off, the pipe's link delays) use package time, so tests run them
// on a fake clock with testing/synctest.
//
// Receive checks: the device refuses what a RoCEv2 NIC (and Linux rxe)
// refuses, each refused frame counted under its reason (DropReasons): a
// destination MAC other than its own or broadcast, a bad IPv4 header
// checksum or ICRC, another destination address, a connected QP's packet
// from any source but its peer's, a P_Key outside the default partition,
// and, in the responder, rxe's checks in rxe's order (opcode sequence, the
// QP's access flags, a receive WQE, packet lengths, then keys and the
// bounds of the whole message at a WRITE's FIRST). QP numbers are random
// and each memory key carries a random 8-bit tag, so a host on the same
// segment cannot guess them; Config.FixedKeys makes both fixed for tests.
//
// Congestion control (on unless Config.DisableCongestionControl): data
// frames leave ECN-capable (ECT(0)); a CE-marked frame, or any while the
// port's receive ring is over its threshold, draws a CNP to the sending QP
// (the notification point, cnp.go), whose reaction point cuts and recovers
// its rate as DCQCN does (dcqcn.go, QP.CongestionStats).
//
// Files: device.go (the Device), receiver.go (a receive loop: the checks
// before a frame reaches a QP, and what one receive batch gathers: ACKs
// to coalesce, CQs to wake, control frames to send),
// memory.go (PDs, MRs, keys), cq.go, and a QP in six: qp.go (creation,
// state machine, posting receives, teardown), qp_requester.go (send work
// requests and posting them), qp_packets.go (building their packets),
// qp_paced.go (a paced QP's rate and send queue), qp_rc.go (an RC
// requester's window, ACK handling and retransmission) and
// qp_responder.go (the receive side: PSN checks, placing data, ACKs);
// txsched.go (the paced QPs' scheduler), cnp.go and dcqcn.go (a QP's
// congestion notification and reaction points), pipe.go, port.go,
// stats.go.
//
// Ports: Pipe (two devices in one process, with an optional link model that
// delays, drops, reorders and duplicates frames) here; the UDP port (a UDP
// socket on port 4791, unprivileged) lives in emunic/udp and the AF_XDP
// port in emunic/xsk.
package emunic
