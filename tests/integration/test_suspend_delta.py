"""A suspended sandbox's image is what differs from its template
(docs/storage.md, "What a suspend stores"): its RAM and disk as deltas
against its template build, the build stored once for every image of it.
A wake rebuilds the state and disk against the node's own copy of the
build when that copy is the same bytes, fetches the image's copy when not,
and refuses what does not rebuild to the digests the image recorded."""

import json
import os
import shutil
import subprocess

from harness import START_TIMEOUT, TEMPLATES, Airlock, volume_tempdir, wait_for


def store(a):
    return os.path.join(a.data_dir, "objstore")


def store_bytes(a):
    d = os.path.join(store(a), "blobs")
    return sum(os.stat(os.path.join(d, b)).st_size for b in os.listdir(d)) if os.path.isdir(d) else 0


def artifacts(a, snap):
    with open(os.path.join(store(a), "snapshots", snap, "manifest.json")) as f:
        return {x["name"]: x["size"] for x in json.load(f)["artifacts"]}


def suspend(a, sid):
    """Suspends sid, waits for its image to land; its snapshot id."""
    op = a.api("POST", f"/v1/sandboxes/{sid}/suspend?wait=true")
    assert op["state"] == "succeeded", op
    wait_for(lambda: a.api("GET", f"/v1/sandboxes/{sid}").get("image_uploaded"), "the image uploaded", a)
    return op["result"]["suspended"]["snapshot"]


def drop_local_copy(a, sid):
    """Removes the node's own copy of a suspended sandbox: a wake must then
    come from the object store, as on a node that never had it."""
    d = os.path.join(a.data_dir, "sandboxes", sid, "suspend")
    wait_for(lambda: os.path.exists(os.path.join(d, "uploaded")), "the node done with the upload", a)
    shutil.rmtree(d)


def wake(a, sid):
    """The wake's operation, as it ended."""
    return a.api("POST", f"/v1/sandboxes/{sid}/wake?wait=true", timeout=600)


def test_suspend_stores_what_differs_and_wakes_from_it(airlock_factory):
    a = airlock_factory(prebuild="minimal")
    s1 = a.create("minimal")["id"]
    s2 = a.create("minimal")["id"]
    a.exec(s1, ["sh", "-c", "head -c 300000 /dev/urandom > /root/f && md5sum /root/f > /root/f.md5 && sync"])
    want = a.exec(s1, ["cat", "/root/f.md5"])["stdout"]

    before = store_bytes(a)
    snap1 = suspend(a, s1)
    arts = artifacts(a, snap1)
    assert set(arts) == {"state.delta", "rootfs.delta", "base.mem", "base.rootfs.img"}, arts
    own = arts["state.delta"] + arts["rootfs.delta"]
    base = arts["base.mem"] + arts["base.rootfs.img"]
    # what the sandbox wrote (300 kB) and little more, against a template of megabytes
    assert 300000 < own < base / 4, arts
    first = store_bytes(a) - before
    # a second image of the same template adds only its own part
    before = store_bytes(a)
    snap2 = suspend(a, s2)
    second = store_bytes(a) - before
    arts2 = artifacts(a, snap2)
    assert second == arts2["state.delta"] + arts2["rootfs.delta"] < own, (first, second, arts2)
    assert first >= base

    # woken from the object store against this node's copy of the build
    drop_local_copy(a, s1)
    op = wake(a, s1)
    assert op["state"] == "succeeded", op
    assert a.exec(s1, ["cat", "/root/f.md5"])["stdout"] == want
    assert a.exec(s1, ["md5sum", "/root/f"])["stdout"] == want
    assert "fetching the image's copy" not in a.log_tail(400)
    snap1 = suspend(a, s1)
    drop_local_copy(a, s1)
    drop_local_copy(a, s2)
    a.stop()

    # a node whose build of the template is other bytes (its own build: the
    # same recipe, another RAM snapshot) fetches the image's copy of it
    private = volume_tempdir("tpl-private-")
    b = None
    try:
        for n in os.listdir(TEMPLATES):
            if n.startswith("kernel-") and not n.endswith(".lock"):
                subprocess.run(["cp", "-a", "--reflink=always", os.path.join(TEMPLATES, n), private], check=True)
        b = Airlock(a.data_dir, env_extra={"AIRLOCK_TEMPLATES_DIR": private}, prebuild="minimal")
        b.wait_ready(START_TIMEOUT)
        op = wake(b, s1)
        assert op["state"] == "succeeded", op
        log = b.log_tail(400)
        assert "is other bytes than the image's template" in log and "fetching the image's copy" in log, log
        assert b.exec(s1, ["md5sum", "/root/f"])["stdout"] == want

        # a base that claims to be the image's bytes but is not: the rebuilt
        # state does not match the image's digest, the wake refuses
        build = next(os.path.join(private, n) for n in os.listdir(private)
                     if n.startswith("minimal-") and not n.endswith(".lock"))
        digests = os.path.join(build, "base.digests.json")
        # the digests of the first node's build, which the image is against
        # (its upload wrote them beside that build)
        shutil.copy(os.path.join(TEMPLATES, os.path.basename(build), "base.digests.json"), digests)
        op = wake(b, s2)
        assert op["state"] == "failed" and "does not rebuild" in op["error"]["message"], op
        assert b.api("GET", f"/v1/sandboxes/{s2}")["state"] == "suspended"
        # the control: without the false claim it wakes, and takes the
        # image's copy of the template from the cache the first wake filled
        os.unlink(digests)
        op = wake(b, s2)
        assert op["state"] == "succeeded", op
        assert b.exec(s2, ["echo", "ok"])["stdout"] == "ok\n"
        assert "its template is in this node's cache" in b.log_tail(200)
        for s in (s1, s2):
            assert b.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204
    finally:
        if b:
            b.stop()
        shutil.rmtree(private, ignore_errors=True)
