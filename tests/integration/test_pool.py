"""Warm pools: pre-restored, paused VMs per prebuilt template that a create
claims instead of restoring cold (docs/architecture.md, "Warm pools")."""

import os
import pathlib
import shutil
import signal
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import qemu_pids, volume_tempdir, wait_for


def pool_of(a, name):
    tpls = {t["name"]: t for t in a.api("GET", "/v1/templates")["templates"]}
    return tpls[name]["pool"]


def wait_pool_ready(a, name, want, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pool_of(a, name)["ready"] == want:
            return
        time.sleep(0.2)
    raise TimeoutError(f"pool of {name} not at {want} ready: {pool_of(a, name)}\n{a.log_tail()}")


def run_and_delete(a, made):
    """Each sandbox of made runs a command, then is deleted."""
    for m in made:
        assert a.exec(m["id"], ["true"])["exit_code"] == 0
        assert a.request("DELETE", f"/v1/sandboxes/{m['id']}")[0] == 204


def pool_qemus(a):
    """QEMUs of warm VMs still waiting in the pool: their disk link (the
    run dir's disk.img) points under STORAGE_ROOT/pool/ until a create
    claims them and repoints it."""
    out = []
    for pid in qemu_pids(a.data_dir):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        for arg in argv:
            if arg.startswith("id=d0,file="):
                path = arg[len("id=d0,file="):].split(",")[0]
                try:
                    if "/pool/" in os.readlink(path):
                        out.append(pid)
                except OSError:
                    pass
    return out


@pytest.fixture
def refill_switch():
    """A file that, while it exists, lets the node refill its pools (the
    hold point pool.refill), where the node's user can see it."""
    d = volume_tempdir("pool-hold-", 0o755)
    path = pathlib.Path(d, "refill")
    path.touch()
    yield path
    shutil.rmtree(d)


def test_pool_hits_refills_and_replaces_dead_vms(refill_switch, airlock_factory):
    release = refill_switch
    # POOL_MAX = POOL_SIZE: a pool that stays at 2 whatever the demand
    # (test_pool_follows_demand has the one that grows)
    a = airlock_factory(env={"AIRLOCK_POOL_SIZE": "2", "AIRLOCK_POOL_MAX": "2", "AIRLOCK_TEST_HOLD": "pool.refill",
                             "AIRLOCK_TEST_HOLD_RELEASE": str(release)}, prebuild="minimal")
    wait_pool_ready(a, "minimal", 2)
    assert pool_of(a, "minimal")["size"] == 2
    assert pool_of(a, "python") == {"size": 0, "ready": 0}  # not prebuilt here
    assert len(pool_qemus(a)) == 2

    s1 = a.create("minimal")
    assert s1["pool"] == "hit", s1
    assert isinstance(s1["restore_ms"], int)
    assert a.exec(s1["id"], ["echo", "hi"])["stdout"] == "hi\n"
    s2 = a.create("minimal", env={"POOL_TEST": "second"})
    assert s2["pool"] == "hit", s2

    # each claimed VM got its own identity: hostname and random state
    rand = ["sh", "-c", "head -c 32 /dev/urandom | od -An -tx1"]
    r1, r2 = a.exec(s1["id"], rand)["stdout"], a.exec(s2["id"], rand)["stdout"]
    assert r1.strip() and r1 != r2
    assert a.exec(s1["id"], ["hostname"])["stdout"].strip() == s1["id"]
    assert a.exec(s2["id"], ["hostname"])["stdout"].strip() == s2["id"]
    # and nothing is left of the identity the warm VM rehearsed its claim
    # with: the files that name the sandbox, its env and the clock are the
    # claim's own
    for s in (s1, s2):
        names = a.exec(s["id"], ["cat", "/etc/hostname", "/run/airlock/sandbox-id"])["stdout"].split()
        assert names == [s["id"], s["id"]], names
        guest_now = int(a.exec(s["id"], ["date", "+%s"])["stdout"])
        assert abs(guest_now - time.time()) < 5, (guest_now, time.time())
    env = a.exec(s2["id"], ["sh", "-c", "echo ${POOL_TEST:-unset}"])["stdout"].strip()
    assert env == "second", env
    assert a.exec(s1["id"], ["sh", "-c", "echo ${POOL_TEST:-unset}"])["stdout"].strip() == "unset"

    # the pool refills in the background
    wait_pool_ready(a, "minimal", 2)
    for s in (s1, s2):
        assert a.request("DELETE", f"/v1/sandboxes/{s['id']}")[0] == 204
        assert not os.path.exists(os.path.join(a.data_dir, "sandboxes", s["id"]))

    # a warm VM whose QEMU dies is removed and replaced
    pids = pool_qemus(a)
    assert len(pids) == 2, pids
    os.kill(pids[0], signal.SIGKILL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        now = pool_qemus(a)
        if pids[0] not in now and len(now) == 2 and pool_of(a, "minimal")["ready"] == 2:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"dead warm VM not replaced: {pool_qemus(a)} {pool_of(a, 'minimal')}")
    pool_dirs = os.listdir(os.path.join(a.data_dir, "pool"))
    assert len(pool_dirs) == 2, pool_dirs

    # a miss still works: with refills held, the third create finds the
    # pool empty and restores cold
    release.unlink()
    try:
        made = [a.create("minimal") for _ in range(3)]
        assert [m["pool"] for m in made] == ["hit", "hit", "miss"], made
        run_and_delete(a, made)
    finally:
        release.touch()
    wait_pool_ready(a, "minimal", 2)

    # shutdown destroys the pool: no QEMU (checked by the harness) and no dir
    a.stop()
    assert pool_qemus(a) == []
    assert not os.path.exists(os.path.join(a.data_dir, "pool"))


def pools_entry(a, name):
    return next(p for p in a.api("GET", "/v1/pools")["pools"] if p["template"] == name)


def held_refills(a):
    """Refills now held at the hold point pool.refill.done (the node logs
    each arrival and each release)."""
    with open(a.log_path, errors="replace") as f:
        text = f.read()
    return (text.count("test hold point pool.refill.done reached")
            - text.count("test hold point pool.refill.done released"))


def metric(a, name, **labels):
    """One sample of the node's metrics as airlockd serves them (the admin
    token scrapes too)."""
    for fam in text_string_to_metric_families(a.request("GET", "/metrics")[2].decode()):
        for s in fam.samples:
            if s.name == name and s.labels == dict(labels, node="local"):
                return s.value
    return None


def test_pool_follows_demand_and_a_miss_waits_for_a_refill_in_flight(refill_switch, airlock_factory):
    release = refill_switch
    a = airlock_factory(env={"AIRLOCK_POOL_SIZE": "1", "AIRLOCK_POOL_MAX": "3",
                             "AIRLOCK_TEST_HOLD": "pool.refill.done", "AIRLOCK_TEST_HOLD_RELEASE": str(release)},
                        prebuild="minimal")
    wait_pool_ready(a, "minimal", 1)
    p = pools_entry(a, "minimal")
    assert (p["target"], p["size"], p["max"], p["recent_claims"], p["recent_hit_pct"]) == (1, 1, 3, 0, None), p
    assert metric(a, "airlock_pool_target", template="minimal") == 1

    # a burst of 4 creates: the pool grows to the most that came within
    # 10 s, up to its max, and stays there
    made = [a.create("minimal") for _ in range(4)]
    p = pools_entry(a, "minimal")
    assert (p["target"], p["recent_claims"]) == (3, 4), p
    assert made[0]["pool"] == "hit" and p["hits"] + p["misses"] == 4, (made, p)
    wait_for(lambda: pools_entry(a, "minimal")["ready"] == 3, "the pool grown to 3 warm VMs", a)
    assert len(pool_qemus(a)) == 3
    assert metric(a, "airlock_pool_target", template="minimal") == 3
    assert metric(a, "airlock_pool_ready", template="minimal") == 3
    assert pool_of(a, "minimal") == {"size": 3, "ready": 3}
    out = a.cli("pools")
    assert out.returncode == 0, out
    lines = out.stdout.decode().splitlines()
    assert lines[0].split() == ["TEMPLATE", "BUILD", "TARGET", "MAX", "READY", "STARTING", "HITS", "MISSES", "HIT_PCT"]
    row = lines[1].split()
    assert row[0] == "minimal" and row[2:5] == ["3", "3", "3"], lines
    for m in made:
        assert a.request("DELETE", f"/v1/sandboxes/{m['id']}")[0] == 204

    # refills held once restored (in flight, not yet handed in): the pool
    # is emptied, and the next create waits for a refill rather than
    # restoring cold
    release.unlink()
    try:
        made = [a.create("minimal") for _ in range(3)]
        assert [m["pool"] for m in made] == ["hit"] * 3, made
        wait_for(lambda: held_refills(a) >= 1, "a refill restored and held", a)
        before = pools_entry(a, "minimal")
        assert before["ready"] == 0 and before["starting"] >= 1, before
        got = {}
        t = threading.Thread(target=lambda: got.update(s=a.create("minimal")))
        t.start()
        # the create is waiting for the refill in flight: let it in
        deadline = time.monotonic() + 30
        while pools_entry(a, "minimal")["waiting"] != 1:
            assert t.is_alive() and time.monotonic() < deadline, (got, pools_entry(a, "minimal"), a.log_tail())
            time.sleep(0.01)
        release.touch()
        t.join(60)
        assert got["s"]["pool"] == "hit", got
        after = pools_entry(a, "minimal")
        assert after["waited"] == before["waited"] + 1 and after["misses"] == before["misses"], (before, after)
        assert metric(a, "airlock_pool_claims_total", template="minimal", outcome="waited") == after["waited"]
        made.append(got["s"])
        run_and_delete(a, made)
    finally:
        release.touch()
    wait_pool_ready(a, "minimal", 3)


def test_pool_size_zero_starts_no_vm(airlock_factory):
    a = airlock_factory(env={"AIRLOCK_POOL_SIZE": "0"}, prebuild="minimal")
    assert pool_of(a, "minimal") == {"size": 0, "ready": 0}
    assert qemu_pids(a.data_dir) == []
    s = a.create("minimal")
    assert s["pool"] == "miss"
    assert a.request("DELETE", f"/v1/sandboxes/{s['id']}")[0] == 204
