// Package model holds analytic completion-time models of the reliability
// schemes of SDR-RDMA (Khalilov et al., SC'25, arXiv 2505.05366) — Selective
// Repeat with timeouts (SR-RTO) or NACKs (SR-NACK), erasure coding with a
// Reed–Solomon (MDS) or interleaved XOR code and SR repair, and the hybrid
// of the two (EC whose receiver NACKs a failed submessage at once) — plus bounds on
// a ring Allreduce and Choose, which picks the scheme with the smallest
// predicted mean. Auto mode, the simulator and the reports use it.
//
// # Sources
//
// The paper's appendices (A: SR tail sum over retransmission rounds, B: EC
// bound with MDS and XOR decode probabilities, C: ring-Allreduce bound) were
// not readable from this workspace: only the abstract and the opening
// section were. The models below are therefore derived from first
// principles under the engine semantics this package states, and go
// further than a bound where that was cheap:
// SR and EC are full distributions (mean and any quantile), checked against
// a chunk-by-chunk Monte-Carlo in the tests.
//
// # Semantics
//
// A message of size bytes is N = ⌈size/ChunkSize⌉ chunks; T = ChunkSize·8/B
// is one chunk's injection time and R the round-trip time (one-way R/2, no
// queueing). Every transmission of a chunk is lost independently with
// probability p (Link.Loss; ChunkLoss converts a packet loss rate); control
// messages are never lost. Time 0 is the first bit injected; a message
// completes when the receiver holds every data byte (decoded, for EC;
// decoding takes no time). Chunk i's first transmission starts at i·T and,
// if it arrives, lands at i·T + T + R/2.
//
// SR-RTO: every transmission that is lost is sent again RTO = R + α·R after
// its injection start, immediately (retransmissions do not queue behind the
// first pass). A chunk lost G times (G geometric, P(G ≥ g) = p^g) lands at
// i·T + G·RTO + T + R/2.
//
// SR-NACK: every lost transmission is repaired about one RTT after its
// injection start, the paper's SR-NACK: a first transmission followed by a
// delivered first transmission of a later chunk when that chunk's NACK
// reaches the sender, RTT + 2·T after the lost chunk's injection start
// (the next chunk lands T + R/2 after its own start, the NACK takes R/2);
// the run lost at the very end of the first pass when the sender's tail
// probe, sent as the first pass ends, has crossed and the receiver's NACK
// come back; a lost retransmission when the receiver, having waited a
// round trip for it, NACKs it again. The model takes RTT + 2·T for the
// first repair and RTT for every further one; it ignores that a NACK waits
// for the next *delivered* chunk (a chunk followed by j lost ones is
// repaired j·T later) and that the tail run's chunks wait for the end of
// the first pass (both part of Estimate.Bound).
//
// EC(k, m): L = ⌈N/k⌉ submessages, each its k data chunks (the last one
// k' = N − (L−1)·k) followed by m parity chunks, injected submessage by
// submessage: N + L·m chunks in all. An MDS submessage decodes iff at least
// k of its k+m chunks arrive; an XOR submessage iff each group (data j with
// j mod m = i, and parity i) lost at most one chunk. If every submessage
// decodes, the message completes when the last submessage becomes
// decodable — at the arrival of its k'-th data chunk when nothing of it was
// lost, i.e. (N + L·m − m)·T + R/2, m·T before its parity has landed.
// Otherwise the receiver's fallback timeout, armed at R/2 (the first bit of
// the message reaching it), fires at R/2 + FTO with FTO = (N + L·m)·T +
// 0.5·α·R; the receiver NACKs every missing data chunk of every failed
// submessage (R/2 to the sender), which are sent back to back and repaired
// by SR-RTO if lost; a failed submessage completes as soon as it is
// decodable (an MDS one needs e − m of its resent chunks when it lost e; an
// XOR group needs all of its resent data when its parity was lost, all but
// one otherwise).
//
// Hybrid(k, m): EC whose receiver NACKs a submessage it cannot decode as
// soon as a later chunk arrives, not at the fallback timeout. Every
// submessage s but the last is NACKed when the first chunk of s+1, injected
// from end_s = (s+1)·(k+m)·T, lands (T + R/2 later); the NACK takes R/2,
// the missing data chunks are resent back to back and land R/2 after their
// injection, and lost resends are repaired after RTO each, as EC's. The
// last submessage is EC's message of one submessage: it decodes on its
// first pass or waits for the fallback timeout.
//
// # SR: the fluid model, exact to one injection time
//
// X = max_i (i·T + offset_i) is the last chunk's injection start plus delivery
// offset, and completion = X + T + R/2. Spreading each chunk's start
// uniformly over its injection interval [i·T, (i+1)·T) ("fluid") gives a
// distribution F_c with F(x − T) ≤ F_c(x) ≤ F(x) for the true CDF F, because
// every chunk's P(delivered by x − s) grows with x − s. The model reports
// X_c + R/2, so the true completion time lies within [model, model + T] —
// mean and every quantile — and equals it when p = 0. In the fluid model
//
//	log F_c(x) = (1/T) Σ_segments ∫ log P(offset ≤ x − s) ds
//
// is continuous and piecewise linear in x, with kinks where x − s crosses a
// retransmission level; the mean is the exact integral of 1 − F_c over
// those pieces (two non-negative terms per piece, no cancellation at 1e-15
// survival), and a quantile is found by bisection. The p^(k+1) levels are
// truncated where their weight falls below 1e-17. For a message whose
// injection N·T is much shorter than RTO this reduces to the classic tail
// sum E[max_i G_i] = Σ_{r≥1} 1 − (1 − p^r)^N rounds of RTO (of RTT for
// SR-NACK);
// for 8 GiB at 400 Gbit/s (N·T = 172 ms > RTO = 75 ms) the injection
// offsets of the chunks matter and the fluid integral keeps them.
//
// The SR models ignore that retransmissions share the link with the first
// pass; Estimate.Bound adds that contention (T per expected
// retransmission, N·p/(1 − p)·T) to the fluid's T, and for SR-NACK the
// NACK's wait behind a loss run (T per chunk of the expected longest run).
//
// # EC: a discrete distribution, exact up to the resends' injection
//
// The completion time takes values on atoms: the positions within the last
// submessage at which it may become decodable, then one atom per repair
// round r = 0, 1, … at (N + L·m)·T + (1.5 + α/2)·R + E[M | fallback]·T +
// r·RTO, where M is the number of resent chunks. P(completion > atom) is
// computed for each: on the first pass from the last submessage's chunks
// and the probability that every earlier submessage decodes; in repair
// round r from every decode unit (an MDS submessage, or an XOR group) still
// failing when each resent chunk is lost with probability p^(r+1) — a sum
// over the unit's failure patterns (d data and f parity chunks lost) of
// P(Bin(d, p^(r+1)) > slack), taken in log space over the L units. Only the
// resends' staggering is approximated (by its mean), so Estimate.Bound is T
// per expected resent chunk; the quantiles may be off by the injection of
// the resent chunks (at most N·T, microseconds on the paper's grid).
//
// With P_fb = 1 − Π_submessages P_decode the fallback probability and S_r the
// survival after repair round r, the mean is
//
//	E[C] = E[first-pass decode time; no fallback]
//	     + P_fb·((N + L·m)·T + (1.5 + α/2)·R) + T·E[M; fallback] + RTO·Σ_{r≥0} S_r,
//
// which is at least the lower bound (1 − P_fb)·((N + (L−1)·m)·T + R/2) +
// P_fb·((N + L·m)·T + (1.5 + α/2)·R + T) — one fallback round whose
// resends all arrive — and exceeds it only by the further repair rounds and
// the resends' injection.
//
// # Hybrid: a product over submessages
//
// The submessages fail and are repaired independently, so
// P(C ≤ t) = F_last(t)·Π_s F_s(t): F_last is EC's distribution for the
// last submessage alone, and F_s is 1 − P_fail until round 0 of s's repair
// ends at a_s = end_s + T + 1.5·R + E[M | fail]·T, then 1 − S_r (EC's
// repair survival of one submessage) from a_s + r·RTO on. All a_s are one
// arithmetic progression, so at any t the number of submessages in each
// round is an interval count: the survival is evaluated on the union of
// every submessage's round times, O(L × rounds) steps (rounds stop where
// their weight over the L submessages falls below 1e-17; at 1 % loss and
// MDS(32,8) there are none and the model is EC's last submessage).
// Estimate.Bound is EC's plus one injection per NACK, which waits for the
// next delivered chunk rather than the next chunk. A message of more than
// 2^18 earlier submessages is taken in blocks, each repaired when its last
// submessage would be, and the Bound grows by a block's injection.
//
// DecodeProbability and SubmessageFailure give the decode probabilities on
// their own: Σ_{e>m} C(k+m, e)·p^e·(1−p)^(k+m−e) for MDS and 1 − Π_groups
// [(1−p)^(g+1) + (g+1)·p·(1−p)^g] for XOR, both summed from their failing
// terms so that 1e-6 … 1e-2 (and 1e-40) keep full relative precision.
//
// # Ring Allreduce
//
// RingAllreduce bounds an Allreduce of S bytes over P ranks, 2·(P − 1)
// dependent steps of an S/P-byte message per neighbour link: the mean from
// below by the step count times a step's mean (one chain of dependent,
// independent transfers), the 99.9th percentile from above by the step count
// times a step's quantile at 1 − 0.001/(2·(P − 1)·P) (union bound over all
// transfers).
//
// # Cost
//
// Nothing loops over chunks: SR costs O(levels × segments) and EC
// O(rounds × failure patterns), so Choose, which evaluates ten candidates'
// means, takes 0.06–0.2 ms on the paper's grid, 8 GiB included
// (BenchmarkChoose).
// Inputs are validated (Link.Validate, Params.Validate); bad ones return
// errors wrapping ErrInvalidLink or ErrInvalidArgument, never a panic.
package model
