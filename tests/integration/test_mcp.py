"""Airlock's MCP server (docs/mcp.md) as agents reach it: the official MCP
TypeScript SDK's client (@modelcontextprotocol/sdk, pinned in
tests/e2b/package.json and installed with the E2B SDKs) runs
tests/e2b/scenarios/mcp.mjs over streamable HTTP (/v1/mcp) and over stdio
(`airlock mcp`, started by the SDK as an agent starts a tool server), end to
end against real VMs; raw HTTP checks the transport's own rules, a tenant's
key sees only its own sandboxes, and run_code drives the code-interpreter
template's kernel."""

import base64
import json
import time

import pytest

from harness import CLI
from test_e2b_sdk import CODE_INTERPRETER_BUILD_TIMEOUT
from test_tenants import _tenant_with_key


def _mcp(a, body, token=None, headers=None, raw=None):
    """One POST to /v1/mcp: (status, headers, the decoded body or bytes)."""
    h = {"Authorization": f"Bearer {token or a.token}", "Accept": "application/json, text/event-stream",
         "Content-Type": "application/json", **(headers or {})}
    data = raw if raw is not None else json.dumps(body).encode()
    status, hdrs, out = a.request("POST", "/v1/mcp", data, auth=False, headers=h)
    try:
        return status, hdrs, json.loads(out) if out else None
    except ValueError:
        return status, hdrs, out


def _call(a, name, args, token=None, rid=7):
    """tools/call as a client that settled on the newest protocol version."""
    status, _, body = _mcp(a, {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                               "params": {"name": name, "arguments": args}}, token=token,
                           headers={"MCP-Protocol-Version": "2025-11-25"})
    assert status == 200, body
    return body


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_mcp_sdk_end_to_end(airlock, e2b_sdk, transport):
    """The SDK's client over each transport: tools/list (strict schemas),
    create_sandbox, run_command gets 42, output as progress notifications
    before the result, stdin/env/cwd, files written, read (text and
    base64) and listed, each bad input refused naming it beside its
    control, a timeout, a cancellation that kills the command,
    get_port_url, list and delete. Nothing is left behind."""
    out = e2b_sdk.run(airlock, "mcp.mjs", transport, "python", CLI,
                      env={"AIRLOCK_URL": airlock.url, "AIRLOCK_TOKEN": airlock.token})
    assert out.result["transport"] == transport
    assert out.result["progress"] >= 2
    assert airlock.api("GET", "/v1/sandboxes")["sandboxes"] == []


def test_mcp_transport_rules(airlock):
    """The transport over raw HTTP: initialize hands out a session and
    settles the version (an unknown one gets ours); JSON-RPC errors for
    malformed messages, batches and unknown methods; 202 for
    notifications; a GET has no stream (405); a foreign Origin, an unknown
    MCP-Protocol-Version and no key are refused before anything runs; the
    controls succeed in between."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "0"}}}
    status, hdrs, body = _mcp(airlock, init)
    assert status == 200, body
    assert body["result"]["protocolVersion"] == "2025-06-18"
    assert body["result"]["serverInfo"]["name"] == "airlock"
    assert "tools" in body["result"]["capabilities"]
    session = {k.lower(): v for k, v in hdrs.items()}.get("mcp-session-id")
    assert session and session.startswith("mcp-"), hdrs
    init["params"]["protocolVersion"] = "1999-01-01"
    assert _mcp(airlock, init)[2]["result"]["protocolVersion"] == "2025-11-25"

    s = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
    status, _, body = _mcp(airlock, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=s)
    assert (status, body) == (202, None)
    status, _, body = _mcp(airlock, {"jsonrpc": "2.0", "id": "p", "method": "ping"}, headers=s)
    assert (status, body) == (200, {"jsonrpc": "2.0", "id": "p", "result": {}})

    status, _, body = _mcp(airlock, None, raw=b"{not json", headers=s)
    assert status == 400 and body["error"]["code"] == -32700, body
    status, _, body = _mcp(airlock, [{"jsonrpc": "2.0", "id": 1, "method": "ping"}], headers=s)
    assert status == 400 and body["error"]["code"] == -32600 and "batches" in body["error"]["message"], body
    status, _, body = _mcp(airlock, {"jsonrpc": "1.0", "id": 1, "method": "ping"}, headers=s)
    assert status == 400 and body["error"]["code"] == -32600, body
    status, _, body = _mcp(airlock, {"jsonrpc": "2.0", "id": 2, "method": "resources/list"}, headers=s)
    assert body["error"]["code"] == -32601 and "resources/list" in body["error"]["message"], body

    tools = _mcp(airlock, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers=s)[2]["result"]["tools"]
    schema = {t["name"]: t["inputSchema"] for t in tools}
    assert schema["run_command"]["required"] == ["sandbox_id", "command"]
    assert schema["create_sandbox"]["properties"]["on_timeout"]["enum"] == ["suspend", "delete"]

    status, _, body = _mcp(airlock, {"jsonrpc": "2.0", "id": 4, "method": "ping"},
                           headers={**s, "Origin": "http://evil.example"})
    assert status == 403 and "evil.example" in body["error"]["message"], body
    host = airlock.url.split("://", 1)[1]
    assert _mcp(airlock, {"jsonrpc": "2.0", "id": 4, "method": "ping"},
                headers={**s, "Origin": f"http://{host}"})[0] == 200
    status, _, body = _mcp(airlock, {"jsonrpc": "2.0", "id": 5, "method": "ping"},
                           headers={**s, "MCP-Protocol-Version": "2099-01-01"})
    assert status == 400 and "2099-01-01" in body["error"]["message"], body
    status, _, _ = _mcp(airlock, {"jsonrpc": "2.0", "id": 6, "method": "ping"}, token="alk_wrong")
    assert status == 401
    status, hdrs, _ = airlock.request("GET", "/v1/mcp", headers={"Accept": "text/event-stream"})
    assert status == 405
    status, _, _ = airlock.request("DELETE", "/v1/mcp", headers={"Mcp-Session-Id": session})
    assert status == 204


def test_mcp_tenant_sees_its_own(airlock):
    """A tenant's key at /v1/mcp: another tenant's sandbox is 'not found'
    to every tool that names it, and absent from list_sandboxes; it is
    untouched afterwards. The same tools on the tenant's own sandbox work."""
    _, ka = _tenant_with_key(airlock, "mcp-a")
    _, kb = _tenant_with_key(airlock, "mcp-b")
    theirs = airlock.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=kb["key"])["id"]
    mine = _call(airlock, "create_sandbox", {"template": "minimal", "timeout_s": 600}, token=ka["key"])
    assert not mine["result"]["isError"], mine
    mine = json.loads(mine["result"]["content"][0]["text"])["sandbox_id"]
    try:
        for name, args in [("run_command", {"command": "echo pwned > /root/pwned"}),
                           ("write_file", {"path": "/root/pwned", "content": "x"}),
                           ("read_file", {"path": "/etc/hostname"}),
                           ("list_files", {"path": "/"}),
                           ("snapshot", {}), ("fork", {}), ("suspend", {}), ("delete_sandbox", {}),
                           ("get_port_url", {"port": 80})]:
            got = _call(airlock, name, {"sandbox_id": theirs, **args}, token=ka["key"])["result"]
            assert got["isError"] and "not found" in got["content"][0]["text"], (name, got)
            ctl = _call(airlock, name if name not in ("delete_sandbox", "suspend") else "list_sandboxes",
                        {"sandbox_id": mine, **args} if name not in ("delete_sandbox", "suspend") else {},
                        token=ka["key"])["result"]
            assert not ctl["isError"], (name, ctl)
        listed = json.loads(_call(airlock, "list_sandboxes", {}, token=ka["key"])["result"]["content"][0]["text"])
        ids = [s["sandbox_id"] for s in listed["sandboxes"]]
        assert theirs not in ids and mine in ids, ids
        assert airlock.api("GET", f"/v1/sandboxes/{theirs}")["state"] == "running"
        r = airlock.api("POST", f"/v1/sandboxes/{theirs}/exec", {"cmd": ["sh", "-c", "test -e /root/pwned; echo $?"]})
        assert r["stdout"] == "1\n", r
    finally:
        for s in airlock.api("GET", "/v1/sandboxes")["sandboxes"]:
            airlock.request("DELETE", f"/v1/sandboxes/{s['id']}")


def _events(data):
    """The JSON-RPC messages of an event stream's body."""
    out = []
    for block in data.decode().split("\n\n"):
        lines = [l[len("data: "):] for l in block.split("\n") if l.startswith("data: ")]
        if lines:
            out.append(json.loads("\n".join(lines)))
    return out


def test_mcp_run_code(airlock_factory):
    """run_code on the code-interpreter template's kernel: an expression's
    value, printed text streamed as progress events before the response,
    state kept between calls, a matplotlib figure as MCP image content (a
    PNG), an error as a tool error with its name and traceback, a context
    of its own (create_code_context) that does not see the default one's
    variables. The controls and the failures share the sandbox."""
    a = airlock_factory(prebuild="minimal,python,code-interpreter", wait=False)
    a.wait_built(CODE_INTERPRETER_BUILD_TIMEOUT)
    made = _call(a, "create_sandbox", {"template": "code-interpreter"})["result"]
    assert not made["isError"], made
    sbx = json.loads(made["content"][0]["text"])["sandbox_id"]

    res = _call(a, "run_code", {"sandbox_id": sbx, "code": "x = 6\nx * 7"})["result"]
    assert not res["isError"] and res["content"][0]["text"] == "42\n", res

    # streamed: the SDK's way (Accept both, a progressToken): events, then the response
    status, hdrs, data = a.request("POST", "/v1/mcp", json.dumps({
        "jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "run_code", "_meta": {"progressToken": "tok"},
                   "arguments": {"sandbox_id": sbx, "code": "import time\nfor i in range(3):\n"
                                 "    print('tick', i, flush=True); time.sleep(0.2)\nx + 1"}}}).encode(),
        headers={"Accept": "application/json, text/event-stream", "Content-Type": "application/json"})
    assert status == 200 and hdrs.get("Content-Type") == "text/event-stream", (status, hdrs)
    msgs = _events(data)
    progress = [m["params"]["message"] for m in msgs if m.get("method") == "notifications/progress"]
    assert "".join(progress) == "tick 0\ntick 1\ntick 2\n", msgs
    assert all(m["params"]["progressToken"] == "tok" for m in msgs if "method" in m)
    assert msgs[-1]["id"] == 9 and msgs[-1]["result"]["content"][0]["text"] == "tick 0\ntick 1\ntick 2\n7\n", msgs

    plot = _call(a, "run_code", {"sandbox_id": sbx, "code": "import matplotlib.pyplot as plt\n"
                                 "plt.plot([1, 2, 3]); plt.show()"})["result"]
    images = [c for c in plot["content"] if c["type"] == "image"]
    assert len(images) == 1 and images[0]["mimeType"] == "image/png", plot
    assert base64.b64decode(images[0]["data"])[:8] == b"\x89PNG\r\n\x1a\n"

    err = _call(a, "run_code", {"sandbox_id": sbx, "code": "1 / 0"})["result"]
    assert err["isError"] and "ZeroDivisionError" in err["content"][0]["text"], err
    assert err["structuredContent"]["error"]["name"] == "ZeroDivisionError", err

    ctx = _call(a, "create_code_context", {"sandbox_id": sbx, "cwd": "/tmp"})["result"]
    assert not ctx["isError"], ctx
    cid = json.loads(ctx["content"][0]["text"])["context_id"]
    own = _call(a, "run_code", {"sandbox_id": sbx, "context_id": cid,
                                "code": "import os\nprint(os.getcwd(), 'x' in globals())"})["result"]
    assert own["content"][0]["text"] == "/tmp False\n", own
    same = _call(a, "run_code", {"sandbox_id": sbx, "code": "print(x)"})["result"]
    assert same["content"][0]["text"] == "6\n", same
    _call(a, "delete_sandbox", {"sandbox_id": sbx})
    assert a.api("GET", "/v1/sandboxes")["sandboxes"] == []


def test_mcp_many_commands(airlock):
    """An agent's many short commands in one sandbox: 80 run_command calls
    in a row, more than the 64 sessions a sandbox may hold at once, each
    answered with its own output (the node forgets the finished sessions
    that ended first); 64 commands still running at once are the limit,
    which the 65th meets as a tool error, while a finished one's slot is
    reused."""
    made = _call(airlock, "create_sandbox", {"template": "minimal", "timeout_s": 600})["result"]
    sbx = json.loads(made["content"][0]["text"])["sandbox_id"]
    for i in range(80):
        res = _call(airlock, "run_command", {"sandbox_id": sbx, "command": f"echo run{i}"}, rid=i)["result"]
        assert not res["isError"] and res["content"][0]["text"] == f"run{i}\n[exit code 0]", (i, res)
    # 64 running at once: the limit (sessions the REST API starts)
    sids = [airlock.api("POST", f"/v1/sandboxes/{sbx}/sessions", {"cmd": ["sleep", "300"]}, expect=201)["id"]
            for _ in range(64)]
    res = _call(airlock, "run_command", {"sandbox_id": sbx, "command": "echo one-more"})["result"]
    assert res["isError"] and "64 sessions" in res["content"][0]["text"], res
    airlock.api("POST", f"/v1/sessions/{sids[0]}/signal", {"signal": "KILL"}, expect=204)
    got = ""
    for _ in range(50):
        res = _call(airlock, "run_command", {"sandbox_id": sbx, "command": "echo one-more"})["result"]
        got = res["content"][0]["text"]
        if not res["isError"]:
            break
        time.sleep(0.2)
    assert got == "one-more\n[exit code 0]", got
    _call(airlock, "delete_sandbox", {"sandbox_id": sbx})
