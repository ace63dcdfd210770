#!/usr/bin/env python3
"""The E2B front door against Airlock's own API, in the same run: a new
sandbox and its first command, through the public e2b SDK
(Sandbox.create() + commands.run('true')) and through /v1 (POST
/v1/sandboxes + POST exec of the same command, `bash -l -c true`, which is
what the SDK has envd run), rounds interleaved; then commands.run round
trips against /v1 exec round trips.

  sudo bench/e2b.py [--n 20] [--rtt 50] [--template python]

Needs a running Airlock (./run.sh): --url and --token, or --data-dir
(reads DATA_DIR/control/admin.token). Node.js and the SDK come from
scripts/e2b-sdk.sh (pinned, installed into build/e2b-sdk). Prints medians
and tails and the ratios SDK/native (the issue's target: create + first
run at most 1.2x)."""

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CMD = ["/bin/bash", "-l", "-c", "true"]


def pct(xs, p):
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1)))))]


def summary(name, xs):
    return (f"{name:<34} n={len(xs):<4} median={statistics.median(xs):8.1f} ms  "
            f"p90={pct(xs, 90):8.1f}  p99={pct(xs, 99):8.1f}  max={max(xs):8.1f}")


class Api:
    def __init__(self, url, token):
        host, port = url.split("//")[1].rstrip("/").split(":")
        self.host, self.port, self.token = host, int(port), token

    def call(self, method, path, body=None):
        c = http.client.HTTPConnection(self.host, self.port, timeout=600)
        h = {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = r.read()
        c.close()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {out[:300]!r}")
        return json.loads(out) if out else None


def native_create(api, template):
    t0 = time.monotonic()
    sbx = api.call("POST", "/v1/sandboxes", {"template": template})
    t1 = time.monotonic()
    r = api.call("POST", f"/v1/sandboxes/{sbx['id']}/exec", {"cmd": CMD})
    t2 = time.monotonic()
    assert r["exit_code"] == 0, r
    api.call("DELETE", f"/v1/sandboxes/{sbx['id']}")
    return {"create_ms": (t1 - t0) * 1000, "first_run_ms": (t2 - t1) * 1000, "total_ms": (t2 - t0) * 1000}


def native_rtt(api, template, n):
    sbx = api.call("POST", "/v1/sandboxes", {"template": template})
    try:
        api.call("POST", f"/v1/sandboxes/{sbx['id']}/exec", {"cmd": CMD})
        out = []
        for _ in range(n):
            t = time.monotonic()
            api.call("POST", f"/v1/sandboxes/{sbx['id']}/exec", {"cmd": CMD})
            out.append((time.monotonic() - t) * 1000)
        return out
    finally:
        api.call("DELETE", f"/v1/sandboxes/{sbx['id']}")


def sdk(node, env, *args):
    driver = os.path.join(ROOT, os.environ.get("AIRLOCK_BUILD_DIR", "build"), "e2b-sdk", "scenarios", "e2b-driver.mjs")
    p = subprocess.run([node, driver, *args], env=env, capture_output=True, text=True, timeout=900)
    if p.returncode:
        raise RuntimeError(f"e2b-driver {' '.join(args)}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default=os.environ.get("AIRLOCK_URL", "http://127.0.0.1:7420"))
    ap.add_argument("--data-dir", default=os.environ.get("AIRLOCK_DATA_DIR", "/var/lib/airlock"))
    ap.add_argument("--token")
    ap.add_argument("--template", default="python")
    ap.add_argument("--n", type=int, default=20, help="create rounds of each kind")
    ap.add_argument("--rtt", type=int, default=50, help="command round trips of each kind")
    a = ap.parse_args()
    token = a.token or open(os.path.join(a.data_dir, "control", "admin.token")).read().strip()
    api = Api(a.url, token)
    node = subprocess.run([os.path.join(ROOT, "scripts", "e2b-sdk.sh")], capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]
    build = os.environ.get("AIRLOCK_BUILD_DIR", os.path.join(ROOT, "build"))
    shutil.copy(os.path.join(HERE, "e2b-driver.mjs"), os.path.join(build, "e2b-sdk", "scenarios"))
    env = dict(os.environ, E2B_API_URL=a.url, E2B_SANDBOX_URL=a.url, E2B_API_KEY=token)
    env.pop("E2B_DEBUG", None)

    # one of each first, not counted: the template's pages, the SDK's imports
    native_create(api, a.template)
    sdk(node, env, "create", a.template)
    nat, e2b = [], []
    for _ in range(a.n):  # interleaved, so the machine's noise falls on both
        nat.append(native_create(api, a.template))
        e2b.append(sdk(node, env, "create", a.template))
    print(f"template {a.template}, {a.n} rounds each, interleaved")
    for key in ("create_ms", "first_run_ms", "total_ms"):
        print(summary(f"native {key}", [r[key] for r in nat]))
        print(summary(f"e2b sdk {key}", [r[key] for r in e2b]))
    for key in ("create_ms", "total_ms"):
        ratio = statistics.median(r[key] for r in e2b) / statistics.median(r[key] for r in nat)
        print(f"ratio e2b/native {key} (medians): {ratio:.2f}")

    rn = native_rtt(api, a.template, a.rtt)
    re = sdk(node, env, "rtt", a.template, str(a.rtt))["rtt_ms"]
    print(summary("native exec round trip", rn))
    print(summary("e2b commands.run round trip", re))
    print(f"ratio e2b/native round trip (medians): {statistics.median(re) / statistics.median(rn):.2f}")


if __name__ == "__main__":
    main()
