"""Tenant B attacks tenant A's resources with its own, valid key: by id on
every endpoint, by listing, by operation, snapshot and session ids, by
attach token, by Idempotency-Key, by spelling ids differently, at A's
volume's files with every token B has; a revoked key, a tenant key
managing tenants. Everything of A's must answer B exactly
as an id that does not exist (404, byte-identical body once the id is
masked), and change nothing (tests/integration/test_tenants.py holds the
basic checks; these go further).

One Airlock serves the module: A's sandbox, session, snapshot and
operations are set up once, attacked by every test, and checked intact.
Each attack carries its control, after it in the same test: the same
request by whoever may make it (B on a sandbox or session of its own, A on
its own, the admin on tenants and keys) succeeds, so a refusal is the
tenant check's and not a broken key, request or server."""

import base64
import hashlib
import hmac
import http.client
import json
import os
import time

import pytest

from harness import airlock_instance

FAKE = {"sbx": "sbx-0123456789abcdef", "op": "op-0123456789abcdef", "ses": "ses-0123456789abcdef",
        "snap": "snap-0123456789abcdef"}


class World:
    pass


def _tenant(a, name):
    t = a.api("POST", "/v1/tenants", {"name": name}, expect=201)
    k = a.api("POST", f"/v1/tenants/{t['id']}/keys", {"name": "k"}, expect=201)
    return t, k


@pytest.fixture(scope="module")
def w(templates):
    with airlock_instance(prebuild="minimal") as a:
        w = World()
        w.a = a
        w.ta, w.ka = _tenant(a, "alpha")
        w.tb, w.kb = _tenant(a, "beta")
        w.A, w.B = w.ka["key"], w.kb["key"]
        w.sa = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=w.A)
        w.sb = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=w.B)
        w.admin_sbx = a.create("minimal")  # admin-owned: no tenant
        sid = w.sa["id"]
        a.put_file(sid, "/root/secret", b"alpha's secret")
        # the session's process records its pid, so "intact" can check that
        # it still runs rather than that its row is still there
        w.ses = a.api("POST", f"/v1/sandboxes/{sid}/sessions",
                      {"cmd": ["sh", "-c", "echo $$ > /root/ses.pid.new && mv /root/ses.pid.new /root/ses.pid && "
                                           "exec sleep 600"]}, expect=201, token=w.A)
        deadline = time.monotonic() + 60
        while (r := a.exec(sid, ["cat", "/root/ses.pid"]))["exit_code"] != 0:
            assert time.monotonic() < deadline, f"the session never wrote its pid: {r}"
            time.sleep(0.1)
        w.ses_pid = int(r["stdout"])
        w.snap = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "disk"}, expect=201, token=w.A)
        w.ses_b = a.api("POST", f"/v1/sandboxes/{w.sb['id']}/sessions", {"cmd": ["sleep", "600"]}, expect=201,
                        token=w.B)
        # B's own sandbox for the controls, with a file and a snapshot of
        # its own: what B is refused on A's, B may do on it
        w.bc = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=w.B)
        a.put_file(w.bc["id"], "/root/secret", b"beta's secret")
        w.bc_snap = a.api("POST", f"/v1/sandboxes/{w.bc['id']}/snapshots", {"kind": "disk"}, expect=201, token=w.B)
        yield w
        for s in (w.sa, w.sb, w.bc, w.admin_sbx):
            a.request("DELETE", f"/v1/sandboxes/{s['id']}")


def _masked_404(a, method, path, rid, token, body=None, headers=None, what="sandbox"):
    """The 404 of the lookup itself: it names the id it did not find (so
    the request reached its endpoint: no "no such endpoint")."""
    status, hdrs, data = a.request(method, path, body, token=token, headers=headers, timeout=60)
    assert status == 404, (method, path, status, data)
    assert json.loads(data)["error"] == {"code": "not_found", "message": f"{what} '{rid}' not found"}, data
    keep = {k.lower(): v for k, v in hdrs.items() if k.lower() not in ("x-request-id", "date", "content-length")}
    return data.replace(rid.encode(), b"<ID>"), keep


def _same_as_unknown(a, method, tmpl, real, fake, token, body=None, what="sandbox"):
    theirs = _masked_404(a, method, tmpl.format(real), real, token, body, what=what)
    nobody = _masked_404(a, method, tmpl.format(fake), fake, token, body, what=what)
    assert theirs == nobody, (method, tmpl, theirs, nobody)


def _session_output(a, sid, token):
    """(stdout, exit code) of session sid, read to its end."""
    out, code = b"", None
    for event, data, _ in a.sse(f"/v1/sessions/{sid}/events", token=token, timeout=60):
        if event == "stdout":
            out += base64.b64decode(data["data"])
        elif event == "exit":
            code = data["exit_code"]
    return out, code


def _op_succeeds(a, op, token):
    """Waits for operation op (a 202's) to end; it must succeed."""
    deadline = time.monotonic() + 120
    while op["state"] not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, op
        time.sleep(0.1)
        op = a.api("GET", f"/v1/operations/{op['id']}", token=token)
    assert op["state"] == "succeeded", op
    return op


def _b_may(w, method, tmpl, body):
    """The control of an attack on another's sandbox: the same request with
    B's key on B's own sandbox (for a delete, one made for it) succeeds and
    does what it says; B's sandbox is then put back as it was."""
    a, B, bc = w.a, w.B, w.bc["id"]
    suffix = tmpl.split("{}", 1)[1]
    verb = suffix.lstrip("/").split("?")[0]

    def call(sid, expect, body=body):
        status, _, data = a.request(method, tmpl.format(sid), body, token=B, timeout=120)
        assert status == expect, ("the control", method, tmpl, status, data)
        return data

    def state():
        return a.api("GET", f"/v1/sandboxes/{bc}", token=B)["state"]

    def verb_on_bc(v):
        assert a.api("POST", f"/v1/sandboxes/{bc}/{v}?wait=true", token=B)["state"] == "succeeded", v

    if method == "DELETE" and verb == "":
        tmp = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=B)["id"]
        if "keep_snapshots" in suffix:
            a.api("POST", f"/v1/sandboxes/{tmp}/snapshots", {"kind": "disk"}, expect=201, token=B)
            assert json.loads(call(tmp, 200))["state"] == "archived"
            a.api("DELETE", f"/v1/sandboxes/{tmp}", expect=204, token=B)
        else:
            call(tmp, 204)
        assert a.request("GET", f"/v1/sandboxes/{tmp}", token=B)[0] == 404
    elif verb == "":
        assert json.loads(call(bc, 200))["id"] == bc
    elif verb == "exec":
        assert json.loads(call(bc, 200))["stdout"] == "beta's secret"
    elif verb == "files":
        read = f"/v1/sandboxes/{bc}/files?path=/root/secret"
        if method == "GET":
            assert call(bc, 200) == b"beta's secret"
        else:
            call(bc, 200 if method == "PUT" else 204)
            status, _, data = a.request("GET", read, token=B)
            assert (status, data) == (200, body) if method == "PUT" else status == 404, (status, data)
            assert a.request("PUT", read, b"beta's secret", token=B)[0] == 200
    elif verb == "ls":
        assert "secret" in [e["name"] for e in json.loads(call(bc, 200))["entries"]]
    elif verb == "sessions":
        ses = json.loads(call(bc, 201))
        assert _session_output(a, ses["id"], ses["attach_token"]) == (b"beta's secret", 0)
    elif verb == "snapshots" and method == "GET":
        assert w.bc_snap["id"] in [x["id"] for x in json.loads(call(bc, 200))["snapshots"]]
    elif verb == "snapshots":
        assert json.loads(call(bc, 201))["kind"] == body["kind"]
    else:  # a lifecycle verb: put bc where the verb starts from, run it, and back
        before, after, back = {"pause": (None, "paused", "resume"), "resume": ("pause", "running", None),
                               "stop": (None, "stopped", "start"), "start": ("stop", "running", None),
                               "suspend": (None, "suspended", "wake"), "wake": ("suspend", "running", None),
                               "fork": (None, "running", None), "rollback": (None, "running", None)}[verb]
        if before:
            verb_on_bc(before)
        if verb == "rollback":
            body = {"snapshot": w.bc_snap["id"]}
        op = json.loads(call(bc, 200 if "wait=true" in suffix else 202, body))
        op = _op_succeeds(a, op, B)
        assert op["verb"] == verb and op["sandbox_id"] == bc and state() == after, (op, state())
        if verb == "fork":
            child = op["result"]["sandbox"]["id"]
            assert a.api("GET", f"/v1/sandboxes/{child}", token=B)["state"] == "running"
            a.api("DELETE", f"/v1/sandboxes/{child}", expect=204, token=B)
        if back:
            verb_on_bc(back)
    assert state() == "running"


def _a_is_intact(w):
    a, sid = w.a, w.sa["id"]
    sb = a.api("GET", f"/v1/sandboxes/{sid}", token=w.A)
    assert sb["state"] == "running" and sb["tenant_id"] == w.ta["id"], sb
    assert a.api("GET", f"/v1/sessions/{w.ses['id']}", token=w.A)["id"] == w.ses["id"]
    r = a.api("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["cat", f"/proc/{w.ses_pid}/cmdline"]}, token=w.A)
    assert r["exit_code"] == 0 and r["stdout"] == "sleep\x00600\x00", f"A's session process is gone: {r}"
    snaps = a.api("GET", f"/v1/sandboxes/{sid}/snapshots", token=w.A)["snapshots"]
    assert w.snap["id"] in [s["id"] for s in snaps]
    r = a.api("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["cat", "/root/secret"]}, token=w.A)
    assert r["stdout"] == "alpha's secret"


SANDBOX_ENDPOINTS = [
    ("GET", "/v1/sandboxes/{}", None),
    ("DELETE", "/v1/sandboxes/{}", None),
    ("DELETE", "/v1/sandboxes/{}?keep_snapshots=true", None),
    ("POST", "/v1/sandboxes/{}/exec", {"cmd": ["cat", "/root/secret"]}),
    ("GET", "/v1/sandboxes/{}/files?path=/root/secret", None),
    ("PUT", "/v1/sandboxes/{}/files?path=/root/secret", b"overwritten by beta"),
    ("DELETE", "/v1/sandboxes/{}/files?path=/root/secret", None),
    ("GET", "/v1/sandboxes/{}/ls?path=/root", None),
    ("POST", "/v1/sandboxes/{}/sessions", {"cmd": ["sh", "-c", "cat /root/secret"]}),
    ("GET", "/v1/sandboxes/{}/snapshots", None),
    ("POST", "/v1/sandboxes/{}/snapshots", {"kind": "disk"}),
    ("POST", "/v1/sandboxes/{}/snapshots", {"kind": "full"}),
] + [("POST", "/v1/sandboxes/{}/" + verb, None) for verb in
     ("pause", "resume", "stop", "start", "fork", "suspend", "wake")] + [
    ("POST", "/v1/sandboxes/{}/pause?wait=true", {}),
    ("POST", "/v1/sandboxes/{}/rollback", "SNAP"),
]


@pytest.mark.parametrize("method,tmpl,body", SANDBOX_ENDPOINTS,
                         ids=[f"{m} {t.split('{}')[1] or '/'}" for m, t, _ in SANDBOX_ENDPOINTS])
def test_other_tenants_sandbox_by_id(w, method, tmpl, body):
    """Every endpoint that takes a sandbox id, with A's id and B's key:
    the same 404 as an unknown id (the lookup's own, naming the id), and
    A's sandbox is untouched. The control: the same request with B's key
    on B's own sandbox succeeds."""
    attack = {"snapshot": w.snap["id"]} if body == "SNAP" else body
    _same_as_unknown(w.a, method, tmpl, w.sa["id"], FAKE["sbx"], w.B, attack)
    # the admin's own sandboxes are no more a tenant's than another tenant's
    _same_as_unknown(w.a, method, tmpl, w.admin_sbx["id"], FAKE["sbx"], w.B, attack)
    _a_is_intact(w)
    _b_may(w, method, tmpl, body)


@pytest.mark.parametrize("query", ["", "?tenant=TA", "?tenant_id=TA", "?all=true", "?limit=1000&offset=0",
                                   "?state=running", "?template=minimal", "?id=SA", "?page=2"])
def test_listing_shows_only_own_sandboxes(w, query):
    """Whatever filter or paging parameter B adds, the list has B's
    sandboxes only (parameters are ignored: the list is the tenant's
    query). The control: A's same query lists A's sandbox, none of B's."""
    q = query.replace("TA", w.ta["id"]).replace("SA", w.sa["id"])
    status, _, data = w.a.request("GET", "/v1/sandboxes" + q, token=w.B)
    assert status == 200, (q, status, data)
    assert sorted(s["id"] for s in json.loads(data)["sandboxes"]) == sorted([w.sb["id"], w.bc["id"]]), (q, data)
    assert w.sa["id"].encode() not in data and w.admin_sbx["id"].encode() not in data
    status, _, data = w.a.request("GET", "/v1/sandboxes" + q, token=w.A)
    ids = [s["id"] for s in json.loads(data)["sandboxes"]] if status == 200 else []
    assert w.sa["id"] in ids and not {w.sb["id"], w.bc["id"], w.admin_sbx["id"]} & set(ids), (q, status, data)


def test_other_tenants_operations(w):
    """A's create operation and a verb operation of A's, and the admin's,
    by id with B's key: the same 404 as an unknown operation. The control:
    each owner gets its operations, B its own."""
    a = w.a
    op = a.api("POST", f"/v1/sandboxes/{w.sa['id']}/pause?wait=true", token=w.A)
    a.api("POST", f"/v1/sandboxes/{w.sa['id']}/resume?wait=true", token=w.A)
    for real in (w.sa["operation_id"], op["id"], w.admin_sbx["operation_id"]):
        _same_as_unknown(a, "GET", "/v1/operations/{}", real, FAKE["op"], w.B, what="operation")
    for real, token in ((w.sa["operation_id"], w.A), (op["id"], w.A), (w.admin_sbx["operation_id"], None),
                        (w.sb["operation_id"], w.B)):
        got = a.api("GET", f"/v1/operations/{real}", token=token)
        assert got["id"] == real and got["state"] == "succeeded", got
    _a_is_intact(w)


def test_other_tenants_snapshot(w):
    """B names A's snapshot to roll back its own sandbox: the same 404 as a
    snapshot that does not exist (naming it), and B's sandbox is not
    touched. The control: B's own snapshot rolls it back."""
    a, sb = w.a, w.bc["id"]
    bodies = []
    for snap in (w.snap["id"], FAKE["snap"]):
        status, _, data = a.request("POST", f"/v1/sandboxes/{sb}/rollback", {"snapshot": snap}, token=w.B)
        assert status == 404 and json.loads(data)["error"] == {
            "code": "not_found", "message": f"snapshot '{snap}' of sandbox '{sb}' not found"}, (snap, status, data)
        bodies.append(data.replace(snap.encode(), b"<ID>"))
    assert bodies[0] == bodies[1], bodies
    assert a.api("GET", f"/v1/sandboxes/{sb}", token=w.B)["state"] == "running"
    assert w.snap["id"].encode() not in a.request("GET", f"/v1/sandboxes/{sb}/snapshots", token=w.B)[2]
    _a_is_intact(w)
    op = a.api("POST", f"/v1/sandboxes/{sb}/rollback?wait=true", {"snapshot": w.bc_snap["id"]}, token=w.B)
    assert op["state"] == "succeeded" and op["verb"] == "rollback", op
    assert a.api("POST", f"/v1/sandboxes/{sb}/exec", {"cmd": ["cat", "/root/secret"]}, token=w.B)["stdout"] == \
        "beta's secret"


def _b_may_session(w, method, suffix, body):
    """The control of an attack on another's session: the same request
    with B's key on a session of B's own (a fresh `cat`) succeeds and does
    what it says (stdin reaches cat, a close ends it, KILL kills it)."""
    a, B = w.a, w.B
    ses = a.api("POST", f"/v1/sandboxes/{w.sb['id']}/sessions", {"cmd": ["cat"]}, expect=201, token=B)
    path = f"/v1/sessions/{ses['id']}{suffix}"
    if suffix == "/events":  # the stream opens (cat runs on: its head only)
        conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=60)
        conn.request("GET", path, headers={"Authorization": f"Bearer {B}", "Accept": "text/event-stream"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream", resp.status
        conn.close()
    else:
        status, _, data = a.request(method, path, body, token=B)
        assert status == (200 if suffix == "" else 204), ("the control", method, path, status, data)
        assert suffix != "" or json.loads(data)["id"] == ses["id"], data
    if suffix != "/signal" and not (body or {}).get("close"):
        a.api("POST", f"/v1/sessions/{ses['id']}/stdin", {"close": True}, expect=204, token=B)
    want = (b"", 137) if suffix == "/signal" else (b"x" if (body or {}).get("text") else b"", 0)
    assert _session_output(a, ses["id"], B) == want


@pytest.mark.parametrize("method,suffix,body", [
    ("GET", "", None), ("GET", "/events", None), ("POST", "/stdin", {"text": "x"}),
    ("POST", "/stdin", {"close": True}), ("POST", "/signal", {"signal": "KILL"})])
def test_other_tenants_session(w, method, suffix, body):
    """A's session with B's API key: the same 404 as an unknown session
    (naming it); the session keeps running. The control: the same request
    on B's own session."""
    _same_as_unknown(w.a, method, "/v1/sessions/{}" + suffix, w.ses["id"], FAKE["ses"], w.B, body, what="session")
    _a_is_intact(w)
    _b_may_session(w, method, suffix, body)


def test_attach_token_reaches_its_session_only(w):
    """A's attach token on B's session, on the sandbox endpoints of A's own
    sandbox and on the admin endpoints: 401 everywhere (the token check's
    own: no key at all there); B's attach token on A's session likewise.
    The control, after them: each token opens its own session."""
    a, tok_a, tok_b = w.a, w.ses["attach_token"], w.ses_b["attach_token"]
    unauthorized = {"error": {"code": "unauthorized", "message": "missing or invalid bearer token"}}
    for token, other in ((tok_a, w.ses_b["id"]), (tok_b, w.ses["id"])):
        for method, suffix, body in (("GET", "", None), ("POST", "/signal", {"signal": 9}),
                                     ("POST", "/stdin", {"text": "x"})):
            status, _, data = a.request(method, f"/v1/sessions/{other}{suffix}", body, token=token)
            assert (status, json.loads(data)) == (401, unauthorized), (method, suffix, status, data)
    for method, path in (("GET", f"/v1/sandboxes/{w.sa['id']}"), ("GET", "/v1/sandboxes"),
                         ("GET", f"/v1/operations/{w.sa['operation_id']}"), ("GET", "/v1/tenants"),
                         ("POST", f"/v1/sandboxes/{w.sa['id']}/exec")):
        status, _, data = a.request(method, path, {"cmd": ["true"]} if method == "POST" else None, token=tok_a)
        assert (status, json.loads(data)) == (401, unauthorized), (method, path, status, data)
    # the control: each opens its own session
    for token, own in ((tok_a, w.ses["id"]), (tok_b, w.ses_b["id"])):
        status, _, data = a.request("GET", f"/v1/sessions/{own}", token=token)
        assert status == 200 and json.loads(data)["id"] == own, (status, data)
    _a_is_intact(w)


@pytest.mark.parametrize("spelling", ["upper", "trailing-slash", "double-slash", "percent", "dotted", "space"])
def test_id_spellings_do_not_reach_another_tenant(w, spelling):
    """A's id spelled otherwise (upper case, percent-encoded, with extra
    slashes, dots or spaces): never A's sandbox for B. A's own key on the
    same spelling, after B's: where it reaches A's sandbox, B got the 404
    of an unknown id; where it does not, B got exactly A's refusal (so B
    is refused for the spelling, not by chance). The control: A's plain
    spelling reaches A's sandbox after them."""
    sid, a = w.sa["id"], w.a

    def spelled(i, suffix):
        return {"upper": f"/v1/sandboxes/{i.upper()}{suffix}",
                "trailing-slash": f"/v1/sandboxes/{i}{suffix}/",
                "double-slash": f"//v1//sandboxes//{i}/{suffix}",
                "percent": "/v1/sandboxes/" + "".join(f"%{ord(c):02x}" for c in i) + suffix,
                "dotted": f"/v1/sandboxes/./{i}{suffix}",
                "space": f"/v1/sandboxes/{i}%20{suffix}"}[spelling]

    resolves = spelling in ("trailing-slash", "double-slash", "percent")  # empty segments and %xx: the same id
    for method, suffix, body in (("GET", "", None), ("POST", "/exec", {"cmd": ["cat", "/root/secret"]})):
        p = spelled(sid, suffix)
        theirs_status, _, theirs = a.request(method, p, body, token=w.B)
        own_status, _, own = a.request(method, p, body, token=w.A)
        assert b"secret" not in theirs and b"tenant_id" not in theirs and b"alpha" not in theirs, theirs
        if resolves:
            assert own_status == 200 and (method == "GET" or json.loads(own)["stdout"] == "alpha's secret"), own
            unknown = a.request(method, spelled(FAKE["sbx"], suffix), body, token=w.B)
            assert theirs_status == 404 and theirs.replace(sid.encode(), b"<ID>") == \
                unknown[2].replace(FAKE["sbx"].encode(), b"<ID>"), (theirs, unknown)
        else:
            assert own_status in (400, 404), (p, own_status, own)
            assert (theirs_status, theirs) == (own_status, own), (p, theirs_status, theirs, own)
        # the control: A's plain spelling
        status, _, data = a.request(method, f"/v1/sandboxes/{sid}{suffix}", body, token=w.A)
        assert status == 200 and (method == "GET" or json.loads(data)["stdout"] == "alpha's secret"), data
    _a_is_intact(w)


def test_idempotency_key_of_another_tenant(w):
    """B replays A's Idempotency-Keys (a create's and a verb's): it never
    gets A's sandbox or operation back, and A's are not affected."""
    a = w.a
    key = "alpha-create-1"
    mine = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=w.A,
                 headers={"Idempotency-Key": key})
    status, _, data = a.request("POST", "/v1/sandboxes", {"template": "minimal"}, token=w.B,
                                headers={"Idempotency-Key": key})
    # keys are one namespace: B learns only that the key is taken
    refused = (409, {"error": {"code": "conflict", "message": "Idempotency-Key already used for another request"}})
    assert (status, json.loads(data)) == refused, (status, data)
    # the control: A's own retry gets A's sandbox back
    again = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, token=w.A, headers={"Idempotency-Key": key})
    assert again["id"] == mine["id"], (again, mine)
    vkey = "alpha-pause-1"
    op = a.api("POST", f"/v1/sandboxes/{mine['id']}/pause?wait=true", token=w.A, headers={"Idempotency-Key": vkey})
    # the same key on A's sandbox (404) and on B's own (never A's operation)
    status, _, data = a.request("POST", f"/v1/sandboxes/{mine['id']}/resume", token=w.B,
                                headers={"Idempotency-Key": vkey})
    assert (status, json.loads(data)["error"]["message"]) == (404, f"sandbox '{mine['id']}' not found"), data
    status, _, data = a.request("POST", f"/v1/sandboxes/{w.sb['id']}/pause?wait=true", token=w.B,
                                headers={"Idempotency-Key": vkey})
    assert (status, json.loads(data)) == refused, (status, data)
    assert a.api("GET", f"/v1/sandboxes/{w.sb['id']}", token=w.B)["state"] == "running"
    # a delete of B's own sandbox with A's create key: refused alike, and
    # neither sandbox is deleted
    status, _, data = a.request("DELETE", f"/v1/sandboxes/{w.sb['id']}", token=w.B, headers={"Idempotency-Key": key})
    assert (status, json.loads(data)) == refused, (status, data)
    assert a.api("GET", f"/v1/sandboxes/{w.sb['id']}", token=w.B)["state"] == "running"
    assert a.api("GET", f"/v1/sandboxes/{mine['id']}", token=w.A)["state"] == "paused"
    # the control for B: the same pause with a key of its own is carried out
    op_b = a.api("POST", f"/v1/sandboxes/{w.sb['id']}/pause?wait=true", token=w.B,
                 headers={"Idempotency-Key": "beta-pause-1"})
    assert op_b["state"] == "succeeded" and op_b["id"] != op["id"], op_b
    a.api("POST", f"/v1/sandboxes/{w.sb['id']}/resume?wait=true", token=w.B)
    # the control: A's own retry of the pause gets its operation back
    assert a.api("POST", f"/v1/sandboxes/{mine['id']}/pause?wait=true", token=w.A,
                 headers={"Idempotency-Key": vkey})["id"] == op["id"]
    a.api("DELETE", f"/v1/sandboxes/{mine['id']}", expect=204, token=w.A)
    _a_is_intact(w)


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/v1/tenants", {"name": "gamma"}),
    ("GET", "/v1/tenants", None),
    ("DELETE", "/v1/tenants/TB", None),
    ("DELETE", "/v1/tenants/TA", None),
    ("GET", "/v1/tenants/TB/keys", None),
    ("POST", "/v1/tenants/TB/keys", {"name": "mine"}),
    ("POST", "/v1/tenants/TA/keys", {"name": "theirs"}),
    ("GET", "/v1/tenants/TA/keys", None),
    ("DELETE", "/v1/keys/KA", None),
    ("DELETE", "/v1/keys/KB", None),
])
def test_tenant_key_cannot_manage_tenants_or_keys(w, method, path, body):
    """Tenant and key management is the admin's, also for the key's own
    tenant and its own key: 403 naming that, and nothing changes. The
    control: the admin's same request succeeds (where it would delete
    alpha, beta or their keys, on a tenant or key made for it)."""
    p = (path.replace("TA", w.ta["id"]).replace("TB", w.tb["id"]).replace("KA", w.ka["id"])
         .replace("KB", w.kb["id"]))
    status, _, data = w.a.request(method, p, body, token=w.B)
    assert (status, json.loads(data)) == (403, {"error": {
        "code": "forbidden", "message": "tenants and keys are managed with the admin token"}}), (method, p, status, data)
    # the control: the admin's
    a = w.a
    if method == "DELETE":
        if path.startswith("/v1/tenants/"):
            p = "/v1/tenants/" + a.api("POST", "/v1/tenants", {"name": "scratch"}, expect=201)["id"]
        else:
            p = "/v1/keys/" + a.api("POST", f"/v1/tenants/{w.tb['id']}/keys", {"name": "scratch"}, expect=201)["id"]
    status, _, data = a.request(method, p, body)
    assert status == {"POST": 201, "GET": 200, "DELETE": 204}[method], ("the control", method, p, status, data)
    if method == "POST":
        made = json.loads(data)
        a.api("DELETE", f"/v1/tenants/{made['id']}" if p == "/v1/tenants" else f"/v1/keys/{made['id']}",
              expect=204)
    elif method == "GET":
        got = json.loads(data)
        assert (got["tenants"] if p == "/v1/tenants" else got["keys"]), got
    tenants = w.a.api("GET", "/v1/tenants")["tenants"]
    assert sorted(t["name"] for t in tenants) == ["alpha", "beta"]
    for t, k in ((w.ta, w.ka), (w.tb, w.kb)):
        assert [x["id"] for x in w.a.api("GET", f"/v1/tenants/{t['id']}/keys")["keys"]] == [k["id"]]
    assert w.a.request("GET", "/v1/sandboxes", token=w.A)[0] == 200


def test_revoked_key_fails_at_once_also_on_an_open_connection(w):
    """A key revoked while its holder keeps a keep-alive connection open and
    a session attached: the next request on that very connection is 401, on
    every kind of endpoint."""
    a = w.a
    t = w.tb
    k = a.api("POST", f"/v1/tenants/{t['id']}/keys", {"name": "doomed"}, expect=201)
    conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=60)
    hdr = {"Authorization": f"Bearer {k['key']}", "Content-Type": "application/json"}

    def call(method, path, body=None):
        conn.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=hdr)
        r = conn.getresponse()
        return r.status, r.read()

    assert call("GET", "/v1/sandboxes")[0] == 200
    assert call("GET", f"/v1/sessions/{w.ses_b['id']}")[0] == 200
    a.api("DELETE", f"/v1/keys/{k['id']}", expect=204)
    requests = (("GET", "/v1/sandboxes", None), ("GET", f"/v1/sandboxes/{w.sb['id']}", None),
                ("POST", f"/v1/sandboxes/{w.sb['id']}/exec", {"cmd": ["true"]}),
                ("GET", f"/v1/sessions/{w.ses_b['id']}", None),
                ("POST", "/v1/sandboxes", {"template": "minimal"}))
    for method, path, body in requests:
        status, data = call(method, path, body)
        assert (status, json.loads(data)["error"]) == (401, {
            "code": "unauthorized", "message": "missing or invalid bearer token"}), (method, path, status, data)
    conn.close()
    assert sorted(s["id"] for s in a.api("GET", "/v1/sandboxes", token=w.B)["sandboxes"]) == \
        sorted([w.sb["id"], w.bc["id"]])  # nothing was made
    # the control: the same requests with the tenant's other key
    for method, path, body in requests:
        status, _, data = a.request(method, path, body, token=w.B)
        assert status == (201 if path == "/v1/sandboxes" and method == "POST" else 200), (method, path, status, data)
    a.api("DELETE", f"/v1/sandboxes/{json.loads(data)['id']}", expect=204, token=w.B)


@pytest.mark.parametrize("method,what,body", [("GET", "file", None), ("GET", "dir", None), ("GET", "path", None),
                                              ("PUT", "file", b"overwritten by beta"),
                                              ("PATCH", "path", {"mode": 0o777}), ("DELETE", "path", None),
                                              ("POST", "dir", None)])
def test_other_tenants_volume_content(w, method, what, body):
    """A's volume's files (E2B's volume content API) with every credential
    B has: its API key, its own volume's token, A's sandbox's envd token
    spelled as a bearer, and the admin's API key too (a key is not a
    volume's token): 401, and A's file and volume are untouched. The
    control: B's token on B's volume does the same request."""
    a = w.a
    if not hasattr(w, "volumes"):
        w.volumes = {}
        for name, key in (("alpha", w.A), ("beta", w.B)):
            v = a.api("POST", "/v1/volumes", {"name": f"{name}-data", "size": "32M"}, expect=201, token=key)
            token = a.api("GET", f"/volumes/{v['id']}", auth=False, headers={"X-API-Key": key})["token"]
            w.volumes[name] = (v["id"], token)
    (va, ta), (vb, tb) = w.volumes["alpha"], w.volumes["beta"]
    for vol, token, text in ((va, ta, b"alpha's volume"), (vb, tb, b"beta's volume")):
        status, _, data = a.request("PUT", f"/volumecontent/{vol}/file?path=/secret", text, token=token)
        assert status == 200, data
    # A's sandbox's envdAccessToken: an HMAC under the same key, for another purpose
    with open(os.path.join(a.data_dir, "control", "e2b.key"), "rb") as f:
        envd = hmac.new(f.read(), f"e2b-envd-access:{w.sa['id']}".encode(), hashlib.sha256).hexdigest()
    status, _, data = a.request("GET", "/files?path=/root/secret&username=root", auth=False,
                                headers={"E2b-Sandbox-Id": w.sa["id"], "X-Access-Token": envd})
    assert (status, data) == (200, b"alpha's secret"), (status, data)  # a real credential, for envd
    path = "/made" if what == "dir" and method == "POST" else "/secret" if what != "dir" else "/"
    query = f"{what}?path={path}" + ("&force=true" if method == "POST" else "")
    for token in (w.B, tb, envd, a.token):
        status, _, data = a.request(method, f"/volumecontent/{va}/{query}", body, token=token)
        assert status == 401 and b"volume token" in data, (method, query, status, data)
    # intact: the file as A wrote it, nothing made, nothing holding it
    status, _, data = a.request("GET", f"/volumecontent/{va}/file?path=/secret", token=ta)
    assert (status, data) == (200, b"alpha's volume"), (status, data)
    status, _, data = a.request("GET", f"/volumecontent/{va}/dir?path=/", token=ta)
    assert sorted(e["name"] for e in json.loads(data)) == ["lost+found", "secret"], data
    assert a.api("GET", f"/v1/volumes/{va}", token=w.A)["held_by"] == []
    # the control: B's own token on B's own volume does what was refused
    status, _, data = a.request(method, f"/volumecontent/{vb}/{query}", body, token=tb)
    assert status in (200, 201, 204), (method, query, status, data)
    if method == "PUT":
        assert a.request("GET", f"/volumecontent/{vb}/file?path=/secret", token=tb)[2] == body
    if method == "DELETE":
        assert a.request("GET", f"/volumecontent/{vb}/path?path=/secret", token=tb)[0] == 404
