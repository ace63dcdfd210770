"""Service ports (docs/network.md, "Service ports"): a server the agent
starts in its sandbox is reachable by the sandbox's owner through Airlock,
by path (/v1/sandboxes/ID/ports/PORT/...) and by host name (PORT-ID.DOMAIN),
with the owner's API key; nobody else reaches it. The server here is
busybox httpd in the minimal template, with a CGI script that echoes what
it was sent."""

import hashlib
import http.client
import json
import os
import urllib.parse

import pytest

# (busybox passes a CGI's header lines on as they are: CRLF, as HTTP/1.1
# has them; the node's parser is strict)
ECHO_CGI = b"""#!/bin/sh
echo "$REQUEST_URI" >> /root/cgi-hits
case "$QUERY_STRING" in status=*) printf 'Status: %s Custom\\r\\n' "${QUERY_STRING#status=}";; esac
printf 'Content-Type: text/plain\\r\\nX-Echo: yes\\r\\n'
printf '\\r\\n'
env | grep -E '^(HTTP_|REQUEST_|QUERY_STRING|CONTENT_LENGTH)' | sort
echo "BODY=$(head -c "${CONTENT_LENGTH:-0}" | sha256sum | cut -d' ' -f1)"
"""


def echoed(data):
    """The CGI's KEY=value lines as a dict."""
    return dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)


def raw(a, method, path, body=None, headers=None):
    """A request with exactly the headers given (no Authorization added)."""
    conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=120)
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data


def serve(a, token=None):
    """A new sandbox (token's tenant's; without one the admin's) running
    busybox httpd on port 8000, once the port answers."""
    sid = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=token)["id"]
    for path, data in (("/root/www/cgi-bin/echo", ECHO_CGI),
                       ("/root/www/index.html", b"<h1>hello from the sandbox</h1>\n")):
        q = urllib.parse.urlencode({"path": path})
        status, _, body = a.request("PUT", f"/v1/sandboxes/{sid}/files?{q}", body=data, token=token)
        assert status in (200, 201, 204), (path, status, body)

    def run(cmd):
        r = a.api("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd}, token=token)
        assert r["exit_code"] == 0, (cmd, r)
    run(["chmod", "755", "/root/www/cgi-bin/echo"])
    # httpd forks into the background itself; the first request must not
    # race its bind
    run(["httpd", "-p", "8000", "-h", "/root/www"])
    run(["sh", "-c", "for i in $(seq 100); do wget -q -O /dev/null http://127.0.0.1:8000/index.html && exit 0;"
         " sleep 0.1; done; exit 1"])
    return sid


def cgi_hits(a, sid, token=None):
    """How many requests the echo CGI has had."""
    r = a.api("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["sh", "-c", "cat /root/cgi-hits 2>/dev/null | wc -l"]},
              token=token)
    return int(r["stdout"])


@pytest.fixture
def served(airlock):
    """A sandbox of the admin's running busybox httpd on port 8000."""
    return dict(a=airlock, sid=serve(airlock))


def test_a_page_by_path(served):
    a, sid = served["a"], served["sid"]
    status, headers, body = a.request("GET", f"/v1/sandboxes/{sid}/ports/8000/index.html")
    assert status == 200, body
    assert body == b"<h1>hello from the sandbox</h1>\n"
    assert headers.get("Content-Length") == str(len(body))
    # the port's root: with and without the slash
    for path in (f"/v1/sandboxes/{sid}/ports/8000", f"/v1/sandboxes/{sid}/ports/8000/"):
        assert a.request("GET", path)[0] == 200, path


def test_the_server_gets_the_request_as_sent(served):
    a, sid = served["a"], served["sid"]
    body = os.urandom(300 << 10)
    status, headers, data = a.request("POST", f"/v1/sandboxes/{sid}/ports/8000/cgi-bin/echo?x=1%2F2&y=%20",
                                      body=body, headers={"X-Custom": "kept", "Content-Type": "x/y"})
    assert status == 200, data
    e = echoed(data)
    assert e["REQUEST_METHOD"] == "POST"
    assert e["REQUEST_URI"] == "/cgi-bin/echo?x=1%2F2&y=%20"  # escapes and query untouched
    assert e["HTTP_X_CUSTOM"] == "kept"
    assert e["CONTENT_LENGTH"] == str(len(body))
    assert e["BODY"] == hashlib.sha256(body).hexdigest()
    assert e["HTTP_X_FORWARDED_FOR"] == "127.0.0.1"
    # the Airlock key is Airlock's: the server never sees it
    assert "HTTP_AUTHORIZATION" not in e
    assert a.token not in data.decode()
    # and the server's headers come back
    assert headers.get("X-Echo") == "yes"


def test_the_key_in_x_airlock_key_leaves_authorization_to_the_app(served):
    a, sid = served["a"], served["sid"]
    status, _, data = raw(a, "GET", f"/v1/sandboxes/{sid}/ports/8000/cgi-bin/echo",
                          headers={"X-Airlock-Key": a.token, "Authorization": "Bearer the-apps-own"})
    assert status == 200, data
    e = echoed(data)
    assert e["HTTP_AUTHORIZATION"] == "Bearer the-apps-own"
    assert "HTTP_X_AIRLOCK_KEY" not in e and a.token not in data.decode()


def test_a_page_by_host_name(served):
    a, sid = served["a"], served["sid"]
    status, _, data = raw(a, "GET", "/cgi-bin/echo?q=1",
                          headers={"Host": f"8000-{sid}.localhost:{a.port}", "Authorization": f"Bearer {a.token}"})
    assert status == 200, data
    e = echoed(data)
    assert e["REQUEST_URI"] == "/cgi-bin/echo?q=1"  # the whole path is the server's
    assert e["HTTP_HOST"] == f"8000-{sid}.localhost:{a.port}"
    # a host name that only looks like one is the API's
    status, _, _ = raw(a, "GET", "/v1/health", headers={"Host": f"x8000-{sid}.localhost"})
    assert status == 200


def test_a_large_download_streams_whole(served):
    a, sid = served["a"], served["sid"]
    big = os.urandom(8 << 20)
    a.put_file(sid, "/root/www/big.bin", big)
    status, headers, data = a.request("GET", f"/v1/sandboxes/{sid}/ports/8000/big.bin")
    assert status == 200
    assert headers.get("Content-Length") == str(len(big))
    assert hashlib.sha256(data).digest() == hashlib.sha256(big).digest()
    status, headers, data = a.request("HEAD", f"/v1/sandboxes/{sid}/ports/8000/big.bin")
    assert status == 200 and data == b""
    assert headers.get("Content-Length") == str(len(big))


def test_status_codes_pass_through(served):
    a, sid = served["a"], served["sid"]
    assert a.request("GET", f"/v1/sandboxes/{sid}/ports/8000/no-such-page")[0] == 404
    status, _, _ = a.request("GET", f"/v1/sandboxes/{sid}/ports/8000/cgi-bin/echo?status=418")
    assert status == 418


def test_nothing_listening_is_a_502_that_says_so(served):
    a, sid = served["a"], served["sid"]
    status, _, data = a.request("GET", f"/v1/sandboxes/{sid}/ports/8001/")
    assert status == 502, data
    assert b"nothing listens on port 8001" in data


def test_bad_ports_are_400(served):
    a, sid = served["a"], served["sid"]
    for p in ("0", "65536", "80x", "-1", "08000"):
        status, _, data = a.request("GET", f"/v1/sandboxes/{sid}/ports/{p}/")
        assert status == 400, (p, status, data)
        assert b"is not a port" in data


def test_only_the_owner_reaches_the_port(served):
    a, sid = served["a"], served["sid"]
    assert a.request("GET", f"/v1/sandboxes/{sid}/ports/8000/", auth=False)[0] == 401
    assert a.request("GET", f"/v1/sandboxes/{sid}/ports/8000/", token="not-a-key")[0] == 401
    status, _, _ = raw(a, "GET", "/", headers={"Host": f"8000-{sid}.localhost"})
    assert status == 401
    # the control: the owner's key does
    assert a.request("GET", f"/v1/sandboxes/{sid}/ports/8000/")[0] == 200


def test_another_tenant_finds_no_port(airlock):
    """Tenant A's served sandbox: A reaches its port by path and by host
    name (the control); tenant B gets, both ways, the 404 of an id that
    does not exist, and none of its requests reaches the server."""
    a = airlock
    keys = {}
    for name in ("ports-a", "ports-b"):
        t = a.api("POST", "/v1/tenants", {"name": name}, expect=201)
        keys[name] = a.api("POST", f"/v1/tenants/{t['id']}/keys", {"name": "k"}, expect=201)["key"]
    A, B = keys["ports-a"], keys["ports-b"]
    sid = serve(a, A)
    fake = "sbx-0000000000000000"

    def by_path(rid, key):
        return a.request("GET", f"/v1/sandboxes/{rid}/ports/8000/cgi-bin/echo?who=x", token=key)

    def by_host(rid, key):
        return raw(a, "GET", "/cgi-bin/echo?who=x",
                   headers={"Host": f"8000-{rid}.localhost", "Authorization": f"Bearer {key}"})

    for get in (by_path, by_host):
        # the control: A gets the CGI's answer
        status, _, data = get(sid, A)
        assert status == 200 and echoed(data)["QUERY_STRING"] == "who=x", (get.__name__, status, data)
    assert cgi_hits(a, sid, A) == 2

    def masked_404(get, rid):
        status, headers, data = get(rid, B)
        assert status == 404, (get.__name__, rid, status, data)
        assert json.loads(data)["error"]["code"] == "not_found", data
        keep = {k.lower(): v for k, v in headers.items() if k.lower() not in ("x-request-id", "date", "content-length")}
        return data.replace(rid.encode(), b"<ID>"), keep
    for get in (by_path, by_host):
        theirs, unknown = masked_404(get, sid), masked_404(get, fake)
        assert theirs == unknown, (get.__name__, theirs, unknown)
    assert cgi_hits(a, sid, A) == 2


def test_a_paused_sandbox_is_a_409(served):
    a, sid = served["a"], served["sid"]
    a.api("POST", f"/v1/sandboxes/{sid}/pause?wait=true")
    try:
        status, _, data = a.request("GET", f"/v1/sandboxes/{sid}/ports/8000/")
        assert status == 409, data
    finally:
        a.api("POST", f"/v1/sandboxes/{sid}/resume?wait=true")
    assert a.request("GET", f"/v1/sandboxes/{sid}/ports/8000/")[0] == 200


def test_the_cli_gets_a_page_and_prints_the_urls(served):
    a, sid = served["a"], served["sid"]
    r = a.cli("port", sid, "8000", "/index.html")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"<h1>hello from the sandbox</h1>\n"
    r = a.cli("port", sid, "8001")
    assert r.returncode != 0 and b"nothing listens on port 8001" in r.stderr, r.stderr
    r = a.cli("port", sid, "8000", "/no-such-page")
    assert r.returncode != 0 and b"404" in r.stderr, r.stderr
    r = a.cli("port", sid, "0")
    assert r.returncode == 2 and b"is not a port" in r.stderr, (r.returncode, r.stderr)
    r = a.cli("port", "--print-url", sid, "8000", "/x")
    assert r.returncode == 0, r.stderr
    by_path, by_host = r.stdout.decode().split()
    assert by_path == f"{a.url}/v1/sandboxes/{sid}/ports/8000/x"
    assert by_host == f"http://8000-{sid}.localhost:{a.port}/x"
    # and the printed URLs work, with the key
    status, _, data = raw(a, "GET", "/x", headers={"Host": f"8000-{sid}.localhost:{a.port}",
                                                   "Authorization": f"Bearer {a.token}"})
    assert status == 404  # busybox's answer for a page that is not there: the server's, reached
