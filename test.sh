#!/usr/bin/env bash
# The whole test suite, one command: installs what is missing, builds, runs
# the unit tests and fuzz replays (meson), then the integration tests, which
# boot real VMs (pytest). Needs root (VMs, loop mounts).
#
#   ./test.sh                 everything
#   ./test.sh -k session      integration tests matching a pytest expression
#
# Templates are built once per run into a shared btrfs loop volume
# (build/test-vol.btrfs, mounted at build/test-vol while the suite runs) and
# kept there between runs; delete that file to rebuild them from scratch.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${AIRLOCK_BUILD_DIR:-$here/build}
export AIRLOCK_BUILD_DIR=$build

"$here/scripts/deps.sh" --test
"$here/scripts/build.sh"

echo "== unit tests and fuzz replays"
meson test -C "$build" --suite unit --suite fuzz --print-errorlogs --num-processes 2

echo "== integration tests (real VMs)"
vol_img=$build/test-vol.btrfs
vol=$build/test-vol
mounted_here=
cleanup() {
  # only what this run mounted: another run may be using a volume it found
  if [ -n "$mounted_here" ] && mountpoint -q "$vol"; then
    umount "$vol" || umount -l "$vol"
  fi
}
trap cleanup EXIT
mkdir -p "$vol"
if ! mountpoint -q "$vol"; then
  if [ ! -f "$vol_img" ]; then
    truncate -s 64G "$vol_img"
    mkfs.btrfs -q "$vol_img"
  fi
  mount -o loop "$vol_img" "$vol"
  mounted_here=1
fi
export AIRLOCK_TEST_VOLUME=$vol
export AIRLOCK_APT_CACHE=$build/apt-cache
mkdir -p "$AIRLOCK_APT_CACHE"
cd "$here"
/usr/bin/python3 -m pytest -p no:cacheprovider -v tests/integration tests/security "$@"
