#!/bin/bash
# images/initramfs.sh KERNEL_DIR INIT_BINARY OUT.cpio
#
# Make the guest initramfs: an uncompressed newc cpio holding
#   /init                  INIT_BINARY (static airlock-guest), mode 0755
#   /airlock-initramfs     empty marker (lets /init know where it runs)
#   /lib/modules/*.ko      KERNEL_DIR/modules/*.ko (from images/kernel.sh)
#   /lib/modules/load.list module file names in load order
#   /dev/console           console device node (char 5,1)
#   /dev /proc /sys /newroot /tmp /run   otherwise empty directories
# Reproducible: sorted entries, owner 0:0, mtimes = SOURCE_DATE_EPOCH
# (default 0), so the same inputs give the same bytes.
# Uncompressed on purpose: it is ~1-2 MB and decompressing under TCG costs
# boot time that reading the bytes does not (see docs/images.md).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=images/common.sh
. "$HERE/common.sh"

[ $# -eq 3 ] || die "usage: $0 KERNEL_DIR INIT_BINARY OUT.cpio"
KDIR=$1 INIT=$2 OUT=$(abspath "$3")
need cpio
need touch coreutils

[ -f "$KDIR/modules/load.list" ] || die "$KDIR/modules/load.list missing; run images/kernel.sh $KDIR first"
[ -f "$INIT" ] || die "init binary $INIT does not exist"
if [ "$(head -c4 "$INIT" | od -An -c | tr -d ' \n')" = '177ELF' ]; then
	if command -v readelf >/dev/null 2>&1 && readelf -lW "$INIT" 2>/dev/null | grep -q 'Requesting program interpreter'; then
		die "$INIT is dynamically linked; /init must be static (the initramfs has no libc)"
	fi
else
	warn "$INIT is not an ELF binary; it must be runnable from the initramfs alone"
fi

SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-0}

make_tmp_next_to "$OUT"
root=$TMP/root
mkdir -p "$root/lib/modules"
for d in dev proc sys newroot tmp run; do mkdir -p "$root/$d"; done
chmod 0755 "$root" "$root/lib" "$root/lib/modules" "$root"/{dev,proc,sys,newroot,run}
chmod 1777 "$root/tmp"
# /dev/console lets the kernel give /init its stdin/stdout/stderr before /init
# mounts devtmpfs (with an empty /dev, /init starts with no fds 0-2 at all).
if ! mknod -m 0600 "$root/dev/console" c 5 1 2>/dev/null; then
	warn "cannot mknod /dev/console (not root?); /init will start without stdio until it mounts devtmpfs"
fi
install -m 0755 "$INIT" "$root/init"
: >"$root/airlock-initramfs"
chmod 0644 "$root/airlock-initramfs"

while IFS= read -r m; do
	case $m in '' | '#'*) continue ;; esac
	case $m in */* | .*) die "bad module name '$m' in load.list" ;; esac
	[ -f "$KDIR/modules/$m" ] || die "load.list names $m but $KDIR/modules/$m is missing"
	install -m 0644 "$KDIR/modules/$m" "$root/lib/modules/$m"
done <"$KDIR/modules/load.list"
install -m 0644 "$KDIR/modules/load.list" "$root/lib/modules/load.list"

find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
(cd "$root" && find . -mindepth 1 -printf '%P\0' | LC_ALL=C sort -z |
	cpio --quiet --null -o -H newc -R 0:0 --reproducible) >"$TMP/out.cpio" ||
	die "cpio failed"
chmod 0644 "$TMP/out.cpio"
mv -f -- "$TMP/out.cpio" "$OUT" || die "cannot write $OUT"
log "$OUT: $(stat -c %s "$OUT") bytes, $(grep -c . "$KDIR/modules/load.list") modules"
