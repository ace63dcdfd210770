"""Sandboxes survive the processes around them: a node agent killed with
SIGKILL (airlockd starts a new one, which adopts the running VMs), airlockd
killed with SIGKILL (its node hands the VMs over to the next one), a clean
restart (VMs stopped, booted again) and a VMM that crashes (booted again
from its disk as a new execution)."""

import datetime
import json
import os
import signal
import time

from harness import Airlock, ApiError, START_TIMEOUT, kill_node, node_pids, qemu_pids

# what airlockd answers while its node agent (re)starts
NODE_AWAY = (502, 503, 504)


def wait_state(a, sid, want, execution=None, timeout=180):
    deadline = time.monotonic() + timeout
    sbx = last = None
    while time.monotonic() < deadline:
        try:
            sbx = a.api("GET", f"/v1/sandboxes/{sid}")
            if sbx["state"] == want and execution in (None, sbx.get("execution")):
                return sbx
        except OSError as e:  # airlockd restarting
            last = e
        except ApiError as e:  # the node restarting; any other answer fails at once
            if e.status not in NODE_AWAY:
                raise
            last = e
        time.sleep(0.2)
    raise AssertionError(f"sandbox {sid} not {want} after {timeout}s: {sbx} (last error: {last!r})\n"
                         f"{a.log_tail(80)}")


def start_sleeper(a, sid):
    """Starts a background process in the guest and returns its pid."""
    out = a.exec(sid, ["sh", "-c", "sleep 100000 >/dev/null 2>&1 & echo $!"])["stdout"]
    return int(out.strip())


def alive_in_guest(a, sid, pid):
    return a.exec(sid, ["sh", "-c", f"kill -0 {pid} && echo alive"])["stdout"].strip() == "alive"


def test_node_killed_vms_adopted(airlock):
    a = airlock
    sid = a.create("minimal")["id"]
    paused = a.create("minimal")["id"]
    a.exec(sid, ["sh", "-c", "echo before > /root/data; sync"])
    sleeper = start_sleeper(a, sid)
    a.api("POST", f"/v1/sandboxes/{paused}/pause?wait=true")
    vm = qemu_pids(sid)
    assert len(vm) == 1
    kill_node(a)

    sbx = wait_state(a, sid, "running")
    assert sbx["execution"] == 1  # the same VM, not a new one
    assert qemu_pids(sid) == vm
    assert a.exec(sid, ["cat", "/root/data"])["stdout"] == "before\n"
    assert alive_in_guest(a, sid, sleeper)
    assert wait_state(a, paused, "paused")["execution"] == 1
    a.api("POST", f"/v1/sandboxes/{paused}/resume?wait=true")
    assert a.exec(paused, ["echo", "ok"])["stdout"] == "ok\n"
    for s in (sid, paused):
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204
    assert qemu_pids(a.data_dir) == []


def test_airlockd_killed_vms_handed_over(airlock_factory):
    """SIGKILL of airlockd's own pid: airlock-nodemgr sees it die and gives
    the node SIGUSR1, which hands the VMs over (left running, recorded)
    instead of stopping them; the next start adopts them."""
    a = airlock_factory(prebuild="minimal")
    sid = a.create("minimal")["id"]
    sleeper = start_sleeper(a, sid)
    vm = qemu_pids(sid)
    os.kill(a.pid_of("airlockd"), signal.SIGKILL)
    a.proc.wait(timeout=60)  # nodemgr follows once the node is gone
    assert node_pids(a.data_dir) == []
    with open(a.log_path, "rb") as f:
        log = f.read().decode(errors="replace")
    assert "handing the sandboxes over to the next node" in log, a.log_tail(40)
    assert qemu_pids(sid) == vm  # the VM outlived all three

    b = Airlock(a.data_dir, prebuild="minimal")
    try:
        b.wait_ready(START_TIMEOUT)
        sbx = wait_state(b, sid, "running")
        assert sbx["execution"] == 1
        assert qemu_pids(sid) == vm
        assert alive_in_guest(b, sid, sleeper)
    finally:
        b.stop()
    assert qemu_pids(a.data_dir) == []


def test_clean_restart_resumes_sandboxes(airlock_factory):
    """A stop saves each running and paused sandbox's VM and the next start
    resumes it: processes and unsynced writes go on, a paused one is paused
    again, a stopped one stays stopped."""
    a = airlock_factory(prebuild="minimal")
    token = a.token
    sid = a.create("minimal")["id"]
    paused = a.create("minimal")["id"]
    stopped = a.create("minimal")["id"]
    a.exec(sid, ["sh", "-c", "echo kept > /root/data"])  # not synced: in the guest's page cache
    sleeper = start_sleeper(a, sid)
    paused_sleeper = start_sleeper(a, paused)
    a.api("POST", f"/v1/sandboxes/{paused}/pause?wait=true")
    a.api("POST", f"/v1/sandboxes/{stopped}/stop?wait=true")
    a.stop()
    assert qemu_pids(a.data_dir) == []
    assert "VM saved for the node's stop" in a.log_tail(400)

    b = Airlock(a.data_dir, prebuild="minimal")
    try:
        b.wait_ready(START_TIMEOUT)
        assert b.token == token
        sbx = wait_state(b, sid, "running", execution=2)
        assert sbx["recoveries"][-1]["ok"] is True, sbx["recoveries"]
        assert sbx["recoveries"][-1]["how"] == "resumed the VM saved at the node's stop", sbx["recoveries"]
        assert alive_in_guest(b, sid, sleeper), "the process the sandbox ran before the restart"
        assert b.exec(sid, ["cat", "/root/data"])["stdout"] == "kept\n"
        assert b.exec(sid, ["hostname"])["stdout"].strip() == sid
        assert wait_state(b, paused, "paused", execution=2)
        b.api("POST", f"/v1/sandboxes/{paused}/resume?wait=true")
        assert alive_in_guest(b, paused, paused_sleeper)
        assert wait_state(b, stopped, "stopped")
        for s in (sid, paused, stopped):
            assert b.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204
    finally:
        b.stop()


def test_a_saved_vm_that_does_not_resume_is_booted(airlock_factory):
    """The VM saved at the stop cannot be resumed (its state file is
    damaged, as a QEMU of another version could find it): the next start
    boots the sandbox's disk instead, its synced writes kept."""
    a = airlock_factory(prebuild="minimal")
    sid = a.create("minimal")["id"]
    a.exec(sid, ["sh", "-c", "echo durable > /root/data; sync"])
    a.stop()
    state = os.path.join(a.data_dir, "sandboxes", sid, "stop.state")
    assert os.path.getsize(state) > 0
    with open(state, "r+b") as f:
        f.write(b"\0" * 4096)  # QEMU's stream header and the first sections
    b = Airlock(a.data_dir, prebuild="minimal")
    try:
        b.wait_ready(START_TIMEOUT)
        sbx = wait_state(b, sid, "running", execution=2)  # a failed attempt makes no execution
        hows = [(r["ok"], r["how"]) for r in sbx["recoveries"]]
        assert hows[0] == (False, "resumed the VM saved at the node's stop"), hows
        assert hows[-1] == (True, "cold boot of its disk (attempt 2)"), hows
        assert b.exec(sid, ["cat", "/root/data"])["stdout"] == "durable\n"
        assert b.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    finally:
        b.stop()


def test_crashed_vmm_is_recovered(airlock):
    a = airlock
    sid = a.create("minimal")["id"]
    a.exec(sid, ["sh", "-c", "echo durable > /root/data; sync"])
    vm = qemu_pids(sid)
    os.kill(vm[0], signal.SIGKILL)
    sbx = wait_state(a, sid, "running", execution=2)
    rec = sbx["recoveries"][-1]
    assert rec["ok"] is True and "killed by signal 9" in rec["reason"]
    assert qemu_pids(sid) != vm
    assert a.exec(sid, ["cat", "/root/data"])["stdout"] == "durable\n"
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def kill_recovery_boot(a, sid, old):
    """Kills the QEMU a recovery starts for sid (any but the pids in old)
    as soon as it shows, long before its guest boots (seconds under TCG);
    returns its pid."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        pids = [p for p in qemu_pids(sid) if p not in old]
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            return pids[0]
        time.sleep(0.02)
    raise AssertionError(f"no recovery VM for {sid}\n{a.log_tail(80)}")


def test_a_recovery_whose_boot_fails_is_tried_again_then_given_up(airlock):
    """A recovery's boot that fails (its VM killed before the guest
    answered) is a crash too: the node boots it again, and says how the
    failed one ended; a sandbox whose boots keep failing is left failed
    after three crashes within ten minutes, not booted forever."""
    a = airlock
    sid = a.create("minimal")["id"]
    a.exec(sid, ["sh", "-c", "echo durable > /root/data; sync"])
    first = qemu_pids(sid)
    os.kill(first[0], signal.SIGKILL)
    booting = kill_recovery_boot(a, sid, first)
    sbx = wait_state(a, sid, "running", execution=2)
    failed, ok = sbx["recoveries"][-2:]
    assert failed["ok"] is False and "killed by signal 9" in failed["reason"], sbx
    assert failed["error"].startswith("recovery failed: ") and "QEMU exited" in failed["error"], failed
    assert ok["ok"] is True and ok["how"] == "cold boot of its disk (attempt 2)", sbx
    assert ok["reason"] == failed["reason"]  # the crash it recovers from
    assert booting not in qemu_pids(sid)
    assert a.exec(sid, ["cat", "/root/data"])["stdout"] == "durable\n"
    # the third crash within the window, and its boot fails: left failed
    running = qemu_pids(sid)
    os.kill(running[0], signal.SIGKILL)
    kill_recovery_boot(a, sid, first + [booting] + running)
    sbx = wait_state(a, sid, "failed")
    deadline = time.monotonic() + 60
    while sbx["recoveries"][-1]["how"] != "none":
        assert time.monotonic() < deadline, sbx
        time.sleep(0.2)
        sbx = a.api("GET", f"/v1/sandboxes/{sid}")
    assert sbx["recoveries"][-1]["error"] == "failed too often: left failed", sbx
    assert sbx["state"] == "failed" and not qemu_pids(sid), sbx
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_a_guest_kernel_panic_is_named_and_recovered(airlock):
    """A guest kernel that panics resets the VM, which QEMU (-no-reboot)
    turns into a silent exit: the reason names the exit and quotes the
    guest's console, where the kernel said why."""
    a = airlock
    sid = a.create("minimal")["id"]
    status, _, body = a.request("POST", f"/v1/sandboxes/{sid}/exec",
                                {"cmd": ["sh", "-c", "echo c > /proc/sysrq-trigger"], "timeout_s": 60})
    assert status != 200 or json.loads(body)["exit_code"] != 0, body  # it never returns
    sbx = wait_state(a, sid, "running", execution=2)
    rec = sbx["recoveries"][-1]
    assert rec["ok"] is True, sbx
    assert rec["reason"].startswith("QEMU exited (status 0); the guest's console says: "), rec
    assert "Kernel panic" in rec["reason"] and "sysrq" in rec["reason"], rec
    assert a.exec(sid, ["echo", "back"])["stdout"] == "back\n"
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def ledger(a, sid):
    return a.exec(sid, ["cat", "/root/ledger"])["stdout"].split()


def append(a, sid, *entries):
    """Acknowledged writes: each is synced before the exec returns."""
    for e in entries:
        assert a.exec(sid, ["sh", "-c", f"echo {e} >> /root/ledger && sync"])["exit_code"] == 0


def test_crashed_vmm_never_goes_back_past_an_acknowledged_write(airlock):
    """By default a recovery boots the disk: a full snapshot taken earlier is
    not resumed (it would drop every write after it), neither on the first
    crash nor on the next one, nor after a stop and start."""
    a = airlock
    sid = a.create("minimal")["id"]
    assert a.api("GET", f"/v1/sandboxes/{sid}")["recovery"] == "boot"
    append(a, sid, "1", "2")
    a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"}, expect=201)
    append(a, sid, "3", "4")
    os.kill(qemu_pids(sid)[0], signal.SIGKILL)
    rec = wait_state(a, sid, "running", execution=2)["recoveries"][-1]
    assert rec["ok"] is True and rec["how"] == "cold boot of its disk" and "checkpoint" not in rec
    assert ledger(a, sid) == ["1", "2", "3", "4"]
    append(a, sid, "5")
    a.api("POST", f"/v1/sandboxes/{sid}/stop?wait=true")
    a.api("POST", f"/v1/sandboxes/{sid}/start?wait=true")
    append(a, sid, "6")
    os.kill(qemu_pids(sid)[0], signal.SIGKILL)
    wait_state(a, sid, "running", execution=4)
    assert ledger(a, sid) == ["1", "2", "3", "4", "5", "6"]
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_crashed_vmm_resumes_its_checkpoint_when_asked(airlock):
    """recovery=checkpoint: memory and processes come back from the newest
    full snapshot of the execution that died, and the sandbox says what it
    went back to; a snapshot of an older execution is never resumed."""
    a = airlock
    status, _, body = a.request("POST", "/v1/sandboxes", {"template": "minimal", "recovery": "sometimes"})
    assert status == 400 and b"recovery" in body
    sid = a.create("minimal", recovery="checkpoint")["id"]
    assert a.api("GET", f"/v1/sandboxes/{sid}")["recovery"] == "checkpoint"
    append(a, sid, "1")
    sleeper = start_sleeper(a, sid)
    snap = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"}, expect=201)
    append(a, sid, "2")  # after the checkpoint: this recovery loses it, as asked
    os.kill(qemu_pids(sid)[0], signal.SIGKILL)
    rec = wait_state(a, sid, "running", execution=2)["recoveries"][-1]
    assert rec["ok"] is True and rec["checkpoint"] == snap["id"], rec
    taken = datetime.datetime.fromisoformat(snap["created_at"].replace("Z", "+00:00")).timestamp() * 1000
    assert abs(rec["checkpoint_at"] - taken) < 60000, (rec, snap)
    assert rec["how"].startswith(f"resumed full snapshot {snap['id']}")
    assert alive_in_guest(a, sid, sleeper)
    assert ledger(a, sid) == ["1"]
    # the next crash: that snapshot belongs to execution 1, so the disk boots
    append(a, sid, "3")
    os.kill(qemu_pids(sid)[0], signal.SIGKILL)
    rec = wait_state(a, sid, "running", execution=3)["recoveries"][-1]
    assert rec["ok"] is True and "checkpoint" not in rec and rec["how"].startswith("cold boot of its disk"), rec
    assert ledger(a, sid) == ["1", "3"]
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_uploaded_file_survives_a_vmm_crash(airlock):
    """A file the API answered 200 for is on the guest's disk: a recovery
    that boots the disk finds it (the agent syncs before it answers)."""
    a = airlock
    sid = a.create("minimal")["id"]
    data = os.urandom(256 * 1024)
    a.put_file(sid, "/root/upload.bin", data)
    os.kill(qemu_pids(sid)[0], signal.SIGKILL)
    wait_state(a, sid, "running", execution=2)
    assert a.get_file(sid, "/root/upload.bin") == data
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
