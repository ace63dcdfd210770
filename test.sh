#!/usr/bin/env bash
# The whole test suite, one command: installs what is missing, builds,
# mounts the test volume, runs the unit tests and fuzz replays (meson; none
# may skip), then the integration tests, which boot real VMs (pytest), and
# the KVM tier: a VM of its own whose KVM runs a subset of them
# (tests/kvm, docs/testing.md). Needs root (VMs, loop mounts, the jail's
# unit test).
#
#   ./test.sh                 everything
#   ./test.sh -k session      integration tests matching a pytest expression
#   ./test.sh -k kvm_tier     the KVM tier alone
#
# Templates are built once per run into a shared btrfs loop volume
# (build/test-vol.btrfs, mounted at build/test-vol while the suite runs) and
# kept there between runs; delete that file to rebuild them from scratch.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${AIRLOCK_BUILD_DIR:-$here/build}
export AIRLOCK_BUILD_DIR=$build

"$here/scripts/deps.sh" --test
"$here/scripts/build.sh" --test

# The suite's Airlocks drop to the users airlock and airlock-node, which
# exec the binaries of this build and read images/ and the test volume in
# it: a checkout they cannot reach (under /root, mode 0700) cannot work.
if [ "${AIRLOCK_PRIVSEP:-1}" != 0 ] &&
    ! setpriv --reuid=65534 --regid=65534 --clear-groups -- \
      sh -c 'test -x "$1" && test -r "$2"' sh "$build/src/node/airlock-node" "$here/images/kernel.sh" 2>/dev/null; then
  echo "airlock: the tests need a checkout other users can reach (airlockd's users run $build/src and read $here/images);" >&2
  echo "  $here is not: clone it under /opt or /srv, or make every directory above it o+x" >&2
  exit 1
fi

# The btrfs test volume, mounted first: the unit tests of reflinks need a
# filesystem that has them, the integration tests keep their templates there.
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

# Every unit test must run here (as root, with a reflink directory): one that
# would skip fails instead (tests/unit/unit-skip.h).
echo "== unit tests and fuzz replays"
AIRLOCK_TEST_NO_SKIP=1 AIRLOCK_TEST_REFLINK_DIR=$vol \
  meson test -C "$build" --suite unit --suite fuzz --print-errorlogs --num-processes 2

echo "== integration tests (real VMs)"
export AIRLOCK_TEST_VOLUME=$vol
export AIRLOCK_APT_CACHE=$build/apt-cache
mkdir -p "$AIRLOCK_APT_CACHE"
cd "$here"
/usr/bin/python3 -m pytest -p no:cacheprovider -v --durations=40 tests/integration tests/security tests/kvm "$@"
