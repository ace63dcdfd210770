#!/usr/bin/env python3
"""Suspend and wake through an S3 object store against plain curl moving the
same bytes, in the same run: OpenStack Swift with its S3 API
(tests/s3lab.py) on this machine, an Airlock of our own pointed at it.

  sudo bench/objstore.py [--rounds N] [--template python] [--templates-dir DIR]

Each round, on one sandbox with 64 MiB of random bytes in its guest
memory (tmpfs) and its disk as the template left it:

  - suspend, until the API says the image is restorable in the object
    store (its sealed artifacts and manifest have landed), against
    `curl --aws-sigv4` uploading the same stored bytes (the sealed blobs,
    fetched back from the bucket) one after the other;
  - wake with the node's copy removed (the artifacts come from the
    bucket), against curl downloading the same bytes plus a wake from the
    node's copy (the restore without the download) measured in the same
    round.

The cost of the encryption itself is lib/seal's: bench/seal-speed seals
and opens a file of the same stored size; see docs/benchmarks.md.
Medians and the worst round are printed; every figure is what a client
sees (the API), the bytes are what the bucket holds."""

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from scale import Instance, default_templates_dir  # noqa: E402
from s3lab import SwiftS3  # noqa: E402


def verb(inst, sid, name):
    st, op = inst.call("POST", f"/v1/sandboxes/{sid}/{name}?wait=true")
    assert st == 200 and op["state"] == "succeeded", (name, st, op)
    return op


def curl(lab, method, key, path):
    """One signed request by curl itself: PUT the file at path, or GET into
    it. Returns milliseconds."""
    with open(lab.key_file) as f:
        secret = f.read()
    sha = "UNSIGNED-PAYLOAD"
    if method == "PUT":
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        sha = h.hexdigest()  # what Airlock sends too: the payload's hash, signed
    url = f"http://test%3Atester:{secret}@127.0.0.1:{lab.port}{key}"
    args = ["curl", "-sS", "-f", "--aws-sigv4", f"aws:amz:{lab.region}:s3", "-H", f"x-amz-content-sha256: {sha}"]
    args += ["-T", path, url] if method == "PUT" else ["-o", path, url]
    t = time.monotonic()
    subprocess.run(args, check=True)
    return (time.monotonic() - t) * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--template", default="python")
    ap.add_argument("--templates-dir")
    ap.add_argument("--base", help="where the data dirs go (default: next to the templates dir)")
    a = ap.parse_args()
    tdir = a.templates_dir or default_templates_dir()
    base = a.base or os.path.dirname(os.path.abspath(tdir))

    lab = SwiftS3(base_dir="/tmp")
    lab.start()
    keys = tempfile.mkdtemp(prefix="s3keys-", dir=base)
    os.chmod(keys, 0o755)
    inst = None
    try:
        bucket = lab.make_bucket("airlock-bench")
        access, secret = lab.write_key_files(keys, owner="airlock-node")
        lab.key_file = secret
        env = {"AIRLOCK_OBJSTORE": f"s3://{bucket}?endpoint={lab.endpoint}&region={lab.region}",
               "AIRLOCK_S3_ACCESS_KEY_FILE": access, "AIRLOCK_S3_SECRET_KEY_FILE": secret,
               "AIRLOCK_POOL_SIZE": "0", "AIRLOCK_IDLE_TIMEOUT_S": "0"}
        inst = Instance(base, tdir, env=env, prebuild=a.template).wait_ready()
        st, sb = inst.call("POST", "/v1/sandboxes", {"template": a.template})
        assert st == 201, (st, sb)
        sid = sb["id"]
        fill = "mount -t tmpfs -o size=80m tmpfs /mnt && head -c 67108864 /dev/urandom > /mnt/x && sync"
        st, r = inst.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["sh", "-c", fill]})
        assert st == 200 and r["exit_code"] == 0, r
        sdir = os.path.join(inst.data_dir, "sandboxes", sid)
        work = tempfile.mkdtemp(prefix="objstore-bench-", dir=base)

        rows = {"suspend until restorable": [], "curl PUT of the same bytes": [],
                "wake from the bucket": [], "curl GET of the same bytes + wake from the node's copy": [],
                "wake from the node's copy": []}
        stored = 0
        for _ in range(a.rounds):
            t = time.monotonic()
            verb(inst, sid, "suspend")
            while not inst.call("GET", f"/v1/sandboxes/{sid}")[1].get("image_uploaded"):
                time.sleep(0.01)
            rows["suspend until restorable"].append((time.monotonic() - t) * 1000)
            # the stored bytes: the manifest's blobs, fetched back by curl
            r = lab.request("GET", f"/{bucket}/snapshots/{sid}.suspended/manifest.json")
            assert r.status == 200, r
            m = json.loads(r.body)
            blobs = [x["blob"] for x in m["artifacts"]]
            stored = sum(x["size"] for x in m["artifacts"])
            get_ms = sum(curl(lab, "GET", f"/{bucket}/blobs/{b}", os.path.join(work, b)) for b in blobs)
            put_ms = sum(curl(lab, "PUT", f"/{bucket}/bench-copy/{b}", os.path.join(work, b)) for b in blobs)
            for b in blobs:
                os.unlink(os.path.join(work, b))
                lab.request("DELETE", f"/{bucket}/bench-copy/{b}")
            rows["curl PUT of the same bytes"].append(put_ms)

            t = time.monotonic()
            verb(inst, sid, "wake")  # from the node's copy
            local = (time.monotonic() - t) * 1000
            rows["wake from the node's copy"].append(local)
            rows["curl GET of the same bytes + wake from the node's copy"].append(get_ms + local)

            verb(inst, sid, "suspend")
            while not inst.call("GET", f"/v1/sandboxes/{sid}")[1].get("image_uploaded"):
                time.sleep(0.01)
            while not os.path.exists(os.path.join(sdir, "suspend", "uploaded")):
                time.sleep(0.01)
            shutil.rmtree(os.path.join(sdir, "suspend"))
            t = time.monotonic()
            verb(inst, sid, "wake")
            rows["wake from the bucket"].append((time.monotonic() - t) * 1000)
        st, r = inst.call("POST", f"/v1/sandboxes/{sid}/exec",
                          {"cmd": ["sh", "-c", "test $(stat -c %s /mnt/x) -eq 67108864"]})
        assert st == 200 and r["exit_code"] == 0, r
        inst.call("DELETE", f"/v1/sandboxes/{sid}")
        shutil.rmtree(work, ignore_errors=True)

        def med(k):
            return statistics.median(rows[k])
        print(f"{a.template}, {a.rounds} rounds, {stored / 1e6:.1f} MB stored per image (sealed, holes not stored)")
        for k, xs in rows.items():
            print(f"  {k:58s} p50 {statistics.median(xs):8.0f} ms   max {max(xs):8.0f} ms")
        print(f"  suspend / curl PUT: {med('suspend until restorable') / med('curl PUT of the same bytes'):.2f}x "
              f"(target <= 1.3x)")
        print(f"  wake from the bucket / (curl GET + wake from the node's copy): "
              f"{med('wake from the bucket') / med('curl GET of the same bytes + wake from the node' + chr(39) + 's copy'):.2f}x "
              f"(target <= 1.3x)")
    finally:
        if inst:
            inst.stop()
        lab.stop()
        shutil.rmtree(keys, ignore_errors=True)


if __name__ == "__main__":
    main()
