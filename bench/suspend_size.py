#!/usr/bin/env python3
"""What a suspended sandbox costs the object store, and how long its suspend
and wake take: an Airlock of its own (scale.py's Instance, warm pools and
scheduled snapshots off), --n sandboxes per case, suspended one after the
other (all of them suspended at once in the end), then each woken:

  idle      nothing written since its create
  1mib      1 MiB of /dev/urandom written to a file on its disk (synced)
  1gib      1 GiB likewise, on bench-TEMPLATE-2g: a template built FROM
            it with a 2 GiB disk (its own has no room for it)

Per case: the bytes its suspended image takes in the object store (the
blobs its manifest names, as stored: its own, and those it shares with
every image of its template, stored once), how much the store grew with
each image, the suspend until the VM is released (the API's
answer) and until restorable (image_uploaded), and a wake from the object
store (the node's own copy removed first, as on a node that never had it).

  sudo bench/suspend_size.py [--template python] [--n 5] [--cases idle,1mib,1gib]
                             [--templates-dir DIR] [--base DIR] [--airlockd PATH] [--json FILE]
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale import Instance, default_templates_dir  # noqa: E402

CASES = {"idle": 0, "1mib": 1, "1gib": 1024}


def verb(inst, sid, name):
    st, op = inst.call("POST", f"/v1/sandboxes/{sid}/{name}?wait=true")
    assert st in (200, 201) and op.get("state") == "succeeded", (name, st, op)
    return op


def run(inst, sid, cmd):
    st, r = inst.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd, "timeout_s": 600})
    assert st == 200 and r["exit_code"] == 0, (cmd, st, r)
    return r


def image_bytes(store, snapshot_id):
    """(own, shared, artifacts): the bytes of the blobs the image's
    manifest names as stored, its own and those it shares with every image
    of its template (the delta's base: artifacts named base.*), and each
    artifact's."""
    with open(os.path.join(store, "snapshots", snapshot_id, "manifest.json")) as f:
        m = json.load(f)
    own = shared = 0
    for art in m["artifacts"]:
        if art["name"].startswith("base."):
            shared += art["size"]
        else:
            own += art["size"]
    return own, shared, {a["name"]: a["size"] for a in m["artifacts"]}


def store_bytes(store):
    """Every blob's bytes in the store (what it holds, shared once)."""
    d = os.path.join(store, "blobs")
    return sum(os.stat(os.path.join(d, b)).st_size for b in os.listdir(d)) if os.path.isdir(d) else 0


def big_template(inst, base):
    """bench-BASE-2g: BASE with a 2 GiB disk, built once."""
    name = f"bench-{base}-2g"
    st, b = inst.call("GET", f"/v1/templates/{name}")
    if st != 200:
        st, b = inst.call("POST", "/v1/templates", {"dockerfile": f"FROM {base}\n", "name": name, "disk_mib": 2048})
        assert st in (200, 202), (st, b)
    while (b := inst.call("GET", f"/v1/templates/{name}")[1])["state"] == "building":
        time.sleep(1)
    assert b["state"] == "ready", b
    return name


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--template", default="python")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--cases", default="idle,1mib,1gib")
    ap.add_argument("--templates-dir")
    ap.add_argument("--base")
    ap.add_argument("--airlockd")
    ap.add_argument("--json")
    a = ap.parse_args()
    cases = a.cases.split(",")
    if set(cases) - set(CASES):
        ap.error(f"--cases: unknown {sorted(set(cases) - set(CASES))}")
    tdir = os.path.abspath(a.templates_dir or default_templates_dir())
    base = os.path.abspath(a.base or os.path.dirname(tdir))
    inst = Instance(base, tdir, {"AIRLOCK_POOL_SIZE": "0",
                                 "AIRLOCK_SNAPSHOT_POLICY": json.dumps({"disk_every": 0, "full_every": 0})},
                    a.airlockd, prebuild=a.template)
    out = {}
    try:
        inst.wait_ready(1800)
        store = os.path.join(inst.data_dir, "objstore")
        for case in cases:
            tpl = a.template
            if CASES[case] >= 1024:
                tpl = big_template(inst, a.template)
            # n sandboxes of the case, all suspended at once: the first image
            # of a template brings the shared part, each further one its own
            res = {"own": [], "shared": [], "added": [], "released_ms": [], "restorable_ms": [], "wake_remote_ms": []}
            sids, parts = [], None
            for _ in range(a.n):
                st, b = inst.call("POST", "/v1/sandboxes", {"template": tpl})
                assert st == 201, (st, b)
                sid = b["id"]
                sids.append(sid)
                if CASES[case]:
                    run(inst, sid, ["sh", "-c", f"head -c {CASES[case]}M /dev/urandom > /root/written && sync"])
                before = store_bytes(store)
                t = time.monotonic()
                op = verb(inst, sid, "suspend")
                res["released_ms"].append((time.monotonic() - t) * 1000)
                snap = op["result"]["suspended"]["snapshot"]
                while not inst.call("GET", f"/v1/sandboxes/{sid}")[1].get("image_uploaded"):
                    time.sleep(0.01)
                res["restorable_ms"].append((time.monotonic() - t) * 1000)
                own, shared, parts = image_bytes(store, snap)
                res["own"].append(own)
                res["shared"].append(shared)
                res["added"].append(store_bytes(store) - before)
            for sid in sids:
                sdir = os.path.join(inst.data_dir, "sandboxes", sid)
                while not os.path.exists(os.path.join(sdir, "suspend", "uploaded")):
                    time.sleep(0.01)
                shutil.rmtree(os.path.join(sdir, "suspend"))  # as on a node that never had it
                t = time.monotonic()
                verb(inst, sid, "wake")
                res["wake_remote_ms"].append((time.monotonic() - t) * 1000)
                if CASES[case]:
                    run(inst, sid, ["sh", "-c", f"test $(stat -c %s /root/written) -eq {CASES[case] << 20}"])
                inst.call("DELETE", f"/v1/sandboxes/{sid}")
            out[case] = {k: med(v) for k, v in res.items()}
            out[case]["added_each"] = res["added"]
            out[case]["artifacts"] = parts
            print(f"{case:>5} ({tpl}): its own {med(res['own']) / 2**20:.2f} MiB, shared with its template's "
                  f"images {med(res['shared']) / 2**20:.1f} MiB "
                  f"({', '.join(f'{k} {v / 2**20:.2f}' for k, v in parts.items())}); the store grew by "
                  f"{', '.join(f'{x / 2**20:.2f}' for x in res['added'])} MiB with each image; "
                  f"released {med(res['released_ms']):.0f} ms, restorable {med(res['restorable_ms']):.0f} ms "
                  f"({', '.join(f'{x:.0f}' for x in res['restorable_ms'])}), "
                  f"wake from the object store {med(res['wake_remote_ms']):.0f} ms "
                  f"({', '.join(f'{x:.0f}' for x in res['wake_remote_ms'])}), n={a.n}", flush=True)
    finally:
        inst.stop()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
