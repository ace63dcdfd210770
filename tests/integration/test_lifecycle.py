"""Lifecycle verbs: pause/resume (VM kept in memory), stop/start (VM gone,
disk kept), operations, idempotency keys, illegal transitions, the CLI."""

import glob
import json
import os
import time
import uuid

from harness import ApiError, vcpu_cpu_ticks, vcpu_threads

COUNTER = "i=0; while true; do i=$((i+1)); echo $i > /root/counter; sleep 0.2; done"


def verb(airlock, sid, name, wait=True, key=None, expect=None):
    headers = {"Idempotency-Key": key} if key else None
    path = f"/v1/sandboxes/{sid}/{name}" + ("?wait=true" if wait else "")
    return airlock.api("POST", path, expect=expect or (200 if wait else 202), headers=headers)


def conflict(airlock, sid, name):
    status, _, body = airlock.request("POST", f"/v1/sandboxes/{sid}/{name}?wait=true")
    assert status == 409, body
    return json.loads(body)["error"]


def counter(airlock, sid):
    return int(airlock.exec(sid, ["cat", "/root/counter"])["stdout"])


def wait_op(airlock, op_id, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        op = airlock.api("GET", f"/v1/operations/{op_id}")
        if op["state"] in ("succeeded", "failed"):
            return op
        time.sleep(0.2)
    raise TimeoutError(op_id)


def wait_for(pred, what, airlock, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} after {timeout}s\n{airlock.log_tail(40)}")


def sandbox_dirs(airlock, sid):
    return glob.glob(os.path.join(airlock.data_dir, "**", sid), recursive=True)


def test_pause_resume_stop_start(airlock):
    sid = airlock.create()["id"]
    airlock.api("POST", f"/v1/sandboxes/{sid}/sessions", dict(cmd=["sh", "-c", COUNTER]), expect=201)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r = airlock.exec(sid, ["cat", "/root/counter"])
        if r["exit_code"] == 0 and int(r["stdout"] or 0) > 3:
            break
        time.sleep(0.3)

    # pause: the guest's vCPU stands still, commands are refused
    vcpu = vcpu_threads(sid)
    assert vcpu, f"no vCPU thread of {sid}"
    running = vcpu_cpu_ticks(vcpu)
    wait_for(lambda: vcpu_cpu_ticks(vcpu) > running, "the running guest's vCPU used no CPU", airlock, timeout=30)
    op = verb(airlock, sid, "pause")
    assert op["state"] == "succeeded" and op["verb"] == "pause" and op["id"].startswith("op-")
    assert op["sandbox_id"] == sid and "finished_at" in op
    sb = airlock.api("GET", f"/v1/sandboxes/{sid}")
    assert sb["state"] == "paused" and sb["desired_state"] == "paused"
    status, _, body = airlock.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
    assert status == 409 and b"paused" in body
    # a stopped vCPU accrues no CPU time at all; a running one (the counter
    # loop forks every 0.2 s) does within a second
    paused = vcpu_cpu_ticks(vcpu)
    time.sleep(1)
    assert vcpu_cpu_ticks(vcpu) == paused, "the paused guest's vCPU ran"
    assert conflict(airlock, sid, "pause")["message"] == "cannot pause: sandbox is paused"
    assert verb(airlock, sid, "resume")["state"] == "succeeded"
    c2 = counter(airlock, sid)
    wait_for(lambda: counter(airlock, sid) > c2, "the counter did not move after resume", airlock, timeout=30)
    assert vcpu_cpu_ticks(vcpu) > paused
    assert airlock.api("GET", f"/v1/sandboxes/{sid}")["state"] == "running"

    # illegal transitions name the current state
    assert conflict(airlock, sid, "resume")["message"] == "cannot resume: sandbox is running"
    assert conflict(airlock, sid, "start")["message"] == "cannot start: sandbox is running"

    # idempotency: same key, same operation, executed once
    key = str(uuid.uuid4())
    a = verb(airlock, sid, "pause", wait=False, key=key)
    b = verb(airlock, sid, "pause", wait=False, key=key)
    assert a["id"] == b["id"]
    assert wait_op(airlock, a["id"])["state"] == "succeeded"
    c = verb(airlock, sid, "pause", wait=True, key=key)  # replay after the fact
    assert c["id"] == a["id"] and c["state"] == "succeeded"
    status, _, _ = airlock.request("POST", f"/v1/sandboxes/{sid}/resume", headers={"Idempotency-Key": key})
    assert status == 409  # a key names one operation only
    verb(airlock, sid, "resume")

    # stop / start: the disk survives, asynchronously
    # (no sync from the test: stop flushes the guest's file systems itself)
    airlock.put_file(sid, "/root/keep.txt", b"kept across stop/start\n")
    op = verb(airlock, sid, "stop", wait=False)
    assert op["state"] in ("pending", "running", "succeeded")
    assert wait_op(airlock, op["id"])["state"] == "succeeded"
    sb = airlock.api("GET", f"/v1/sandboxes/{sid}")
    assert sb["state"] == "stopped" and sb["desired_state"] == "stopped"
    assert conflict(airlock, sid, "pause")["message"] == "cannot pause: sandbox is stopped"
    status, _, _ = airlock.request("GET", f"/v1/sandboxes/{sid}/ls?path=/root")
    assert status == 409
    op = verb(airlock, sid, "start")
    assert op["state"] == "succeeded", op
    assert airlock.get_file(sid, "/root/keep.txt") == b"kept across stop/start\n"
    assert airlock.exec(sid, ["hostname"])["stdout"].strip() == sid

    # delete a stopped sandbox: nothing left
    verb(airlock, sid, "stop")
    airlock.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)
    airlock.api("GET", f"/v1/sandboxes/{sid}", expect=404)
    assert sandbox_dirs(airlock, sid) == []
    airlock.api("GET", f"/v1/operations/{op['id']}")  # history outlives the sandbox


def test_lifecycle_cli_and_delete_paused(airlock):
    sid = airlock.create()["id"]
    r = airlock.cli("pause", sid)
    assert r.returncode == 0, r.stderr
    assert airlock.api("GET", f"/v1/sandboxes/{sid}")["state"] == "paused"
    r = airlock.cli("pause", sid)
    assert r.returncode != 0 and b"paused" in r.stderr
    assert airlock.cli("resume", sid).returncode == 0
    r = airlock.cli("stop", "--no-wait", sid)
    assert r.returncode == 0, r.stderr
    op_id = r.stdout.decode().strip()
    assert op_id.startswith("op-")
    wait_op(airlock, op_id)
    r = airlock.cli("op", "--json", op_id)
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "succeeded"
    r = airlock.cli("start", sid)
    assert r.returncode == 0, r.stderr
    r = airlock.cli("inspect", sid)
    assert b"desired_state" in r.stdout and b"running" in r.stdout
    assert airlock.exec(sid, ["echo", "hi"])["stdout"] == "hi\n"

    assert airlock.cli("pause", sid).returncode == 0
    airlock.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)
    airlock.api("GET", f"/v1/sandboxes/{sid}", expect=404)
    assert sandbox_dirs(airlock, sid) == []
    try:
        airlock.api("POST", f"/v1/sandboxes/{sid}/resume?wait=true")
        raise AssertionError("resume of a deleted sandbox succeeded")
    except ApiError as e:
        assert e.status == 404
