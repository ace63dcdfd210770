"""Warm pools: pre-restored, paused VMs per prebuilt template that a create
claims instead of restoring cold (docs/architecture.md, "Warm pools")."""

import os
import pathlib
import shutil
import signal
import time

import pytest

from harness import qemu_pids, volume_tempdir


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
    a = airlock_factory(env={"AIRLOCK_POOL_SIZE": "2", "AIRLOCK_TEST_HOLD": "pool.refill",
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
        for m in made:
            assert a.exec(m["id"], ["true"])["exit_code"] == 0
            assert a.request("DELETE", f"/v1/sandboxes/{m['id']}")[0] == 204
    finally:
        release.touch()
    wait_pool_ready(a, "minimal", 2)

    # shutdown destroys the pool: no QEMU (checked by the harness) and no dir
    a.stop()
    assert pool_qemus(a) == []
    assert not os.path.exists(os.path.join(a.data_dir, "pool"))


def test_pool_size_zero_starts_no_vm(airlock_factory):
    a = airlock_factory(env={"AIRLOCK_POOL_SIZE": "0"}, prebuild="minimal")
    assert pool_of(a, "minimal") == {"size": 0, "ready": 0}
    assert qemu_pids(a.data_dir) == []
    s = a.create("minimal")
    assert s["pool"] == "miss"
    assert a.request("DELETE", f"/v1/sandboxes/{s['id']}")[0] == 204
