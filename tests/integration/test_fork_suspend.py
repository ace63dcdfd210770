"""Full snapshots, rollback to a running point, fork, suspend and wake:
memory, processes and disk come back exactly as they were."""

import json
import os
import shutil
import signal
import tempfile
import time

import pytest

from harness import START_TIMEOUT, Airlock, node_pids, qemu_pids, wait_for
from test_recovery import alive_in_guest, start_sleeper, wait_state


def verb(a, sid, name, body=None, expect=200):
    op = a.api("POST", f"/v1/sandboxes/{sid}/{name}?wait=true", body, expect=expect)
    return op


def test_full_snapshot_and_rollback_to_running_point(airlock):
    a = airlock
    sid = a.create("minimal")["id"]
    a.exec(sid, ["sh", "-c", "echo one > /root/f"])  # not synced: the snapshot has the page cache
    sleeper = start_sleeper(a, sid)
    snap = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"}, expect=201)
    assert snap["kind"] == "full"
    assert snap["pause_ms"] >= 0 and snap["size"] > 0
    a.exec(sid, ["sh", "-c", f"echo two > /root/f; kill {sleeper}"])
    assert not alive_in_guest(a, sid, sleeper)

    op = verb(a, sid, "rollback", {"snapshot": snap["id"]})
    assert op["state"] == "succeeded", op
    sbx = a.api("GET", f"/v1/sandboxes/{sid}")
    assert sbx["state"] == "running" and sbx["execution"] == 2
    assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "one\n"
    assert alive_in_guest(a, sid, sleeper)  # resumed at the running point
    assert a.exec(sid, ["hostname"])["stdout"].strip() == sid
    kinds = {s["id"]: s["kind"] for s in a.api("GET", f"/v1/sandboxes/{sid}/snapshots")["snapshots"]}
    assert kinds[snap["id"]] == "full"
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_fork_children_diverge(airlock):
    a = airlock
    parent = a.create("minimal", env={"FROM": "parent"})["id"]
    a.exec(parent, ["sh", "-c", "echo shared > /root/f"])
    sleeper = start_sleeper(a, parent)
    op = verb(a, parent, "fork")
    assert op["state"] == "succeeded", op
    child = op["result"]["sandbox"]["id"]
    assert child != parent
    assert op["result"]["parent_pause_ms"] >= 0
    assert a.api("GET", f"/v1/sandboxes/{parent}")["state"] == "running"
    sbx = a.api("GET", f"/v1/sandboxes/{child}")
    assert sbx["state"] == "running" and sbx["template"] == "minimal"

    # the child has the parent's memory, disk and processes, its own identity
    assert a.exec(child, ["cat", "/root/f"])["stdout"] == "shared\n"
    assert alive_in_guest(a, child, sleeper)
    assert a.exec(child, ["hostname"])["stdout"].strip() == child
    assert a.exec(child, ["sh", "-c", "echo $FROM"])["stdout"] == "parent\n"
    # and from here they diverge
    a.exec(child, ["sh", "-c", "echo child > /root/f"])
    a.exec(parent, ["sh", "-c", "echo parent > /root/f"])
    assert a.exec(child, ["cat", "/root/f"])["stdout"] == "child\n"
    assert a.exec(parent, ["cat", "/root/f"])["stdout"] == "parent\n"
    seeds = {a.exec(s, ["sh", "-c", "head -c 16 /dev/urandom | od -An -tx1"])["stdout"] for s in (parent, child)}
    assert len(seeds) == 2
    assert len(qemu_pids(child)) == 1

    # a paused parent can be forked and stays paused
    verb(a, parent, "pause")
    op = verb(a, parent, "fork")
    assert op["state"] == "succeeded", op
    child2 = op["result"]["sandbox"]["id"]
    assert a.api("GET", f"/v1/sandboxes/{parent}")["state"] == "paused"
    assert a.exec(child2, ["cat", "/root/f"])["stdout"] == "parent\n"
    for s in (parent, child, child2):
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204


def vm_memory_stat(pid):
    """memory.stat of the memory cgroup QEMU pid runs in (v1 or v2)."""
    with open(f"/proc/{pid}/cgroup") as f:
        lines = [l.rstrip("\n").split(":", 2) for l in f]
    path = next((f"/sys/fs/cgroup/memory{p}" for _, ctl, p in lines if "memory" in ctl.split(",")), None)
    path = path or next(f"/sys/fs/cgroup{p}" for n, ctl, p in lines if n == "0" and ctl == "")
    with open(f"{path}/memory.stat") as f:
        return {k: int(v) for k, v in (l.split() for l in f)}


def test_first_fork_charges_no_template_ram_to_the_vm(airlock_factory):
    """The first migration of any VM of a template (a fork here) reads all
    of its RAM, the holes of the template's RAM too. Those pages are the
    node's copy of the template RAM, made whole when the copy is made: not
    allocated inside the fork's pause, and not charged to the cgroup of the
    VM that happened to read them first (which the kernel OOM-killed for
    them on a 1 GiB template)."""
    a = airlock_factory(env={"AIRLOCK_POOL_SIZE": "0"}, prebuild="minimal")
    sid = a.create("minimal")["id"]  # the node's first VM of the template
    [pid] = qemu_pids(sid)
    assert vm_memory_stat(pid)["shmem"] < 8 << 20
    op = verb(a, sid, "fork")
    assert op["state"] == "succeeded", op
    child = op["result"]["sandbox"]["id"]
    # the parent read all of its 256 MiB, most of it holes of the template
    assert vm_memory_stat(pid)["shmem"] < 8 << 20, vm_memory_stat(pid)
    for s in (sid, child):
        assert a.exec(s, ["true"])["exit_code"] == 0
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204


def test_suspend_wake_transparently(airlock):
    a = airlock
    sid = a.create("minimal")["id"]
    a.exec(sid, ["sh", "-c", "echo kept > /root/f"])
    sleeper = start_sleeper(a, sid)
    op = verb(a, sid, "suspend")
    assert op["state"] == "succeeded", op
    assert op["result"]["state"] == "suspended"
    assert a.api("GET", f"/v1/sandboxes/{sid}")["state"] == "suspended"
    # every node resource released: the node keeps only the snapshot
    assert qemu_pids(sid) == []
    assert sorted(os.listdir(os.path.join(a.data_dir, "sandboxes", sid))) == ["parked.json", "suspend"]
    # restorable on another node once its upload landed, which the node
    # says (and a manifest is what any node restores from)
    wait_for(lambda: a.api("GET", f"/v1/sandboxes/{sid}")["image_uploaded"], "the image never landed", a)
    assert len(manifests(a)) == 1
    listed = {s["id"]: s["state"] for s in a.api("GET", "/v1/sandboxes")["sandboxes"]}
    assert listed[sid] == "suspended"
    # illegal verbs on a suspended sandbox name its state
    status, _, body = a.request("POST", f"/v1/sandboxes/{sid}/pause")
    assert status == 409 and b"suspended" in body

    # an exec wakes it first, transparently
    assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "kept\n"
    sbx = a.api("GET", f"/v1/sandboxes/{sid}")
    assert sbx["state"] == "running" and sbx["execution"] == 2
    assert alive_in_guest(a, sid, sleeper)
    assert a.exec(sid, ["hostname"])["stdout"].strip() == sid

    # explicit verbs too; and a suspended sandbox can be deleted
    assert verb(a, sid, "suspend")["state"] == "succeeded"
    assert verb(a, sid, "wake")["state"] == "succeeded"
    assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "kept\n"
    assert verb(a, sid, "suspend")["state"] == "succeeded"
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    assert manifests(a) == []
    assert not os.path.exists(os.path.join(a.data_dir, "sandboxes", sid))


def manifests(a):
    """The snapshots any node could restore from the object store."""
    objstore = os.path.join(a.data_dir, "objstore")
    return [d for d, _, fs in os.walk(objstore) for f in fs if f == "manifest.json"]


# The steps of a suspend, in order, where AIRLOCK_TEST_HOLD stops the node
# for good (src/node/sandbox-suspend.c, -parked.c): its snapshot is whole; its VM is
# stopped; then, after the suspend answered, half its upload has landed;
# the upload and its manifest have.
SUSPEND_STEPS = ["suspend.snapshot", "suspend.vm-stopped", "suspend.uploading", "suspend.uploaded"]


@pytest.mark.parametrize("step", SUSPEND_STEPS)
def test_node_killed_during_suspend_loses_nothing(airlock_factory, step):
    """Killed at each step of a suspend, the node that starts next brings
    the sandbox back as it was, with a write it had acknowledged before the
    suspend (still only in the guest's page cache) and its processes:
    running when the suspend had not released its VM yet, suspended (its
    upload resumed by the new node) when it had."""
    release = tempfile.mktemp(prefix="release-", dir=os.environ["AIRLOCK_TEST_VOLUME"])
    a = airlock_factory(prebuild="minimal", env={"AIRLOCK_TEST_HOLD": step, "AIRLOCK_TEST_HOLD_RELEASE": release})
    try:
        sid = a.create("minimal")["id"]
        assert a.exec(sid, ["sh", "-c", "echo safe > /root/f"])["exit_code"] == 0  # no sync
        sleeper = int(a.exec(sid, ["sh", "-c", "sleep 100000 >/dev/null 2>&1 & echo $!"])["stdout"])
        old = node_pids(a.data_dir)
        status, _, _ = a.request("POST", f"/v1/sandboxes/{sid}/suspend")
        assert status == 202
        try:
            wait_for(lambda: f"test hold point {step} reached" in a.log_tail(400), f"the node never reached {step}",
                     a)
        finally:
            os.kill(old[0], signal.SIGKILL)  # also when it failed: a held node never stops by itself
            open(release, "w").close()  # the next node passes the point
        wait_for(lambda: (new := node_pids(a.data_dir)) and new != old and
                 a.request("GET", "/v1/health", auth=False)[0] == 200, "no new node", a)
        released = step.startswith("suspend.upload")
        if released:
            # suspended, and the new node uploads what the old one did not
            wait_for(lambda: (x := a.api("GET", f"/v1/sandboxes/{sid}"))["state"] == "suspended" and
                     x.get("image_uploaded"), "the new node did not finish the upload", a)
            assert len(manifests(a)) == 1
            assert qemu_pids(sid) == []
            assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "safe\n"  # wakes it
        sbx = wait_for(lambda: (x := a.api("GET", f"/v1/sandboxes/{sid}"))["state"] == "running" and x,
                       "the sandbox did not come back running", a)
        # the same VM where it still ran, else its snapshot resumed: either way
        # its processes are there, and so is the write
        assert sbx["execution"] == (1 if step == "suspend.snapshot" else 2), sbx
        assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "safe\n"
        assert a.exec(sid, ["sh", "-c", f"kill -0 {sleeper} && echo alive"])["stdout"] == "alive\n"
        # nothing restorable or half-uploaded is left of the suspend: the
        # sandbox runs here
        tmp = os.path.join(a.data_dir, "objstore", ".tmp")
        assert not os.path.exists(tmp) or os.listdir(tmp) == []
        assert manifests(a) == []
        assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    finally:
        if os.path.exists(release):
            os.unlink(release)


def test_idle_sandboxes_are_suspended(airlock_factory):
    a = airlock_factory(env={"AIRLOCK_IDLE_CHECK_MS": "500"}, prebuild="minimal")
    idle = a.create("minimal", idle_timeout_s=3)["id"]
    busy = a.create("minimal", idle_timeout_s=3)["id"]
    never = a.create("minimal", idle_timeout_s=0)["id"]
    assert a.api("GET", f"/v1/sandboxes/{idle}")["idle_timeout_s"] == 3
    status, _, body = a.request("POST", "/v1/sandboxes", {"template": "minimal", "idle_timeout_s": -1})
    assert status == 400 and b"idle_timeout_s" in body

    # A woken sandbox is a new execution: busy's must not change, or an
    # exec that woke it would pass for one that kept it awake.
    executions = {s: a.api("GET", f"/v1/sandboxes/{s}")["execution"] for s in (idle, busy, never)}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert a.exec(busy, ["true"])["exit_code"] == 0  # API use is activity
        if a.api("GET", f"/v1/sandboxes/{idle}")["state"] == "suspended":
            break
        time.sleep(0.5)
    assert a.api("GET", f"/v1/sandboxes/{idle}")["state"] == "suspended", a.log_tail(80)
    sbx = a.api("GET", f"/v1/sandboxes/{busy}")
    assert sbx["state"] == "running" and sbx["execution"] == executions[busy], (sbx, executions)
    sbx = a.api("GET", f"/v1/sandboxes/{never}")
    assert sbx["state"] == "running" and sbx["execution"] == executions[never], (sbx, executions)
    # the next request wakes it, as a new execution
    assert a.exec(idle, ["echo", "back"])["stdout"] == "back\n"
    sbx = a.api("GET", f"/v1/sandboxes/{idle}")
    assert sbx["state"] == "running" and sbx["execution"] > executions[idle], (sbx, executions)
    for s in (idle, busy, never):
        # idle again by now, one may be being suspended: a delete waits its turn
        deadline = time.monotonic() + 60
        while (status := a.request("DELETE", f"/v1/sandboxes/{s}")[0]) == 409 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert status == 204


def test_cli_full_snapshot_fork_suspend_wake(airlock):
    a = airlock
    sid = a.create("minimal")["id"]
    out = a.cli("snapshot", "--full", sid)
    assert out.returncode == 0, out.stderr
    snap = out.stdout.decode().strip()
    kinds = {s["id"]: s["kind"] for s in a.api("GET", f"/v1/sandboxes/{sid}/snapshots")["snapshots"]}
    assert kinds[snap] == "full"
    out = a.cli("fork", sid)
    assert out.returncode == 0, out.stderr
    child = out.stdout.decode().strip()
    assert child.startswith("sbx-") and child != sid
    assert a.api("GET", f"/v1/sandboxes/{child}")["state"] == "running"
    assert a.cli("suspend", sid).returncode == 0
    assert a.api("GET", f"/v1/sandboxes/{sid}")["state"] == "suspended"
    out = a.cli("pause", sid)
    assert out.returncode == 1 and b"suspended" in out.stderr
    assert a.cli("wake", sid).returncode == 0
    assert a.api("GET", f"/v1/sandboxes/{sid}")["state"] == "running"
    for s in (sid, child):
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204


def test_snapshots_survive_suspend_and_wake(airlock):
    a = airlock
    sid = a.create("minimal")["id"]
    a.exec(sid, ["sh", "-c", "echo first > /root/f"])
    full = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"}, expect=201)["id"]
    a.exec(sid, ["sh", "-c", "echo second > /root/f; sync"])
    disk = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "disk"}, expect=201)["id"]
    assert verb(a, sid, "suspend")["state"] == "succeeded"
    assert qemu_pids(sid) == []
    # only the snapshots and the suspended copy stay on the node
    left = os.listdir(os.path.join(a.data_dir, "sandboxes", sid))
    assert sorted(left) == ["parked.json", "snapshots", "suspend"]
    assert verb(a, sid, "wake")["state"] == "succeeded"
    assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "second\n"
    assert verb(a, sid, "rollback", {"snapshot": full})["state"] == "succeeded"
    assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "first\n"
    assert verb(a, sid, "rollback", {"snapshot": disk})["state"] == "succeeded"
    assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "second\n"
    # a suspended sandbox's delete removes what it kept
    assert verb(a, sid, "suspend")["state"] == "succeeded"
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    assert not os.path.exists(os.path.join(a.data_dir, "sandboxes", sid))


def test_delete_keeping_snapshots_archives(airlock):
    a = airlock
    sid = a.create("minimal")["id"]
    a.exec(sid, ["sh", "-c", "echo one > /root/f; sync"])
    disk = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "disk"}, expect=201)["id"]
    a.exec(sid, ["sh", "-c", "echo two > /root/f"])
    full = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"}, expect=201)["id"]

    status, _, body = a.request("DELETE", f"/v1/sandboxes/{sid}?keep_snapshots=true")
    assert status == 200 and json.loads(body)["state"] == "archived"
    assert qemu_pids(sid) == []
    assert sorted(os.listdir(os.path.join(a.data_dir, "sandboxes", sid))) == ["parked.json", "snapshots"]
    status, _, body = a.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
    assert status == 409 and b"archived" in body
    assert {s["id"] for s in a.api("GET", f"/v1/sandboxes/{sid}/snapshots")["snapshots"]} == {disk, full}

    # a rollback makes it again: a full snapshot resumes, a disk one boots
    assert verb(a, sid, "rollback", {"snapshot": full})["state"] == "succeeded"
    assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "two\n"
    assert a.exec(sid, ["hostname"])["stdout"].strip() == sid
    assert a.request("DELETE", f"/v1/sandboxes/{sid}?keep_snapshots=true")[0] == 200
    assert verb(a, sid, "rollback", {"snapshot": disk})["state"] == "succeeded"
    assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "one\n"

    # a plain delete of an archived sandbox removes what it kept
    assert a.request("DELETE", f"/v1/sandboxes/{sid}?keep_snapshots=true")[0] == 200
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    assert not os.path.exists(os.path.join(a.data_dir, "sandboxes", sid))
    assert a.request("GET", f"/v1/sandboxes/{sid}")[0] == 404


def test_full_snapshot_fork_suspend_of_a_warm_pool_sandbox(airlock_factory):
    """A warm VM's disk moved after QEMU opened it (pool/NAME-N to
    sandboxes/ID); a migration reopens it by path, through the run dir's
    disk link."""
    a = airlock_factory(env={"AIRLOCK_POOL_SIZE": "1"}, prebuild="minimal")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pools = a.api("GET", "/v1/pools")["pools"]
        if pools and pools[0]["ready"] >= 1:
            break
        time.sleep(0.5)
    sbx = a.create("minimal")
    assert sbx["pool"] == "hit"
    sid = sbx["id"]
    a.exec(sid, ["sh", "-c", "echo warm > /root/f"])
    snap = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"}, expect=201)
    op = verb(a, sid, "fork")
    assert op["state"] == "succeeded", op
    child = op["result"]["sandbox"]["id"]
    assert a.exec(child, ["cat", "/root/f"])["stdout"] == "warm\n"
    assert verb(a, sid, "suspend")["state"] == "succeeded"
    assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "warm\n"
    assert verb(a, sid, "rollback", {"snapshot": snap["id"]})["state"] == "succeeded"
    for s in (sid, child):
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204


def test_paused_sandbox_takes_one_full_snapshot_after_another(airlock_factory):
    """A snapshot leaves a paused VM in QEMU's postmigrate state, from which
    QEMU refuses another migration: a second full snapshot, a fork and a
    suspend of the same paused sandbox must all work, and it stays paused."""
    a = airlock_factory(prebuild="minimal")
    sid = a.create("minimal")["id"]
    assert a.exec(sid, ["sh", "-c", "echo kept > /root/f"])["exit_code"] == 0
    verb(a, sid, "pause")
    for _ in range(2):
        assert a.request("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"})[0] == 201
    op = verb(a, sid, "fork")
    child = op["result"]["sandbox"]["id"]
    assert a.api("GET", f"/v1/sandboxes/{sid}")["state"] == "paused"
    verb(a, sid, "suspend")
    assert a.api("GET", f"/v1/sandboxes/{sid}")["state"] == "suspended"
    assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "kept\n"  # wakes it
    assert a.exec(child, ["cat", "/root/f"])["stdout"] == "kept\n"
    for s in (sid, child):
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204


def airlock_pids(data_dir):
    """airlock-nodemgr, airlockd and airlock-node processes of data_dir."""
    out = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        except (OSError, ValueError):
            continue
        if exe.startswith(("airlock-nodemgr", "airlockd", "airlock-node")) and data_dir.encode() in argv:
            out.append(int(pid))
    return out


def test_nodemgr_killed_during_suspend_leaves_no_vm_running(airlock_factory):
    """airlock-nodemgr (the only process that may signal a VM) dies while a
    suspend is between its snapshot and stopping the VM: the node cannot stop
    it, and must not forget it. Started again as a service manager would,
    the stack ends that VM, the sandbox is suspended and wakes with its
    data. The node, told to hand over, answers the suspend before it goes
    (released only once the node and airlockd both know they are stopping,
    so the node's exit would come first if it did not wait): the
    operation succeeded, it is not left to a guess."""
    release = tempfile.mktemp(prefix="release-", dir=os.environ["AIRLOCK_TEST_VOLUME"])
    env = {"AIRLOCK_TEST_HOLD": "suspend.snapshot", "AIRLOCK_TEST_HOLD_RELEASE": release}
    a = airlock_factory(prebuild="minimal", env=env)
    sid = a.create("minimal")["id"]
    assert a.exec(sid, ["sh", "-c", "echo safe > /root/f"])["exit_code"] == 0
    status, _, body = a.request("POST", f"/v1/sandboxes/{sid}/suspend")
    assert status == 202
    op_id = json.loads(body)["id"]
    try:
        wait_for(lambda: "test hold point suspend.snapshot reached" in a.log_tail(400), "no hold", a)
        os.kill(a.proc.pid, signal.SIGKILL)  # airlock-nodemgr: what airlockd became
        a.proc.wait()
        wait_for(lambda: "handing the sandboxes over" in (t := a.log_tail(400)) and "airlockd msg=\"received" in t,
                 "neither the node nor airlockd was told to stop", a)
    finally:
        open(release, "w").close()
    try:
        wait_for(lambda: not airlock_pids(a.data_dir), "airlockd and its node did not end with nodemgr", a)
        b = Airlock(a.data_dir, {"AIRLOCK_POOL_SIZE": "0"}, "minimal")
        try:
            b.wait_ready(120)
            assert wait_for(lambda: not qemu_pids(a.data_dir), "the VM the old node could not stop runs on", b)
            assert b.api("GET", f"/v1/sandboxes/{sid}")["state"] == "suspended"
            op = b.api("GET", f"/v1/operations/{op_id}")
            assert op["state"] == "succeeded", op
            assert b.exec(sid, ["cat", "/root/f"])["stdout"] == "safe\n"  # wakes it
            assert len(qemu_pids(a.data_dir)) == 1
            assert b.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
        finally:
            b.stop()
    finally:
        os.unlink(release)


def test_wake_removes_the_stale_image_itself(airlock_factory):
    """The node removes a woken sandbox's image before it answers the wake,
    so a crash of airlockd (or a lost reply) cannot leave it in the object
    store for good."""
    release = tempfile.mktemp(prefix="release-", dir=os.environ["AIRLOCK_TEST_VOLUME"])
    env = {"AIRLOCK_TEST_HOLD": "wake.restored", "AIRLOCK_TEST_HOLD_RELEASE": release}
    a = airlock_factory(prebuild="minimal", env=env)
    sid = a.create("minimal")["id"]
    verb(a, sid, "suspend")
    wait_for(lambda: a.api("GET", f"/v1/sandboxes/{sid}")["image_uploaded"], "the image never landed", a)
    assert len(manifests(a)) == 1  # control: the image is there while suspended
    assert a.request("POST", f"/v1/sandboxes/{sid}/wake")[0] == 202
    try:
        wait_for(lambda: "test hold point wake.restored reached" in a.log_tail(400), "no hold", a)
        assert manifests(a) == []  # gone before airlockd heard of the wake
    finally:
        open(release, "w").close()
    try:
        wait_for(lambda: a.api("GET", f"/v1/sandboxes/{sid}")["state"] == "running", "not woken", a)
        assert a.exec(sid, ["echo", "up"])["stdout"] == "up\n"
        assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    finally:
        os.unlink(release)


@pytest.mark.parametrize("killed", ["airlock-node", "airlock-nodemgr"])
def test_node_killed_during_wake_leaves_it_awake_and_no_image(airlock_factory, killed):
    """The node dies after a wake made the sandbox visible, before it removed
    the image and answered (alone, or with nodemgr and so airlockd): the
    next node keeps the sandbox running and removes the stale image, and
    airlockd learns that from the node by itself: the sandbox is listed
    running, not suspended beside a running VM, before anyone touches it."""
    a = airlock_factory(prebuild="minimal", env={"AIRLOCK_TEST_HOLD": "wake.visible"})
    sid = a.create("minimal")["id"]
    assert a.exec(sid, ["sh", "-c", "echo kept > /root/f && sync"])["exit_code"] == 0
    verb(a, sid, "suspend")
    wait_for(lambda: a.api("GET", f"/v1/sandboxes/{sid}")["image_uploaded"], "the image never landed", a)
    assert len(manifests(a)) == 1
    old = node_pids(a.data_dir)
    victim, daemon = a.pid_of(killed), a.pid_of("airlockd")
    assert a.request("POST", f"/v1/sandboxes/{sid}/wake")[0] == 202
    try:
        wait_for(lambda: "test hold point wake.visible reached" in a.log_tail(400), "no hold", a)
    finally:
        os.kill(victim, signal.SIGKILL)
    b = a
    if killed == "airlock-nodemgr":  # airlockd and the node follow it: start the stack again
        a.proc.wait(timeout=60)
        # once the old airlockd is gone: what it settled with no node to ask
        # is what the next one finds
        wait_for(lambda: not os.path.exists(f"/proc/{daemon}"), "the old airlockd did not exit", a)
        b = Airlock(a.data_dir, prebuild="minimal")
    try:
        if b is not a:
            b.wait_ready(START_TIMEOUT)
        wait_for(lambda: (new := node_pids(b.data_dir)) and new != old and
                 b.request("GET", "/v1/health", auth=False)[0] == 200, "no new node", b)
        wait_for(lambda: manifests(b) == [], "the stale image stayed", b)
        wait_for(lambda: b.api("GET", f"/v1/sandboxes/{sid}")["state"] == "running",
                 "airlockd does not list the woken sandbox as running", b)
        assert len(qemu_pids(sid)) == 1
        assert b.exec(sid, ["cat", "/root/f"])["stdout"] == "kept\n"
        assert b.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    finally:
        if b is not a:
            b.stop()


def test_suspend_releases_the_vm_before_its_upload(airlock_factory):
    """A suspend answers once its snapshot is durable on the node and its VM
    is gone; the upload runs after. Until it has landed the sandbox is not
    restorable on another node (the object store has no manifest of it, and
    the API says so), yet it wakes here from the node's copy, which stops
    the upload: nothing of it lands afterwards. Once uploaded, a node
    without the copy (here: this one, its copy removed) wakes it from the
    object store."""
    release = tempfile.mktemp(prefix="release-", dir=os.environ["AIRLOCK_TEST_VOLUME"])
    env = {"AIRLOCK_TEST_HOLD": "suspend.uploading", "AIRLOCK_TEST_HOLD_RELEASE": release}
    a = airlock_factory(prebuild="minimal", env=env)
    try:
        sid = a.create("minimal")["id"]
        assert a.exec(sid, ["sh", "-c", "echo safe > /root/f"])["exit_code"] == 0
        sleeper = start_sleeper(a, sid)
        assert verb(a, sid, "suspend")["state"] == "succeeded"  # while its upload is held
        wait_for(lambda: "test hold point suspend.uploading reached" in a.log_tail(400), "no hold", a)
        sbx = a.api("GET", f"/v1/sandboxes/{sid}")
        assert sbx["state"] == "suspended" and sbx["image_uploaded"] is False, sbx
        assert qemu_pids(sid) == []
        assert manifests(a) == []  # half its blobs, no manifest: no other node can restore it

        # control: it wakes here, from the node's copy, with its processes
        assert a.request("POST", f"/v1/sandboxes/{sid}/wake")[0] == 202
        wait_for(lambda: "stopping the upload of its suspended image" in a.log_tail(200),
                 "the wake did not stop the upload", a)
        open(release, "w").close()  # the held upload sees it was cancelled
        wait_for(lambda: a.api("GET", f"/v1/sandboxes/{sid}")["state"] == "running", "not woken", a)
        assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "safe\n"
        assert alive_in_guest(a, sid, sleeper)
        assert "copied on this node" in a.log_tail(400)
        assert manifests(a) == []  # the cancelled upload never landed

        # uploaded, the object store alone wakes it
        assert verb(a, sid, "suspend")["state"] == "succeeded"
        wait_for(lambda: a.api("GET", f"/v1/sandboxes/{sid}")["image_uploaded"], "the image never landed", a)
        assert len(manifests(a)) == 1
        copy = os.path.join(a.data_dir, "sandboxes", sid, "suspend")
        wait_for(lambda: os.path.exists(os.path.join(copy, "uploaded")), "the node never marked it uploaded", a)
        shutil.rmtree(copy)
        assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "safe\n"  # wakes it
        assert alive_in_guest(a, sid, sleeper)
        assert a.api("GET", f"/v1/sandboxes/{sid}")["execution"] == 3
        assert manifests(a) == []  # the woken sandbox's image is stale
        assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    finally:
        if os.path.exists(release):
            os.unlink(release)


def test_guest_memory_comes_back_byte_for_byte(airlock):
    """32 MiB of random bytes in a tmpfs (guest RAM only, never on the
    disk) hash the same after every way a sandbox's memory is saved and
    restored: a full snapshot rolled back to, a fork, a suspend woken from
    the node's copy and one woken from the object store (sparse-form
    hashes, hard-linked states, the upload after the answer). The control:
    the same bytes overwritten hash differently, so the hash reads what is
    in memory now."""
    a = airlock
    sid = a.create("minimal")["id"]
    fill = ("mkdir -p /mem && mount -t tmpfs -o size=48m tmpfs /mem && "
            "head -c 33554432 /dev/urandom > /mem/blob && sha256sum /mem/blob")
    r = a.exec(sid, ["sh", "-c", fill], timeout_s=120)
    assert r["exit_code"] == 0, r
    digest = r["stdout"].split()[0]

    def hash_in(s):
        r = a.exec(s, ["sha256sum", "/mem/blob"], timeout_s=60)
        assert r["exit_code"] == 0, r
        return r["stdout"].split()[0]

    snap = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"}, expect=201)
    r = a.exec(sid, ["sh", "-c", "head -c 4096 /dev/urandom | dd of=/mem/blob conv=notrunc 2>/dev/null"])
    assert r["exit_code"] == 0, r
    assert hash_in(sid) != digest  # the control
    assert verb(a, sid, "rollback", {"snapshot": snap["id"]})["state"] == "succeeded"
    assert hash_in(sid) == digest, "after a rollback to a full snapshot"

    child = verb(a, sid, "fork")["result"]["sandbox"]["id"]
    assert hash_in(child) == digest, "in a fork"
    assert hash_in(sid) == digest, "in the forked parent"

    assert verb(a, sid, "suspend")["state"] == "succeeded"
    assert verb(a, sid, "wake")["state"] == "succeeded"
    assert len(wakes(a, sid, "copied on this node")) == 1
    assert hash_in(sid) == digest, "woken from the node's copy"

    assert verb(a, sid, "suspend")["state"] == "succeeded"
    wait_for(lambda: a.api("GET", f"/v1/sandboxes/{sid}")["image_uploaded"], "the image never landed", a)
    copy = os.path.join(a.data_dir, "sandboxes", sid, "suspend")
    wait_for(lambda: os.path.exists(os.path.join(copy, "uploaded")), "the node never marked it uploaded", a)
    shutil.rmtree(copy)
    assert verb(a, sid, "wake")["state"] == "succeeded"
    assert len(wakes(a, sid, "download")) == 1
    assert hash_in(sid) == digest, "woken from the object store"
    for s in (sid, child):
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204


def wakes(a, sid, source):
    """The node's log lines of sid's wakes from source ("copied on this
    node" or "download")."""
    with open(a.log_path, errors="replace") as f:
        return [l for l in f if f"sandbox={sid} " in l and "woken from snapshot" in l and f"({source} " in l]
