# scripts/npm-lib.sh: what scripts/e2b-sdk.sh and scripts/browser.sh share
# (sourced, not run): messages, which node versions run the E2B SDK, and
# `npm ci` of a committed package.json + lock (+ .npmrc) into a directory
# under build/, done again only when those files changed.

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

