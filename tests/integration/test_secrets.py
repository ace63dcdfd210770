"""Credentials (docs/api.md, "Credentials"): the store's API and its checks
(each refusal with a control that succeeds), tenant scope (another tenant's
secret answers as one that does not exist), the value never in a reply, a
log line or the data dir (only sealed), attaching to a sandbox (the guest
sees a placeholder in $NAME and the value nowhere), refusals that leave no
sandbox, deletion reaching the node's in-memory copy at once, fork with and
without `secrets: true`, an airlockd restart, the audit log and the CLI.
That the gateway injects the value into requests is the gateway's tests'."""

import json
import os
import re
import signal
import subprocess
import time

from harness import Airlock, ApiError, START_TIMEOUT, node_pids, qemu_pids

# what airlockd answers while its node agent (re)starts
NODE_AWAY = (502, 503, 504)


def wait_until(pred, what, a, timeout=START_TIMEOUT):
    """Polls pred; a connection refused or a node away is retried, any
    other error fails at once."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except OSError as e:
            last = e
        except ApiError as e:
            if e.status not in NODE_AWAY:
                raise
            last = e
        time.sleep(0.2)
    raise AssertionError(f"{what} after {timeout}s (last error: {last!r})\n{a.log_tail(80)}")

VALUE = "ghp_TestValue0123456789abcdefSECRET"
PLACEHOLDER = re.compile(r"^airlock_ph_[0-9a-f]{32}$")


def refused(a, body, status=400, needle=None, token=None, path="/v1/secrets"):
    st, _, data = a.request("POST", path, body, token=token)
    assert st == status, (body, st, data)
    if needle:
        assert needle in json.loads(data)["error"]["message"], data
    assert VALUE.encode() not in data
    return json.loads(data)


def add(a, name, token=None, **fields):
    body = {"name": name, "value": VALUE, "hosts": ["api.github.com"], **fields}
    st, _, data = a.request("POST", "/v1/secrets", body, token=token)
    assert st == 201, (body, st, data)
    assert VALUE.encode() not in data
    return json.loads(data)


def tenant_with_key(a, name):
    t = a.api("POST", "/v1/tenants", {"name": name}, expect=201)
    k = a.api("POST", f"/v1/tenants/{t['id']}/keys", {}, expect=201)
    return t, k


def test_secret_api_validation_scope_and_audit(airlock_factory):
    """No VM: about 5 s."""
    a = airlock_factory(prebuild="minimal")
    meta = add(a, "gh", header="Authorization: Bearer {value}", ports=[443, 8443], methods=["GET", "POST"],
               paths=["/repos/"], rate_per_min=60, expires_at="2099-01-01T00:00:00Z")
    assert meta["name"] == "gh" and meta["hosts"] == ["api.github.com"] and meta["ports"] == [443, 8443]
    assert meta["inject"] == {"header": "Authorization", "template": "Bearer {value}"}
    assert meta["methods"] == ["GET", "POST"] and meta["paths"] == ["/repos/"] and meta["rate_per_min"] == 60
    assert meta["expires_at"].startswith("2099-01-01T00:00:00") and "value" not in meta
    assert meta["created_by"].startswith("key-")
    # the same name again
    refused(a, {"name": "gh", "value": VALUE, "hosts": ["api.github.com"]}, 409)

    # every refusal with its control (the same body, the one field fixed, is made)
    ok = {"value": VALUE, "hosts": ["api.github.com"]}
    now = int(time.time())
    cases = [
        ({"name": "Bad Name"}, {"name": "bad-name"}, "'name'"),
        ({"value": ""}, {"value": "x"}, "'value'"),
        ({"value": "a\r\nX-Evil: 1"}, {"value": "a X-Evil: 1"}, "CR or LF"),
        ({"hosts": []}, {"hosts": ["a.example.com"]}, "'hosts'"),
        ({"hosts": ["1.2.3.4"]}, {"hosts": ["one.example.com"]}, "hosts[0]"),
        ({"hosts": ["*.com"]}, {"hosts": ["*.example.com"]}, "public suffix"),
        ({"hosts": ["ok.example.com", "bad host"]}, {"hosts": ["ok.example.com", "API.Example.com."]}, "hosts[1]"),
        ({"header": "Authorization: Bearer"}, {"header": "Authorization: Bearer {value}"}, "exactly once"),
        ({"header": "X-A: {value}{value}"}, {"header": "X-A: {value}"}, "exactly once"),
        ({"header": "X-A: {value}\r\nX-B: 1"}, {"header": "X-A: {value} X-B"}, "printable"),
        ({"header": "X A: {value}"}, {"header": "X-A: {value}"}, "header name"),
        ({"header": "Host: {value}"}, {"header": "X-Host: {value}"}, "does not inject"),
        ({"header": "X-A: {value}", "basic": "u"}, {"basic": "u"}, "not both"),
        ({"basic": "a:b"}, {"basic": "ab"}, "'basic'"),
        ({"ports": [0]}, {"ports": [1]}, "ports[0]"),
        ({"methods": ["get"]}, {"methods": ["GET"]}, "methods[0]"),
        ({"paths": ["repos"]}, {"paths": ["/repos"]}, "paths[0]"),
        ({"expires_at": now - 10}, {"expires_at": now + 3600}, "in the past"),
        ({"expires_at": "2020-01-01T00:00:00Z"}, {"expires_at": "2099-01-01T00:00:00+01:00"}, "in the past"),
        ({"expires_at": "tomorrow"}, {"expires_at": 0}, "RFC 3339"),
        ({"rate_per_min": -1}, {"rate_per_min": 0}, "rate_per_min"),
        ({"sandbox": "sbx-0123456789abcdef"}, {}, "no sandbox"),
        ({"valu": "x"}, {}, "unknown field"),
    ]
    for i, (bad, good, needle) in enumerate(cases):
        name = f"case{i}"
        refused(a, {"name": name, **ok, **bad} if "name" not in bad else {**ok, **bad}, 400, needle)
        body = {"name": name, **ok, **good} if "name" not in good else {**ok, **good}
        st, _, data = a.request("POST", "/v1/secrets", body)
        assert st == 201, (body, st, data)
    listed = a.api("GET", "/v1/secrets")["secrets"]
    assert {s["name"] for s in listed} == {"gh", "bad-name"} | {f"case{i}" for i in range(len(cases))} - {"case0"}
    host = [s for s in listed if s["name"] == "case6"][0]["hosts"]
    assert host == ["ok.example.com", "api.example.com"]  # canonical
    assert [s for s in listed if s["name"] == "case13"][0]["inject"] == {"basic": "ab"}

    # another tenant: sees nothing of the admin's or of tenant A's, cannot delete them
    ta, ka = tenant_with_key(a, "alpha")
    tb, kb = tenant_with_key(a, "beta")
    add(a, "only-a", token=ka["key"])
    assert [s["name"] for s in a.api("GET", "/v1/secrets", token=ka["key"])["secrets"]] == ["only-a"]
    assert a.api("GET", "/v1/secrets", token=kb["key"])["secrets"] == []
    for method in ("GET", "DELETE"):
        for name in ("only-a", "gh", "nosuch"):
            st, _, data = a.request(method, f"/v1/secrets/{name}", token=kb["key"])
            assert st == 404 and json.loads(data)["error"]["message"] == f"secret '{name}' not found", data
    st, _, _ = a.request("GET", f"/v1/secrets?tenant={ta['id']}", token=kb["key"])
    assert st == 403
    # nor use them: a create naming them is a 400 and makes nothing
    refused(a, {"template": "minimal", "secrets": ["only-a"]}, 400, "no secret 'only-a'", token=kb["key"],
            path="/v1/sandboxes")
    assert a.api("GET", "/v1/sandboxes", token=kb["key"])["sandboxes"] == []
    # the same name in B's scope is B's own
    add(a, "only-a", token=kb["key"])
    # the admin reaches A's scope by asking for it
    assert a.api("GET", f"/v1/secrets/only-a?tenant={ta['id']}")["tenant_id"] == ta["id"]
    assert a.request("GET", "/v1/secrets/only-a")[0] == 404
    a.api("DELETE", "/v1/secrets/only-a", expect=204, token=kb["key"])
    assert a.api("GET", "/v1/secrets/only-a", token=ka["key"])["name"] == "only-a"

    # the audit log: who, what, tenant-scoped, newest first
    ev_a = a.api("GET", "/v1/audit", token=ka["key"])["events"]
    assert [(e["action"], e["secret"], e["actor"]) for e in ev_a] == [("secret.create", "only-a", ka["id"])]
    ev_b = a.api("GET", "/v1/audit", token=kb["key"])["events"]
    assert [(e["action"], e["actor"]) for e in ev_b] == [("secret.delete", kb["id"]), ("secret.create", kb["id"])]
    everything = a.api("GET", "/v1/audit?limit=1000")["events"]
    assert len(everything) == 1 + len(cases) + 1 + 2  # gh, the controls, A's, B's create and delete
    assert [e["id"] for e in everything] == sorted((e["id"] for e in everything), reverse=True)
    assert a.api("GET", "/v1/audit?secret=gh")["events"][0]["actor"] == meta["created_by"]
    assert len(a.api("GET", "/v1/audit?limit=2")["events"]) == 2
    assert a.request("GET", "/v1/audit?limit=0")[0] == 400

    a.api("DELETE", "/v1/secrets/gh", expect=204)
    assert a.request("GET", "/v1/secrets/gh")[0] == 404
    assert a.request("DELETE", "/v1/secrets/gh")[0] == 404
    assert a.api("GET", "/v1/audit?secret=gh")["events"][0]["action"] == "secret.delete"

    # no value in any reply (the ones above checked theirs) nor on disk but sealed
    for path in ("/v1/secrets", "/v1/audit?limit=1000", f"/v1/secrets?tenant={ta['id']}"):
        st, _, data = a.request("GET", path)
        assert st == 200 and VALUE.encode() not in data, path
    assert_value_absent(a, "case13")


def assert_value_absent(a, control):
    """Nowhere in the data dir (the SQLite file and its WAL included) nor in
    the log, and the key file private; control (a secret's name) is found
    by the same search."""
    key = os.path.join(a.data_dir, "control", "secrets.key")
    st = os.stat(key)
    assert st.st_mode & 0o777 == 0o600 and st.st_size == 32, oct(st.st_mode)
    r = subprocess.run(["grep", "-rlaF", "--devices=skip", VALUE, a.data_dir, a.log_path], capture_output=True)
    assert r.returncode == 1, ("the value is in", r.stdout, r.stderr)
    r = subprocess.run(["grep", "-rlaF", "--devices=skip", control, a.data_dir], capture_output=True)
    assert r.returncode == 0 and b"airlock.db" in r.stdout, (control, r.stdout, r.stderr)


def guest_grep(a, sid, needle):
    """grep -rl for needle (given in two halves) in the guest's process
    environments, /etc, /root and /tmp: (exit status, files)."""
    half = len(needle) // 2
    r = a.exec(sid, ["sh", "-c", f"v1={needle[:half]}; v2={needle[half:]}; "
                                 f"grep -rlsaF \"$v1$v2\" /proc/[0-9]*/environ /etc /root /tmp"])
    return r["exit_code"], r["stdout"]


def guest_has_no_value(a, sid, control):
    """The value in no process's environment nor under /etc, /root, /tmp
    of the guest; the command holds it in two halves only (a request that
    held it whole could put it in a log line). Returns the guest's env
    and its processes' environments."""
    dump = a.exec(sid, ["sh", "-c", "env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'"])
    assert VALUE not in dump["stdout"] and VALUE not in dump["stderr"], dump["stdout"][-400:]
    # grep: 1 when nothing matched; 2 when a file could not be read as
    # well (a process that exited meanwhile): what it read did not match
    status, files = guest_grep(a, sid, VALUE)
    assert status in (1, 2) and files == "", (status, files)
    # the control: the same search finds the placeholder the guest was given
    status, files = guest_grep(a, sid, control)
    assert status in (0, 2) and "/environ" in files, (status, files)
    return dump["stdout"]


def getenv(a, sid, name):
    return a.exec(sid, ["sh", "-c", f'echo "${name}"'])["stdout"].strip()


def sandbox_secrets(a, sid, **kw):
    return a.api("GET", f"/v1/sandboxes/{sid}/secrets", **kw)


def test_secrets_in_sandboxes(airlock_factory, tmp_path):
    """About 30 s here: 6 VMs (forks with and without secrets), a node killed,
    a suspend/wake, an airlockd restart, the CLI."""
    a = airlock_factory(prebuild="minimal")
    add(a, "gh-app", header="Authorization: token {value}")
    add(a, "other", basic="ci")

    # unknown or expired: 400 naming it, no sandbox, no VM
    vms = len(qemu_pids(a.data_dir))
    refused(a, {"template": "minimal", "secrets": ["gh-app", "nosuch"]}, 400, "no secret 'nosuch'",
            path="/v1/sandboxes")
    add(a, "soon", expires_at=int(time.time()) + 2)

    def soon_refused():
        """Why a create with 'soon' and an env that clashes with it is
        refused (never a sandbox): the clash while it lasts, the expiry
        once it is past."""
        return refused(a, {"template": "minimal", "secrets": ["soon"], "env": {"SOON": "x"}},
                       path="/v1/sandboxes")["error"]["message"]
    assert "would set env SOON" in soon_refused()  # the control: not expired yet
    wait_until(lambda: "'soon' has expired" in soon_refused(), "secret 'soon' has not expired", a, timeout=10)
    refused(a, {"template": "minimal", "secrets": ["soon"]}, 400, "'soon' has expired", path="/v1/sandboxes")
    refused(a, {"template": "minimal", "secrets": ["gh-app"], "env": {"GH_APP": "x"}}, 400, "GH_APP",
            path="/v1/sandboxes")
    assert a.api("GET", "/v1/sandboxes")["sandboxes"] == []
    assert len(qemu_pids(a.data_dir)) == vms

    # attached: $GH_APP is a placeholder, the value is nowhere in the guest
    sb = a.create(secrets=["gh-app", "other"])
    sid = sb["id"]
    assert set(sb["env_keys"]) == {"GH_APP", "OTHER"}
    att = sandbox_secrets(a, sid)
    assert [(s["name"], s["env"]) for s in att["secrets"]] == [("gh-app", "GH_APP"), ("other", "OTHER")]
    assert att["node"] == ["gh-app", "other"]
    ph = {s["name"]: s["placeholder"] for s in att["secrets"]}
    assert all(PLACEHOLDER.match(p) for p in ph.values()) and ph["gh-app"] != ph["other"]
    out = getenv(a, sid, "GH_APP")
    assert out == ph["gh-app"] and out != VALUE
    env_dump = guest_has_no_value(a, sid, ph["gh-app"])
    assert ph["gh-app"] in env_dump
    attach = a.api("GET", f"/v1/audit?sandbox={sid}")["events"]
    assert sorted((e["action"], e["secret"]) for e in attach) == [("secret.attach", "gh-app"),
                                                                  ("secret.attach", "other")]

    # the node keeps the set in memory only: not in its record; a node
    # restart loses it and airlockd (seeing the new boot id) hands it over
    with open(os.path.join(a.data_dir, "sandboxes", sid, "sandbox.json"), "rb") as f:
        assert VALUE.encode() not in f.read()
    old = node_pids(a.data_dir)
    os.kill(old[0], signal.SIGKILL)
    wait_until(lambda: node_pids(a.data_dir) not in ([], old) and
               a.api("GET", f"/v1/sandboxes/{sid}")["state"] == "running" and
               sandbox_secrets(a, sid)["node"] == ["gh-app", "other"], "the new node did not get the set", a)
    # a suspend drops the sandbox from the node; the wake hands the set over
    assert a.api("POST", f"/v1/sandboxes/{sid}/suspend?wait=true")["state"] == "succeeded"
    assert sandbox_secrets(a, sid)["node"] is None
    assert a.api("POST", f"/v1/sandboxes/{sid}/wake?wait=true")["state"] == "succeeded"
    assert sandbox_secrets(a, sid)["node"] == ["gh-app", "other"]
    assert getenv(a, sid, "GH_APP") == ph["gh-app"]

    # fork: the child has the parent's (same placeholders) only when asked
    with_s = a.api("POST", f"/v1/sandboxes/{sid}/fork?wait=true", {"secrets": True})
    assert with_s["state"] == "succeeded", with_s
    child = with_s["result"]["sandbox"]["id"]
    catt = sandbox_secrets(a, child)
    assert {s["name"]: s["placeholder"] for s in catt["secrets"]} == ph and catt["node"] == ["gh-app", "other"]
    without = a.api("POST", f"/v1/sandboxes/{sid}/fork?wait=true", {})
    assert without["state"] == "succeeded", without
    bare = without["result"]["sandbox"]["id"]
    assert sandbox_secrets(a, bare) == {"secrets": [], "node": []}
    # its memory still holds the placeholder, never the value
    assert getenv(a, bare, "GH_APP") == ph["gh-app"]
    guest_has_no_value(a, bare, ph["gh-app"])
    st, _, data = a.request("POST", f"/v1/sandboxes/{sid}/fork", {"secrets": "yes"})
    assert st == 400, data

    # a deleted secret leaves the running sandboxes that had it at once
    a.api("DELETE", "/v1/secrets/other", expect=204)
    for s in (sid, child):
        att = sandbox_secrets(a, s)
        assert [x["name"] for x in att["secrets"]] == ["gh-app"] and att["node"] == ["gh-app"], att

    # the CLI: add from a file, list, create with --secret, audit, rm
    f = tmp_path / "tok"
    f.write_text(VALUE + "\n")
    r = a.cli("secret", "add", "cli-tok", "--value-file", str(f), "--host", "api.github.com,*.example.com",
              "--header", "X-Token: {value}", "--expires", "30d", "--rate", "10")
    assert r.returncode == 0 and r.stdout.decode() == "cli-tok\n", r.stderr
    got = a.api("GET", "/v1/secrets/cli-tok")
    assert got["hosts"] == ["api.github.com", "*.example.com"] and got["rate_per_min"] == 10
    assert got["inject"] == {"header": "X-Token", "template": "{value}"} and got["expires_at"]
    r = a.cli("secret", "add", "cli-bad", "--value-stdin", "--host", "*.com", input=VALUE.encode())
    assert r.returncode == 1 and b"public suffix" in r.stderr, r.stderr
    r = a.cli("secret", "add", "cli-bad", "--host", "a.example.com")
    assert r.returncode == 2, r.stderr
    r = a.cli("secret", "ls")
    assert r.returncode == 0 and "cli-tok" in r.stdout.decode() and VALUE not in r.stdout.decode()
    r = a.cli("create", "--template", "minimal", "--secret", "cli-tok,gh-app")
    assert r.returncode == 0, r.stderr
    cid = r.stdout.decode().strip()
    assert [s["name"] for s in sandbox_secrets(a, cid)["secrets"]] == ["cli-tok", "gh-app"]
    assert PLACEHOLDER.match(getenv(a, cid, "CLI_TOK"))
    r = a.cli("audit", "--secret", "cli-tok")
    lines = r.stdout.decode().splitlines()
    assert r.returncode == 0 and len(lines) == 3 and "secret.attach" in lines[1] and "secret.create" in lines[2], lines
    r = a.cli("secret", "rm", "cli-tok")
    assert r.returncode == 0 and r.stdout.decode() == "cli-tok\n", r.stderr
    assert sandbox_secrets(a, cid)["node"] == ["gh-app"]
    r = a.cli("fork", "--secrets", cid)
    assert r.returncode == 0, r.stderr
    fork_cli = r.stdout.decode().strip()
    assert sandbox_secrets(a, fork_cli)["node"] == ["gh-app"]

    # narrowed to a sandbox: attached to it at once; no new sandbox can have it
    narrow = add(a, "narrow", sandbox=sid)
    assert narrow["sandbox"] == sid
    att = sandbox_secrets(a, sid)
    assert [x["name"] for x in att["secrets"]] == ["gh-app", "narrow"] and att["node"] == ["gh-app", "narrow"]
    refused(a, {"template": "minimal", "secrets": ["narrow"]}, 400, "narrowed to sandbox", path="/v1/sandboxes")
    t, k = tenant_with_key(a, "gamma")
    refused(a, {"name": "narrow2", "value": VALUE, "hosts": ["a.example.com"], "sandbox": sid}, 400,
            "no sandbox", token=k["key"])
    a.api("DELETE", "/v1/secrets/narrow", expect=204)
    assert sandbox_secrets(a, sid)["node"] == ["gh-app"]

    for s in (sid, child, bare, cid, fork_cli):
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204
    # the attachments go with the sandbox
    assert a.request("GET", f"/v1/sandboxes/{sid}/secrets")[0] == 404

    # an airlockd restart: the store and the key persist, a new sandbox uses them
    a.stop()
    b = Airlock(a.data_dir, prebuild="minimal")
    try:
        b.wait_ready(START_TIMEOUT)
        assert sorted(s["name"] for s in b.api("GET", "/v1/secrets")["secrets"]) == ["gh-app", "soon"]
        n = b.create(secrets=["gh-app"])
        att = sandbox_secrets(b, n["id"])
        assert att["node"] == ["gh-app"]
        assert getenv(b, n["id"], "GH_APP") == att["secrets"][0]["placeholder"]
        guest_has_no_value(b, n["id"], att["secrets"][0]["placeholder"])
        assert b.request("DELETE", f"/v1/sandboxes/{n['id']}")[0] == 204
    finally:
        b.stop()
    assert_value_absent(b, "gh-app")
