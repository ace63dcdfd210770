#!/bin/bash
# images/debian.sh OUT.img
#
# A Debian root file system: SUITE's minbase via mmdebstrap with PACKAGES
# and ca-certificates (the installation's egress CA joins its trust store);
# docs, man pages and locales (except C) removed and kept out of later
# installs; as a sparse ext4 image of about twice the tree (at least
# MIN_IMAGE_MB) so users have free space. templates/python.sh builds the
# `python` template with it; a template spec's {"debian": SUITE, "packages"}
# base is it too (airlock-nodemgr's template.step "base").
#
# Environment (all optional):
#   AIRLOCK_APT_CACHE  directory that keeps the downloaded .debs between builds
#   AIRLOCK_MIRROR     Debian mirror URL (default: the one the host's apt uses)
#   AIRLOCK_SECURITY_MIRROR  debian-security URL (default: from the host's apt
#                      config; "none" leaves security updates out)
#   SUITE (bookworm), PACKAGES (comma list), TEMPLATE_HOSTNAME (airlock)
#   REQUIRE            a path the tree must have (templates/python.sh: python3)
#   EXTRA_TREE         a directory copied over the root file system last
#                      (a template built on python: code-interpreter.sh)
#   KERNEL_MODULES=1   the kernel's container modules in the tree, for
#                      modprobe (AIRLOCK_KERNEL_DIR/rootfs-modules, which
#                      images/kernel.sh makes; the node passes the directory)
#   EXTRA_CUSTOMIZE    a shell command run in the tree (chroot) after it, at
#                      the host's speed: work a guest would otherwise do under
#                      emulation (code-interpreter.sh: matplotlib's font cache)
#   MIN_IMAGE_MB (1024), AIRLOCK_NO_EATMYDATA=1 (keep dpkg's fsyncs)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=images/common.sh
. "$HERE/common.sh"

[ $# -eq 1 ] || die "usage: $0 OUT.img"
OUT=$(abspath "$1")
SUITE=${SUITE:-bookworm}
HOSTNAME_=${TEMPLATE_HOSTNAME:-airlock}
MIN_IMAGE_MB=${MIN_IMAGE_MB:-1024}
case $SUITE in *[!a-z0-9-]* | '') die "SUITE=$SUITE is no suite name" ;; esac
PACKAGES=${PACKAGES:-}
case $PACKAGES in *[!a-z0-9+.,-]*) die "PACKAGES has something that is no package name" ;; esac
case $MIN_IMAGE_MB in *[!0-9]* | '') die "MIN_IMAGE_MB=$MIN_IMAGE_MB is no number" ;; esac
PACKAGES=ca-certificates${PACKAGES:+,$PACKAGES}
need mmdebstrap
need mkfs.ext4 e2fsprogs
need truncate coreutils
[ "$(id -u)" -eq 0 ] || die "run as root (mmdebstrap root mode keeps file ownership for mkfs.ext4 -d)"

# host_uris SUITE: the URIs the host's apt config uses for SUITE (deb822
# .sources files and one-line .list files), one per line, in order.
host_uris() {
	local suite=$1 f
	{
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
			[ -f "$f" ] || continue
			awk -v s="$suite" '$1 == "deb" {
				i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
				if ($(i + 1) == s) print $i }' "$f"
		done
		for f in /etc/apt/sources.list.d/*.sources; do
			[ -f "$f" ] || continue
			# Paragraphs separated by blank lines; fields Types, URIs, Suites, Enabled.
			awk -v s="$suite" '
				function flush() {
					if (types ~ /(^| )deb( |$)/ && enabled != "no" && (" " suites " ") ~ (" " s " "))
						n = split(uris, u, " "); else n = 0
					for (j = 1; j <= n; j++) print u[j]
					types = uris = suites = ""; enabled = "yes"
				}
				BEGIN { enabled = "yes" }
				/^[ \t]*#/ { next }
				/^[ \t]*$/ { flush(); next }
				/^[A-Za-z-]+:/ { key = tolower($1); sub(/:.*/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
					if (key == "types") types = val; else if (key == "uris") uris = val
					else if (key == "suites") suites = val; else if (key == "enabled") enabled = tolower(val)
					next }
				END { flush() }' "$f"
		done
	} | awk '!seen[$0]++'
}

MIRROR=${AIRLOCK_MIRROR:-$(host_uris "$SUITE" | head -n1)}
[ -n "$MIRROR" ] || die "no Debian mirror for '$SUITE' in /etc/apt/sources.list{,.d/*}; set AIRLOCK_MIRROR=URL"
SEC=${AIRLOCK_SECURITY_MIRROR:-$(host_uris "$SUITE-security" | head -n1)}
[ "$SEC" != none ] || SEC=
UPD=$(host_uris "$SUITE-updates" | head -n1)
sources=("deb $MIRROR $SUITE main")
[ -z "$UPD" ] || sources+=("deb $UPD $SUITE-updates main")
[ -z "$SEC" ] || sources+=("deb $SEC $SUITE-security main")

start=$(now_ms)
make_tmp_next_to "$OUT"
R=$TMP/root
chmod 0755 "$TMP" # apt's sandbox user (_apt) must reach the chroot
mmargs=(--variant=minbase --include="$PACKAGES" --mode=root --format=directory
	--aptopt='Acquire::Retries "3"'
	--dpkgopt='path-exclude=/usr/share/man/*'
	--dpkgopt='path-exclude=/usr/share/doc/*'
	--dpkgopt='path-include=/usr/share/doc/*/copyright'
	--dpkgopt='path-exclude=/usr/share/locale/*'
	--dpkgopt='path-include=/usr/share/locale/locale.alias'
	--dpkgopt='path-exclude=/usr/share/info/*'
	--dpkgopt='path-exclude=/usr/share/lintian/*'
	--dpkgopt='path-exclude=/usr/share/linda/*')
# eatmydata (fetched from the mirror into the chroot, removed afterwards):
# dpkg's fsync()s are pointless for a tree that becomes an image.
eat=/usr/share/mmdebstrap/hooks/eatmydata
[ -n "${AIRLOCK_NO_EATMYDATA:-}" ] || [ ! -d "$eat" ] || mmargs+=(--hook-dir="$eat")
if [ -n "${AIRLOCK_APT_CACHE:-}" ]; then
	mkdir -p "$AIRLOCK_APT_CACHE" || die "cannot create AIRLOCK_APT_CACHE=$AIRLOCK_APT_CACHE"
	cache=$(cd "$AIRLOCK_APT_CACHE" && pwd)
	log "caching .debs in $cache ($(find "$cache" -maxdepth 1 -name '*.deb' | wc -l) there now)"
	# The documented mmdebstrap recipe: seed the chroot's archive dir, keep the
	# .debs mmdebstrap would unlink, and copy the (new) ones back out.
	mmargs+=(--skip=essential/unlink
		--setup-hook="mkdir -p \"\$1/var/cache/apt/archives/\""
		--setup-hook="sync-in '$cache' /var/cache/apt/archives/"
		--customize-hook="sync-out /var/cache/apt/archives '$cache'")
fi
# The installation's egress CA joins the trust store (the gateway
# terminates TLS with it where a name or a credential decides).
if [ -n "${AIRLOCK_EGRESS_CA_CERT:-}" ]; then
	[ -r "$AIRLOCK_EGRESS_CA_CERT" ] || die "AIRLOCK_EGRESS_CA_CERT=$AIRLOCK_EGRESS_CA_CERT is not readable"
	mmargs+=(--customize-hook="install -m 0644 '$AIRLOCK_EGRESS_CA_CERT' \"\$1/usr/local/share/ca-certificates/airlock-egress.crt\"
chroot \"\$1\" update-ca-certificates >&2")
fi
if [ -n "${EXTRA_TREE:-}" ]; then
	[ -d "$EXTRA_TREE" ] || die "EXTRA_TREE=$EXTRA_TREE is not a directory"
	mmargs+=(--customize-hook="cp -a --no-preserve=ownership '$EXTRA_TREE/.' \"\$1/\"")
fi
if [ -n "${KERNEL_MODULES:-}" ]; then
	[ -d "${AIRLOCK_KERNEL_DIR:-}/rootfs-modules/usr/lib/modules" ] ||
		die "KERNEL_MODULES=1 needs AIRLOCK_KERNEL_DIR with rootfs-modules (images/kernel.sh; the node sets it)"
	mmargs+=(--customize-hook="cp -a --no-preserve=ownership '$AIRLOCK_KERNEL_DIR/rootfs-modules/.' \"\$1/\"")
fi
if [ -n "${EXTRA_CUSTOMIZE:-}" ]; then
	export EXTRA_CUSTOMIZE # the hook reads it from the environment: no quoting of it here
	mmargs+=(--customize-hook="chroot \"\$1\" /bin/sh -c \"\$EXTRA_CUSTOMIZE\" >&2")
fi
# Shrink and finish the tree (runs inside mmdebstrap, after all installs).
mmargs+=(--customize-hook="echo '$HOSTNAME_' > \"\$1/etc/hostname\"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n' '$HOSTNAME_' > \"\$1/etc/hosts\"
mkdir -p \"\$1/root\" && chmod 0700 \"\$1/root\"
rm -f \"\$1\"/var/cache/apt/archives/*.deb \"\$1\"/var/cache/apt/*.bin
rm -rf \"\$1\"/var/lib/apt/lists/* \"\$1\"/usr/share/man/* \"\$1\"/usr/share/info/*
find \"\$1/usr/share/doc\" -mindepth 1 ! -type d ! -name copyright -delete
find \"\$1/usr/share/doc\" -mindepth 1 -type d -empty -delete
find \"\$1/usr/share/locale\" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
rm -f \"\$1/etc/resolv.conf\" && : > \"\$1/etc/resolv.conf\"
rm -f \"\$1\"/usr/lib/python3*/EXTERNALLY-MANAGED")

log "mmdebstrap $SUITE from ${sources[*]}"
# Its output goes to our stderr (the template's build log) and to a file, so
# that a failure can say what failed: the mirror only when it was a download.
mmlog=$TMP/mmdebstrap.log
rc=0
mmdebstrap "${mmargs[@]}" "$SUITE" "$R" "${sources[@]}" 2>&1 | tee "$mmlog" >&2 || rc=$?
if [ "$rc" -ne 0 ]; then
	download='Failed to fetch|Could not resolve|Temporary failure resolving|Unable to connect|Could not connect|Connection (failed|timed out|refused)|404 +Not Found|Release file .* is not valid|does not have a Release file'
	if grep -qE "$download" "$mmlog"; then
		die "mmdebstrap could not download from the mirror $MIRROR (set AIRLOCK_MIRROR to use another): $(grep -E "$download" "$mmlog" | tail -n1)"
	fi
	# what failed: a missing command (a hook's tool), and mmdebstrap's last
	# own error ("E: mmdebstrap failed to run" says nothing)
	cause=$(grep -E ': not found$|command not found' "$mmlog" | tail -n1 || true)
	last=$(grep -E '^E: ' "$mmlog" | grep -v 'E: mmdebstrap failed to run' | tail -n1 || true)
	[ -n "$cause$last" ] || last=$(grep -v '^[[:space:]]*$' "$mmlog" | tail -n1 || true)
	die "mmdebstrap failed (exit $rc): ${cause:+$cause; }${last:-no output}"
fi
[ -z "${REQUIRE:-}" ] || [ -e "$R$REQUIRE" ] || die "no $REQUIRE in the built tree"
tree_mb=$(tree_mib "$R")
size_mb=$((tree_mb * 2))
[ "$size_mb" -ge "$MIN_IMAGE_MB" ] || size_mb=$MIN_IMAGE_MB
image_from_tree "$R" "${size_mb}M" "$OUT"
log "$OUT: tree ${tree_mb} MiB, image ${size_mb} MiB sparse ($(du -k "$OUT" | cut -f1) KiB used), built in $(($(now_ms) - start)) ms"
