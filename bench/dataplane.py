#!/usr/bin/env python3
"""Data-plane benchmark against a running Airlock: exec round trips of
`true` and a 20 MiB file up and down through the public API, on one sandbox.

  bench/dataplane.py [--n 50] [--template minimal] [--data-dir /var/lib/airlock]

The raw baseline for the file transfers is the same bytes written to and
read back from a local file in the data dir (the machine without a VM)."""

import argparse
import http.client
import json
import os
import statistics
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=7420)
    ap.add_argument("--data-dir", default=os.environ.get("AIRLOCK_DATA_DIR", "/var/lib/airlock"))
    ap.add_argument("--template", default="minimal")
    ap.add_argument("--n", type=int, default=50)
    a = ap.parse_args()
    tok = open(os.path.join(a.data_dir, "control", "admin.token")).read().strip()

    def call(method, path, body=None, raw=None):
        c = http.client.HTTPConnection(a.host, a.port, timeout=300)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        c.request(method, path, body=data, headers={"Authorization": "Bearer " + tok})
        r = c.getresponse()
        out = r.read()
        c.close()
        return r.status, out

    st, out = call("POST", "/v1/sandboxes", {"template": a.template})
    assert st == 201, out
    sid = json.loads(out)["id"]
    try:
        xs = []
        for _ in range(a.n):
            t = time.monotonic()
            st, out = call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
            xs.append((time.monotonic() - t) * 1000)
            assert st == 200 and json.loads(out)["exit_code"] == 0, out
        xs.sort()
        print(f"exec `true`        n={a.n} median={statistics.median(xs):.1f} ms "
              f"p90={xs[int(0.9 * (len(xs) - 1))]:.1f} max={xs[-1]:.1f}")

        data = os.urandom(20 << 20)
        # baseline: the same bytes written to and read back from a local file
        import tempfile
        with tempfile.NamedTemporaryFile(dir=a.data_dir) as f:
            t = time.monotonic()
            f.write(data)
            f.flush()
            up_raw = time.monotonic() - t
            t = time.monotonic()
            with open(f.name, "rb") as g:
                assert g.read() == data
            down_raw = time.monotonic() - t
        t = time.monotonic()
        st, _ = call("PUT", f"/v1/sandboxes/{sid}/files?path=/root/big", raw=data)
        up = time.monotonic() - t
        t = time.monotonic()
        st2, got = call("GET", f"/v1/sandboxes/{sid}/files?path=/root/big")
        down = time.monotonic() - t
        assert st == 200 and st2 == 200 and got == data
        print(f"20 MiB upload      {up * 1000:.0f} ms ({20 / up:.1f} MiB/s; local file write {up_raw * 1000:.0f} ms, "
              f"{up / up_raw:.1f}x)")
        print(f"20 MiB download    {down * 1000:.0f} ms ({20 / down:.1f} MiB/s; local file read {down_raw * 1000:.0f} ms, "
              f"{down / down_raw:.1f}x)")
    finally:
        call("DELETE", f"/v1/sandboxes/{sid}")


if __name__ == "__main__":
    main()
