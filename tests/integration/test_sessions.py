"""Command sessions: output streams while the command runs, stdin and
signals reach it, the attach token is scoped to its session."""

import base64
import time

from harness import b64


def start_session(airlock, sid, cmd, **fields):
    return airlock.api("POST", f"/v1/sandboxes/{sid}/sessions", dict(cmd=cmd, **fields), expect=201)


def test_session_streams_before_exit(airlock):
    """Output reaches the client while the command runs: "first" must
    arrive while the command waits for the stdin only we can send."""
    sid = airlock.create("minimal")["id"]
    ses = start_session(airlock, sid, ["sh", "-c", "echo first; read go; echo second >&2; exit 5"])
    assert ses["id"] and ses["attach_token"]

    events = airlock.sse(f"/v1/sessions/{ses['id']}/events", token=ses["attach_token"], timeout=60)
    event, data, _ = next(events)
    assert (event, base64.b64decode(data["data"])) == ("stdout", b"first\n"), (event, data)
    assert airlock.request("POST", f"/v1/sessions/{ses['id']}/stdin", {"text": "go\n"},
                           token=ses["attach_token"])[0] == 204
    rest = list(events)
    out = [(e, base64.b64decode(d["data"])) for e, d, _ in rest if e in ("stdout", "stderr")]
    assert out == [("stderr", b"second\n")], rest
    assert rest[-1][0] == "exit" and rest[-1][1]["exit_code"] == 5, rest


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
    s1 = start_session(airlock, sid, ["sleep", "600"])
    s2 = start_session(airlock, sid, ["sleep", "600"])
    # s1's token does not open s2, nor the rest of the API
    status, _, _ = airlock.request("POST", f"/v1/sessions/{s2['id']}/signal", {"signal": 9},
                                   token=s1["attach_token"])
    assert status == 401
    status, _, _ = airlock.request("GET", "/v1/sandboxes", token=s1["attach_token"])
    assert status == 401
    # each token signals its own session (the control): both die of it
    for s in (s1, s2):
        assert airlock.request("POST", f"/v1/sessions/{s['id']}/signal", {"signal": 9},
                               token=s["attach_token"])[0] == 204
        evs = list(airlock.sse(f"/v1/sessions/{s['id']}/events", token=s["attach_token"]))
        assert evs[-1][0] == "exit" and evs[-1][1]["exit_code"] == 137, evs
