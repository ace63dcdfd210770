#!/usr/bin/env bash
# The README's first command on a bare Debian 12, checked end to end.
#
#   scripts/fresh-check.sh [--test-deps] [--only-test-deps] [--test-k EXPR] [--checkout DIR]
#                          [--test-checkout DIR] [--rev REV] [--deb FILE]
#
# Builds once (and caches in BUILD_DIR/fresh-root/base-KEY, KEY a hash of
# everything that defines it) a minimal Debian 12 root with mmdebstrap
# (variant minbase: the honest stand-in for a bare machine; whatever else
# Airlock needs, its first command must install itself). Each run copies
# that pristine root to a scratch dir (a root that ran Airlock before would
# hide a missing install step), puts `git archive REV` (default HEAD) in
# DIR (default /root/airlock, where root's clone lands) and chroots into it, with /dev, /proc and /sys bind-mounted
# and the root bind-mounted onto itself (the VMM jail needs its root to be
# a mount point), runs
#
#   ./run.sh --data-dir /var/lib/airlock --listen 127.0.0.1:PORT
#
# and from outside waits for /v1/health, creates a python sandbox over HTTP
# with the admin token from the data dir, runs python3 -c 'print(6*7)',
# checks "42", deletes it, stops airlockd with SIGTERM and checks that it
# exits 0 and leaves nothing behind: no process in the root, no mount (the
# loop volume airlockd creates there), no loop device, no VM cgroup.
# Whatever happens, the trap unmounts, kills and removes what it made.
#
# --deb FILE checks the Debian package (scripts/package.sh) instead of
# ./run.sh: FILE installed in the bare root with apt, its units checked with
# systemd-analyze verify, airlockd started as airlockd.service starts it
# (its ExecStart, /etc/airlock/airlock.conf its environment, the port set
# there as an operator would), the same python sandbox and stop, then
# `apt-get remove` (the data dir stays) and `apt-get purge` (it goes).
#
# --test-deps then runs the README's test command in the same root, from
# another checkout (--test-checkout, default /root/airlock-test: under
# /root, which ./test.sh tests through a bind mount), limited to one
# integration test: ./test.sh -k EXPR (default test_python_lifecycle): its
# install step (scripts/deps.sh --test), the build with the tests, all unit
# tests and fuzz replays, the test volume, the templates and that test with
# real VMs. Its packages are a superset of ./run.sh's (one list in
# scripts/deps.sh), so after ./run.sh it installs the test-only ones: a
# missing one still fails it, and a second bare root (minutes of dpkg)
# would check nothing more. --only-test-deps: that alone, on a bare root.
# FRESH_BEFORE_CHECK=CMD runs CMD just before the leftovers check (R and
# LOG in its environment; `bash` to look around in what airlockd left).
# Apt's .debs (the root's own apt and the template builds'
# AIRLOCK_APT_CACHE) are cached in BUILD_DIR/fresh-root/cache. Each phase
# prints its time.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${AIRLOCK_BUILD_DIR:-$here/build}
top=$build/fresh-root
SUITE=bookworm
VARIANT=minbase
# Bump to rebuild the cached base root for a reason the key cannot see.
BASE_FORMAT=1
HEALTH_TIMEOUT_S=${FRESH_HEALTH_TIMEOUT_S:-3600}

run_check=1 test_deps='' rev=HEAD test_k=test_python_lifecycle checkout=/root/airlock test_checkout=/root/airlock-test deb=''
while [ $# -gt 0 ]; do
	case $1 in
	--checkout=*) checkout=${1#--checkout=} ;;
	--test-checkout=*) test_checkout=${1#--test-checkout=} ;;
	--test-deps) test_deps=1 ;;
	--only-test-deps) test_deps=1 run_check= ;;
	--rev) rev=${2:?--rev needs a revision}; shift ;;
	--test-k) test_k=${2:?--test-k needs a pytest expression}; shift ;;
	--deb) deb=$(realpath "${2:?--deb needs a .deb}"); shift ;;
	--checkout) checkout=${2:?--checkout needs a directory}; shift ;;
	--test-checkout) test_checkout=${2:?--test-checkout needs a directory}; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "usage: $0 [--test-deps] [--only-test-deps] [--test-k EXPR] [--checkout DIR] [--test-checkout DIR] [--rev REV] [--deb FILE]" >&2; exit 2 ;;
	esac
	shift
done

case $checkout in /?*) ;; *) echo "--checkout needs an absolute path" >&2; exit 2 ;; esac
case $test_checkout in /?*) ;; *) echo "--test-checkout needs an absolute path" >&2; exit 2 ;; esac
# --only-test-deps: the one checkout is the test's
[ -n "$run_check" ] || test_checkout=$checkout
[ -z "$run_check" ] || [ -z "$test_deps" ] || [ "$test_checkout" != "$checkout" ] ||
	{ echo "--test-checkout must differ from --checkout" >&2; exit 2; }

say() { printf 'fresh-check: %s\n' "$*" >&2; }
die() { printf 'fresh-check: error: %s\n' "$*" >&2; exit 1; }
t_start=$SECONDS
phase_t=$SECONDS
phase_name=
timings=()
phase() { # phase NAME: ends the phase before (records its time), starts NAME
	local now=$SECONDS
	[ -z "$phase_name" ] || timings+=("$(printf '%-44s %4d s' "$phase_name" $((now - phase_t)))")
	phase_name=$1 phase_t=$now
	[ -z "$1" ] || say "== $1"
}
print_timings() {
	phase ""
	[ ${#timings[@]} -gt 0 ] || return 0
	say "times:"
	printf '  %s\n' "${timings[@]}" >&2
	printf '  %-44s %4d s\n' total $((SECONDS - t_start)) >&2
}

[ "$(id -u)" -eq 0 ] || die "run as root (it builds a root file system, chroots and mounts)"
for c in mmdebstrap chroot mount findmnt losetup python3 git; do
	command -v "$c" >/dev/null || die "'$c' not found (scripts/deps.sh --test installs what this needs)"
done
git -C "$here" rev-parse -q --verify "$rev^{commit}" >/dev/null || die "$rev is not a commit of $here"
mkdir -p "$top/cache/debs" "$top/cache/template-debs"
exec 9>"$top/.lock" # held while we run; closed for what runs in the root (9>&-)
flock -n 9 || die "another fresh-check is running ($top/.lock)"

# --- the cached pristine base root -------------------------------------------
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
	[ -s "$f" ] && sources+=("$f")
done
[ ${#sources[@]} -gt 0 ] || die "no apt sources on this host (/etc/apt/sources.list*): the root uses the host's mirror"
key=$({
	printf '%s\n' "$BASE_FORMAT" "$SUITE" "$VARIANT" "$(dpkg-query -W -f='${Version}' mmdebstrap)"
	cat "${sources[@]}"
} | sha256sum | cut -c1-16)
base=$top/base-$key

base_root() {
	[ -f "$base/.complete" ] && return 0
	phase "building the base root ($VARIANT $SUITE)"
	local tmp=$top/.base-tmp
	rm -rf --one-file-system "$tmp"
	mkdir -p "$tmp"
	chmod 0755 "$tmp"
	# the mirror of this host, as apt here has it (its source files)
	mmdebstrap --variant="$VARIANT" --mode=root --format=directory --aptopt='Acquire::Retries "3"' \
		"$SUITE" "$tmp/root" "${sources[@]}" >"$top/base.log" 2>&1 ||
		{ tail -n 20 "$top/base.log" >&2; die "mmdebstrap failed (log: $top/base.log)"; }
	touch "$tmp/root/.complete"
	for old in "$top"/base-*; do [ -e "$old" ] && rm -rf --one-file-system "$old"; done
	mv "$tmp/root" "$base"
	rmdir "$tmp"
	say "base root: $(du -sxm "$base" | cut -f1) MiB, cached as $base"
}

# --- one scratch root, its mounts, and its cleanup ---------------------------
R=$top/root
airlockd_pid=
follower_pid=
log=

# the VMs airlockd started in this run ("PID UID" from its log): jailed, they
# have a root of their own, so only the log tells them from other suites'
our_vms() {
	[ -f "${log:-}" ] || return 0
	sed -n 's/.*started VM pid=\([0-9]*\) uid=\([0-9]*\) .*/\1 \2/p' "$log" | sort -u
}
empty_vm_cgroups() {
	local dirs d u
	[ -f "${log:-}" ] || return 0
	dirs=$(sed -n 's/.*one cgroup per VM below \(.*\) (memory.*/\1/p' "$log" | head -n1)
	for u in $(our_vms | cut -d' ' -f2); do
		for d in $dirs; do
			# (cgroupfs files have size 0: read it)
			[ -d "$d/airlock-vm-$u" ] && [ -z "$(cat "$d/airlock-vm-$u/cgroup.procs" 2>/dev/null)" ] &&
				echo "$d/airlock-vm-$u"
		done
	done
	return 0
}
vms_running() {
	local p u
	while read -r p u; do
		[ -n "$p" ] && [ "$(stat -c %u "/proc/$p" 2>/dev/null)" = "$u" ] && return 0
	done < <(our_vms)
	return 1
}
# processes whose root, executable or working directory is inside R
procs_in_root() {
	find /proc -mindepth 2 -maxdepth 2 \( -name root -o -name exe -o -name cwd \) \
		\( -lname "$R" -o -lname "$R/*" \) -printf '%h\n' 2>/dev/null | sed 's|^/proc/||' | sort -u
}
mounts_in_root() { # deepest first
	findmnt -rn -o TARGET 2>/dev/null | awk -v r="$R" '$0 == r || index($0, r "/") == 1' | sort -r
}
loops_in_root() {
	losetup -nl -O NAME,BACK-FILE 2>/dev/null | awk -v r="$R/" 'index($2, r) == 1 { print $1 }'
}

# cleanup_root [check [keep]]: stop what runs in R, unmount, detach, remove
# (with "keep": all but remove); with "check", first report each leftover
# (the run must not leave any).
cleanup_root() {
	local mode=${1:-} keep=${2:-} leaks=() p m l c
	if [ -n "$follower_pid" ]; then kill "$follower_pid" 2>/dev/null || true; wait "$follower_pid" 2>/dev/null || true; follower_pid=; fi
	if [ -n "$airlockd_pid" ] && kill -0 "$airlockd_pid" 2>/dev/null; then
		[ -n "$mode" ] && leaks+=("airlockd (pid $airlockd_pid) still running")
		kill -TERM "$airlockd_pid" 2>/dev/null || true
		for _ in $(seq 100); do kill -0 "$airlockd_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL -- "-$airlockd_pid" 2>/dev/null || true
	fi
	[ -d "$R" ] || return 0
	if [ -n "$mode" ]; then # QEMU may take a moment after a SIGTERM
		for _ in $(seq 150); do
			vms_running || break
			sleep 0.1
		done
	fi
	while read -r p u; do # a pid still running as its VM uid is that VM
		[ -n "$p" ] && [ "$(stat -c %u "/proc/$p" 2>/dev/null)" = "$u" ] || continue
		[ -n "$mode" ] && leaks+=("VM process $p (uid $u) still running 15 s after airlockd exited: $(tr '\0' ' ' <"/proc/$p/cmdline" | cut -c1-300)")
		kill -KILL "$p" 2>/dev/null || true
	done < <(our_vms)
	p=$(procs_in_root | tr '\n' ' ')
	if [ -n "${p// /}" ]; then
		[ -n "$mode" ] && leaks+=("processes left in the root: $p($(for q in $p; do tr '\0' ' ' <"/proc/$q/cmdline" 2>/dev/null | cut -c1-60; echo -n '; '; done))")
		# shellcheck disable=SC2086
		kill -KILL $p 2>/dev/null || true
		sleep 1
	fi
	m=$(mounts_in_root | grep -vxF -e "$R" -e "$R/dev" -e "$R/proc" -e "$R/sys" \
		-e "$R/var/cache/apt/archives" -e "$R/var/cache/airlock-debs" |
		grep -v -e "^$R/dev/" -e "^$R/sys/" -e "^$R/proc/" || true)
	[ -z "$m" ] || [ -z "$mode" ] || leaks+=("mounts left: $(echo $m)")
	# before the unmounts: a backing file's path reads as R/... only while
	# the root's own bind mount is there
	l=$(loops_in_root | tr '\n' ' ')
	[ -z "${l// /}" ] || [ -z "$mode" ] || leaks+=("loop devices left: $l")
	for m in $(mounts_in_root); do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || say "cannot unmount $m"
	done
	# unmounted here, a loop device still held is mounted in a namespace of
	# a process of ours (a jailed VM): who has it in its mountinfo
	p=$(for d in $l; do grep -lF " $d " /proc/[0-9]*/mountinfo 2>/dev/null | cut -d/ -f3; done | sort -u | tr '\n' ' ')
	if [ -n "${p// /}" ]; then
		[ -n "$mode" ] && leaks+=("processes holding $l: $p")
		# shellcheck disable=SC2086
		kill -KILL $p 2>/dev/null || true
		sleep 1
	fi
	for l in $l; do losetup -d "$l" 2>/dev/null || true; done
	# our VMs' cgroups (airlock-vm-UID below the dirs airlockd's log names),
	# if empty, and still empty 3 s later: a VM uid is host-wide, another
	# suite here may take one of ours and make its cgroup meanwhile
	c=$(empty_vm_cgroups)
	if [ -n "$c" ]; then
		sleep 3
		c=$(empty_vm_cgroups)
	fi
	[ -z "$c" ] || [ -z "$mode" ] || leaks+=("VM cgroups left: $(echo $c)")
	for d in $c; do rmdir "$d" 2>/dev/null || true; done
	if [ -n "$(mounts_in_root)" ]; then
		say "still mounted under $R, not removing it: $(mounts_in_root | tr '\n' ' ')"
		leaks+=("could not unmount everything")
	elif [ -z "$keep" ]; then
		rm -rf --one-file-system "$R"
	fi
	if [ ${#leaks[@]} -gt 0 ]; then
		printf 'fresh-check: left behind: %s\n' "${leaks[@]}" >&2
		return 1
	fi
	return 0
}
on_exit() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -d "$R" ]; then
		[ "$rc" -eq 0 ] || say "cleaning up after the failure"
		cleanup_root || true
	fi
	print_timings
	[ "$rc" -eq 0 ] && say "PASS" || say "FAIL"
	exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# fresh_root DIR: a scratch copy of the base, the sources and a checkout
# in DIR (none: DIR empty), the mounts; prints nothing else.
fresh_root() {
	phase "a fresh root: base copy${1:+, git archive $(git -C "$here" rev-parse --short "$rev") in $1}"
	if [ -e "$R" ]; then
		cleanup_root || true # what an earlier, killed run left
		[ ! -e "$R" ] || die "cannot remove the old scratch root $R"
	fi
	cp -a --reflink=auto "$base" "$R"
	rm -f "$R/.complete"
	# the host's mirror and name resolution (the root's apt and the template
	# build both use the mirror the host's apt uses)
	rm -rf "$R/etc/apt/sources.list.d"
	cp -a /etc/apt/sources.list.d "$R/etc/apt/"
	[ ! -e /etc/apt/sources.list ] || cp -a /etc/apt/sources.list "$R/etc/apt/"
	cp -L /etc/resolv.conf "$R/etc/resolv.conf"
	[ -z "$1" ] || checkout_in_root "$1"
	mount_root
}

# checkout_in_root DIR: git archive REV in the root's DIR
checkout_in_root() {
	mkdir -p "$R$1"
	git -C "$here" archive --format=tar "$rev" | tar -x -C "$R$1"
}

# mount_root: the root a mount point of its own, /dev, /proc, /sys and the
# .deb caches in it
mount_root() {
	mount --bind "$R" "$R"
	mount --make-private "$R"
	local d
	for d in dev proc sys; do
		mount --rbind "/$d" "$R/$d"
		mount --make-rslave "$R/$d" # our unmounts must not reach the host's
	done
	mkdir -p "$R/var/cache/apt/archives" "$R/var/cache/airlock-debs"
	mount --bind "$top/cache/debs" "$R/var/cache/apt/archives"
	mount --bind "$top/cache/template-debs" "$R/var/cache/airlock-debs"
}

# in_root CMD...: runs a shell command line in the root with the
# environment of a root login (nothing of ours leaks in)
in_root() {
	chroot "$R" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root TERM=dumb LANG=C.UTF-8 /bin/bash -c "$1" 9>&-
}

base_root

# --- the README's first command ----------------------------------------------
if [ -n "$run_check" ]; then
	log=$top/run.log
	port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	url=http://127.0.0.1:$port
	if [ -n "$deb" ]; then
		fresh_root ""
		phase "apt-get install ./$(basename "$deb") in the root"
		cp "$deb" "$R/root/"
		# systemd too: a machine that runs services has it (minbase has no init)
		in_root "cd /root && apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends systemd ./$(basename "$deb")" \
			>"$top/install.log" 2>&1 || { tail -n 30 "$top/install.log" >&2; die "the package did not install (log: $top/install.log)"; }
		for u in airlockd airlock-node; do
			# --man=no: the root has no man-db for Documentation=man:...
			systemd-analyze verify --man=no --root="$R" "$u.service" >"$top/verify.log" 2>&1 ||
				{ cat "$top/verify.log" >&2; die "systemd-analyze verify $u.service failed"; }
		done
		unit=$R/lib/systemd/system/airlockd.service
		exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
		env_file=$(sed -n 's/^EnvironmentFile=-\{0,1\}//p' "$unit")
		[ -n "$exec_start" ] && [ "$env_file" = /etc/airlock/airlock.conf ] || die "airlockd.service: no ExecStart, or not /etc/airlock/airlock.conf"
		# as an operator would: the port in the settings file
		printf 'AIRLOCK_LISTEN=127.0.0.1:%s\n' "$port" >>"$R$env_file"
		phase "airlockd.service's ExecStart in the root: kernel and templates, until healthy"
		setsid chroot "$R" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			LANG=C.UTF-8 AIRLOCK_APT_CACHE=/var/cache/airlock-debs \
			/bin/bash -c "set -a && . $env_file && set +a && exec $exec_start" </dev/null >"$log" 2>&1 9>&- &
	else
		fresh_root "$checkout"
		phase "./run.sh in the root: installing Debian packages"
		# its own session: its process group is ours to kill on failure; exec
		# all the way down, so the pid is run.sh's and then airlockd's
		setsid chroot "$R" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			HOME=/root TERM=dumb LANG=C.UTF-8 AIRLOCK_APT_CACHE=/var/cache/airlock-debs \
			/bin/bash -c "cd $checkout && exec ./run.sh --data-dir /var/lib/airlock --listen 127.0.0.1:$port" \
			</dev/null >"$log" 2>&1 9>&- &
	fi
	airlockd_pid=$!
	# its output, as it comes (without the health polls' request lines)
	tail -n +1 -F --pid="$airlockd_pid" "$log" 2>/dev/null | grep --line-buffered -v 'path=/v1/health' |
		sed -u 's/^/  | /' >&2 &
	follower_pid=$!
	deadline=$((SECONDS + HEALTH_TIMEOUT_S))
	seen_built='' seen_start='' last_note=$SECONDS status=''
	while :; do
		if ! kill -0 "$airlockd_pid" 2>/dev/null; then
			wait "$airlockd_pid" && rc=0 || rc=$?
			airlockd_pid=
			sleep 0.5
			die "./run.sh exited with status $rc before /v1/health said ok (log: $log)"
		fi
		if [ -z "$seen_built" ] && grep -q '^airlock: \(building\|configuring\)' "$log"; then
			seen_built=1; phase "./run.sh in the root: building"
		fi
		if [ -z "$seen_start" ] && { [ -n "$deb" ] || grep -q '^airlock: starting airlockd' "$log"; }; then
			seen_start=1; seen_built=1; phase "airlockd: kernel and templates, until healthy"
		fi
		if [ -n "$seen_start" ]; then
			status=$(python3 - "$url" <<-'EOF' || true
				import sys, urllib.request, urllib.error
				try:
				    with urllib.request.urlopen(sys.argv[1] + "/v1/health", timeout=5) as r:
				        print(r.status)
				except urllib.error.HTTPError as e:
				    print(e.code)
				except OSError:
				    print("-")
			EOF
			)
			[ "$status" = 200 ] && break
		fi
		[ $SECONDS -lt "$deadline" ] || die "no healthy Airlock after ${HEALTH_TIMEOUT_S}s (last status ${status:-none}; log: $log)"
		if [ $((SECONDS - last_note)) -ge 60 ]; then
			last_note=$SECONDS
			say "still waiting ($((SECONDS - t_start)) s so far; health: ${status:-not listening yet})"
		fi
		sleep 2
	done
	token_file=$R/var/lib/airlock/control/admin.token
	[ -s "$token_file" ] || die "no admin token at $token_file"

	phase "a python sandbox: create, exec, delete"
	python3 - "$url" "$token_file" <<-'EOF'
		import json, sys, urllib.request, urllib.error
		url, token = sys.argv[1], open(sys.argv[2]).read().strip()
		def api(method, path, body=None, expect=200):
		    req = urllib.request.Request(url + path, method=method,
		                                 data=json.dumps(body).encode() if body is not None else None,
		                                 headers={"Authorization": "Bearer " + token,
		                                          "Content-Type": "application/json"})
		    try:
		        with urllib.request.urlopen(req, timeout=600) as r:
		            status, data = r.status, r.read()
		    except urllib.error.HTTPError as e:
		        status, data = e.code, e.read()
		    if status != expect:
		        sys.exit(f"fresh-check: error: {method} {path}: HTTP {status} (wanted {expect}): {data[:500]!r}")
		    return json.loads(data) if data else None
		sbx = api("POST", "/v1/sandboxes", {"template": "python"}, expect=201)["id"]
		r = api("POST", f"/v1/sandboxes/{sbx}/exec", {"cmd": ["python3", "-c", "print(6*7)"]})
		if r.get("exit_code") != 0 or r.get("stdout") != "42\n":
		    sys.exit(f"fresh-check: error: python3 -c 'print(6*7)' in {sbx}: {r!r}")
		print(f"fresh-check: {sbx}: python3 -c 'print(6*7)' printed 42", file=sys.stderr)
		api("DELETE", f"/v1/sandboxes/{sbx}", expect=204)
	EOF

	phase "SIGTERM, clean exit, nothing left"
	used=$(df -Pm "$R/var/lib/airlock/vol" 2>/dev/null | awk 'NR == 2 { print $3 }' || true)
	kill -TERM "$airlockd_pid"
	rc=
	for _ in $(seq 1200); do
		kill -0 "$airlockd_pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$airlockd_pid" 2>/dev/null; then
		die "airlockd did not exit within 120 s of SIGTERM (log: $log)"
	fi
	wait "$airlockd_pid" && rc=0 || rc=$?
	airlockd_pid=
	[ "$rc" -eq 0 ] || die "airlockd exited with status $rc after SIGTERM (log: $log)"
	say "airlockd exited 0; its data volume had ${used:-?} MiB in use"
	say "the root: $(du -sxm --exclude="$R/var/lib/airlock" --exclude="$R/var/cache/apt/archives" \
		--exclude="$R/var/cache/airlock-debs" "$R" | cut -f1) MiB after the install and the build (the base: $(du -sxm "$base" | cut -f1) MiB); the data dir: $(du -sxm "$R/var/lib/airlock" | cut -f1) MiB"
	cp "$log" "$top/last-run.log"
	if [ -n "$deb" ]; then
		phase "apt-get remove, then purge"
		in_root "DEBIAN_FRONTEND=noninteractive apt-get remove -y airlock" >>"$top/install.log" 2>&1 ||
			die "apt-get remove airlock failed (log: $top/install.log)"
		[ -s "$R/var/lib/airlock/control/admin.token" ] && [ -f "$R/etc/airlock/airlock.conf" ] ||
			die "apt-get remove took the data dir or the settings (they stay until a purge)"
		[ ! -e "$R/usr/sbin/airlockd" ] || die "apt-get remove left /usr/sbin/airlockd"
		in_root "DEBIAN_FRONTEND=noninteractive apt-get purge -y airlock" >>"$top/install.log" 2>&1 ||
			die "apt-get purge airlock failed (log: $top/install.log)"
		[ ! -e "$R/var/lib/airlock" ] && [ ! -e "$R/etc/airlock" ] || die "apt-get purge left /var/lib/airlock or /etc/airlock"
		say "removed (data kept), then purged (data gone)"
	fi
	phase "checks and cleanup"
	# FRESH_BEFORE_CHECK: a shell command (R and LOG set) run in the state
	# airlockd left, before the checks (`bash` to look around)
	[ -z "${FRESH_BEFORE_CHECK:-}" ] || R=$R LOG=$log bash -c "$FRESH_BEFORE_CHECK" || true
	cleanup_root check ${test_deps:+keep} || die "the run left things behind (above)"
	log= # its VMs are gone; their uids may be another suite's now
fi

# --- the README's test command ----------------------------------------------
if [ -n "$test_deps" ]; then
	log=$top/test.log
	if [ -n "$run_check" ]; then
		phase "the same root: git archive $(git -C "$here" rev-parse --short "$rev") in $test_checkout"
		rm -rf --one-file-system "$R/var/lib/airlock" # ./run.sh's data: disk, nothing the test reads
		checkout_in_root "$test_checkout"
		mount_root
	else
		fresh_root "$test_checkout"
	fi
	phase "./test.sh -k $test_k in the root: installing Debian packages"
	setsid chroot "$R" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root TERM=dumb LANG=C.UTF-8 /bin/bash -c "cd $test_checkout && exec ./test.sh -k '$test_k'" \
		</dev/null >"$log" 2>&1 9>&- &
	airlockd_pid=$!
	tail -n +1 -F --pid="$airlockd_pid" "$log" 2>/dev/null | sed -u 's/^/  | /' >&2 &
	follower_pid=$!
	seen=0
	while kill -0 "$airlockd_pid" 2>/dev/null; do
		case $seen in
		0) grep -q '^airlock: \(building\|configuring\)' "$log" && seen=1 && phase "./test.sh: building (with the tests)" ;;
		1) grep -q '^== unit tests' "$log" && seen=2 && phase "./test.sh: unit tests and fuzz replays" ;;
		2) grep -q '^== integration tests' "$log" && seen=3 && phase "./test.sh: integration (templates, then -k $test_k)" ;;
		esac
		sleep 1
	done
	wait "$airlockd_pid" && rc=0 || rc=$?
	airlockd_pid=
	[ "$rc" -eq 0 ] || die "./test.sh -k $test_k exited with status $rc (log: $log)"
	grep -qE '^Ok: +[1-9]' "$log" || die "./test.sh ran no unit tests (log: $log)"
	grep -qE '[1-9][0-9]* passed' "$log" || die "./test.sh passed no integration test (log: $log)"
	say "unit and fuzz: $(grep -E '^(Ok|Fail):' "$log" | tr -s ' ' | tr '\n' ' ')integration: $(grep -E '[0-9]+ passed' "$log" | tail -n1 | tr -d '=')"
	phase "checks and cleanup"
	cleanup_root check || die "./test.sh left things behind (above)"
fi
