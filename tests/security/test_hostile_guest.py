"""A compromised guest agent attacks the node over the guest channel.

The sandboxes here run airlock-guest-hostile (tests/security/hostile-guest/):
the real agent, linked again with hooks that attack the node when an exec
asks for it (["airlock-hostile", ATTACK, ...]). Every test checks what a user
relies on when one guest is hostile: the node survives (same pid, health
answers), its memory and CPU stay bounded, the attacked sandbox either keeps
working or fails with a clear error (docs/guest-protocol.md: a frame the node
cannot take closes the channel; the sandbox is then `failed` with "guest
channel closed"), it can still be deleted promptly, and a neighbour on the
same node keeps working throughout. Each attack is shown to have run (the
hostile agent says so on its console, or its bytes arrive), the node's own
answer names why it refused (its status and message, its log line), and
each test ends with its control: the node is the same process and
healthy, and an ordinary exec runs on the neighbour and, where it lives
on, on the attacked sandbox.

One Airlock serves the module: its templates are built with the hostile
agent in their own directory (another agent binary is another template
hash, and a node prunes the builds of other hashes), once per volume."""

import base64
import concurrent.futures
import datetime
import http.client
import json
import os
import shutil
import subprocess
import time
import urllib.parse

import pytest

from harness import BUILD, TEMPLATES, VOLUME, airlock_instance, qemu_pids

HOSTILE_BINARY = os.path.join(BUILD, "tests", "security", "hostile-guest", "airlock-guest-hostile")
HOSTILE_TEMPLATES = os.path.join(VOLUME, "templates-hostile")
MIB = 1 << 20


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Hostile:
    """The module's Airlock (hostile agent in every sandbox) and a
    neighbour sandbox that is never attacked."""

    def __init__(self, a):
        self.a = a
        self.neighbour = a.create("minimal")["id"]

    @property
    def node(self):
        return self.a.pid_of("airlock-node")

    @property
    def airlockd(self):
        # not self.a.proc.pid: under root that is airlock-nodemgr
        return self.a.pid_of("airlockd")

    def neighbour_ok(self, timeout=60):
        r = self.a.api("POST", f"/v1/sandboxes/{self.neighbour}/exec", {"cmd": ["cat", "/run/airlock/sandbox-id"]},
                       timeout=timeout)
        assert r["exit_code"] == 0 and r["stdout"].strip() == self.neighbour, r
        return True

    def victim(self):
        return self.a.create("minimal")["id"]

    def attack(self, sid, *args, timeout=120):
        """Runs the magic exec; returns (status, body)."""
        status, _, body = self.a.request("POST", f"/v1/sandboxes/{sid}/exec",
                                         {"cmd": ["airlock-hostile", *args]}, timeout=timeout)
        return status, json.loads(body) if body else None

    def state(self, sid):
        return self.a.api("GET", f"/v1/sandboxes/{sid}")

    def wait_state(self, sid, want, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            sb = self.state(sid)
            if sb["state"] == want or time.monotonic() > deadline:
                return sb
            time.sleep(0.25)

    @staticmethod
    def console_path(sid):
        """The console log of sid's VM (found while the VM runs; the file
        stays until the sandbox is deleted)."""
        argv = open(f"/proc/{qemu_pids(sid)[0]}/cmdline", "rb").read().decode().split("\0")
        qmp = argv[argv.index("-qmp") + 1][len("unix:"):].split(",")[0]
        return os.path.join(os.path.dirname(qmp), "console.log")

    @staticmethod
    def ran(console, attack):
        """The hostile agent took the magic exec and began the attack (it
        says so on its console before it does anything)."""
        with open(console, errors="replace") as f:
            got = f.read()
        assert f"hostile: attack {attack}" in got, f"the attack {attack} never began:\n{got[-2000:]}"

    def control(self, sid=None):
        """The control, after the attack in the same test: the node is the
        same process and answers health, and an ordinary exec runs on the
        neighbour (and on sid, the attacked sandbox, where it lives on)."""
        assert self.node == self.node_pid, "the node was restarted"
        assert self.a.request("GET", "/v1/health", auth=False)[0] == 200
        self.neighbour_ok()
        if sid:
            self.echo_works(sid)

    def wait_console(self, sid, text, timeout=30):
        """Waits until the guest of sid has written text to its console
        (the hostile agent says there what it is doing)."""
        path = self.console_path(sid)
        deadline = time.monotonic() + timeout
        while True:
            with open(path, errors="replace") as f:
                got = f.read()
            if text in got:
                return
            if time.monotonic() >= deadline:
                # what the node saw of it, to tell a slow guest from a channel gone
                node = "".join(self.log_lines(sid, "")[-30:])
                raise AssertionError(f"{sid}'s guest did not log {text!r} in {timeout} s:\n{got[-2000:]}"
                                     f"\n--- the log's lines about {sid}:\n{node}")
            time.sleep(0.1)

    def log_lines(self, sid, text):
        """The node's log lines about sandbox sid that contain text."""
        with open(self.a.log_path, errors="replace") as f:
            return [l for l in f if f"sandbox={sid} " in l and text in l]

    def delete(self, sid, within=20):
        t0 = time.monotonic()
        status, _, body = self.a.request("DELETE", f"/v1/sandboxes/{sid}", timeout=120)
        took = time.monotonic() - t0
        assert status == 204, (status, body)
        assert took < within, f"deleting the attacked sandbox took {took:.1f} s"

    def echo_works(self, sid):
        r = self.a.exec(sid, ["echo", "still-here"])
        assert r["exit_code"] == 0 and r["stdout"] == "still-here\n", r


def _prepare_templates_dir():
    """The hostile templates share the kernel build of the run (a reflink
    copy: instant on the btrfs volume) but nothing else."""
    os.makedirs(HOSTILE_TEMPLATES, exist_ok=True)
    for name in os.listdir(TEMPLATES):
        src = os.path.join(TEMPLATES, name)
        dst = os.path.join(HOSTILE_TEMPLATES, name)
        if name.startswith("kernel-") and os.path.isdir(src) and not os.path.exists(dst):
            tmp = dst + ".copy"
            shutil.rmtree(tmp, ignore_errors=True)
            subprocess.run(["cp", "-a", "--reflink=auto", src, tmp], check=True)
            os.rename(tmp, dst)


@pytest.fixture(scope="module")
def hostile(templates):
    assert os.access(HOSTILE_BINARY, os.X_OK), f"{HOSTILE_BINARY} is not built"
    _prepare_templates_dir()
    env = {"AIRLOCK_GUEST_BINARY": HOSTILE_BINARY, "AIRLOCK_TEMPLATES_DIR": HOSTILE_TEMPLATES,
           # at debug, every dropped frame of a flood would be a log line
           "AIRLOCK_LOG_LEVEL": "info"}
    with airlock_instance(env, prebuild="minimal", timeout=900) as a:
        h = Hostile(a)
        h.node_pid = h.node
        yield h


class Stalled:
    """The module's ping-flooded sandbox: when its flood began (wall
    clock) and the exec that started it (a future of (status, body))."""

    def __init__(self, sid, t0, fut):
        self.sid, self.t0, self.fut = sid, t0, fut


@pytest.fixture(scope="module")
def stalled(hostile):
    """A guest that floods PINGs and never reads the answers, from before
    the first test to the last: the node's sends to it stall, so every
    test runs beside a channel stuck in a 60 s send, and the last checks
    how that ends (test_ping_flood_closes_the_channel_after_60_s) without
    a minute of its own."""
    sid = hostile.victim()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        t0 = time.time()
        fut = pool.submit(hostile.attack, sid, "ping-flood", timeout=150)
        hostile.wait_console(sid, "hostile: ping flood stalled", timeout=60)
        yield Stalled(sid, t0, fut)
        hostile.a.request("DELETE", f"/v1/sandboxes/{sid}", timeout=120)
        fut.result(timeout=150)


@pytest.fixture
def h(hostile, stalled, request):
    """Per test: the node is the same process before and after, it answers
    health, and the neighbour works (also while another guest's channel
    is stalled: see `stalled`)."""
    node = hostile.node
    assert node == hostile.node_pid, "the node was restarted by an earlier attack"
    rss0 = rss(node)
    yield hostile
    if getattr(request.node, "rep_call", None) and request.node.rep_call.failed:
        print(f"--- log of {hostile.a.data_dir}\n{hostile.a.log_tail(120)}")
    assert hostile.node == node, "the node died"
    assert hostile.a.request("GET", "/v1/health", auth=False)[0] == 200
    hostile.neighbour_ok()
    grown = rss(node) - rss0
    assert grown < 96 * MIB, f"node RSS grew by {grown / MIB:.0f} MiB"


# ---- frames the node must refuse -------------------------------------------

@pytest.mark.parametrize("how", ["oversize", "maxlen", "version"])
def test_bad_frame_header_fails_only_that_sandbox(h, how):
    """A header with a length over 1 MiB (or 4 GiB), or another protocol
    version: the node allocates nothing for it, closes that channel, and
    the sandbox is failed with a clear error; the request that was waiting
    gets a guest error, not a hang."""
    sid = h.victim()
    console = h.console_path(sid)
    t0 = time.monotonic()
    status, body = h.attack(sid, "bad-header", how)
    assert status == 502 and body["error"]["code"] == "guest", (status, body)
    assert time.monotonic() - t0 < 20
    h.ran(console, "bad-header")
    # the node's reader refused the header itself, for its reason
    why = "Protocol not supported" if how == "version" else "Message too long"
    assert [l for l in h.log_lines(sid, "guest channel failed") if why in l], h.log_lines(sid, "guest channel")
    sb = h.wait_state(sid, "failed")
    assert sb["state"] == "failed" and "guest channel closed" in sb.get("error", ""), sb
    status, _, body = h.a.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
    assert status in (409, 502), (status, body)
    h.delete(sid)
    h.control()


def test_truncated_frame_then_silence(h):
    """Half a frame and then nothing: the waiting request ends at the
    node's call timeout, 504 `timeout` at 30 s (it does not hang: the exec
    itself could have run 60 s), the neighbour works meanwhile, the sandbox
    can go."""
    sid = h.victim()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        t0 = time.monotonic()
        fut = pool.submit(h.attack, sid, "truncated")
        h.wait_console(sid, "hostile: attack truncated")
        assert h.neighbour_ok(timeout=20)
        assert h.a.request("GET", "/v1/sandboxes")[0] == 200
        assert not fut.done(), fut.result()
        status, body = fut.result(timeout=90)
        took = time.monotonic() - t0
    assert status == 504 and body["error"]["code"] == "timeout", (status, body)
    assert 29 < took < 40, f"the request waiting on half a frame ended after {took:.1f} s, not at the 30 s call timeout"
    h.delete(sid)
    h.control()


def test_slowloris_frame_does_not_hold_the_node(h):
    """One frame dribbled a byte a second: nothing else on the node waits
    for it, and the sandbox can be deleted while it dribbles."""
    sid = h.victim()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(h.attack, sid, "slowloris", "300")
        h.wait_console(sid, "hostile: attack slowloris")
        t0 = time.monotonic()
        assert h.neighbour_ok(timeout=20)
        assert h.a.request("GET", "/v1/health", auth=False)[0] == 200
        assert h.a.request("GET", "/v1/sandboxes")[0] == 200
        assert time.monotonic() - t0 < 10
        h.delete(sid)
        status, body = fut.result(timeout=60)
    # the dribbled reply never completed: its request ended with the channel
    assert status == 502 and body["error"]["code"] == "guest", (status, body)
    h.control()


def test_garbage_between_frames_is_skipped(h):
    """A MiB of bytes that are no frame (with partial magics): the node
    resynchronises on the next magic and the channel carries on."""
    sid = h.victim()
    console = h.console_path(sid)
    status, body = h.attack(sid, "garbage", str(MIB))
    assert status == 200 and body["stdout"] == "survived garbage\n", (status, body)
    h.ran(console, "garbage")
    h.control(sid)
    h.delete(sid)


def test_malformed_json_reply(h):
    """A reply whose JSON is cut off fails that request with a guest error;
    the channel and the sandbox stay usable."""
    sid = h.victim()
    console = h.console_path(sid)
    status, body = h.attack(sid, "bad-json")
    assert status == 502 and body["error"]["code"] == "guest", (status, body)
    assert "malformed" in body["error"]["message"], body  # the node's reply parser
    h.ran(console, "bad-json")
    assert h.state(sid)["state"] == "running"
    h.control(sid)
    h.delete(sid)


@pytest.mark.parametrize("big", [False, True], ids=["small-buffer", "after-1MiB-frame"])
def test_small_frame_flood_costs_linear_time(h, big):
    """Four million one-byte frames (68 MB) for streams nobody opened
    (after a maximal frame that grew the node's read buffer to 1 MiB): the
    node drops them at the speed they come (measured: 0.04 CPU-s for half
    a million). Before lib/proto's reader kept a start offset, every frame
    popped moved the rest of the buffer: 4.6 CPU-s after the big frame,
    1.6 s without (and a full 1 MiB buffer of them cost 0.5 CPU-s per
    MiB)."""
    sid = h.victim()
    console = h.console_path(sid)
    node = h.node
    cpu0, t0 = cpu_s(node), time.monotonic()
    args = ["flood", "4000000"] + (["big"] if big else [])
    status, body = h.attack(sid, *args, timeout=300)
    cpu = cpu_s(node) - cpu0
    assert status == 200 and body["stdout"] == "flooded\n", (status, body)
    h.ran(console, "flood")
    assert cpu < 1.5, f"the node spent {cpu:.1f} CPU-s on {time.monotonic() - t0:.1f} s of flood"
    h.control(sid)
    h.delete(sid)


def test_unsolicited_replies_and_stream_frames(h):
    """RESULT, ERROR, EXIT, FILE_DATA, FILE_END, STDOUT, HELLO and unknown
    types for requests never sent (stream 0, low ids, the ids the node
    picks next, the highest ids), and extra replies on a real stream: all
    dropped; later requests get their own answers."""
    sid = h.victim()
    console = h.console_path(sid)
    status, body = h.attack(sid, "unsolicited")
    assert status == 200 and body["stdout"] == "after the lies\n" and body["exit_code"] == 0, (status, body)
    h.ran(console, "unsolicited")
    h.a.put_file(sid, "/root/f", b"mine")
    assert h.a.get_file(sid, "/root/f") == b"mine"
    ls = h.a.api("GET", f"/v1/sandboxes/{sid}/ls?path=/root")["entries"]
    assert [e["name"] for e in ls] == ["f"]
    h.control(sid)
    h.delete(sid)


def test_ping_flood_without_reading(h):
    """The guest floods PINGs and never reads the answers: the node's
    writes to it stall, and only that channel's do. Once the guest's
    writes block (every buffer on the way is full), the neighbour, health
    and the list answer, and the sandbox is deleted promptly: the delete
    shuts the channel down first. The failed answer is logged once, not
    once per PING still buffered."""
    sid = h.victim()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(h.attack, sid, "ping-flood", timeout=150)
        h.wait_console(sid, "hostile: ping flood stalled", timeout=60)
        t0 = time.monotonic()
        assert h.neighbour_ok(timeout=20)
        assert h.a.request("GET", "/v1/sandboxes", timeout=20)[0] == 200
        assert h.a.request("GET", f"/v1/sandboxes/{sid}", timeout=20)[0] == 200
        assert time.monotonic() - t0 < 10
        assert not fut.done(), fut.result()
        h.delete(sid, within=20)
        status, body = fut.result(timeout=150)
    # the flooding exec never answers: it ends with the channel the delete shut
    assert status == 502 and body["error"]["code"] == "guest", (status, body)
    warned = h.log_lines(sid, "failed to answer guest ping")
    assert len(warned) == 1, warned[:5]
    h.control()


def _log_time(line):
    ts = line.split(" ", 1)[0][len("ts="):]
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def test_ping_flood_closes_the_channel_after_60_s(h, stalled):
    """The module's `stalled` guest, flooding since before the first test:
    its exec got 504 at the 30 s call timeout; the node's send to it made
    no progress for 60 s and then the node closed that channel (one
    warning for the flood, not one per PING); the sandbox is `failed` with
    "guest channel closed" and is deleted promptly. Run alone, this test
    waits out the minute itself."""
    sid = stalled.sid
    sb = h.wait_state(sid, "failed", timeout=max(1, stalled.t0 + 120 - time.time()))
    assert sb["state"] == "failed" and "guest channel closed" in sb.get("error", ""), sb
    closed = h.log_lines(sid, "guest accepted nothing for")
    assert len(closed) == 1, closed
    took = _log_time(closed[0]) - stalled.t0
    assert 60 <= took < 80, f"the stalled channel was closed {took:.1f} s after the flood began, not after 60 s"
    warned = h.log_lines(sid, "failed to answer guest ping")
    assert len(warned) == 1, warned[:5]
    status, body = stalled.fut.result(timeout=10)
    assert status == 504 and body["error"]["code"] == "timeout", (status, body)
    h.delete(sid)
    h.control()


def test_exec_output_in_maximal_frames(h):
    """64 MiB of output in 1 MiB frames (the agent's own chunks are 64 KiB):
    the reply is cut at the output limit and the node holds no more."""
    sid = h.victim()
    console = h.console_path(sid)
    status, body = h.attack(sid, "exec-output", "64", timeout=300)
    assert status == 200, (status, body)
    h.ran(console, "exec-output")
    assert body["stdout_truncated"] and body["stderr_truncated"], {k: v for k, v in body.items() if "std" not in k}
    assert len(body["stdout"]) == 256 << 10 and len(body["stderr"]) == 256 << 10  # cut at the limit, not before
    assert set(body["stdout"]) == {"o"}
    h.control(sid)
    h.delete(sid)


def test_session_output_in_maximal_frames(h):
    """A session whose process sends 64 MiB in 1 MiB frames before anyone
    attaches: the node keeps its last MiB or so (the session buffer), says
    how much it dropped, and the stream still ends with the exit."""
    sid = h.victim()
    ses = h.a.api("POST", f"/v1/sandboxes/{sid}/sessions", {"cmd": ["airlock-hostile", "exec-output", "64"]},
                  expect=201)
    h.echo_works(sid)  # the agent answers once it has sent it all
    kept, dropped, exit_code = 0, 0, None
    for event, data, _ in h.a.sse(f"/v1/sessions/{ses['id']}/events", token=ses["attach_token"]):
        if event in ("stdout", "stderr"):
            kept += len(base64.b64decode(data["data"]))
        elif event == "dropped":
            dropped += data["bytes"]
        elif event == "exit":
            exit_code = data.get("exit_code")
    assert exit_code == 0
    assert kept <= 3 * MIB and dropped >= 60 * MIB and kept + dropped == 64 * MIB, (kept, dropped)
    h.control(sid)
    h.delete(sid)


def _wait_still(node, airlockd, rss_node, rss_d, timeout=60):
    """Waits until the node and airlockd have neither grown (1 MiB) nor
    used CPU (50 ms) for 1.5 s; returns the most each grew meanwhile."""
    pids = (node, airlockd)
    base = (rss_node, rss_d)
    most = [0, 0]
    deadline = time.monotonic() + timeout
    last = None
    while True:
        now = (time.monotonic(), [rss(p) for p in pids], [cpu_s(p) for p in pids])
        most = [max(m, r - b) for m, r, b in zip(most, now[1], base)]
        if last is None or any(abs(a - b) > MIB for a, b in zip(now[1], last[1])) or \
                any(a - b > 0.05 for a, b in zip(now[2], last[2])):
            last = now
        elif now[0] - last[0] >= 1.5:
            return most
        assert now[0] < deadline, f"the transfer never stood still (grown {most}) in {timeout} s"
        time.sleep(0.1)


def test_giant_file_read_is_streamed_with_backpressure(h):
    """A file read that announces one byte and sends 256 MiB: the node and
    airlockd stream it with bounded buffers while the client reads slowly,
    and a client that hangs up ends it."""
    sid = h.victim()
    node, airlockd = h.node, h.airlockd
    rss_node, rss_d = rss(node), rss(airlockd)
    q = urllib.parse.urlencode({"path": "/airlock-hostile/giant-256"})
    conn = http.client.HTTPConnection("127.0.0.1", h.a.port, timeout=60)
    conn.request("GET", f"/v1/sandboxes/{sid}/files?{q}", headers={"Authorization": f"Bearer {h.a.token}"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("X-Airlock-Size") == "1"
    got = 0
    while got < 24 * MIB:
        chunk = resp.read1(1 << 16)
        assert chunk and set(chunk) == {ord("g")}
        got += len(chunk)
    # a slow client: wait until every queue on the way is full and the
    # transfer stands still (neither process grows or works any more);
    # without backpressure that is only once all 256 MiB are held
    grown = _wait_still(node, airlockd, rss_node, rss_d)
    assert grown[0] < 48 * MIB, f"the node buffered the file: {grown[0] / MIB:.0f} MiB"
    assert grown[1] < 48 * MIB, f"airlockd buffered the file: {grown[1] / MIB:.0f} MiB"
    conn.close()  # the client hangs up mid-transfer
    assert h.neighbour_ok(timeout=30)
    # the guest keeps sending into a closed stream until it is done; then
    # the sandbox answers again
    deadline = time.monotonic() + 120
    while True:
        status, _, body = h.a.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["echo", "still-here"]}, timeout=60)
        if status == 200:
            break
        assert time.monotonic() < deadline, (status, body)
        time.sleep(0.5)
    assert json.loads(body)["stdout"] == "still-here\n"
    # the control: an ordinary file of it streams whole
    h.a.put_file(sid, "/root/f", b"f" * MIB)
    assert h.a.get_file(sid, "/root/f") == b"f" * MIB
    h.control(sid)
    h.delete(sid)


BAD_ENTRIES = ["dotdot", "dot", "empty", "traversal", "slash", "absolute", "nul", "type", "negative-size",
               "mode", "name-not-string", "not-an-object"]


@pytest.mark.cases(len(BAD_ENTRIES) + 1)  # and the listing of 12000
def test_lying_directory_listing(h):
    """LIST replies whose entries are named "..", ".", "", "a/b",
    "../../etc/passwd", "/etc/shadow" or carry a NUL, have an unknown type,
    a negative size, an impossible mode, no string name, or are no object:
    the node passes none of it on (the listing fails with a guest error: a
    client could take a name for a path component). 12000 good entries:
    at most 10000 are passed on, marked truncated."""
    sid = h.victim()

    def control():  # an ordinary listing is passed on
        h.a.put_file(sid, "/root/f", b"x")
        assert [e["name"] for e in h.a.api("GET", f"/v1/sandboxes/{sid}/ls?path=/root")["entries"]] == ["f"]

    for k, what in enumerate(BAD_ENTRIES):
        status, _, data = h.a.request("GET", f"/v1/sandboxes/{sid}/ls?path=/airlock-hostile/list-bad-{k}")
        assert (status, json.loads(data)["error"]) == (502, {
            "code": "guest", "message": "listing failed: the guest agent sent a malformed reply"}), (what, status, data)
        assert b"f00000" not in data and b"passwd" not in data, (what, data)
        control()
    r = h.a.api("GET", f"/v1/sandboxes/{sid}/ls?path=/airlock-hostile/list-many")
    assert len(r["entries"]) == 10000 and r.get("truncated") is True
    assert r["entries"][0] == {"name": "f00000", "type": "file", "size": 0, "mode": 0o644, "mtime": 0}
    control()
    h.control(sid)
    h.delete(sid)


def _restart(h, sid):
    h.a.api("POST", f"/v1/sandboxes/{sid}/stop?wait=true")
    status, _, body = h.a.request("POST", f"/v1/sandboxes/{sid}/start?wait=true", timeout=300)
    assert status in (200, 202), (status, body)
    return json.loads(body)


def test_hello_claiming_another_protocol_version(h):
    """After a reboot the agent answers HELLO with another protocol
    version: the node refuses to use the channel; the start fails with a
    clear error and the sandbox is not running."""
    sid = h.victim()
    status, body = h.attack(sid, "hello", "version")
    assert status == 200 and body["stdout"] == "armed\n", (status, body)
    op = _restart(h, sid)
    assert op["state"] == "failed", op
    assert "Protocol not supported" in op["error"]["message"], op  # the handshake's -EPROTONOSUPPORT
    assert h.state(sid)["state"] in ("stopped", "failed")
    h.delete(sid)
    h.control()


def test_hello_forging_identity_and_log_lines(h):
    """The agent's HELLO names the neighbour's sandbox id and carries
    newlines and a fake log line in its agent name and boot id: the node
    takes the sandbox's identity from its own record, and its log stays one
    event per line (the forged text appears only escaped, inside a quoted
    message)."""
    sid = h.victim()
    status, body = h.attack(sid, "hello", "forge", h.neighbour)
    assert status == 200 and body["stdout"] == "armed\n", (status, body)
    op = _restart(h, sid)
    assert op["state"] == "succeeded", op
    r = h.a.exec(sid, ["cat", "/run/airlock/sandbox-id"])
    assert r["stdout"].strip() == sid
    assert h.state(sid)["id"] == sid
    h.neighbour_ok()
    with open(h.a.log_path, "rb") as f:
        lines = f.read().splitlines()
    forged = [l for l in lines if b"FORGED-BY-GUEST" in l]
    assert forged, "the HELLO reply was not logged at all"
    for l in forged:
        assert l.startswith(b"ts=") and b"msg=" in l, l
        assert l.index(b"FORGED-BY-GUEST") > l.index(b'msg="'), l
        assert not l.startswith(b"ts=2026-01-01T00:00:00.000Z"), l
    h.control(sid)
    h.delete(sid)
