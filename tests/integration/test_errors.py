"""Bad input gets the right error and leaves nothing behind."""

import json
import os
import socket

from harness import qemu_pids


def error_of(resp):
    status, _, body = resp
    err = json.loads(body)["error"]
    assert err["code"] and err["message"]
    return status, err


def raw_request(a, method, path, headers, body):
    """Sends exactly these bytes and reads the response, even when the server
    answers before reading the whole body."""
    s = socket.create_connection(("127.0.0.1", a.port), timeout=60)
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {a.token}\r\n"
    head += "Content-Type: application/json\r\nConnection: close\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    try:
        s.sendall(head.encode() + body)
    except (BrokenPipeError, ConnectionResetError):
        pass
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    s.close()
    status = int(data.split(b" ", 2)[1])
    head, _, rest = data.partition(b"\r\n\r\n")
    if b"chunked" in head.lower():
        out = b""
        while rest:
            n, _, rest = rest.partition(b"\r\n")
            n = int(n, 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2:]
        rest = out
    return status, rest


def test_bad_inputs(airlock):
    a = airlock
    sid = a.create("minimal")["id"]

    # authentication
    assert error_of(a.request("GET", "/v1/sandboxes", auth=False))[0] == 401
    assert error_of(a.request("GET", "/v1/sandboxes", token="alk_wrong"))[0] == 401
    assert error_of(a.request("POST", "/v1/sandboxes", {"template": "minimal"}, auth=False))[0] == 401

    # malformed bodies and fields
    assert error_of(a.request("POST", "/v1/sandboxes", b"{not json",
                              headers={"Content-Type": "application/json"}))[0] == 400
    assert error_of(a.request("POST", "/v1/sandboxes", {"template": 42}))[0] == 400
    assert error_of(a.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": []}))[0] == 400
    assert error_of(a.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "ls"}))[0] == 400
    assert error_of(a.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"], "env": {"A": 1}}))[0] == 400

    # unknown things
    status, err = error_of(a.request("POST", "/v1/sandboxes", {"template": "no-such-template"}))
    assert status == 404 and "no-such-template" in err["message"]
    assert error_of(a.request("GET", "/v1/sandboxes/sbx-0000000000000000"))[0] == 404
    assert error_of(a.request("DELETE", "/v1/sandboxes/sbx-0000000000000000"))[0] == 404
    assert error_of(a.request("POST", "/v1/sandboxes/sbx-0000000000000000/exec", {"cmd": ["true"]}))[0] == 404
    assert error_of(a.request("GET", "/v1/sessions/ses-0000000000000000/events"))[0] == 404
    assert error_of(a.request("GET", "/v1/nothing-here"))[0] == 404

    # paths
    for bad in ["/root/../etc/passwd", "relative/path", "", "/a/..", "/" + "x" * 5000]:
        q = f"/v1/sandboxes/{sid}/files?path={bad}"
        assert error_of(a.request("GET", q))[0] == 400, bad
        assert error_of(a.request("PUT", q, body=b"x"))[0] == 400, bad
    assert error_of(a.request("GET", f"/v1/sandboxes/{sid}/files"))[0] == 400
    assert error_of(a.request("GET", f"/v1/sandboxes/{sid}/ls?path=../"))[0] == 400

    # bodies over their limits: refused from the declared length, before
    # the body is read, and also when a chunked body grows past the limit
    status, body = raw_request(a, "POST", "/v1/sandboxes", {"Content-Length": str(2 << 20)}, b"")
    assert status == 413 and json.loads(body)["error"]["code"] == "too_large"
    parts = [b'{"template":"'] + [b"a" * 65536] * 24
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    status, body = raw_request(a, "POST", "/v1/sandboxes", {"Transfer-Encoding": "chunked"}, chunked)
    assert status == 413

    # none of that created anything
    assert [s["id"] for s in a.api("GET", "/v1/sandboxes")["sandboxes"]] == [sid]
    assert os.listdir(os.path.join(a.data_dir, "sandboxes")) == [sid]
    assert len(qemu_pids(a.data_dir)) == 1
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    assert os.listdir(os.path.join(a.data_dir, "sandboxes")) == []
    assert qemu_pids(a.data_dir) == []
