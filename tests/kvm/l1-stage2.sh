#!/bin/sh
# PID 1 of the KVM tier's L1, on its overlay root (tests/kvm/l1-init): the
# file systems a Debian host has, the kernel modules of the kit bound at
# /lib/modules (airlock.modules=DIR), KVM with nested paging, the run's
# disk (virtio-blk, btrfs) at /l1/vol and the host's exchange directory
# (virtiofs tag "out") at /l1/out. Runs /l1/out/run.sh there (the host
# writes it), its output in run.log and its exit status in rc, then powers
# L1 off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
say() { echo "l1: $* (uptime $(cut -d' ' -f1 /proc/uptime) s)"; }
off() { sync; echo o >/proc/sysrq-trigger; sleep 60; }
fail() { say "$*"; off; }
mount -t proc proc /proc && mount -t sysfs sys /sys || fail "cannot mount proc, sys"
modules=
for arg in $(cat /proc/cmdline); do
	case $arg in airlock.modules=*) modules=${arg#airlock.modules=} ;; esac
done
[ -d "$modules" ] || fail "airlock.modules=$modules is not a directory"
mkdir -p /lib/modules /l1/out /l1/vol /dev/pts /dev/shm
mount --bind "$modules" /lib/modules || fail "cannot bind $modules at /lib/modules"
mount -t virtiofs out /l1/out || fail "cannot mount the exchange directory (virtiofs tag out)"
mount -t tmpfs -o mode=1777 tmpfs /tmp && mount -t tmpfs -o mode=0755 tmpfs /run &&
	mount -t devpts -o ptmxmode=0666 devpts /dev/pts && mount -t tmpfs -o mode=1777 tmpfs /dev/shm &&
	mount -t cgroup2 cgroup2 /sys/fs/cgroup || fail "cannot mount tmp, run, devpts, shm, cgroup2"
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
hostname l1
ip link set lo up || fail "cannot bring up lo"
modprobe kvm_amd nested=1 || fail "cannot load kvm_amd"
for m in virtio_blk btrfs tun loop veth; do
	modprobe "$m" || fail "cannot load $m"
done
mount /dev/vda /l1/vol || fail "cannot mount the run's disk /dev/vda"
say "ready: $(ls -l /dev/kvm)"
# what runs, every 30 s, for whoever looks into a run that hangs
(while sleep 30; do
	{ echo "--- uptime $(cut -d' ' -f1 /proc/uptime) s"; ps -eo pid,etimes,stat,wchan:24,args --sort=pid; } \
		>/l1/out/ps.tmp 2>&1 && mv /l1/out/ps.tmp /l1/out/ps.log
done) &
(cd /l1/out && sh ./run.sh >run.log 2>&1; echo $? >rc.tmp && mv rc.tmp rc)
say "run.sh exited with $(cat /l1/out/rc)"
umount /l1/vol
off
