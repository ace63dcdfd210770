"""GET /v1/events (docs/api.md, "Events"): the lifecycle events of the
caller's sandboxes as Server-Sent Events, in order, named by what happened
(created, paused, resumed, suspended, woken, stopped, started, deleted);
a tenant's stream holds only its own sandboxes; a reconnect with
Last-Event-ID gets what it missed."""

import http.client
import json

from test_tenants import _tenant_with_key


class Stream:
    """An open event stream, read line by line."""

    def __init__(self, a, query="", token=None, last_event_id=None):
        self.conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=30)
        headers = {"Authorization": f"Bearer {token or a.token}", "Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        self.conn.request("GET", f"/v1/events{query}", headers=headers)
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200, (self.resp.status, self.resp.read())
        assert self.resp.getheader("Content-Type") == "text/event-stream"
        assert self.resp.readline() == b": airlock events\n"  # connected: what follows is new

    def next(self):
        """The next event: (id, type, data)."""
        ev = {}
        while True:
            line = self.resp.readline().decode()
            assert line, "the stream ended"
            line = line.rstrip("\n")
            if not line:
                if "event" in ev:
                    return int(ev["id"]), ev["event"], json.loads(ev["data"])
                continue
            if line.startswith(":"):
                continue
            k, _, v = line.partition(": ")
            ev[k] = v

    def until(self, sid, n):
        """The next n events of sandbox sid (others skipped)."""
        got = []
        while len(got) < n:
            i, t, d = self.next()
            assert t == d["type"] and d["id"] == i
            if d["sandbox_id"] == sid:
                got.append((i, t, d))
        return got

    def close(self):
        self.conn.close()


def verb(a, sid, name):
    op = a.api("POST", f"/v1/sandboxes/{sid}/{name}?wait=true")
    assert op["state"] == "succeeded", op


def test_lifecycle_events(airlock_factory):
    a = airlock_factory(prebuild="minimal")
    s = Stream(a)
    sid = a.create("minimal")["id"]
    for name in ("pause", "resume", "suspend", "wake", "stop", "start"):
        verb(a, sid, name)
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    got = s.until(sid, 8)
    assert [t for _, t, _ in got] == ["sandbox.created", "sandbox.paused", "sandbox.resumed", "sandbox.suspended",
                                      "sandbox.woken", "sandbox.stopped", "sandbox.started", "sandbox.deleted"]
    assert [d.get("state") for _, _, d in got][:2] == ["running", "paused"] and "state" not in got[-1][2]
    assert got[1][2]["previous"] == "pausing" and got[0][2]["ts"] and got[0][2]["ts_ms"] > 0
    ids = [i for i, _, _ in got]
    assert ids == sorted(ids)
    s.close()

    # a reconnect after the third event gets the rest, from the store
    again = Stream(a, f"?sandbox_id={sid}", last_event_id=ids[2])
    assert [t for _, t, _ in again.until(sid, 5)] == ["sandbox.suspended", "sandbox.woken", "sandbox.stopped",
                                                         "sandbox.started", "sandbox.deleted"]
    again.close()
    for q in ("?after=-1", "?after=x", f"?sandbox_id={'s' * 65}"):
        status, _, body = a.request("GET", f"/v1/events{q}")
        assert status == 400, (q, status, body)

    # a tenant's stream: its sandboxes only (the control: it sees its own;
    # the admin's sandbox made first is not there)
    _, key = _tenant_with_key(a, "eventful")
    mine = Stream(a, token=key["key"])
    admins = a.create("minimal")["id"]
    own = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=key["key"])["id"]
    i, t, d = mine.next()
    assert (t, d["sandbox_id"]) == ("sandbox.created", own), (t, d)
    assert d["tenant_id"] == key["tenant_id"]
    assert a.request("DELETE", f"/v1/sandboxes/{admins}")[0] == 204
    assert a.request("DELETE", f"/v1/sandboxes/{own}", token=key["key"])[0] == 204
    i, t, d = mine.next()
    assert (t, d["sandbox_id"]) == ("sandbox.deleted", own), (t, d)
    mine.close()
