"""Command sessions: output streams while the command runs, stdin and
signals reach it, the attach token is scoped to its session."""

import base64
import time

from harness import b64


def start_session(airlock, sid, cmd, **fields):
    return airlock.api("POST", f"/v1/sandboxes/{sid}/sessions", dict(cmd=cmd, **fields), expect=201)


def test_session_streams_before_exit(airlock):
    sid = airlock.create("minimal")["id"]
    ses = start_session(airlock, sid, ["sh", "-c", "echo first; sleep 3; echo second >&2; exit 5"])
    assert ses["id"] and ses["attach_token"]

    seen = []
    for event, data, t in airlock.sse(f"/v1/sessions/{ses['id']}/events", token=ses["attach_token"]):
        seen.append((event, data, t))
        if event == "exit":
            break
    out = [(e, base64.b64decode(d["data"]), t) for e, d, t in seen if e in ("stdout", "stderr")]
    exit_events = [(d, t) for e, d, t in seen if e == "exit"]
    assert out[0][:2] == ("stdout", b"first\n")
    assert ("stderr", b"second\n") in [o[:2] for o in out]
    assert exit_events and exit_events[0][0]["exit_code"] == 5
    # "first" arrived well before the command ended (it sleeps 3 s in between)
    assert exit_events[0][1] - out[0][2] > 1.5


def test_session_stdin_and_signal(airlock):
    sid = airlock.create("minimal")["id"]
    ses = start_session(airlock, sid, ["cat"])
    events = airlock.sse(f"/v1/sessions/{ses['id']}/events", token=ses["attach_token"])
    status, _, _ = airlock.request("POST", f"/v1/sessions/{ses['id']}/stdin",
                                   {"data": b64(b"ping\n")}, token=ses["attach_token"])
    assert status == 204
    event, data, _ = next(events)
    assert event == "stdout" and base64.b64decode(data["data"]) == b"ping\n"
    assert airlock.request("POST", f"/v1/sessions/{ses['id']}/stdin", {"data": "", "close": True})[0] == 204
    rest = list(events)
    assert rest[-1][0] == "exit" and rest[-1][1]["exit_code"] == 0

    ses = start_session(airlock, sid, ["sleep", "100"])
    t0 = time.monotonic()
    assert airlock.request("POST", f"/v1/sessions/{ses['id']}/signal", {"signal": 9})[0] == 204
    evs = list(airlock.sse(f"/v1/sessions/{ses['id']}/events"))
    assert evs[-1][0] == "exit" and evs[-1][1]["exit_code"] == 137
    assert time.monotonic() - t0 < 30


def test_attach_token_is_scoped(airlock):
    sid = airlock.create("minimal")["id"]
    s1 = start_session(airlock, sid, ["sleep", "5"])
    s2 = start_session(airlock, sid, ["sleep", "5"])
    # s1's token does not open s2, nor the rest of the API
    status, _, _ = airlock.request("POST", f"/v1/sessions/{s2['id']}/signal", {"signal": 9},
                                   token=s1["attach_token"])
    assert status == 401
    status, _, _ = airlock.request("GET", "/v1/sandboxes", token=s1["attach_token"])
    assert status == 401
    for s in (s1, s2):
        assert airlock.request("POST", f"/v1/sessions/{s['id']}/signal", {"signal": 9},
                               token=s["attach_token"])[0] == 204
