#!/usr/bin/env python3
"""Every speed figure in one run, printed as one table: each figure's
median and tails, the raw baseline measured in the same run, the ratio
between them, and the target it is held to.

  sudo bench/all.py [--quick] [--template python] [--scale-template minimal]
                    [--templates-dir DIR] [--airlockd PATH] [--json FILE]
                    [--only pool,nopool,busy,bursts] [--busy-mib 64,512]

Starts its own Airlocks (see scale.py's Instance: a data dir next to the
templates, which must be built already, on a btrfs/xfs mount such as the
test volume `mount -o loop build/test-vol.btrfs build/test-vol`):

  1. pool on (AIRLOCK_POOL_SIZE=2): warm creates, each waiting for a full
     pool, interleaved with bare QEMU restores of the same snapshot (the raw
     baseline, create.py's spawn_restored); then 20 creates, each with its
     first exec, back to back (the pool cannot keep up: misses count too);
     then exec round trips on one sandbox, against the guest's own shell
     starting /bin/true (the part of a round trip no host code can save).
  2. pool off: cold creates interleaved with the raw restore; full
     snapshots, fork, suspend (until the VM is gone, and until the API says
     its image landed) and wake (from the node's copy, and from the object
     store with that copy removed) of a sandbox with 64 MiB written
     into its guest memory, with raw stop-and-copy and full-state restores
     of that same state as baselines (snapshots.py's); a burst of
     concurrent creates against the same number of bare restores at once;
     idle sandboxes' PSS.
  3. busy (pool off): what an agent does right before a fork or a full
     snapshot: 64 MiB (the template) and 512 MiB (a 1 GiB template built
     from it, `bench-TEMPLATE-1g2g`, with a 2 GiB disk) written to a file,
     and held in memory by a process (in a tmpfs file where the template
     has no python3), then the verb at once, a new sandbox for each
     sample; a full snapshot's downtime as QEMU reports it. The
     parent's pause two ways: the API's figure, and how far the guest's
     clock fell behind the host's across it (a stopped guest's clock stands
     still); the two must agree.
  4. bursts (the node's default pool): creates with their first exec, 20
     and 100 back to back (the first burst on a pool at its size, the later
     ones on the pool as it grew), and 10 at once; the share served warm.

--quick runs the same with few repetitions (about two minutes with the
templates built); the figures are then indicative, the tails meaningless.
No API, node or guest detail is read from logs: every number is what a
client sees, or what the API's reply says (pause_ms, snapshot_ms, ...)."""

import argparse
import glob
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from create import find_template, host_tsc_khz, raw_restore  # noqa: E402
from scale import Instance, burst, default_templates_dir, meminfo_kib, pct, qemu_pids, raw_burst, smaps_kib  # noqa: E402
from snapshots import raw_state_restore_once, raw_stop_copy, spawn_from_state  # noqa: E402

FULL = {"warm": 30, "burst_exec": 20, "cold": 20, "exec": 50, "snap": 10, "suspend": 5, "fork": 10,
        "concurrent": 50, "idle": 10, "settle": 20, "busy": 5, "bursts": (20, 100), "at_once": 10, "burst_rounds": 3}
QUICK = {"warm": 8, "burst_exec": 10, "cold": 5, "exec": 30, "snap": 3, "suspend": 2, "fork": 3,
         "concurrent": 10, "idle": 4, "settle": 5, "busy": 3, "bursts": (20,), "at_once": 10, "burst_rounds": 1}


class Table:
    """Rows of (what, samples, baseline name, baseline samples, target)."""

    def __init__(self):
        self.rows = []

    def add(self, what, xs, unit="ms", base=None, base_xs=None, target=None):
        """target: (text, predicate over (median, p99, baseline median))."""
        self.rows.append({"what": what, "xs": list(xs), "unit": unit, "base": base,
                          "base_xs": list(base_xs) if base_xs else None, "target": target})

    def render(self):
        out = ["| figure | n | median | p90 | p99 | max | raw baseline, same run (median) | ratio | target | |",
               "|---|---|---|---|---|---|---|---|---|---|"]
        for r in self.rows:
            xs, u = r["xs"], r["unit"]
            if not xs:
                out.append(f"| {r['what']} | 0 | — | — | — | — | — | — | {r['target'][0] if r['target'] else ''} | |")
                continue
            med, p99 = statistics.median(xs), pct(xs, 99)
            bmed = statistics.median(r["base_xs"]) if r["base_xs"] else None
            base = f"{r['base']}: {bmed:.1f} {u}" if bmed is not None else "—"
            ratio = f"{med / bmed:.2f}x" if bmed else "—"
            verdict = ""
            if r["target"]:
                verdict = "met" if r["target"][1](med, p99, bmed, xs) else "**missed**"
            out.append(f"| {r['what']} | {len(xs)} | {med:.1f} {u} | {pct(xs, 90):.1f} | {p99:.1f} | {max(xs):.1f} | "
                       f"{base} | {ratio} | {r['target'][0] if r['target'] else ''} | {verdict} |")
        return "\n".join(out)

    def as_json(self):
        def stats(xs):
            return {"n": len(xs), "median": statistics.median(xs), "p90": pct(xs, 90), "p99": pct(xs, 99),
                    "max": max(xs)} if xs else {"n": 0}
        return [{"what": r["what"], "unit": r["unit"], **stats(r["xs"]), "baseline": r["base"],
                 "baseline_median": statistics.median(r["base_xs"]) if r["base_xs"] else None,
                 "target": r["target"][0] if r["target"] else None} for r in self.rows]


# microseconds per /bin/true the guest's shell starts (and waits for)
# microseconds per fork+exec of /bin/true in the guest's shell: 20 timed
# with date's nanoseconds, or 500 with /proc/uptime's 10 ms where date has
# no %N (busybox, the minimal template)
SPAWN_LOOP = ("n=20; a=$(date +%s%N); case $a in *N) n=500;; esac; "
              "clock() { case $a in *N) read u _ </proc/uptime; echo $(( ${u%.*}${u#*.} * 10000000 ));; "
              "*) date +%s%N;; esac; }; "
              "s=$(clock); i=0; while [ $i -lt $n ]; do /bin/true; i=$((i + 1)); done; e=$(clock); "
              "echo $(( (e - s) / (n * 1000) ))")


def ratio_at_most(k, of_p99=False):
    return lambda med, p99, base, xs: base is not None and (p99 if of_p99 else med) <= k * base


def at_most(ms, of_p99=False):
    return lambda med, p99, base, xs: (p99 if of_p99 else med) <= ms


def tail_at_most(p, k):
    """The p-th percentile at most k times the median (a burst's tail)."""
    return lambda med, p99, base, xs: pct(xs, p) <= k * med


def timed(fn, *args):
    t = time.monotonic()
    out = fn(*args)
    return (time.monotonic() - t) * 1000, out


def create(inst, template):
    st, b = inst.call("POST", "/v1/sandboxes", {"template": template})
    assert st == 201, (st, b)
    return b


def delete(inst, sid):
    st, b = inst.call("DELETE", f"/v1/sandboxes/{sid}")
    assert st == 204, (st, b)


def run(inst, sid, cmd):
    st, r = inst.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd})
    assert st == 200 and r["exit_code"] == 0, (st, r)
    return r


def verb(inst, sid, name, body=None):
    st, op = inst.call("POST", f"/v1/sandboxes/{sid}/{name}?wait=true", body)
    assert st == 200 and op["state"] == "succeeded", (name, st, op)
    return op


def back_to_back(inst, template, count):
    """count creates in a row, each timed with its first exec (then
    deleted): (ms each, how many the pool served)."""
    xs, hits = [], 0
    for _ in range(count):
        t = time.monotonic()
        b = create(inst, template)
        run(inst, b["id"], ["true"])
        xs.append((time.monotonic() - t) * 1000)
        hits += b.get("pool") == "hit"
        delete(inst, b["id"])
    return xs, hits


def wait_uploaded(inst, sid):
    """Until the API says the suspended sandbox's image has landed."""
    while not inst.call("GET", f"/v1/sandboxes/{sid}")[1].get("image_uploaded"):
        time.sleep(0.01)


def pool_on(a, n, tdir, table):
    inst = Instance(a.base, tdir, {"AIRLOCK_POOL_SIZE": "2", "AIRLOCK_SNAPSHOT_POLICY": json.dumps(
        {"disk_every": 0, "full_every": 0})}, a.airlockd, prebuild=a.template)
    work = tempfile.mkdtemp(prefix="bench-all-", dir=a.base)
    ok = False
    try:
        inst.wait_ready()
        khz = host_tsc_khz()
        # the build this instance uses (a node removes builds it does not)
        tpl_dir, manifest = find_template(None, tdir, a.template)
        a.memory_mib = manifest["memory_mib"]
        raw, warm, missed = [], [], 0
        for _ in range(n["warm"]):
            inst.wait_pool_full(a.template)
            raw.append(raw_restore(tpl_dir, manifest, work, khz))
            ms, b = timed(create, inst, a.template)
            if b.get("pool") == "hit":
                warm.append(ms)
            else:
                missed += 1
            delete(inst, b["id"])
        name = f"create, warm-pool hit ({a.template})" + (f"; {missed} missed, left out" if missed else "")
        table.add(name, warm, base="bare QEMU restore", base_xs=raw,
                  target=("p50 ≤ 0.25x, p99 ≤ 0.5x raw",
                          lambda med, p99, base, xs: ratio_at_most(0.25)(med, p99, base, xs) and
                          ratio_at_most(0.5, of_p99=True)(med, p99, base, xs)))

        # back to back: the pool runs dry, the misses restore cold
        inst.wait_pool_full(a.template)
        both, hits = back_to_back(inst, a.template, n["burst_exec"])
        table.add(f"create + first exec, {n['burst_exec']} back to back, pool 2 ({hits} hits)", both,
                  base="bare QEMU restore", base_xs=raw, target=("p50 ≤ 1.5x raw", ratio_at_most(1.5)))

        b = create(inst, a.template)
        try:
            run(inst, b["id"], ["true"])  # the first exec after a restore is not a round trip's cost
            xs = [timed(run, inst, b["id"], ["true"])[0] for _ in range(n["exec"])]
            # the guest's own floor: its shell starting /bin/true, 20 at a time
            spawn = [int(run(inst, b["id"], ["sh", "-c", SPAWN_LOOP])["stdout"]) / 1000 for _ in range(5)]
        finally:
            delete(inst, b["id"])
        table.add(f"exec `true` round trip, {n['exec']} in a row ({a.template})", xs,
                  base="in-guest fork+exec of /bin/true", base_xs=spawn, target=("p50 ≤ 5 ms", at_most(5)))
        ok = True
    finally:
        shutil.rmtree(work, ignore_errors=True)
        report_log(inst, ok)


def pool_off(a, n, tdir, table):
    max_sbx = max(64, n["concurrent"], n["idle"]) + 4
    prebuild = a.template if a.template == a.scale_template else f"{a.template},{a.scale_template}"
    inst = Instance(a.base, tdir, {"AIRLOCK_POOL_SIZE": "0", "AIRLOCK_MAX_SANDBOXES": str(max_sbx),
                                   "AIRLOCK_SNAPSHOT_POLICY": json.dumps({"disk_every": 0, "full_every": 0})},
                    a.airlockd, prebuild=prebuild)
    work = tempfile.mkdtemp(prefix="bench-all-", dir=a.base)
    khz = host_tsc_khz()
    raw_proc = None
    ok = False
    try:
        inst.wait_ready()
        tpl_dir, manifest = find_template(None, tdir, a.template)
        stpl_dir, smanifest = find_template(None, tdir, a.scale_template)
        a.memory_mib = manifest["memory_mib"]
        raw, cold = [], []
        for _ in range(n["cold"]):
            raw.append(raw_restore(tpl_dir, manifest, work, khz))
            ms, b = timed(create, inst, a.template)
            cold.append(ms)
            delete(inst, b["id"])
        table.add(f"cold create, pool off ({a.template})", cold, base="bare QEMU restore", base_xs=raw,
                  target=("p50 ≤ 1.3x raw", ratio_at_most(1.3)))

        sid = create(inst, a.template)["id"]
        try:
            run(inst, sid, ["sh", "-c", "dd if=/dev/urandom of=/dev/shm/x bs=1M count=64 2>/dev/null"])
            # full snapshots, and the raw stop-and-copy of the same state
            pause, stopcopy = [], []
            for i in range(n["snap"]):
                st, snap = inst.call("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"})
                assert st == 201, snap
                pause.append(snap["pause_ms"])
                if i == 0:
                    state = glob.glob(os.path.join(inst.data_dir, "**", "sandboxes", sid, "snapshots",
                                                   snap["id"] + ".state"), recursive=True)[0]
                    rootfs = os.path.join(os.path.dirname(os.path.dirname(state)), "rootfs.img")
                    w = os.path.join(work, "raw")
                    os.mkdir(w)
                    raw_proc, raw_qmp, _ = spawn_from_state(tpl_dir, manifest, state, rootfs, w, khz)
                stopcopy.append(raw_stop_copy(raw_qmp, os.path.join(work, "raw.state"))[0])
            raw_proc.kill()
            raw_proc.wait()
            raw_proc = None
            table.add(f"full snapshot, VM paused ({a.template}, 64 MiB written)", pause,
                      base="bare stop+migrate+cont", base_xs=stopcopy, target=("≤ 100 ms", at_most(100)))

            # fork, against a bare restore of the same full state
            fpause, fork, full_restore = [], [], []
            for i in range(n["fork"]):
                ms, op = timed(verb, inst, sid, "fork")
                fork.append(ms)
                fpause.append(op["result"]["parent_pause_ms"])
                delete(inst, op["result"]["sandbox"]["id"])
                full_restore.append(raw_state_restore_once(tpl_dir, manifest, state, rootfs, work, khz))
            table.add(f"fork, parent paused ({a.template})", fpause, target=("≤ 100 ms", at_most(100)))
            table.add(f"fork, child ready ({a.template})", fork, base="bare restore of the state",
                      base_xs=full_restore, target=("≤ 400 ms", at_most(400)))

            # suspend and wake: a suspend answers once the VM is gone (its
            # snapshot durable on the node); its upload runs on, and the API
            # says when it landed. A wake right after finds the node's copy;
            # one with that copy removed (as on a node that never had it)
            # downloads the image.
            susp, landed, wake_local, wake_remote, wake_raw = [], [], [], [], []
            sdir = os.path.join(inst.data_dir, "sandboxes", sid)
            for _ in range(n["suspend"]):
                t = time.monotonic()
                verb(inst, sid, "suspend")
                susp.append((time.monotonic() - t) * 1000)
                wait_uploaded(inst, sid)
                landed.append((time.monotonic() - t) * 1000)
                wake_local.append(timed(verb, inst, sid, "wake")[0])
                # the raw baseline right after, on the same host memory
                wake_raw.append(raw_state_restore_once(tpl_dir, manifest, state, rootfs, work, khz))
                verb(inst, sid, "suspend")
                wait_uploaded(inst, sid)
                while not os.path.exists(os.path.join(sdir, "suspend", "uploaded")):  # the node is done with it
                    time.sleep(0.01)
                shutil.rmtree(os.path.join(sdir, "suspend"))
                wake_remote.append(timed(verb, inst, sid, "wake")[0])
            run(inst, sid, ["sh", "-c", "test $(stat -c %s /dev/shm/x) -eq 67108864"])
            table.add(f"suspend, VM resources released ({a.template})", susp, target=("≤ 500 ms", at_most(500)))
            table.add(f"suspend, restorable in the object store ({a.template})", landed,
                      target=("≤ 2000 ms", at_most(2000)))
            table.add(f"wake from the node's copy ({a.template})", wake_local, base="bare restore of the state",
                      base_xs=wake_raw, target=("≤ 500 ms", at_most(500)))
            table.add(f"wake from the object store ({a.template})", wake_remote, base="bare restore of the state",
                      base_xs=wake_raw, target=("≤ 1500 ms", at_most(1500)))
        finally:
            delete(inst, sid)

        # a burst of concurrent creates, against as many bare restores at once
        raw_xs, _ = raw_burst(stpl_dir, smanifest, n["concurrent"], a.base)
        res, _ = burst(n["concurrent"], lambda i: inst.call("POST", "/v1/sandboxes", {"template": a.scale_template}))
        made = [(ms, out[1]["id"]) for ms, out in res if out[0] == 201]
        bursts = [ms for ms, _ in made]
        burst(len(made), lambda i: inst.call("DELETE", f"/v1/sandboxes/{made[i][1]}"))
        table.add(f"{n['concurrent']} concurrent creates, pool off ({a.scale_template}; "
                  f"{len(made)}/{n['concurrent']} succeeded)", bursts, base=f"{n['concurrent']} bare restores at once",
                  base_xs=raw_xs, target=("p50 ≤ 1.3x raw", ratio_at_most(1.3)))

        # idle memory
        ids = [create(inst, a.scale_template)["id"] for _ in range(n["idle"])]
        try:
            time.sleep(n["settle"])
            # the QEMUs of this instance (their run dirs are in its data dir)
            pids = qemu_pids(inst.data_dir)
            assert len(pids) == len(ids), (ids, pids)
            pss = [smaps_kib(pid)["Pss"] / 1024 for pid in pids]
        finally:
            burst(len(ids), lambda i: inst.call("DELETE", f"/v1/sandboxes/{ids[i]}"))
        table.add(f"idle memory per sandbox, {n['idle']} idle for {n['settle']} s ({a.scale_template})", pss,
                  unit="MiB", target=("≤ 20 MiB PSS", at_most(20)))
        ok = True
    finally:
        if raw_proc:
            raw_proc.kill()
            raw_proc.wait()
        shutil.rmtree(work, ignore_errors=True)
        report_log(inst, ok)


# The busy cases: what an agent does right before it forks or snapshots.
# "file": random bytes written to a file (dirty page cache, written back
# to the disk while the guest runs on); "memory": a process holding them.
HOLD = """import os, sys, time
b = bytearray({n})
for i in range(0, {n}, 1 << 20):
    b[i:i + (1 << 20)] = os.urandom(1 << 20)
with open("/tmp/held.tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename("/tmp/held.tmp", "/tmp/held")
sys.stdout.close()
time.sleep(1e9)"""


def write_busy(inst, sid, where, mib, i):
    n = mib << 20
    if where == "file":
        run(inst, sid, ["sh", "-c", f"rm -f /root/busy*; head -c {n} /dev/urandom > /root/busy{i}"])
    else:  # the last holder goes first: 512 MiB twice would not fit
        run(inst, sid, ["sh", "-c", "if [ -e /tmp/held ]; then kill $(cat /tmp/held); rm /tmp/held; fi; "
                        "rm -f /dev/shm/busy*; if command -v python3 >/dev/null; then "
                        f"nohup python3 -c '{HOLD.format(n=n)}' >/dev/null 2>&1 & "
                        "while [ ! -e /tmp/held ]; do sleep 0.05; done; "
                        # no python (the minimal template): a tmpfs file is guest RAM too
                        f"else head -c {n} /dev/urandom > /dev/shm/busy{i}; fi"])


GUEST_CLOCK = "d=$(date +%s%N); case $d in *N) read u _ </proc/uptime; echo U$u;; *) echo $d;; esac"


def clock_offset(inst, sid):
    """The guest's wall clock minus the host's, in ms, read by one exec
    (taken at the round trip's midpoint: off by at most half of it, the same
    way each time)."""
    t0 = time.time()
    out = run(inst, sid, ["sh", "-c", GUEST_CLOCK])["stdout"].strip()
    t1 = time.time()
    # busybox's date has no %N: its uptime then (10 ms steps; it stands
    # still with the guest as well)
    g = float(out[1:]) * 1000 if out.startswith("U") else int(out) / 1e6
    return g - (t0 + t1) / 2 * 1000


def busy(a, n, tdir, table):
    """Fork and full snapshot right after writing 64 MiB (the template the
    bench measures) and 512 MiB (a 1 GiB template built from it here) to a
    file and to memory. The parent's pause two ways: the API's figure, and
    how far the guest's clock fell behind the host's across the verb (a
    stopped guest's clock stands still)."""
    big = f"bench-{a.template}-1g2g"
    inst = Instance(a.base, tdir, {"AIRLOCK_POOL_SIZE": "0", "AIRLOCK_SNAPSHOT_POLICY": json.dumps(
        {"disk_every": 0, "full_every": 0})}, a.airlockd, prebuild=a.template)
    ok = False
    try:
        inst.wait_ready()
        if 512 in a.busy_mib:
            st, b = inst.call("POST", "/v1/templates", {"dockerfile": f"FROM {a.template}\n", "name": big,
                                                        "memory_mib": 1024, "disk_mib": 2048})
            assert st in (200, 202), (st, b)
            while (b := inst.call("GET", f"/v1/templates/{big}")[1])["state"] == "building":
                time.sleep(1)
            assert b["state"] == "ready", b
        for mib, tpl in ((64, a.template), (512, big)):
            if mib not in a.busy_mib:
                continue
            for where in ("file", "memory"):
                res = {k: [] for k in ("fork", "fork lag", "snap", "snap lag", "snap downtime")}
                for _ in range(n["busy"]):
                    sid = create(inst, tpl)["id"]
                    try:
                        write_busy(inst, sid, where, mib, 0)
                        off = clock_offset(inst, sid)
                        op = verb(inst, sid, "fork")
                        res["fork lag"].append(off - clock_offset(inst, sid))
                        res["fork"].append(op["result"]["parent_pause_ms"])
                        delete(inst, op["result"]["sandbox"]["id"])
                        write_busy(inst, sid, where, mib, 1)
                        off = clock_offset(inst, sid)
                        st, snap = inst.call("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"})
                        assert st == 201, snap
                        res["snap lag"].append(off - clock_offset(inst, sid))
                        res["snap"].append(snap["pause_ms"])
                        res["snap downtime"].append(snap["downtime_ms"])
                    finally:
                        delete(inst, sid)
                what = f"{mib} MiB written to {'a file' if where == 'file' else 'memory'} ({tpl})"
                goal = 150 if mib == 64 else 500
                table.add(f"fork right after {what}, parent pause (API)", res["fork"],
                          target=(f"p50 ≤ {goal} ms", at_most(goal)))
                table.add(f"fork right after {what}, guest clock lag", res["fork lag"],
                          base="parent pause (API)", base_xs=res["fork"], target=("agrees: 0.8-1.2x", lambda
                          med, p99, base, xs: base is not None and 0.8 * base - 20 <= med <= 1.2 * base + 20))
                table.add(f"full snapshot right after {what}, pause (API)", res["snap"],
                          target=(f"p50 ≤ {goal} ms", at_most(goal)))
                table.add(f"full snapshot right after {what}, downtime QEMU reports", res["snap downtime"],
                          target=("≤ 50 ms (live, KVM only)", at_most(50)))
                table.add(f"full snapshot right after {what}, guest clock lag", res["snap lag"],
                          base="pause (API)", base_xs=res["snap"], target=("agrees: 0.8-1.2x", lambda
                          med, p99, base, xs: base is not None and 0.8 * base - 20 <= med <= 1.2 * base + 20))
        ok = True
    finally:
        report_log(inst, ok)


def bursts(a, n, tdir, table):
    """Creates as agents send them, with the node's default warm pool:
    back to back (each with its first exec), and many at once; the share
    the pool served. Each burst starts from a full pool."""
    inst = Instance(a.base, tdir, {"AIRLOCK_SNAPSHOT_POLICY": json.dumps({"disk_every": 0, "full_every": 0})},
                    a.airlockd, prebuild=a.template)
    ok = False
    try:
        inst.wait_ready()
        for count in n["bursts"]:
            # the first burst finds the pool at its size; the later ones
            # (after it has seen the first) as large as it has grown
            rounds = []
            for _ in range(n["burst_rounds"]):
                inst.wait_pool_full(a.template)
                rounds.append(back_to_back(inst, a.template, count))
            k = 2 if count <= 20 else 3
            p = 90 if count <= 20 else 99
            for name, part in (("first burst", rounds[:1]), (f"bursts 2-{len(rounds)}", rounds[1:])):
                xs = [x for r in part for x in r[0]]
                if xs:
                    warm = 100 * sum(r[1] for r in part) // len(xs)
                    table.add(f"create + first exec, {count} back to back, {name} ({a.template}; {warm}% warm)", xs,
                              target=(f"p{p} ≤ {k}x p50", tail_at_most(p, k)))
        xs, hits = [], 0
        for _ in range(n["burst_rounds"]):
            inst.wait_pool_full(a.template)

            def one(i):
                t = time.monotonic()
                b = create(inst, a.template)
                run(inst, b["id"], ["true"])
                return (time.monotonic() - t) * 1000, b

            res, _ = burst(n["at_once"], one)
            for _, out in res:
                assert isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict), out
                xs.append(out[0])
                hits += out[1].get("pool") == "hit"
            burst(len(res), lambda i: delete(inst, res[i][1][1]["id"]))
        table.add(f"create + first exec, {n['at_once']} at once ×{n['burst_rounds']} ({a.template}; "
                  f"{100 * hits // len(xs)}% warm)", xs, target=("p90 ≤ 2x p50", tail_at_most(90, 2)))
        ok = True
    finally:
        report_log(inst, ok)


def report_log(inst, ok):
    errs = inst.log_lines("level=error")
    warns = [l for l in inst.log_lines("level=warn") if "path=/v1/health" not in l]
    left = inst.stop()
    if errs or warns or left or not ok:
        print(f"  airlockd log: {len(errs)} error and {len(warns)} warning lines"
              + (f"; QEMU left behind (killed): {left}" if left else ""), file=sys.stderr)
        for l in (errs + warns)[:5]:
            print("    ", l[:300], file=sys.stderr)
        print(f"  (log kept: {inst.log_path})", file=sys.stderr)
    else:
        os.unlink(inst.log_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="few repetitions, about two minutes")
    ap.add_argument("--template", default="python", help="for the single-sandbox figures")
    ap.add_argument("--scale-template", default="minimal", help="for the concurrent creates and idle memory")
    ap.add_argument("--templates-dir")
    ap.add_argument("--base", help="where the data dirs go (default: next to the templates dir)")
    ap.add_argument("--airlockd")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--busy-mib", default="64,512", help="the busy cases' sizes, a comma list of 64 and 512")
    ap.add_argument("--only", help="a comma list of the parts to run: pool, nopool, busy, bursts (default: all)")
    a = ap.parse_args()
    a.busy_mib = [int(x) for x in a.busy_mib.split(",")]
    n = QUICK if a.quick else FULL
    tdir = os.path.abspath(a.templates_dir or default_templates_dir())
    a.base = os.path.abspath(a.base or os.path.dirname(tdir))
    load0 = open("/proc/loadavg").read().split()[0]
    t0 = time.monotonic()
    table = Table()
    parts = {"pool": pool_on, "nopool": pool_off, "busy": busy, "bursts": bursts}
    only = a.only.split(",") if a.only else list(parts)
    if set(only) - set(parts):
        ap.error(f"--only: unknown part(s) {', '.join(sorted(set(only) - set(parts)))}")
    a.memory_mib = "?"
    for part in only:
        parts[part](a, n, tdir, table)
    print(f"bench/all.py{' --quick' if a.quick else ''}: {a.template} ({a.memory_mib} MiB), "
          f"{a.scale_template} for scale; {os.cpu_count()} CPUs, MemTotal {meminfo_kib('MemTotal') / 1048576:.1f} GiB; "
          f"load {load0} at the start, {open('/proc/loadavg').read().split()[0]} at the end; "
          f"{time.monotonic() - t0:.0f} s")
    print()
    print(table.render())
    if a.json:
        with open(a.json, "w") as f:
            json.dump(table.as_json(), f, indent=1)


if __name__ == "__main__":
    main()
