"""Suspend and wake through an S3 object store: a real one, OpenStack Swift
with its S3 API started from Debian's packages (tests/s3lab.py) for each
test and stopped after it."""
import json
import os
import re
import shutil
import tempfile

import pytest

from harness import VOLUME
from s3lab import SwiftS3
from test_fork_suspend import verb, wait_for, wakes
from test_recovery import alive_in_guest, start_sleeper


@pytest.fixture
def swift():
    lab = SwiftS3(base_dir="/tmp")
    lab.start()
    try:
        yield lab
    finally:
        lab.stop()


def s3_env(lab, bucket, keys_dir, secret=None):
    """The node's settings for lab's bucket; the key files readable by the
    node's user alone."""
    access, secret_path = lab.write_key_files(keys_dir, owner="airlock-node")
    if secret is not None:
        with open(secret_path, "w") as f:
            f.write(secret)
    return {"AIRLOCK_OBJSTORE": f"s3://{bucket}/airlock?endpoint={lab.endpoint}&region={lab.region}",
            "AIRLOCK_S3_ACCESS_KEY_FILE": access, "AIRLOCK_S3_SECRET_KEY_FILE": secret_path}


@pytest.fixture
def keys_dir():
    d = tempfile.mkdtemp(prefix="s3keys-", dir=VOLUME)
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def keys_in(lab, bucket, prefix="airlock/"):
    r = lab.request("GET", f"/{bucket}", query=[("list-type", "2"), ("prefix", prefix)])
    assert r.status == 200, r
    return re.findall(r"<Key>([^<]*)</Key>", r.body.decode())


def tree_contains(root, needle):
    """Whether any file under root holds needle (read in pieces: the
    disk is large)."""
    for d, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                tail = b""
                while chunk := fh.read(16 << 20):
                    if needle in tail + chunk:
                        return True
                    tail = chunk[-(len(needle) - 1):]
    return False


def manifests(lab, bucket):
    return [k for k in keys_in(lab, bucket) if k.endswith("/manifest.json")]


def test_suspend_to_s3_survives_the_server_dying_and_wakes_from_it(swift, keys_dir, airlock_factory):
    """A sandbox suspended to S3: its upload held after the first artifact,
    the S3 server killed, the upload fails and the bucket holds no manifest
    (nothing restorable half done); the server back, the upload lands on
    its own, and the node, its local copy gone, wakes the sandbox from the
    bucket with its disk and its processes."""
    lab = swift
    bucket = lab.make_bucket("airlock-sus")
    release = tempfile.mktemp(prefix="release-", dir=VOLUME)
    env = s3_env(lab, bucket, keys_dir)
    env.update({"AIRLOCK_TEST_HOLD": "suspend.uploading", "AIRLOCK_TEST_HOLD_RELEASE": release})
    a = airlock_factory(prebuild="minimal", env=env)
    try:
        assert "object store: bucket airlock-sus at " + lab.endpoint in a.log_tail(400)
        sid = a.create("minimal")["id"]
        fill = "echo kept > /root/f && for i in $(seq 2000); do echo airlock-s3-known-plaintext; done > /root/g && sync"
        assert a.exec(sid, ["sh", "-c", fill])["exit_code"] == 0
        sleeper = start_sleeper(a, sid)
        assert verb(a, sid, "suspend")["state"] == "succeeded"
        wait_for(lambda: "test hold point suspend.uploading reached" in a.log_tail(400), "no hold", a)
        assert any(k.startswith("airlock/blobs/") for k in keys_in(lab, bucket))  # the first artifact
        assert manifests(lab, bucket) == []

        lab.kill_proxy()
        open(release, "w").close()
        wait_for(lambda: "uploading the suspended image" in a.log_tail(400) and "failed" in a.log_tail(400),
                 "the upload did not fail with the server gone", a)
        assert a.api("GET", f"/v1/sandboxes/{sid}")["image_uploaded"] is False
        lab.restart_proxy()
        assert manifests(lab, bucket) == []  # still nothing restorable
        wait_for(lambda: a.api("GET", f"/v1/sandboxes/{sid}")["image_uploaded"], "the upload never resumed", a,
                 timeout=120)
        assert len(manifests(lab, bucket)) == 1
        keys = keys_in(lab, bucket)
        assert any(k.startswith("airlock/blobs/") for k in keys), keys
        for k in keys:  # sealed: none of the disk in the clear, in each object as read back
            r = lab.request("GET", f"/{bucket}/{k}")
            assert r.status == 200 and len(r.body) > 0, (k, r.status, r.body[:300])
            assert b"airlock-s3-known-plaintext" not in r.body, k

        copy = os.path.join(a.data_dir, "sandboxes", sid, "suspend")
        wait_for(lambda: os.path.exists(os.path.join(copy, "uploaded")), "the node never marked it uploaded", a)
        # the control: the node's own copy holds the disk in the clear
        assert tree_contains(copy, b"airlock-s3-known-plaintext")
        shutil.rmtree(copy)  # the node keeps no copy: only the bucket has it
        assert verb(a, sid, "wake")["state"] == "succeeded"
        assert len(wakes(a, sid, "download")) == 1
        assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "kept\n"
        assert alive_in_guest(a, sid, sleeper)
        assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
        wait_for(lambda: manifests(lab, bucket) == [], "the deleted sandbox's image stayed in the bucket", a)
    finally:
        if os.path.exists(release):
            os.unlink(release)


def test_a_wrong_secret_stops_the_node_with_a_clear_error(swift, keys_dir, airlock_factory):
    """The node checks the bucket at start: a wrong secret is S3's 403,
    said plainly, and the node does not serve. The control: the right
    secret in the same bucket serves."""
    lab = swift
    bucket = lab.make_bucket("airlock-sec")
    a = airlock_factory(prebuild="minimal", env=s3_env(lab, bucket, keys_dir, secret="0" * 40), wait=False)
    wait_for(lambda: "refuses these credentials" in a.log_tail(400), "no clear error for a wrong secret", a,
             timeout=120)
    assert "SignatureDoesNotMatch" in a.log_tail(400) or "HTTP 403" in a.log_tail(400)
    a.stop()
    good = airlock_factory(prebuild="minimal", env=s3_env(lab, bucket, keys_dir))
    sid = good.create("minimal")["id"]
    assert good.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_a_corrupt_object_is_refused_and_the_sandbox_stays_suspended(swift, keys_dir, airlock_factory):
    """A blob changed in the bucket behind Airlock's back: the wake from it
    fails, says the artifact does not match, and leaves the sandbox
    suspended; the control, a second sandbox whose image is untouched,
    wakes."""
    lab = swift
    bucket = lab.make_bucket("airlock-bad")
    a = airlock_factory(prebuild="minimal", env=s3_env(lab, bucket, keys_dir))
    bad, good = a.create("minimal")["id"], a.create("minimal")["id"]
    for sid in (bad, good):
        assert a.exec(sid, ["sh", "-c", f"echo {sid} > /root/who && sync"])["exit_code"] == 0
        assert verb(a, sid, "suspend")["state"] == "succeeded"
    for sid in (bad, good):
        wait_for(lambda: a.api("GET", f"/v1/sandboxes/{sid}")["image_uploaded"], "not uploaded", a)
        copy = os.path.join(a.data_dir, "sandboxes", sid, "suspend")
        wait_for(lambda: os.path.exists(os.path.join(copy, "uploaded")), "not marked uploaded", a)
        shutil.rmtree(copy)
    # the bad one's own state blob (its delta against the template: small,
    # so the test rewrites it whole; the template's blobs both images share)
    assert len(manifests(lab, bucket)) == 2
    r = lab.request("GET", f"/{bucket}/airlock/snapshots/{bad}.suspended/manifest.json")
    assert r.status == 200, r
    m = json.loads(r.body)
    assert m["version"] == 3 and "meta" not in m, m  # sealed: the meta is not in the clear
    state = [x for x in m["artifacts"] if x["name"] == "state.delta"][0]
    key = f"/{bucket}/airlock/blobs/{state['blob']}"
    blob = lab.request("GET", key)
    assert blob.status == 200
    flipped = bytearray(blob.body)
    flipped[len(flipped) // 2] ^= 0xFF
    assert lab.request("PUT", key, body=bytes(flipped)).status == 200

    op = a.api("POST", f"/v1/sandboxes/{bad}/wake?wait=true", expect=200)
    assert op["state"] == "failed", op
    assert "does not match" in a.log_tail(400) and "does not open" in op["error"]["message"], op
    assert a.api("GET", f"/v1/sandboxes/{bad}")["state"] == "suspended"
    assert verb(a, good, "wake")["state"] == "succeeded"
    assert a.exec(good, ["cat", "/root/who"])["stdout"] == f"{good}\n"
    for sid in (bad, good):
        assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
