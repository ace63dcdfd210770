#!/usr/bin/env python3
"""Service-port benchmark: what a request to a server in the sandbox costs
through the API (docs/network.md, "Service ports").

  sudo AIRLOCK_BUILD_DIR=$PWD/build AIRLOCK_TEST_VOLUME=$PWD/build/test-vol \\
      python3 bench/ports.py [--n 200] [--mib 64]

Starts its own Airlock with tests/harness.py's settings (the test volume's
templates), one minimal sandbox running busybox httpd on port 8000, and
times from the host, N times each over one kept-alive client connection:
the raw baseline, a GET of the sandbox (airlockd and the node, no guest);
a GET of a small page through /v1/sandboxes/ID/ports/8000/ (airlockd, the
node, airlock-nodemgr's socket in the VM's namespace, the guest's server);
and once a --mib MiB download through the port. The guest's own share is
the same page and the same download over its loopback (busybox wget inside
the guest, a process per request)."""

import argparse
import http.client
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import harness  # noqa: E402


def timed(conn, token, path, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            raise SystemExit(f"GET {path}: {r.status}")
        out.append((time.perf_counter() - t) * 1000)
    out.sort()
    return {"p50": statistics.median(out), "p90": out[int(0.9 * len(out))], "max": out[-1]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--mib", type=int, default=64)
    a = ap.parse_args()
    al = harness.Airlock(harness.volume_tempdir("airlock-bench-ports-"), prebuild="minimal")
    try:
        al.wait_ready(1800)
        sid = al.create("minimal")["id"]
        al.put_file(sid, "/root/www/index.html", b"<h1>hello</h1>\n")
        al.exec(sid, ["dd", "if=/dev/urandom", "of=/root/www/big.bin", "bs=1M", f"count={a.mib}"], timeout_s=600)
        al.exec(sid, ["httpd", "-p", "8000", "-h", "/root/www"])
        conn = http.client.HTTPConnection("127.0.0.1", al.port, timeout=600)
        timed(conn, al.token, f"/v1/sandboxes/{sid}/ports/8000/index.html", 5)  # warm
        base = timed(conn, al.token, f"/v1/sandboxes/{sid}", a.n)
        port = timed(conn, al.token, f"/v1/sandboxes/{sid}/ports/8000/index.html", a.n)
        t = time.perf_counter()
        conn.request("GET", f"/v1/sandboxes/{sid}/ports/8000/big.bin", headers={"Authorization": f"Bearer {al.token}"})
        r = conn.getresponse()
        got = len(r.read())
        dl = got / (1 << 20) / (time.perf_counter() - t)
        if got != a.mib << 20:
            raise SystemExit(f"downloaded {got} bytes of {a.mib << 20}")
        # (busybox's date has no nanoseconds: the guest's uptime, in centiseconds, over seconds of download)
        out = al.exec(sid, ["sh", "-c", "read s _ < /proc/uptime; wget -q -O /dev/null http://127.0.0.1:8000/big.bin; "
                                        "read e _ < /proc/uptime; echo $s $e"], timeout_s=600)
        s0, s1 = (float(x) for x in out["stdout"].split())
        loopback = a.mib / max(s1 - s0, 0.01)
        # the guest's own share of a small request: N over its loopback (with a wget process each)
        k = 50
        out = al.exec(sid, ["sh", "-c", f"read s _ < /proc/uptime; i=0; while [ $i -lt {k} ]; do "
                                        "wget -q -O /dev/null http://127.0.0.1:8000/index.html; i=$((i+1)); done; "
                                        "read e _ < /proc/uptime; echo $s $e"], timeout_s=600)
        s0, s1 = (float(x) for x in out["stdout"].split())
        guest_ms = (s1 - s0) * 1000 / k
        print(f"n={a.n}, download {a.mib} MiB")
        print(f"{'request':44} {'p50 ms':>8} {'p90 ms':>8} {'max ms':>8}")
        for label, s in (("GET /v1/sandboxes/ID (baseline: API + node)", base),
                         ("GET /v1/sandboxes/ID/ports/8000/index.html", port)):
            print(f"{label:44} {s['p50']:8.2f} {s['p90']:8.2f} {s['max']:8.2f}")
        print(f"added by the port over the baseline: p50 {port['p50'] - base['p50']:.2f} ms "
              f"(x{port['p50'] / base['p50']:.1f})")
        print(f"the same page over the guest's loopback, wget in the guest: {guest_ms:.2f} ms a request (mean of {k})")
        print(f"download through the port: {dl:.1f} MiB/s; the guest's loopback: {loopback:.1f} MiB/s "
              f"({dl / loopback * 100:.0f} %)")
        conn.close()
        al.request("DELETE", f"/v1/sandboxes/{sid}")
    finally:
        al.stop()
        harness._remove(al)


if __name__ == "__main__":
    main()
