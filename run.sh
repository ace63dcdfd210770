#!/usr/bin/env bash
# Airlock on this machine, one command: installs what is missing (Debian
# packages), builds everything, then starts the control plane and the node
# agent in the foreground. The first start builds the guest kernel and the
# default templates (minutes); later starts reuse them (seconds).
#
#   ./run.sh [--data-dir DIR] [--listen HOST:PORT] [other airlockd flags]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/scripts/deps.sh"
"$here/scripts/build.sh"
exec "${AIRLOCK_BUILD_DIR:-$here/build}/src/daemon/airlockd" "$@"
