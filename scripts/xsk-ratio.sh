#!/usr/bin/env bash
# usage: scripts/xsk-ratio.sh [ROUNDS]   (default 7)
#
# emunic over AF_XDP against the project's raw AF_XDP rate, measured side
# by side: the benchmark binary is built once, then each round runs
# BenchmarkRawXSK/1100B, BenchmarkUCWriteImm/xsk/1024B and
# BenchmarkUCWriteImm/xsk/65536B back to back, each once with a fixed
# iteration count (no b.N ramp, so every run sets up its namespaces once).
# Interleaving the rounds keeps the machine's drift out of the ratios:
# it prints each round's packets/s and ratios, then the medians of the
# ratios. Needs root (or the capabilities docs/containers.md lists).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-7}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
bin=$dir/xsk.test
go test -c -o "$bin" ./emunic/xsk/
cd emunic/xsk
rate() { # benchmark-regexp iterations -> pkts/s (a failed run's output goes to stderr)
	if ! "$bin" -test.run '^$' -test.bench "$1" -test.benchtime "$2" -test.count 1 >"$dir/out" 2>&1; then
		echo "xsk-ratio: $1 failed:" >&2
		cat "$dir/out" >&2
		return 1
	fi
	awk '/pkts\/s/ { for (i = 2; i <= NF; i++) if ($i == "pkts/s") print $(i-1) }' "$dir/out"
}
printf "%-6s %10s %10s %10s %8s %8s\n" round raw/s 1KiB/s 64KiB/s 1KiB/raw 64KiB/raw
r1=() r64=()
for i in $(seq "$rounds"); do
	raw=$(rate 'BenchmarkRawXSK/1100B$' 800000x)
	k1=$(rate 'BenchmarkUCWriteImm/xsk/1024B$' 800000x)
	k64=$(rate 'BenchmarkUCWriteImm/xsk/65536B$' 12500x)
	a=$(awk "BEGIN { print $k1 / $raw }") b=$(awk "BEGIN { print $k64 / $raw }")
	r1+=("$a") r64+=("$b")
	printf "%-6s %10.0f %10.0f %10.0f %8.3f %8.3f\n" "$i" "$raw" "$k1" "$k64" "$a" "$b"
done
median() { printf "%s\n" "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2 }'; }
printf "median ratio: 1KiB/raw %.3f, 64KiB/raw %.3f (%d rounds)\n" "$(median "${r1[@]}")" "$(median "${r64[@]}")" "$rounds"
