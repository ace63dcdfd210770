#!/bin/bash
# images/oci.sh OUT.img
#
# A root file system from an OCI image (a template spec's {"oci": REF}
# base, airlock-nodemgr's template.step "base"): skopeo copies OCI_REF
# (oci:DIR[:TAG], docker-archive:FILE or docker://REGISTRY/IMAGE:TAG) into
# an OCI layout, umoci unpacks its layers as root (ownership kept), and the
# tree becomes a sparse ext4 image of about twice its size (at least
# MIN_IMAGE_MB). The image's config is kept in /etc/airlock/oci-config.json:
# the node takes its environment, working directory and user as the
# template's defaults. The mount points, /tmp, /root and the files of a
# host name a sandbox needs are added when the image lacks them.
#
# Environment: OCI_REF (required), MIN_IMAGE_MB (256), TEMPLATE_HOSTNAME
# (airlock).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=images/common.sh
. "$HERE/common.sh"

[ $# -eq 1 ] || die "usage: $0 OUT.img"
OUT=$(abspath "$1")
REF=${OCI_REF:?OCI_REF names the image}
MIN_IMAGE_MB=${MIN_IMAGE_MB:-256}
HOSTNAME_=${TEMPLATE_HOSTNAME:-airlock}
case $MIN_IMAGE_MB in *[!0-9]* | '') die "MIN_IMAGE_MB=$MIN_IMAGE_MB is no number" ;; esac
need skopeo skopeo
need umoci umoci
need mkfs.ext4 e2fsprogs
[ "$(id -u)" -eq 0 ] || die "run as root (umoci keeps the layers' file ownership for mkfs.ext4 -d)"

start=$(now_ms)
make_tmp_next_to "$OUT"
log "copying $REF"
# no signature policy is configured for templates: the reference is the
# spec's, and the registry's TLS is still verified
skopeo --insecure-policy copy --quiet "$REF" "oci:$TMP/layout:image" ||
	die "skopeo could not copy $REF"
skopeo --insecure-policy inspect --config "oci:$TMP/layout:image" >"$TMP/config.json" ||
	die "skopeo could not read the config of $REF"
umoci unpack --image "$TMP/layout:image" "$TMP/bundle" >&2 || die "umoci could not unpack $REF"
R=$TMP/bundle/rootfs
[ -d "$R" ] || die "umoci made no root file system"

mkdir -p "$R"/{dev,proc,sys,run,tmp,root,etc/airlock}
chmod 1777 "$R/tmp"
install -m 0644 "$TMP/config.json" "$R/etc/airlock/oci-config.json"
[ -e "$R/etc/hostname" ] || echo "$HOSTNAME_" >"$R/etc/hostname"
[ -e "$R/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.1.1\t%s\n' "$HOSTNAME_" >"$R/etc/hosts"
# the gateway resolves: the guest agent writes the resolver at boot
rm -f "$R/etc/resolv.conf" && : >"$R/etc/resolv.conf"
[ -e "$R/etc/passwd" ] || printf 'root:x:0:0:root:/root:/bin/sh\n' >"$R/etc/passwd"
[ -e "$R/etc/group" ] || printf 'root:x:0:\n' >"$R/etc/group"

tree_mb=$(tree_mib "$R")
size_mb=$((tree_mb * 2 + 64))
[ "$size_mb" -ge "$MIN_IMAGE_MB" ] || size_mb=$MIN_IMAGE_MB
image_from_tree "$R" "${size_mb}M" "$OUT"
log "$OUT: tree ${tree_mb} MiB, image ${size_mb} MiB sparse, built in $(($(now_ms) - start)) ms"
