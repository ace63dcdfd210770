"""The E2B SDK suite's side of pytest: the public `e2b` npm SDK, installed
once per run by scripts/e2b-sdk.sh under BUILD_DIR/e2b-sdk, runs one
scenario of tests/e2b/scenarios/ (a small node program) against an Airlock
of the harness, configured as an app would be, by E2B_API_URL,
E2B_SANDBOX_URL, E2B_VOLUME_API_URL and E2B_API_KEY alone (docs/testing.md,
"E2B SDK suite").

    def test_x(airlock, e2b_sdk):
        out = e2b_sdk.run(airlock, "create.mjs", "minimal")
        out.result   # the scenario's last RESULT {json} line, or None

A scenario that exits non-zero, or runs past its timeout, fails the test
with its stdout, its stderr and the end of airlockd's log."""

import json
import os
import signal
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("AIRLOCK_BUILD_DIR", os.path.join(ROOT, "build"))
INSTALL = os.path.join(ROOT, "scripts", "e2b-sdk.sh")
SDK_DIR = os.path.join(BUILD, "e2b-sdk")
SCENARIOS = os.path.join(SDK_DIR, "scenarios")
INSTALL_TIMEOUT = 900  # a first install: the SDK, maybe a Node, over the network
SCENARIO_TIMEOUT = 300


class ScenarioOutput:
    def __init__(self, argv, rc, stdout, stderr, seconds):
        self.argv, self.rc, self.stdout, self.stderr, self.seconds = argv, rc, stdout, stderr, seconds

    @property
    def result(self):
        """The last `RESULT {json}` line the scenario printed, decoded."""
        lines = [l for l in self.stdout.splitlines() if l.startswith("RESULT ")]
        return json.loads(lines[-1][len("RESULT "):]) if lines else None


class E2BSdk:
    """The installed SDK and the node that runs it."""

    def __init__(self, node):
        self.node = node
        self.version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()

    def env(self, a, key=None, extra=None):
        """The environment of a scenario against Airlock a: none of the
        caller's E2B_* settings (E2B_DEBUG, E2B_DOMAIN... would change what
        the SDK does), the four an app sets, key as the API key (default:
        the admin token, which is an API key too)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
        env.update({
            "E2B_API_URL": a.url,
            "E2B_SANDBOX_URL": a.url,
            # the volume content API's address (else https://api.DOMAIN)
            "E2B_VOLUME_API_URL": a.url,
            "E2B_API_KEY": key if key is not None else a.token,
        })
        env.update(extra or {})
        return env

    def run(self, a, scenario, *args, key=None, env=None, timeout=SCENARIO_TIMEOUT, check=True):
        """Runs tests/e2b/scenarios/SCENARIO (its copy beside node_modules)
        with args against Airlock a; returns its ScenarioOutput. With check
        (the default) a non-zero exit or a timeout fails the test."""
        argv = [self.node, os.path.join(SCENARIOS, scenario), *args]
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, cwd=SCENARIOS, env=self.env(a, key, env), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        res = ScenarioOutput(argv, proc.returncode, out.decode(errors="replace"),
                             err.decode(errors="replace"), time.monotonic() - t0)
        name = " ".join([scenario, *args])
        if check and (timed_out or res.rc != 0):
            what = f"ran past its {timeout} s timeout" if timed_out else f"exited with {res.rc}"
            pytest.fail(
                f"E2B SDK scenario {name} {what} after {res.seconds:.1f} s "
                f"(node {self.version}, {a.url})\n"
                f"--- stdout\n{res.stdout.rstrip()}\n--- stderr\n{res.stderr.rstrip()}\n"
                f"--- airlockd log (last 80 lines)\n{a.log_tail(80)}",
                pytrace=False)
        # shown with pytest -s, -rP or when the test fails later
        print(f"--- {name}: exit {res.rc} after {res.seconds:.1f} s\n{res.stdout.rstrip()}")
        if res.stderr.strip():
            print(f"--- {name}: stderr\n{res.stderr.rstrip()}")
        return res


def install():
    """Runs scripts/e2b-sdk.sh (a no-op when it is all there); returns the
    E2BSdk, or fails with what the script said."""
    env = dict(os.environ, AIRLOCK_BUILD_DIR=BUILD)
    try:
        p = subprocess.run([INSTALL], capture_output=True, text=True, env=env, timeout=INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"scripts/e2b-sdk.sh ran past {INSTALL_TIMEOUT} s:\n{e.stderr or ''}", pytrace=False)
    if p.returncode != 0:
        pytest.fail(f"scripts/e2b-sdk.sh failed (exit {p.returncode}):\n{p.stderr}", pytrace=False)
    lines = p.stdout.strip().splitlines()
    node = lines[-1] if lines else ""
    if not os.path.isabs(node) or not os.access(node, os.X_OK):
        pytest.fail(f"scripts/e2b-sdk.sh printed no node binary (stdout {p.stdout!r}):\n{p.stderr}", pytrace=False)
    if p.stderr.strip():
        print(p.stderr.rstrip())
    return E2BSdk(node)


@pytest.fixture(scope="session")
def e2b_sdk():
    """The E2B SDK, installed (if needed) once per run."""
    return install()
