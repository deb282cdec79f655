#!/usr/bin/env bash
# usage: scripts/peer-compare.sh PEER_SRC [-loss 0,1,5] [-sizes 16M,64M] [-schemes sr,ec] [-runs 3] [-timeout 60] [-json FILE] [-peer-ec 32,8] [-pin 1] [-keep DIR]
#
# Compares our reliable transfers (sdr write-bw -dev udp -scheme sr-nack|ec)
# with the sdr-udp prototype of harish876/SDR_RDMA_UDP across one lossy
# bridge. PEER_SRC is a local copy of that repository (its root or its
# sdr-udp directory); nothing is downloaded. It is built with cmake into a
# temporary directory. Three fresh network namespaces: sender (10.78.0.1),
# receiver (10.78.0.2) and a bridge namespace whose Linux bridge joins one
# veth to each (MTU 1500). nftables there (bridge family, forward hook)
# drops -loss percent of UDP frames each way at random; TCP is never
# dropped, so the peer's control plane (TCP) is lossless while ours (UDP
# datagrams) is not. Per loss, size, scheme and run it runs ours and the
# peer alternately with 1 KiB packets and 64 KiB chunks: SR is ours
# sr-nack against the peer's SR, as shipped and with sr_nack_delay_ms=10;
# EC is MDS(32,8) on both (-peer-ec K,M sets the peer receiver's code; see
# the note the table ends with). Loss is in percent (0.01 steps). Per run: the
# sender's completion time (goodput = size/that), the receiver's if it
# reports one, data verified at both ends, packets the sender's veth sent
# (tx_packets), CPU seconds per side (GNU time). Prints a markdown table of
# medians (min-max); -json FILE also writes every run. A run that exceeds
# -timeout seconds is killed and counted as failed. Needs root, and the
# Debian packages cmake g++ libisal-dev nftables jq time iproute2.
# SDR names our binary (default: go build ./cmd/sdr, once); -keep DIR
# keeps every run's output there. -pin 1 (the default) runs every sender
# on CPU 0 and every receiver on CPU 1, ours and the peer's alike, as two
# hosts would each have their own: unpinned, both ends and the bridge
# share the cores, and a Go runtime's idle threads (which look for work
# on a core they would have to themselves) take time from the other end.
# -pin 0 leaves placement to the scheduler.
set -euo pipefail
usage() { sed -n 2,30p "$0"; exit 2; }
[ $# -ge 1 ] || usage
case $1 in -h | -help | --help) usage ;; esac
peer=$1
shift
losses=0,1,5 sizes=16M,64M schemes=sr,ec runs=3 run_timeout=60 json= keep= peer_ec=32,8 pin_cpus=1
while [ $# -gt 0 ]; do
	[ $# -ge 2 ] || usage
	case $1 in
	-loss) losses=$2 ;;
	-sizes) sizes=$2 ;;
	-schemes) schemes=$2 ;;
	-runs) runs=$2 ;;
	-timeout) run_timeout=$2 ;;
	-json) json=$2 ;;
	-keep) keep=$2 ;;
	-peer-ec) peer_ec=$2 ;;
	-pin) pin_cpus=$2 ;;
	*) usage ;;
	esac
	shift 2
done
[ -d "$peer" ] || { echo "$peer: no such directory" >&2; exit 2; }
peer=$(cd "$peer" && pwd)
[ -z "$json" ] || json=$(realpath -m "$json")
[ -z "$keep" ] || keep=$(realpath -m "$keep")
cd "$(dirname "$0")/.."
. scripts/lib/bridge.sh
[ -d "$peer/sdr-udp" ] && peer=$peer/sdr-udp
[ -f "$peer/CMakeLists.txt" ] && [ -f "$peer/examples/sdr_test_sender.cpp" ] ||
	{ echo "$peer: not the SDR_RDMA_UDP repository or its sdr-udp directory" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces, nftables)" >&2; exit 2; }
missing=
for t in cmake:cmake g++:g++ nft:nftables jq:jq ip:iproute2 ss:iproute2 timeout:coreutils taskset:util-linux; do
	command -v "${t%%:*}" >/dev/null || missing="$missing ${t#*:}"
done
[ -x /usr/bin/time ] || missing="$missing time"
[ -e /usr/include/isa-l/erasure_code.h ] || missing="$missing libisal-dev"
[ -z "$missing" ] || { echo "missing:$missing (e.g. apt-get install$missing)" >&2; exit 2; }
[ "$pin_cpus" = 0 ] || [ "$(nproc)" -ge 2 ] || { echo "-pin 1 needs two CPUs (-pin 0 runs on one)" >&2; exit 2; }
out=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	bridge_down
	[ -n "$keep" ] && { mkdir -p "$keep" && cp -r "$out"/. "$keep"/; }
	rm -rf "$out"
}
trap cleanup EXIT

echo "building the peer ($peer) with cmake..." >&2
cmake -S "$peer" -B "$out/peer-build" -DCMAKE_BUILD_TYPE=Release >"$out/peer-cmake.log" 2>&1 ||
	{ cat "$out/peer-cmake.log" >&2; exit 1; }
grep -q '^ISAL_LIB:FILEPATH=.*libisal' "$out/peer-build/CMakeCache.txt" ||
	{ echo "cmake did not find ISA-L: the peer's EC would not encode (install libisal-dev)" >&2; exit 1; }
make -C "$out/peer-build" -j2 sdr_test_sender sdr_test_receiver >"$out/peer-make.log" 2>&1 ||
	{ tail -30 "$out/peer-make.log" >&2; exit 1; }
psnd=$out/peer-build/sdr_test_sender prcv=$out/peer-build/sdr_test_receiver
if [ -z "${SDR:-}" ]; then
	SDR=$out/sdr
	go build -o "$SDR" ./cmd/sdr
fi

bridge_up "sdrpc-$$"

port=18600

# run_one IMPL VARIANT SCHEME LOSS SIZE RUN: one transfer; appends a JSON line to $out/runs.jsonl.
run_one() {
	local impl=$1 variant=$2 scheme=$3 loss=$4 size=$5 run=$6
	dir=$out/runs/$loss-$size-$variant-$run
	mkdir -p "$dir"
	port=$((port + 1))
	local tx0 tx1 rb0 rb1 rpid ss rs smsg rmsg sok rok note=
	local snd_ms=null rcv_ms=null
	nft_counters >/dev/null
	if [ "$impl" = ours ]; then
		local sch=sr-nack code=()
		[ "$scheme" = ec ] && sch=ec code=(-code 'mds(32,8)')
		timed "$rcv" receiver "$SDR" write-bw -a 10.78.0.2 -p "$port" -json &
		rpid=$!
		pids+=("$rpid")
		wait_listen "$port" || note="receiver never listened"
		tx0=$(txp) rb0=$(rcvbuf)
		timed "$snd" sender "$SDR" write-bw -a 10.78.0.1 -p "$port" -s "$size" -n 1 -w 0 -m 1024 -c 65536 \
			-scheme "$sch" "${code[@]}" -json 10.78.0.2 || true
		tx1=$(txp) rb1=$(rcvbuf)
		wait "$rpid" || true
		pids=() # reaped: its PID may be reused
		local el
		el=$(jq -r '.reliable.elapsed_seconds // empty' "$dir/sender.out" 2>/dev/null || true)
		[ -n "$el" ] && snd_ms=$(awk -v e="$el" 'BEGIN { printf "%.1f", e * 1000 }')
		# the receiver completed completion_lag before the sender learned it
		local lag
		lag=$(jq -r '.reliable.completion_lag_max_ms // empty' "$dir/sender.out" 2>/dev/null || true)
		[ -n "$el" ] && [ -n "$lag" ] && rcv_ms=$(awk -v e="$el" -v l="$lag" 'BEGIN { printf "%.1f", e * 1000 - l }')
		# the client reports the server's byte-for-byte verdict; the server its own count
		sok=$(jq -r 'if .reliable.transfers_verified == 1 and .reliable.transfers_failed == 0 then "true" else "false" end' \
			"$dir/sender.out" 2>/dev/null || echo false)
		rok=$(jq -r 'if .reliable.transfers_verified == 1 and .reliable.transfers_failed == 0 then "true" else "false" end' \
			"$dir/receiver.out" 2>/dev/null || echo false)
		[ "$sok" = true ] || sok=false # no output: no verdict
		[ "$rok" = true ] || rok=false
	else
		local mode=sr
		[ "$scheme" = ec ] && mode=ec
		{
			echo "mtu_bytes=1024"
			echo "packets_per_chunk=64"
			echo "num_channels=1"
			echo "transfer_id=1"
			echo "udp_server_ip=10.78.0.2"
			echo "window_size=4" # the receiver's progress display; the sender's is below
			echo "ec_k_data=${peer_ec%,*}"
			echo "ec_m_parity=${peer_ec#*,}"
			[ "$variant" = peer-sr10 ] && echo "sr_nack_delay_ms=10"
		} >"$dir/receiver.config"
		{
			echo "mtu_bytes=1024"
			echo "packets_per_chunk=64"
			echo "num_channels=1"
			echo "transfer_id=1"
			echo "window_size=0" # SR window: every chunk
			[ "$variant" = peer-sr10 ] && echo "sr_nack_delay_ms=10"
		} >"$dir/sender.config"
		timed "$rcv" receiver "$prcv" --mode "$mode" "$port" "$((port + 1000))" "$size" "$dir/receiver.config" &
		rpid=$!
		pids+=("$rpid")
		wait_listen "$port" || note="receiver never listened"
		tx0=$(txp) rb0=$(rcvbuf)
		timed "$snd" sender "$psnd" --mode "$mode" 10.78.0.2 "$port" "$((port + 1000))" "$size" "$dir/sender.config" || true
		tx1=$(txp) rb1=$(rcvbuf)
		wait "$rpid" || true
		pids=() # reaped: its PID may be reused
		smsg=$(grep -ao 'Done in [0-9]* ms' "$dir/sender.out" | tail -1 || true)
		[ -n "$smsg" ] && snd_ms=$(echo "$smsg" | awk '{ print $3 }')
		rmsg=$(grep -ao 'Transfer completed in [0-9]* ms' "$dir/receiver.out" | tail -1 || true)
		[ -n "$rmsg" ] && rcv_ms=$(echo "$rmsg" | awk '{ print $4 }')
		# the sender has no check of its own: it succeeded if it got its ACK
		sok=false
		[ -n "$smsg" ] && ! grep -q 'Send failed' "$dir/sender.err" && sok=true
		# the receiver compares the first 1 KiB of the message
		rok=false
		grep -aq 'Data verification: PASSED' "$dir/receiver.out" && rok=true
	fi
	ss=$(status sender) rs=$(status receiver)
	[ "$ss" = 124 ] || [ "$ss" = 137 ] && note="${note:+$note; }sender timed out"
	[ "$rs" = 124 ] || [ "$rs" = 137 ] && note="${note:+$note; }receiver timed out"
	[ "$snd_ms" = null ] && [ -z "$note" ] && note="sender: $(tail -c 200 "$dir/sender.err" | tr '\n' ' ')"
	local ok=false
	[ "$snd_ms" != null ] && [ "$sok" = true ] && [ "$rok" = true ] && ok=true
	jq -cn --arg impl "$impl" --arg variant "$variant" --arg scheme "$scheme" --argjson loss "$loss" \
		--argjson size "$size" --argjson run "$run" --argjson snd_ms "$snd_ms" --argjson rcv_ms "$rcv_ms" \
		--argjson sok "$sok" --argjson rok "$rok" --argjson ok "$ok" --argjson tx "$((tx1 - tx0))" --argjson rb "$((rb1 - rb0))" \
		--argjson cs "$(cpu sender)" --argjson cr "$(cpu receiver)" --argjson ss "$ss" --argjson rs "$rs" \
		--argjson nft "$(nft_counters)" --arg note "$note" '{impl: $impl, variant: $variant, scheme: $scheme,
		loss_pct: $loss, size: $size, run: $run, ok: $ok, sender_ms: $snd_ms, receiver_ms: $rcv_ms,
		goodput_mbps: (if $snd_ms and $snd_ms > 0 then $size * 8 / ($snd_ms / 1000) / 1e6 else null end),
		verified_sender: $sok, verified_receiver: $rok, tx_packets: $tx,
		udp_fwd: $nft.fwd_udp, udp_fwd_dropped: $nft.fwd_drop, udp_rev: $nft.rev_udp, udp_rev_dropped: $nft.rev_drop,
		receiver_rcvbuf_errors: $rb,
		cpu_sender_s: $cs, cpu_receiver_s: $cr, exit_sender: $ss, exit_receiver: $rs, note: $note}' |
		tee -a "$out/runs.jsonl" | jq -r '"  \(.variant) \(.loss_pct)% \(.size) run \(.run): " +
			(if .ok then "ok" else "FAILED" end) + " sender \(.sender_ms) ms, \(.tx_packets) pkts" +
			(if .note != "" then " (\(.note))" else "" end)' >&2
}

: >"$out/runs.jsonl"
IFS=, read -ra L <<<"$losses"
IFS=, read -ra Z <<<"$sizes"
IFS=, read -ra S <<<"$schemes"
for loss in "${L[@]}"; do
	set_loss "$loss"
	for z in "${Z[@]}"; do
		size=$(bytes "$z")
		for scheme in "${S[@]}"; do
			case $scheme in
			sr) variants=(ours:ours-sr-nack peer:peer-sr peer:peer-sr10) ;;
			ec) variants=(ours:ours-ec peer:peer-ec) ;;
			*) echo "-schemes: sr or ec, not $scheme" >&2; exit 2 ;;
			esac
			for run in $(seq "$runs"); do
				# alternate; every other run starts with the peer
				order=("${variants[@]}")
				[ $((run % 2)) = 0 ] && order=("${variants[@]:1}" "${variants[0]}")
				for v in "${order[@]}"; do
					run_one "${v%%:*}" "${v#*:}" "$scheme" "$loss" "$size" "$run"
				done
			done
		done
	done
done

summary() {
	jq -s --arg schemes "$schemes" '
	def med: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
		else (.[length / 2 - 1] + .[length / 2]) / 2 end;
	def vals(f): [.[] | f | select(. != null)];
	group_by([.loss_pct, .size, .scheme, .variant]) | map({
		loss_pct: .[0].loss_pct, size: .[0].size, scheme: .[0].scheme, variant: .[0].variant, runs: length,
		ok: ([.[] | select(.ok)] | length),
		goodput_mbps: (map(select(.ok)) | vals(.goodput_mbps) | {med: med, min: min, max: max}),
		sender_ms: (map(select(.ok)) | vals(.sender_ms) | med), receiver_ms: (map(select(.ok)) | vals(.receiver_ms) | med),
		verified_sender: ([.[] | select(.verified_sender)] | length),
		verified_receiver: ([.[] | select(.verified_receiver)] | length),
		tx_packets: (vals(.tx_packets) | med), bridge_dropped: (vals(.udp_fwd_dropped) | med),
		rcvbuf_errors: (vals(.receiver_rcvbuf_errors) | med),
		needed: (.[0].size / 1024 * (if .[0].scheme == "ec" then 40 / 32 else 1 end)),
		cpu_sender_s: (vals(.cpu_sender_s) | med), cpu_receiver_s: (vals(.cpu_receiver_s) | med),
		notes: ([.[] | .note | select(. != "")] | unique)})
	| sort_by(.loss_pct, .size, (.scheme as $s | $schemes | split(",") | index($s)), (.variant | if startswith("ours") then 0 else 1 end), .variant)' "$out/runs.jsonl"
}
summary >"$out/summary.json"
jq -r --argjson runs "$runs" '
	def f(n): if . == null then "-" else (. * pow(10; n) | round) / pow(10; n) | tostring end;
	def mib: "\(. / 1048576) MiB";
	"| loss | size | scheme | implementation | ok | goodput Mbit/s median (min-max) | sender ms | receiver ms | verified snd/rcv | tx packets | tx/needed | bridge drops | rcvbuf drops | CPU s snd | CPU s rcv |",
	"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
	(.[] | "| \(.loss_pct)% | \(.size | mib) | \(.scheme) | \(.variant) | \(.ok)/\(.runs) | " +
		"\(.goodput_mbps.med | f(1)) (\(.goodput_mbps.min | f(1))-\(.goodput_mbps.max | f(1))) | " +
		"\(.sender_ms | f(1)) | \(.receiver_ms | f(1)) | \(.verified_sender)/\(.verified_receiver) | " +
		"\(.tx_packets | f(0)) | \(if .tx_packets then .tx_packets / .needed | f(3) else "-" end) | " +
		"\(.bridge_dropped | f(0)) | \(.rcvbuf_errors | f(0)) | " +
		"\(.cpu_sender_s | f(2)) | \(.cpu_receiver_s | f(2)) |")' "$out/summary.json"
placement="every sender on CPU 0, every receiver on CPU 1 (-pin 1)"
[ "$pin_cpus" = 1 ] || placement="placement left to the scheduler (-pin 0)"
sed -e "s/EC_CODE/$peer_ec/" -e "s/PLACEMENT/$placement/" <<'EOF'

ours-* is sdr write-bw -dev udp (-scheme sr-nack, or ec -code mds(32,8)), -m 1024 -c 65536 -n 1 -w 0;
peer-* is sdr_test_sender/receiver --mode sr|ec with mtu_bytes=1024, packets_per_chunk=64;
peer-sr10 adds sr_nack_delay_ms=10 (its receiver's ACK/NACK interval; default 50 ms).
Both implementations alike: PLACEMENT.
ok: done and verified at both ends; goodput and times are medians of the ok runs.
Goodput = size / the sender's completion time (ours: elapsed_seconds; peer: "Done in N ms", which
includes its OFFER/CTS handshake). Receiver ms: the peer's "Transfer completed in"; ours, the
sender's time less how long after the receiver's completion the sender learned of it (one clock).
Verified: ours checks every byte at the receiver (the sender reports its verdict); the peer's receiver
checks only the first 1 KiB, its sender only that it got the final ACK. tx packets: the sender veth's
tx_packets delta (TCP control and ARP included); needed = size/1024, x 40/32 for EC (a first pass of
MDS(32,8)). Bridge drops: UDP frames nftables dropped sender->receiver; rcvbuf drops: datagrams the
receiver's sockets had no room for (Udp RcvbufErrors in its namespace). Only UDP is dropped: the
peer's control plane is TCP and loses nothing; ours is UDP.
The peer's EC sender hard-codes RS(4,2) (examples/sdr_test_sender.cpp); only its receiver reads
ec_k_data/ec_m_parity (-peer-ec, here EC_CODE), so unless that is 4,2 the ends disagree on the layout.
EOF
if [ -n "$json" ]; then
	jq -n --slurpfile runs "$out/runs.jsonl" --slurpfile summary "$out/summary.json" \
		--arg losses "$losses" --arg sizes "$sizes" --argjson nruns "$runs" --arg peer "$peer" --arg peer_ec "$peer_ec" \
		'{config: {losses: $losses, sizes: $sizes, runs: $nruns, peer: $peer, peer_ec: $peer_ec}, summary: $summary[0], runs: $runs}' >"$json"
	echo "wrote $json" >&2
fi
