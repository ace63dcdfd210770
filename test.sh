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
# it. A checkout they cannot reach (root's git clone lands under /root,
# mode 0700) is tested through a bind mount of it at
# /run/airlock-test/HASH: the same files, by a path every user can walk.
reachable() {
  [ "${AIRLOCK_PRIVSEP:-1}" = 0 ] ||
    setpriv --reuid=65534 --regid=65534 --clear-groups -- \
      sh -c 'test -x "$1" && test -r "$2"' sh "$1/src/node/airlock-node" "$2/images/kernel.sh" 2>/dev/null
}
unit_build=$build # meson runs in the directory it configured
checkout=$here
staged=
mounted_here=
vol=
cleanup() {
  # only what this run mounted: another run may be using a volume it found
  if [ -n "$mounted_here" ] && mountpoint -q "$vol"; then
    umount "$vol" || umount -l "$vol"
  fi
  if [ -n "$staged" ] && mountpoint -q "$staged"; then
    umount -R "$staged" || umount -R -l "$staged"
  fi
}
trap cleanup EXIT
if ! reachable "$build" "$here"; then
  case $build in
    "$here"/*) ;;
    *)
      echo "airlock: the tests need a build directory other users can reach; $build is not" >&2
      exit 1 ;;
  esac
  stage=/run/airlock-test/$(printf '%s' "$here" | sha256sum | cut -c1-16)
  mkdir -p "$stage" && chmod 0755 /run/airlock-test
  if ! mountpoint -q "$stage"; then
    # private: the test volume mounted below it stays there, and its
    # unmount at the end takes nothing from the checkout's own mounts
    mount --rbind "$here" "$stage" && mount --make-rprivate "$stage"
    staged=$stage
  fi
  build=$stage/${build#"$here"/}
  here=$stage
  export AIRLOCK_BUILD_DIR=$build
  if ! reachable "$build" "$here"; then
    echo "airlock: other users cannot read the checkout's files even through $stage (a umask of 077?): make them o+r, directories o+x" >&2
    exit 1
  fi
  echo "airlock: testing through $stage, a bind mount of this checkout (other users cannot reach $checkout)" >&2
fi

# The btrfs test volume, mounted first: the unit tests of reflinks need a
# filesystem that has them, the integration tests keep their templates there.
vol_img=$build/test-vol.btrfs
vol=$build/test-vol
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
  meson test -C "$unit_build" --suite unit --suite fuzz --print-errorlogs --num-processes 2

echo "== integration tests (real VMs)"
export AIRLOCK_TEST_VOLUME=$vol
export AIRLOCK_APT_CACHE=$build/apt-cache
mkdir -p "$AIRLOCK_APT_CACHE"
cd "$here"
/usr/bin/python3 -m pytest -p no:cacheprovider -v --durations=40 tests/integration tests/security tests/kvm "$@"
