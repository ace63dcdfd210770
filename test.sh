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
# A checkout under /root is tested through a bind mount (below).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
checkout=$here

"$here/scripts/deps.sh" --test

# The suite's Airlocks drop to the users airlock and airlock-node, which
# exec the binaries of this build and read images/ and the test volume in
# it. A checkout they cannot reach (root's git clone lands under /root,
# mode 0700) is tested through a private bind mount of it at
# /run/airlock-test/HASH, a path every user can walk, and built there into
# build-staged/: the paths compiled into the binaries (their defaults for
# each other, images/, the console) are then ones those users reach too.
reachable() { # FILE...: can an unprivileged user read each?
  [ "${AIRLOCK_PRIVSEP:-1}" = 0 ] ||
    setpriv --reuid=65534 --regid=65534 --clear-groups -- \
      sh -c 'for f; do test -r "$f" || exit 1; done' sh "$@" 2>/dev/null
}
staged=
mounted_here=
vol=
cleanup() {
  cd /
  # only what this run mounted: another run may be using a volume it found
  if [ -n "$mounted_here" ] && mountpoint -q "$vol"; then
    umount "$vol" || umount -l "$vol"
  fi
  if [ -n "$staged" ] && mountpoint -q "$staged"; then
    umount -R "$staged" || umount -R -l "$staged"
  fi
}
trap cleanup EXIT
if [ -z "${AIRLOCK_BUILD_DIR:-}" ] && ! reachable "$here/images/kernel.sh"; then
  stage=/run/airlock-test/$(printf '%s' "$here" | sha256sum | cut -c1-16)
  mkdir -p "$stage" && chmod 0755 /run/airlock-test
  if ! mountpoint -q "$stage"; then
    # private: what is mounted below it (the test volume) stays there
    mount --rbind "$here" "$stage" && mount --make-rprivate "$stage"
    staged=$stage
  fi
  if ! reachable "$stage/images/kernel.sh"; then
    echo "airlock: other users cannot read the checkout's files even through $stage (cloned with a umask of 077?): make them o+r and its directories o+x" >&2
    exit 1
  fi
  echo "airlock: other users cannot reach $checkout: testing it through $stage (a bind mount), built in $checkout/build-staged" >&2
  here=$stage
  export AIRLOCK_BUILD_DIR=$here/build-staged
fi
build=${AIRLOCK_BUILD_DIR:-$here/build}
export AIRLOCK_BUILD_DIR=$build

"$here/scripts/build.sh" --test

if ! reachable "$build/src/node/airlock-node" "$here/images/kernel.sh"; then
  echo "airlock: the tests need a build other users can reach (airlockd's users run $build/src and read $here/images); $build is not" >&2
  exit 1
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
  meson test -C "$build" --suite unit --suite fuzz --print-errorlogs --num-processes 2

echo "== integration tests (real VMs)"
export AIRLOCK_TEST_VOLUME=$vol
export AIRLOCK_APT_CACHE=$build/apt-cache
mkdir -p "$AIRLOCK_APT_CACHE"
cd "$here"
/usr/bin/python3 -m pytest -p no:cacheprovider -v --durations=40 tests/integration tests/security tests/kvm "$@"
