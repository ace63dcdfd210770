#!/usr/bin/env bash
# Configures (once) and builds Airlock into BUILD_DIR (default ./build).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${AIRLOCK_BUILD_DIR:-$here/build}
opts=()
[ "${CI:-}" = "true" ] && opts+=(-Dwerror=true)
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" "$here" "${opts[@]}" >/dev/null
fi
ninja -C "$build" >/dev/null || ninja -C "$build"
