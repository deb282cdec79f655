# scripts/lib/bridge.sh: a lossy bridge between two network namespaces, for
# the scripts that measure reliable transfers across it (peer-compare.sh,
# soak.sh). Source it from bash with `set -euo pipefail`; it defines
# functions only. Needs root and iproute2, nftables, jq.
#
# bridge_up PREFIX: three fresh namespaces, PREFIX-snd (10.78.0.1),
# PREFIX-rcv (10.78.0.2) and PREFIX-br, whose Linux bridge joins one veth
# to each (MTU 1500, one queue each way). Sets snd, rcv and br to their
# names; bridge_down deletes them.
bridge_up() {
	snd=$1-snd rcv=$1-rcv br=$1-br
	ip netns add "$snd"
	ip netns add "$rcv"
	ip netns add "$br"
	ip -n "$br" link add br0 type bridge
	ip link add veth0 numtxqueues 1 numrxqueues 1 mtu 1500 netns "$snd" type veth peer name p-snd mtu 1500 netns "$br"
	ip link add veth0 numtxqueues 1 numrxqueues 1 mtu 1500 netns "$rcv" type veth peer name p-rcv mtu 1500 netns "$br"
	ip -n "$snd" addr add 10.78.0.1/24 dev veth0
	ip -n "$rcv" addr add 10.78.0.2/24 dev veth0
	local p ns
	for p in p-snd p-rcv; do ip -n "$br" link set "$p" master br0 up; done
	ip -n "$br" link set br0 up
	for ns in "$snd" "$rcv"; do
		ip -n "$ns" link set veth0 up
		ip -n "$ns" link set lo up
	done
	ip netns exec "$snd" ping -c 1 -W 5 10.78.0.2 >/dev/null || { echo "the bridge does not forward" >&2; return 1; }
}

bridge_down() {
	local ns
	for ns in "${snd:-}" "${rcv:-}" "${br:-}"; do
		[ -z "$ns" ] || ip netns del "$ns" 2>/dev/null || true
	done
}

# set_loss PERCENT: the bridge drops that share of UDP frames each way at
# random (nftables, bridge family, forward hook; 1/10000 granularity). TCP
# is never dropped.
set_loss() {
	local t
	t=$(awk -v p="$1" 'BEGIN { printf "%d", p * 100 + 0.5 }')
	ip netns exec "$br" nft -f - <<-NFT
		table bridge sdrloss
		delete table bridge sdrloss
		table bridge sdrloss {
			counter fwd_udp {}
			counter fwd_drop {}
			counter rev_udp {}
			counter rev_drop {}
			chain forward {
				type filter hook forward priority 0; policy accept;
				iifname "p-snd" meta l4proto udp counter name "fwd_udp"
				iifname "p-snd" meta l4proto udp numgen random mod 10000 < $t counter name "fwd_drop" drop
				iifname "p-rcv" meta l4proto udp counter name "rev_udp"
				iifname "p-rcv" meta l4proto udp numgen random mod 10000 < $t counter name "rev_drop" drop
			}
		}
	NFT
}

# nft_counters: the bridge's UDP counters (fwd_udp, fwd_drop, rev_udp,
# rev_drop) as one JSON object, zeroed.
nft_counters() {
	ip netns exec "$br" nft -j reset counters table bridge sdrloss |
		jq -c '[.nftables[] | select(.counter) | {(.counter.name): .counter.packets}] | add'
}

# txp: packets the sender's veth sent so far.
txp() { ip netns exec "$snd" cat /sys/class/net/veth0/statistics/tx_packets; }

# rcvbuf: the receiver namespace's UDP RcvbufErrors (datagrams its sockets
# had no room for).
rcvbuf() { ip netns exec "$rcv" awk '/^Udp:/ { if (!h) { for (i = 1; i <= NF; i++) c[$i] = i; h = 1 } else print $c["RcvbufErrors"] }' /proc/net/snmp; }

# wait_listen PORT: waits up to 10 s for the receiver's TCP port to listen.
wait_listen() {
	local _
	for _ in $(seq 200); do
		[ -n "$(ip netns exec "$rcv" ss -Hltn "sport = :$1")" ] && return 0
		sleep 0.05
	done
	return 1
}

# bytes SIZE: 16M, 64MiB, 1G, 65536 -> bytes.
bytes() {
	local v=${1%iB} v2
	v2=${v%[KkMmGg]}
	case $v in
	*[Kk]) echo $((v2 << 10)) ;; *[Mm]) echo $((v2 << 20)) ;; *[Gg]) echo $((v2 << 30)) ;; *) echo $((v)) ;;
	esac
}

# timed NS TAG CMD...: runs CMD in namespace NS under timeout
# ($run_timeout seconds) and GNU time; output in $dir/TAG.out, .err, .time
# (elapsed user sys exit). With pin_cpus=1 a sender runs on CPU 0 and the
# tag "receiver" on CPU 1, as two hosts would each have their own.
timed() {
	local ns=$1 tag=$2 pin=()
	shift 2
	if [ "$pin_cpus" = 1 ]; then
		pin=(taskset -c 0)
		[ "$tag" = receiver ] && pin=(taskset -c 1)
	fi
	ip netns exec "$ns" "${pin[@]}" /usr/bin/time -q -o "$dir/$tag.time" -f '%e %U %S %x' \
		timeout -k 2 "$run_timeout" "$@" >"$dir/$tag.out" 2>"$dir/$tag.err"
}
# cpu TAG: its CPU seconds (user + system); status TAG: its exit status.
cpu() { [ -s "$dir/$1.time" ] && tail -1 "$dir/$1.time" | awk '{ printf "%.3f", $2 + $3 }' || echo null; }
status() { [ -s "$dir/$1.time" ] && tail -1 "$dir/$1.time" | awk '{ print $4 }' || echo 255; }
