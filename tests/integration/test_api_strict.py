"""Request bodies are strict: a field airlockd does not know is a 400 that
names it, so a misspelt setting is never silently dropped. Every endpoint
that takes a body gets a misspelt field, beside its control: the same
request spelt right, which succeeds. Free-form maps (env, metadata) take
any key; nested objects airlockd reads (snapshot_policy) do not."""

import json


def refused(a, path, body, field, where="the request body"):
    status, _, data = a.request("POST", path, body)
    assert status == 400, (path, body, status, data)
    err = json.loads(data)["error"]
    assert err == {"code": "invalid", "message": f'unknown field "{field}" in {where}'}, (path, err)


def verb(a, sid, name, body=None):
    op = a.api("POST", f"/v1/sandboxes/{sid}/{name}?wait=true", {} if body is None else body)
    assert op["state"] == "succeeded", op
    return op


def test_every_body_is_strict(airlock_factory):
    a = airlock_factory(prebuild="minimal")

    # tenants, keys, the signing key
    refused(a, "/v1/tenants", {"nmae": "acme"}, "nmae")
    ten = a.api("POST", "/v1/tenants", {"name": "acme"}, expect=201)
    refused(a, f"/v1/tenants/{ten['id']}/keys", {"name": "ci", "scope": "all"}, "scope")
    a.api("POST", f"/v1/tenants/{ten['id']}/keys", {"name": "ci"}, expect=201)
    refused(a, "/v1/capability-keys", {"rotate": True}, "rotate")
    a.api("POST", "/v1/capability-keys", {}, expect=201)

    # create: every field it knows, spelt right (env and metadata keys are free)
    good = {"template": "minimal", "env": {"netwrok": "any name"}, "metadata": {"any key": "x"},
            "snapshot_policy": {"disk_every": 0, "tiers": [{"every": 60, "for": 600}]},
            "idle_timeout_s": 0, "recovery": "boot", "tenant": ten["id"]}
    refused(a, "/v1/sandboxes", dict(good, netwrok={"mode": "deny-all"}), "netwrok")
    refused(a, "/v1/sandboxes", dict(good, snapshot_policy={"disk_evry": 0}), "disk_evry", '"snapshot_policy"')
    refused(a, "/v1/sandboxes", dict(good, snapshot_policy={"tiers": [{"every": 60, "for": 600, "keep": 1}]}),
            "keep", '"snapshot_policy.tiers[0]"')
    # network: the policy parser is as strict inside it, naming the field
    status, _, data = a.request("POST", "/v1/sandboxes", dict(good, network={"mode": "deny-all", "alow": []}))
    assert status == 400 and json.loads(data)["error"]["message"] == \
        'network: unknown field "alow" (accepted: "mode", "allow", "deny")', data
    assert a.api("GET", "/v1/sandboxes")["sandboxes"] == []
    good["network"] = {"mode": "deny-all"}
    sid = a.api("POST", "/v1/sandboxes", good, expect=201)["id"]
    base = f"/v1/sandboxes/{sid}"
    # a PUT of a policy: its body is the policy
    status, _, data = a.request("PUT", f"{base}/network", {"mode": "allow-all", "dney": []})
    assert status == 400 and json.loads(data)["error"] == \
        {"code": "invalid", "message": 'unknown field "dney" in the request body'}, data
    assert a.api("PUT", f"{base}/network", {"mode": "allow-all", "deny": []}) == {"mode": "allow-all"}

    refused(a, f"{base}/exec", {"cmd": ["cat"], "timeout": 5}, "timeout")
    r = a.api("POST", f"{base}/exec", {"cmd": ["cat"], "env": {}, "cwd": "/", "stdin": "in", "timeout_s": 5})
    assert r["stdout"] == "in" and r["exit_code"] == 0, r

    refused(a, f"{base}/sessions", {"cmd": ["cat"], "tty": False}, "tty")
    ses = a.api("POST", f"{base}/sessions", {"cmd": ["cat"], "env": {}, "cwd": "/", "pty": False, "rows": 24,
                                            "cols": 80}, expect=201)["id"]
    refused(a, f"/v1/sessions/{ses}/stdin", {"txt": "x"}, "txt")
    assert a.request("POST", f"/v1/sessions/{ses}/stdin", {"text": "x"})[0] == 204
    refused(a, f"/v1/sessions/{ses}/signal", {"sig": "KILL"}, "sig")
    assert a.request("POST", f"/v1/sessions/{ses}/signal", {"signal": "KILL"})[0] == 204
    pty = a.api("POST", f"{base}/sessions", {"cmd": ["cat"], "pty": True, "rows": 24, "cols": 80}, expect=201)["id"]
    refused(a, f"/v1/sessions/{pty}/resize", {"rows": 30, "columns": 100}, "columns")
    assert a.request("POST", f"/v1/sessions/{pty}/resize", {"rows": 30, "cols": 100})[0] == 204
    assert a.request("POST", f"/v1/sessions/{pty}/signal", {"signal": "KILL"})[0] == 204

    # a template build: the spec's own fields are lib/tplspec's (test_templates.py)
    spec = {"name": "strict", "base": {"template": "minimal"}, "steps": [{"env": {"A": "1"}}]}
    refused(a, "/v1/templates", {"spec": spec, "memory": 256}, "memory")
    assert a.api("POST", "/v1/templates", {"spec": spec}, expect=202)["state"] == "building"
    a.api("DELETE", "/v1/templates/strict", expect=204)

    refused(a, f"{base}/snapshots", {"knd": "disk"}, "knd")
    snap = a.api("POST", f"{base}/snapshots", {"kind": "disk"}, expect=201)["id"]

    # The verbs without fields: {} passes, anything else is refused. Those
    # that are cheap run; start, wake and suspend (seconds each, tested in
    # test_fork_suspend and test_lifecycle) get their {} past the field
    # check to the state table's 409, all a body with no fields can show.
    def state_refuses(name, state):
        status, _, data = a.request("POST", f"{base}/{name}?wait=true", {})
        assert status == 409 and json.loads(data)["error"]["message"] == f"cannot {name}: sandbox is {state}", data

    for name in ("pause", "fork", "resume", "stop", "start", "wake", "suspend"):
        refused(a, f"{base}/{name}?wait=true", {"wait": True}, "wait")
    state_refuses("start", "running")
    state_refuses("wake", "running")
    verb(a, sid, "pause")
    child = verb(a, sid, "fork")["result"]["sandbox"]["id"]
    assert a.request("DELETE", f"/v1/sandboxes/{child}")[0] == 204
    verb(a, sid, "resume")
    verb(a, sid, "stop")
    state_refuses("suspend", "stopped")
    # rollback has a field: it runs, back to running
    refused(a, f"{base}/rollback?wait=true", {"snapshot_id": snap}, "snapshot_id")
    verb(a, sid, "rollback", {"snapshot": snap})
    assert a.api("GET", base)["state"] == "running"
    assert a.request("DELETE", base)[0] == 204
