#!/usr/bin/env bash
# usage: scripts/soak.sh [-runs 100] [-schemes sr-nack,ec,auto] [-loss 1,5] [-size 64M] [-timeout 60] [-pin 1] [-keep DIR] [-json FILE]
#
# Soaks reliable transfers across a lossy bridge, as a user's two hosts
# would see one: per loss, scheme and run, one fresh `sdr write-bw` client
# and server (a new connection, a first transfer) move -size bytes across
# the bridge of scripts/lib/bridge.sh (three network namespaces, nftables
# dropping -loss percent of UDP frames each way), 1 KiB packets, 64 KiB
# chunks, every byte verified by the server. Both ends record their
# reliability engines' decisions (write-bw -trace).
#
# A run fails if either end reports no verified transfer or exits
# non-zero; it stalls if it is killed after -timeout seconds. Per cell the
# table gives runs, failures, stalls, the median, p99 and maximum of the
# sender's completion time, and p99 / median. The traces and output of
# every failed or stalled run, and of every run slower than twice its
# cell's median, are kept under -keep DIR (default ./soak-TIMESTAMP; the
# others are deleted); `sdr trace DIR/RUN/sender.trace` draws one. -json
# FILE writes every run and the summary. The exit status is 1 if any run
# failed or stalled.
#
# -pin 1 (the default) runs every sender on CPU 0 and every receiver on
# CPU 1, as scripts/peer-compare.sh does. Needs root and the Debian packages
# nftables jq time iproute2. SDR names the binary (default: go build
# ./cmd/sdr, once).
set -euo pipefail
usage() { sed -n 2,27p "$0"; exit 2; }
runs=100 schemes=sr-nack,ec,auto losses=1,5 size=64M run_timeout=60 pin_cpus=1 keep= json=
while [ $# -gt 0 ]; do
	case $1 in -h | -help | --help) usage ;; esac
	[ $# -ge 2 ] || usage
	case $1 in
	-runs) runs=$2 ;;
	-schemes) schemes=$2 ;;
	-loss) losses=$2 ;;
	-size) size=$2 ;;
	-timeout) run_timeout=$2 ;;
	-pin) pin_cpus=$2 ;;
	-keep) keep=$2 ;;
	-json) json=$2 ;;
	*) usage ;;
	esac
	shift 2
done
[ -n "$keep" ] || keep=soak-$(date +%Y%m%d-%H%M%S)
keep=$(realpath -m "$keep")
[ -z "$json" ] || json=$(realpath -m "$json")
cd "$(dirname "$0")/.."
. scripts/lib/bridge.sh
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces, nftables)" >&2; exit 2; }
missing=
for t in nft:nftables jq:jq ip:iproute2 ss:iproute2 timeout:coreutils taskset:util-linux; do
	command -v "${t%%:*}" >/dev/null || missing="$missing ${t#*:}"
done
[ -x /usr/bin/time ] || missing="$missing time"
[ -z "$missing" ] || { echo "missing:$missing (e.g. apt-get install$missing)" >&2; exit 2; }
[ "$pin_cpus" = 0 ] || [ "$(nproc)" -ge 2 ] || { echo "-pin 1 needs two CPUs (-pin 0 runs on one)" >&2; exit 2; }
bsize=$(bytes "$size")
mkdir -p "$keep"
out=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	bridge_down
	rm -rf "$out"
}
trap cleanup EXIT
if [ -z "${SDR:-}" ]; then
	SDR=$out/sdr
	go build -o "$SDR" ./cmd/sdr
fi
bridge_up "sdrsoak-$$"
port=18600

# run_one SCHEME LOSS RUN: one transfer on a new connection; appends a
# JSON line to $keep/runs.jsonl.
run_one() {
	local scheme=$1 loss=$2 run=$3 rpid note= snd_ms=null ok=false sok rok ss rs first
	dir=$keep/$scheme-$loss-$run
	mkdir -p "$dir"
	port=$((port + 1))
	nft_counters >/dev/null
	timed "$rcv" receiver "$SDR" write-bw -a 10.78.0.2 -p "$port" -json -trace "$dir/receiver.trace" &
	rpid=$!
	pids+=("$rpid")
	wait_listen "$port" || note="receiver never listened"
	timed "$snd" sender "$SDR" write-bw -a 10.78.0.1 -p "$port" -s "$bsize" -n 1 -w 0 -m 1024 -c 65536 \
		-scheme "$scheme" -json -trace "$dir/sender.trace" 10.78.0.2 || true
	wait "$rpid" || true
	pids=() # reaped: its PID may be reused
	local el
	el=$(jq -r '.reliable.elapsed_seconds // empty' "$dir/sender.out" 2>/dev/null || true)
	[ -n "$el" ] && snd_ms=$(awk -v e="$el" 'BEGIN { printf "%.1f", e * 1000 }')
	verified='if .reliable.transfers_verified == 1 and .reliable.transfers_failed == 0 then "true" else "false" end'
	sok=$(jq -r "$verified" "$dir/sender.out" 2>/dev/null || echo false)
	rok=$(jq -r "$verified" "$dir/receiver.out" 2>/dev/null || echo false)
	[ "$sok" = true ] || sok=false
	[ "$rok" = true ] || rok=false
	first=$(jq -r '.reliable.first_error // empty' "$dir/sender.out" 2>/dev/null || true)
	ss=$(status sender) rs=$(status receiver)
	local stalled=false
	if [ "$ss" = 124 ] || [ "$ss" = 137 ] || [ "$rs" = 124 ] || [ "$rs" = 137 ]; then
		stalled=true
		note="killed after ${run_timeout}s"
	fi
	[ -n "$first" ] && note="${note:+$note; }$first"
	[ "$snd_ms" = null ] && [ -z "$note" ] && note="sender: $(tail -c 300 "$dir/sender.err" | tr '\n' ' ')"
	[ "$snd_ms" != null ] && [ "$sok" = true ] && [ "$rok" = true ] && [ "$ss" = 0 ] && [ "$rs" = 0 ] && ok=true
	jq -cn --arg scheme "$scheme" --argjson loss "$loss" --argjson size "$bsize" --argjson run "$run" \
		--argjson ok "$ok" --argjson stalled "$stalled" --argjson snd_ms "$snd_ms" --argjson sok "$sok" --argjson rok "$rok" \
		--argjson ss "$ss" --argjson rs "$rs" --argjson cs "$(cpu sender)" --argjson cr "$(cpu receiver)" \
		--argjson nft "$(nft_counters)" --arg note "$note" --arg dir "$dir" '{scheme: $scheme, loss_pct: $loss,
		size: $size, run: $run, ok: $ok, stalled: $stalled, sender_ms: $snd_ms,
		goodput_mbps: (if $snd_ms and $snd_ms > 0 then $size * 8 / ($snd_ms / 1000) / 1e6 else null end),
		verified_sender: $sok, verified_receiver: $rok, exit_sender: $ss, exit_receiver: $rs,
		cpu_sender_s: $cs, cpu_receiver_s: $cr, udp_fwd_dropped: $nft.fwd_drop, udp_rev_dropped: $nft.rev_drop,
		note: $note, dir: $dir}' |
		tee -a "$keep/runs.jsonl" | jq -r '"  \(.scheme) \(.loss_pct)% run \(.run): " +
			(if .ok then "ok" elif .stalled then "STALLED" else "FAILED" end) + " \(.sender_ms) ms" +
			(if .note != "" then " (\(.note))" else "" end)' >&2
}

: >"$keep/runs.jsonl"
IFS=, read -ra L <<<"$losses"
IFS=, read -ra S <<<"$schemes"
start=$(date +%s)
for loss in "${L[@]}"; do
	set_loss "$loss"
	for run in $(seq "$runs"); do
		for scheme in "${S[@]}"; do # interleaved: a slow spell of the machine hits every scheme
			run_one "$scheme" "$loss" "$run"
		done
	done
done

jq -s --arg schemes "$schemes" '
	def pct(p): sort | if length == 0 then null else .[(length * p | ceil) - 1] end; # nearest rank
	def med: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
		else (.[length / 2 - 1] + .[length / 2]) / 2 end;
	group_by([.loss_pct, .scheme]) | map(
		([.[] | select(.ok) | .sender_ms]) as $t | {
		loss_pct: .[0].loss_pct, scheme: .[0].scheme, size: .[0].size, runs: length,
		failed: ([.[] | select(.ok | not) | select(.stalled | not)] | length),
		stalled: ([.[] | select(.stalled)] | length),
		median_ms: ($t | med), p99_ms: ($t | pct(0.99)), max_ms: ($t | max),
		goodput_median_mbps: ([.[] | select(.ok) | .goodput_mbps] | med),
		notes: ([.[] | .note | select(. != "")] | unique)})
	| map(. + {p99_over_median: (if .median_ms then .p99_ms / .median_ms else null end)})
	| sort_by(.loss_pct, (.scheme as $s | $schemes | split(",") | index($s)))' "$keep/runs.jsonl" >"$keep/summary.json"

# Keep what explains a bad run: failed, stalled, or slower than twice the
# cell's median.
jq -r --slurpfile sum "$keep/summary.json" '
	. as $r | ($sum[0][] | select(.loss_pct == $r.loss_pct and .scheme == $r.scheme)) as $c |
	if ($r.ok | not) or ($c.median_ms != null and $r.sender_ms > 2 * $c.median_ms) then empty else $r.dir end' \
	"$keep/runs.jsonl" | while read -r d; do rm -rf "$d"; done

jq -r --arg size "$size" --arg runs "$runs" '
	def f(n): if . == null then "-" else (. * pow(10; n) | round) / pow(10; n) | tostring end;
	"| loss | scheme | runs | failed | stalled | median ms | p99 ms | max ms | p99/median | goodput Mbit/s (median) |",
	"|---|---|---|---|---|---|---|---|---|---|",
	(.[] | "| \(.loss_pct)% | \(.scheme) | \(.runs) | \(.failed) | \(.stalled) | \(.median_ms | f(1)) | \(.p99_ms | f(1)) | " +
		"\(.max_ms | f(1)) | \(.p99_over_median | f(2)) | \(.goodput_median_mbps | f(1)) |"),
	"",
	"\($size) per run, one transfer per connection (sdr write-bw -n 1 -w 0 -m 1024 -c 65536 -scheme S), verified by the server;",
	"times are the sender'"'"'s completion (write-bw elapsed_seconds) of the runs that did not fail."' "$keep/summary.json"
placement="every sender on CPU 0, every receiver on CPU 1 (-pin 1)"
[ "$pin_cpus" = 1 ] || placement="placement left to the scheduler (-pin 0)"
echo "$placement; $(($(date +%s) - start)) s in all. Kept runs: $keep"
if [ -n "$json" ]; then
	jq -n --slurpfile runs "$keep/runs.jsonl" --slurpfile summary "$keep/summary.json" \
		--arg losses "$losses" --arg schemes "$schemes" --arg size "$size" --argjson nruns "$runs" --arg pin "$pin_cpus" \
		'{config: {losses: $losses, schemes: $schemes, size: $size, runs: $nruns, pin: $pin}, summary: $summary[0], runs: $runs}' >"$json"
	echo "wrote $json" >&2
fi
jq -e 'all(.[]; .failed == 0 and .stalled == 0)' "$keep/summary.json" >/dev/null
