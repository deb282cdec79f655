#!/usr/bin/env bash
# usage: scripts/write-bw-netns.sh SIZE ITERATIONS IN_FLIGHT [sdr write-bw flags...]
#
# Runs `sdr write-bw -dev xsk` between two fresh network namespaces joined
# by a veth pair (one queue each, MTU 1500, 10.77.0.1 and .2), the server
# in one and the client in the other, as TestWriteBWOverXSK does; prints
# the client's JSON result and the veths' drop counters, and deletes the
# namespaces. Needs root (or the capabilities docs/containers.md lists).
# SDR names the binary (default: go run ./cmd/sdr, built once).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { sed -n 2,10p "$0"; exit 2; }
size=$1 iters=$2 inflight=$3; shift 3
a=sdrbw-a-$$ b=sdrbw-b-$$
out=$(mktemp -d)
cleanup() {
	[ -n "${server:-}" ] && kill "$server" 2>/dev/null
	ip netns del "$a" 2>/dev/null || true
	ip netns del "$b" 2>/dev/null || true
	rm -rf "$out"
}
trap cleanup EXIT
if [ -z "${SDR:-}" ]; then
	SDR=$out/sdr
	go build -o "$SDR" ./cmd/sdr
fi
ip netns add "$a"
ip netns add "$b"
ip link add veth0 numtxqueues 1 numrxqueues 1 netns "$a" type veth peer name veth0 numtxqueues 1 numrxqueues 1 netns "$b"
ip -n "$a" addr add 10.77.0.1/24 dev veth0
ip -n "$b" addr add 10.77.0.2/24 dev veth0
for ns in "$a" "$b"; do ip -n "$ns" link set veth0 up; ip -n "$ns" link set lo up; done
ip netns exec "$b" "$SDR" write-bw -dev xsk -i veth0 -s "$size" -n "$iters" -q "$inflight" -json "$@" >"$out/server.json" 2>"$out/server.err" &
server=$!
connected=
for _ in $(seq 50); do # until the server listens
	if ip netns exec "$a" "$SDR" write-bw -dev xsk -i veth0 -s "$size" -n "$iters" -q "$inflight" -json "$@" 10.77.0.2 >"$out/client.json" 2>"$out/client.err"; then
		connected=1
		break
	fi
	grep -q "connection refused" "$out/client.err" || { cat "$out/client.err" >&2; exit 1; }
	sleep 0.1
done
[ -n "$connected" ] || { echo "the server never listened:" >&2; cat "$out/server.err" >&2; exit 1; }
wait "$server"
server=
cat "$out/client.json"
echo "veth drops: server rx_dropped $(ip netns exec "$b" cat /sys/class/net/veth0/statistics/rx_dropped)," \
	"client tx_dropped $(ip netns exec "$a" cat /sys/class/net/veth0/statistics/tx_dropped)" >&2
