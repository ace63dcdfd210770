"""Tenants and API keys: a tenant key sees only its tenant's sandboxes (and
their sessions and operations), everything else answers exactly like an id
that does not exist; tenants and keys are managed with the admin token; a
revoked key fails at once; keys are shown once and never listed."""
import json
import os
import subprocess

from harness import CLI


def _404_body(airlock, method, path, rid, token, body=None):
    """The 404 body with the id replaced, to compare with a random id's."""
    status, _, data = airlock.request(method, path, body, token=token)
    assert status == 404, (method, path, status, data)
    return data.replace(rid.encode(), b"<ID>")


def _tenant_with_key(airlock, name):
    t = airlock.api("POST", "/v1/tenants", {"name": name}, expect=201)
    assert t["id"].startswith("ten-") and t["name"] == name and t["created_at"]
    k = airlock.api("POST", f"/v1/tenants/{t['id']}/keys", {"name": f"{name}-ci"}, expect=201)
    assert k["id"].startswith("key-") and k["key"].startswith("alk_") and k["tenant_id"] == t["id"]
    return t, k


def test_tenant_isolation(airlock_factory):
    airlock = airlock_factory(prebuild="minimal")
    ta, ka = _tenant_with_key(airlock, "alpha")
    tb, kb = _tenant_with_key(airlock, "beta")
    a = airlock.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=ka["key"])
    b = airlock.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=kb["key"])
    assert a["tenant_id"] == ta["id"] and b["tenant_id"] == tb["id"]
    ses_b = airlock.api("POST", f"/v1/sandboxes/{b['id']}/sessions", {"cmd": ["sleep", "30"]}, expect=201,
                        token=kb["key"])

    # A sees its own sandbox and nothing of B's, exactly as if it did not exist
    assert airlock.api("GET", f"/v1/sandboxes/{a['id']}", token=ka["key"])["id"] == a["id"]
    listed = airlock.api("GET", "/v1/sandboxes", token=ka["key"])["sandboxes"]
    assert [s["id"] for s in listed] == [a["id"]]
    fake_sbx, fake_op, fake_ses = "sbx-0123456789abcdef", "op-0123456789abcdef", "ses-0123456789abcdef"
    probes = [
        ("GET", "/v1/sandboxes/{}", None),
        ("DELETE", "/v1/sandboxes/{}", None),
        ("POST", "/v1/sandboxes/{}/exec", {"cmd": ["true"]}),
        ("POST", "/v1/sandboxes/{}/sessions", {"cmd": ["true"]}),
        ("POST", "/v1/sandboxes/{}/snapshots", {"kind": "disk"}),
        ("GET", "/v1/sandboxes/{}/snapshots", None),
        ("POST", "/v1/sandboxes/{}/pause", None),
        ("GET", "/v1/sandboxes/{}/ls?path=/", None),
        ("GET", "/v1/sandboxes/{}/files?path=/etc/hostname", None),
    ]
    for method, tmpl, body in probes:
        theirs = _404_body(airlock, method, tmpl.format(b["id"]), b["id"], ka["key"], body)
        nobody = _404_body(airlock, method, tmpl.format(fake_sbx), fake_sbx, ka["key"], body)
        assert theirs == nobody, (method, tmpl)
    assert (_404_body(airlock, "GET", f"/v1/operations/{b['operation_id']}", b["operation_id"], ka["key"]) ==
            _404_body(airlock, "GET", f"/v1/operations/{fake_op}", fake_op, ka["key"]))
    for suffix in ("", "/events"):
        assert (_404_body(airlock, "GET", f"/v1/sessions/{ses_b['id']}{suffix}", ses_b["id"], ka["key"]) ==
                _404_body(airlock, "GET", f"/v1/sessions/{fake_ses}{suffix}", fake_ses, ka["key"]))
    assert (_404_body(airlock, "POST", f"/v1/sessions/{ses_b['id']}/signal", ses_b["id"], ka["key"],
                      {"signal": "KILL"}) ==
            _404_body(airlock, "POST", f"/v1/sessions/{fake_ses}/signal", fake_ses, ka["key"], {"signal": "KILL"}))

    # B's sandbox survived all that, and B still reaches it
    assert airlock.api("GET", f"/v1/sandboxes/{b['id']}", token=kb["key"])["state"] == "running"
    assert airlock.api("POST", f"/v1/sandboxes/{b['id']}/exec", {"cmd": ["true"]}, token=kb["key"])["exit_code"] == 0
    assert airlock.api("GET", f"/v1/operations/{b['operation_id']}", token=kb["key"])["state"] == "succeeded"

    # the admin sees both; a tenant cannot create for another tenant
    ids = {s["id"] for s in airlock.api("GET", "/v1/sandboxes")["sandboxes"]}
    assert {a["id"], b["id"]} <= ids
    status, _, _ = airlock.request("POST", "/v1/sandboxes", {"template": "minimal", "tenant": tb["id"]},
                                   token=ka["key"])
    assert status == 403

    # tenant management is admin-only
    for method, path, body in [("POST", "/v1/tenants", {"name": "gamma"}), ("GET", "/v1/tenants", None),
                               ("GET", f"/v1/tenants/{ta['id']}/keys", None),
                               ("POST", f"/v1/tenants/{ta['id']}/keys", {}),
                               ("DELETE", f"/v1/keys/{kb['id']}", None)]:
        status, _, data = airlock.request(method, path, body, token=ka["key"])
        assert status == 403, (method, path, status, data)
        assert json.loads(data)["error"]["code"] == "forbidden"

    # a tenant that owns sandboxes cannot go
    status, _, _ = airlock.request("DELETE", f"/v1/tenants/{tb['id']}")
    assert status == 409

    # revoking a key works at once
    airlock.api("DELETE", f"/v1/keys/{ka['id']}", expect=204)
    status, _, _ = airlock.request("GET", "/v1/sandboxes", token=ka["key"])
    assert status == 401
    status, _, _ = airlock.request("DELETE", f"/v1/keys/{ka['id']}")
    assert status == 404

    airlock.api("DELETE", f"/v1/sandboxes/{a['id']}", expect=204)
    airlock.api("DELETE", f"/v1/sandboxes/{b['id']}", expect=204, token=kb["key"])
    airlock.api("DELETE", f"/v1/tenants/{tb['id']}", expect=204)
    status, _, _ = airlock.request("GET", "/v1/sandboxes", token=kb["key"])
    assert status == 401  # its keys went with it


def test_tenant_validation_and_keys_never_listed(airlock_factory):
    airlock = airlock_factory(prebuild="minimal")
    for bad in [{}, {"name": ""}, {"name": "x" * 65}, {"name": "a b"}, {"name": ".hidden"}, {"name": 7}]:
        status, _, data = airlock.request("POST", "/v1/tenants", bad)
        assert status == 400, (bad, status, data)
    t, k = _tenant_with_key(airlock, "alpha")
    status, _, _ = airlock.request("POST", "/v1/tenants", {"name": "alpha"})
    assert status == 409
    status, _, _ = airlock.request("POST", f"/v1/tenants/{t['id']}/keys", {"name": "no spaces"})
    assert status == 400
    status, _, _ = airlock.request("POST", "/v1/tenants/ten-0123456789abcdef/keys", {})
    assert status == 404
    status, _, _ = airlock.request("POST", "/v1/sandboxes", {"template": "minimal", "tenant": "ten-nope"})
    assert status == 400

    # the admin picks the tenant of a sandbox
    sb = airlock.api("POST", "/v1/sandboxes", {"template": "minimal", "tenant": t["id"]}, expect=201)
    assert sb["tenant_id"] == t["id"]
    assert [s["id"] for s in airlock.api("GET", "/v1/sandboxes", token=k["key"])["sandboxes"]] == [sb["id"]]

    # the key shows once: nothing any GET answers carries it
    keys = airlock.api("GET", f"/v1/tenants/{t['id']}/keys")["keys"]
    assert [x["id"] for x in keys] == [k["id"]] and keys[0]["name"] == "alpha-ci"
    for path in ["/v1/tenants", f"/v1/tenants/{t['id']}/keys", "/v1/sandboxes", f"/v1/sandboxes/{sb['id']}",
                 f"/v1/operations/{sb['operation_id']}"]:
        _, _, data = airlock.request("GET", path)
        assert k["key"].encode() not in data, path
        assert b'"key"' not in data, path
    with open(airlock.log_path, "rb") as f:
        assert k["key"].encode() not in f.read()
    airlock.api("DELETE", f"/v1/sandboxes/{sb['id']}", expect=204, token=k["key"])


def test_tenants_cli(airlock_factory):
    airlock = airlock_factory(prebuild="minimal")
    r = airlock.cli("tenants", "create", "alpha")
    assert r.returncode == 0, r.stderr
    tid = r.stdout.decode().strip()
    assert tid.startswith("ten-")
    r = airlock.cli("tenants")
    assert r.returncode == 0 and tid in r.stdout.decode() and "alpha" in r.stdout.decode()
    r = airlock.cli("--json", "tenants")
    assert [t["id"] for t in json.loads(r.stdout)["tenants"]] == [tid]

    r = airlock.cli("keys", tid, "create", "ci")
    assert r.returncode == 0, r.stderr
    key = r.stdout.decode().strip()
    assert key.startswith("alk_")
    r = airlock.cli("--json", "keys", tid)
    keys = json.loads(r.stdout)["keys"]
    assert len(keys) == 1 and keys[0]["name"] == "ci" and key not in r.stdout.decode()
    r = airlock.cli("keys", tid)
    assert r.returncode == 0 and keys[0]["id"] in r.stdout.decode() and key not in r.stdout.decode()

    # the key works for the CLI, scoped to the tenant
    env = dict(os.environ, AIRLOCK_URL=airlock.url, AIRLOCK_TOKEN=key)
    r = subprocess.run([CLI, "ls"], capture_output=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([CLI, "tenants"], capture_output=True, env=env, timeout=60)
    assert r.returncode != 0 and b"admin" in r.stderr

    r = airlock.cli("keys", tid, "rm", keys[0]["id"])
    assert r.returncode == 0, r.stderr
    r = subprocess.run([CLI, "ls"], capture_output=True, env=env, timeout=60)
    assert r.returncode != 0
    r = airlock.cli("tenants", "rm", tid)
    assert r.returncode == 0, r.stderr
    assert tid not in airlock.cli("tenants").stdout.decode()
    r = airlock.cli("tenants", "create", "bad name")
    assert r.returncode != 0

    # the capability signing key: shown, rotated (a new kid); a tenant key
    # gets 403 (tests/security/test_capabilities.py)
    kid = airlock.cli("signing-key").stdout.decode().strip()
    assert kid.startswith("k")
    r = airlock.cli("signing-key", "rotate")
    assert r.returncode == 0, r.stderr
    new = r.stdout.decode().strip()
    assert new != kid and airlock.cli("signing-key").stdout.decode().strip() == new
