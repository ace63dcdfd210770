#!/usr/bin/env bash
# Builds the Debian package airlock_VERSION_amd64.deb (debian/): installs
# what it needs (Debian's debhelper, lintian, go-md2man, help2man and the build's
# libraries), runs dpkg-buildpackage in a copy of this tree (the files git
# tracks or would, so uncommitted changes count), checks the result with
# lintian (an error fails; warnings are shown) and leaves it in OUT.
#   scripts/package.sh [OUT]      OUT defaults to build/pkg
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$here/build/pkg}" && cd "${1:-$here/build/pkg}" && pwd)

"$here/scripts/deps.sh"
need=()
for p in debhelper lintian go-md2man help2man git; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "airlock: installing ${need[*]} (the package's build)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >"$out/apt.log" 2>&1 ||
    { echo "airlock: apt-get install failed; the end of its log ($out/apt.log):" >&2; tail -n 20 "$out/apt.log" >&2; exit 1; }
fi

work=$(mktemp -d /tmp/airlock-pkg.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/airlock"
git -C "$here" ls-files -z --cached --others --exclude-standard |
  (cd "$here" && tar --null -T - -cf -) | tar -C "$work/airlock" -xf -
echo "airlock: building the package in $work (log: $out/build.log)" >&2
if ! (cd "$work/airlock" && dpkg-buildpackage -b -us -uc) >"$out/build.log" 2>&1; then
  echo "airlock: dpkg-buildpackage failed; the end of its log ($out/build.log):" >&2
  tail -n 40 "$out/build.log" >&2
  exit 1
fi
deb=$(ls "$work"/airlock_*.deb)
echo "airlock: lintian $(basename "$deb")" >&2
lintian --fail-on error --tag-display-limit 0 "$deb" | tee "$out/lintian.log" >&2
rm -f "$out"/airlock_*.deb
mv "$deb" "$out/"
echo "$out/$(basename "$deb")"
