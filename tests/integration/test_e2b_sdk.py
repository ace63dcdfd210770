"""The public E2B SDK (`e2b` 2.51.0, npm) against Airlock's E2B front door:
each test starts its own Airlock and runs one scenario of tests/e2b/scenarios/
with only E2B_API_URL, E2B_SANDBOX_URL (both the Airlock's address) and
E2B_API_KEY (an Airlock API key: the admin token) set, as an app would be
(tests/e2b_sdk.py; docs/testing.md, "E2B SDK suite"). What each asserts is
the SDK's behaviour as its sources and /work/shared/design/E2B-PROTOCOL.md
section 3 describe it. The template `base` that Sandbox.create() asks for is
one the server maps to an Airlock template.

The control plane's tests come first; those whose names start with
test_envd_ also need the envd front door (commands, GET /health), so that
`-k 'not envd'` runs the control plane alone."""

import json
import os
import subprocess

from e2b_sdk import SDK_DIR

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_sdk_installed(e2b_sdk):
    """The vehicle itself: the pinned versions are what node imports, and the
    committed locks name no registry."""
    for lock in ("tests/e2b/package-lock.json", "tests/e2b/node/package-lock.json"):
        with open(os.path.join(ROOT, lock)) as f:
            text = f.read()
        assert '"resolved"' not in text, f"{lock} names registry addresses (regenerate it with tests/e2b/.npmrc)"
        packages = json.loads(text)["packages"]
        assert all(p.get("integrity") for name, p in packages.items() if name), f"{lock}: a package without integrity"
    with open(os.path.join(ROOT, "tests/e2b/package.json")) as f:
        want = json.load(f)["dependencies"]
    probe = ("const [a, b] = await Promise.all([import('e2b'), import('@e2b/code-interpreter')]);"
             "const fs = await import('node:fs');"
             "const v = (p) => JSON.parse(fs.readFileSync('node_modules/' + p + '/package.json')).version;"
             "console.log(JSON.stringify({'e2b': v('e2b'), '@e2b/code-interpreter': v('@e2b/code-interpreter'),"
             " sandbox: typeof a.Sandbox, ci: typeof b.Sandbox}))")
    p = subprocess.run([e2b_sdk.node, "--input-type=module", "-e", probe], cwd=SDK_DIR,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"node {e2b_sdk.version} cannot import the SDK:\n{p.stderr}"
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == dict(want, sandbox="function", ci="function"), got
    major, minor = (int(x) for x in e2b_sdk.version.lstrip("v").split(".")[:2])
    assert (major, minor) >= (20, 19) and major != 21 and not (major == 22 and minor < 12), \
        f"node {e2b_sdk.version} cannot import e2b 2.51.0 (scripts/e2b-sdk.sh)"


# --- control plane ---------------------------------------------------------

def test_create_default_template(airlock, e2b_sdk):
    """Sandbox.create() asks for `base`: metadata, envs, timeoutMs; getInfo
    running, metadata as given, startedAt, endAt = startedAt + timeout."""
    out = e2b_sdk.run(airlock, "create.mjs")
    print(f"default template: {out.result}")


def test_create_named_template(airlock, e2b_sdk):
    """Sandbox.create('minimal'): the same, and getInfo names the template."""
    out = e2b_sdk.run(airlock, "create.mjs", "minimal")
    print(f"minimal: {out.result}")


def test_list_metadata_and_pages(airlock, e2b_sdk):
    """Sandbox.list: metadata filters (one with the characters the triple
    encoding must carry), state filters, pages of 2 over 3 sandboxes, a
    killed sandbox gone from the list."""
    e2b_sdk.run(airlock, "list.mjs")


def test_set_timeout(airlock, e2b_sdk):
    """setTimeout(ms) moves endAt to now + ms, later and earlier."""
    e2b_sdk.run(airlock, "set-timeout.mjs")


def test_kill(airlock, e2b_sdk):
    """kill() true; afterwards getInfo, setTimeout, pause and connect reject
    with SandboxNotFoundError and kill returns false."""
    e2b_sdk.run(airlock, "kill.mjs")


def test_wrong_api_key(airlock, e2b_sdk):
    """A wrong API key: AuthenticationError for create, list, getInfo, kill,
    setTimeout, pause, connect, and nothing changed; the right key creates."""
    e2b_sdk.run(airlock, "auth.mjs")


def test_unknown_template(airlock, e2b_sdk):
    """Sandbox.create of a template that does not exist: SandboxError with
    statusCode 404 naming it (what E2B answers); a known one creates."""
    out = e2b_sdk.run(airlock, "template-unknown.mjs")
    print(f"unknown template: {out.result}")
    assert out.result["class"] == "SandboxError", out.result


def test_pause_and_connect(airlock, e2b_sdk):
    """pause() true, state paused, a second pause false; Sandbox.connect(id)
    resumes it (running, listed as running again); the instance forms too."""
    e2b_sdk.run(airlock, "pause.mjs")


# --- with envd ---------------------------------------------------------------

def test_envd_pause_keeps_files_and_processes(airlock, e2b_sdk):
    """A file written and a background process started with commands.run
    before pause() are there after Sandbox.connect(id)."""
    e2b_sdk.run(airlock, "pause-files.mjs")


def test_envd_is_running(airlock, e2b_sdk):
    """isRunning() (envd's GET /health): true, then false after kill()."""
    e2b_sdk.run(airlock, "is-running.mjs")


def test_envd_create_envs(airlock, e2b_sdk):
    """The envs of Sandbox.create are in a command's environment."""
    e2b_sdk.run(airlock, "envs.mjs")
