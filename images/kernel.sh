#!/bin/bash
# images/kernel.sh OUT_DIR
#
# Fetch the pinned Debian cloud kernel and prepare it for QEMU microvm/PVH:
#   OUT_DIR/vmlinux          uncompressed ELF kernel (boots via PVH, -kernel)
#   OUT_DIR/config           the kernel's build config
#   OUT_DIR/kernel.version   "PACKAGE=VERSION" actually used (the pin)
#   OUT_DIR/kernel.release   uname -r of that kernel
#   OUT_DIR/modules/*.ko     guest driver modules, decompressed, named MODNAME.ko
#   OUT_DIR/modules/load.list  those file names in load order (deps first)
#   OUT_DIR/rootfs-modules/usr/lib/modules/RELEASE/  the modules containers need
#                            (netfilter, bridge, veth, overlayfs, with what
#                            they depend on) as the package has them, and
#                            their modules.dep: a template that runs Docker
#                            copies the tree into its root file system for
#                            modprobe (images/debian.sh KERNEL_MODULES=1)
#   OUT_DIR/SHA256SUMS       hashes of all of the above
#
# Does nothing when OUT_DIR/vmlinux exists and OUT_DIR/kernel.version matches
# the pin. Environment overrides (all optional):
#   KERNEL_PKG, KERNEL_VERSION  the pin (defaults below)
#   KERNEL_DEB       use this local .deb instead of downloading (offline builds)
#   AIRLOCK_APT_CACHE  directory caching downloaded .debs (shared with python.sh)
#   GUEST_MODULES    space-separated module names to ship (deps are added)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=images/common.sh
. "$HERE/common.sh"

# ---- The pin. To bump: see docs/images.md ("Bumping the kernel"). ----
KERNEL_PKG=${KERNEL_PKG:-linux-image-6.1.0-57-cloud-amd64}
KERNEL_VERSION=${KERNEL_VERSION:-6.1.192-3}
KERNEL_META=linux-image-cloud-amd64
# virtio_mmio: transport on -M microvm; virtio_console: virtio-serial (the
# airlock.0 channel); virtio_blk: rootfs; virtio_net (+failover): egress via
# tap; virtio_rng: entropy from the host when a virtio-rng device is attached.
GUEST_MODULES=${GUEST_MODULES:-virtio_ring virtio virtio_mmio virtio_console virtio_blk virtio_net virtio_rng}
# The module directories (under lib/modules/RELEASE) of rootfs-modules: what
# dockerd and its iptables rules load (nf_tables and iptables' x_tables and
# NAT, the bridge and br_netfilter, veth, overlayfs), plus what they need.
CONTAINER_MODULE_DIRS=${CONTAINER_MODULE_DIRS:-kernel/net/netfilter kernel/net/ipv4/netfilter kernel/net/ipv6/netfilter kernel/net/bridge kernel/fs/overlayfs kernel/drivers/net/veth.ko}

[ $# -eq 1 ] || die "usage: $0 OUT_DIR"
OUT=$(abspath "${1%/}")
[ "$OUT" != / ] || die "refusing to use / as OUT_DIR"

for t in apt-get:apt apt-cache:apt dpkg-deb:dpkg lz4:lz4 depmod:kmod modinfo:kmod \
	od:coreutils dd:coreutils sha256sum:coreutils; do
	need "${t%%:*}" "${t#*:}"
done

up_to_date() { # $1 = PKG=VERSION
	[ -f "$OUT/vmlinux" ] && [ -f "$OUT/modules/load.list" ] && [ -f "$OUT/kernel.version" ] &&
		[ -d "$OUT/rootfs-modules" ] &&
		[ "$(cat "$OUT/kernel.version")" = "$1" ]
}

pin="$KERNEL_PKG=$KERNEL_VERSION"
if up_to_date "$pin"; then
	log "$OUT is up to date ($pin)"
	exit 0
fi

# ---- choose the package: the pin, or (when the mirror dropped it) the
# ---- kernel the meta package currently depends on, with a WARNING.
pkg=$KERNEL_PKG ver=$KERNEL_VERSION
if [ -n "${KERNEL_DEB:-}" ]; then
	[ -f "$KERNEL_DEB" ] || die "KERNEL_DEB=$KERNEL_DEB does not exist"
	pkg=$(dpkg-deb -f "$KERNEL_DEB" Package) ver=$(dpkg-deb -f "$KERNEL_DEB" Version)
	[ "$pkg=$ver" = "$pin" ] || warn "KERNEL_DEB is $pkg=$ver, not the pin $pin"
elif ! apt-cache madison "$KERNEL_PKG" 2>/dev/null |
	awk -F'|' -v v="$KERNEL_VERSION" '{ gsub(/ /, "", $2) } $2 == v { found = 1 } END { exit !found }'; then
	dep=$(apt-cache depends "$KERNEL_META" 2>/dev/null |
		awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }')
	[ -n "$dep" ] || die "neither $pin nor $KERNEL_META is known to apt; run 'apt-get update' (is the Debian mirror reachable?)"
	dver=$(apt-cache policy "$dep" | awk '$1 == "Candidate:" { print $2; exit }')
	[ -n "$dver" ] && [ "$dver" != "(none)" ] || die "no installable version of $dep; run 'apt-get update'"
	warn "pinned kernel $pin is not on the mirror any more; falling back to $dep=$dver (the current $KERNEL_META). Bump the pin in images/kernel.sh."
	pkg=$dep ver=$dver
	if up_to_date "$pkg=$ver"; then
		log "$OUT is up to date ($pkg=$ver)"
		exit 0
	fi
fi

make_tmp_next_to "$OUT"
mkdir -p "$TMP/dl" "$TMP/pkg" "$TMP/out/modules"

# ---- download (or reuse a cached / given .deb)
deb=
if [ -n "${KERNEL_DEB:-}" ]; then
	deb=$KERNEL_DEB
else
	# apt's file names escape ':' in epochs as %3a; the kernel has no epoch.
	cached=${AIRLOCK_APT_CACHE:+$AIRLOCK_APT_CACHE/${pkg}_${ver}_amd64.deb}
	if [ -n "$cached" ] && [ -s "$cached" ]; then
		log "using cached $cached"
		deb=$cached
	else
		log "downloading $pkg=$ver"
		(cd "$TMP/dl" && apt-get -q download -o APT::Sandbox::User=root "$pkg=$ver") >&2 ||
			die "apt-get download $pkg=$ver failed (run 'apt-get update'?)"
		deb=$(find "$TMP/dl" -name '*.deb' | head -n1)
		[ -n "$deb" ] || die "apt-get download produced no .deb"
		if [ -n "$cached" ]; then
			mkdir -p "$AIRLOCK_APT_CACHE" && cp -f "$deb" "$cached.tmp.$$" && mv -f "$cached.tmp.$$" "$cached" ||
				warn "could not store the .deb in $AIRLOCK_APT_CACHE"
		fi
	fi
fi
dpkg-deb -x "$deb" "$TMP/pkg" || die "cannot extract $deb"

vmlinuz=
for f in "$TMP"/pkg/boot/vmlinuz-*; do
	[ -f "$f" ] || continue
	[ -z "$vmlinuz" ] || die "more than one vmlinuz in $pkg"
	vmlinuz=$f
done
[ -n "$vmlinuz" ] || die "no /boot/vmlinuz-* in $pkg"
release=${vmlinuz##*/vmlinuz-}
config=$TMP/pkg/boot/config-$release
[ -f "$config" ] || die "no /boot/config-$release in $pkg"

# ---- bzImage -> vmlinux. Boot protocol setup header (Documentation/x86/boot.rst):
#   0x1f1 u8  setup_sects (0 means 4)
#   0x202 4   "HdrS"
#   0x248 u32 payload_offset  } relative to the protected-mode code, which
#   0x24c u32 payload_length  } starts at (setup_sects + 1) * 512
# The payload is the compressed vmlinux followed by its uncompressed size (u32 LE).
u8()  { od -An -tu1 -j "$2" -N1 "$1" | tr -d ' \n'; }
u32() { od -An -tu4 -j "$2" -N4 "$1" | tr -d ' \n'; }
[ "$(dd if="$vmlinuz" bs=1 skip=$((0x202)) count=4 status=none)" = HdrS ] ||
	die "$vmlinuz is not a bzImage (no HdrS signature)"
setup_sects=$(u8 "$vmlinuz" $((0x1f1)))
[ "$setup_sects" -ne 0 ] || setup_sects=4
payload_offset=$(u32 "$vmlinuz" $((0x248)))
payload_length=$(u32 "$vmlinuz" $((0x24c)))
start=$(((setup_sects + 1) * 512 + payload_offset))
vmlinuz_size=$(stat -c %s "$vmlinuz")
[ "$payload_length" -gt 4 ] && [ $((start + payload_length)) -le "$vmlinuz_size" ] ||
	die "bad payload header in $vmlinuz (offset $start, length $payload_length, file $vmlinuz_size)"
magic=$(od -An -tx1 -j "$start" -N4 "$vmlinuz" | tr -d ' \n')
[ "$magic" = 02214c18 ] ||
	die "payload of $vmlinuz is not LZ4 legacy (magic $magic); check CONFIG_KERNEL_* in its config"
want_size=$(u32 "$vmlinuz" $((start + payload_length - 4)))
# Leave out the trailing size word: lz4 -d would read it as a block header.
dd if="$vmlinuz" bs=1M iflag=skip_bytes,count_bytes skip="$start" count=$((payload_length - 4)) status=none |
	lz4 -dc -q >"$TMP/out/vmlinux" || die "lz4 could not decompress the kernel payload"
got_size=$(stat -c %s "$TMP/out/vmlinux")
[ "$got_size" -eq "$want_size" ] || die "vmlinux is $got_size bytes, the bzImage says $want_size"
[ "$(od -An -c -N4 "$TMP/out/vmlinux" | tr -d ' \n')" = '177ELF' ] || die "decompressed payload is not an ELF file"
grep -qx 'CONFIG_PVH=y' "$config" || die "$release lacks CONFIG_PVH=y; QEMU cannot boot its vmlinux directly"

# ---- modules. Add what ext4 needs if it is modular (in Debian's cloud kernel
# ---- it is built in: CONFIG_EXT4_FS=y).
want_mods=$GUEST_MODULES
grep -qx 'CONFIG_EXT4_FS=m' "$config" && want_mods="$want_mods ext4"
for opt in VIRTIO VIRTIO_MMIO VIRTIO_CONSOLE VIRTIO_BLK; do
	grep -qE "^CONFIG_${opt}=(y|m)$" "$config" || die "CONFIG_$opt is not enabled in $release"
done

moddir=
for d in "$TMP/pkg/lib/modules/$release" "$TMP/pkg/usr/lib/modules/$release"; do
	[ -d "$d" ] && moddir=$d && break
done
[ -n "$moddir" ] || die "no modules directory for $release in $pkg"
basedir=${moddir%/lib/modules/*}
# The package does not ship modules.dep (its postinst runs depmod); make it.
depmod -b "$basedir" "$release" || die "depmod failed on the extracted modules"

declare -A mod_path mod_deps
modname() { local b=${1##*/}; b=${b%%.ko*}; printf '%s\n' "${b//-/_}"; }
while IFS= read -r line; do
	path=${line%%:*}
	rest=${line#*:}
	name=$(modname "$path")
	mod_path[$name]=$path
	deps=
	for d in $rest; do deps="$deps $(modname "$d")"; done
	mod_deps[$name]=$deps
done <"$moddir/modules.dep"

builtin_mod() { grep -qE "/$1\.ko$|/${1//_/-}\.ko$" "$moddir/modules.builtin"; }

declare -A state # "" = unvisited, 1 = visiting, 2 = done
order=()
visit() {
	local m=$1 d
	case ${state[$m]:-} in
	2) return ;;
	1) die "module dependency cycle at $m" ;;
	esac
	if [ -z "${mod_path[$m]:-}" ]; then
		builtin_mod "$m" && { state[$m]=2; return; }
		die "module $m not found in $release"
	fi
	state[$m]=1
	for d in ${mod_deps[$m]}; do visit "$d"; done
	state[$m]=2
	order+=("$m")
}
for m in $want_mods; do visit "$m"; done

: >"$TMP/out/modules/load.list"
for m in "${order[@]}"; do
	src=$moddir/${mod_path[$m]}
	dst=$TMP/out/modules/$m.ko
	case $src in
	*.ko) cp "$src" "$dst" ;;
	*.ko.xz) need xz xz-utils; xz -dc "$src" >"$dst" ;;
	*.ko.zst) need zstd; zstd -qdc "$src" >"$dst" ;;
	*.ko.gz) gzip -dc "$src" >"$dst" ;;
	*) die "unknown module format: $src" ;;
	esac
	[ "$(modinfo -F name "$dst")" = "$m" ] || die "$dst does not look like module $m"
	echo "$m.ko" >>"$TMP/out/modules/load.list"
done

# ---- rootfs-modules: the container modules and their dependencies, as
# ---- the package has them (compressed or not: kmod reads both).
order=()
unset state
declare -A state
for dir in $CONTAINER_MODULE_DIRS; do
	[ -e "$moddir/$dir" ] || [ -n "$(compgen -G "$moddir/$dir*")" ] || die "no $dir in $release's modules"
	while IFS= read -r f; do
		visit "$(modname "$f")"
	done < <(cd "$moddir" && find $dir* -name '*.ko*' | LC_ALL=C sort)
done
rmods=$TMP/out/rootfs-modules/lib/modules/$release
mkdir -p "$rmods"
for m in "${order[@]}"; do
	mkdir -p "$rmods/$(dirname "${mod_path[$m]}")"
	cp "$moddir/${mod_path[$m]}" "$rmods/${mod_path[$m]}"
done
for f in modules.builtin modules.builtin.modinfo modules.order; do
	[ ! -f "$moddir/$f" ] || cp "$moddir/$f" "$rmods/$f"
done
depmod -b "$TMP/out/rootfs-modules" "$release" || die "depmod failed on rootfs-modules"
[ -s "$rmods/modules.dep" ] || die "rootfs-modules has no modules.dep"
# Debian's trees merge /usr: their /lib is a link to usr/lib, which a copy
# of this tree over one must not meet
mkdir "$TMP/out/rootfs-modules/usr" && mv "$TMP/out/rootfs-modules/lib" "$TMP/out/rootfs-modules/usr/lib"

cp "$config" "$TMP/out/config"
echo "$release" >"$TMP/out/kernel.release"
echo "$pkg=$ver" >"$TMP/out/kernel.version"
(cd "$TMP/out" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort |
	xargs sha256sum >SHA256SUMS)
find "$TMP/out" -type d -exec chmod 0755 {} +
find "$TMP/out" -type f -exec chmod 0644 {} +

# ---- install atomically: new tree in, old tree out.
if [ -e "$OUT" ]; then
	mv -T -- "$OUT" "$TMP/old" || die "cannot move the old $OUT aside"
fi
if ! mv -T -- "$TMP/out" "$OUT"; then
	[ -e "$TMP/old" ] && mv -T -- "$TMP/old" "$OUT"
	die "cannot install $OUT"
fi
log "kernel $pkg=$ver ($release) -> $OUT; modules: $(tr '\n' ' ' <"$OUT/modules/load.list"); for containers: ${#order[@]} in rootfs-modules"
