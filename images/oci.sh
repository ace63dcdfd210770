#!/bin/bash
# images/oci.sh OUT.img
#
# A root file system from an OCI image (a template spec's {"oci": REF}
# base, airlock-nodemgr's template.step "base"): skopeo copies OCI_REF
# (oci:DIR[:TAG], docker-archive:FILE or docker://REGISTRY/IMAGE:TAG) into
# an OCI layout (checking every blob's digest), OCI_CHECK checks its layers
# before anything unpacks them (airlock-nodemgr --check-oci-layout:
# lib/buildctx's rules for layers, at most 128 layers of 8 GiB), umoci
# unpacks them, and the tree becomes a sparse ext4 image of about twice
# its size (at least MIN_IMAGE_MB). The image's config is kept in
# /etc/airlock/oci-config.json: the node takes its environment, working
# directory and user as the template's defaults. The mount points, /tmp,
# /root and the files of a host name a sandbox needs are added when the
# image lacks them.
#
# The image is hostile until proven otherwise: everything that reads it
# runs in a user namespace of its own, its root mapped to OCI_UID_BASE
# (1500000000) and its uids and gids 0-65535 to the 65536 above it, none
# of them anyone on the host, without capabilities there; in a mount
# namespace of its own where every mount is read-only but its work
# directory (a fresh /tmp holds it), and a pid namespace of its own.
# umoci unpacks as that root, so the image's files keep their owners
# (uid 1000 of the image is 1500001000 on the host, 1000 again to
# mkfs.ext4 -d inside: the ext4 image records the image's own). Only the
# finished image file comes out, moved into place by root.
#
# Environment: OCI_REF and OCI_CHECK (required), MIN_IMAGE_MB (256),
# TEMPLATE_HOSTNAME (airlock), OCI_UID_BASE (1500000000).
set -euo pipefail

# ---- inside the namespaces (as the namespace's root), in the work dir ----
if [ "${1:-}" = --inside ]; then
	PROG=oci.sh
	log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
	die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
	# a /proc of this pid namespace, a /tmp of its own holding the work
	# dir, and every other mount read-only: the work dir is all it can
	# write (a link of the image's that points into the host finds it
	# read-only)
	mount -t proc -o nosuid,nodev,noexec proc /proc || die "cannot mount a /proc of its own"
	mount -t tmpfs -o size=1m,mode=0755,nosuid,nodev,noexec tmpfs /tmp || die "cannot mount a /tmp of its own"
	mkdir /tmp/w
	mount -c --bind . /tmp/w || die "cannot mount the work dir"
	findmnt -rn -o TARGET | while read -r m; do
		m=$(printf '%b' "$m")
		# one that cannot be remounted is one it cannot reach (EACCES)
		[ "$m" = /tmp/w ] || mount -c -o remount,bind,ro "$m" 2>/dev/null || true
	done
	cd /tmp/w
	mkdir tmp
	export TMPDIR=/tmp/w/tmp HOME=/tmp/w/tmp
	# the last line of a tool's errors, for the build's error
	last() { sed -e 's/^time="[^"]*" level=[a-z]* msg=//' "$1" | tail -n 1 | cut -c1-400; }
	# no signature policy is configured for templates: the reference is
	# the spec's, and the registry's TLS is still verified (its CA from
	# /etc/containers/certs.d, readable by all)
	log "copying $OCI_REF"
	# no signatures either: they would be read from root's
	# /var/lib/containers, which this root does not own
	mkdir registries.d
	if ! skopeo --insecure-policy --registries.d registries.d copy --quiet --remove-signatures "$OCI_REF" \
		oci:layout:image 2>skopeo.err; then
		cat skopeo.err >&2
		die "skopeo could not copy $OCI_REF: $(last skopeo.err)"
	fi
	if ! /proc/self/fd/7 --check-oci-layout layout >check.out 2>&1; then
		die "$(last check.out)"
	fi
	log "$(cat check.out)"
	skopeo --insecure-policy --registries.d registries.d inspect --config oci:layout:image >config.json 2>skopeo.err ||
		die "skopeo could not read the config of $OCI_REF: $(last skopeo.err)"
	umoci unpack --image layout:image bundle >&2 || die "umoci could not unpack $OCI_REF"
	R=bundle/rootfs
	[ -d "$R" ] && [ ! -L "$R" ] || die "umoci made no root file system"
	# what is added here goes through none of the image's links (they
	# resolve inside the image when it boots, not here)
	for d in dev proc sys run tmp root etc etc/airlock; do
		[ ! -L "$R/$d" ] || die "the image's /$d is a symbolic link"
	done
	mkdir -p "$R"/{dev,proc,sys,run,tmp,root,etc/airlock}
	chmod 1777 "$R/tmp"
	rm -f "$R/etc/airlock/oci-config.json"
	install -m 0644 config.json "$R/etc/airlock/oci-config.json"
	missing() { [ ! -e "$1" ] && [ ! -L "$1" ]; }
	! missing "$R/etc/hostname" || echo "$HOSTNAME_" >"$R/etc/hostname"
	! missing "$R/etc/hosts" ||
		printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\t%s\n' "$HOSTNAME_" >"$R/etc/hosts"
	# the gateway resolves: the guest agent writes the resolver at boot
	rm -f "$R/etc/resolv.conf" && : >"$R/etc/resolv.conf"
	! missing "$R/etc/passwd" || printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
	! missing "$R/etc/group" || printf 'root:x:0:\n' >"$R/etc/group"
	tree_mb=$((($(du -sxk "$R" | cut -f1) + 1023) / 1024))
	size_mb=$((tree_mb * 2 + 64))
	[ "$size_mb" -ge "$MIN_IMAGE_MB" ] || size_mb=$MIN_IMAGE_MB
	truncate -s "${size_mb}M" out.img
	mkfs.ext4 -q -F -b 4096 -I 256 -L airlock-root -E root_owner=0:0 -d "$R" out.img || die "mkfs.ext4 -d failed"
	chmod 0644 out.img
	log "tree ${tree_mb} MiB, image ${size_mb} MiB sparse"
	exit 0
fi

# ---- outside: root, sets the namespaces up and takes the image out ----
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=images/common.sh
. "$HERE/common.sh"

[ $# -eq 1 ] || die "usage: $0 OUT.img"
OUT=$(abspath "$1")
export OCI_REF=${OCI_REF:?OCI_REF names the image}
CHECK=${OCI_CHECK:?OCI_CHECK names what checks the layers (airlock-nodemgr)}
export MIN_IMAGE_MB=${MIN_IMAGE_MB:-256} HOSTNAME_=${TEMPLATE_HOSTNAME:-airlock}
UID_BASE=${OCI_UID_BASE:-1500000000}
case $MIN_IMAGE_MB in *[!0-9]* | '') die "MIN_IMAGE_MB=$MIN_IMAGE_MB is no number" ;; esac
case $UID_BASE in *[!0-9]* | '' | 0) die "OCI_UID_BASE=$UID_BASE is no uid" ;; esac
need skopeo skopeo
need umoci umoci
need mkfs.ext4 e2fsprogs
need unshare util-linux
need setpriv util-linux
need findmnt util-linux
need mount mount
[ "$(id -u)" -eq 0 ] || die "run as root (it maps the image's owners to uids of their own)"

start=$(now_ms)
make_tmp_next_to "$OUT"
W=$TMP/w
mkdir -m 0700 "$W"
chown "$UID_BASE:$UID_BASE" "$W"
mkfifo -m 0600 "$TMP/go"
# the checker and this script through fds: the namespace needs no path to them
exec 7<"$CHECK" 6<"$HERE/oci.sh"
cd "$W"
# the namespace's first process waits until its ids are mapped (only root
# out here may map a range), then becomes its root: unshare keeps the
# namespace's capabilities across its exec for that (--keep-caps)
unshare --user --keep-caps --mount --pid --fork --kill-child -- \
	/bin/bash -c 'read -r _ <&9 && exec 9<&- && exec setpriv --reuid=0 --regid=0 --clear-groups -- "$@"' sh \
	/bin/bash /proc/self/fd/6 --inside 9<"$TMP/go" &
pid=$!
exec 8>"$TMP/go"
mine=$(readlink /proc/self/ns/user)
for _ in $(seq 1000); do
	ns=$(readlink "/proc/$pid/ns/user" 2>/dev/null) || break
	[ "$ns" = "$mine" ] || break
	sleep 0.01
done
[ "${ns:-$mine}" != "$mine" ] || die "unshare made no user namespace"
echo "0 $UID_BASE 65536" >"/proc/$pid/uid_map"
echo "0 $UID_BASE 65536" >"/proc/$pid/gid_map"
echo go >&8
exec 8>&- 7<&- 6<&-
wait "$pid" || exit 1 # the namespace said why
cd /
# one plain file is all that comes out (nothing in the namespace runs now:
# its pid namespace ended with its first process)
img=$W/out.img
[ -f "$img" ] && [ ! -L "$img" ] && [ "$(stat -c %h "$img")" -eq 1 ] || die "the namespace made no image file"
mv -f -- "$img" "$OUT" || die "cannot write $OUT"
log "$OUT: built in $(($(now_ms) - start)) ms"
