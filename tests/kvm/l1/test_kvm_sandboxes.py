"""Sandboxes under KVM (in the KVM tier's L1): Airlock picks KVM by itself
(AIRLOCK_ACCEL=auto), builds its templates there (boot and snapshot under
KVM) and runs every verb on KVM VMs: create cold and warm, exec, files,
sessions, pause and resume, stop and start, disk and full snapshots (live
precopy), rollback, fork, suspend and wake, a VMM killed and booted again,
the egress gateway, delete; each test's leak checks as everywhere."""

import base64
import os
import signal
import time

from harness import qemu_pids
from l1help import on_kvm, template
from netlab import HELLO, SINK, http_get, sh, wait_log
from test_recovery import alive_in_guest, start_sleeper, wait_state


def verb(a, sid, name, body=None):
    op = a.api("POST", f"/v1/sandboxes/{sid}/{name}?wait=true", body)
    assert op["state"] == "succeeded", op
    return op


def test_auto_picks_kvm_and_every_verb_runs_on_it(airlock):
    a = airlock
    health = a.api("GET", "/v1/health")
    assert health["accel"] == "kvm", health
    assert template(a, "minimal")["state"] == "ready"

    sid = a.create("minimal")["id"]  # cold: warm pools are off in the harness
    assert on_kvm(sid)
    out = a.exec(sid, ["sh", "-c", "echo hello; echo oops >&2; exit 3"])
    assert (out["stdout"], out["stderr"], out["exit_code"]) == ("hello\n", "oops\n", 3)
    data = os.urandom(200_000)
    a.put_file(sid, "/root/blob", data)
    assert a.get_file(sid, "/root/blob") == data

    ses = a.api("POST", f"/v1/sandboxes/{sid}/sessions",
                {"cmd": ["sh", "-c", "echo first; read go; echo second; exit 5"]}, expect=201)
    events = a.sse(f"/v1/sessions/{ses['id']}/events", token=ses["attach_token"], timeout=60)
    event, first, _ = next(events)
    assert (event, base64.b64decode(first["data"])) == ("stdout", b"first\n")
    assert a.request("POST", f"/v1/sessions/{ses['id']}/stdin", {"text": "go\n"},
                     token=ses["attach_token"])[0] == 204
    rest = list(events)
    assert [base64.b64decode(d["data"]) for e, d, _ in rest if e == "stdout"] == [b"second\n"], rest
    assert rest[-1][0] == "exit" and rest[-1][1]["exit_code"] == 5, rest

    sleeper = start_sleeper(a, sid)
    verb(a, sid, "pause")
    assert a.api("GET", f"/v1/sandboxes/{sid}")["state"] == "paused"
    verb(a, sid, "resume")
    assert alive_in_guest(a, sid, sleeper)

    a.exec(sid, ["sh", "-c", "echo durable > /root/kept; sync"])
    verb(a, sid, "stop")
    assert qemu_pids(sid) == []
    verb(a, sid, "start")
    assert on_kvm(sid)
    assert a.exec(sid, ["cat", "/root/kept"])["stdout"] == "durable\n"
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    assert qemu_pids(sid) == []


def test_warm_create_under_kvm(airlock_factory):
    a = airlock_factory(env={"AIRLOCK_POOL_SIZE": "1"}, prebuild="minimal")
    deadline = time.monotonic() + 300
    while template(a, "minimal")["pool"]["ready"] < 1:
        assert time.monotonic() < deadline, a.log_tail(60)
        time.sleep(0.5)
    s = a.create("minimal")
    assert s["pool"] == "hit", s
    assert on_kvm(s["id"])
    assert a.exec(s["id"], ["hostname"])["stdout"].strip() == s["id"]
    assert a.request("DELETE", f"/v1/sandboxes/{s['id']}")[0] == 204


def test_snapshots_rollback_and_fork_under_kvm(airlock):
    a = airlock
    sid = a.create("minimal")["id"]
    a.exec(sid, ["sh", "-c", "echo one > /root/f; sync"])
    disk = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "disk"}, expect=201)
    a.exec(sid, ["sh", "-c", "echo two > /root/f; sync"])
    verb(a, sid, "rollback", {"snapshot": disk["id"]})
    assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "one\n"

    # a full snapshot is live under KVM: QEMU's precopy runs while the
    # guest does, the vCPUs stop only for the last dirty pages
    sleeper = start_sleeper(a, sid)
    full = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"}, expect=201)
    assert full["kind"] == "full" and full["size"] > 0, full
    a.exec(sid, ["sh", "-c", f"echo three > /root/f; kill {sleeper}"])
    verb(a, sid, "rollback", {"snapshot": full["id"]})
    assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "one\n"
    assert alive_in_guest(a, sid, sleeper)  # back at the running point
    assert on_kvm(sid)

    op = verb(a, sid, "fork")
    child = op["result"]["sandbox"]["id"]
    assert on_kvm(child)
    assert alive_in_guest(a, child, sleeper)
    a.exec(child, ["sh", "-c", "echo child > /root/f"])
    assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "one\n"
    assert a.exec(child, ["hostname"])["stdout"].strip() == child
    for s in (sid, child):
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204


def test_suspend_and_wake_under_kvm(airlock):
    a = airlock
    sid = a.create("minimal")["id"]
    a.exec(sid, ["sh", "-c", "echo kept > /root/f"])
    sleeper = start_sleeper(a, sid)
    op = verb(a, sid, "suspend")
    assert op["result"]["state"] == "suspended"
    assert qemu_pids(sid) == []
    assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "kept\n"  # wakes it
    assert on_kvm(sid)
    assert alive_in_guest(a, sid, sleeper)
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_a_killed_vmm_is_booted_again_under_kvm(airlock):
    a = airlock
    sid = a.create("minimal")["id"]
    a.exec(sid, ["sh", "-c", "echo durable > /root/data; sync"])
    os.kill(qemu_pids(sid)[0], signal.SIGKILL)
    sbx = wait_state(a, sid, "running", execution=2)
    assert sbx["recoveries"][-1]["ok"] is True, sbx
    assert on_kvm(sid)
    assert a.exec(sid, ["cat", "/root/data"])["stdout"] == "durable\n"
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_egress_gateway_under_kvm(airlock_factory, internet):
    a = airlock_factory(env=internet.env())
    sid = a.create("minimal", network={"allow": [{"host": "a.test"}]})["id"]
    assert on_kvm(sid)
    _, out = sh(a, sid, http_get("a.test"))
    assert HELLO in out, out
    _, out = sh(a, sid, http_get("a.test", SINK))  # the allowed name at another address
    assert HELLO not in out, out
    wait_log(a, sid, lambda e: e["action"] == "deny" and e.get("addr") == SINK, "denying SINK")
    assert internet.sink_hits() == []  # refused by the gateway, nothing sent
    _, out = sh(a, sid, http_get("a.test"))  # and the allowed one still works
    assert HELLO in out, out
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
