"""A sandbox's guest agent upgraded in place (docs/guest-protocol.md,
"Upgrades"): a node whose airlock-guest is newer than a sandbox's replaces
the agent in the running guest, when asked (API, CLI) or by itself once the
sandbox is idle, and the sandbox's processes, command sessions and file
watches go on as if nothing happened. The newer agent is the test build's
airlock-guest-next (version 0.99.0); the node gets it as a platform does,
by a restart with new binaries (airlockd killed: its VMs are handed over to
the next node, which adopts them). Before it, a node whose agent fails to
take over shows that a failed upgrade rolls back."""

import base64
import http.client
import json
import os
import signal

from harness import BUILD, START_TIMEOUT, Airlock, wait_for
from test_recovery import alive_in_guest, start_sleeper, wait_state

NEXT = os.path.join(BUILD, "tests", "airlock-guest-next")
# passes the agent's check of the state, then fails to take it over
NORESUME = os.path.join(BUILD, "tests", "airlock-guest-noresume")
OLD, NEW = "0.2.0", "0.99.0"


def agent_of(a, sid):
    return a.api("GET", f"/v1/sandboxes/{sid}").get("agent", {}).get("version")


def listed(a, agent):
    return {s["id"] for s in a.api("GET", f"/v1/sandboxes?agent={agent}")["sandboxes"]}


def hand_over(a, env):
    """Kills a's airlockd (its node hands the VMs over) and starts the next
    Airlock on the same data dir with env."""
    os.kill(a.pid_of("airlockd"), signal.SIGKILL)
    a.proc.wait(timeout=60)
    b = Airlock(a.data_dir, env_extra=env, prebuild="")
    b.wait_ready(START_TIMEOUT)
    return b


class EnvdWatch:
    """envd's filesystem.Filesystem/WatchDir through the E2B front door: a
    Connect server stream of JSON messages (5-byte envelopes)."""

    def __init__(self, a, sid, path):
        status, _, data = a.request("POST", f"/v2/sandboxes/{sid}/connect", {"timeout": 600},
                                    headers={"X-API-Key": a.token}, auth=False)
        assert status in (200, 201), (status, data)
        token = json.loads(data)["envdAccessToken"]
        body = json.dumps({"path": path}).encode()
        self.conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=120)
        self.conn.request("POST", "/filesystem.Filesystem/WatchDir",
                          body=b"\x00" + len(body).to_bytes(4, "big") + body,
                          headers={"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1",
                                   "E2b-Sandbox-Id": sid, "X-Access-Token": token})
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200, self.resp.read()
        assert "start" in self.next()

    def next(self):
        head = self.resp.read(5)
        assert len(head) == 5 and head[0] == 0, f"the watch ended: {head!r} {self.resp.read()!r}"
        return json.loads(self.resp.read(int.from_bytes(head[1:], "big")))

    def expect(self, name):
        """The next event naming name (others, a write after a create, skipped)."""
        for _ in range(20):
            m = self.next()
            if name in json.dumps(m):
                return m
        raise AssertionError(f"no event for {name}")

    def close(self):
        self.conn.close()


def session_line(events, want):
    event, data, _ = next(events)
    assert (event, base64.b64decode(data["data"])) == ("stdout", want), (event, data)


def test_agent_upgrade_keeps_processes_sessions_and_watches(airlock_factory):
    a = airlock_factory(prebuild="minimal")
    sid = a.create("minimal")["id"]
    assert agent_of(a, sid) == OLD
    # as new as its node's: nothing to do
    assert a.api("POST", f"/v1/sandboxes/{sid}/agent/upgrade")["agent"]["version"] == OLD
    sleeper = start_sleeper(a, sid)
    asleep = a.create("minimal")["id"]
    a.exec(asleep, ["sh", "-c", "echo kept > /root/f; sync"])
    a.api("POST", f"/v1/sandboxes/{asleep}/suspend?wait=true")

    # a node whose newer agent cannot take over: the upgrade rolls back,
    # says why, and the sandbox runs on with its old agent
    bad = hand_over(a, {"AIRLOCK_GUEST_BINARY": NORESUME, "AIRLOCK_AGENT_UPGRADE_IDLE": "0"})
    b = c = None
    try:
        assert wait_state(bad, sid, "running")["execution"] == 1
        status, _, body = bad.request("POST", f"/v1/sandboxes/{sid}/agent/upgrade")
        assert status == 502 and b"could not take over" in body and b"GUEST_TEST_RESUME_FAILS" in body, body
        sbx = bad.api("GET", f"/v1/sandboxes/{sid}")
        assert sbx["agent"]["version"] == OLD and "could not take over" in sbx["agent"]["upgrade_error"], sbx
        assert alive_in_guest(bad, sid, sleeper)
        assert bad.exec(sid, ["echo", "ok"])["stdout"] == "ok\n"
    except BaseException:
        bad.stop()
        raise

    # a node with a newer agent, which upgrades only when asked
    try:
        b = hand_over(bad, {"AIRLOCK_GUEST_BINARY": NEXT, "AIRLOCK_AGENT_UPGRADE_IDLE": "0"})
        assert wait_state(b, sid, "running")["execution"] == 1  # adopted, not booted again
        assert agent_of(b, sid) == OLD
        assert sid in listed(b, OLD) and sid not in listed(b, NEW)

        # what must survive: a session streaming to a client, a background
        # process, a watch (the E2B door's), the guest's files
        ses = b.api("POST", f"/v1/sandboxes/{sid}/sessions",
                    {"cmd": ["sh", "-c", "while read l; do echo got:$l; done"]}, expect=201)
        events = b.sse(f"/v1/sessions/{ses['id']}/events", token=ses["attach_token"], timeout=600)
        b.request("POST", f"/v1/sessions/{ses['id']}/stdin", {"text": "one\n"}, token=ses["attach_token"])
        session_line(events, b"got:one\n")
        b.exec(sid, ["mkdir", "-p", "/root/w"])
        watch = EnvdWatch(b, sid, "/root/w")
        b.exec(sid, ["touch", "/root/w/before"])
        watch.expect("before")

        up = b.api("POST", f"/v1/sandboxes/{sid}/agent/upgrade")
        assert up["agent"]["version"] == NEW and "upgrade_error" not in up["agent"], up
        assert up["execution"] == 1 and up["state"] == "running"
        assert "guest agent upgraded from airlock-guest 0.2.0 to airlock-guest 0.99.0" in b.log_tail(200)

        # the same stream, the same session, the same watch
        b.request("POST", f"/v1/sessions/{ses['id']}/stdin", {"text": "two\n"}, token=ses["attach_token"])
        session_line(events, b"got:two\n")
        b.exec(sid, ["touch", "/root/w/after"])
        watch.expect("after")
        watch.close()
        assert alive_in_guest(b, sid, sleeper)
        assert agent_of(b, sid) == NEW
        assert sid in listed(b, NEW) and sid not in listed(b, OLD)
        out = b.cli("ls", "--agent", NEW)
        assert out.returncode == 0 and sid.encode() in out.stdout, out
        assert b.cli("agent", "upgrade", sid).stdout.decode().strip() == NEW  # nothing left to do
        b.request("POST", f"/v1/sessions/{ses['id']}/stdin", {"data": "", "close": True})
        rest = list(events)
        assert rest[-1][0] == "exit" and rest[-1][1]["exit_code"] == 0, rest

        # a node that upgrades by itself: the suspended sandbox, woken with
        # its old agent, is upgraded once idle
        b.stop()
        b = None
        c = Airlock(a.data_dir, env_extra={"AIRLOCK_GUEST_BINARY": NEXT, "AIRLOCK_AGENT_UPGRADE_IDLE": "2"},
                    prebuild="")
        c.wait_ready(START_TIMEOUT)
        c.api("POST", f"/v1/sandboxes/{asleep}/wake?wait=true", timeout=900)
        wait_for(lambda: agent_of(c, asleep) == NEW, "the woken sandbox's agent upgraded by itself", c,
                 timeout=120)
        assert c.exec(asleep, ["cat", "/root/f"])["stdout"] == "kept\n"
        for s in (sid, asleep):
            assert c.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204
    finally:
        for x in (b, c):
            if x:
                x.stop()
