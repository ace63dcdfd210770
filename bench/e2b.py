#!/usr/bin/env python3
"""The E2B front door against Airlock's own API, in the same run: a new
sandbox and its first command, through the public e2b SDK
(Sandbox.create() + commands.run('true')) and through /v1 (POST
/v1/sandboxes + POST exec of the same command, `bash -l -c true`, which is
what the SDK has envd run), rounds interleaved in one warmed-up client
process (bench/e2b-driver.mjs), so both pay the same client costs; then
commands.run round trips against /v1 exec round trips.

  sudo bench/e2b.py [--n 20] [--rtt 50] [--template python]

Needs a running Airlock (./run.sh): --url and --token, or --data-dir
(reads DATA_DIR/control/admin.token). Node.js and the SDK come from
scripts/e2b-sdk.sh (pinned, installed into build/e2b-sdk). Prints medians
and tails and the ratios SDK/native (the issue's target: create + first
run at most 1.2x)."""

import argparse
import json
import os
import shutil
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def pct(xs, p):
    xs = sorted(xs)
    return xs[max(0, min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1)))))]


def summary(name, xs):
    return (f"{name:<34} n={len(xs):<4} median={statistics.median(xs):8.1f} ms  "
            f"p90={pct(xs, 90):8.1f}  p99={pct(xs, 99):8.1f}  max={max(xs):8.1f}")


def sdk(node, env, driver, *args):
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
    node = subprocess.run([os.path.join(ROOT, "scripts", "e2b-sdk.sh")], capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]
    build = os.environ.get("AIRLOCK_BUILD_DIR", os.path.join(ROOT, "build"))
    # below the SDK's install: node finds it from the importing file's
    # directory up (scripts/e2b-sdk.sh replaces scenarios/ on each run)
    os.makedirs(os.path.join(build, "e2b-sdk", "bench"), exist_ok=True)
    driver = os.path.join(build, "e2b-sdk", "bench", "e2b-driver.mjs")
    shutil.copy(os.path.join(HERE, "e2b-driver.mjs"), driver)
    env = dict(os.environ, E2B_API_URL=a.url, E2B_SANDBOX_URL=a.url, E2B_API_KEY=token)
    env.pop("E2B_DEBUG", None)

    env["AIRLOCK_TOKEN"] = token
    r = sdk(node, env, driver, "create", a.template, str(a.n))
    nat, e2b = r["native"], r["sdk"]
    print(f"template {a.template}, {a.n} rounds each, interleaved, one client process (warmed up)")
    for key in ("create_ms", "first_run_ms", "total_ms"):
        print(summary(f"native {key}", [x[key] for x in nat]))
        print(summary(f"e2b sdk {key}", [x[key] for x in e2b]))
    for key in ("create_ms", "total_ms"):
        ratio = statistics.median(x[key] for x in e2b) / statistics.median(x[key] for x in nat)
        print(f"ratio e2b/native {key} (medians): {ratio:.2f}")
    r = sdk(node, env, driver, "rtt", a.template, str(a.rtt))
    print(summary("native exec round trip", r["native"]))
    print(summary("e2b commands.run round trip", r["sdk"]))
    print(f"ratio e2b/native round trip (medians): {statistics.median(r['sdk']) / statistics.median(r['native']):.2f}")


if __name__ == "__main__":
    main()
