#!/bin/sh
# PID 1 of the Soft-RoCE guest. It brings up the RoCE device and then
# serves the host's command spool (a 9p share): for every cmd-N.sh it runs
# the script and writes its output to out-N.txt and its exit status to
# rc-N, so the host drives the guest without any network side channel that
# would pollute the captures. Writing "poweroff" to the spool ends it.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /spool /tmp && mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
for m in 9pnet_virtio 9p crc32_generic rdma_rxe ib_uverbs; do modprobe $m || echo "guest: modprobe $m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L spool /spool || { echo "guest: no spool"; echo o > /proc/sysrq-trigger; }
ip link set lo up
ip link set eth0 up
ip addr add "$(cat /spool/guest-addr)" dev eth0
rdma link add rxe0 type rxe netdev eth0 && echo "guest: rxe0 up" || echo "guest: rdma link add failed"
ulimit -l unlimited
echo ready > /spool/ready
n=0
while :; do
	if [ -e /spool/poweroff ]; then break; fi
	if [ -e /spool/cmd-$n.sh ]; then
		sh /spool/cmd-$n.sh > /spool/out-$n.txt 2>&1
		echo $? > /spool/rc-$n.tmp && mv /spool/rc-$n.tmp /spool/rc-$n
		n=$((n + 1))
		continue
	fi
	sleep 0.1
done
sync
echo o > /proc/sysrq-trigger
