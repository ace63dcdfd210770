#!/usr/bin/env python3
"""Scale benchmark: many concurrent creates, and the memory an idle sandbox
costs. Starts its own Airlock (airlockd + node) for each configuration, in a
data dir under --base, with AIRLOCK_TEMPLATES_DIR pointing at templates that
are already built (so nothing rebuilds), and stops it afterwards.

  sudo bench/scale.py [--concurrent 50] [--pools 0,32] [--idle 10,30] [--settle 20]
                      [--templates-dir DIR] [--base DIR] [--template minimal]

--base must be on a file system with reflinks (btrfs, xfs) and should be the
one --templates-dir is on (the default): e.g. the test volume
(mount -o loop build/test-vol.btrfs build/test-vol) or any btrfs loop mount
holding a copy of the templates. Raises AIRLOCK_MAX_SANDBOXES (default 64)
when --concurrent or the largest --idle needs it.

1. --concurrent threads each POST /v1/sandboxes at once (released by a
   barrier); every one must succeed. Latency p50/p95/max and the wall time
   of the whole burst, once per warm-pool size in --pools (AIRLOCK_POOL_SIZE;
   0 = every create restores cold). Then they are all deleted. Raw baseline
   in the same run: the same number of bare QEMU restores of the template
   (the benchmark's own, see create.py), spawned at once.
2. For each K in --idle: K idle sandboxes, --settle seconds of quiet, then
   the PSS of each one's QEMU process (/proc/PID/smaps_rollup; the QEMUs
   are those whose command line names the data dir). Median, total, and how
   many would fit in MemTotal."""

import argparse
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from create import find_template, host_tsc_khz, spawn_restored  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pct(xs, p):
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1)))))]


def line(name, xs, unit="ms", ps=(90, 99)):
    tails = "  ".join(f"p{p}={pct(xs, p):8.1f}" for p in ps)
    return (f"{name:<34} n={len(xs):<3} median={statistics.median(xs):8.1f} {unit}  {tails}  "
            f"max={max(xs):8.1f}")


def default_templates_dir():
    for d in (os.path.join(ROOT, "build", "test-vol", "templates"), "/var/lib/airlock/vol/templates"):
        if os.path.isdir(d) and os.path.ismount(os.path.dirname(d)):
            return d
    sys.exit("no mounted templates dir found: pass --templates-dir (on a btrfs/xfs mount)")


def qemu_pids(needle):
    """PIDs of QEMU processes whose command line mentions needle."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            continue
        if "qemu-system" in cmd and needle in cmd:
            pids.append(int(pid))
    return pids


def smaps_kib(pid):
    """{'Pss': KiB, 'Rss': KiB, ...} from /proc/PID/smaps_rollup."""
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for l in f:
            parts = l.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1])
    return out


def meminfo_kib(key):
    with open("/proc/meminfo") as f:
        return int(next(l for l in f if l.startswith(key + ":")).split()[1])


class Instance:
    """One airlockd (+ the node it spawns) of our own: data dir under base,
    API on a free port, templates from templates_dir, extra env."""

    def __init__(self, base, templates_dir, env=None, airlockd=None, prebuild="minimal", data_dir=None):
        """data_dir: a stopped instance's (terminate()), started again."""
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="airlock-bench-", dir=base)
        self.log_path = self.data_dir + ".log"
        e = dict(os.environ)
        e.update({"AIRLOCK_TEMPLATES_DIR": templates_dir, "AIRLOCK_PREBUILD": prebuild, "AIRLOCK_PREBUILD_BACKGROUND": "",
                  # its templates trust the egress CA beside them
                  "AIRLOCK_EGRESS_CA_DIR": os.path.join(os.path.dirname(os.path.abspath(templates_dir)), "egress-ca")})
        e.update(env or {})
        self.env = {k: v for k, v in (env or {}).items()}
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [airlockd or os.path.join(ROOT, "build", "src", "daemon", "airlockd"), "--data-dir", self.data_dir,
             "--listen", f"127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, env=e, start_new_session=True)
        self.token = None

    def wait_ready(self, timeout=300):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"airlockd exited with {self.proc.returncode}; log {self.log_path}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/v1/health")
                st = c.getresponse().status
                c.close()
                if st == 200:
                    self.token = open(os.path.join(self.data_dir, "control", "admin.token")).read().strip()
                    return self
            except OSError:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"airlock not ready after {timeout}s; log {self.log_path}")

    def call(self, method, path, body=None, timeout=600):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Authorization": "Bearer " + self.token}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = r.read()
        c.close()
        try:
            return r.status, json.loads(out) if out else None
        except ValueError:
            return r.status, out

    def wait_pool_full(self, template, timeout=300):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _, r = self.call("GET", "/v1/templates")
            p = next((t.get("pool") for t in r["templates"] if t["name"] == template), None)
            if not p or not p["size"] or p["ready"] >= p["size"]:
                return p
            time.sleep(0.2)
        raise TimeoutError("warm pool did not fill")

    def log_lines(self, needle):
        try:
            with open(self.log_path, errors="replace") as f:
                return [l.rstrip("\n") for l in f if needle in l]
        except OSError:
            return []

    def terminate(self, timeout=120):
        """Stops airlockd as a service manager does (SIGTERM), keeping its
        sandboxes and data dir for the next Instance(data_dir=...); the ms
        it took to exit."""
        t = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=timeout)
        self.log.close()
        return (time.monotonic() - t) * 1000

    def stop(self):
        """Deletes what is left, stops airlockd (SIGTERM: the node stops
        every VM), kills any QEMU of this data dir still there, removes the
        data dir. Returns the leftovers it had to kill."""
        leftovers = []
        if self.proc.poll() is None and self.token:
            try:
                _, r = self.call("GET", "/v1/sandboxes", timeout=30)
                for s in (r or {}).get("sandboxes", []):
                    self.call("DELETE", f"/v1/sandboxes/{s['id']}", timeout=120)
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if not self.log.closed:
            self.log.close()
        time.sleep(0.5)
        for pid in qemu_pids(self.data_dir):
            leftovers.append(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        with open("/proc/self/mountinfo") as f:
            mounts = [l.split()[4] for l in f if l.split()[4].startswith(self.data_dir)]
        for m in reversed(mounts):
            subprocess.run(["umount", "-l", m])
        shutil.rmtree(self.data_dir, ignore_errors=True)
        return leftovers


def burst(n, fn):
    """Runs fn(i) in n threads released at once. Returns (results, wall ms)."""
    bar = threading.Barrier(n + 1)
    res = [None] * n

    def run(i):
        bar.wait()
        t = time.monotonic()
        try:
            out = fn(i)
        except Exception as e:  # noqa: BLE001 -- recorded as a failure
            out = ("exception", repr(e))
        res[i] = ((time.monotonic() - t) * 1000, out)

    th = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in th:
        t.start()
    bar.wait()
    t0 = time.monotonic()
    for t in th:
        t.join()
    return res, (time.monotonic() - t0) * 1000


def concurrent_creates(inst, n, template):
    def create(_):
        return inst.call("POST", "/v1/sandboxes", {"template": template})

    res, wall = burst(n, create)
    ok = [(ms, out[1]) for ms, out in res if out[0] == 201]
    fails = [out for _, out in res if out[0] != 201]
    ids = [b["id"] for _, b in ok]
    hits = sum(1 for _, b in ok if b.get("pool") == "hit")
    lat = [ms for ms, _ in ok]
    node_ms = [b["restore_ms"] for _, b in ok if "restore_ms" in b]
    t = time.monotonic()
    dres, dwall = burst(len(ids), lambda i: inst.call("DELETE", f"/v1/sandboxes/{ids[i]}"))
    del_fail = [out for _, out in dres if out[0] != 204]
    return {"n": n, "ok": len(ok), "fails": fails, "lat": lat, "wall": wall, "hits": hits, "node_ms": node_ms,
            "del_wall": dwall, "del_fail": del_fail, "del_total": (time.monotonic() - t) * 1000}


def raw_burst(tpl_dir, manifest, n, base):
    """n bare QEMU restores of the template spawned at once (spawn_restored
    each); returns (per-restore ms, wall ms)."""
    khz = host_tsc_khz()
    works = [tempfile.mkdtemp(prefix="raw-", dir=base) for _ in range(n)]
    procs = []
    lock = threading.Lock()

    def one(i):
        p, _, ms = spawn_restored(tpl_dir, manifest, works[i], khz)
        with lock:
            procs.append(p)
        return ms

    try:
        res, wall = burst(n, one)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for w in works:
            shutil.rmtree(w, ignore_errors=True)
    errs = [out for _, out in res if isinstance(out, tuple)]
    if errs:
        print(f"raw restores failed: {len(errs)}: {errs[:3]}")
    # spawn_restored's own number, not the thread's (the reflink copy of the
    # rootfs before the spawn is not restore time)
    return [out for _, out in res if not isinstance(out, tuple)], wall


def idle_pss(inst, k, template, settle):
    ids = []
    for _ in range(k):
        st, b = inst.call("POST", "/v1/sandboxes", {"template": template})
        assert st == 201, b
        ids.append(b["id"])
    time.sleep(settle)
    pss, rss, priv, anon, filep = [], [], [], [], []
    # the QEMUs of this instance (their run dirs are in its data dir; a
    # jailed QEMU's command line does not name its sandbox)
    pids = qemu_pids(inst.data_dir)
    assert len(pids) == len(ids), (ids, pids)
    for pid in pids:
        m = smaps_kib(pid)
        pss.append(m["Pss"] / 1024)
        rss.append(m["Rss"] / 1024)
        priv.append((m.get("Private_Clean", 0) + m.get("Private_Dirty", 0)) / 1024)
        anon.append(m.get("Pss_Anon", 0) / 1024)
        filep.append((m.get("Pss_File", 0) + m.get("Pss_Shmem", 0)) / 1024)
    # the control plane and node as well, for the total
    ctl = 0.0
    for pid in [inst.proc.pid] + [int(p) for p in subprocess.run(
            ["pgrep", "-f", f"airlock-node.*{inst.data_dir}|{inst.data_dir}.*airlock-node"],
            capture_output=True, text=True).stdout.split()]:
        try:
            ctl += smaps_kib(pid)["Pss"] / 1024
        except (OSError, KeyError):
            pass
    bres, _ = burst(len(ids), lambda i: inst.call("DELETE", f"/v1/sandboxes/{ids[i]}"))
    bad = [o for _, o in bres if o[0] != 204]
    assert not bad, bad
    return {"k": k, "pss": pss, "rss": rss, "priv": priv, "anon": anon, "file": filep, "ctl": ctl}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrent", type=int, default=50)
    ap.add_argument("--pools", default="0,32", help="warm-pool sizes to run the burst with (0-32)")
    ap.add_argument("--idle", default="10,30", help="idle sandbox counts for the PSS measurement")
    ap.add_argument("--settle", type=float, default=20, help="seconds idle before reading PSS")
    ap.add_argument("--template", default="minimal")
    ap.add_argument("--templates-dir")
    ap.add_argument("--base", help="where the data dirs go (default: next to the templates dir)")
    ap.add_argument("--airlockd")
    ap.add_argument("--no-raw", action="store_true", help="skip the raw-restore burst baseline")
    a = ap.parse_args()
    tdir = a.templates_dir or default_templates_dir()
    base = a.base or os.path.dirname(tdir)
    tpl_dir, manifest = find_template(None, tdir, a.template)
    pools = [int(x) for x in a.pools.split(",") if x != ""]
    idles = [int(x) for x in a.idle.split(",") if x != ""]
    max_sbx = max([64, a.concurrent] + idles)
    print(f"template={a.template} memory={manifest['memory_mib']}MiB host MemTotal="
          f"{meminfo_kib('MemTotal') / 1048576:.1f}GiB cpus={os.cpu_count()} "
          f"load={open('/proc/loadavg').read().split()[0]}")

    bursts, idle = [], []
    raw = None
    for i, pool in enumerate(pools):
        env = {"AIRLOCK_POOL_SIZE": str(pool), "AIRLOCK_MAX_SANDBOXES": str(max_sbx)}
        inst = Instance(base, tdir, env, a.airlockd)
        try:
            inst.wait_ready()
            p = inst.wait_pool_full(a.template)
            time.sleep(1)
            if i == 0 and not a.no_raw:
                raw = raw_burst(tpl_dir, manifest, a.concurrent, base)
            r = concurrent_creates(inst, a.concurrent, a.template)
            r["pool"] = pool
            r["pool_state"] = p
            bursts.append(r)
            print(f"-- burst pool={pool}: {r['ok']}/{r['n']} ok, {r['hits']} pool hits, wall {r['wall']:.0f} ms")
            if r["fails"]:
                print("   failures:", r["fails"][:5])
            if pool == 0:
                for k in idles:
                    idle.append(idle_pss(inst, k, a.template, a.settle))
                    m = idle[-1]
                    print(f"-- idle k={k}: PSS median {statistics.median(m['pss']):.1f} MiB, "
                          f"total {sum(m['pss']):.0f} MiB")
            errs = inst.log_lines("level=error")
            warns = [l for l in inst.log_lines("level=warn") if "path=/v1/health" not in l]
            print(f"   {len(errs)} error and {len(warns)} warning lines in {inst.log_path}")
            for l in (errs + warns)[:5]:
                print("     ", l[:300])
        finally:
            left = inst.stop()
            if left:
                print(f"   QEMU left behind by the instance (killed): {left}")

    print()
    print(f"### {a.concurrent} concurrent creates ({a.template})")
    print()
    print("| configuration | succeeded | pool hits | latency p50 | p95 | max | burst wall time | node restore_ms p50 |")
    print("|---|---|---|---|---|---|---|---|")
    if raw:
        xs, wall = raw
        print(f"| raw: {len(xs)} bare QEMU restores at once (baseline) | {len(xs)}/{a.concurrent} | — | "
              f"{statistics.median(xs):.0f} ms | {pct(xs, 95):.0f} | {max(xs):.0f} | {wall:.0f} ms | — |")
    for r in bursts:
        lat = r["lat"] or [0]
        nm = f"{statistics.median(r['node_ms']):.0f} ms" if r["node_ms"] else "—"
        print(f"| API, AIRLOCK_POOL_SIZE={r['pool']} | {r['ok']}/{r['n']} | {r['hits']} | "
              f"{statistics.median(lat):.0f} ms | {pct(lat, 95):.0f} | {max(lat):.0f} | {r['wall']:.0f} ms | {nm} |")
    if raw:
        for r in bursts:
            if r["lat"]:
                print(f"ratio API (pool {r['pool']}) / raw: p50 "
                      f"{statistics.median(r['lat']) / statistics.median(raw[0]):.2f}x, wall "
                      f"{r['wall'] / raw[1]:.2f}x")
    for r in bursts:
        print(f"deletes after pool={r['pool']}: {r['n'] - len(r['del_fail'])} ok at once, wall {r['del_wall']:.0f} ms"
              + (f", failures {r['del_fail'][:3]}" if r["del_fail"] else ""))
    if idle:
        total_kib = meminfo_kib("MemTotal")
        print()
        print(f"### Memory per idle sandbox ({a.template}, {manifest['memory_mib']} MiB guest, "
              f"PSS after {a.settle:.0f} s idle)")
        print()
        print("| idle sandboxes | QEMU PSS median | p90 | max | QEMU PSS total | of it anonymous / file (median) | "
              "RSS median | private median | airlockd+node PSS | fit in MemTotal at median PSS |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for m in idle:
            med = statistics.median(m["pss"])
            print(f"| {m['k']} | {med:.1f} MiB | {pct(m['pss'], 90):.1f} | {max(m['pss']):.1f} | "
                  f"{sum(m['pss']):.0f} MiB | {statistics.median(m['anon']):.1f} / {statistics.median(m['file']):.1f} MiB | "
                  f"{statistics.median(m['rss']):.1f} MiB | "
                  f"{statistics.median(m['priv']):.1f} MiB | {m['ctl']:.0f} MiB | "
                  f"{int(total_kib / 1024 / med)} |")
        print(f"(MemTotal {total_kib / 1048576:.1f} GiB; the fit assumes all of it goes to idle QEMUs at the "
              f"median PSS, no host reserve, guests that stay idle; target <= 25 MiB PSS)")


if __name__ == "__main__":
    main()
