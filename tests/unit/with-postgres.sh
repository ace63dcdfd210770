#!/usr/bin/env bash
# Runs CMD with a throwaway PostgreSQL server: a fresh cluster in a
# temporary directory, listening only on a Unix socket there, with an empty
# database airlock_test, whose URL is in AIRLOCK_TEST_PG_URL. The cluster
# is stopped and its directory removed however CMD ends; the exit status is
# CMD's. Missing PostgreSQL binaries are an error, not a skip (scripts/deps.sh
# --test installs postgresql-15). As root (initdb refuses to run as root) the
# server runs as the system user postgres.
#   tests/unit/with-postgres.sh CMD [ARG...]
set -euo pipefail
bin=${AIRLOCK_PG_BIN:-/usr/lib/postgresql/15/bin}

if [ $# -eq 0 ]; then
  echo "usage: $0 CMD [ARG...]" >&2
  exit 2
fi
for b in initdb pg_ctl postgres createdb; do
  if [ ! -x "$bin/$b" ]; then
    echo "with-postgres: $bin/$b not found: install postgresql-15 (scripts/deps.sh --test)" >&2
    exit 1
  fi
done

as_pg=()
if [ "$(id -u)" -eq 0 ]; then
  if ! id postgres >/dev/null 2>&1; then
    echo "with-postgres: running as root, and there is no user postgres to run the server as" >&2
    exit 1
  fi
  as_pg=(runuser -u postgres --)
fi

dir=$(mktemp -d /tmp/airlock-pg-XXXXXX)
started=false
cleanup() {
  if $started; then
    "${as_pg[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
[ ${#as_pg[@]} -eq 0 ] || chown postgres: "$dir"

# the port only names the socket (.s.PGSQL.PORT) in this private directory
port=$((20000 + RANDOM % 40000))
fail() {
  echo "with-postgres: $1 failed:" >&2
  tail -n 20 "$dir/setup.log" "$dir/server.log" >&2 2>/dev/null || true
  exit 1
}
"${as_pg[@]}" "$bin/initdb" --no-sync -A trust -U postgres -E UTF8 -D "$dir/data" >"$dir/setup.log" 2>&1 ||
  fail initdb
started=true
"${as_pg[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
  -o "-c listen_addresses='' -k $dir -p $port -c fsync=off -c full_page_writes=off -c dynamic_shared_memory_type=mmap" \
  start >/dev/null ||
  fail "starting the server"
"${as_pg[@]}" "$bin/createdb" -h "$dir" -p "$port" -U postgres airlock_test >>"$dir/setup.log" 2>&1 ||
  fail "creating the database"

export AIRLOCK_TEST_PG_URL="postgresql:///airlock_test?host=$dir&port=$port&user=postgres"
set +e
"$@"
status=$?
set -e
exit $status
