"""The `airlock` CLI against a real Airlock: the tour from the README."""

import json
import os


def test_cli_tour(airlock, tmp_path):
    r = airlock.cli("create", "--template", "minimal")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.decode().strip()
    assert sid.startswith("sbx-")

    r = airlock.cli("exec", sid, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert r.returncode == 7
    assert r.stdout == b"out\n" and r.stderr == b"err\n"

    local = tmp_path / "in.bin"
    payload = os.urandom(300000)
    local.write_bytes(payload)
    assert airlock.cli("cp", str(local), f"{sid}:/root/in.bin").returncode == 0
    out = tmp_path / "out.bin"
    assert airlock.cli("cp", f"{sid}:/root/in.bin", str(out)).returncode == 0
    assert out.read_bytes() == payload
    r = airlock.cli("cp", f"{sid}:/root/in.bin", "-")
    assert r.returncode == 0 and r.stdout == payload

    r = airlock.cli("exec", "-i", sid, "--", "cat", input=b"through stdin")
    assert r.returncode == 0 and r.stdout == b"through stdin"

    r = airlock.cli("ls", "--json")
    assert r.returncode == 0
    assert [s["id"] for s in json.loads(r.stdout)["sandboxes"]] == [sid]
    r = airlock.cli("ls")
    assert sid.encode() in r.stdout and b"running" in r.stdout

    r = airlock.cli("exec", "--json", sid, "--", "echo", "hi")
    assert json.loads(r.stdout)["stdout"] == "hi\n"

    r = airlock.cli("exec", "sbx-0000000000000000", "--", "true")
    assert r.returncode != 0 and b"not" in r.stderr.lower()

    assert airlock.cli("rm", sid).returncode == 0
    assert json.loads(airlock.cli("ls", "--json").stdout)["sandboxes"] == []


def test_cli_python_default(airlock):
    r = airlock.cli("create")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.decode().strip()
    r = airlock.cli("exec", sid, "--", "python3", "-c", "print(6*7)")
    assert r.returncode == 0 and r.stdout == b"42\n"
    assert airlock.cli("rm", sid).returncode == 0


def test_cli_events_usage_and_size(airlock):
    """`airlock events` follows what happens to sandboxes (here replayed
    with --after from before the first); `airlock usage` shows what one
    uses; `create --memory-mib` makes one smaller than its template."""
    r = airlock.cli("create", "--template", "minimal", "--memory-mib", "128", "--json")
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)
    sid = made["id"]
    assert made["memory_mib"] == 128
    assert airlock.cli("pause", sid).returncode == 0
    assert airlock.cli("resume", sid).returncode == 0

    r = airlock.cli("events", "--sandbox", sid, "--after", "0", "--count", "3", timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert [line.split()[1] for line in lines] == ["sandbox.created", "sandbox.paused", "sandbox.resumed"], lines
    assert all(sid in line for line in lines)
    r = airlock.cli("events", "--json", "--sandbox", sid, "--after", "0", "--count", "1", timeout=60)
    assert json.loads(r.stdout)["type"] == "sandbox.created"

    r = airlock.cli("usage", sid)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "now" in out and "MiB" in out and "guest:" in out, out
    assert json.loads(airlock.cli("usage", "--json", sid).stdout)["sandbox_id"] == sid
    r = airlock.cli("create", "--template", "minimal", "--memory-mib", "4096")
    assert r.returncode != 0 and b"more than template minimal has" in r.stderr, r.stderr
    assert airlock.cli("rm", sid).returncode == 0
