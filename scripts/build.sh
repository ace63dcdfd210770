#!/usr/bin/env bash
# Configures (once) and builds Airlock into BUILD_DIR (default ./build).
# Quiet on success but for a line of progress; on failure it prints the end
# of meson's or ninja's output and where the whole of it is
# (BUILD_DIR/meson-setup.log, BUILD_DIR/ninja.log).
#
#   scripts/build.sh [--test]
#
# The tests (cmocka) are an optional part of the build, built when cmocka is
# installed; --test requires them (meson -Dtests=enabled).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${AIRLOCK_BUILD_DIR:-$here/build}
tests=auto
case "${1:-}" in
  '') ;;
  --test) tests=enabled ;;
  *) echo "usage: $0 [--test]" >&2; exit 2 ;;
esac
opts=()
[ "${CI:-}" = "true" ] && opts+=(-Dwerror=true)

# fail LOG WHAT: the end of LOG and where it is, then exit
fail() {
  echo "airlock: $2 failed; the end of its output (all of it in $1):" >&2
  tail -n 40 "$1" | sed 's/^/  /' >&2
  exit 1
}

mkdir -p "$build" 2>/dev/null || { echo "airlock: cannot create the build directory $build" >&2; exit 1; }
# a build needs ~300 MiB (objects, the static guest agent, tests)
avail=$(df -Pk "$build" | awk 'NR == 2 { print int($4 / 1024) }')
if [ -n "$avail" ] && [ "$avail" -lt 512 ]; then
  echo "airlock: no space to build: $build has $avail MiB free, at least 512 MiB needed" >&2
  exit 1
fi

setup_log=$build/meson-setup.log
if [ ! -f "$build/build.ninja" ]; then
  echo "airlock: configuring the build in $build" >&2
  wipe=()
  # a setup that failed half way left its state behind; start it over
  [ ! -f "$build/meson-private/coredata.dat" ] || wipe=(--wipe)
  meson setup "${wipe[@]}" "$build" "$here" "-Dtests=$tests" "${opts[@]}" >"$setup_log" 2>&1 ||
    fail "$setup_log" "meson setup"
else
  # Configured before cmocka was there (./run.sh, then ./test.sh): look
  # again, or ask for what --test requires. intro-tests.json lists the tests.
  want=
  configured=$(meson configure "$build" 2>/dev/null | awk '$1 == "tests" { print $2; exit }')
  if [ "$tests" = enabled ] && [ "$configured" != enabled ]; then
    want=1
  elif [ "$configured" = auto ] && pkg-config --exists cmocka 2>/dev/null &&
      ! grep -q '"airlock:unit"' "$build/meson-info/intro-tests.json" 2>/dev/null; then
    want=1
  fi
  if [ -n "$want" ]; then
    echo "airlock: configuring the build in $build again (tests: cmocka is installed now)" >&2
    meson setup --reconfigure "$build" "$here" "-Dtests=$tests" "${opts[@]}" >"$setup_log" 2>&1 ||
      fail "$setup_log" "meson setup --reconfigure"
  fi
fi

ninja_log=$build/ninja.log
todo=$(ninja -C "$build" -n 2>/dev/null | grep -c '^\[' || true)
if [ "$todo" -gt 0 ]; then
  echo "airlock: building ($todo steps, log: $ninja_log)" >&2
fi
start=$SECONDS
ninja -C "$build" >"$ninja_log" 2>&1 || fail "$ninja_log" "the build (ninja)"
if [ "$todo" -gt 0 ]; then
  echo "airlock: built in $((SECONDS - start)) s" >&2
fi
