"""The web console (docs/console.md), end to end in headless Chromium
(Debian's chromium driven by playwright-core, tests/console/console.mjs):
log in with the admin token (a wrong key refused), the sandbox list, one
sandbox's page (a command in its terminal, a file uploaded and downloaded,
a snapshot, pause and resume), templates, nodes, a tenant and its key made
on the tenants page, and that key logging in as the tenant. What the
browser did is checked on the server too. A screenshot per page is kept
in BUILD_DIR/test-artifacts/console/ (docs/console.md shows them)."""

import json
import os
import secrets
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("AIRLOCK_BUILD_DIR", os.path.join(ROOT, "build"))
ARTIFACTS = os.path.join(BUILD, "test-artifacts", "console")
PAGES = ["login", "sandboxes", "sandbox", "templates", "template", "nodes", "tenants", "tenant-sandboxes"]


@pytest.fixture(scope="session")
def browser_node():
    p = subprocess.run([os.path.join(ROOT, "scripts", "browser.sh")], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_console_pages(airlock_factory, browser_node):
    a = airlock_factory(prebuild="minimal")
    sid = a.create("minimal")["id"]
    # a template built from a spec, for its page and build log
    spec = {"name": "console-demo", "base": {"template": "minimal"},
            "steps": [{"run": f"echo building-for-the-console-{secrets.token_hex(4)}"}]}
    a.api("POST", "/v1/templates", {"spec": spec}, expect=202)
    os.makedirs(ARTIFACTS, exist_ok=True)
    for f in os.listdir(ARTIFACTS):
        os.unlink(os.path.join(ARTIFACTS, f))

    # the files are served without a token, with the console's headers
    status, headers, body = a.request("GET", "/", auth=False)
    assert status == 200 and b'src="/console/app.js"' in body, (status, body[:200])
    assert "script-src 'self'" in headers["Content-Security-Policy"] and headers["X-Frame-Options"] == "DENY"
    status, headers, _ = a.request("GET", "/console/vendor/term.js/term.js", auth=False)
    assert status == 200 and headers["Content-Type"].startswith("text/javascript"), headers
    for path in ("/console/../../etc/passwd", "/console/.hidden.js", "/console/vendor/term.js/../../../etc/passwd",
                 "/console/app.sh"):
        status, _, _ = a.request("GET", path, auth=False)
        assert status == 404, path
    # the API behind it still wants a key
    assert a.request("GET", "/v1/sandboxes", auth=False)[0] == 401

    try:
        p = subprocess.run([browser_node, os.path.join(BUILD, "console-test", "console.mjs"), a.url, a.token, sid,
                            ARTIFACTS, "console-demo"], capture_output=True, text=True, timeout=600,
                           cwd=os.path.join(BUILD, "console-test"))
    finally:  # the template's files are the shared templates directory's
        a.request("DELETE", "/v1/templates/console-demo")
    assert p.returncode == 0, (p.stdout, p.stderr)
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert "failure" not in seen, seen.get("failure")
    assert not seen["errors"], seen["errors"]
    # the only refusals: the wrong key, and the tenant's key asking whether it is the admin's
    assert seen["refused"] == ["401 GET /v1/sandboxes", "403 GET /v1/tenants"], seen["refused"]
    assert "not valid" in seen["wrongKey"], seen
    assert any(sid in r and "running" in r and "minimal" in r for r in seen["listed"]), seen["listed"]
    assert "minimal" in seen["details"] and "running" in seen["details"], seen["details"]
    assert "console-42" in seen["terminal"], seen["terminal"]
    # the PTY has the size the page drew, before and after the window shrank
    for size in (seen["termSize"], seen["termResized"]):
        assert size["stty"] == size["drawn"], size
    assert int(seen["termResized"]["drawn"].split()[1]) < int(seen["termSize"]["drawn"].split()[1]), seen
    assert seen["downloaded"] == "uploaded from the console\n", seen
    assert "hello.txt" in seen["files"] and "from-terminal" in seen["files"], seen["files"]
    assert seen["snapshots"] >= 1
    assert seen["pausedState"] == "paused" and seen["resumedState"] == "running", seen
    assert any(o.startswith("pause: succeeded (op-") for o in seen["operations"]), seen["operations"]
    assert any(t.startswith("minimal") for t in seen["templates"]), seen["templates"]
    assert any(t.startswith("console-demo") for t in seen["templates"]), seen["templates"]
    assert "=== step 3/4: RUN echo building-for-the-console" in seen["buildLog"], seen["buildLog"]
    assert "ok" in seen["localNode"], seen["localNode"]
    assert seen["newKey"].startswith("alk_") and seen["tenantRows"] == 0 and not seen["tenantSeesNodes"], seen
    assert sorted(seen["shots"]) == sorted(f"{n}.png" for n in PAGES), seen["shots"]
    for n in PAGES:  # a real picture of the page, not an empty file
        with open(os.path.join(ARTIFACTS, f"{n}.png"), "rb") as f:
            png = f.read()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000, n

    # the server's side of what the browser did
    assert a.get_file(sid, "/root/hello.txt") == b"uploaded from the console\n"
    assert a.exec(sid, ["cat", "/root/from-terminal"])["stdout"] == "console-42\n"
    assert a.api("GET", f"/v1/sandboxes/{sid}")["state"] == "running"
    assert len(a.api("GET", f"/v1/sandboxes/{sid}/snapshots")["snapshots"]) >= 1
    tenants = {t["name"]: t for t in a.api("GET", "/v1/tenants")["tenants"]}
    keys = a.api("GET", f"/v1/tenants/{tenants['from-console']['id']}/keys")["keys"]
    assert len(keys) == 1 and keys[0]["name"] == "console", keys
    assert a.api("GET", "/v1/sandboxes", token=seen["newKey"])["sandboxes"] == []
