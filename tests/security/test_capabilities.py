"""Execution capabilities against a live node: every data-plane request on
the node socket must carry a token that airlockd signed for exactly this
sandbox, owner, execution and node, with the access it needs. Each test is
one attack made directly on DATA_DIR/run/node.sock (as a stale route, a
confused deputy or a stolen token would reach it) and passes only if the
node refuses it with the message of the check that stops it; its control,
after it in the same test, is a genuine token for the same request, which
the node serves."""

import base64
import json
import os
import socket
import struct
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

MAGIC = 0x314B4C41
NODE_REQUEST, NODE_REPLY, NODE_END = 64, 65, 68
ACCESS_ORDER = ["exec", "files_read", "files_write", "session_attach", "ports"]


def node_call(a, req, timeout=60, end=False):
    """One request on the node socket (with end: and an empty body's
    NODE_END, as a port.http request has); returns the reply object."""
    payload = json.dumps(req).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(os.path.join(a.data_dir, "run", "node.sock"))
        s.sendall(struct.pack("<IBBHII", MAGIC, 1, NODE_REQUEST, 0, 0, len(payload)) + payload)
        if end:
            try:
                s.sendall(struct.pack("<IBBHII", MAGIC, 1, NODE_END, 0, 0, 2) + b"{}")
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused before the body: the reply is there to read
        head = b""
        while len(head) < 16:
            chunk = s.recv(16 - len(head))
            assert chunk, "node closed the connection without a reply"
            head += chunk
        magic, _, typ, _, _, length = struct.unpack("<IBBHII", head)
        assert magic == MAGIC and typ == NODE_REPLY
        body = b""
        while len(body) < length:
            chunk = s.recv(length - len(body))
            assert chunk
            body += chunk
    return json.loads(body)


def b64u(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def keys_dir(a):
    return os.path.join(a.data_dir, "control", "keys")


def signing_key(a):
    """The control plane's current key (the test runs as root, like an
    attacker who stole it would; tests use it to make tokens that differ
    from a genuine one in exactly one way)."""
    d = os.path.join(keys_dir(a), "signing")
    kid = open(os.path.join(d, "current")).read().strip()
    sk = bytes.fromhex(open(os.path.join(d, kid + ".key")).read().strip())
    return kid, Ed25519PrivateKey.from_private_bytes(sk[:32])


def token(key, kid, *, tenant="admin", sandbox, execution, node, access=("exec",), issued=None, lifetime=120,
          payload_override=None, port=None, protocol="http"):
    issued = int(time.time()) if issued is None else issued
    claims = {"access": [x for x in ACCESS_ORDER if x in access], "execution": execution,
              "expires_at": issued + lifetime, "issued_at": issued, "kid": kid, "node": node,
              "sandbox": sandbox, "tenant": tenant, "v": 1}
    if port is not None:
        claims.update(port=port, protocol=protocol)
    payload = payload_override or json.dumps(claims, separators=(",", ":"), sort_keys=True).encode()
    return b64u(payload) + "." + b64u(key.sign(payload))


def route(a, sid):
    sb = node_call(a, {"op": "sandbox.get", "id": sid})["sandbox"]
    return sb["node"], sb["execution"], sb["tenant"]


def exec_with(a, sid, cap):
    req = {"op": "exec", "id": sid, "cmd": ["true"], "timeout_s": 30}
    if cap is not None:
        req["cap"] = cap
    return node_call(a, req)


def refused(rep, code="forbidden", message=None):
    """rep is the node's refusal: its code and (given) the whole message
    that names why."""
    err = rep.get("error", {})
    return rep.get("ok") is not True and err.get("code") == code and (message is None or err.get("message") == message)


def served(t, ops=("exec",)):
    """The control, after the attack: a genuine token (made as airlockd
    makes them, with the current key, for the sandbox's current
    execution) is served for each op: exec, file.stat, file.list,
    file.remove."""
    a, sid = t["a"], t["sid"]
    node, execution, tenant = route(a, sid)
    kid, key = signing_key(a)
    for op in ops:
        access = {"exec": "exec", "file.stat": "files_read", "file.list": "files_read",
                  "file.remove": "files_write"}[op]
        cap = token(key, kid, tenant=tenant, sandbox=sid, execution=execution, node=node, access=(access,))
        if op == "exec":
            rep = exec_with(a, sid, cap)
            assert rep.get("ok") is True and rep["exit_code"] == 0, ("the control", rep)
        else:
            if op == "file.remove":
                a.put_file(sid, "/tmp/x", b"x")
            rep = node_call(a, {"op": op, "id": sid, "path": "/tmp/x" if op == "file.remove" else "/", "cap": cap})
            assert rep.get("ok") is True, ("the control", op, rep)


@pytest.fixture
def target(airlock):
    """A running sandbox and a genuine token for it (exec)."""
    sid = airlock.create("minimal")["id"]
    node, execution, tenant = route(airlock, sid)
    kid, key = signing_key(airlock)
    good = token(key, kid, tenant=tenant, sandbox=sid, execution=execution, node=node)
    assert exec_with(airlock, sid, good)["ok"] is True  # the genuine one works: the attacks below differ only by one thing
    yield dict(a=airlock, sid=sid, node=node, execution=execution, tenant=tenant, kid=kid, key=key, good=good)
    airlock.request("DELETE", f"/v1/sandboxes/{sid}")


@pytest.mark.cases(4)
def test_request_without_capability_is_refused(target):
    t = target
    assert refused(exec_with(t["a"], t["sid"], None), message="no capability")
    served(t)
    for op in ({"op": "file.list", "id": t["sid"], "path": "/"}, {"op": "file.stat", "id": t["sid"], "path": "/"},
               {"op": "file.remove", "id": t["sid"], "path": "/tmp/x"}):
        assert refused(node_call(t["a"], op), message="no capability"), op
        served(t, (op["op"],))


GARBAGE = [("", "no capability"), ("x", "malformed capability"), ("a.b", "malformed capability"),
           ("a.b.c", "malformed capability"), ("=" * 100, "malformed capability"),
           ("\u00e9." * 10, "malformed capability"), ("A" * 5000, "capability too long"),
           (12345, "no capability")]  # not a string: none


@pytest.mark.cases(len(GARBAGE))
def test_garbage_and_oversized_capabilities_are_refused(target):
    t = target
    for bad, why in GARBAGE:
        rep = exec_with(t["a"], t["sid"], bad)
        assert refused(rep, message=why), (bad, rep)
        served(t)


def test_forged_capability_is_refused(target):
    """Signed with the attacker's own key under the real key id."""
    t = target
    forged = token(Ed25519PrivateKey.generate(), t["kid"], tenant=t["tenant"], sandbox=t["sid"],
                   execution=t["execution"], node=t["node"])
    rep = exec_with(t["a"], t["sid"], forged)
    assert refused(rep, message="capability signature does not verify"), rep
    served(t)


@pytest.mark.cases(2)
def test_tampered_capability_is_refused(target):
    """A genuine token whose payload was edited (another access, a longer
    life): the signature no longer verifies. The control after each: the
    genuine token itself reads, and an exec token runs."""
    t = target
    good = token(t["key"], t["kid"], tenant=t["tenant"], sandbox=t["sid"], execution=t["execution"],
                 node=t["node"], access=("files_read",))
    payload_b64, sig = good.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload_b64 + "=="))
    for change in ({"access": ["exec", "files_read"]}, {"expires_at": claims["expires_at"] + 100}):
        edited = dict(claims, **change)
        p = json.dumps(edited, separators=(",", ":"), sort_keys=True).encode()
        rep = exec_with(t["a"], t["sid"], b64u(p) + "." + sig)
        assert refused(rep, message="capability signature does not verify"), (change, rep)
        assert node_call(t["a"], {"op": "file.stat", "id": t["sid"], "path": "/", "cap": good})["ok"] is True
        served(t)


def test_capability_from_an_unknown_key_is_refused(target):
    t = target
    rogue = token(Ed25519PrivateKey.generate(), "rogue-kid", tenant=t["tenant"], sandbox=t["sid"],
                  execution=t["execution"], node=t["node"])
    rep = exec_with(t["a"], t["sid"], rogue)
    assert refused(rep, message="capability signed by an unknown key"), rep
    served(t)


@pytest.mark.cases(2)
def test_expired_and_future_capabilities_are_refused(target):
    t = target
    now = int(time.time())
    old = token(t["key"], t["kid"], tenant=t["tenant"], sandbox=t["sid"], execution=t["execution"],
                node=t["node"], issued=now - 200, lifetime=120)  # expired 80 s ago (> 15 s skew)
    future = token(t["key"], t["kid"], tenant=t["tenant"], sandbox=t["sid"], execution=t["execution"],
                   node=t["node"], issued=now + 60)
    for cap in (old, future):
        rep = exec_with(t["a"], t["sid"], cap)
        assert refused(rep, message="capability expired or not yet valid"), rep
        served(t)


def test_capability_for_another_sandbox_is_refused(target):
    t = target
    other = t["a"].create("minimal")["id"]
    cap_for_other = token(t["key"], t["kid"], tenant=t["tenant"], sandbox=other, execution=t["execution"],
                          node=t["node"])
    rep = exec_with(t["a"], t["sid"], cap_for_other)
    assert refused(rep, message="capability is for another sandbox"), rep
    served(t)
    t["a"].request("DELETE", f"/v1/sandboxes/{other}")


def test_capability_of_another_tenant_is_refused(target):
    t = target
    cap = token(t["key"], t["kid"], tenant="ten-someoneelse", sandbox=t["sid"], execution=t["execution"],
                node=t["node"])
    rep = exec_with(t["a"], t["sid"], cap)
    assert refused(rep, message="capability is for another sandbox"), rep  # (cap_decide says no more)
    served(t)


def test_capability_without_the_needed_access_is_refused(target):
    t = target
    read_only = token(t["key"], t["kid"], tenant=t["tenant"], sandbox=t["sid"], execution=t["execution"],
                      node=t["node"], access=("files_read",))
    rep = exec_with(t["a"], t["sid"], read_only)
    assert refused(rep, message="capability does not grant this access"), rep
    assert node_call(t["a"], {"op": "file.stat", "id": t["sid"], "path": "/", "cap": read_only})["ok"] is True
    rep = node_call(t["a"], {"op": "file.remove", "id": t["sid"], "path": "/tmp/nothing", "cap": read_only})
    assert refused(rep, message="capability does not grant this access"), rep
    served(t, ("exec", "file.remove"))


@pytest.mark.cases(6)
def test_a_port_capability_opens_its_port_only(target):
    """A service-port capability names one port and the protocol: the node
    refuses it for another port, another protocol, or anything but that
    port, and an exec capability opens no port."""
    t = target
    a, sid = t["a"], t["sid"]
    a.put_file(sid, "/root/www/index.html", b"ok\n")
    a.exec(sid, ["httpd", "-p", "8000", "-h", "/root/www"])
    a.exec(sid, ["httpd", "-p", "8001", "-h", "/root/www"])

    def cap(**kw):
        return token(t["key"], t["kid"], tenant=t["tenant"], sandbox=sid, execution=t["execution"],
                     node=t["node"], **kw)

    def to_port(port, c):
        return node_call(a, {"op": "port.http", "id": sid, "port": port, "method": "GET", "target": "/",
                             "headers": [], "length": 0, "cap": c}, end=True)

    for_8000 = cap(access=("ports",), port=8000)
    # the control: the port it names, through the node, to the guest's server
    rep = to_port(8000, for_8000)
    assert rep.get("ok") is True and rep["status"] == 200, rep
    no_access = "capability does not grant this access"
    for what, rep, why in (
            ("another port", to_port(8001, for_8000), None),
            ("another protocol", to_port(8000, cap(access=("ports",), port=8000, protocol="tcp")),
             "malformed capability"),  # no such protocol
            ("an exec token", to_port(8000, t["good"]), no_access),
            ("none", to_port(8000, None), "no capability"),
            ("a port's token for an exec", exec_with(a, sid, for_8000), no_access),  # it runs nothing
            ("ports without its port", to_port(8000, cap(access=("exec", "ports"))), "malformed capability")):
        assert refused(rep, message=why) and (why or "another port" in rep["error"]["message"]), (what, rep)
        # the control after each: the port it names is served, and an exec
        rep = to_port(8000, for_8000)
        assert rep.get("ok") is True and rep["status"] == 200, (what, rep)
        served(t)


def test_capability_for_another_node_gets_refresh_route(target):
    t = target
    cap = token(t["key"], t["kid"], tenant=t["tenant"], sandbox=t["sid"], execution=t["execution"],
                node="some-other-node")
    rep = exec_with(t["a"], t["sid"], cap)
    assert refused(rep, "refresh_route", f"sandbox {t['sid']} runs execution {t['execution']} on node {t['node']}"), rep
    served(t)


def test_capability_for_a_retired_execution_is_refused(target):
    """Once the node runs execution N+1, tokens for N stop working at once,
    long before they expire; the API itself re-resolves and goes on."""
    t = target
    a, sid = t["a"], t["sid"]
    old = token(t["key"], t["kid"], tenant=t["tenant"], sandbox=sid, execution=t["execution"], node=t["node"],
                lifetime=300)
    snap = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"}, expect=201)
    op = a.api("POST", f"/v1/sandboxes/{sid}/rollback?wait=true", {"snapshot": snap["id"]})
    assert op["state"] == "succeeded", op
    node, execution, _ = route(a, sid)
    assert execution == t["execution"] + 1
    rep = exec_with(a, sid, old)
    assert refused(rep, "refresh_route", f"sandbox {sid} runs execution {execution} on node {node}"), rep
    # airlockd's cached route is now stale too: it is refreshed, not failed
    assert a.exec(sid, ["echo", "still here"])["stdout"] == "still here\n"
    served(t)  # and a token for the new execution


@pytest.mark.cases(2)  # the revoked session's stdin, another sandbox's token
def test_session_streams_are_revoked_with_their_execution(target):
    """A session belongs to the execution it started in: when that is
    replaced its stream ends and it takes no more input, even with a
    capability for the new execution."""
    t = target
    a, sid = t["a"], t["sid"]
    s = a.api("POST", f"/v1/sandboxes/{sid}/sessions", {"cmd": ["sh", "-c", "echo up; sleep 600"]}, expect=201)
    snap = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"}, expect=201)
    events = []
    op = a.api("POST", f"/v1/sandboxes/{sid}/rollback?wait=true", {"snapshot": snap["id"]})
    assert op["state"] == "succeeded", op
    for ev, data, _ in a.sse(f"/v1/sessions/{s['id']}/events", timeout=60):
        events.append((ev, data))
    # it ended without its process's exit, saying why: revoked, or its VM went first
    revoked = "revoked: the sandbox's execution was replaced"
    assert events[-1][0] == "exit" and events[-1][1].get("exit_code") == -1 and \
        events[-1][1].get("error") in (revoked, "guest channel closed"), events
    node, execution, tenant = route(a, sid)
    fresh = token(t["key"], t["kid"], tenant=tenant, sandbox=sid, execution=execution, node=node,
                  access=("session_attach",))
    stdin = base64.b64encode(b"x\n").decode()
    rep = node_call(a, {"op": "session.stdin", "session_id": s["id"], "data": stdin, "cap": fresh})
    assert refused(rep, "conflict", f"session {s['id']} " + (
        "was " + revoked if events[-1][1]["error"] == revoked else "has exited")), rep
    # and a token for another sandbox never reaches the session at all
    other = token(t["key"], t["kid"], tenant=tenant, sandbox="sbx-other", execution=execution, node=node,
                  access=("session_attach",))
    rep = node_call(a, {"op": "session.signal", "session_id": s["id"], "signal": 9, "cap": other})
    assert refused(rep, message="capability is for another sandbox"), rep
    # the control: a session of the new execution takes stdin with the same token
    s2 = a.api("POST", f"/v1/sandboxes/{sid}/sessions", {"cmd": ["cat"]}, expect=201)
    rep = node_call(a, {"op": "session.stdin", "session_id": s2["id"], "data": stdin, "close": True, "cap": fresh})
    assert rep.get("ok") is True, rep
    out = [(ev, data) for ev, data, _ in a.sse(f"/v1/sessions/{s2['id']}/events", timeout=60)]
    assert ("stdout", {"data": stdin}) in out and out[-1] == ("exit", {"exit_code": 0}), out
    served(t)


@pytest.mark.cases(2)  # the retired key's token, a tenant's rotation
def test_key_rotation_needs_no_restart_and_retires_old_keys(target):
    t = target
    a, sid = t["a"], t["sid"]
    first = token(t["key"], t["kid"], tenant=t["tenant"], sandbox=sid, execution=t["execution"], node=t["node"])
    rot = a.api("POST", "/v1/capability-keys", expect=201)
    assert rot["previous"] == t["kid"] and rot["current"] != t["kid"]
    assert a.api("GET", "/v1/capability-keys")["current"] == rot["current"]
    assert a.exec(sid, ["true"])["exit_code"] == 0  # signed with the new key, verified without a restart
    assert exec_with(a, sid, first)["ok"] is True  # issued just before the rotation: still good
    assert not os.path.exists(os.path.join(keys_dir(a), "signing", t["kid"] + ".key"))  # old secret gone
    a.api("POST", "/v1/capability-keys", expect=201)
    rep = exec_with(a, sid, first)  # two rotations later its key is retired
    assert refused(rep, message="capability signed by an unknown key"), rep
    assert a.exec(sid, ["true"])["exit_code"] == 0
    served(t)  # a token of the current key
    # only the admin rotates
    tn = a.api("POST", "/v1/tenants", {"name": "rot"}, expect=201)
    key = a.api("POST", f"/v1/tenants/{tn['id']}/keys", {"name": "k"}, expect=201)["key"]
    current = a.api("GET", "/v1/capability-keys")["current"]
    status, _, data = a.request("POST", "/v1/capability-keys", token=key)
    assert status == 403 and json.loads(data)["error"]["code"] == "forbidden", (status, data)
    assert a.api("GET", "/v1/capability-keys")["current"] == current  # nothing rotated
    assert a.api("POST", "/v1/capability-keys", expect=201)["previous"] == current  # the control: the admin's
    served(t)
