"""Operations: progress, create and delete recorded as operations with
Idempotency-Key, and the warm pools as GET /v1/pools and `airlock pools`."""

import http.client
import json
import os
import signal
import tempfile
import threading
import time
import uuid

from harness import Airlock, airlock_procs, qemu_pids, wait_for


def post_create(a, body, key=None):
    headers = {"Idempotency-Key": key} if key else None
    status, _, data = a.request("POST", "/v1/sandboxes", body, headers=headers)
    return status, json.loads(data) if data else None


def delete(a, sid, key=None):
    headers = {"Idempotency-Key": key} if key else None
    status, _, data = a.request("DELETE", f"/v1/sandboxes/{sid}", headers=headers)
    return status, json.loads(data) if data else None


def pools(a):
    return {p["template"]: p for p in a.api("GET", "/v1/pools")["pools"]}


def wait_pool(a, name, ready, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = pools(a).get(name)
        if p and p["ready"] == ready and p["starting"] == 0:
            return p
        time.sleep(0.2)
    raise TimeoutError(f"pool of {name} not at {ready} ready: {pools(a)}\n{a.log_tail()}")


def test_operation_progress(airlock):
    sb = airlock.create()
    sid = sb["id"]

    # the create is an operation of its own, finished by the time of the 201
    op = airlock.api("GET", f"/v1/operations/{sb['operation_id']}")
    assert op["verb"] == "create" and op["sandbox_id"] == sid
    assert op["state"] == "succeeded" and op["progress"] == 100 and "stage" not in op
    assert op["result"]["id"] == sid and op["result"]["state"] == "running"

    op = airlock.api("POST", f"/v1/sandboxes/{sid}/pause?wait=true")
    assert op["state"] == "succeeded" and op["progress"] == 100, op
    again = airlock.api("GET", f"/v1/operations/{op['id']}")
    assert again["progress"] == 100 and "stage" not in again

    # without waiting: whatever the moment, progress only says what happened
    op = airlock.api("POST", f"/v1/sandboxes/{sid}/resume", expect=202)
    assert op["progress"] in (0, 10, 100), op
    assert op["progress"] != 10 or op["stage"] == "resuming"
    deadline = time.monotonic() + 120
    while op["state"] not in ("succeeded", "failed") and time.monotonic() < deadline:
        time.sleep(0.1)
        op = airlock.api("GET", f"/v1/operations/{op['id']}")
    assert op["state"] == "succeeded" and op["progress"] == 100, op
    assert airlock.api("GET", f"/v1/sandboxes/{sid}")["state"] == "running"
    assert delete(airlock, sid)[0] == 204


def test_create_idempotency_key(airlock):
    key = str(uuid.uuid4())
    body = {"template": "minimal", "metadata": {"owner": "me", "team": "x"}}
    status, first = post_create(airlock, body, key)
    assert status == 201, first
    assert first["id"].startswith("sbx-") and first["operation_id"].startswith("op-")

    # a retry (keys in another order: the same request) gets the same sandbox
    status, second = post_create(airlock, {"metadata": {"team": "x", "owner": "me"}, "template": "minimal"}, key)
    assert status == 200, second
    assert second["id"] == first["id"] and second["operation_id"] == first["operation_id"]
    assert second["template"] == "minimal" and second["metadata"] == body["metadata"]
    assert len(airlock.api("GET", "/v1/sandboxes")["sandboxes"]) == 1
    assert len(qemu_pids(airlock.data_dir)) == 1  # pools are off here: one VM

    # the same key with another body is refused, and nothing is made
    status, err = post_create(airlock, {"template": "minimal", "metadata": {"owner": "you"}}, key)
    assert status == 422, err
    assert err["error"]["code"] == "unprocessable"
    assert "different request body" in err["error"]["message"]
    assert len(airlock.api("GET", "/v1/sandboxes")["sandboxes"]) == 1

    # a key names one operation: not a delete as well
    status, err = delete(airlock, first["id"], key)
    assert status == 409 and "already used for create" in err["error"]["message"], err

    # two racing requests with a new key: one create, both get its sandbox
    key2 = str(uuid.uuid4())
    results = []
    threads = [threading.Thread(target=lambda: results.append(post_create(airlock, {"template": "minimal"}, key2)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(s for s, _ in results) == [200, 201], results
    assert results[0][1]["id"] == results[1][1]["id"]
    assert len(airlock.api("GET", "/v1/sandboxes")["sandboxes"]) == 2

    # a failed create is replayed as the same error
    key3 = str(uuid.uuid4())
    status, err = post_create(airlock, {"template": "no-such-template"}, key3)
    assert status == 404, err
    assert post_create(airlock, {"template": "no-such-template"}, key3) == (404, err)

    status, err = post_create(airlock, {"template": "minimal"}, "bad key with spaces")
    assert status == 400, err

    for s in airlock.api("GET", "/v1/sandboxes")["sandboxes"]:
        assert delete(airlock, s["id"])[0] == 204


def test_delete_idempotency_key(airlock):
    sid = airlock.create()["id"]
    other = airlock.create()["id"]
    key = str(uuid.uuid4())
    assert delete(airlock, sid, key)[0] == 204
    # the retry gets the first outcome, not a 404
    assert delete(airlock, sid, key)[0] == 204
    status, err = delete(airlock, sid)
    assert status == 404, err
    # a key names one delete of one sandbox
    status, err = delete(airlock, other, key)
    assert status == 409 and "already used for delete" in err["error"]["message"], err
    assert airlock.api("GET", f"/v1/sandboxes/{other}")["state"] == "running"
    # the key of a verb does not delete
    vkey = str(uuid.uuid4())
    airlock.api("POST", f"/v1/sandboxes/{other}/pause?wait=true", headers={"Idempotency-Key": vkey})
    assert delete(airlock, other, vkey)[0] == 409
    assert delete(airlock, other)[0] == 204
    assert airlock.api("GET", "/v1/sandboxes")["sandboxes"] == []


def delete_cut_off(a, sid, key):
    """The delete's status, or "cut off" when airlockd died under it."""
    try:
        return delete(a, sid, key)[0]
    except (OSError, http.client.HTTPException):
        return "cut off"


def test_delete_cut_off_by_airlockd_is_finished_at_its_restart(airlock_factory):
    """airlockd is killed while a delete runs, after the node removed the
    VM: its restart finishes the delete (the sandbox is gone, not failed as
    "unknown to the node"), and the delete asked again with its
    Idempotency-Key says what it did: 204. The soak lost a sandbox so."""
    release = tempfile.mktemp(prefix="release-", dir=os.environ["AIRLOCK_TEST_VOLUME"])
    a = airlock_factory(prebuild="minimal",
                        env={"AIRLOCK_TEST_HOLD": "delete.removed", "AIRLOCK_TEST_HOLD_RELEASE": release})
    sid, other = a.create("minimal")["id"], a.create("minimal")["id"]
    key = str(uuid.uuid4())
    cut = []
    t = threading.Thread(target=lambda: cut.append(delete_cut_off(a, sid, key)))
    t.start()
    try:
        wait_for(lambda: "test hold point delete.removed reached" in a.log_tail(400), "the delete never held", a)
        assert wait_for(lambda: not qemu_pids(sid), "the node did not stop the VM before its hold", a)
        os.kill(a.pid_of("airlockd"), signal.SIGKILL)
    finally:
        open(release, "w").close()
    try:
        t.join(60)
        assert cut == ["cut off"], cut  # the attack ran: the client never heard back
        wait_for(lambda: not airlock_procs(a.data_dir), "the stack did not end with airlockd", a)
        b = Airlock(a.data_dir, None, "minimal")
        try:
            b.wait_ready(120)
            status, _, body = b.request("GET", f"/v1/sandboxes/{sid}")
            assert status == 404, (status, body)
            assert "was being deleted when airlockd stopped; finishing it" in b.log_tail(400)
            assert delete(b, sid, key)[0] == 204  # the retry hears the first outcome
            assert b.request("GET", f"/v1/sandboxes/{sid}")[0] == 404
            # control: the sandbox it did not delete runs on, and deletes
            assert b.api("GET", f"/v1/sandboxes/{other}")["state"] == "running"
            assert b.exec(other, ["true"])["exit_code"] == 0
            assert delete(b, other)[0] == 204
        finally:
            b.stop()
    finally:
        os.unlink(release)


def test_pools_api_and_cli(airlock_factory):
    a = airlock_factory(env={"AIRLOCK_POOL_SIZE": "1"}, prebuild="minimal")
    p = wait_pool(a, "minimal", 1)
    tpl = {t["name"]: t for t in a.api("GET", "/v1/templates")["templates"]}["minimal"]
    assert p == {"template": "minimal", "build": tpl["hash"], "target": 1, "size": 1, "max": 16, "ready": 1,
                 "starting": 0, "waiting": 0, "hits": 0, "misses": 0, "waited": 0, "recent_claims": 0,
                 "recent_hit_pct": None}
    assert set(pools(a)) == {"minimal"}  # python is not prebuilt here
    status, _, _ = a.request("GET", "/v1/pools", auth=False)
    assert status == 401

    s = a.create("minimal")
    assert s["pool"] == "hit", s
    p = wait_pool(a, "minimal", 1)  # refilled
    assert (p["hits"], p["misses"], p["recent_claims"], p["recent_hit_pct"]) == (1, 0, 1, 100), p

    r = a.cli("pools")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[0].split() == ["TEMPLATE", "BUILD", "TARGET", "MAX", "READY", "STARTING", "HITS", "MISSES", "HIT_PCT"]
    assert lines[1].split() == ["minimal", tpl["hash"], "1", "16", "1", "0", "1", "0", "100"], lines
    r = a.cli("pools", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["pools"][0]["hits"] == 1
    assert delete(a, s["id"])[0] == 204


def test_pools_off(airlock):
    assert airlock.api("GET", "/v1/pools") == {"pools": []}
    r = airlock.cli("pools")
    assert r.returncode == 0 and r.stdout.decode().split() == [
        "TEMPLATE", "BUILD", "TARGET", "MAX", "READY", "STARTING", "HITS", "MISSES", "HIT_PCT"]
