"""A fresh machine: `airlockd --check`, `airlock doctor`, the start-up
failures that must say what failed (port in use, not root, a newer data
dir, an unusable QEMU) and the progress lines of a start."""

import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from harness import AIRLOCKD, CLI, ROOT, VOLUME, free_port, node_pids, qemu_pids, volume_tempdir

ITEMS = ["user", "accel", "cpu", "storage", "cgroups", "namespaces", "qemu", "space", "format", "binaries", "api"]
LINE = re.compile(r"^(ok|warn|error) +(\S+) +(\S.*)$")


def parse_lines(text):
    """[(status, item, detail)] of a report; every line must be one."""
    rows = []
    for line in text.splitlines():
        m = LINE.match(line)
        assert m, f"not a report line: {line!r}"
        rows.append(m.groups())
    return rows


def run_airlockd(*args, env=None, timeout=60, **kw):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([AIRLOCKD, *args], capture_output=True, text=True, env=e, timeout=timeout, **kw)


def wait_log(a, needle, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(a.log_path, errors="replace") as f:
            text = f.read()
        if needle in text:
            return text
        if a.proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"{needle!r} never appeared in the log:\n{a.log_tail(80)}")


PROGRESS = re.compile(r"airlock: (building |still |template |error: |read |not ready|ready after|waiting ).*$")


def progress_lines(text):
    """airlockd's progress lines of a log. Each is one write, but the node
    writes its log lines in pieces, so one may start after a piece."""
    return [m.group(0) for m in map(PROGRESS.search, text.splitlines()) if m]


@pytest.fixture
def data_dir():
    d = volume_tempdir("airlock-doc-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_check_reports_every_item(data_dir):
    port = free_port()
    r = run_airlockd("--check", "--data-dir", data_dir, "--listen", f"127.0.0.1:{port}")
    rows = parse_lines(r.stdout)
    assert [item for _, item, _ in rows] == ITEMS, r.stdout
    has_error = any(status == "error" for status, _, _ in rows)
    assert r.returncode == (1 if has_error else 0), r.stdout + r.stderr
    # every warn/error line says what to do
    for status, item, detail in rows:
        if status != "ok":
            assert "; fix: " in detail, (item, detail)
    by_item = {item: (status, detail) for status, item, detail in rows}
    assert by_item["api"] == ("ok", f"127.0.0.1:{port} is free (no airlockd running there)")
    assert by_item["user"][0] == "ok" and by_item["user"][1].startswith("root")  # the suite runs as root
    assert by_item["storage"][0] == "ok" and "btrfs" in by_item["storage"][1]  # the test volume
    assert "QEMU " in by_item["qemu"][1]
    # the VMs' CPU: QEMU's max under TCG (these machines), the host's under
    # KVM (the KVM tier checks that line: tests/kvm/l1/test_kvm_node.py)
    want = "tcg: the VMs get QEMU's max CPU" if by_item["accel"][1].startswith("tcg") else "host ("
    assert by_item["cpu"][0] == "ok" and by_item["cpu"][1].startswith(want), by_item

    j = run_airlockd("--check", "--json", "--data-dir", data_dir, "--listen", f"127.0.0.1:{port}")
    report = json.loads(j.stdout)
    assert [e["item"] for e in report] == ITEMS
    assert all(set(e) == {"item", "status", "detail", "fix"} for e in report)
    assert all(e["status"] in ("ok", "warn", "error") for e in report)
    assert all((e["fix"] is None) == (e["status"] == "ok") for e in report)
    assert [(e["status"], e["item"]) for e in report] == [(s, i) for s, i, _ in rows]
    assert j.returncode == r.returncode
    # it only looked: no data dir contents were made
    assert os.listdir(data_dir) == []

    # --json belongs to --check
    r = run_airlockd("--json")
    assert r.returncode == 2 and "--json goes with --check" in r.stderr


def test_check_errors_exit_1(data_dir):
    """An error line makes the exit status 1: AIRLOCK_ACCEL=kvm on a
    machine without KVM, or a QEMU that is not there."""
    r = run_airlockd("--check", "--data-dir", data_dir, "--listen", f"127.0.0.1:{free_port()}",
                     env={"AIRLOCK_QEMU": "/nonexistent/qemu-system-x86_64"})
    rows = {item: (status, detail) for status, item, detail in parse_lines(r.stdout)}
    assert rows["qemu"][0] == "error" and "/nonexistent/qemu-system-x86_64 not found" in rows["qemu"][1]
    assert r.returncode == 1


def test_second_airlockd_on_a_used_port(airlock_factory, data_dir):
    first = airlock_factory(prebuild="minimal")
    second = os.path.join(data_dir, "second")
    t0 = time.monotonic()
    r = run_airlockd("--data-dir", second, "--listen", f"127.0.0.1:{first.port}", timeout=30)
    took = time.monotonic() - t0
    assert r.returncode != 0
    assert took < 10, took
    assert f"airlockd: error: cannot listen on 127.0.0.1:{first.port}" in r.stderr, r.stderr
    assert "stop it or use --listen HOST:PORT" in r.stderr
    # at most two lines: what failed and what to do
    assert len(r.stderr.strip().splitlines()) <= 2, r.stderr
    # nothing of it is left: no node, no VM, not even its data dir
    assert not os.path.exists(second)
    assert node_pids(second) == [] and qemu_pids(second) == []
    # the first one keeps serving
    assert first.request("GET", "/v1/health", auth=False)[0] == 200
    assert first.proc.poll() is None

    # the same for a port something else holds
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run_airlockd("--data-dir", second, "--listen", f"127.0.0.1:{port}", timeout=30)
    assert r.returncode != 0
    assert (f"airlockd: error: cannot listen on 127.0.0.1:{port}: address in use (another airlockd?); "
            "stop it or use --listen HOST:PORT") in r.stderr, r.stderr
    assert not os.path.exists(second)


def test_newer_data_dir_format_is_refused(data_dir):
    control = os.path.join(data_dir, "control")
    os.makedirs(control)
    with open(os.path.join(control, "format"), "w") as f:
        f.write("99\n")
    r = run_airlockd("--data-dir", data_dir, "--listen", f"127.0.0.1:{free_port()}", timeout=30)
    assert r.returncode != 0
    assert f"airlockd: error: data dir {data_dir} has format 99, newer than this airlockd" in r.stderr, r.stderr
    assert "another --data-dir" in r.stderr
    # nothing was touched: no store, no node storage
    assert sorted(os.listdir(data_dir)) == ["control"]
    assert os.listdir(control) == ["format"]
    # and the check says the same
    c = run_airlockd("--check", "--data-dir", data_dir, "--listen", f"127.0.0.1:{free_port()}")
    rows = {item: (status, detail) for status, item, detail in parse_lines(c.stdout)}
    assert rows["format"][0] == "error" and "format 99" in rows["format"][1]
    assert c.returncode == 1


def test_a_start_writes_the_format(airlock_factory):
    a = airlock_factory(prebuild="minimal")
    with open(os.path.join(a.data_dir, "control", "format")) as f:
        assert f.read() == "1\n"


def test_start_refusals_name_the_cause(data_dir, tmp_path):
    """Not root, a missing QEMU, a QEMU older than 7.2: one clear error
    each, before anything is made."""
    target = os.path.join(data_dir, "d")
    nobody = pwd.getpwnam("nobody")

    def drop():
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)

    r = run_airlockd("--data-dir", target, "--listen", f"127.0.0.1:{free_port()}", preexec_fn=drop, timeout=30)
    assert r.returncode != 0
    assert "not root: airlockd must start as root" in r.stderr and "sudo" in r.stderr, r.stderr

    r = run_airlockd("--data-dir", target, "--listen", f"127.0.0.1:{free_port()}", timeout=30,
                     env={"AIRLOCK_QEMU": "/nonexistent/qemu"})
    assert r.returncode != 0
    assert "airlockd: error: QEMU /nonexistent/qemu not found" in r.stderr, r.stderr

    old = tmp_path / "qemu-old"
    old.write_text("#!/bin/sh\necho 'QEMU emulator version 6.2.0 (Debian 1:6.2+dfsg-2ubuntu6)'\n")
    old.chmod(0o755)
    r = run_airlockd("--data-dir", target, "--listen", f"127.0.0.1:{free_port()}", timeout=30,
                     env={"AIRLOCK_QEMU": str(old)})
    assert r.returncode != 0
    assert f"airlockd: error: {old} is QEMU 6.2.0, older than 7.2" in r.stderr, r.stderr
    assert not os.path.exists(target)


def test_doctor_against_a_running_instance(airlock_factory):
    a = airlock_factory(prebuild="minimal")
    r = a.cli("doctor")
    rows = parse_lines(r.stdout.decode())
    by_item = {item: (status, detail) for status, item, detail in rows}
    # the host lines are airlockd's checks, the API lines the CLI's own
    assert [i for _, i, _ in rows] == ITEMS[:-1] + ["api", "node", "templates", "token"], r.stdout
    assert by_item["api"] == ("ok", f"airlockd answers at {a.url} (GET /v1/health: 200)")
    assert by_item["node"][0] == "ok" and by_item["node"][1].startswith("reachable; accel ")
    assert "; VM CPU tcg:max" in by_item["node"][1] or "; VM CPU kvm:" in by_item["node"][1], by_item["node"]
    assert by_item["templates"] == ("ok", "ready: minimal")
    assert by_item["token"][0] == "ok" and "minimal ready" in by_item["token"][1]
    assert by_item["format"] == ("ok", f"data dir {a.data_dir}: format 1")
    has_error = any(s == "error" for s, _, _ in rows)
    assert r.returncode == (1 if has_error else 0), r.stdout + r.stderr

    j = a.cli("doctor", "--json")
    report = json.loads(j.stdout)
    assert [(e["status"], e["item"]) for e in report] == [(s, i) for s, i, _ in rows]
    assert j.returncode == r.returncode

    # the check itself sees the running airlockd on its port
    c = run_airlockd("--check", "--data-dir", a.data_dir, "--listen", f"127.0.0.1:{a.port}")
    api = [row for row in parse_lines(c.stdout) if row[1] == "api"]
    assert api[0][0] == "ok" and f"airlockd answers on 127.0.0.1:{a.port}: ready" in api[0][2]

    # nothing answering: the api line says so, and doctor fails
    env = dict(os.environ, AIRLOCK_URL=f"http://127.0.0.1:{free_port()}", AIRLOCK_DATA_DIR=a.data_dir)
    n = subprocess.run([CLI, "doctor"], capture_output=True, text=True, env=env, timeout=120)
    api = [row for row in parse_lines(n.stdout) if row[1] == "api"]
    assert api[0][0] == "error" and "cannot reach airlockd" in api[0][2] and "; fix: start airlockd" in api[0][2]
    assert n.returncode == 1


def test_start_prints_ready_with_lines_to_paste(airlock_factory):
    a = airlock_factory(prebuild="minimal")
    text = wait_log(a, "airlock: ready after")
    ready = text[text.index("airlock: ready after"):].splitlines()
    assert re.match(r"airlock: ready after [0-9.hms]+ — try:$", ready[0]), ready[0]
    assert f"AIRLOCK_URL={a.url} AIRLOCK_DATA_DIR={a.data_dir}" in ready[1]
    assert "sbx=$(airlock create --template minimal) && airlock exec $sbx -- uname -a" in ready[2]
    assert f"{a.data_dir}/control/admin.token" in ready[3] and f"{a.url}/v1/sandboxes" in ready[3]
    # pasted, the CLI line works
    env = dict(os.environ, AIRLOCK_URL=a.url, AIRLOCK_DATA_DIR=a.data_dir,
               PATH=os.path.dirname(CLI) + ":" + os.environ["PATH"])
    p = subprocess.run(["sh", "-c", ready[2].strip() + ' && airlock rm "$sbx"'], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0 and "Linux" in p.stdout, p.stdout + p.stderr


@pytest.fixture
def slow_broken_images():
    """The images with a recipe that takes a few seconds, then fails the
    way a broken install does (readable to the node's user)."""
    top = volume_tempdir("images-")
    os.chmod(top, 0o755)
    images = os.path.join(top, "images")
    shutil.copytree(os.path.join(ROOT, "images"), images)
    with open(os.path.join(images, "templates", "slowfail.sh"), "w") as f:
        f.write("#!/bin/bash\nsleep 8\necho 'slowfail.sh: E: Unable to locate package nope' >&2\nexit 3\n")
    yield images
    shutil.rmtree(top)


def test_start_progress_of_a_failing_build(airlock_factory, slow_broken_images):
    a = airlock_factory(prebuild="minimal,slowfail", env={"AIRLOCK_IMAGES_DIR": slow_broken_images}, wait=False)
    wait_log(a, "airlock: building template slowfail: step 3/4 rootfs", timeout=300)
    # meanwhile (the step takes 8 s) doctor says it builds, a warning
    r = a.cli("doctor")
    rows = {item: (status, detail) for status, item, detail in parse_lines(r.stdout.decode())}
    assert rows["templates"][0] == "warn", rows["templates"]
    assert rows["templates"][1].startswith("slowfail building: step 3/4 rootfs ("), rows["templates"]

    text = wait_log(a, "airlock: not ready: template slowfail failed", timeout=300)
    lines = progress_lines(text)
    # the step it was at, with the log to read while it runs
    building = [l for l in lines if l.startswith("airlock: building template slowfail: step 3/4 rootfs (")]
    assert building and "elapsed; log /" in building[0], lines
    # the failure: why, the kept build log, and what to do
    err = [l for l in lines if l.startswith("airlock: error: template slowfail failed: ")]
    assert len(err) == 1, lines
    log = err[0].rsplit("; build log ", 1)[1]
    with open(log) as f:
        assert "Unable to locate package nope" in f.read()
    assert any("restart airlockd, or create a slowfail sandbox" in l for l in lines), lines
    assert lines.index(building[0]) < lines.index(err[0])
    # one line per change: no repeats, no ready line
    assert len(lines) == len(set(lines)) and len(lines) <= 10, lines
    assert not any("ready after" in l for l in lines)

    # doctor and the check say the same, with the log, and exit 1
    r = a.cli("doctor")
    rows = {item: (status, detail) for status, item, detail in parse_lines(r.stdout.decode())}
    assert rows["api"][0] == "ok" and rows["node"][0] == "ok", rows
    assert rows["templates"][0] == "error" and "slowfail failed: " in rows["templates"][1], rows["templates"]
    assert log in rows["templates"][1] and "ready: minimal" in rows["templates"][1]
    assert r.returncode == 1
    c = run_airlockd("--check", "--data-dir", a.data_dir, "--listen", f"127.0.0.1:{a.port}")
    api = {item: (status, detail) for status, item, detail in parse_lines(c.stdout)}["api"]
    assert api[0] == "error" and "template slowfail failed" in api[1] and log in api[1], api
    assert c.returncode == 1
