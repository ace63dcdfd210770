"""A hostile API client: malformed, oversized and traversing requests get
a clear error and change nothing. Each attack is refused with the message
of the check that stops it, and its control follows it in the same test:
the same request made right succeeds."""

import http.client
import json
import socket
import urllib.parse

import pytest

TRAVERSALS = [("../../etc/passwd", "path must be absolute (start with '/')"),
              ("/root/../../etc/shadow", "path must not contain '..' components"),
              ("relative", "path must be absolute (start with '/')"),
              ("", "path must not be empty"),
              ("/root/\u0000x", "the URL has an encoded NUL byte (%00)")]


def _invalid(message):
    return {"error": {"code": "invalid", "message": message}}


@pytest.mark.cases(len(TRAVERSALS))
def test_path_traversal_and_relative_paths_are_refused(airlock):
    """Each path is refused by path_check() with its reason, for a read
    and a write, before the node is asked; the control after each: a
    valid path is written and read back."""
    a = airlock
    sid = a.create("minimal")["id"]
    for i, (p, why) in enumerate(TRAVERSALS):
        q = urllib.parse.urlencode({"path": p})
        for method, body in (("GET", None), ("PUT", b"x")):
            status, _, data = a.request(method, f"/v1/sandboxes/{sid}/files?{q}", body=body)
            assert (status, json.loads(data)) == (400, _invalid(why)), (p, method, status, data)
        # the control
        a.put_file(sid, f"/root/ok-{i}", b"mine %d" % i)
        assert a.get_file(sid, f"/root/ok-{i}") == b"mine %d" % i
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


@pytest.mark.cases(8)  # the nested body, the declared 2 MiB, six ill-typed bodies
def test_oversized_and_malformed_bodies(airlock):
    """A body nested 100000 deep, one declared over the 1 MiB limit (413
    before it is read), ill-typed fields: each refused with its reason,
    nothing created. The control after each: a valid create is served."""
    a = airlock

    def control():
        sb = a.create("minimal")["id"]
        assert [s["id"] for s in a.api("GET", "/v1/sandboxes")["sandboxes"]] == [sb]
        assert a.request("DELETE", f"/v1/sandboxes/{sb}")[0] == 204

    status, _, body = a.request("POST", "/v1/sandboxes", body=b"{" * 100000,
                                headers={"Content-Type": "application/json"})
    assert status == 400 and json.loads(body)["error"]["message"].startswith("request body is not valid JSON"), body
    assert a.api("GET", "/v1/sandboxes")["sandboxes"] == []
    control()
    # a declared body over the limit is refused before it is read
    with socket.create_connection(("127.0.0.1", a.port), timeout=30) as c:
        c.sendall((f"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {a.token}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {2 << 20}\r\n\r\n").encode())
        head = c.recv(4096)
    assert head.startswith(b"HTTP/1.1 413") and head.endswith(
        b'{"error":{"code":"too_large","message":"request body of 2097152 bytes exceeds the limit of 1048576 bytes"}}'), \
        head
    assert a.api("GET", "/v1/sandboxes")["sandboxes"] == []
    control()
    for bad, why in (({"template": "../minimal"}, "field 'template' must be 1..64 characters of [A-Za-z0-9._-]"),
                     ({"template": 7}, "field 'template' must be a string"),
                     ({"env": {"A=B": "x"}}, "field 'env': 'A=B' is not a valid variable name"),
                     ({"env": ["x"]}, "field 'env' must be an object of strings"),
                     ({"idle_timeout_s": -1}, "field 'idle_timeout_s' must be an integer from 0 (never) to 31536000"),
                     ({"metadata": "x"}, "field 'metadata' must be an object of strings")):
        status, _, body = a.request("POST", "/v1/sandboxes", bad)
        assert (status, json.loads(body)) == (400, _invalid(why)), (bad, status, body)
        assert a.api("GET", "/v1/sandboxes")["sandboxes"] == []
        control()


UNAUTHORIZED = {"error": {"code": "unauthorized", "message": "missing or invalid bearer token"}}
NO_ENDPOINT = {"error": {"code": "not_found", "message": "no such endpoint"}}
# headers of the token attacks (None: no Authorization at all)
BAD_TOKENS = [None, "Bearer alk_" + "0" * 64, "Bearer ", "Bearer", "Basic " + "x" * 20, "Bearer " + "A" * 5000]
# a sandbox id made a path, and the answer: the router finds no endpoint
# for the segments it makes, or the lookup no sandbox of the literal id
SANDBOX_SPELLINGS = [("x/../{sid}", None), ("./{sid}", None), ("sbx-x%2F..%2F{sid}", None), ("..%2F{sid}", None),
                     ("{sid}%2F.", None), ("..", None), ("sbx-%2e%2e", "sbx-..")]
NUL_SPELLINGS = ["{sid}%00", "{sid}%00/../x", "{sid}?x=%00"]
OP_SPELLINGS = [("x/../{op}", None), ("op-x%2F..%2F{op}", None), ("op-%2e%2e", "op-..")]


@pytest.mark.cases(len(BAD_TOKENS) + len(SANDBOX_SPELLINGS) + len(NUL_SPELLINGS) + len(OP_SPELLINGS))
def test_no_token_bad_token_and_ids_that_are_paths(airlock):
    """No token, an unknown one, malformed Authorization headers: the
    token check's 401. Ids spelled as paths that would reach a sandbox and
    an operation that exist if the server normalised them: the router's
    404 "no such endpoint", or the lookup's 404 naming the literal id; an
    encoded NUL: 400 naming it. The control after each: the plain request
    with the valid token reaches them (and so does an id whose letters are
    percent-encoded: the server decodes, it does not normalise)."""
    a = airlock
    sid = a.create("minimal")["id"]
    op = a.api("POST", f"/v1/sandboxes/{sid}/pause?wait=true")["id"]  # finished: the delete below may run

    def control():
        status, _, data = a.request("GET", "/v1/sandboxes")
        assert status == 200 and [s["id"] for s in json.loads(data)["sandboxes"]] == [sid], (status, data)
        for path, want in ((f"/v1/sandboxes/{sid}", sid), (f"/v1/sandboxes/{sid[:3]}%2D{sid[4:]}", sid),
                           (f"/v1/operations/{op}", op)):
            status, _, data = a.request("GET", path)
            assert status == 200 and json.loads(data)["id"] == want, (path, status, data)

    for header in BAD_TOKENS:
        status, _, data = a.request("GET", "/v1/sandboxes", auth=False,
                                    headers={"Authorization": header} if header else None)
        assert (status, json.loads(data)) == (401, UNAUTHORIZED), (header and header[:20], status, data)
        control()
    for bad, literal in SANDBOX_SPELLINGS:
        bad = bad.format(sid=sid)
        status, _, data = a.request("GET", f"/v1/sandboxes/{bad}")
        want = {"error": {"code": "not_found", "message": f"sandbox '{literal}' not found"}} if literal else NO_ENDPOINT
        assert (status, json.loads(data)) == (404, want), (bad, status, data)
        control()
    # an encoded NUL would end the id early: refused as such, not routed
    for bad in NUL_SPELLINGS:
        bad = bad.format(sid=sid)
        status, _, data = a.request("GET", f"/v1/sandboxes/{bad}")
        assert (status, json.loads(data)) == (400, _invalid("the URL has an encoded NUL byte (%00)")), \
            (bad, status, data)
        control()
    for bad, literal in OP_SPELLINGS:
        bad = bad.format(op=op)
        status, _, data = a.request("GET", f"/v1/operations/{bad}")
        want = {"error": {"code": "not_found", "message": f"operation '{literal}' not found"}} if literal else \
            NO_ENDPOINT
        assert (status, json.loads(data)) == (404, want), (bad, status, data)
        control()
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


ATTACH_MISUSES = ["/v1/sessions/{other}", "/v1/sessions/{other}/events", "/v1/sandboxes/{sid}"]


@pytest.mark.cases(len(ATTACH_MISUSES))
def test_session_attach_token_does_not_open_another_session(airlock):
    """A session's attach token on another session, its events, and the
    API: the token check's 401 (it is no key at all there). The control
    after each: it opens its own session and its events, and writes to
    its stdin."""
    a = airlock
    sid = a.create("minimal")["id"]
    s1 = a.api("POST", f"/v1/sandboxes/{sid}/sessions", {"cmd": ["sleep", "30"]}, expect=201)
    s2 = a.api("POST", f"/v1/sandboxes/{sid}/sessions", {"cmd": ["sleep", "30"]}, expect=201)
    token1 = s1["attach_token"]

    def control():
        status, _, data = a.request("GET", f"/v1/sessions/{s1['id']}", token=token1)
        assert status == 200 and json.loads(data)["id"] == s1["id"], (status, data)
        conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=10)  # the stream's head (it runs on)
        conn.request("GET", f"/v1/sessions/{s1['id']}/events", headers={"Authorization": f"Bearer {token1}"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream", resp.status
        conn.close()
        a.api("POST", f"/v1/sessions/{s1['id']}/stdin", {"text": "x"}, expect=204, token=token1)

    for path in ATTACH_MISUSES:
        path = path.format(other=s2["id"], sid=sid)
        status, _, data = a.request("GET", path, token=token1, headers={"Accept": "text/event-stream"}, timeout=10)
        assert (status, json.loads(data)) == (401, UNAUTHORIZED), (path, status, data)
        control()
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
