#!/bin/bash
# bench/all.py under real KVM on a machine without it: in the KVM tier's
# L1 (tests/kvm/l1vm.py: a VM under TCG with AMD SVM emulated, whose KVM
# runs Airlock's VMs), its minimal template built there under KVM first.
# The absolute times are nested ones (L1's own CPU is emulated), not a
# bare-metal host's; the ratios against the raw KVM restore measured in
# the same run are what compare (docs/benchmarks.md, "Nested KVM").
#
#   sudo bench/nested-kvm.sh [bench/all.py's options]     e.g. --quick
#
# Run from a built checkout (scripts/build.sh); the L1 kit is made (or
# reused) as the KVM tier makes it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${AIRLOCK_BUILD_DIR:-$root/build}
export AIRLOCK_BUILD_DIR=$build AIRLOCK_APT_CACHE=${AIRLOCK_APT_CACHE:-$build/apt-cache}

if [ "${1:-}" != --in-l1 ]; then
  exec /usr/bin/python3 "$root/tests/kvm/l1vm.py" --timeout 5400 -- bash bench/nested-kvm.sh --in-l1 "$@"
fi
shift

# In L1: /l1/vol is the run's btrfs disk, empty but for the guest kernel.
templates=/l1/vol/templates
mkdir -p "$templates"
echo "== building the minimal template under KVM"
/usr/bin/python3 - "$templates" <<'EOF'
import sys
sys.path.insert(0, "bench")
from scale import Instance
i = Instance("/l1/vol", sys.argv[1], prebuild="minimal")
try:
    i.wait_ready(timeout=1800)
finally:
    i.stop()
EOF
echo "== bench/all.py $*"
exec /usr/bin/python3 bench/all.py --template minimal --scale-template minimal --templates-dir "$templates" "$@"
