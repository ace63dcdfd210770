#!/usr/bin/env bash
# Installs the Debian packages Airlock needs to build and run (and, with
# --test, to run the test suite), if any are missing. Idempotent and silent
# when everything is there; otherwise one line says what it installs, and a
# failure says in a line or two what failed, with apt's log kept in
# BUILD_DIR/apt.log.
#   scripts/deps.sh [--test]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${AIRLOCK_BUILD_DIR:-$here/build}

pkgs=(
  # build
  gcc libc6-dev pkg-config meson ninja-build
  libmicrohttpd-dev libjansson-dev libsodium-dev libsqlite3-dev libcurl4-openssl-dev
  # lib/objstore's S3 backend: its XML replies
  libxml2-dev
  # lib/netpolicy: libpsl and the public suffix list it reads (wildcard rules)
  libpsl-dev publicsuffix
  # the egress gateway's parsers: DNS (ldns), TLS (OpenSSL), HTTP/1 (llhttp's
  # C sources, which node-llhttp ships and src/gw compiles in), HTTP/2 from
  # the guest inside terminated TLS (nghttp2)
  libldns-dev libssl-dev node-llhttp libnghttp2-dev
  # lib/vmnet: each VM's namespace rules, loaded in-process (libnftables)
  libnftables-dev
  # the E2B front door's gzip uploads (src/daemon/e2b-files.c)
  zlib1g-dev
  # lib/buildctx: template build contexts and OCI layers checked as tar
  # streams before anything unpacks them
  libarchive-dev
  # lib/store's PostgreSQL backend, for a control plane of several replicas
  libpq-dev
  # lib/delta: a suspended sandbox's RAM, against its template's, compressed
  libzstd-dev
  # lib/kms's PKCS#11 plugin: the standard's header, from p11-kit (only the
  # header: the module is dlopen()ed, p11-kit itself is not linked)
  libp11-kit-dev
  # run: the VMM and what the node uses for storage and its users
  qemu-system-x86 btrfs-progs util-linux mount e2fsprogs passwd
  # the web console's terminal (term.js, served at /console/vendor/term.js/;
  # Debian 12's libjs-xterm ships no browser bundle)
  libjs-term.js
)
if [ -f "$here/images/deps.txt" ]; then
  while read -r p _; do
    case "$p" in ''|'#'*) continue ;; esac
    pkgs+=("$p")
  done < "$here/images/deps.txt"
fi
case "${1:-}" in
  '') ;;
  --test)
    # cmocka: the unit tests (required by ./test.sh, optional for ./run.sh);
    # clang and its libFuzzer runtime: the bounded fuzz runs (scripts/fuzz.sh)
    # dnsmasq and iproute2: the network tests' own internet (tests/netlab.py)
    # git: the repository test_network.py serves for git clone
    pkgs+=(libcmocka-dev python3 python3-pytest clang libclang-rt-14-dev python3-cryptography dnsmasq-base iproute2 git)
    # npm: the E2B SDK suite (scripts/e2b-sdk.sh installs the SDK with it,
    # and a pinned Node 20 where the system's node is older than the SDK
    # needs, as Debian's 18 is). Debian's npm, which brings Debian's nodejs,
    # only where there is no npm at all: a node from elsewhere comes with
    # its own (NodeSource's nodejs has npm inside and conflicts with
    # Debian's), and stays as it is
    command -v npm >/dev/null 2>&1 || pkgs+=(npm)
    # PostgreSQL's server: the store's tests on its PostgreSQL backend and
    # the cluster tests start throwaway servers (tests/unit/with-postgres.sh)
    pkgs+=(postgresql-15)
    # OpenStack Swift with its S3 API (s3api and tempauth are in
    # python3-swift): the S3 object-store tests start a throwaway server
    # (tests/s3lab.py, tests/unit/with-swift.sh). The library alone: the
    # lab runs the servers and the ring builder from it; the packages
    # swift and swift-{proxy,account,container,object} would only add the
    # /usr/bin wrappers, rsyslog, uwsgi, a cron job and some twenty system
    # services enabled and started on a systemd host
    # curl: the lab's own tests sign their requests with curl --aws-sigv4
    pkgs+=(python3-swift curl)
    # SoftHSM2: a software PKCS#11 token for lib/kms's PKCS#11 tests
    # (tests/unit/with-softhsm.sh makes a throwaway token with softhsm2-util)
    pkgs+=(softhsm2)
    # The Prometheus client's parser: the metrics tests read GET /metrics
    # with it, as a scraper would
    pkgs+=(python3-prometheus-client)
    # the web console's test: a real browser (Debian's chromium, driven by
    # playwright-core from npm: scripts/browser.sh)
    pkgs+=(chromium)
    # an OCI registry on loopback: templates built from a registry's image
    # (test_templates.py starts its own; the package's service is not used)
    pkgs+=(docker-registry)
    ;;
  *) echo "usage: $0 [--test]" >&2; exit 2 ;;
esac

missing=()
declare -A seen=()
for p in "${pkgs[@]}"; do
  [ -z "${seen[$p]:-}" ] || continue
  seen[$p]=1
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "airlock: ${#missing[@]} Debian packages are missing: ${missing[*]}" >&2
  echo "airlock: run it as root (sudo) to install them, or install them yourself (apt-get install --no-install-recommends ...)" >&2
  exit 1
fi

# apt needs room in /var/cache/apt (the .debs) and /usr; 1.5 GiB covers a
# bare machine's whole first install (measured: ~700 MiB before the test
# suite's chromium, which adds ~350 MiB; docs/testing.md)
need_mib=1536
for d in /var/cache/apt /usr; do
  avail=$(df -Pk "$d" 2>/dev/null | awk 'NR == 2 { print int($4 / 1024) }')
  if [ -n "$avail" ] && [ "$avail" -lt "$need_mib" ]; then
    echo "airlock: no space to install Debian packages: $d has $avail MiB free, about $need_mib MiB needed" >&2
    exit 1
  fi
done

mkdir -p "$build"
log=$build/apt.log
: > "$log"
# what apt said, in a line or two: its errors, else its last line
apt_error() {
  local e
  e=$(grep -E '^(E|Err):' "$log" | head -n 2 || true)
  [ -n "$e" ] || e=$(grep -E '^W:' "$log" | tail -n 2 || true)
  [ -n "$e" ] || e=$(tail -n 1 "$log")
  printf '%s\n' "$e" | sed 's/^/airlock:   /' >&2
}

echo "airlock: installing ${#missing[@]} Debian packages (first start only): ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# --error-on=any: a mirror that cannot be reached is an error here, not a
# warning followed by a confusing "Unable to locate package" later
if ! apt-get update -q --error-on=any >>"$log" 2>&1; then
  echo "airlock: apt-get update failed: is the Debian mirror in /etc/apt/sources.list* reachable? (log: $log)" >&2
  apt_error
  exit 1
fi
if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
  echo "airlock: apt-get install of the ${#missing[@]} packages failed (log: $log):" >&2
  apt_error
  exit 1
fi
# docker-registry's package starts a registry service (on :5000) where
# systemd runs: the tests start their own on loopback, so it is stopped
for p in "${missing[@]}"; do
  if [ "$p" = docker-registry ] && command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now docker-registry >/dev/null 2>&1 || true
  fi
done
echo "airlock: installed ${#missing[@]} Debian packages" >&2
