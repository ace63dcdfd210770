"""A stop that stops (docs/architecture.md, the node's shutdown): SIGTERM
to Airlock in the middle of a template build ends it at once, with every
build step, VM and mount it started: a recipe's root file system
(python's mmdebstrap, which airlock-nodemgr runs as root: it kills it when
the node hangs up) and a Dockerfile's RUN in its build VM. Each start
builds into a templates directory of its own, so the builds are real;
after each stop the suite's leak checks (no QEMU, VM cgroup, mount, loop
device, run dir) and a look for the steps' processes. The control: the
next start on the same directory serves."""

import re
import signal
import subprocess
import time

import harness
import pytest
from clusterlab import wait_for

STOP_WITHIN_S = 90  # systemd's default TimeoutStopSec: past it, a supervisor kills everything


def log_text(a):
    with open(a.log_path, errors="replace") as f:
        return f.read()


def stop_in_the_middle(a, marker, leftovers, timeout=900):
    """Waits for marker (a regex in a's log, or a function), then SIGTERM:
    a must exit (within STOP_WITHIN_S) leaving no process matching any of
    leftovers and nothing the leak checks find. Returns the processes of
    leftovers that ran at the signal, and how long the stop took."""
    reached = marker if callable(marker) else lambda: re.search(marker, log_text(a))
    wait_for(reached, timeout, lambda: f"never got to {marker!r}:\n{a.log_tail(60)}", interval=0.2)
    running = {w: harness.procs_naming(w) for w in leftovers}
    t0 = time.monotonic()
    a.proc.send_signal(signal.SIGTERM)
    try:
        a.proc.wait(timeout=STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"airlockd still running {STOP_WITHIN_S} s after SIGTERM:\n{a.log_tail(60)}")
    took = time.monotonic() - t0
    left = {w: harness.procs_naming(w) for w in leftovers}
    assert not any(left.values()), (left, a.log_tail(80))
    leaks = harness._check_no_leaks(a.data_dir)
    assert not leaks, (leaks, a.log_tail(80))
    return running, took


def test_a_stop_in_the_middle_of_each_kind_of_build(airlock_factory, tmp_path):
    tpl = harness.volume_tempdir("airlock-tpl-stop-")
    env = {"AIRLOCK_TEMPLATES_DIR": tpl}
    try:
        # a recipe's root file system: python's mmdebstrap, as root
        a = airlock_factory(env=env, prebuild="minimal,python", wait=False)
        running, took = stop_in_the_middle(a, lambda: re.search(r"template\.step rootfs python", log_text(a)) and
                                           harness.procs_naming("mmdebstrap"), ["mmdebstrap", "templates/python.sh"])
        assert running["mmdebstrap"], "mmdebstrap was not running"
        assert re.search(r"template\.step rootfs python \(pid \d+\): the node hung up; killing it", log_text(a)), \
            a.log_tail(60)
        print(f"stopped in python's rootfs step in {took:.1f} s")

        # a Dockerfile's RUN in its build VM
        a = airlock_factory(env=env, prebuild="minimal", wait=True)
        a.api("POST", "/v1/templates", {"dockerfile": "FROM minimal\nRUN sleep 600\n", "name": "slow"},
              expect=202)
        running, took = stop_in_the_middle(
            a, lambda: "sleep 600" in (a.api("GET", "/v1/templates/slow").get("step_text") or ""), ["qemu-system"])
        assert running["qemu-system"], "no build VM ran the RUN step"
        print(f"stopped in a Dockerfile's RUN in {took:.1f} s")

        # the control: the same directory builds on the next start
        a = airlock_factory(env=env, prebuild="minimal")
        sid = a.create("minimal")["id"]
        assert a.exec(sid, ["echo", "built"])["stdout"] == "built\n"
        a.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)
    finally:
        subprocess.run(["rm", "-rf", tpl])
