// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// XDP steering for the emulated RoCEv2 NIC: RoCEv2 frames (UDP port 4791)
// whose BTH destination QP belongs to this device go to the AF_XDP socket
// of their receive queue; everything else (ARP, ICMP, TCP, other UDP, IP
// fragments, broken frames) goes to the kernel. Steered frames are
// filtered as a NIC would before they reach the socket: a frame sent to
// another unicast or a multicast MAC, or for a connected QP from a source
// address that is not the QP's peer, is dropped and counted. In all-frames
// mode (the link emulator, which forwards every frame between two
// interfaces) every frame goes to the socket unfiltered.
//go:build ignore

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define ROCEV2_PORT 4791
#define BTH_LEN 12
#define MAX_QUEUES 64

// Counter indices; the Go side names them in the same order.
enum counter {
	COUNTER_SEEN,       // every frame
	COUNTER_REDIRECTED, // handed to an AF_XDP socket
	COUNTER_PASSED,     // handed to the kernel
	COUNTER_MALFORMED,  // truncated or invalid headers (passed)
	COUNTER_NOT_OURS,   // RoCEv2 for a QP this device does not own (passed)
	COUNTER_DROPPED,    // dropped by fault injection
	COUNTER_NO_SOCKET,  // ours, but no socket on this queue (passed)
	COUNTER_WRONG_MAC,  // ours, but to another unicast or a multicast MAC (dropped)
	COUNTER_WRONG_PEER, // ours, but not from the connected QP's peer (dropped)
	COUNTER_MAX,
};

struct config {
	__u32 all_roce;       // steer every RoCEv2 frame, whatever its QP
	__u32 drop_threshold; // drop a steered frame when random < threshold
	__u32 all_frames;     // steer every frame, RoCEv2 or not
	__u32 check_mac;      // drop steered frames not sent to mac or broadcast
	__u8 mac[6];          // the device's MAC
	__u8 pad[2];
};

// What the qps map knows of a QP: the peer a connected QP accepts frames
// from (IPv6, or IPv4-mapped IPv6), or any source.
struct qp_peer {
	__u32 any_source; // UD: frames from anyone
	__u8 addr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, __u32); // destination QP number
	__type(value, struct qp_peer);
} qps SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config SEC(".maps");

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

static __always_inline void count(__u32 which) {
	__u64 *v = bpf_map_lookup_elem(&counters, &which);
	if (v)
		(*v)++;
}

static __always_inline int pass(__u32 why) {
	if (why != COUNTER_PASSED)
		count(why);
	count(COUNTER_PASSED);
	return XDP_PASS;
}

static __always_inline int redirect(struct xdp_md *ctx) {
	int action = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
	if (action == XDP_REDIRECT) {
		count(COUNTER_REDIRECTED);
		return action;
	}
	return pass(COUNTER_NO_SOCKET);
}

static __always_inline int drop(__u32 why) {
	count(why);
	return XDP_DROP;
}

// same_bytes compares n bytes (a constant: the loop unrolls).
static __always_inline int same_bytes(const __u8 *a, const __u8 *b, int n) {
	int same = 1;
#pragma unroll
	for (int i = 0; i < n; i++)
		same &= a[i] == b[i];
	return same;
}

// mac_accepted: the frame is for cfg's MAC or broadcast.
static __always_inline int mac_accepted(const struct config *cfg, const __u8 *dst) {
	static const __u8 broadcast[6] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
	return same_bytes(dst, cfg->mac, 6) || same_bytes(dst, broadcast, 6);
}

// from_peer: src (IPv6 or IPv4-mapped) is the QP's peer, or the QP takes
// frames from any source.
static __always_inline int from_peer(const struct qp_peer *peer, const __u8 *src) {
	return peer->any_source || same_bytes(peer->addr, src, 16);
}

static __always_inline int steer(struct xdp_md *ctx) {
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	count(COUNTER_SEEN);

	__u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (cfg && cfg->all_frames)
		return redirect(ctx);

	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return pass(COUNTER_MALFORMED);
	__be16 proto = eth->h_proto;
	void *l3 = eth + 1;
	if (proto == bpf_htons(ETH_P_8021Q)) {
		struct vlan_hdr *vlan = l3;
		if ((void *)(vlan + 1) > end)
			return pass(COUNTER_MALFORMED);
		proto = vlan->proto;
		l3 = vlan + 1;
	}

	struct udphdr *udp;
	__u8 src[16] = {}; // the source address, IPv4-mapped for IPv4
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3;
		if ((void *)(ip + 1) > end)
			return pass(COUNTER_MALFORMED);
		if (ip->version != 4 || ip->ihl < 5)
			return pass(COUNTER_MALFORMED);
		if (ip->protocol != IPPROTO_UDP)
			return pass(COUNTER_PASSED);
		if (ip->frag_off & bpf_htons(0x3FFF)) // MF or an offset: a fragment
			return pass(COUNTER_PASSED);
		src[10] = src[11] = 0xFF;
		__builtin_memcpy(&src[12], &ip->saddr, 4);
		udp = l3 + ip->ihl * 4;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;
		if ((void *)(ip6 + 1) > end)
			return pass(COUNTER_MALFORMED);
		if (ip6->version != 6)
			return pass(COUNTER_MALFORMED);
		if (ip6->nexthdr != IPPROTO_UDP)
			return pass(COUNTER_PASSED);
		__builtin_memcpy(src, &ip6->saddr, 16);
		udp = (void *)(ip6 + 1);
	} else {
		return pass(COUNTER_PASSED);
	}
	if ((void *)(udp + 1) > end)
		return pass(COUNTER_MALFORMED);
	if (udp->dest != bpf_htons(ROCEV2_PORT))
		return pass(COUNTER_PASSED);

	__u8 *bth = (void *)(udp + 1);
	if ((void *)(bth + BTH_LEN) > end)
		return pass(COUNTER_MALFORMED);
	__u32 qpn = (__u32)bth[5] << 16 | (__u32)bth[6] << 8 | bth[7];

	struct qp_peer *peer = bpf_map_lookup_elem(&qps, &qpn);
	if (!peer && !(cfg && cfg->all_roce))
		return pass(COUNTER_NOT_OURS);
	if (cfg && cfg->check_mac && !mac_accepted(cfg, eth->h_dest))
		return drop(COUNTER_WRONG_MAC);
	if (peer && !from_peer(peer, src))
		return drop(COUNTER_WRONG_PEER);
	if (cfg && cfg->drop_threshold && bpf_get_prandom_u32() < cfg->drop_threshold) {
		count(COUNTER_DROPPED);
		return XDP_DROP;
	}
	return redirect(ctx);
}

// For MTUs whose frames fit one page: the common case.
SEC("xdp")
int xdp_steer(struct xdp_md *ctx) {
	return steer(ctx);
}

// Multi-buffer variant for MTU 4096 (frames larger than a page minus the
// headroom): the headers are in the first buffer, so the code is the same.
SEC("xdp.frags")
int xdp_steer_frags(struct xdp_md *ctx) {
	return steer(ctx);
}

char __license[] SEC("license") = "Dual BSD/GPL";
