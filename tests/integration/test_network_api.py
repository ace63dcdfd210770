"""Egress policies in the control plane and on the node: a create's policy
is refused with a 400 that says why (and nothing is made) or stored in its
canonical form; GET shows it, PUT replaces it; the node holds the same
policy (asked over its own socket: what it would hand the gateway), also
after a node restart, an airlockd restart, a fork (the child has the
parent's), a pause/resume, a rollback, a stop/start and a suspend/wake; a tenant's default applies to that tenant's new
sandboxes only; the CLI makes and shows them. That the gateway enforces
them (connections from the guest) is tests/security's and test_network's."""

import json
import os
import signal
import socket
import struct
import time

from harness import Airlock, ApiError, START_TIMEOUT, node_pids, qemu_pids, store_sandbox_ids

# what airlockd answers while its node agent (re)starts
NODE_AWAY = (502, 503, 504)

ALLOW_ALL = {"mode": "allow-all"}
DENY_ALL = {"mode": "deny-all"}
PROTO_MAGIC, PROTO_NODE_REQUEST, PROTO_NODE_REPLY = 0x314B4C41, 64, 65


def node_call(a, req):
    """One request on the node's socket (docs/node-protocol.md): the reply
    object, or an AssertionError with the node's error."""
    payload = json.dumps(req).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(os.path.join(a.data_dir, "run", "node.sock"))
        s.sendall(struct.pack("<IBBHII", PROTO_MAGIC, 1, PROTO_NODE_REQUEST, 0, 0, len(payload)) + payload)
        head = b""
        while len(head) < 16:
            chunk = s.recv(16 - len(head))
            assert chunk, "the node closed the connection"
            head += chunk
        magic, _, typ, _, _, length = struct.unpack("<IBBHII", head)
        assert magic == PROTO_MAGIC and typ == PROTO_NODE_REPLY, head
        body = b""
        while len(body) < length:
            chunk = s.recv(length - len(body))
            assert chunk, "the node closed the connection"
            body += chunk
    rep = json.loads(body)
    assert rep.get("ok") is True, rep
    return rep


def node_network(a, sid):
    return node_call(a, {"op": "sandbox.network.get", "id": sid})["network"]


def network(a, sid, **kw):
    return a.api("GET", f"/v1/sandboxes/{sid}/network", **kw)


def refused(a, body, message):
    """A create refused with 400 and exactly this message."""
    status, _, data = a.request("POST", "/v1/sandboxes", body)
    assert status == 400, (body, status, data)
    assert json.loads(data)["error"] == {"code": "invalid", "message": message}, data


def wait_until(pred, what, a, timeout=START_TIMEOUT):
    """Polls pred; a connection refused or a node away is retried, any
    other error fails at once."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except OSError as e:
            last = e
        except ApiError as e:
            if e.status not in NODE_AWAY:
                raise
            last = e
        time.sleep(0.2)
    raise AssertionError(f"{what} after {timeout}s (last error: {last!r})\n{a.log_tail(80)}")


def gateway_denies(a, sid, name):
    """The sandbox's gateway refuses a query its policy denies: asked in
    the guest, it shows in the gateway's log (what the VM gets, not the
    record)."""
    a.exec(sid, ["sh", "-c", f"nslookup {name} >/dev/null 2>&1; true"], timeout_s=30)
    wait_until(lambda: [e for e in a.api("GET", f"/v1/sandboxes/{sid}/network/log?limit=1000")["entries"]
                        if e.get("name") == name and e["kind"] == "dns" and e["action"] == "deny"],
               f"the denied query {name} is not in the network log", a, timeout=30)


def test_sandbox_policies(airlock_factory):
    """About 20 s here (5 VMs, a stop/start, a suspend/wake, a node and an
    airlockd killed, the VMs adopted)."""
    a = airlock_factory(prebuild="minimal")

    # what the node cannot enforce is refused, never dropped: no row, no VM
    refused(a, {"template": "minimal", "network": {"mode": "allowlist", "allow": [{"host": "pypi.org", "prots": [443]}]}},
            'network.allow[0]: unknown field "prots" (accepted: "host", "cidr", "ports")')
    status, _, data = a.request("POST", "/v1/sandboxes",
                                {"template": "minimal", "network": {"mode": "deny-all", "allow": [{"host": "a.test"}]}})
    assert status == 400 and 'mode "deny-all" takes no rules' in json.loads(data)["error"]["message"], data
    refused(a, {"template": "minimal", "network": {"allow": [{"host": "*.github.io"}]}},
            'network.allow[0].host: "*.github.io" is a wildcard on the public suffix "github.io", under which '
            'anyone can register names: allow the domains themselves')
    refused(a, {"template": "minimal", "network": {"allow": [{"cidr": "203.0.113.7/24", "ports": [5432]}]}},
            'network.allow[0].cidr: "203.0.113.7/24" has host bits set: the range is 203.0.113.0/24')
    refused(a, {"template": "minimal", "network": "deny-all"}, "field 'network' must be an object")
    assert a.api("GET", "/v1/sandboxes")["sandboxes"] == []
    assert store_sandbox_ids(a.data_dir) == set()  # WAL mode: a reader sees what airlockd committed
    assert qemu_pids(a.data_dir) == []

    # each mode, stored canonical (names lowercased, default ports written out)
    allow = a.create("minimal")["id"]
    deny = a.create("minimal", network=DENY_ALL)["id"]
    listed = a.create("minimal", network={"allow": [{"host": "PyPI.org."}, {"cidr": "198.51.100.0/24", "ports": [22]}],
                                          "deny": [{"host": "gist.github.com"}]})["id"]
    want_listed = {"mode": "allowlist",
                   "allow": [{"host": "pypi.org", "ports": [80, 443]}, {"cidr": "198.51.100.0/24", "ports": [22]}],
                   "deny": [{"host": "gist.github.com"}]}
    assert network(a, allow) == ALLOW_ALL  # the node default
    assert network(a, deny) == DENY_ALL
    assert network(a, listed) == want_listed
    # the node holds the same: what it hands the gateway
    for sid, want in ((allow, ALLOW_ALL), (deny, DENY_ALL), (listed, want_listed)):
        assert node_network(a, sid) == want, sid

    # PUT replaces it, on airlockd and the node; {} and a bad one change nothing
    new = {"allow": [{"host": "github.com"}, {"host": "*.pythonhosted.org", "ports": [443]}]}
    want_new = {"mode": "allowlist", "allow": [{"host": "github.com", "ports": [80, 443]},
                                               {"host": "*.pythonhosted.org", "ports": [443]}]}
    status, _, data = a.request("PUT", f"/v1/sandboxes/{listed}/network", {})
    assert status == 400, data
    status, _, data = a.request("PUT", f"/v1/sandboxes/{listed}/network", {"mode": "allow-all", "allow": new["allow"]})
    assert status == 400 and b"takes only deny rules" in data, data
    assert network(a, listed) == want_listed and node_network(a, listed) == want_listed
    assert a.api("PUT", f"/v1/sandboxes/{listed}/network", new) == want_new
    assert network(a, listed) == want_new
    assert node_network(a, listed) == want_new
    status, _, data = a.request("PUT", "/v1/sandboxes/sbx-0123456789abcdef/network", DENY_ALL)
    assert status == 404, data

    # a fork child has its parent's policy, and the parent keeps it
    op = a.api("POST", f"/v1/sandboxes/{listed}/fork?wait=true")
    assert op["state"] == "succeeded", op
    child = op["result"]["sandbox"]["id"]
    assert network(a, child) == want_new and node_network(a, child) == want_new
    assert network(a, listed) == want_new
    # and its gateway enforces it from the start (no PUT since its VM began):
    # the log, the gateway's, has the query its policy denies, also in the CLI
    a.exec(child, ["sh", "-c", "nslookup denied.example.org >/dev/null 2>&1; true"], timeout_s=30)

    def denied_query():
        log = a.api("GET", f"/v1/sandboxes/{child}/network/log?limit=1000")["entries"]
        return [e for e in log if e.get("name") == "denied.example.org" and e["kind"] == "dns" and
                e["action"] == "deny" and e["reason"] == "no allow rule matches"]
    wait_until(denied_query, "the denied query is not in the network log", a, timeout=30)
    r = a.cli("net", "log", child, "--limit", "1000")
    assert r.returncode == 0, r.stderr
    rows = [l.split(None, 4) for l in r.stdout.decode().splitlines()]
    assert rows[0] == ["TIME", "KIND", "DESTINATION", "ACTION", "REASON"], rows
    assert any(row[1] == "dns" and row[2] in ("denied.example.org", "denied.example.org:53") and row[3] == "deny"
               for row in rows[1:]), rows
    assert a.request("DELETE", f"/v1/sandboxes/{child}")[0] == 204

    # pause/resume and a rollback keep it: on the node, and the gateway
    # enforces it in the execution the rollback starts (a query it denies,
    # asked after the rollback, is in the log)
    for verb in ("pause", "resume"):
        assert a.api("POST", f"/v1/sandboxes/{listed}/{verb}?wait=true")["state"] == "succeeded", verb
    assert network(a, listed) == want_new and node_network(a, listed) == want_new
    snap = a.api("POST", f"/v1/sandboxes/{listed}/snapshots", {"kind": "full"}, expect=201)
    before = a.api("GET", f"/v1/sandboxes/{listed}")["execution"]
    op = a.api("POST", f"/v1/sandboxes/{listed}/rollback?wait=true", {"snapshot": snap["id"]})
    assert op["state"] == "succeeded", op
    assert a.api("GET", f"/v1/sandboxes/{listed}")["execution"] == before + 1
    assert network(a, listed) == want_new and node_network(a, listed) == want_new
    a.exec(listed, ["sh", "-c", "nslookup after-rollback.example.org >/dev/null 2>&1; true"], timeout_s=30)
    gateway_denies(a, listed, "after-rollback.example.org")

    # stopped: the log needs a VM; a PUT is stored, and the start runs under it
    assert a.api("POST", f"/v1/sandboxes/{deny}/stop?wait=true")["state"] == "succeeded"
    status, _, data = a.request("GET", f"/v1/sandboxes/{deny}/network/log")
    assert status == 409 and b"has a VM" in data, data
    assert a.api("PUT", f"/v1/sandboxes/{deny}/network", ALLOW_ALL) == ALLOW_ALL
    assert a.api("POST", f"/v1/sandboxes/{deny}/start?wait=true")["state"] == "succeeded"
    assert network(a, deny) == ALLOW_ALL and node_network(a, deny) == ALLOW_ALL
    assert a.api("PUT", f"/v1/sandboxes/{deny}/network", DENY_ALL) == DENY_ALL
    status, _, data = a.request("GET", f"/v1/sandboxes/{deny}/network/log?limit=1001")
    assert status == 400, data

    # suspended: no node holds it; a PUT is stored and the wake carries it
    assert a.api("POST", f"/v1/sandboxes/{deny}/suspend?wait=true")["state"] == "succeeded"
    assert a.request("GET", f"/v1/sandboxes/{deny}/network/log")[0] == 409
    assert a.api("PUT", f"/v1/sandboxes/{deny}/network", want_listed) == want_listed
    assert a.api("GET", f"/v1/sandboxes/{deny}")["state"] == "suspended"  # not woken for it
    assert a.api("POST", f"/v1/sandboxes/{deny}/wake?wait=true")["state"] == "succeeded"
    assert node_network(a, deny) == want_listed
    gateway_denies(a, deny, "after-wake.example.org")  # in the gateway, not only on record
    assert a.api("PUT", f"/v1/sandboxes/{deny}/network", DENY_ALL) == DENY_ALL
    assert node_network(a, deny) == DENY_ALL


    # the node's copy survives a node restart (its record), the VM adopted
    with open(os.path.join(a.data_dir, "sandboxes", listed, "sandbox.json")) as f:
        assert json.load(f)["network"] == want_new
    vm = qemu_pids(listed)
    old = node_pids(a.data_dir)
    os.kill(old[0], signal.SIGKILL)
    wait_until(lambda: node_pids(a.data_dir) not in ([], old) and
               a.api("GET", f"/v1/sandboxes/{listed}")["state"] == "running", "no new node adopted the VM", a)
    assert qemu_pids(listed) == vm
    assert node_network(a, listed) == want_new
    gateway_denies(a, listed, "after-node-restart.example.org")
    assert node_network(a, deny) == DENY_ALL

    # and airlockd's: killed, its node hands the VMs over to the next start
    os.kill(a.pid_of("airlockd"), signal.SIGKILL)
    a.proc.wait(timeout=60)
    b = Airlock(a.data_dir, prebuild="minimal")
    try:
        b.wait_ready(START_TIMEOUT)
        wait_until(lambda: b.api("GET", f"/v1/sandboxes/{listed}")["state"] == "running", "not running again", b)
        assert qemu_pids(listed) == vm
        assert network(b, listed) == want_new and node_network(b, listed) == want_new
        assert network(b, deny) == DENY_ALL and node_network(b, deny) == DENY_ALL
        assert network(b, allow) == ALLOW_ALL

        # the CLI: create with flags, show, replace
        r = b.cli("create", "--template", "minimal", "--allow", "pypi.org,*.pythonhosted.org",
                  "--allow-cidr", "203.0.113.0/24:5432")
        assert r.returncode == 0, r.stderr
        sid = r.stdout.decode().strip()
        assert network(b, sid) == {"mode": "allowlist",
                                   "allow": [{"host": "pypi.org", "ports": [80, 443]},
                                             {"host": "*.pythonhosted.org", "ports": [80, 443]},
                                             {"cidr": "203.0.113.0/24", "ports": [5432]}]}
        r = b.cli("net", sid)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.decode().splitlines()
        assert lines[0] == "mode: allowlist" and len(lines) == 4, lines
        assert lines[1].split() == ["allow", "host", "pypi.org", "ports", "80,443"], lines
        assert lines[3].split() == ["allow", "cidr", "203.0.113.0/24", "ports", "5432"], lines
        r = b.cli("net", sid, "--net", "deny-all")
        assert r.returncode == 0 and r.stdout.decode() == "mode: deny-all\n", (r.stdout, r.stderr)
        assert network(b, sid) == DENY_ALL and node_network(b, sid) == DENY_ALL
        # the API's refusal is printed as the CLI prints errors, nothing changes
        r = b.cli("net", sid, "--allow", "*.com")
        assert r.returncode == 1 and b"public suffix" in r.stderr, (r.stdout, r.stderr)
        assert network(b, sid) == DENY_ALL
        r = b.cli("create", "--template", "minimal", "--net", "deny-all", "--allow", "a.test")
        assert r.returncode == 1 and b"takes no rules" in r.stderr, r.stderr
        r = b.cli("net", "log", allow, "--limit", "0")
        assert r.returncode == 1 and b"'limit'" in r.stderr, r.stderr

        for s in (allow, deny, listed, sid):
            assert b.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204
        status, _, _ = b.request("GET", f"/v1/sandboxes/{listed}/network")
        assert status == 404
    finally:
        b.stop()


def test_tenant_default(airlock_factory):
    """A tenant's default applies to its new sandboxes, not to another
    tenant's nor to those it made before; without one the node default
    (here configured deny-all) applies. 4 VMs."""
    a = airlock_factory(prebuild="minimal", env={"AIRLOCK_NETWORK_DEFAULT": "deny-all"})
    t1 = a.api("POST", "/v1/tenants", {"name": "one", "network": ALLOW_ALL}, expect=201)
    assert t1["network"] == ALLOW_ALL
    t2 = a.api("POST", "/v1/tenants", {"name": "two"}, expect=201)
    assert "network" not in t2
    status, _, data = a.request("POST", "/v1/tenants", {"name": "three", "network": {"mode": "deny_all"}})
    assert status == 400 and b"network.mode" in data, data
    # listed oldest first, by created_at in ms: two made in one ms tie (order by id)
    assert sorted(t["name"] for t in a.api("GET", "/v1/tenants")["tenants"]) == ["one", "two"]
    k1 = a.api("POST", f"/v1/tenants/{t1['id']}/keys", {}, expect=201)["key"]
    k2 = a.api("POST", f"/v1/tenants/{t2['id']}/keys", {}, expect=201)["key"]

    s1 = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, token=k1, expect=201)["id"]
    s2 = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, token=k2, expect=201)["id"]
    assert network(a, s1, token=k1) == ALLOW_ALL  # its tenant's default
    assert network(a, s2, token=k2) == DENY_ALL  # the node's
    assert node_network(a, s1) == ALLOW_ALL and node_network(a, s2) == DENY_ALL
    # another tenant's sandbox does not exist for a key, whatever it asks
    for method, path, body in (("GET", f"/v1/sandboxes/{s1}/network", None),
                               ("PUT", f"/v1/sandboxes/{s1}/network", DENY_ALL),
                               ("GET", f"/v1/sandboxes/{s1}/network/log", None)):
        status, _, data = a.request(method, path, body, token=k2)
        assert status == 404 and json.loads(data)["error"]["code"] == "not_found", (method, path, data)
    assert network(a, s1, token=k1) == ALLOW_ALL  # the control: unchanged, the owner sees it
    # a tenant's default is the admin's to set
    status, _, _ = a.request("PUT", f"/v1/tenants/{t1['id']}/network", DENY_ALL, token=k1)
    assert status == 403

    # a new default: for sandboxes made from now on, not for s1
    listed = {"mode": "allowlist", "allow": [{"host": "pypi.org", "ports": [443]}]}
    assert a.api("PUT", f"/v1/tenants/{t1['id']}/network", {"allow": [{"host": "PYPI.org", "ports": [443]}]}) == listed
    assert a.api("GET", f"/v1/tenants/{t1['id']}")["network"] == listed
    s3 = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, token=k1, expect=201)["id"]
    assert network(a, s3, token=k1) == listed and node_network(a, s3) == listed
    assert network(a, s1, token=k1) == ALLOW_ALL
    # a policy given wins over the default
    s4 = a.api("POST", "/v1/sandboxes", {"template": "minimal", "network": DENY_ALL}, token=k1, expect=201)["id"]
    assert network(a, s4, token=k1) == DENY_ALL and node_network(a, s4) == DENY_ALL
    assert a.api("DELETE", f"/v1/tenants/{t1['id']}/network", expect=204) is None
    status, _, _ = a.request("GET", f"/v1/tenants/{t1['id']}/network")
    assert status == 404
    for s, k in ((s1, k1), (s2, k2), (s3, k1), (s4, k1)):
        assert a.request("DELETE", f"/v1/sandboxes/{s}", token=k)[0] == 204
