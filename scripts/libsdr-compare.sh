#!/usr/bin/env bash
# usage: scripts/libsdr-compare.sh [RUNS [SIZE [ITERATIONS]]]
#
# The C benchmark on libsdr (sdr_write_bw) beside `sdr write-bw` at the same
# settings (4 channels, MTU 1024, 64 KiB chunks, 16 in flight, every
# message's bytes verified at the server), alternating run by run, over UDP
# loopback (127.0.8.1 and .2) and between two fresh network namespaces on
# AF_XDP (a veth pair, one queue each, 10.79.0.1 and .2). Prints each run's
# server-side Gbit/s and the medians with C/Go. Defaults: 5 runs of 200
# messages of 1 MiB. Needs root for the namespaces. SDR names the sdr
# binary and PREFIX an installed libsdr (built into a temporary directory
# when unset).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5} size=${2:-1048576} iters=${3:-200}
a=sdrcmp-a-$$ b=sdrcmp-b-$$
out=$(mktemp -d)
cleanup() {
	ip netns del "$a" 2>/dev/null || true
	ip netns del "$b" 2>/dev/null || true
	rm -rf "$out"
}
trap cleanup EXIT
if [ -z "${SDR:-}" ]; then
	SDR=$out/sdr
	go build -o "$SDR" ./cmd/sdr
fi
if [ -z "${PREFIX:-}" ]; then
	PREFIX=$out/libsdr
	sh scripts/install-libsdr.sh "$PREFIX" >/dev/null
fi
ip netns add "$a"
ip netns add "$b"
ip link add veth0 numtxqueues 1 numrxqueues 1 netns "$a" type veth peer name veth0 numtxqueues 1 numrxqueues 1 netns "$b"
ip -n "$a" addr add 10.79.0.1/24 dev veth0
ip -n "$b" addr add 10.79.0.2/24 dev veth0
for ns in "$a" "$b"; do ip -n "$ns" link set veth0 up; ip -n "$ns" link set lo up; done

common=(-s "$size" -n "$iters" -w 20 -C 4 -m 1024 -c 65536 -q 16)
port=19300
# one IMPL PATH: runs one server/client pair, prints the server's Gbit/s.
one() {
	local impl=$1 path=$2 srv cli host
	port=$((port + 1))
	case $impl/$path in
	go/udp) srv=("$SDR" write-bw -a 127.0.8.1 -verify -json) cli=("$SDR" write-bw -a 127.0.8.2 -verify -json) host=127.0.8.1 ;;
	c/udp) srv=("$PREFIX/bin/sdr_write_bw" -d udp:127.0.8.1 -j) cli=("$PREFIX/bin/sdr_write_bw" -d udp:127.0.8.2 -j) host=127.0.8.1 ;;
	go/xsk) srv=(ip netns exec "$b" "$SDR" write-bw -dev xsk -i veth0 -verify -json) cli=(ip netns exec "$a" "$SDR" write-bw -dev xsk -i veth0 -verify -json) host=10.79.0.2 ;;
	c/xsk) srv=(ip netns exec "$b" "$PREFIX/bin/sdr_write_bw" -d xsk:veth0 -j) cli=(ip netns exec "$a" "$PREFIX/bin/sdr_write_bw" -d xsk:veth0 -j) host=10.79.0.2 ;;
	esac
	"${srv[@]}" "${common[@]}" -p "$port" >"$out/server.json" 2>"$out/server.err" &
	local server=$!
	for _ in $(seq 50); do
		"${cli[@]}" "${common[@]}" -p "$port" "$host" >"$out/client.json" 2>"$out/client.err" && break
		sleep 0.1
	done
	wait "$server" || { cat "$out/server.err" >&2; return 1; }
	if [ "$impl" = go ]; then
		jq -r 'if .messages_complete == .iterations and .chunks_corrupt == 0 and .chunks_verified == .chunks_total
			then .bw_average_gbps else error("incomplete or unverified") end' "$out/server.json"
	else
		jq -r 'if .verified == .iterations then .bw_avg_gbps else error("incomplete or unverified") end' "$out/server.json"
	fi
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for path in udp xsk; do
	: >"$out/go.$path"
	: >"$out/c.$path"
	for r in $(seq "$runs"); do
		g=$(one go "$path")
		c=$(one c "$path")
		echo "$g" >>"$out/go.$path"
		echo "$c" >>"$out/c.$path"
		printf '%s run %d: sdr write-bw %.3f Gbit/s, sdr_write_bw (C) %.3f Gbit/s\n' "$path" "$r" "$g" "$c"
	done
	gm=$(median <"$out/go.$path")
	cm=$(median <"$out/c.$path")
	printf '%s median of %d: sdr write-bw %.3f, sdr_write_bw (C) %.3f Gbit/s, C/Go %.2f\n' "$path" "$runs" "$gm" "$cm" \
		"$(echo "$cm $gm" | awk '{ print $1 / $2 }')"
done
