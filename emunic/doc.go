// Package emunic is a userspace, packet-level emulated RoCEv2 NIC modelled
// on verbs: a Device owns a Port (how frames reach the wire), a GID and MAC,
// protection domains, memory regions (including zero-based indirect MRs
// whose slots point at MRs or at the null MR), completion queues and queue
// pairs of the UC, RC and UD transports. Every frame it sends or accepts is
// a real RoCEv2 frame built and checked by package wire, so its traffic is
// what Linux Soft-RoCE sends and Wireshark dissects.
//
// Concurrency: each Device runs one receive goroutine that drains its port
// and runs the responder and the requester's ACK handling; PostSend runs the
// requester on the caller's goroutine. A QP's state is guarded by its own
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
// Ports: Pipe (two devices in one process, with an optional link model that
// delays, drops, reorders and duplicates frames) here; the UDP port (a UDP
// socket on port 4791, unprivileged) lives in emunic/udp and the AF_XDP
// port in emunic/xsk.
package emunic
