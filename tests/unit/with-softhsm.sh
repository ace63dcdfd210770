#!/usr/bin/env bash
# Runs CMD with a throwaway PKCS#11 token: SoftHSM2 with its own
# configuration and token directory in a temporary directory, one token
# labelled airlock-test initialized with a random user PIN and SO PIN.
# CMD gets AIRLOCK_TEST_PKCS11_MODULE (the module's path),
# AIRLOCK_TEST_PKCS11_TOKEN (the token's label), AIRLOCK_TEST_PKCS11_PIN_FILE
# (a 0600 file holding the user PIN) and SOFTHSM2_CONF (which the module
# reads). The directory is removed however CMD ends; the exit status is
# CMD's. Missing SoftHSM2 is an error, not a skip (scripts/deps.sh --test
# installs softhsm2).
#   tests/unit/with-softhsm.sh CMD [ARG...]
set -euo pipefail

if [ $# -eq 0 ]; then
  echo "usage: $0 CMD [ARG...]" >&2
  exit 2
fi
util=$(command -v softhsm2-util || true)
module=${AIRLOCK_SOFTHSM_MODULE:-}
if [ -z "$module" ]; then
  for m in /usr/lib/softhsm/libsofthsm2.so /usr/lib/*-linux-gnu/softhsm/libsofthsm2.so; do
    if [ -f "$m" ]; then module=$m; break; fi
  done
fi
if [ -z "$util" ] || [ -z "$module" ] || [ ! -f "$module" ]; then
  echo "with-softhsm: softhsm2-util or libsofthsm2.so not found: install softhsm2 (scripts/deps.sh --test)" >&2
  exit 1
fi

dir=$(mktemp -d /tmp/airlock-softhsm-XXXXXX)
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -m 0700 "$dir/tokens"
cat > "$dir/softhsm2.conf" <<CONF
directories.tokendir = $dir/tokens
objectstore.backend = file
log.level = ERROR
slots.removable = false
CONF
export SOFTHSM2_CONF=$dir/softhsm2.conf

token=airlock-test
pin=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
so_pin=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
(umask 077 && printf '%s\n' "$pin" > "$dir/pin")
if ! "$util" --init-token --free --label "$token" --pin "$pin" --so-pin "$so_pin" >"$dir/init.log" 2>&1; then
  echo "with-softhsm: softhsm2-util --init-token failed:" >&2
  cat "$dir/init.log" >&2
  exit 1
fi

export AIRLOCK_TEST_PKCS11_MODULE=$module
export AIRLOCK_TEST_PKCS11_TOKEN=$token
export AIRLOCK_TEST_PKCS11_PIN_FILE=$dir/pin
set +e
"$@"
status=$?
set -e
exit $status
