"""A hostile API client: malformed, oversized and traversing requests get
a clear error and change nothing."""

import json
import socket
import urllib.parse


def test_path_traversal_and_relative_paths_are_refused(airlock):
    a = airlock
    sid = a.create("minimal")["id"]
    for p in ("../../etc/passwd", "/root/../../etc/shadow", "relative", "", "/root/\u0000x"):
        q = urllib.parse.urlencode({"path": p})
        status, _, body = a.request("GET", f"/v1/sandboxes/{sid}/files?{q}")
        assert status == 400, (p, status, body)
        status, _, _ = a.request("PUT", f"/v1/sandboxes/{sid}/files?{q}", body=b"x")
        assert status == 400
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_oversized_and_malformed_bodies(airlock):
    a = airlock
    status, _, body = a.request("POST", "/v1/sandboxes", body=b"{" * 100000,
                                headers={"Content-Type": "application/json"})
    assert status == 400 and b"error" in body
    # a declared body over the limit is refused before it is read
    with socket.create_connection(("127.0.0.1", a.port), timeout=30) as c:
        c.sendall((f"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {a.token}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {2 << 20}\r\n\r\n").encode())
        head = c.recv(4096)
    assert head.startswith(b"HTTP/1.1 413"), head[:80]
    for bad in ({"template": "../minimal"}, {"template": 7}, {"env": {"A=B": "x"}}, {"env": ["x"]},
                {"idle_timeout_s": -1}, {"metadata": "x"}):
        status, _, body = a.request("POST", "/v1/sandboxes", bad)
        assert status == 400, (bad, status, body)
        assert json.loads(body)["error"]["message"]
    assert a.api("GET", "/v1/sandboxes")["sandboxes"] == []


def test_no_token_bad_token_and_ids_that_are_paths(airlock):
    a = airlock
    assert a.request("GET", "/v1/sandboxes", auth=False)[0] == 401
    assert a.request("GET", "/v1/sandboxes", token="alk_" + "0" * 64)[0] == 401
    for header in ("Bearer ", "Bearer", "Basic " + "x" * 20, "Bearer " + "A" * 5000):
        assert a.request("GET", "/v1/sandboxes", auth=False, headers={"Authorization": header})[0] == 401
    # Spellings that would reach a sandbox and an operation that exist if
    # the server decoded or normalised them; the plain spellings are the
    # control (so a 404 here is the refusal, not an unknown id).
    sid = a.create("minimal")["id"]
    op = a.api("POST", f"/v1/sandboxes/{sid}/pause?wait=true")["id"]  # finished: the delete below may run
    assert a.request("GET", f"/v1/sandboxes/{sid}")[0] == 200
    assert a.request("GET", f"/v1/operations/{op}")[0] == 200
    for bad in (f"x/../{sid}", f"./{sid}", f"sbx-x%2F..%2F{sid}", f"..%2F{sid}", f"{sid}%2F.", f"{sid[:4]}%2D{sid[5:]}", "..",
                "sbx-%2e%2e"):
        status, _, body = a.request("GET", f"/v1/sandboxes/{bad}")
        assert status == 404 and json.loads(body)["error"]["code"] == "not_found", (bad, status, body)
    # an encoded NUL would end the id early: refused as such, not routed
    for bad in (f"{sid}%00", f"{sid}%00/../x", f"{sid}?x=%00"):
        status, _, body = a.request("GET", f"/v1/sandboxes/{bad}")
        assert status == 400 and b"NUL" in body, (bad, status, body)
    for bad in (f"x/../{op}", f"op-x%2F..%2F{op}", "op-%2e%2e"):
        status, _, body = a.request("GET", f"/v1/operations/{bad}")
        assert status == 404 and json.loads(body)["error"]["code"] == "not_found", (bad, status, body)
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_session_attach_token_does_not_open_another_session(airlock):
    a = airlock
    sid = a.create("minimal")["id"]
    s1 = a.api("POST", f"/v1/sandboxes/{sid}/sessions", {"cmd": ["sleep", "30"]}, expect=201)
    s2 = a.api("POST", f"/v1/sandboxes/{sid}/sessions", {"cmd": ["sleep", "30"]}, expect=201)
    token1 = s1["attach_token"]
    # the control: it opens its own session
    status, _, data = a.request("GET", f"/v1/sessions/{s1['id']}", token=token1)
    assert status == 200 and json.loads(data)["id"] == s1["id"], (status, data)
    # not the other one, nor the API (401: it is no key at all there)
    for path in (f"/v1/sessions/{s2['id']}", f"/v1/sessions/{s2['id']}/events", f"/v1/sandboxes/{sid}"):
        status, _, data = a.request("GET", path, token=token1, headers={"Accept": "text/event-stream"}, timeout=10)
        assert status == 401, (path, status, data)
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
