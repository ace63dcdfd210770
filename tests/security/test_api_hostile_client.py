"""A hostile API client, at the byte level: JSON that parsers choke on,
numbers and sizes out of range, bytes that are no UTF-8, NULs and newlines
where strings end up in argv, env or paths, headers and URLs far over any
sane size, slow connections, Idempotency-Keys that are no keys. Each gets a
clear 4xx (never a 5xx, never a crash) with the message of the check that
stops it, changes nothing, and airlockd keeps serving a normal client: each
attack's control, after it in the same test, is the same request made
right, which is carried out.

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

from harness import airlock_instance, multipart_form


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


def invalid(answer, message, status=400, code="invalid"):
    """answer is the API's own refusal: status and the message that names
    why (message: the whole message, or a tuple of its start)."""
    assert status_of(answer) == status, answer[:300]
    err = error_of(answer)
    assert err["code"] == code and (err["message"].startswith(message[0]) if isinstance(message, tuple)
                                    else err["message"] == message), err


def not_json(why):
    """The start of the body parser's refusal (jansson's reason after it)."""
    return ("request body is not valid JSON: " + why,)


def creates(a, body):
    """The control of a refused create: the same create made right is
    carried out (and the sandbox deleted again)."""
    ans = post_raw(a, "/v1/sandboxes", body)
    assert status_of(ans) == 201, (body[:100], ans[:300])
    made = json.loads(ans.split(b"\r\n\r\n", 1)[1])["id"]
    a.api("DELETE", f"/v1/sandboxes/{made}", expect=204)


def execs(a, body, stdout):
    """The control of a refused exec: the same exec made right runs."""
    ans = post_raw(a, f"/v1/sandboxes/{a.sid}/exec", body)
    assert status_of(ans) == 200, (body[:100], ans[:300])
    r = json.loads(ans.split(b"\r\n\r\n", 1)[1])
    assert r["exit_code"] == 0 and r["stdout"] == stdout, r


@pytest.mark.cases(3)
def test_deeply_nested_but_well_formed_json(api):
    """Valid JSON nested 100000 deep inside a field (and at the top): the
    parser's depth limit refuses it with 400 naming it; no stack overflow.
    The control after each: the same create and exec nested a little."""
    for body in (b'{"metadata":{"a":' + b"[" * 100000 + b"]" * 100000 + b"}}",
                 b'{"cmd":["true"],"env":' + b'{"a":' * 50000 + b'"x"' + b"}" * 50000 + b"}",
                 b"[" * 200000 + b"]" * 200000):
        for path in ("/v1/sandboxes", f"/v1/sandboxes/{api.sid}/exec"):
            invalid(post_raw(api, path, body), not_json("maximum parsing depth reached"))
        assert [s["id"] for s in api.api("GET", "/v1/sandboxes")["sandboxes"]] == [api.sid]
        creates(api, b'{"template":"minimal","metadata":{"a":"' + b"[" * 1000 + b'"}}')
        execs(api, b'{"cmd":["sh","-c","echo $a"],"env":{"a":"x"}}', "x\n")
    still_serving(api)


IDLE_RANGE = "field 'idle_timeout_s' must be an integer from 0 (never) to 31536000"


NUMBERS = [
    ("idle_timeout_s", b"1e400", not_json("real number overflow")),
    ("idle_timeout_s", b"99999999999999999999999999", not_json("too big integer")),
    ("idle_timeout_s", b"-9223372036854775809", not_json("too big negative integer")),
    ("idle_timeout_s", b"1.5", IDLE_RANGE), ("idle_timeout_s", b"NaN", not_json("invalid token near 'NaN'")),
    ("idle_timeout_s", b"Infinity", not_json("invalid token near 'Infinity'")),
    ("idle_timeout_s", b"0x10", not_json("'}' expected near 'x'")),
    ("idle_timeout_s", b"31536001", IDLE_RANGE), ("idle_timeout_s", b'"60"', IDLE_RANGE),
    ("idle_timeout_s", b"true", IDLE_RANGE)]


@pytest.mark.parametrize("field,value,why", NUMBERS, ids=[f"{f}-{v.decode()}" for f, v, _ in NUMBERS])
def test_numbers_out_of_range_or_not_integers(api, field, value, why):
    """Numbers too big for any integer type, negative, fractional, not
    numbers at all: 400 from the parser or the field's range check, and no
    sandbox is made. The control: the same create with 31536000."""
    ans = post_raw(api, "/v1/sandboxes", b'{"template":"minimal","' + field.encode() + b'":' + value + b"}")
    invalid(ans, why)
    assert [s["id"] for s in api.api("GET", "/v1/sandboxes")["sandboxes"]] == [api.sid]
    creates(api, b'{"template":"minimal","' + field.encode() + b'":31536000}')


@pytest.mark.parametrize("timeout_s", [0, -1, 86401, 2 ** 31, 2 ** 63, 2 ** 64 + 1, 1e9, 1.5, "60", [60]])
def test_absurd_exec_timeouts(api, timeout_s):
    """An exec timeout outside 1..86400 (or not an integer): 400 from the
    field's range check (or, past 2^63, the parser's) before anything runs
    in the guest. The control: the same exec with 86400 runs."""
    body = json.dumps({"cmd": ["sh", "-c", "echo ran > /tmp/ran"], "timeout_s": timeout_s}).encode()
    ans = post_raw(api, f"/v1/sandboxes/{api.sid}/exec", body)
    invalid(ans, not_json("too big integer") if isinstance(timeout_s, int) and timeout_s >= 2 ** 63
            else "field 'timeout_s' must be an integer from 1 to 86400")
    assert api.exec(api.sid, ["sh", "-c", "cat /tmp/ran 2>/dev/null; true"])["stdout"] == ""
    execs(api, json.dumps({"cmd": ["sh", "-c", "echo ran > /tmp/ran; cat /tmp/ran; rm /tmp/ran"],
                           "timeout_s": 86400}).encode(), "ran\n")


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


RAN = ["sh", "-c", "echo ran > /tmp/ran; cat /tmp/ran; rm /tmp/ran", "sh"]  # prints "ran" when it runs
TOO_LARGE = ("request body of ",)


@pytest.mark.parametrize("what", ["argc", "arg-size", "env-count", "env-name", "stdin", "cmd-empty",
                                  "cmd0-empty"])
def test_absurd_exec_sizes(api, what):
    """argv over 4096 entries, an argument bigger than the body limit, 2000
    env entries, an env name of 300 bytes, 2 MiB of stdin, an empty cmd:
    400 or 413 from the limit that stops it (its message), nothing runs
    (each command would leave /tmp/ran). The control: the same exec under
    the limit (4000 arguments, one of 100 KiB, 1000 variables, a name of
    256, 512 KiB of stdin, a program) runs."""
    counted = ["sh", "-c", "wc -c > /tmp/ran; cat /tmp/ran; rm /tmp/ran"]
    bad, good, why = {
        "argc": ({"cmd": RAN + ["x"] * 5000}, {"cmd": RAN + ["x"] * 4000}, "field 'cmd' has more than 4096 elements"),
        "arg-size": ({"cmd": RAN + ["x" * (2 << 20)]}, {"cmd": RAN + ["x" * (100 << 10)]}, TOO_LARGE),
        "env-count": ({"cmd": RAN, "env": {f"V{i}": "x" for i in range(2000)}},
                      {"cmd": RAN, "env": {f"V{i}": "x" for i in range(1000)}}, "field 'env' has more than 1024 entries"),
        "env-name": ({"cmd": RAN, "env": {"A" * 300: "x"}}, {"cmd": RAN, "env": {"A" * 256: "x"}},
                     f"field 'env': '{'A' * 64}' is not a valid variable name"),  # the name cut at 64
        "stdin": ({"cmd": counted, "stdin": "x" * (2 << 20)}, {"cmd": counted, "stdin": "x" * (512 << 10)}, TOO_LARGE),
        "cmd-empty": ({"cmd": []}, {"cmd": RAN}, "field 'cmd' must be a non-empty array of strings"),
        "cmd0-empty": ({"cmd": ["", "-c", RAN[2]]}, {"cmd": RAN},
                       "field 'cmd': the program name (cmd[0]) must not be empty")}[what]
    ans = post_raw(api, f"/v1/sandboxes/{api.sid}/exec", json.dumps(bad).encode())
    if why is TOO_LARGE:
        invalid(ans, why, status=413, code="too_large")
    else:
        invalid(ans, why)
    assert api.exec(api.sid, ["sh", "-c", "cat /tmp/ran 2>/dev/null; true"])["stdout"] == ""
    execs(api, json.dumps(good).encode(), f"{512 << 10}\n" if what == "stdin" else "ran\n")
    still_serving(api)


@pytest.mark.cases(3)
def test_duplicate_keys_are_refused(api):
    """{"template":"minimal","template":"python"}: which one wins would
    differ between parsers (a proxy and airlockd could disagree); 400 from
    the parser, naming the key. The control after each: the same request
    with the key once is carried out."""
    for path, body, key, good in (
            ("/v1/sandboxes", b'{"template":"minimal","template":"python"}', "template", b'{"template":"minimal"}'),
            (f"/v1/sandboxes/{api.sid}/exec", b'{"cmd":["true"],"cmd":["sh","-c","touch /tmp/dup"]}', "cmd",
             b'{"cmd":["sh","-c","touch /tmp/dup; ls /tmp/dup; rm /tmp/dup"]}'),
            ("/v1/sandboxes", b'{"env":{"A":"1","A":"2"}}', "A", b'{"env":{"A":"1"}}')):
        invalid(post_raw(api, path, body), not_json(f"duplicate object key near '\"{key}\"'"))
        assert api.exec(api.sid, ["sh", "-c", "ls /tmp/dup 2>&1 || true"])["stdout"].endswith(
            "No such file or directory\n")
        assert [s["id"] for s in api.api("GET", "/v1/sandboxes")["sandboxes"]] == [api.sid]
        if path == "/v1/sandboxes":
            creates(api, good)
        else:
            execs(api, good, "/tmp/dup\n")
    still_serving(api)


BAD_STRINGS = [
    (b'"\xff\xfe"', "unable to decode byte 0xff"), (b'"\xc0\xaf"', "unable to decode byte 0xc0"),
    (b'"\xed\xa0\x80"', "unable to decode byte 0xed"), (b'"\\ud800"', "invalid Unicode '\\uD800'"),
    (b'"\\udc00x"', "invalid Unicode '\\uDC00'"), (b'"\xf4\x90\x80\x80"', "unable to decode byte 0xf4"),
    (b'"a\x00b"', "control character 0x0"), (b'"\\u0000"', "\\u0000 is not allowed without JSON_ALLOW_NUL"),
    (b'"a\x01b\x1f"', "control character 0x1")]


@pytest.mark.parametrize("bad,why", BAD_STRINGS, ids=[b.decode("latin-1").encode("unicode_escape").decode()
                                                      for b, _ in BAD_STRINGS])
def test_invalid_utf8_and_nul_in_strings(api, bad, why):
    """Bytes that are no UTF-8 (invalid, overlong, surrogates, beyond
    U+10FFFF), lone surrogate escapes, raw control characters and NUL
    (raw or escaped) in a string that would become argv, a template name,
    an env value or metadata: 400 from jansson's strict decoder, naming
    it. The control: the same five requests with "minimal" or "/root"
    there are carried out."""
    requests = [("/v1/sandboxes", b'{"template":%s}', b'"minimal"'),
                ("/v1/sandboxes", b'{"template":"minimal","metadata":{"k":%s}}', b'"v"'),
                ("/v1/sandboxes", b'{"template":"minimal","env":{"K":%s}}', b'"v"'),
                (f"/v1/sandboxes/{api.sid}/exec", b'{"cmd":["echo",%s]}', b'"ok"'),
                (f"/v1/sandboxes/{api.sid}/exec", b'{"cmd":["pwd"],"cwd":%s}', b'"/root"')]
    for path, body, _ in requests:
        invalid(post_raw(api, path, body % bad), not_json(why))
    assert [s["id"] for s in api.api("GET", "/v1/sandboxes")["sandboxes"]] == [api.sid]
    for path, body, good in requests:
        if path == "/v1/sandboxes":
            creates(api, body % good)
        else:
            execs(api, body % good, "ok\n" if b"echo" in body else "/root\n")


BAD_ENV_NAMES = ["A\nB", "A=B", "1A", "A B", "", "Ä"]


@pytest.mark.cases(len(BAD_ENV_NAMES) + 1)
def test_env_values_with_newlines_set_nothing_else(api):
    """An env value carrying "\\nOTHER=evil" (or "=" and shell syntax) is
    one variable's value, never a second variable or a command; names that
    are not identifiers are 400 naming them. The control after each: a
    variable with a plain name and value is set."""

    def control():
        r = api.exec(api.sid, ["sh", "-c", 'printf "[%s]" "$GOOD_1"'], env={"GOOD_1": "fine"})
        assert r["stdout"] == "[fine]", r

    r = api.exec(api.sid, ["sh", "-c", 'printf "[%s][%s][%s]" "$A" "$OTHER" "$B"'],
                 env={"A": "x\nOTHER=evil", "B": "$(touch /tmp/pwned)"})
    assert r["stdout"] == "[x\nOTHER=evil][][$(touch /tmp/pwned)]", r
    assert "pwned" not in api.exec(api.sid, ["ls", "/tmp"])["stdout"]
    control()
    for name in BAD_ENV_NAMES:
        status, _, data = api.request("POST", f"/v1/sandboxes/{api.sid}/exec",
                                      {"cmd": ["sh", "-c", "touch /tmp/pwned"], "env": {name: "x"}})
        assert (status, json.loads(data)["error"]) == (400, {
            "code": "invalid", "message": f"field 'env': '{name}' is not a valid variable name"}), (name, status, data)
        assert "pwned" not in api.exec(api.sid, ["ls", "/tmp"])["stdout"]
        control()


@pytest.mark.cases(4)  # three over the limit, the 100 KiB token
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
    invalid(ans, "missing or invalid bearer token", status=401, code="unauthorized")
    assert_served_list(api, get_raw(api, b"/v1/sandboxes"))  # the control: the valid token
    still_serving(api)


@pytest.mark.cases(4)
def test_giant_urls(api):
    """With a valid token: 10000 segments and a 60 KB segment fit the
    memory limit and meet the router's (8 segments of 64 bytes, on its
    stack): 404 "no such endpoint", an answer and not a crash. A 1 MiB URL
    and a query of 100000 parameters: 414 from libmicrohttpd's limit. The
    control after each: the same routes with a real id and a short query
    are served."""
    sid = api.sid.encode()
    for url in (b"/v1" + b"/x" * 10000, b"/v1/sandboxes/" + b"a" * 60000):
        ans = get_raw(api, url)
        assert status_of(ans) == 404 and error_of(ans) == {"code": "not_found", "message": "no such endpoint"}, \
            (url[:40], ans[:300])
        ans = get_raw(api, b"/v1/sandboxes/" + sid)
        assert status_of(ans) == 200 and json.loads(ans.split(b"\r\n\r\n", 1)[1])["id"] == api.sid, ans[:300]
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
    still_serving(api)  # and after them


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
    assert status == 422 and json.loads(data)["error"]["message"].startswith(
        "Idempotency-Key already used for a create with a different request body"), data
    used = f"Idempotency-Key already used for create of sandbox {first['id']}"
    status, _, data = api.request("POST", f"/v1/sandboxes/{api.sid}/pause", headers=key)
    assert status == 409 and json.loads(data)["error"]["message"].startswith(used), data
    status, _, data = api.request("DELETE", f"/v1/sandboxes/{api.sid}", headers=key)
    assert status == 409 and json.loads(data)["error"]["message"].startswith(used), data
    again = api.api("POST", "/v1/sandboxes", {"metadata": {"n": "1"}, "template": "minimal"}, expect=200, headers=key)
    assert again["id"] == first["id"]
    ids = sorted(s["id"] for s in api.api("GET", "/v1/sandboxes")["sandboxes"])
    assert ids == sorted([api.sid, first["id"]])
    assert api.api("GET", f"/v1/sandboxes/{api.sid}")["state"] == "running"
    # the controls: the verb and the delete with keys of their own
    api.api("POST", f"/v1/sandboxes/{api.sid}/pause?wait=true", headers={"Idempotency-Key": "reuse-me-pause"})
    api.api("POST", f"/v1/sandboxes/{api.sid}/resume?wait=true")
    api.api("DELETE", f"/v1/sandboxes/{first['id']}", expect=204, headers={"Idempotency-Key": "reuse-me-delete"})
    still_serving(api)


@pytest.mark.cases(9)  # four /proc ways out, five special files
def test_proc_and_special_paths_stay_in_the_guest(api):
    """/proc/self/root, /proc/1/root, /proc/self/cwd, /proc/1/cwd, /dev/vda
    and the channel device, through the files API: whatever they give is
    the guest's own (its hostname is its sandbox id), never the host's
    files; special files are refused by the agent's regular-files-only
    check (EINVAL), not streamed forever; the channel's device is held by
    the agent (EBUSY). The control after each: a regular file is read."""

    def control():
        api.put_file(api.sid, "/root/plain", b"plain")
        assert api.get_file(api.sid, "/root/plain") == b"plain"

    with open("/etc/hostname") as f:
        host_name = f.read().strip()
    for p in ("/proc/self/root/etc/hostname", "/proc/1/root/etc/hostname", "/proc/self/cwd/etc/hostname",
              "/proc/1/cwd/../../etc/hostname".replace("/../..", "")):
        q = urllib.parse.urlencode({"path": p})
        status, _, body = api.request("GET", f"/v1/sandboxes/{api.sid}/files?{q}")
        assert status == 200, (p, status, body)
        assert body.decode().strip() == api.sid != host_name
        control()
    for p, status, code, why in (("/dev/zero", 400, "invalid", "Invalid argument"),
                                 ("/dev/urandom", 400, "invalid", "Invalid argument"),
                                 ("/dev/vda", 400, "invalid", "Invalid argument"),
                                 ("/proc/self/fd/0", 400, "invalid", "Invalid argument"),
                                 ("/dev/vport0p1", 502, "guest", "Device or resource busy")):
        q = urllib.parse.urlencode({"path": p})
        got = api.request("GET", f"/v1/sandboxes/{api.sid}/files?{q}", timeout=60)
        assert (got[0], json.loads(got[2])["error"]) == (status, {
            "code": code, "message": f"reading the file failed: file-read: {why}"}), (p, got[0], got[2][:200])
        control()
    api.request("DELETE", f"/v1/sandboxes/{api.sid}/files?path=/root/plain")
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
    components, %00, encoded dots: 400 for read, write, list and delete,
    from path_check() (its reason) or, for the long component, the guest's
    ENAMETOOLONG; nothing on the guest's disk changes: not the file the
    path names, not one a truncated or resolved path would name
    (/etc/passwd, /root/x, /a...), no name anywhere. The control: a valid
    upload made after them is the one change the same check finds."""
    url_path = path if "%" in path else urllib.parse.quote(path)
    why = ("path is longer than 4096 bytes" if len(path) > 4096 else
           "the URL has an encoded NUL byte (%00)" if "%00" in path else
           "path must not contain '..' components" if ".." in urllib.parse.unquote(path) else None)
    before = disk_state(api)
    for method, route, body, op in (("GET", "files", None, "reading the file failed: file-read"),
                                    ("PUT", "files", b"pwned", "writing the file failed: file-end"),
                                    ("GET", "ls", None, "listing failed: list"),
                                    ("DELETE", "files", None, "remove failed: remove")):
        status, _, data = api.request(method, f"/v1/sandboxes/{api.sid}/{route}?path={url_path}", body=body)
        assert (status, json.loads(data)["error"]) == (400, {
            "code": "invalid", "message": why or f"{op}: File name too long"}), \
            (method, route, path[:80], status, data[:200])
    # the control, in the same check: it must show up, and nothing else
    assert api.request("PUT", f"/v1/sandboxes/{api.sid}/files?path=/root/control", body=b"mine")[0] in (200, 201, 204)
    names, sums = disk_state(api)
    assert names == before[0] | {"/root/control"}, (path[:80], sorted(names ^ before[0]))
    want = {**before[1], "/root/control": hashlib.sha256(b"mine").hexdigest()}
    assert sums == want, (path[:80], [f for f in sums.keys() | want.keys() if sums.get(f) != want.get(f)])
    assert api.request("DELETE", f"/v1/sandboxes/{api.sid}/files?path=/root/control")[0] == 204


def test_a_template_form_cut_short_is_refused(api):
    """A multipart build request whose body ends before the closing
    boundary (a client or proxy that cut it: the context's last bytes
    lost) is a 400 naming that, never a build of what arrived; the
    fuzzer found airlockd took it, 2 bytes short. The control: the same
    form whole builds, and a sandbox of it holds the context's file."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo("data.txt")
        info.size = 5
        t.addfile(info, io.BytesIO(b"data\n"))
    context = buf.getvalue()
    spec = {"spec": {"name": "cut", "base": {"template": "minimal"}, "steps": [{"copy": "data.txt", "to": "/root/"}]}}
    boundary = b"cut-" + os.urandom(8).hex().encode()
    whole, headers = multipart_form(spec, context, boundary)
    body = whole[:-len(b"--" + boundary + b"--\r\n")]  # all but the closing boundary
    for cut in (body, body[:-2], body + b"--" + boundary):  # no closing boundary; no "--" after it
        status, _, data = api.request("POST", "/v1/templates", cut, headers=headers)
        assert status == 400 and b"closing boundary" in data, (status, data)
        assert api.request("GET", "/v1/templates/cut")[0] == 404  # nothing was built of it
    status, _, data = api.request("POST", "/v1/templates", whole, headers=headers)
    assert status == 202, (status, data)
    try:
        deadline = time.monotonic() + 300
        while (t := api.api("GET", "/v1/templates/cut"))["state"] == "building":
            assert time.monotonic() < deadline, t
            time.sleep(0.5)
        assert t["state"] == "ready", t
        sid = api.create("cut")["id"]
        assert api.get_file(sid, "/root/data.txt") == b"data\n"
        api.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)
    finally:
        api.request("DELETE", "/v1/templates/cut")
