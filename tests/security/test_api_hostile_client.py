"""A hostile API client, at the byte level: JSON that parsers choke on,
numbers and sizes out of range, bytes that are no UTF-8, NULs and newlines
where strings end up in argv, env or paths, headers and URLs far over any
sane size, slow connections, Idempotency-Keys that are no keys. Each gets a
clear 4xx (never a 5xx, never a crash), changes nothing, and airlockd keeps
serving a normal client.

One Airlock (and one sandbox) serves the module."""

import json
import socket
import threading
import time
import urllib.parse

import pytest

from harness import airlock_instance


@pytest.fixture(scope="module")
def api(templates):
    with airlock_instance(prebuild="minimal") as a:
        a.sid = a.create("minimal")["id"]
        yield a
        a.request("DELETE", f"/v1/sandboxes/{a.sid}")


def raw(a, data, timeout=30):
    """Sends raw bytes; returns the whole answer (b"" when the server just
    closed the connection)."""
    with socket.create_connection(("127.0.0.1", a.port), timeout=timeout) as c:
        try:
            c.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        out = b""
        try:
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                out += chunk
        except (ConnectionResetError, socket.timeout):
            pass
        return out


def post_raw(a, path, body, extra=b""):
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {a.token}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n").encode()
    return raw(a, head + extra + b"\r\n" + body)


def status_of(answer):
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else None


def still_serving(a):
    assert a.request("GET", "/v1/health", auth=False, timeout=10)[0] == 200
    r = a.exec(a.sid, ["echo", "ok"])
    assert r["stdout"] == "ok\n"
    assert [s["id"] for s in a.api("GET", "/v1/sandboxes")["sandboxes"]] == [a.sid]


def test_deeply_nested_but_well_formed_json(api):
    """Valid JSON nested 100000 deep inside a field (and at the top): the
    parser's depth limit refuses it with 400; no stack overflow."""
    for body in (b'{"metadata":{"a":' + b"[" * 100000 + b"]" * 100000 + b"}}",
                 b'{"cmd":["true"],"env":' + b'{"a":' * 50000 + b'"x"' + b"}" * 50000 + b"}",
                 b"[" * 200000 + b"]" * 200000):
        for path in ("/v1/sandboxes", f"/v1/sandboxes/{api.sid}/exec"):
            ans = post_raw(api, path, body)
            assert status_of(ans) in (400, 413), ans[:200]
    still_serving(api)


@pytest.mark.parametrize("field,value", [
    ("idle_timeout_s", b"1e400"), ("idle_timeout_s", b"99999999999999999999999999"),
    ("idle_timeout_s", b"-9223372036854775809"), ("idle_timeout_s", b"1.5"), ("idle_timeout_s", b"NaN"),
    ("idle_timeout_s", b"Infinity"), ("idle_timeout_s", b"0x10"),
    ("idle_timeout_s", b"31536001"), ("idle_timeout_s", b'"60"'), ("idle_timeout_s", b"true")])
def test_numbers_out_of_range_or_not_integers(api, field, value):
    """Numbers too big for any integer type, negative, fractional, not
    numbers at all: 400, and no sandbox is made."""
    ans = post_raw(api, "/v1/sandboxes", b'{"template":"minimal","' + field.encode() + b'":' + value + b"}")
    assert status_of(ans) == 400, ans[:300]
    assert [s["id"] for s in api.api("GET", "/v1/sandboxes")["sandboxes"]] == [api.sid]


@pytest.mark.parametrize("timeout_s", [0, -1, 86401, 2 ** 31, 2 ** 63, 2 ** 64 + 1, 1e9, 1.5, "60", [60]])
def test_absurd_exec_timeouts(api, timeout_s):
    """An exec timeout outside 1..86400 (or not an integer): 400 before
    anything runs in the guest."""
    body = json.dumps({"cmd": ["sh", "-c", "echo ran > /tmp/ran"], "timeout_s": timeout_s}).encode()
    ans = post_raw(api, f"/v1/sandboxes/{api.sid}/exec", body)
    assert status_of(ans) == 400, ans[:300]
    assert api.exec(api.sid, ["sh", "-c", "cat /tmp/ran 2>/dev/null; true"])["stdout"] == ""


@pytest.mark.parametrize("what", ["argc", "arg-size", "env-count", "env-name", "stdin", "cmd-empty",
                                  "cmd0-empty"])
def test_absurd_exec_sizes(api, what):
    """argv over 4096 entries, an argument bigger than the body limit, 2000
    env entries, an env name of 300 bytes, 2 MiB of stdin, an empty cmd:
    400 or 413, nothing runs."""
    body = {"argc": {"cmd": ["true"] * 5000},
            "arg-size": {"cmd": ["echo", "x" * (2 << 20)]},
            "env-count": {"cmd": ["true"], "env": {f"V{i}": "x" for i in range(2000)}},
            "env-name": {"cmd": ["true"], "env": {"A" * 300: "x"}},
            "stdin": {"cmd": ["cat"], "stdin": "x" * (2 << 20)},
            "cmd-empty": {"cmd": []},
            "cmd0-empty": {"cmd": ["", "x"]}}[what]
    ans = post_raw(api, f"/v1/sandboxes/{api.sid}/exec", json.dumps(body).encode())
    assert status_of(ans) in (400, 413), (what, ans[:300])
    if b"\r\n\r\n{" in ans:
        assert json.loads(ans.split(b"\r\n\r\n", 1)[1])["error"]["code"] in ("invalid", "too_large")
    still_serving(api)


def test_duplicate_keys_are_refused(api):
    """{"template":"minimal","template":"python"}: which one wins would
    differ between parsers (a proxy and airlockd could disagree); 400."""
    for path, body in (("/v1/sandboxes", b'{"template":"minimal","template":"python"}'),
                       (f"/v1/sandboxes/{api.sid}/exec", b'{"cmd":["true"],"cmd":["sh","-c","touch /tmp/dup"]}'),
                       ("/v1/sandboxes", b'{"env":{"A":"1","A":"2"}}')):
        ans = post_raw(api, path, body)
        assert status_of(ans) == 400, ans[:300]
    assert api.exec(api.sid, ["sh", "-c", "ls /tmp/dup 2>&1 || true"])["stdout"].endswith("No such file or directory\n")
    still_serving(api)


@pytest.mark.parametrize("bad", [b'"\xff\xfe"', b'"\xc0\xaf"', b'"\xed\xa0\x80"', b'"\\ud800"', b'"\\udc00x"',
                                 b'"\xf4\x90\x80\x80"', b'"a\x00b"', b'"\\u0000"', b'"a\x01b\x1f"'])
def test_invalid_utf8_and_nul_in_strings(api, bad):
    """Bytes that are no UTF-8 (invalid, overlong, surrogates, beyond
    U+10FFFF), lone surrogate escapes, raw control characters and NUL
    (raw or escaped) in a string that would become argv, a template name,
    an env value or metadata: 400."""
    for path, body in (("/v1/sandboxes", b'{"template":' + bad + b"}"),
                       ("/v1/sandboxes", b'{"template":"minimal","metadata":{"k":' + bad + b"}}"),
                       ("/v1/sandboxes", b'{"template":"minimal","env":{"K":' + bad + b"}}"),
                       (f"/v1/sandboxes/{api.sid}/exec", b'{"cmd":["echo",' + bad + b"]}"),
                       (f"/v1/sandboxes/{api.sid}/exec", b'{"cmd":["true"],"cwd":' + bad + b"}")):
        ans = post_raw(api, path, body)
        assert status_of(ans) == 400, (path, body, ans[:300])
    assert [s["id"] for s in api.api("GET", "/v1/sandboxes")["sandboxes"]] == [api.sid]


def test_env_values_with_newlines_set_nothing_else(api):
    """An env value carrying "\\nOTHER=evil" (or "=" and shell syntax) is
    one variable's value, never a second variable or a command; names that
    are not identifiers are 400."""
    r = api.exec(api.sid, ["sh", "-c", 'printf "[%s][%s]" "$A" "$OTHER"'],
                 env={"A": "x\nOTHER=evil", "B": "$(touch /tmp/pwned)"})
    assert r["stdout"] == "[x\nOTHER=evil][]", r
    assert "pwned" not in api.exec(api.sid, ["ls", "/tmp"])["stdout"]
    for name in ("A\nB", "A=B", "1A", "A B", "", "Ä"):
        status, _, data = api.request("POST", f"/v1/sandboxes/{api.sid}/exec", {"cmd": ["true"], "env": {name: "x"}})
        assert status == 400, (name, status, data)


def test_giant_and_many_headers(api):
    """A 1 MiB header, 10000 headers, a 100 KiB Authorization: refused
    (or the connection closed) without harm; the next client is served."""
    big = b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n"
    many = b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n" + b"".join(
        b"X-H%d: v\r\n" % i for i in range(10000)) + b"\r\n"
    auth = b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + b"a" * 100000 + b"\r\n\r\n"
    for req in (big, many, auth):
        ans = raw(api, req)
        assert ans == b"" or status_of(ans) in (400, 401, 413, 431), ans[:200]
        assert b"sandboxes" not in ans
    still_serving(api)


def test_giant_urls(api):
    """URLs of 1 MiB, with 10000 segments, or a query of 100000 parameters:
    a 4xx or a closed connection; the next client is served."""
    token = api.token
    for url in (b"/v1/sandboxes/" + b"a" * (1 << 20), b"/v1" + b"/x" * 10000,
                b"/v1/sandboxes/" + api.sid.encode() + b"/ls?" + b"&".join(b"path=/%d" % i for i in range(100000))):
        ans = raw(api, b"GET " + url + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode() +
                  b"\r\nConnection: close\r\n\r\n")
        assert ans == b"" or status_of(ans) in (400, 404, 413, 414, 431), ans[:200]
    still_serving(api)


def test_slowloris_does_not_starve_normal_clients(api):
    """200 connections that send their headers a byte at a time (below the
    256 connection limit): a normal client is still served at once."""
    stop = threading.Event()
    socks = []
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", api.port), timeout=10)
        s.sendall(b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)

    def dribble():
        i = 0
        while not stop.wait(0.5):
            for s in socks:
                try:
                    s.sendall(b"X-Slow-%d: y\r\n" % i)
                except OSError:
                    pass
            i += 1

    t = threading.Thread(target=dribble)
    t.start()
    try:
        time.sleep(2)
        for _ in range(3):
            t0 = time.monotonic()
            still_serving(api)
            assert time.monotonic() - t0 < 10
    finally:
        stop.set()
        t.join()
        for s in socks:
            s.close()


@pytest.mark.parametrize("key", ["k" * 129, "", "é-non-ascii", "tab\tkey", "a b\x7f"])
def test_malformed_idempotency_keys(api, key):
    """An Idempotency-Key that is longer than 128, empty, not printable
    ASCII: 400 for a create, a verb and a delete; nothing is made."""
    hdr = b"Idempotency-Key: " + key.encode() + b"\r\n"
    for path, body in (("/v1/sandboxes", b'{"template":"minimal"}'),
                       (f"/v1/sandboxes/{api.sid}/pause", b"{}")):
        ans = post_raw(api, path, body, hdr)
        if key == "":  # an empty header is no key at all: an ordinary request, undone below
            continue
        assert status_of(ans) == 400, (key, path, ans[:300])
    for s in api.api("GET", "/v1/sandboxes")["sandboxes"]:
        if s["id"] != api.sid:
            api.request("DELETE", f"/v1/sandboxes/{s['id']}")
    if api.api("GET", f"/v1/sandboxes/{api.sid}")["state"] == "paused":
        api.api("POST", f"/v1/sandboxes/{api.sid}/resume?wait=true")
    still_serving(api)


def test_idempotency_key_reused_for_another_request(api):
    """One key: a create, then a create with another body (422), a verb
    (409), a delete of another sandbox (409); the first create's sandbox is
    the only one made, and a retry of it gets it back."""
    key = {"Idempotency-Key": "reuse-me"}
    first = api.api("POST", "/v1/sandboxes", {"template": "minimal", "metadata": {"n": "1"}}, expect=201, headers=key)
    status, _, data = api.request("POST", "/v1/sandboxes", {"template": "minimal", "metadata": {"n": "2"}},
                                  headers=key)
    assert status == 422, data
    status, _, data = api.request("POST", f"/v1/sandboxes/{api.sid}/pause", headers=key)
    assert status == 409, data
    status, _, data = api.request("DELETE", f"/v1/sandboxes/{api.sid}", headers=key)
    assert status == 409, data
    again = api.api("POST", "/v1/sandboxes", {"metadata": {"n": "1"}, "template": "minimal"}, expect=200, headers=key)
    assert again["id"] == first["id"]
    ids = sorted(s["id"] for s in api.api("GET", "/v1/sandboxes")["sandboxes"])
    assert ids == sorted([api.sid, first["id"]])
    assert api.api("GET", f"/v1/sandboxes/{api.sid}")["state"] == "running"
    api.api("DELETE", f"/v1/sandboxes/{first['id']}", expect=204)


def test_proc_and_special_paths_stay_in_the_guest(api):
    """/proc/self/root, /proc/1/root, /proc/self/cwd, /proc/self/environ,
    /dev/vda and the channel device, through the files API: whatever they
    give is the guest's own (its hostname is its sandbox id), never the
    host's files; special files are refused, not streamed forever."""
    with open("/etc/hostname") as f:
        host_name = f.read().strip()
    for p in ("/proc/self/root/etc/hostname", "/proc/1/root/etc/hostname", "/proc/self/cwd/etc/hostname",
              "/proc/1/cwd/../../etc/hostname".replace("/../..", "")):
        q = urllib.parse.urlencode({"path": p})
        status, _, body = api.request("GET", f"/v1/sandboxes/{api.sid}/files?{q}")
        assert status == 200, (p, status, body)
        assert body.decode().strip() == api.sid != host_name
    for p in ("/dev/zero", "/dev/urandom", "/dev/vda", "/proc/self/fd/0", "/dev/vport0p1"):
        q = urllib.parse.urlencode({"path": p})
        status, _, body = api.request("GET", f"/v1/sandboxes/{api.sid}/files?{q}", timeout=60)
        assert status in (400, 404, 409, 502), (p, status, body[:100])
    still_serving(api)


@pytest.mark.parametrize("path", ["/" + "a" * 4096, "/" + "a" * 300, "/root/" + "d/" * 2100 + "f",
                                  "/root/%00x", "/root/x%00/../../etc/shadow", "/root/./../etc/passwd",
                                  "/root/%2e%2e/%2e%2e/etc/passwd", "//etc/../etc/passwd"])
def test_long_nul_and_encoded_paths(api, path):
    """Paths over 4096 bytes, with a component over NAME_MAX, thousands of
    components, %00, encoded dots: a 4xx with a message for read, write,
    list and delete; nothing is written outside the path asked for."""
    url_path = path if "%" in path else urllib.parse.quote(path)
    for method, route, body in (("GET", "files", None), ("PUT", "files", b"x"), ("GET", "ls", None),
                                ("DELETE", "files", None)):
        status, _, data = api.request(method, f"/v1/sandboxes/{api.sid}/{route}?path={url_path}", body=body)
        assert 400 <= status < 500, (method, route, path[:80], status, data[:200])
        assert json.loads(data)["error"]["message"]
    assert api.exec(api.sid, ["cat", "/etc/hostname"])["stdout"].strip() == api.sid
