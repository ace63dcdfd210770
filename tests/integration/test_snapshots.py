"""Disk snapshots and rollback: the guest freezes its file systems around a
reflink of the rootfs (the VM keeps running), rollback restarts the sandbox
on the snapshot's disk."""

import glob
import json
import os

from harness import ApiError


def snapshot(airlock, sid, expect=201, **body):
    return airlock.api("POST", f"/v1/sandboxes/{sid}/snapshots", body or {"kind": "disk"}, expect=expect)


def rollback(airlock, sid, snap, expect=200):
    return airlock.api("POST", f"/v1/sandboxes/{sid}/rollback?wait=true", {"snapshot": snap}, expect=expect)


def error_of(airlock, method, path, body, status):
    st, _, resp = airlock.request(method, path, body=json.dumps(body).encode())
    assert st == status, resp
    return json.loads(resp)["error"]


def snapshot_files(airlock):
    return glob.glob(os.path.join(airlock.data_dir, "**", "snapshots", "*.img*"), recursive=True)


def test_snapshot_and_rollback(airlock):
    sid = airlock.create()["id"]
    airlock.put_file(sid, "/root/A", b"1")
    s1 = snapshot(airlock, sid)
    assert s1["id"].startswith("snap-") and s1["kind"] == "disk" and s1["sandbox_id"] == sid
    assert s1["size"] > 0
    # no pause: the guest answered right away and was frozen only briefly
    assert s1["freeze_ms"] < 5000
    assert airlock.exec(sid, ["true"])["exit_code"] == 0
    assert airlock.api("GET", f"/v1/sandboxes/{sid}")["state"] == "running"

    airlock.put_file(sid, "/root/A", b"2")
    airlock.put_file(sid, "/root/B", b"new")
    s2 = snapshot(airlock, sid)
    snaps = airlock.api("GET", f"/v1/sandboxes/{sid}/snapshots")["snapshots"]
    assert [s["id"] for s in snaps] == [s2["id"], s1["id"]]  # newest first
    assert all(s["size"] > 0 and s["kind"] == "disk" for s in snaps)

    op = rollback(airlock, sid, s1["id"])
    assert op["state"] == "succeeded" and op["verb"] == "rollback", op
    assert op["result"]["state"] == "running"
    sb = airlock.api("GET", f"/v1/sandboxes/{sid}")
    assert sb["state"] == "running"
    assert airlock.get_file(sid, "/root/A") == b"1"
    r = airlock.exec(sid, ["sh", "-c", "test -e /root/B; echo $?; hostname"])
    assert r["stdout"].split() == ["1", sid]

    # and forward again: the later snapshot is still there
    rollback(airlock, sid, s2["id"])
    assert airlock.get_file(sid, "/root/A") == b"2"
    assert airlock.get_file(sid, "/root/B") == b"new"

    # the CLI
    out = airlock.cli("snapshots", sid)
    text = out.stdout.decode()
    assert s1["id"] in text and "disk" in text and "SIZE" in text, out
    out = airlock.cli("snapshot", sid)
    assert out.returncode == 0 and out.stdout.decode().strip().startswith("snap-"), out
    out = airlock.cli("rollback", sid, s1["id"])
    assert out.returncode == 0, out
    assert airlock.get_file(sid, "/root/A") == b"1"

    # delete takes the snapshots along, rows and files
    assert snapshot_files(airlock)
    airlock.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)
    assert snapshot_files(airlock) == []
    assert glob.glob(os.path.join(airlock.data_dir, "**", "sandboxes", "*"), recursive=True) == []


def test_snapshot_states_and_errors(airlock):
    sid = airlock.create()["id"]
    other = airlock.create()["id"]
    airlock.put_file(sid, "/root/A", b"1")
    base = f"/v1/sandboxes/{sid}"

    e = error_of(airlock, "POST", f"{base}/snapshots", {"kind": "memory"}, 400)
    assert e["message"] == 'kind must be "disk" or "full"'
    e = error_of(airlock, "POST", f"{base}/rollback?wait=true", {"snapshot": "snap-0000000000000000"}, 404)
    assert e["code"] == "not_found"
    e = error_of(airlock, "POST", f"{base}/rollback?wait=true", {}, 400)
    # a snapshot of another sandbox is not one of this sandbox
    theirs = snapshot(airlock, other)
    error_of(airlock, "POST", f"{base}/rollback?wait=true", {"snapshot": theirs["id"]}, 404)

    # stopped: a snapshot without a guest to freeze; rollback boots it
    airlock.api("POST", f"{base}/stop?wait=true")
    s1 = snapshot(airlock, sid)
    assert s1["size"] > 0
    rollback(airlock, sid, s1["id"])
    assert airlock.get_file(sid, "/root/A") == b"1"

    # paused: neither a snapshot nor a rollback
    airlock.api("POST", f"{base}/pause?wait=true")
    e = error_of(airlock, "POST", f"{base}/snapshots", {"kind": "disk"}, 409)
    assert "paused" in e["message"]
    e = error_of(airlock, "POST", f"{base}/rollback?wait=true", {"snapshot": s1["id"]}, 409)
    assert "paused" in e["message"]
    airlock.api("POST", f"{base}/resume?wait=true")

    # an Idempotency-Key names one rollback
    key = "rb-" + sid
    op1 = airlock.api("POST", f"{base}/rollback?wait=true", {"snapshot": s1["id"]}, headers={"Idempotency-Key": key})
    op2 = airlock.api("POST", f"{base}/rollback?wait=true", {"snapshot": s1["id"]}, headers={"Idempotency-Key": key})
    assert op1["id"] == op2["id"] and op1["state"] == "succeeded"

    try:
        airlock.api("GET", "/v1/sandboxes/sbx-0000000000000000/snapshots")
        raise AssertionError("expected 404")
    except ApiError as err:
        assert err.status == 404
