#!/bin/bash
# tests/kvm/l1-kit.sh KIT_DIR
#
# What the KVM tier boots (docs/testing.md, "The KVM tier"): a first-level
# VM ("L1") under TCG with AMD SVM emulated, whose KVM runs Airlock's VMs.
# Everything comes from the guest kernel's Debian package, the one
# images/kernel.sh pins, so L1 needs nothing from the network:
#   KIT_DIR/vmlinuz              the package's kernel, booted as L1's (q35)
#   KIT_DIR/modules/lib/modules/RELEASE   all of its modules, depmod'ed:
#                                bound at L1's /lib/modules (kvm_amd, btrfs,
#                                tun, nf_tables... load on demand)
#   KIT_DIR/initramfs.cpio.gz    busybox, tests/kvm/l1-init as /init and the
#                                modules that mount L1's root: the host's /
#                                over virtiofs, read-only, under a tmpfs overlay
#   KIT_DIR/guest-kernel/        images/kernel.sh's output for the guests
#                                (the templates' kernel-HASH, seeded into L1)
#   KIT_DIR/vcpu_fault.ko        tests/kvm/vcpu-fault/ built against the guest
#                                kernel's headers (the same version's Debian
#                                packages): a guest module KVM cannot emulate
#   KIT_DIR/stamp                what it was made from; unchanged inputs make
#                                nothing again
# Needs AIRLOCK_APT_CACHE (images/kernel.sh keeps the .deb there).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PROG=l1-kit.sh
# shellcheck source=images/common.sh
. "$ROOT/images/common.sh"

[ $# -eq 1 ] || die "usage: $0 KIT_DIR"
KIT=$(abspath "${1%/}")
[ -n "${AIRLOCK_APT_CACHE:-}" ] || die "AIRLOCK_APT_CACHE is not set (./test.sh sets it)"
need busybox busybox-static
need cpio
need depmod kmod
need gzip
need make make

# The modules that mount L1's root, in load order (deps first).
STAGE1_MODULES="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci fuse virtiofs overlay"

mkdir -p "$KIT"
"$ROOT/images/kernel.sh" "$KIT/guest-kernel" >&2 || die "images/kernel.sh failed"
pin=$(cat "$KIT/guest-kernel/kernel.version")
deb=$AIRLOCK_APT_CACHE/${pin%%=*}_${pin#*=}_amd64.deb
[ -s "$deb" ] || die "$deb is missing (images/kernel.sh should have kept it)"

stamp="$pin $(cat "$HERE/l1-kit.sh" "$HERE/l1-init" "$(command -v busybox)" "$HERE"/vcpu-fault/* |
	sha256sum | cut -c1-32)"
if [ -f "$KIT/stamp" ] && [ "$(cat "$KIT/stamp")" = "$stamp" ] && [ -f "$KIT/initramfs.cpio.gz" ]; then
	log "$KIT is up to date ($pin)"
	exit 0
fi

make_tmp_next_to "$KIT/out"
dpkg-deb -x "$deb" "$TMP/pkg" || die "cannot extract $deb"
vmlinuz=$(find "$TMP/pkg/boot" -name 'vmlinuz-*' | head -n1)
[ -n "$vmlinuz" ] || die "no /boot/vmlinuz-* in $deb"
release=${vmlinuz##*/vmlinuz-}
for opt in KVM_AMD VIRTIO_FS OVERLAY_FS BTRFS_FS TUN NF_TABLES; do
	grep -qE "^CONFIG_${opt}=(y|m)$" "$TMP/pkg/boot/config-$release" ||
		die "CONFIG_$opt is not enabled in $release: L1 cannot run Airlock under KVM"
done
moddir=
for d in "$TMP/pkg/lib/modules/$release" "$TMP/pkg/usr/lib/modules/$release"; do
	[ -d "$d" ] && moddir=$d && break
done
[ -n "$moddir" ] || die "no modules for $release in $deb"
mkdir -p "$TMP/out/modules/lib/modules"
mv "$moddir" "$TMP/out/modules/lib/modules/$release"
depmod -b "$TMP/out/modules" "$release" || die "depmod failed"
cp "$vmlinuz" "$TMP/out/vmlinuz"

# stage 1: busybox, /init, the modules in load order
ird=$TMP/initramfs
mkdir -p "$ird/bin" "$ird/lib/modules" "$ird/dev" "$ird/proc" "$ird/sys" "$ird/lower" "$ird/upper" "$ird/newroot"
cp "$(command -v busybox)" "$ird/bin/busybox"
install -m 0755 "$HERE/l1-init" "$ird/init"
: >"$ird/lib/modules/load.list"
for m in $STAGE1_MODULES; do
	path=$(modinfo -b "$TMP/out/modules" -k "$release" -F filename "$m") || die "module $m not found in $release"
	case $path in
	*.ko) cp "$path" "$ird/lib/modules/$m.ko" ;;
	*.ko.xz) xz -dc "$path" >"$ird/lib/modules/$m.ko" ;;
	*.ko.zst) zstd -qdc "$path" >"$ird/lib/modules/$m.ko" ;;
	*) die "unknown module format: $path" ;;
	esac
	echo "$m" >>"$ird/lib/modules/load.list"
done
(cd "$ird" && find . -mindepth 1 | LC_ALL=C sort | cpio --quiet -o -H newc -R 0:0) | gzip -1 >"$TMP/out/initramfs.cpio.gz" ||
	die "cpio failed"

# the guest module, against the headers of the guest kernel's version: the
# flavour's package (its .config and Module.symvers), the common sources
# and kbuild, unpacked here (their Makefile names /usr/src: pointed here)
ver=${pin#*=}
common=linux-headers-${release%-*-*}-common
kbuild=linux-kbuild-${release%%.*}.$(echo "$release" | cut -d. -f2)
mkdir -p "$TMP/hdr"
for p in "linux-headers-$release" "$common" "$kbuild"; do
	cached=$AIRLOCK_APT_CACHE/${p}_${ver}_$( [ "$p" = "$common" ] && echo all || echo amd64).deb
	if [ ! -s "$cached" ]; then
		(cd "$TMP/hdr" && apt-get -q download -o APT::Sandbox::User=root "$p=$ver") >&2 ||
			die "apt-get download $p=$ver failed (the guest kernel's headers, for tests/kvm/vcpu-fault)"
		mv "$TMP"/hdr/"${p}"_*.deb "$cached"
	fi
	dpkg-deb -x "$cached" "$TMP/hdr/root" || die "cannot extract $cached"
done
flavour=$TMP/hdr/root/usr/src/linux-headers-$release
[ -f "$flavour/Makefile" ] || die "linux-headers-$release has no Makefile"
sed -i "s|^include /usr/src/|include $TMP/hdr/root/usr/src/|" "$flavour/Makefile"
cp "$HERE/vcpu-fault/vcpu_fault.c" "$HERE/vcpu-fault/Kbuild" "$TMP/hdr/"
make -s -C "$flavour" M="$TMP/hdr" modules >"$TMP/hdr/make.log" 2>&1 ||
	die "building tests/kvm/vcpu-fault failed: $(tail -n 5 "$TMP/hdr/make.log")"
cp "$TMP/hdr/vcpu_fault.ko" "$TMP/out/vcpu_fault.ko"
echo "$stamp" >"$TMP/out/stamp"

rm -rf "$KIT/vmlinuz" "$KIT/modules" "$KIT/initramfs.cpio.gz" "$KIT/vcpu_fault.ko" "$KIT/stamp"
mv "$TMP/out/vmlinuz" "$TMP/out/modules" "$TMP/out/initramfs.cpio.gz" "$TMP/out/vcpu_fault.ko" "$KIT/"
mv "$TMP/out/stamp" "$KIT/stamp"
log "L1 kit in $KIT: $release, $(stat -c %s "$KIT/initramfs.cpio.gz") bytes of initramfs"
