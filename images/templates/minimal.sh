#!/bin/bash
# images/templates/minimal.sh OUT.img
#
# The `minimal` template root file system: busybox (static) with an applet
# symlink farm in /bin /sbin /usr/bin /usr/sbin, /etc/{passwd,group,hostname,
# hosts,profile}, /root, /tmp (1777), /run and the /dev /proc /sys mount
# points, as a sparse 256 MiB ext4 image built without mounting
# (mkfs.ext4 -d). Takes seconds; meant for tests.
# Environment: BUSYBOX (default: `command -v busybox`, must be static),
# IMAGE_SIZE (default 256M), TEMPLATE_HOSTNAME (default airlock).
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=images/common.sh
. "$HERE/common.sh"

[ $# -eq 1 ] || die "usage: $0 OUT.img"
OUT=$(abspath "$1")
IMAGE_SIZE=${IMAGE_SIZE:-256M}
HOSTNAME_=${TEMPLATE_HOSTNAME:-airlock}
need mkfs.ext4 e2fsprogs
need truncate coreutils
BUSYBOX=${BUSYBOX:-$(command -v busybox || true)}
[ -n "$BUSYBOX" ] && [ -x "$BUSYBOX" ] || die "busybox not found; install busybox-static (see images/deps.txt)"
if command -v readelf >/dev/null 2>&1 && readelf -lW "$BUSYBOX" | grep -q 'Requesting program interpreter'; then
	die "$BUSYBOX is dynamically linked; install busybox-static"
fi

start=$(now_ms)
make_tmp_next_to "$OUT"
R=$TMP/root
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,etc,root,tmp,run,dev,proc,sys,var/tmp,home,mnt}
install -m 0755 "$BUSYBOX" "$R/bin/busybox"

# Applet farm. `busybox --list-full` gives each applet's canonical place
# (bin/ls, usr/bin/env, sbin/ifconfig...); also put every applet in /bin so
# scripts that hard-code /bin/NAME work, and a few /usr/bin names programs expect.
n=0
while IFS= read -r p; do
	[ -n "$p" ] || continue
	d=${p%/*} a=${p##*/}
	[ "$a" != busybox ] || continue
	case $d in
	bin) rel=busybox ;;
	sbin) rel=../bin/busybox ;;
	usr/bin | usr/sbin) rel=../../bin/busybox ;;
	*) continue ;;
	esac
	[ -e "$R/$p" ] || { ln -s "$rel" "$R/$p"; n=$((n + 1)); }
	[ -e "$R/bin/$a" ] || [ -L "$R/bin/$a" ] || ln -s busybox "$R/bin/$a"
done < <("$R/bin/busybox" --list-full | LC_ALL=C sort)
for a in env sh cat ls echo sleep head tail dd sha256sum id awk sed grep xargs find tr wc sort uniq printf test tee du df; do
	[ -e "$R/bin/$a" ] || die "busybox lacks the applet '$a'"
	[ -e "$R/usr/bin/$a" ] || [ -L "$R/usr/bin/$a" ] || ln -s ../../bin/busybox "$R/usr/bin/$a"
done

cat >"$R/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$R/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
echo "$HOSTNAME_" >"$R/etc/hostname"
cat >"$R/etc/hosts" <<EOF
127.0.0.1	localhost
::1	localhost ip6-localhost ip6-loopback
127.0.1.1	$HOSTNAME_
EOF
cat >"$R/etc/profile" <<'EOF'
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=${HOME:-/root}
EOF
: >"$R/etc/resolv.conf"
# The installation's egress CA (the gateway terminates TLS with it): the
# trust store is just it, as busybox has no other
if [ -n "${AIRLOCK_EGRESS_CA_CERT:-}" ]; then
	mkdir -p "$R/etc/ssl/certs"
	install -m 0644 "$AIRLOCK_EGRESS_CA_CERT" "$R/etc/ssl/certs/ca-certificates.crt"
fi
find "$R" -type d -exec chmod 0755 {} +
chmod 0700 "$R/root"
chmod 1777 "$R/tmp" "$R/var/tmp"
chmod 0644 "$R"/etc/*

image_from_tree "$R" "$IMAGE_SIZE" "$OUT"
log "$OUT: $IMAGE_SIZE sparse ($(du -k "$OUT" | cut -f1) KiB used), $n applet links, $(($(now_ms) - start)) ms"
