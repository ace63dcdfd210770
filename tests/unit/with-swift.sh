#!/usr/bin/env bash
# Runs CMD with a throwaway S3 server: OpenStack Swift with its S3 API on
# 127.0.0.1, in a temporary directory (tests/s3lab.py), and a bucket made
# for CMD. CMD gets AIRLOCK_TEST_S3_ENDPOINT (http://127.0.0.1:PORT),
# AIRLOCK_TEST_S3_REGION, AIRLOCK_TEST_S3_BUCKET and the keys in two files,
# AIRLOCK_TEST_S3_ACCESS_KEY_FILE and AIRLOCK_TEST_S3_SECRET_KEY_FILE. The
# servers are stopped and the directory removed however CMD ends; the exit
# status is CMD's. Missing Swift is an error, not a skip (scripts/deps.sh
# --test installs python3-swift). As root the servers run as the system
# user swift.
#   tests/unit/with-swift.sh CMD [ARG...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

if [ $# -eq 0 ]; then
  echo "usage: $0 CMD [ARG...]" >&2
  exit 2
fi
# s3lab.py is standard-library Python; the servers run under
# /usr/bin/python3, which python3-swift is for
exec /usr/bin/python3 "$here/s3lab.py" run -- "$@"
