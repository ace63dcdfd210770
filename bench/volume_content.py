#!/usr/bin/env python3
"""E2B's volume content API (docs/volumes.md, "Its files without a
sandbox"): what a request on a volume's files costs, on an Airlock of its
own (scale.py's Instance, warm pools off), --n requests per case:

  helper    nothing holds the volume: each request makes a helper sandbox
            with it mounted and deletes it before answering
  holder    a running sandbox holds it read-write: the requests go through
            its guest (no helper)
  baseline  the same operation on that sandbox through /v1's files API
            (GET .../files, PUT .../files): the node's file ops without
            the volume's root

Operations: a stat (GET /volumecontent/ID/path), a 1 MiB write (PUT
.../file) and its read (GET .../file). Medians and p90 in ms, and the
ratio of each case's median to the baseline's.

  sudo bench/volume_content.py [--n 15] [--templates-dir DIR] [--base DIR] [--airlockd PATH] [--json FILE]
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale import Instance, default_templates_dir  # noqa: E402

MIB = 1 << 20


def request(inst, method, path, body=None, token=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", inst.port, timeout=600)
    h = dict(headers or {})
    h.setdefault("Authorization", "Bearer " + (token or inst.token))
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    out = r.read()
    c.close()
    assert 200 <= r.status < 300, (method, path, r.status, out[:300])
    return out


def timed(fn, n):
    xs = []
    for _ in range(n):
        t = time.monotonic()
        fn()
        xs.append((time.monotonic() - t) * 1000)
    xs.sort()
    return {"p50": statistics.median(xs), "p90": xs[int(0.9 * (len(xs) - 1))], "n": n}


def ops(inst, prefix, token, data):
    """The three operations as calls on prefix (a volume's content API, or
    a sandbox's /v1 files)."""
    if prefix.startswith("/volumecontent/"):
        return {
            "stat": lambda: request(inst, "GET", f"{prefix}/path?path=/bench", token=token),
            "write 1 MiB": lambda: request(inst, "PUT", f"{prefix}/file?path=/bench", data, token=token),
            "read 1 MiB": lambda: request(inst, "GET", f"{prefix}/file?path=/bench", token=token),
        }
    return {
        "stat": lambda: request(inst, "GET", f"{prefix}/ls?path=/vol"),
        "write 1 MiB": lambda: request(inst, "PUT", f"{prefix}/files?path=/vol/bench", data),
        "read 1 MiB": lambda: request(inst, "GET", f"{prefix}/files?path=/vol/bench"),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=15)
    ap.add_argument("--templates-dir")
    ap.add_argument("--base")
    ap.add_argument("--airlockd")
    ap.add_argument("--json")
    a = ap.parse_args()
    tdir = os.path.abspath(a.templates_dir or default_templates_dir())
    base = os.path.abspath(a.base or os.path.dirname(tdir))
    inst = Instance(base, tdir, {"AIRLOCK_POOL_SIZE": "0",
                                 "AIRLOCK_SNAPSHOT_POLICY": json.dumps({"disk_every": 0, "full_every": 0})},
                    a.airlockd)
    data = os.urandom(MIB)
    res = {}
    try:
        inst.wait_ready(1800)
        st, vol = inst.call("POST", "/v1/volumes", {"name": "bench", "size": "256M"})
        assert st == 201, (st, vol)
        token = json.loads(request(inst, "GET", f"/volumes/{vol['id']}", headers={"X-API-Key": inst.token,
                                                                               "Authorization": ""}))["token"]
        content = f"/volumecontent/{vol['id']}"
        request(inst, "PUT", f"{content}/file?path=/bench", data, token=token)
        # one round of each first: the template's first create warms caches
        for fn in ops(inst, content, token, data).values():
            fn()
        res["helper"] = {k: timed(fn, a.n) for k, fn in ops(inst, content, token, data).items()}
        st, sbx = inst.call("POST", "/v1/sandboxes", {"template": "minimal",
                                                      "volumes": [{"name": "bench", "path": "/vol"}]})
        assert st == 201, (st, sbx)
        res["holder"] = {k: timed(fn, a.n) for k, fn in ops(inst, content, token, data).items()}
        res["baseline"] = {k: timed(fn, a.n) for k, fn in ops(inst, f"/v1/sandboxes/{sbx['id']}", None, data).items()}
        inst.call("DELETE", f"/v1/sandboxes/{sbx['id']}")
        inst.call("DELETE", "/v1/volumes/bench")
    finally:
        left = inst.stop()
    print(f"{'operation':<14} {'case':<9} {'p50 ms':>8} {'p90 ms':>8} {'x baseline':>10}")
    for op in res["baseline"]:
        for case in ("helper", "holder", "baseline"):
            r = res[case][op]
            ratio = r["p50"] / res["baseline"][op]["p50"]
            print(f"{op:<14} {case:<9} {r['p50']:8.1f} {r['p90']:8.1f} {ratio:10.2f}")
    if left:
        print(f"leftovers killed: {left}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
