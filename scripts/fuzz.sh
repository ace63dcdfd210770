#!/usr/bin/env bash
# Coverage-guided fuzzing of the targets in tests/fuzz/ with libFuzzer,
# ASan and UBSan (clang). Builds them once into BUILD_DIR/libfuzzer, then
# runs each for SECONDS on a scratch copy of its corpus (the committed
# corpus in tests/fuzz/corpus/ is read, never written). A crash, leak,
# sanitizer report or timeout fails the run; the input that did it is left
# in BUILD_DIR/libfuzzer/artifacts/.
#
#   scripts/fuzz.sh [SECONDS [TARGET...]]     default 20 s, every target
#   scripts/fuzz.sh 3600 fuzz-proto            a long run of one
#   scripts/fuzz.sh --build                    build only
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${AIRLOCK_BUILD_DIR:-$here/build}/libfuzzer
# every target in tests/fuzz/ (fuzz-main.c is the replay driver of meson's tests)
all=()
for f in "$here"/tests/fuzz/fuzz-*.c; do
  t=$(basename "$f" .c)
  [ "$t" = fuzz-main ] || all+=("$t")
done

build_only=false
if [ "${1:-}" = "--build" ]; then build_only=true; shift; fi
seconds=${1:-20}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")

# runs of several targets at once (tests/security/test_fuzz.py) take turns
# at the build directory
mkdir -p "$build"
exec 8>"$build.lock"
flock 8
if [ ! -f "$build/build.ninja" ]; then
  CC=clang meson setup "$build" "$here" -Dlibfuzzer=true -Db_sanitize=address,undefined -Db_lundef=false \
    -Dc_args=-fsanitize=fuzzer-no-link -Dbuildtype=debugoptimized >/dev/null
fi
ninja -C "$build" "${targets[@]/#/tests/fuzz/}" >/dev/null || ninja -C "$build" "${targets[@]/#/tests/fuzz/}"
flock -u 8
exec 8>&-
$build_only && exit 0

mkdir -p "$build/artifacts"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
status=0
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t"
  log=$build/artifacts/$t.log
  if UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$build/tests/fuzz/$t" -max_total_time="$seconds" \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" \
      "$scratch/$t" "$here/tests/fuzz/corpus/$t" >"$log" 2>&1; then
    echo "$t: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs in ${seconds}s, no finding"
  else
    echo "$t: FAILED (log: $log)"; tail -40 "$log"; status=1
  fi
done
exit $status
