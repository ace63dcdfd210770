#!/usr/bin/env bash
# Installs what the web console's browser test (tests/integration/
# test_console.py) drives Chromium with, and says which node runs it.
#
#   node=$(scripts/browser.sh)
#
# stdout: one line, the node binary (scripts/e2b-sdk.sh's: the same node
#   the E2B suite runs, 20.19+; playwright-core needs 18+).
# Installs under BUILD_DIR/console-test (BUILD_DIR: AIRLOCK_BUILD_DIR,
#   default ./build): `npm ci` of tests/console/package-lock.json
#   (playwright-core, pinned, its integrity checked; no browser download:
#   the test runs Debian's chromium, which scripts/deps.sh --test installs),
#   and a fresh copy of tests/console/*.mjs beside node_modules.
# exit: 0; 1 with what is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${AIRLOCK_BUILD_DIR:-$here/build}
dst=$build/console-test
src=$here/tests/console
# shellcheck source=scripts/npm-lib.sh
. "$here/scripts/npm-lib.sh"

command -v chromium >/dev/null 2>&1 || die "chromium is missing: scripts/deps.sh --test installs Debian's chromium (as root)"
node=$("$here/scripts/e2b-sdk.sh")
mkdir -p "$dst" 2>/dev/null || die "cannot create $dst"
exec 9>"$dst/.lock"
flock 9
install_lock "$src" "$dst" "playwright-core (tests/console/package.json)"
cp "$src"/*.mjs "$dst/"
echo "$node"
