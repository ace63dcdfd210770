#!/usr/bin/env python3
"""Lifecycle benchmark against a running Airlock: pause, resume, stop and
start of one sandbox through the public API with ?wait=true (operation
recorded, node verb, operation finished), each repeated N times; then disk
snapshots of the running sandbox (POST .../snapshots: guest freeze, reflink,
thaw) and rollbacks to one of them (stop, reflink, cold boot).

  sudo bench/lifecycle.py [--n 20] [--template minimal] [--data-dir /var/lib/airlock]

Raw baseline, measured in the same run: QMP `stop` / `cont` sent straight
to a bare QEMU restored from the same template by this script (no API, no
node, no guest); for the snapshot, `cp --reflink=always` of the same
sandbox image by this script."""

import argparse
import http.client
import json
import os
import shutil
import glob
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from create import find_template, host_tsc_khz, spawn_restored  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1)))))]


def line(name, xs):
    return (f"{name:<30} n={len(xs):<3} median={statistics.median(xs):8.1f} ms  "
            f"p90={pct(xs, 90):8.1f}  max={max(xs):8.1f}")


def timed(q, cmd):
    t = time.monotonic()
    q.cmd(cmd)
    return (time.monotonic() - t) * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=7420)
    ap.add_argument("--data-dir", default=os.environ.get("AIRLOCK_DATA_DIR", "/var/lib/airlock"))
    ap.add_argument("--template", default="minimal")
    ap.add_argument("--n", type=int, default=20)
    a = ap.parse_args()
    tok = open(os.path.join(a.data_dir, "control", "admin.token")).read().strip()

    def call(method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=600)
        c.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                  headers={"Authorization": "Bearer " + tok})
        r = c.getresponse()
        out = r.read()
        c.close()
        return r.status, json.loads(out) if out else None

    tpl_dir, manifest = find_template(a.data_dir, None, a.template)
    work = tempfile.mkdtemp(dir=os.path.dirname(tpl_dir))
    raw_proc, raw_qmp, _ = spawn_restored(tpl_dir, manifest, work, host_tsc_khz())

    st, sbx = call("POST", "/v1/sandboxes", {"template": a.template})
    assert st == 201, sbx
    sid = sbx["id"]
    res = {k: [] for k in ("pause", "resume", "stop", "start", "raw stop", "raw cont", "disk snapshot",
                           "raw cp --reflink", "rollback")}
    try:
        for _ in range(a.n):
            for verb in ("pause", "resume"):
                t = time.monotonic()
                st, op = call("POST", f"/v1/sandboxes/{sid}/{verb}?wait=true")
                res[verb].append((time.monotonic() - t) * 1000)
                assert st == 200 and op["state"] == "succeeded", op
            res["raw stop"].append(timed(raw_qmp, "stop"))
            res["raw cont"].append(timed(raw_qmp, "cont"))
        for _ in range(max(3, a.n // 4)):
            for verb in ("stop", "start"):
                t = time.monotonic()
                st, op = call("POST", f"/v1/sandboxes/{sid}/{verb}?wait=true")
                res[verb].append((time.monotonic() - t) * 1000)
                assert st == 200 and op["state"] == "succeeded", op
        # a sandbox keeps at most 64 snapshots
        image = glob.glob(os.path.join(a.data_dir, "**", "sandboxes", sid, "rootfs.img"), recursive=True)[0]
        copy = os.path.join(os.path.dirname(image), "bench-copy.img")
        snaps = []
        for _ in range(min(a.n, 50)):
            t = time.monotonic()
            st, snap = call("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "disk"})
            res["disk snapshot"].append((time.monotonic() - t) * 1000)
            assert st == 201, snap
            snaps.append(snap["id"])
            t = time.monotonic()
            subprocess.run(["cp", "--reflink=always", image, copy], check=True)
            res["raw cp --reflink"].append((time.monotonic() - t) * 1000)
            os.unlink(copy)
        for _ in range(max(3, a.n // 4)):
            t = time.monotonic()
            st, op = call("POST", f"/v1/sandboxes/{sid}/rollback?wait=true", {"snapshot": snaps[0]})
            res["rollback"].append((time.monotonic() - t) * 1000)
            assert st == 200 and op["state"] == "succeeded", op
    finally:
        call("DELETE", f"/v1/sandboxes/{sid}")
        raw_proc.kill()
        raw_proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    for k, xs in res.items():
        if xs:
            print(line(k, xs))
    if res["raw stop"]:
        print(f"ratio pause/raw stop: {statistics.median(res['pause']) / statistics.median(res['raw stop']):.1f}x, "
              f"resume/raw cont: {statistics.median(res['resume']) / statistics.median(res['raw cont']):.1f}x")
    if res["raw cp --reflink"]:
        print(f"ratio disk snapshot/raw cp --reflink: "
              f"{statistics.median(res['disk snapshot']) / statistics.median(res['raw cp --reflink']):.1f}x")


if __name__ == "__main__":
    main()
