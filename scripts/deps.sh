#!/usr/bin/env bash
# Installs the Debian packages Airlock needs to build, run and test, if any
# are missing. Idempotent and quiet when everything is there.
#   scripts/deps.sh [--test]     (--test adds what the test suite needs)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

pkgs=(
  # build
  gcc pkg-config meson ninja-build
  libmicrohttpd-dev libjansson-dev libsodium-dev libsqlite3-dev libcurl4-openssl-dev
  # run: the VMM and what the node uses for storage
  qemu-system-x86 btrfs-progs util-linux e2fsprogs
)
if [ -f "$here/images/deps.txt" ]; then
  while read -r p _; do
    case "$p" in ''|'#'*) continue ;; esac
    pkgs+=("$p")
  done < "$here/images/deps.txt"
fi
if [ "${1:-}" = "--test" ]; then
  # clang and its libFuzzer runtime: the bounded fuzz runs (scripts/fuzz.sh)
  pkgs+=(libcmocka-dev python3 python3-pytest clang libclang-rt-14-dev python3-cryptography)
fi

missing=()
for p in "${pkgs[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "airlock: missing Debian packages: ${missing[*]} (run as root to install them)" >&2
  exit 1
fi
echo "airlock: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
