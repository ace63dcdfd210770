#!/usr/bin/env bash
# Airlock on this machine, one command: installs what is missing (Debian
# packages), builds everything, then starts the control plane and the node
# agent in the foreground. The first start builds the guest kernel and the
# default templates (minutes); later starts reuse them (seconds). Each step
# says what it does on stderr, and a failed step says why.
#
#   ./run.sh [--data-dir DIR] [--listen HOST:PORT] [other airlockd flags]
set -euo pipefail
# "ready after" counts from this command, not from airlockd's own start
export AIRLOCK_COMMAND_STARTED_NS=${AIRLOCK_COMMAND_STARTED_NS:-$(date +%s%N)}
here=$(cd "$(dirname "$0")" && pwd)
build=${AIRLOCK_BUILD_DIR:-$here/build}

"$here/scripts/deps.sh"

# The data directory (flag, environment, default: as airlockd decides) must
# have room for the kernel and the templates before the first start.
data_dir=${AIRLOCK_DATA_DIR:-/var/lib/airlock}
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --data-dir) [ $((i + 1)) -ge ${#args[@]} ] || data_dir=${args[i + 1]} ;;
    --data-dir=*) data_dir=${args[i]#--data-dir=} ;;
  esac
done
probe=$data_dir
while [ ! -d "$probe" ] && [ "$probe" != / ] && [ "$probe" != . ]; do probe=$(dirname "$probe"); done
if [ ! -d "$data_dir/templates" ] && [ ! -d "$data_dir/vol/templates" ]; then
  # first start: the kernel and two templates; the same floor as
  # airlockd's own check (src/daemon/check.h), but before minutes of
  # installing and building rather than after
  need_mib=2048
  avail=$(df -Pk "$probe" 2>/dev/null | awk 'NR == 2 { print int($4 / 1024) }')
  if [ -n "$avail" ] && [ "$avail" -lt "$need_mib" ]; then
    echo "airlock: no space for the first start: $probe (data dir $data_dir) has $avail MiB free, about $need_mib MiB needed" >&2
    exit 1
  fi
fi

"$here/scripts/build.sh"

# airlockd drops to the users airlock and airlock-node, which exec its
# binaries and read images/ themselves: a checkout they cannot reach (the
# usual one on a fresh machine, /root/airlock: /root is 0700) is run from a
# copy in /run/airlock/HASH instead (the same bytes: templates built from
# either are the same).
airlockd=$build/src/daemon/airlockd
bins=(daemon/airlockd nodemgr/airlock-nodemgr node/airlock-node gw/airlock-gw guest/airlock-guest)
if [ "$(id -u)" -eq 0 ] && [ "${AIRLOCK_PRIVSEP:-1}" != 0 ] &&
    ! setpriv --reuid=65534 --regid=65534 --clear-groups -- \
      sh -c 'test -x "$1" && test -r "$2"' sh "$build/src/node/airlock-node" "$here/images/kernel.sh" 2>/dev/null; then
  sum=$(cd "$build/src" && cat "${bins[@]}" | cat - "$here"/images/*.sh "$here"/images/templates/*.sh | sha256sum | cut -c1-16)
  stage=/run/airlock/$sum
  if [ ! -f "$stage/.complete" ]; then
    mkdir -p /run/airlock && chmod 0755 /run/airlock
    tmp=$(mktemp -d /run/airlock/.tmp.XXXXXX)
    for b in "${bins[@]}"; do cp "$build/src/$b" "$tmp/"; done
    cp -r "$here/images" "$tmp/images"
    chmod -R u=rwX,go=rX "$tmp" && touch "$tmp/.complete"
    mv -T "$tmp" "$stage" 2>/dev/null || rm -rf "$tmp" # another start made it
  fi
  echo "airlock: $here is not reachable by other users (airlockd's users exec its binaries); running a copy in $stage" >&2
  export AIRLOCK_NODEMGR_BINARY=${AIRLOCK_NODEMGR_BINARY:-$stage/airlock-nodemgr}
  export AIRLOCK_NODE_BINARY=${AIRLOCK_NODE_BINARY:-$stage/airlock-node}
  export AIRLOCK_GW_BINARY=${AIRLOCK_GW_BINARY:-$stage/airlock-gw}
  export AIRLOCK_GUEST_BINARY=${AIRLOCK_GUEST_BINARY:-$stage/airlock-guest}
  export AIRLOCK_IMAGES_DIR=${AIRLOCK_IMAGES_DIR:-$stage/images}
  airlockd=$stage/airlockd
fi
echo "airlock: starting airlockd (data in $data_dir)" >&2
exec "$airlockd" "$@"
