"""A hostile API client, at the byte level: JSON that parsers choke on,
numbers and sizes out of range, bytes that are no UTF-8, NULs and newlines
where strings end up in argv, env or paths, headers and URLs far over any
sane size, slow connections, Idempotency-Keys that are no keys. Each gets a
clear 4xx (never a 5xx, never a crash), changes nothing, and airlockd keeps
serving a normal client.

One Airlock (and one sandbox) serves the module."""

import hashlib
import io
import json
import os
import socket
import tarfile
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


def post_raw(a, path, body, extra=b"", method="POST"):
    head = (f"{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {a.token}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n").encode()
    return raw(a, head + extra + b"\r\n" + body)


def status_of(answer):
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else None


def error_of(answer):
    """The API's JSON error object of a raw answer."""
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]


def get_raw(a, url, extra=b"", auth=None):
    """A GET with the valid token (or auth, a whole Authorization line),
    so that a 401 cannot pass for a limit."""
    line = auth if auth is not None else b"Authorization: Bearer " + a.token.encode() + b"\r\n"
    return raw(a, b"GET " + url + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + line + extra + b"\r\n")


# libmicrohttpd answers requests over its per-connection memory limit
# itself, before airlockd sees them: its own page, no JSON error object
MHD_TOO_BIG = b"<title>Request too big</title>"


def assert_served_list(a, ans):
    assert status_of(ans) == 200, ans[:300]
    assert a.sid in [s["id"] for s in json.loads(ans.split(b"\r\n\r\n", 1)[1])["sandboxes"]], ans[:300]


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


def test_null_exec_timeout_is_the_default(api):
    """"timeout_s": null is the field left out (as for every optional
    field): the exec runs with the default timeout. The control beside the
    refused timeouts above: the same exec with a valid one runs too."""
    for timeout_s in (None, 60):
        body = json.dumps({"cmd": ["sh", "-c", "echo ran > /tmp/ran; cat /tmp/ran; rm /tmp/ran"],
                           "timeout_s": timeout_s}).encode()
        ans = post_raw(api, f"/v1/sandboxes/{api.sid}/exec", body)
        assert status_of(ans) == 200, (timeout_s, ans[:300])
        r = json.loads(ans.split(b"\r\n\r\n", 1)[1])
        assert r["exit_code"] == 0 and r["stdout"] == "ran\n" and not r["timed_out"], r


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
    """A 1 MiB header, 10000 headers, a valid token after 200 KiB of
    blanks, each request with a valid token: over libmicrohttpd's 128 KiB
    per-connection memory limit, 431 from the limit itself (its page, no
    JSON: airlockd never sees them). The control: the same requests under
    the limit (16 KiB, 100 headers, 1000 blanks) are served. A 100 KiB
    token fits the limit and gets the token check's 401; the next client
    is served."""
    token = api.token.encode()
    cases = [("1 MiB header", {"extra": b"X-Big: " + b"a" * (1 << 20) + b"\r\n"},
              {"extra": b"X-Big: " + b"a" * (16 << 10) + b"\r\n"}),
             ("10000 headers", {"extra": b"".join(b"X-H%d: v\r\n" % i for i in range(10000))},
              {"extra": b"".join(b"X-H%d: v\r\n" % i for i in range(100))}),
             ("200 KiB Authorization", {"auth": b"Authorization: Bearer " + b" " * (200 << 10) + token + b"\r\n"},
              {"auth": b"Authorization: Bearer " + b" " * 1000 + token + b"\r\n"})]
    for what, over, under in cases:
        ans = get_raw(api, b"/v1/sandboxes", **over)
        assert status_of(ans) == 431 and MHD_TOO_BIG in ans, (what, ans[:300])
        assert api.sid.encode() not in ans
        assert_served_list(api, get_raw(api, b"/v1/sandboxes", **under))
    ans = get_raw(api, b"/v1/sandboxes", auth=b"Authorization: Bearer " + b"a" * 100000 + b"\r\n")
    assert status_of(ans) == 401 and error_of(ans)["code"] == "unauthorized", ans[:300]
    still_serving(api)


def test_giant_urls(api):
    """With a valid token: 10000 segments and a 60 KB segment fit the
    memory limit and meet the router's (8 segments of 64 bytes, on its
    stack): 404 "no such endpoint", an answer and not a crash. A 1 MiB URL
    and a query of 100000 parameters: 414 from libmicrohttpd's limit. The
    control: the same routes with a real id and a short query are served."""
    sid = api.sid.encode()
    for url in (b"/v1" + b"/x" * 10000, b"/v1/sandboxes/" + b"a" * 60000):
        ans = get_raw(api, url)
        assert status_of(ans) == 404 and error_of(ans) == {"code": "not_found", "message": "no such endpoint"}, \
            (url[:40], ans[:300])
    for url, control in ((b"/v1/sandboxes/" + b"a" * (1 << 20), b"/v1/sandboxes/" + sid),
                         (b"/v1/sandboxes/" + sid + b"/ls?path=/&" + b"&".join(b"p%d=1" % i for i in range(100000)),
                          b"/v1/sandboxes/" + sid + b"/ls?path=/&" + b"&".join(b"p%d=1" % i for i in range(100)))):
        ans = get_raw(api, url)
        assert status_of(ans) == 414 and MHD_TOO_BIG in ans, (url[:40], ans[:300])
        assert status_of(get_raw(api, control)) == 200, control[:60]
    still_serving(api)


def connection_threads_of(pid):
    """airlockd's threads that serve one connection each (libmicrohttpd
    names them): a count of all threads would include whatever thread an
    earlier test's connection still held when it was taken."""
    n = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                n += f.read().strip() == "MHD-connection"
        except FileNotFoundError:
            pass  # the thread ended meanwhile
    return n


def test_slowloris_does_not_starve_normal_clients(api):
    """200 connections that send their headers a byte at a time (below the
    256 connection limit): once airlockd holds a thread for each, a normal
    client is still served at once."""
    airlockd = api.pid_of("airlockd")
    stop = threading.Event()
    rounds = [0]
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
            rounds[0] = i

    t = threading.Thread(target=dribble)
    t.start()
    try:
        deadline = time.monotonic() + 30
        while connection_threads_of(airlockd) < 200 or rounds[0] < 1:
            assert time.monotonic() < deadline, \
                f"airlockd holds {connection_threads_of(airlockd)} connection threads for the 200 slow connections"
            time.sleep(0.1)
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
    """An Idempotency-Key that is longer than 128, empty (a header with no
    value), not printable ASCII: 400 for a create, a verb and a delete;
    nothing is made, paused or deleted. The control: the same three
    requests with a valid key are carried out."""
    requests = (("POST", "/v1/sandboxes", b'{"template":"minimal"}'),
                ("POST", f"/v1/sandboxes/{api.sid}/pause?wait=true", b"{}"),
                ("DELETE", f"/v1/sandboxes/{api.sid}", b""))
    hdr = b"Idempotency-Key: " + key.encode() + b"\r\n"
    for method, path, body in requests:
        ans = post_raw(api, path, body, hdr, method=method)
        assert status_of(ans) == 400, (key, method, path, ans[:300])
        assert "Idempotency-Key" in error_of(ans)["message"], ans[:300]
    assert [s["id"] for s in api.api("GET", "/v1/sandboxes")["sandboxes"]] == [api.sid]
    assert api.api("GET", f"/v1/sandboxes/{api.sid}")["state"] == "running"
    good = b"Idempotency-Key: good-%d-%d\r\n"
    n = time.monotonic_ns()
    ans = post_raw(api, *requests[0][1:], good % (n, 0))
    assert status_of(ans) == 201, ans[:300]
    made = json.loads(ans.split(b"\r\n\r\n", 1)[1])["id"]
    ans = post_raw(api, *requests[1][1:], good % (n, 1))
    assert status_of(ans) == 200 and api.api("GET", f"/v1/sandboxes/{api.sid}")["state"] == "paused", ans[:300]
    api.api("POST", f"/v1/sandboxes/{api.sid}/resume?wait=true")
    ans = post_raw(api, f"/v1/sandboxes/{made}", b"", good % (n, 2), method="DELETE")
    assert status_of(ans) == 204, ans[:300]
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


def disk_state(a):
    """The guest's root file system (its disk): every name on it and the
    SHA-256 of every regular file."""
    r = a.exec(a.sid, ["sh", "-c", "find / -xdev && echo -- && find / -xdev -type f -exec sha256sum {} +"])
    assert r["exit_code"] == 0, r
    names, sums = r["stdout"].split("--\n")
    return set(names.split("\n")) - {""}, {l[66:]: l[:64] for l in sums.splitlines()}


@pytest.mark.parametrize("path", ["/" + "a" * 4096, "/" + "a" * 300, "/root/" + "d/" * 2100 + "f",
                                  "/root/%00x", "/root/x%00/../../etc/shadow", "/root/./../etc/passwd",
                                  "/root/%2e%2e/%2e%2e/etc/passwd", "//etc/../etc/passwd"])
def test_long_nul_and_encoded_paths(api, path):
    """Paths over 4096 bytes, with a component over NAME_MAX, thousands of
    components, %00, encoded dots: a 4xx with a message for read, write,
    list and delete; nothing on the guest's disk changes: not the file the
    path names, not one a truncated or resolved path would name
    (/etc/passwd, /root/x, /a...), no name anywhere. The control: a valid
    upload made after them is the one change the same check finds."""
    url_path = path if "%" in path else urllib.parse.quote(path)
    before = disk_state(api)
    for method, route, body in (("GET", "files", None), ("PUT", "files", b"pwned"), ("GET", "ls", None),
                                ("DELETE", "files", None)):
        status, _, data = api.request(method, f"/v1/sandboxes/{api.sid}/{route}?path={url_path}", body=body)
        assert 400 <= status < 500, (method, route, path[:80], status, data[:200])
        assert json.loads(data)["error"]["message"]
    # the control, in the same check: it must show up, and nothing else
    assert api.request("PUT", f"/v1/sandboxes/{api.sid}/files?path=/root/control", body=b"mine")[0] in (200, 201, 204)
    names, sums = disk_state(api)
    assert names == before[0] | {"/root/control"}, (path[:80], sorted(names ^ before[0]))
    want = {**before[1], "/root/control": hashlib.sha256(b"mine").hexdigest()}
    assert sums == want, (path[:80], [f for f in sums.keys() | want.keys() if sums.get(f) != want.get(f)])
    assert api.request("DELETE", f"/v1/sandboxes/{api.sid}/files?path=/root/control")[0] == 204


def _form(boundary, request, context):
    parts = [(b'Content-Disposition: form-data; name="request"\r\nContent-Type: application/json\r\n\r\n',
              json.dumps(request).encode()),
             (b'Content-Disposition: form-data; name="context"; filename="context.tar"\r\n'
              b'Content-Type: application/x-tar\r\n\r\n', context)]
    return b"".join(b"--" + boundary + b"\r\n" + head + data + b"\r\n" for head, data in parts)


def test_a_template_form_cut_short_is_refused(api):
    """A multipart build request whose body ends before the closing
    boundary (a client or proxy that cut it: the context's last bytes
    lost) is a 400 naming that, never a build of what arrived; the
    fuzzer found airlockd took it, 2 bytes short. The control: the same
    form whole gets as far as checking the spec against its context."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo("data.txt")
        info.size = 5
        t.addfile(info, io.BytesIO(b"data\n"))
    context = buf.getvalue()
    spec = {"spec": {"name": "cut", "base": {"template": "minimal"}, "steps": [{"copy": "nothing", "to": "/"}]}}
    boundary = b"cut-" + os.urandom(8).hex().encode()
    body = _form(boundary, spec, context)
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary.decode()}"}
    for cut in (body, body[:-2], body + b"--" + boundary):  # no closing boundary; no "--" after it
        status, _, data = api.request("POST", "/v1/templates", cut, headers=headers)
        assert status == 400 and b"closing boundary" in data, (status, data)
    whole = body + b"--" + boundary + b"--\r\n"
    status, _, data = api.request("POST", "/v1/templates", whole, headers=headers)
    assert status == 400 and b"'nothing' is not in the build context" in data, (status, data)
    assert api.request("GET", "/v1/templates/cut")[0] == 404  # nothing was built of any of them
