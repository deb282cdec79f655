#!/usr/bin/env bash
# Builds the Soft-RoCE guest for the interop tests into $1 (default
# /var/cache/sdr-interop): a Debian 12 root file system with rdma-core,
# the verbs tools and perftest as an ext4 image, and the kernel and initrd
# of Debian's linux-image-amd64. Everything comes from Debian's archive.
# A complete cache is reused; delete the directory to rebuild.
set -euo pipefail
out=${1:-/var/cache/sdr-interop}
here=$(cd "$(dirname "$0")" && pwd)
if [ -f "$out/root.img" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ] && cmp -s "$here/guest-init.sh" "$out/sdr-init"; then
	echo "interop guest: cached in $out"
	exit 0
fi
need=""
for p in qemu-system-x86 debootstrap e2fsprogs gcc libibverbs-dev; do dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"; done
if [ -n "$need" ]; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need >/dev/null
fi
mkdir -p "$out"
work=$(mktemp -d "$out/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
debootstrap --variant=minbase \
	--include=rdma-core,ibverbs-utils,ibverbs-providers,perftest,iproute2,kmod,tcpdump,linux-image-amd64,udev,iputils-ping \
	bookworm "$work/rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 || {
	tail -20 "$work/debootstrap.log" >&2
	exit 1
}
install -m 0755 "$here/guest-init.sh" "$work/rootfs/sdr-init"
cp "$work"/rootfs/boot/vmlinuz-* "$work/vmlinuz"
cp "$(ls "$work"/rootfs/boot/initrd.img-* | grep -v -e '\.bak$' -e '\.new$' | head -1)" "$work/initrd.img"
mke2fs -q -t ext4 -d "$work/rootfs" -L sdrguest "$work/root.img" 1600M
mv "$work/root.img" "$work/vmlinuz" "$work/initrd.img" "$out/"
cp "$here/guest-init.sh" "$out/sdr-init"
echo "interop guest: built in $out in $(($(date +%s) - start)) s"
