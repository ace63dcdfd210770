#!/usr/bin/env python3
"""What a restart of Airlock (an upgrade: docs/operations.md, "Upgrades")
costs its running sandboxes. The node's stop saves each running VM
(stop.state) and the next node resumes it, processes and all; this
measures, on an Airlock of its own (scale.py's Instance, warm pools and
scheduled snapshots off), with --counts sandboxes running, --rounds times
each:

  stop      SIGTERM to airlockd until it exited, every VM saved
  ready     the next airlockd's start on the same data dir until health
            answers 200
  back      per sandbox: SIGTERM until its exec answers again (what a
            client sees of the restart), with a process it ran before
            the stop still alive after it (checked)

against the raw baseline, measured in the same run: a bare QEMU restored
from the template (create.py's spawn_restored) stopped and saved to a
file (QMP stop + migrate), then a new QEMU loaded from that file
(snapshots.py's spawn_from_state): the save and the restore the node does
for each VM, without the node.

  sudo bench/restart.py [--template minimal] [--counts 1,4,16] [--rounds 3] [--raw 10]
                        [--templates-dir DIR] [--base DIR] [--airlockd PATH] [--json FILE]
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from create import find_template, host_tsc_khz, spawn_restored  # noqa: E402
from scale import Instance, default_templates_dir, pct  # noqa: E402
from snapshots import raw_save, spawn_from_state  # noqa: E402

ENV = {"AIRLOCK_POOL_SIZE": "0", "AIRLOCK_SNAPSHOT_POLICY": json.dumps({"disk_every": 0, "full_every": 0})}
# a process that outlives its exec, and says it is alive (kill -0)
SLEEPER = ["sh", "-c", "sleep 100000 >/dev/null 2>&1 & echo $!"]


def raw_save_restore(tpl_dir, manifest, work, khz):
    """One bare VM from the template, saved (stop, migrate to a file) and
    restored from that file: (save ms, restore ms)."""
    w = tempfile.mkdtemp(dir=work)
    p = q = None
    try:
        p, q, _ = spawn_restored(tpl_dir, manifest, w, khz)
        # its RAM is its own (share=off): all of it goes into the file, which
        # loads into a VM of anonymous RAM, as a full snapshot's does
        q.cmd("migrate-set-capabilities", capabilities=[{"capability": "x-ignore-shared", "state": False}])
        state = os.path.join(w, "state")
        save = raw_save(q, state)
        p.kill()
        p.wait()
        # the disk as the saved VM left it, copied into a directory of its own
        p2, _, restore = spawn_from_state(tpl_dir, manifest, state, os.path.join(w, "rootfs.img"),
                                          tempfile.mkdtemp(dir=w), khz)
        p2.kill()
        p2.wait()
        return save, restore
    finally:
        if p and p.poll() is None:
            p.kill()
            p.wait()
        shutil.rmtree(w, ignore_errors=True)


def exec_ok(inst, sid, cmd, timeout=30):
    try:
        st, r = inst.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd}, timeout=timeout)
    except OSError:
        return None
    return r if st == 200 and r.get("exit_code") == 0 else None


def one_round(a, tdir, base, count):
    """count sandboxes, each with a process; airlockd stopped and started
    again on the same data dir: {stop, ready, back: [ms per sandbox]}."""
    inst = Instance(base, tdir, ENV, a.airlockd, prebuild=a.template)
    again = None
    try:
        inst.wait_ready(1800)
        sleepers = {}
        for _ in range(count):
            st, b = inst.call("POST", "/v1/sandboxes", {"template": a.template})
            assert st == 201, (st, b)
            sleepers[b["id"]] = exec_ok(inst, b["id"], SLEEPER)["stdout"].strip()
        t0 = time.monotonic()
        stop = inst.terminate()
        t1 = time.monotonic()
        again = Instance(base, tdir, ENV, a.airlockd, prebuild=a.template, data_dir=inst.data_dir)
        again.wait_ready(600)
        ready = (time.monotonic() - t1) * 1000
        back = {}

        def until_back(sid):  # a client of its own per sandbox
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                if exec_ok(again, sid, ["sh", "-c", f"kill -0 {sleepers[sid]}"], timeout=60) is not None:
                    back[sid] = (time.monotonic() - t0) * 1000
                    return
                time.sleep(0.05)

        clients = [threading.Thread(target=until_back, args=(sid,)) for sid in sleepers]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        waiting = sorted(set(sleepers) - set(back))
        assert not waiting, f"sandboxes {waiting} did not answer with their process alive"
        return {"stop": stop, "ready": ready, "back": list(back.values())}
    finally:
        (again or inst).stop()


def stats(xs):
    return {"n": len(xs), "p50": statistics.median(xs), "p90": pct(xs, 90), "max": max(xs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--template", default="minimal")
    ap.add_argument("--counts", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--raw", type=int, default=10, help="bare save-and-restore samples")
    ap.add_argument("--templates-dir")
    ap.add_argument("--base")
    ap.add_argument("--airlockd")
    ap.add_argument("--json")
    a = ap.parse_args()
    tdir = os.path.abspath(a.templates_dir or default_templates_dir())
    base = os.path.abspath(a.base or os.path.dirname(tdir))
    counts = [int(c) for c in a.counts.split(",")]

    res = {"counts": {}}
    for count in counts:
        rounds = [one_round(a, tdir, base, count) for _ in range(a.rounds)]
        res["counts"][count] = {"stop": stats([r["stop"] for r in rounds]),
                                "ready": stats([r["ready"] for r in rounds]),
                                "back": stats([x for r in rounds for x in r["back"]])}
    # the raw baseline after the rounds: the template they used is built
    tpl_dir, manifest = find_template(None, tdir, a.template)
    work = tempfile.mkdtemp(prefix="bench-restart-", dir=base)
    try:
        khz = host_tsc_khz()
        raw = [raw_save_restore(tpl_dir, manifest, work, khz) for _ in range(a.raw)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["raw"] = {"save": stats([s for s, _ in raw]), "restore": stats([r for _, r in raw]),
                  "both": stats([s + r for s, r in raw])}
    raw_both = res["raw"]["both"]["p50"]

    print(f"template {a.template}, {a.rounds} rounds per count; raw save {res['raw']['save']['p50']:.0f} ms + "
          f"restore {res['raw']['restore']['p50']:.0f} ms (p50 of {a.raw})")
    print(f"{'sandboxes':>9} {'stop p50':>9} {'ready p50':>10} {'back p50':>9} {'back p90':>9} {'back max':>9} "
          f"{'back/raw':>9}")
    for count, r in res["counts"].items():
        print(f"{count:>9} {r['stop']['p50']:>9.0f} {r['ready']['p50']:>10.0f} {r['back']['p50']:>9.0f} "
              f"{r['back']['p90']:>9.0f} {r['back']['max']:>9.0f} {r['back']['p50'] / raw_both:>8.1f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
