#!/usr/bin/env python3
"""Full snapshots, rollback to them, fork, suspend and wake against a running
Airlock, each repeated N times on one sandbox whose guest memory was dirtied
first (DIRTY MiB of /dev/urandom written to /dev/shm, a tmpfs: RAM the
snapshot has to carry).

  sudo bench/snapshots.py [--n 10] [--template minimal] [--data-dir /var/lib/airlock] [--port 7420]
  sudo bench/snapshots.py --start [--templates-dir DIR] [--base DIR] [--n 10]

Without --start it talks to the Airlock at --port and reads DATA_DIR/control/admin.token
(as lifecycle.py does); with --start it runs its own airlockd (see scale.py:
data dir under --base, templates from --templates-dir, warm pools off,
scheduled snapshots off so none collides with a verb) and stops it at the end.
A full snapshot's own timings (pause_ms, downtime_ms, total_ms, memory_bytes)
come in the API's reply; the node's restore breakdowns (rollback, fork, wake)
are read from its log when the script knows where the log is (--start, or
--log FILE).

Measured through the API:
  - full snapshot (POST .../snapshots {"kind":"full"}): end to end, and
    from the reply pause_ms (vCPUs stopped), downtime_ms, total_ms and
    memory_bytes (under TCG the node stops the VM for the whole save; under
    KVM it is a live precopy)
  - rollback to the first full snapshot (POST .../rollback?wait=true)
  - fork (POST .../fork?wait=true): end to end, and the parent's pause
    (result.parent_pause_ms); each child is deleted afterwards
  - suspend (?wait=true, result.suspended: snapshot_ms, upload_ms) then wake
    (?wait=true); then a transparent wake: suspend, and time an exec of
    `true` (which wakes the sandbox first)

Raw baselines, measured in the same run by this script with no API, node or
guest handshake (QEMU driven over QMP, machine as in create.py):
  - full snapshot: a bare QEMU restored from the sandbox's own first full
    snapshot (so it holds the same guest RAM), then QMP `stop`, `migrate` of
    all of its RAM and device state to a file (fd passed with getfd), `cont`:
    the stop-and-copy pause floor. Also `stop`+`cont` alone.
  - rollback: the same bare restore of that full-snapshot state (anonymous
    RAM loaded from the stream, as the node restores a full snapshot)
  - fork: the bare restore of the template (spawn_restored, create.py)
  - suspend/wake: none of its own (the upload is the node's object store);
    compare with the two above."""

import argparse
import array
import glob
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from create import Qmp, find_template, host_tsc_khz, qemu_argv, spawn_restored, tap_open  # noqa: E402
from scale import Instance, default_templates_dir, pct  # noqa: E402


def line(name, xs, unit="ms"):
    if not xs:
        return f"{name:<40} (none)"
    return (f"{name:<40} n={len(xs):<3} median={statistics.median(xs):8.1f} {unit}  "
            f"p90={pct(xs, 90):8.1f}  p99={pct(xs, 99):8.1f}  max={max(xs):8.1f}")


def cell(xs, tails=True):
    if not xs:
        return "—"
    s = f"median {statistics.median(xs):.0f} ms"
    if tails:
        s += f", p90 {pct(xs, 90):.0f}, max {max(xs):.0f}"
    return s


def qmp_getfd(q, fd, name):
    """QMP getfd: the fd travels as SCM_RIGHTS with the command."""
    msg = json.dumps({"execute": "getfd", "arguments": {"fdname": name}}).encode() + b"\n"
    q.s.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    while True:
        r = json.loads(q.f.readline())
        if "return" in r:
            return
        if "error" in r:
            raise RuntimeError(r["error"])


def wait_migrate(q, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        st = q.cmd("query-migrate")
        s = st.get("status")
        if s == "completed":
            return st
        if s in ("failed", "cancelled"):
            raise RuntimeError(f"migration {s}: {st.get('error-desc')}")
        if time.monotonic() > deadline:
            raise TimeoutError("migration did not complete")
        time.sleep(0.0005)


def spawn_from_state(tpl_dir, manifest, state, rootfs_src, work, khz):
    """A bare QEMU restored from a full-snapshot state file: the machine of
    spawn_restored but with anonymous RAM, loaded from the stream (as the
    node restores full snapshots). Returns (process, Qmp, ms spawn to
    running)."""
    rootfs = os.path.join(work, "rootfs.img")
    subprocess.run(["cp", "--reflink=auto", "--sparse=always", rootfs_src, rootfs], check=True)
    tap = tap_open()
    args = qemu_argv(tpl_dir, manifest, work, khz, "memory-backend-ram,id=mem,size={mem}M", rootfs, tap)
    qmp = os.path.join(work, "qmp.sock")
    fd = os.open(state, os.O_RDONLY | os.O_CLOEXEC)
    t0 = time.monotonic()
    try:
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(tap,))
    finally:
        os.close(tap)
    try:
        q = Qmp(qmp)
        qmp_getfd(q, fd, "state")
        q.cmd("migrate-incoming", uri="fd:state")
        wait_migrate(q)
        q.cmd("cont")
        return p, q, (time.monotonic() - t0) * 1000
    except BaseException:
        p.kill()
        p.wait()
        raise
    finally:
        os.close(fd)


def raw_save(q, path):
    """stop, migrate all RAM + devices to path (kept; the VM stays
    stopped): ms."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        t0 = time.monotonic()
        q.cmd("stop")
        qmp_getfd(q, fd, "snap")
        q.cmd("migrate", uri="fd:snap")
        wait_migrate(q)
        return (time.monotonic() - t0) * 1000
    finally:
        os.close(fd)


def raw_stop_copy(q, path):
    """stop, migrate all RAM + devices to path, cont: (pause ms, bytes)."""
    try:
        t0 = time.monotonic()
        raw_save(q, path)
        q.cmd("cont")
        return (time.monotonic() - t0) * 1000, os.path.getsize(path)
    finally:
        if os.path.exists(path):
            os.unlink(path)


class LogTail:
    """New lines of the node's log since the last call (None: no log)."""

    def __init__(self, path):
        self.path = path
        self.pos = os.path.getsize(path) if path and os.path.exists(path) else 0

    def new(self):
        if not self.path:
            return []
        with open(self.path, errors="replace") as f:
            f.seek(self.pos)
            data = f.read()
            self.pos = f.tell()
        return data.splitlines()


def grab(lines, pattern, *groups):
    """Values of the named integer groups of pattern, per matching line."""
    rx = re.compile(pattern)
    out = []
    for l in lines:
        m = rx.search(l)
        if m:
            out.append(tuple(int(m.group(g)) for g in groups))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=7420)
    ap.add_argument("--data-dir", default=os.environ.get("AIRLOCK_DATA_DIR", "/var/lib/airlock"))
    ap.add_argument("--template", default="minimal")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--dirty-mib", type=int, default=32, help="MiB of random data written to /dev/shm first")
    ap.add_argument("--log", help="the airlockd log (node timings); implied by --start")
    ap.add_argument("--start", action="store_true", help="run an airlockd of our own (see scale.py)")
    ap.add_argument("--templates-dir", help="with --start")
    ap.add_argument("--base", help="with --start: where its data dir goes (default: next to the templates)")
    ap.add_argument("--airlockd", help="with --start")
    a = ap.parse_args()

    inst = None
    if a.start:
        tdir = a.templates_dir or default_templates_dir()
        inst = Instance(a.base or os.path.dirname(tdir), tdir,
                        {"AIRLOCK_POOL_SIZE": "0",
                         "AIRLOCK_SNAPSHOT_POLICY": json.dumps({"disk_every": 0, "full_every": 0})},
                        a.airlockd, prebuild=a.template)
        try:
            inst.wait_ready()
        except BaseException:
            inst.stop()
            raise
        a.port, a.data_dir, a.log = inst.port, inst.data_dir, inst.log_path
        tpl_dir, manifest = find_template(None, tdir, a.template)
    else:
        tpl_dir, manifest = find_template(a.data_dir, None, a.template)
    tok = open(os.path.join(a.data_dir, "control", "admin.token")).read().strip()
    log = LogTail(a.log)

    def call(method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=600)
        c.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                  headers={"Authorization": "Bearer " + tok})
        r = c.getresponse()
        out = r.read()
        c.close()
        return r.status, json.loads(out) if out else None

    retries = [0]

    def verb(sid, name, body=None):
        """POST a lifecycle verb with ?wait=true; a conflict with a scheduled
        snapshot is retried (counted). Returns (ms, operation)."""
        for _ in range(5):
            t = time.monotonic()
            st, op = call("POST", f"/v1/sandboxes/{sid}/{name}?wait=true", body)
            ms = (time.monotonic() - t) * 1000
            if st == 200 and op["state"] == "failed" and op.get("error", {}).get("code") == "conflict":
                retries[0] += 1
                time.sleep(0.5)
                continue
            assert st == 200 and op["state"] == "succeeded", (name, st, op)
            return ms, op
        raise RuntimeError(f"{name}: conflicts every time")

    def exec_ms(sid, cmd):
        t = time.monotonic()
        st, r = call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd})
        assert st == 200 and r["exit_code"] == 0, (st, r)
        return (time.monotonic() - t) * 1000

    _, tpls = call("GET", "/v1/templates")
    mem_mib = next((t.get("memory_mib") for t in tpls["templates"] if t["name"] == a.template), None)
    khz = host_tsc_khz()
    work = tempfile.mkdtemp(prefix="bench-snap-", dir=os.path.dirname(tpl_dir))
    raw_proc = None
    res = {k: [] for k in (
        "full snapshot (API)", "full snapshot pause_ms", "full snapshot size", "full snapshot total_ms",
        "full snapshot downtime_ms", "full snapshot memory_bytes",
        "raw stop+migrate+cont", "raw stream bytes", "raw stop+cont",
        "rollback (API)", "raw restore of full state", "fork (API)", "fork parent_pause_ms",
        "raw template restore", "suspend (API)", "suspend snapshot_ms", "suspend upload_ms",
        "suspend pause_ms", "suspend memory_bytes", "wake (API)", "first exec after wake",
        "transparent wake (exec true)", "exec true (awake)",
        "node fork snapshot ms", "node fork restore ms", "node full-state restore ms", "node wake download ms",
        "node wake restore ms")}
    node = {}
    st, sbx = call("POST", "/v1/sandboxes", {"template": a.template})
    assert st == 201, sbx
    sid = sbx["id"]
    post_check = None
    try:
        # dirty guest memory: a tmpfs the snapshot must carry
        dd = exec_ms(sid, ["sh", "-c", f"dd if=/dev/urandom of=/dev/shm/x bs=1M count={a.dirty_mib} 2>/dev/null"])
        st, free = call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["free", "-m"]})
        print(f"load average {open('/proc/loadavg').read().split()[0]}; "
              f"template={a.template} memory={mem_mib}MiB n={a.n}; dirtied {a.dirty_mib} MiB in /dev/shm "
              f"({dd:.0f} ms); guest `free -m`: {free['stdout'].splitlines()[1].split()[1:]}")
        for _ in range(a.n):
            res["exec true (awake)"].append(exec_ms(sid, ["true"]))

        # 1. full snapshots, interleaved with the raw stop-and-copy
        snaps = []
        log.new()
        for i in range(a.n):
            t = time.monotonic()
            st, snap = call("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"})
            res["full snapshot (API)"].append((time.monotonic() - t) * 1000)
            assert st == 201, snap
            snaps.append(snap["id"])
            res["full snapshot pause_ms"].append(snap["pause_ms"])
            res["full snapshot size"].append(snap["size"] / 2**20)
            for k in ("total_ms", "downtime_ms"):
                if k in snap:
                    res["full snapshot " + k].append(snap[k])
            if "memory_bytes" in snap:
                res["full snapshot memory_bytes"].append(snap["memory_bytes"] / 2**20)
            if i == 0:
                state = glob.glob(os.path.join(a.data_dir, "**", "sandboxes", sid, "snapshots", snap["id"] + ".state"),
                                  recursive=True)[0]
                rootfs = os.path.join(os.path.dirname(os.path.dirname(state)), "rootfs.img")
                w = os.path.join(work, "raw")
                os.mkdir(w)
                raw_proc, raw_qmp, ms = spawn_from_state(tpl_dir, manifest, state, rootfs, w, khz)
                res["raw restore of full state"].append(ms)
                raw_qmp.cmd("migrate-set-parameters", **{"max-bandwidth": 8 << 30, "downtime-limit": 20})
            ms, nbytes = raw_stop_copy(raw_qmp, os.path.join(work, "raw.state"))
            res["raw stop+migrate+cont"].append(ms)
            res["raw stream bytes"].append(nbytes / 2**20)
            t = time.monotonic()
            raw_qmp.cmd("stop")
            raw_qmp.cmd("cont")
            res["raw stop+cont"].append((time.monotonic() - t) * 1000)
        raw_proc.kill()
        raw_proc.wait()
        raw_proc = None

        # 2. rollback to the first full snapshot, interleaved with the raw
        # restore of the same state
        for i in range(a.n):
            ms, _ = verb(sid, "rollback", {"snapshot": snaps[0]})
            res["rollback (API)"].append(ms)
            res["raw restore of full state"].append(raw_state_restore_once(tpl_dir, manifest, state, rootfs, work, khz))
        node["rollback"] = grab(log.new(), r"restored from a full snapshot: restore_ms=(?P<r>\d+)", "r")
        res["node full-state restore ms"] = [r for (r,) in node["rollback"]]

        # 3. fork, interleaved with the raw template restore
        for i in range(a.n):
            ms, op = verb(sid, "fork")
            res["fork (API)"].append(ms)
            res["fork parent_pause_ms"].append(op["result"]["parent_pause_ms"])
            child = op["result"]["sandbox"]["id"]
            st, _ = call("DELETE", f"/v1/sandboxes/{child}")
            assert st == 204, st
            res["raw template restore"].append(raw_restore_once(tpl_dir, manifest, work, khz))
        for snap_ms, pause, rest in grab(log.new(), r"forked from \S+ in \d+ ms \(snapshot (?P<s>\d+) ms, parent "
                                         r"paused (?P<p>\d+) ms, restore (?P<r>\d+) ms\)", "s", "p", "r"):
            res["node fork snapshot ms"].append(snap_ms)
            res["node fork restore ms"].append(rest)

        # 4. suspend and wake, then the transparent wake
        for i in range(a.n):
            ms, op = verb(sid, "suspend")
            res["suspend (API)"].append(ms)
            s = op["result"].get("suspended", {})
            for k in ("snapshot_ms", "upload_ms", "pause_ms"):
                if k in s:
                    res["suspend " + k].append(s[k])
            if "memory_bytes" in s:
                res["suspend memory_bytes"].append(s["memory_bytes"] / 2**20)
            ms, _ = verb(sid, "wake")
            res["wake (API)"].append(ms)
            res["first exec after wake"].append(exec_ms(sid, ["true"]))
        for i in range(a.n):
            verb(sid, "suspend")
            res["transparent wake (exec true)"].append(exec_ms(sid, ["true"]))
        for down, rest in grab(log.new(), r"woken from snapshot \S+ in \d+ ms \(download (?P<d>\d+) ms, restore "
                               r"(?P<r>\d+) ms\)", "d", "r"):
            res["node wake download ms"].append(down)
            res["node wake restore ms"].append(rest)
        assert exec_ms(sid, ["sh", "-c", f"test $(stat -c %s /dev/shm/x) -eq {a.dirty_mib << 20}"]) >= 0

        # after suspend and wake: are the full snapshots still usable?
        st, op = call("POST", f"/v1/sandboxes/{sid}/rollback?wait=true", {"snapshot": snaps[0]})
        _, listed = call("GET", f"/v1/sandboxes/{sid}/snapshots")
        op = op or {}
        post_check = (op.get("state", f"HTTP {st}"), (op.get("error") or {}).get("message"),
                      len((listed or {}).get("snapshots", [])))
    finally:
        call("DELETE", f"/v1/sandboxes/{sid}")
        if raw_proc:
            raw_proc.kill()
            raw_proc.wait()
        shutil.rmtree(work, ignore_errors=True)
        if inst:
            errors = inst.log_lines("level=error")
            warns = [l for l in inst.log_lines("level=warn") if "path=/v1/health" not in l]
            left = inst.stop()
            print(f"own airlockd: {len(errors)} error and {len(warns)} warning lines in its log"
                  + (f"; QEMU left behind (killed): {left}" if left else ""))
            for l in (errors + warns)[:10]:
                print("   ", l[:300])

    print(f"\nload average at the end {open('/proc/loadavg').read().split()[0]}")
    for k, xs in res.items():
        print(line(k, xs, "MiB" if k.endswith("bytes") or k.endswith("size") else "ms"))
    if retries[0]:
        print(f"({retries[0]} verbs retried after a conflict with a scheduled snapshot)")
    if post_check:
        print(f"rollback to the first full snapshot after the suspend/wake cycles: {post_check[0]}"
              + (f" ({post_check[1]})" if post_check[1] else "") + f"; snapshots listed: {post_check[2]}")

    def ratio(x, y):
        return f"{statistics.median(res[x]) / statistics.median(res[y]):.1f}x" if res[x] and res[y] else "—"

    m = statistics.median
    print()
    print(f"| what ({a.template}, {mem_mib} MiB, {a.dirty_mib} MiB dirtied) | API, end to end | "
          "node-side / reply | raw baseline (same run) |")
    print("|---|---|---|---|")
    print(f"| full snapshot (TCG: stopped for the save; KVM: live precopy) | {cell(res['full snapshot (API)'])} | "
          f"pause_ms {cell(res['full snapshot pause_ms'])}; downtime_ms {cell(res['full snapshot downtime_ms'], False)}, "
          f"total_ms {cell(res['full snapshot total_ms'], False)}; "
          f"stream {m(res['full snapshot memory_bytes'] or [0]):.0f} MiB | "
          f"stop+migrate+cont {cell(res['raw stop+migrate+cont'])} ({m(res['raw stream bytes']):.0f} MiB); "
          f"stop+cont {m(res['raw stop+cont']):.1f} ms |")
    print(f"| rollback to the full snapshot | {cell(res['rollback (API)'])} | "
          f"node restore_ms {cell(res['node full-state restore ms'], False)} | "
          f"restore of the same state {cell(res['raw restore of full state'])} ({ratio('rollback (API)', 'raw restore of full state')}) |")
    print(f"| fork of a running sandbox | {cell(res['fork (API)'])} | parent pause "
          f"{cell(res['fork parent_pause_ms'])}; node restore {cell(res['node fork restore ms'], False)} | "
          f"template restore {cell(res['raw template restore'])} ({ratio('fork (API)', 'raw template restore')}); "
          f"full-state restore {cell(res['raw restore of full state'], False)} |")
    print(f"| suspend | {cell(res['suspend (API)'])} | snapshot_ms {cell(res['suspend snapshot_ms'], False)}, "
          f"upload_ms {cell(res['suspend upload_ms'], False)}, pause {cell(res['suspend pause_ms'], False)} | — |")
    print(f"| wake | {cell(res['wake (API)'])} | download {cell(res['node wake download ms'], False)}, "
          f"restore {cell(res['node wake restore ms'], False)} | restore of full state "
          f"{cell(res['raw restore of full state'], False)} |")
    print(f"| transparent wake (exec `true` on a suspended sandbox) | {cell(res['transparent wake (exec true)'])} | "
          f"first exec after an explicit wake {cell(res['first exec after wake'], False)}; "
          f"exec awake {cell(res['exec true (awake)'], False)} | — |")


def raw_state_restore_once(tpl_dir, manifest, state, rootfs, work, khz):
    """One bare restore of a full-snapshot state; returns ms spawn to running."""
    w = tempfile.mkdtemp(dir=work)
    try:
        p, _, ms = spawn_from_state(tpl_dir, manifest, state, rootfs, w, khz)
        p.kill()
        p.wait()
        return ms
    finally:
        shutil.rmtree(w, ignore_errors=True)


def raw_restore_once(tpl_dir, manifest, work, khz):
    w = tempfile.mkdtemp(dir=work)
    try:
        p, _, ms = spawn_restored(tpl_dir, manifest, w, khz)
        p.kill()
        p.wait()
        return ms
    finally:
        shutil.rmtree(w, ignore_errors=True)


if __name__ == "__main__":
    main()
