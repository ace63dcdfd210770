"""Webhooks (docs/webhooks.md): sandboxes' lifecycle events POSTed to an
owner's URL, signed (Standard Webhooks: HMAC-SHA256 over
"ID.TIMESTAMP.BODY"), retried with backoff until the endpoint answers 2xx,
in order, in a delivery log; no API call waits on an endpoint; a target
in the platform deny set is refused.

The receiver is a small HTTP server in a network namespace the test makes
(a veth pair in 198.19.77.0/30, the benchmarking range: outside the
platform deny set, and nothing leaves the machine), told what to answer
through a file: "ok" (204), "fail" (500) or "hang" (holds the request until
told otherwise)."""

import base64
import contextlib
import hashlib
import hmac
import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid

import pytest

from clusterlab import lab  # noqa: F401 (the fixture)
from harness import ApiError, free_port, wait_for
from test_tenants import _tenant_with_key

HOST_ADDR, RECV_ADDR, PORT = "198.19.77.1", "198.19.77.2", 8080
URL = f"http://{RECV_ADDR}:{PORT}/hook"

RECEIVER = r'''
import http.server, json, os, sys, time
d = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        mode = open(os.path.join(d, "mode")).read().strip()
        rec = {"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body.decode(), "mode": mode}
        with open(os.path.join(d, "requests.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")
        if mode == "hang":
            open(os.path.join(d, "hanging"), "w").close()
            while open(os.path.join(d, "mode")).read().strip() == "hang":
                time.sleep(0.05)
            os.unlink(os.path.join(d, "hanging"))
            return
        self.send_response(204 if mode == "ok" else 500)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer.daemon_threads = True
http.server.ThreadingHTTPServer((sys.argv[2], int(sys.argv[3])), H).serve_forever()
'''


def _run(*argv):
    subprocess.run(argv, check=True, capture_output=True)


class Receiver:
    def __init__(self, workdir):
        self.dir = str(workdir)
        self.ns = f"alwh-{uuid.uuid4().hex[:8]}"
        self.veth = f"alwh{uuid.uuid4().hex[:6]}"
        self.proc = None

    def __enter__(self):
        self.mode("ok")
        _run("ip", "netns", "add", self.ns)
        try:
            _run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", "wh0", "netns", self.ns)
            _run("ip", "addr", "add", f"{HOST_ADDR}/30", "dev", self.veth)
            _run("ip", "link", "set", self.veth, "up")
            _run("ip", "-n", self.ns, "addr", "add", f"{RECV_ADDR}/30", "dev", "wh0")
            _run("ip", "-n", self.ns, "link", "set", "wh0", "up")
            _run("ip", "-n", self.ns, "link", "set", "lo", "up")
            script = os.path.join(self.dir, "receiver.py")
            with open(script, "w") as f:
                f.write(RECEIVER)
            self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, sys.executable, script, self.dir,
                                          RECV_ADDR, str(PORT)])
            deadline = time.monotonic() + 30
            while subprocess.run(["ip", "netns", "exec", self.ns, "ss", "-Hltn", f"sport = :{PORT}"],
                                 capture_output=True, text=True).stdout.strip() == "":
                assert self.proc.poll() is None and time.monotonic() < deadline, "the receiver did not start"
                time.sleep(0.1)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        self.mode("ok")  # a hanging handler ends
        if self.proc:
            self.proc.kill()
            self.proc.wait()
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)

    def mode(self, m):
        with open(os.path.join(self.dir, "mode.new"), "w") as f:
            f.write(m)
        os.rename(os.path.join(self.dir, "mode.new"), os.path.join(self.dir, "mode"))

    def requests(self):
        try:
            with open(os.path.join(self.dir, "requests.jsonl")) as f:
                return [json.loads(line) for line in f]
        except FileNotFoundError:
            return []

    def hanging(self):
        return os.path.exists(os.path.join(self.dir, "hanging"))

    def events(self, sid, mode="ok"):
        """(type, request) of each request about sandbox sid the receiver
        answered in mode, in the order they came; the snapshot schedule's
        own (one a minute of a running sandbox) left out."""
        out = []
        for r in self.requests():
            body = json.loads(r["body"])
            if (body["data"]["sandbox_id"] == sid and r["mode"] == mode
                    and not body["data"].get("detail", {}).get("scheduled")):
                out.append((body["type"], r))
        return out


@pytest.fixture
def receiver(tmp_path):
    with Receiver(tmp_path) as r:
        yield r


def verify(secret, req):
    """Standard Webhooks' check, as a receiver does it: the signature of
    "ID.TIMESTAMP.BODY" with the secret's key."""
    h = req["headers"]
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{h['webhook-id']}.{h['webhook-timestamp']}.{req['body']}".encode()
    want = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(hmac.compare_digest(s.split(",", 1)[1], want) for s in h["webhook-signature"].split(" "))


def add(a, url=URL, **fields):
    return a.api("POST", "/v1/webhooks", dict(url=url, **fields), expect=201)


def verb(a, sid, name, body=None):
    op = a.api("POST", f"/v1/sandboxes/{sid}/{name}?wait=true", body)
    assert op["state"] == "succeeded", op


def test_lifecycle_events_delivered_signed_and_in_order(airlock, receiver):
    a = airlock
    out = a.cli("webhook", "add", URL)
    assert out.returncode == 0, out.stderr
    wid, secret_line = out.stdout.decode().splitlines()
    secret = secret_line.removeprefix("secret: ")
    assert wid.startswith("wh-") and secret.startswith("whsec_")
    listed = a.cli("webhook", "ls", "--json")
    assert [w["id"] for w in json.loads(listed.stdout)["webhooks"]] == [wid]
    assert "secret" not in json.loads(listed.stdout)["webhooks"][0]  # shown once, at add

    sid = a.create("minimal", network={"mode": "deny-all"})["id"]
    # a connection the policy denies: sandbox.policy_denied, with what and
    # why (the gateway's record reaches the store within a poll: waited for,
    # so that the events after it come after it)
    a.exec(sid, ["sh", "-c", "nc -w 2 198.18.0.10 80 </dev/null; true"])
    wait_for(lambda: [t for t, _ in receiver.events(sid)] == ["sandbox.created", "sandbox.policy_denied"],
             "sandbox.policy_denied delivered", a, timeout=60)
    verb(a, sid, "pause")
    verb(a, sid, "resume")
    snap = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "disk"}, expect=201)
    a.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)

    want = ["sandbox.created", "sandbox.policy_denied", "sandbox.paused", "sandbox.resumed",
            "sandbox.snapshot_taken", "sandbox.deleted"]
    got = wait_for(lambda: (lambda e: e if len(e) >= len(want) else None)(receiver.events(sid)),
                   "the receiver got the sandbox's six events", a, timeout=60)
    assert [t for t, _ in got] == want, [t for t, _ in got]
    ids = set()
    for t, req in got:
        assert verify(secret, req), req
        body = json.loads(req["body"])
        assert req["headers"]["content-type"] == "application/json"
        assert req["headers"]["webhook-id"] == f"{wid}-{body['data']['id']}"
        assert abs(int(req["headers"]["webhook-timestamp"]) - time.time()) < 600
        ids.add(req["headers"]["webhook-id"])
    assert len(ids) == len(want)
    # the signature is over the body as sent: a changed body fails the check
    forged = dict(got[0][1], body=got[0][1]["body"].replace("sandbox.created", "sandbox.deleted"))
    assert not verify(secret, forged)

    detail = {t: json.loads(r["body"])["data"].get("detail") for t, r in got}
    assert detail["sandbox.policy_denied"]["host"] == "198.18.0.10", detail
    assert "deny-all" in detail["sandbox.policy_denied"]["reason"], detail
    assert detail["sandbox.snapshot_taken"]["snapshot_id"] == snap["id"], detail
    assert "state" not in json.loads(got[-1][1]["body"])["data"]  # deleted: no state now

    log = a.api("GET", f"/v1/webhooks/{wid}/deliveries")["deliveries"]
    ev_ids = {json.loads(r["body"])["data"]["id"] for _, r in got}
    mine = [d for d in log if d["event_id"] in ev_ids]
    assert [d["event_type"] for d in reversed(mine)] == want
    assert all(d["delivered"] and d["status"] == 204 and d["attempt"] == 1 for d in mine), mine
    w = a.api("GET", f"/v1/webhooks/{wid}")
    assert w["delivered"] >= len(want) and w["failed"] == 0 and w["last_error"] is None, w

    # a webhook for some events only gets those; deleted, it gets nothing
    only = add(a, events=["sandbox.deleted"])
    assert a.cli("webhook", "rm", wid).returncode == 0
    with pytest.raises(ApiError) as e:
        a.api("GET", f"/v1/webhooks/{wid}")
    assert e.value.status == 404
    sid2 = a.create("minimal")["id"]
    a.api("DELETE", f"/v1/sandboxes/{sid2}", expect=204)
    got2 = wait_for(lambda: receiver.events(sid2), "the filtered webhook's event", a, timeout=60)
    assert [(t, r["headers"]["webhook-id"].rsplit("-", 1)[0]) for t, r in got2] == \
        [("sandbox.deleted", only["id"])], got2


def test_retried_until_the_endpoint_recovers_and_the_api_never_waits(airlock, receiver):
    a = airlock
    wid = add(a, events=["sandbox.created", "sandbox.paused", "sandbox.deleted"])["id"]

    # an endpoint that holds the request: API calls answer while it does
    receiver.mode("hang")
    sid = a.create("minimal")["id"]
    wait_for(receiver.hanging, "the delivery of sandbox.created reached the endpoint", a, timeout=60)
    verb(a, sid, "pause")
    assert a.api("GET", f"/v1/sandboxes/{sid}")["state"] == "paused"
    assert receiver.hanging(), "the API answered only after the endpoint let go"

    # an endpoint that fails: the same event again, later, until it answers 2xx
    receiver.mode("fail")
    failed = wait_for(lambda: (lambda d: d if len(d) >= 3 else None)(
        [d for d in a.api("GET", f"/v1/webhooks/{wid}/deliveries")["deliveries"] if not d["delivered"]]),
        "three failed attempts in the delivery log", a, timeout=60)
    assert {d["event_type"] for d in failed} == {"sandbox.created"}, failed  # nothing after it goes first
    oldest_first = list(reversed(failed))
    # the held one: let go without an answer
    assert oldest_first[0]["status"] == 0 and oldest_first[0]["error"] == "Empty reply from server", failed
    assert all(d["status"] == 500 for d in oldest_first[1:]), failed
    assert [d["attempt"] for d in oldest_first] == list(range(1, len(failed) + 1)), failed
    w = a.api("GET", f"/v1/webhooks/{wid}")
    assert w["attempts"] >= 3 and "500" in w["last_error"] and w["next_attempt_at"], w
    assert a.cli("webhook", "deliveries", wid).returncode == 0

    receiver.mode("ok")
    a.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)
    got = wait_for(lambda: (lambda e: e if len(e) >= 3 else None)(receiver.events(sid)),
                   "the events delivered once the endpoint recovered", a, timeout=60)
    assert [t for t, _ in got] == ["sandbox.created", "sandbox.paused", "sandbox.deleted"]
    bodies = [json.loads(r["body"]) for r in receiver.requests()]
    created = [b["data"]["id"] for b in bodies if b["type"] == "sandbox.created"]
    assert len(created) >= 4 and len(set(created)) == 1  # one event, tried until delivered
    w = a.api("GET", f"/v1/webhooks/{wid}")
    assert w["attempts"] == 0 and w["last_error"] is None and w["failed"] >= 3, w


def test_targets_pass_the_platform_deny_set(airlock_factory, receiver):
    a = airlock_factory()
    refused = {
        "http://127.0.0.1:7420/": "loopback",
        "http://localhost/": "loopback",
        "http://169.254.169.254/latest/meta-data": "metadata",
        "http://10.1.2.3/": "private",
        "http://[::1]:80/": "loopback",
        "http://192.168.1.1/": "private",
    }
    for url, why in refused.items():
        with pytest.raises(ApiError) as e:
            add(a, url=url)
        assert e.value.status == 400, url
        msg = json.loads(e.value.body)["error"]["message"]
        assert "platform deny set" in msg and why in msg, (url, msg)
    for url in ["ftp://198.19.77.2/", "http://user:pw@198.19.77.2/", "not a url"]:
        with pytest.raises(ApiError) as e:
            add(a, url=url)
        assert e.value.status == 400 and "'url'" in json.loads(e.value.body)["error"]["message"], url
    with pytest.raises(ApiError) as e:
        add(a, events=["sandbox.exploded"])
    assert e.value.status == 400 and "sandbox.exploded" in e.value.body.decode()
    with pytest.raises(ApiError) as e:
        add(a, secret="hunter2")
    assert e.value.status == 400 and "whsec_" in e.value.body.decode()
    assert a.api("GET", "/v1/webhooks")["webhooks"] == []  # nothing half-made
    # the control: a target outside the set, and a secret of the owner's own
    mine = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    assert add(a, secret=mine)["secret"] == mine

    # an operator opens a range for webhooks (not for sandboxes); never loopback
    b = airlock_factory(env={"AIRLOCK_WEBHOOK_OPEN": "10.1.0.0/16"})
    assert add(b, url="http://10.1.2.3/hook")["url"] == "http://10.1.2.3/hook"
    with pytest.raises(ApiError) as e:
        add(b, url="http://10.2.0.1/hook")
    assert e.value.status == 400
    with pytest.raises(ApiError) as e:
        add(b, url="http://127.0.0.1/hook")
    assert e.value.status == 400


def _db(a):
    return os.path.join(a.data_dir, "control", "airlock.db")


def _store_bytes(a):
    """Every byte of the store as a reader of its files gets them (the
    database and its write-ahead log)."""
    out = b""
    for p in (_db(a), _db(a) + "-wal"):
        if os.path.exists(p):
            with open(p, "rb") as f:
                out += f.read()
    return out


def _set_secret(a, wid, value):
    """What an attacker with the store's write access does: a webhook's
    stored secret replaced (airlockd runs: SQLite's WAL lets this in)."""
    with contextlib.closing(sqlite3.connect(_db(a), timeout=30)) as c:
        c.execute("UPDATE webhooks SET secret = ? WHERE id = ?", (value, wid))
        c.commit()


def _stored(a, wid, column):
    """A column of webhook wid's row in the store."""
    assert column in ("secret", "cursor")
    with contextlib.closing(sqlite3.connect(f"file:{_db(a)}?mode=ro", uri=True, timeout=30)) as c:
        return c.execute(f"SELECT {column} FROM webhooks WHERE id = ?", (wid,)).fetchone()[0]


def test_secrets_are_sealed_in_the_store(airlock, receiver):
    """A reader of the store cannot sign as Airlock: a webhook's secret is
    kept sealed under the credential store's key, bound to its webhook.
    The attack: webhook A's sealed secret moved into webhook B's row; B's
    deliveries must fail to sign, never go out signed with A's secret. The
    control: A's deliveries verify throughout, and a secret kept plain (as
    0.2.0 kept them) still signs B's."""
    a = airlock
    wa, wb = add(a, events=["sandbox.created"]), add(a, events=["sandbox.created"])
    stored_a, stored_b = _stored(a, wa["id"], "secret"), _stored(a, wb["id"], "secret")
    everything = _store_bytes(a)
    assert wa["id"].encode() in everything and wb["id"].encode() in everything  # the right files
    for w, stored in ((wa, stored_a), (wb, stored_b)):
        key_b64 = w["secret"].removeprefix("whsec_")
        assert stored.startswith("sealed1:") and key_b64 not in stored, stored
        assert key_b64.encode() not in everything
        assert base64.b64decode(key_b64) not in everything

    _set_secret(a, wb["id"], stored_a)
    sid = a.create("minimal")["id"]

    def of(w):
        return [r for _, r in receiver.events(sid) if r["headers"]["webhook-id"].startswith(w["id"] + "-")]

    got_a = wait_for(lambda: of(wa), "webhook A's delivery", a, timeout=60)
    assert verify(wa["secret"], got_a[0])
    failed = wait_for(lambda: [d for d in a.api("GET", f"/v1/webhooks/{wb['id']}/deliveries")["deliveries"]
                               if not d["delivered"]],
                      "webhook B's failed delivery", a, timeout=60)
    assert failed[0]["status"] == 0 and "does not open" in failed[0]["error"], failed
    assert of(wb) == []  # nothing of B's went out, signed with A's secret or otherwise

    # a secret kept as it is, as 0.2.0 kept them, still signs
    _set_secret(a, wb["id"], wb["secret"])
    got_b = wait_for(lambda: of(wb), "webhook B's delivery once its secret is whole", a, timeout=60)
    assert verify(wb["secret"], got_b[0]) and not verify(wa["secret"], got_b[0])
    a.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)


def test_a_tenants_webhook_hears_its_own_sandboxes(airlock, receiver):
    """Tenant A's webhook gets A's sandboxes' events only, B's B's, the
    admin's everyone's. B's events come first and many: A's webhook finds
    nothing of its own in them, steps over them (its cursor in the store
    passes them, so they may be pruned) and still gets A's events after
    them. The attack: B's key reads, deletes and adds webhooks for A; each
    is refused, A's webhook is untouched and delivers after it (the
    control)."""
    _tenants_scenario(airlock, receiver, lambda wid: _stored(airlock, wid, "cursor"))


def test_on_a_shared_store(lab, airlock_factory, receiver):  # noqa: F811
    """The same on PostgreSQL (a shared store: events are read once they
    are 2 s old, and a cursor steps only over events that old), with the
    secrets sealed there too."""
    pg = lab.postgres()
    a = airlock_factory(env={"AIRLOCK_STORE": pg.url, "AIRLOCK_CLUSTER_LISTEN": f"127.0.0.1:{free_port()}",
                             "AIRLOCK_LOCAL_NODE_LISTEN": f"127.0.0.1:{free_port()}"}, prebuild="minimal")
    def column(wid, name):
        return pg.psql(f"SELECT {name} FROM webhooks WHERE id = '{wid}'").strip()

    for w in _tenants_scenario(a, receiver, lambda wid: int(column(wid, "cursor"))):
        stored = column(w["id"], "secret")
        assert stored.startswith("sealed1:") and w["secret"].removeprefix("whsec_") not in stored, stored


def _tenants_scenario(a, receiver, cursor_of):
    """test_a_tenants_webhook_hears_its_own_sandboxes on Airlock a, the
    store's cursor of a webhook read by cursor_of(id); the three webhooks."""
    ta, ka = _tenant_with_key(a, "wh-a")
    tb, kb = _tenant_with_key(a, "wh-b")
    evs = {"events": ["sandbox.created", "sandbox.deleted"]}
    wa = a.api("POST", "/v1/webhooks", dict(url=URL, **evs), expect=201, token=ka["key"])
    wb = a.api("POST", "/v1/webhooks", dict(url=URL, **evs), expect=201, token=kb["key"])
    wadm = add(a, **evs)
    assert wa["tenant_id"] == ta["id"] and wb["tenant_id"] == tb["id"] and wadm["tenant_id"] is None

    b_sids = []
    for _ in range(3):
        sid = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=kb["key"])["id"]
        a.api("DELETE", f"/v1/sandboxes/{sid}", expect=204, token=kb["key"])
        b_sids.append(sid)

    def by_webhook():
        out = {}
        for r in receiver.requests():
            body = json.loads(r["body"])
            out.setdefault(r["headers"]["webhook-id"].rsplit("-", 1)[0], []).append(
                (body["type"], body["data"]["sandbox_id"], r))
        return out

    wait_for(lambda: len(by_webhook().get(wb["id"], [])) >= 6, "B's six events at B's webhook", a, timeout=60)
    # A's webhook steps over B's events, so that the store may prune them
    # an hour on, not a day (its cursor holds back the events' pruning)
    b_last = max(json.loads(r["body"])["data"]["id"] for _, _, r in by_webhook()[wb["id"]])
    wait_for(lambda: cursor_of(wa["id"]) >= b_last, "A's webhook's cursor past B's events", a, timeout=30)
    # the attack, between B's events and A's
    for method, path, body in [("GET", f"/v1/webhooks/{wa['id']}", None),
                               ("GET", f"/v1/webhooks/{wa['id']}/deliveries", None),
                               ("DELETE", f"/v1/webhooks/{wa['id']}", None)]:
        with pytest.raises(ApiError) as e:
            a.api(method, path, body, token=kb["key"])
        assert e.value.status == 404, (method, path, e.value.body)
    with pytest.raises(ApiError) as e:
        a.api("POST", "/v1/webhooks", {"url": URL, "tenant": ta["id"]}, expect=201, token=kb["key"])
    assert e.value.status == 403 and "its own tenant" in e.value.body.decode()
    assert [w["id"] for w in a.api("GET", "/v1/webhooks", token=kb["key"])["webhooks"]] == [wb["id"]]
    assert a.api("GET", f"/v1/webhooks/{wa['id']}", token=ka["key"])["id"] == wa["id"]

    sa = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=ka["key"])["id"]
    a.api("DELETE", f"/v1/sandboxes/{sa}", expect=204, token=ka["key"])
    got = wait_for(lambda: (lambda d: d if len(d.get(wa["id"], [])) >= 2
                            and len(d.get(wadm["id"], [])) >= 8 else None)(by_webhook()),
                   "A's two events at A's webhook, all eight at the admin's", a, timeout=60)
    assert [(t, s) for t, s, _ in got[wa["id"]]] == [("sandbox.created", sa), ("sandbox.deleted", sa)]
    assert {s for _, s, _ in got[wb["id"]]} == set(b_sids)
    assert [s for _, s, _ in got[wadm["id"]]] == [s for s in b_sids for _ in (0, 1)] + [sa, sa]
    for w in (wa, wb, wadm):
        assert all(verify(w["secret"], r) for _, _, r in got[w["id"]])
    return wa, wb, wadm
