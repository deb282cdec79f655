#!/usr/bin/env bash
# usage: scripts/write-bw-ratio.sh [ROUNDS]   (default 5)
#
# sdr write-bw over AF_XDP against emunic's own UC write rate, measured
# side by side: at each message size (64 KiB, 1 MiB, 8 MiB) a round runs
# BenchmarkUCWriteImm/xsk/SIZE (emunic's raw UC WRITE-with-Imm rate
# between two namespaces, one QP, about 800k packets), then
# scripts/write-bw-netns.sh at that size (4 channels, MTU 1024, 16 in
# flight, 20 warm-up messages; 20000, 1000 and 100 measured). It prints
# each pair's packet rates, write-bw's ratio to the UC rate at the same
# size and to the UC rate at 64 KiB, the chunks delivered, and the
# 1 MiB/64 KiB bandwidth ratio, then the medians. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go test -c -o "$dir/xsk.test" ./emunic/xsk/
go build -o "$dir/sdr" ./cmd/sdr
uc() { # size iterations -> Mpps (a failed run's output goes to stderr)
	if ! (cd emunic/xsk && "$dir/xsk.test" -test.run '^$' -test.bench "BenchmarkUCWriteImm/xsk/${1}B\$" -test.benchtime "${2}x") >"$dir/uc.out" 2>&1; then
		echo "write-bw-ratio: UC at $1 B failed:" >&2
		cat "$dir/uc.out" >&2
		return 1
	fi
	awk '/pkts\/s/ { for (i = 2; i <= NF; i++) if ($i == "pkts/s") print $(i-1) / 1e6 }' "$dir/uc.out"
}
field() { grep -o "\"$1\": *[0-9.e+-]*" "$2" | head -1 | sed 's/.*: *//'; }
writebw() { # size iterations -> "mpps gbps delivered/total"
	SDR="$dir/sdr" scripts/write-bw-netns.sh "$1" "$2" 16 -w 20 >"$dir/out.json" 2>/dev/null
	echo "$(field packet_rate_mpps "$dir/out.json") $(field bw_average_gbps "$dir/out.json")" \
		"$(field chunks_delivered "$dir/out.json")/$(field chunks_total "$dir/out.json")"
}
printf "%-5s | %-34s | %-34s | %-34s | %s\n" round "64KiB UC wbw ratio/64K chunks" "1MiB UC wbw ratio/64K chunks" "8MiB UC wbw ratio/64K chunks" "1MiB/64KiB Gbit/s"
declare -A ratios
for i in $(seq "$rounds"); do
	line=$(printf "%-5s" "$i")
	declare -A gbps
	for s in 65536:12500:20000 1048576:800:1000 8388608:100:100; do
		IFS=: read -r size ucn n <<<"$s"
		u=$(uc "$size" "$ucn")
		[ "$size" = 65536 ] && u64=$u
		read -r mpps bw chunks <<<"$(writebw "$size" "$n")"
		r=$(awk "BEGIN { print $mpps / $u }") r64=$(awk "BEGIN { print $mpps / $u64 }")
		ratios[$size]+="$r " ratios[${size}vs64]+="$r64 "
		gbps[$size]=$bw
		line+=$(printf " | %5.3f %5.3f %4.2f/%4.2f %11s" "$u" "$mpps" "$r" "$r64" "$chunks")
	done
	bwr=$(awk "BEGIN { print ${gbps[1048576]} / ${gbps[65536]} }")
	ratios[bw]+="$bwr "
	echo "$line | $(printf %.2f "$bwr")"
done
median() { printf "%s\n" $1 | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2 }'; }
printf "median write-bw/UC at the same size: 64KiB %.2f, 1MiB %.2f, 8MiB %.2f; against UC at 64 KiB: 1MiB %.2f, 8MiB %.2f; 1MiB/64KiB bandwidth %.2f (%d rounds)\n" \
	"$(median "${ratios[65536]}")" "$(median "${ratios[1048576]}")" "$(median "${ratios[8388608]}")" \
	"$(median "${ratios[1048576vs64]}")" "$(median "${ratios[8388608vs64]}")" "$(median "${ratios[bw]}")" "$rounds"
