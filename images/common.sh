# shellcheck shell=bash
# Helpers shared by the images/ scripts. Source it; do not run it.
#
# Conventions: every script writes its output atomically. It builds in a
# temporary directory next to the output (same file system, so the final
# rename is atomic), and removes that directory on any exit, so a failed or
# interrupted run never leaves a partial output behind.

PROG=${PROG:-$(basename "$0")}

log()  { printf '%s: %s\n' "$PROG" "$*" >&2; }
warn() { printf '%s: WARNING: %s\n' "$PROG" "$*" >&2; }
die()  { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

# need CMD [PACKAGE]: fail with a clear message when a tool is missing.
need() {
	command -v "$1" >/dev/null 2>&1 ||
		die "'$1' not found; install the Debian package '${2:-$1}' (see images/deps.txt)"
}

# make_tmp_next_to PATH: create a private temp directory next to PATH and
# arrange for it to be removed on exit. Sets TMP.
TMP=
_cleanup_tmp() {
	local rc=$?
	if [ -n "$TMP" ] && [ -d "$TMP" ]; then
		rm -rf -- "$TMP"
	fi
	exit "$rc"
}
make_tmp_next_to() {
	local out=$1 dir base
	dir=$(dirname -- "$out")
	base=$(basename -- "$out")
	mkdir -p -- "$dir" || die "cannot create directory $dir"
	TMP=$(mktemp -d "$dir/.$base.tmp.XXXXXX") || die "cannot create a temp dir in $dir"
	trap _cleanup_tmp EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

# abspath PATH: absolute path without requiring it to exist.
abspath() {
	case $1 in
	/*) printf '%s\n' "$1" ;;
	*) printf '%s/%s\n' "$PWD" "$1" ;;
	esac
}

# now_ms: wall clock in milliseconds (for build timings).
now_ms() { date +%s%3N; }

# tree_mib DIR: the tree's size in MiB, rounded up
tree_mib() { echo $(( ($(du -sxk "$1" | cut -f1) + 1023) / 1024 )); }

# image_from_tree DIR SIZE OUT: DIR as a sparse ext4 image of SIZE
# (truncate's: 256M, 1024M) at OUT, every file root's as in DIR, built
# without mounting (mkfs.ext4 -d) in $TMP and renamed into place
image_from_tree() {
	truncate -s "$2" "$TMP/out.img"
	mkfs.ext4 -q -F -b 4096 -I 256 -L airlock-root -E root_owner=0:0 -d "$1" "$TMP/out.img" ||
		die "mkfs.ext4 -d failed"
	chmod 0644 "$TMP/out.img"
	mv -f -- "$TMP/out.img" "$3" || die "cannot write $3"
}
