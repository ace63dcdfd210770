"""The node on a KVM host (in the KVM tier's L1): /dev/kvm's owner and mode,
what the accelerator probe says, what a client hears when QEMU fails."""

import grp
import json
import os
import shutil
import stat
import subprocess

import pytest

from harness import AIRLOCKD, BUILD, START_TIMEOUT, Airlock, qemu_pids, volume_tempdir
from l1help import on_kvm
from test_recovery import wait_state


# tests/kvm/vcpu-fault, built by tests/kvm/l1-kit.sh against the guest kernel
VCPU_FAULT_KO = os.path.join(BUILD, "kvm-l1", "vcpu_fault.ko")


@pytest.fixture
def dev_kvm_mode():
    """Sets /dev/kvm's mode and group for one test (L1 has no udev: it
    starts 0600 root:root, the mode containers and minimal images have),
    and puts them back."""
    st = os.stat("/dev/kvm")

    def set_mode(mode, group):
        if group != "root":
            subprocess.run(["groupadd", "-f", "-r", group], check=True)
        os.chown("/dev/kvm", 0, grp.getgrnam(group).gr_gid)
        os.chmod("/dev/kvm", mode)

    yield set_mode
    os.chown("/dev/kvm", st.st_uid, st.st_gid)
    os.chmod("/dev/kvm", stat.S_IMODE(st.st_mode))


@pytest.mark.parametrize("mode,group", [(0o600, "root"), (0o660, "kvm"), (0o666, "root")],
                         ids=["0600-root", "0660-kvm", "0666-root"])
def test_vms_run_whatever_dev_kvm_owner_and_mode(airlock_factory, dev_kvm_mode, mode, group):
    """Each VM's uid opens a /dev/kvm node of its own: no mode or group of
    the host's node keeps KVM from it (a 0600 root:root node failed every
    create with EPERM while the probe, run as root, said KVM works)."""
    dev_kvm_mode(mode, group)
    a = airlock_factory(prebuild="minimal")
    health = a.api("GET", "/v1/health")
    assert health["accel"] == "kvm", health
    # the probe is the VM's uid's, not root's
    assert "a VM's uid" in health["accel_reason"] and f"{mode:04o}" in health["accel_reason"], health
    sid = a.create("minimal")["id"]
    assert on_kvm(sid)
    assert a.exec(sid, ["echo", "ok"])["stdout"] == "ok\n"
    with open(f"/proc/{qemu_pids(sid)[0]}/status") as f:
        groups = next(line for line in f if line.startswith("Groups:")).split()[1:]
    assert groups == [], groups  # no group of the host's node, nor any other
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def sandbox_dir(a, sid):
    return os.path.join(a.data_dir, "sandboxes", sid)


def test_qemus_own_error_reaches_the_client(airlock):
    """A restore QEMU gives up on: the client hears QEMU's own words (they
    stayed in the node's log, and the client got "No child processes")."""
    a = airlock
    sid = a.create("minimal")["id"]
    a.exec(sid, ["sh", "-c", "echo one > /root/f; sync"])
    full = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"}, expect=201)["id"]
    disk = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "disk"}, expect=201)["id"]
    # the full snapshot's device state overwritten in place (its CPU tag
    # stays): the stream QEMU reads is no migration stream any more
    state = os.path.join(sandbox_dir(a, sid), "snapshots", f"{full}.state")
    fd = os.open(state, os.O_WRONLY)
    os.pwrite(fd, b"\xde\xad\xbe\xef" * 1024, 0)
    os.close(fd)
    op = a.api("POST", f"/v1/sandboxes/{sid}/rollback?wait=true", {"snapshot": full})
    assert op["state"] == "failed", op
    msg = op["error"]["message"]
    assert "QEMU" in msg and "migration" in msg, msg
    assert "No child processes" not in msg, msg
    # the control: a good snapshot still rolls back, the sandbox runs
    op = a.api("POST", f"/v1/sandboxes/{sid}/rollback?wait=true", {"snapshot": disk})
    assert op["state"] == "succeeded", op
    assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "one\n"
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_a_vcpu_that_dies_is_named_and_the_vm_booted_again(airlock):
    """A vCPU KVM gives up on (QEMU's run state internal-error, its process
    alive: a guest driver did what KVM's emulator cannot) is a failed VMM:
    the node says why in QEMU's words and recovery boots the sandbox again,
    instead of a sandbox whose every request times out."""
    a = airlock
    sid = a.create("minimal")["id"]
    a.exec(sid, ["sh", "-c", "echo durable > /root/data; sync"])
    pid = qemu_pids(sid)[0]
    with open(VCPU_FAULT_KO, "rb") as f:
        a.put_file(sid, "/root/vcpu_fault.ko", f.read())
    # the guest kernel reads unassigned MMIO with POPCNT (tests/kvm/vcpu-fault)
    status, _, body = a.request("POST", f"/v1/sandboxes/{sid}/exec",
                                {"cmd": ["insmod", "/root/vcpu_fault.ko"], "timeout_s": 60})
    assert status != 200 or json.loads(body)["exit_code"] != 0, body  # it never returns
    sbx = wait_state(a, sid, "running", execution=2)
    rec = sbx["recoveries"][-1]
    assert rec["ok"] is True, sbx
    assert "internal-error" in rec["reason"] and "KVM internal error" in rec["reason"], rec
    assert pid not in qemu_pids(sid)
    assert on_kvm(sid)
    assert a.exec(sid, ["cat", "/root/data"])["stdout"] == "durable\n"
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def templates_of(a):
    return {t["name"]: t for t in a.api("GET", "/v1/templates")["templates"]}


def test_a_kvm_and_a_tcg_node_share_a_templates_dir(airlock_factory):
    """Templates are built per accelerator and CPU: a TCG node beside a KVM
    one on the same AIRLOCK_TEMPLATES_DIR builds its own minimal, runs its
    VMs from it, and leaves the KVM build in place (the hash covered
    neither, so the TCG node restored the KVM snapshot)."""
    kvm = airlock_factory(prebuild="minimal")
    before = templates_of(kvm)["minimal"]
    assert before["state"] == "ready", before
    assert kvm.api("GET", "/v1/health")["cpu"].startswith("kvm:host:")
    tcg = airlock_factory(env={"AIRLOCK_ACCEL": "tcg"}, prebuild="minimal", wait=False)
    tcg.wait_ready(1200)  # builds minimal under TCG, inside L1: minutes
    assert tcg.api("GET", "/v1/health")["cpu"] == "tcg:max"
    mine = templates_of(tcg)["minimal"]
    assert mine["state"] == "ready" and mine["hash"] != before["hash"], (mine, before)
    sid = tcg.create("minimal")["id"]
    pid = qemu_pids(sid)[0]
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().decode().split("\0")
    assert argv[argv.index("-accel") + 1].startswith("tcg"), argv
    assert tcg.exec(sid, ["echo", "tcg"])["stdout"] == "tcg\n"
    assert tcg.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    # the KVM build survived the TCG one: still ready, no rebuild
    after = templates_of(kvm)["minimal"]
    assert after["state"] == "ready" and after["hash"] == before["hash"], after
    sid = kvm.create("minimal")["id"]
    assert on_kvm(sid)
    assert kvm.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def refusal(a, path, body=None):
    """The error of a verb that must not run: its operation's when it ran
    and failed (200), the reply's when it was refused at once (4xx)."""
    status, _, data = a.request("POST", path, body)
    reply = json.loads(data)
    if status == 200:
        assert reply["state"] == "failed", reply
        return reply["error"]
    assert status == 409, (status, reply)
    return reply["error"]


def test_saved_state_resumes_only_on_its_cpu(airlock_factory):
    """A node restarted with another accelerator refuses the memory
    snapshots of the old one with the reason (409 cpu_mismatch), instead of
    restoring a KVM state under TCG; back on KVM they resume."""
    a = airlock_factory(prebuild="minimal")
    cpu = a.api("GET", "/v1/health")["cpu"]
    suspended = a.create("minimal")["id"]
    a.exec(suspended, ["sh", "-c", "echo kept > /root/f"])
    assert a.api("POST", f"/v1/sandboxes/{suspended}/suspend?wait=true")["state"] == "succeeded"
    stopped = a.create("minimal")["id"]
    a.exec(stopped, ["sh", "-c", "echo full > /root/f"])
    full = a.api("POST", f"/v1/sandboxes/{stopped}/snapshots", {"kind": "full"}, expect=201)["id"]
    assert a.api("POST", f"/v1/sandboxes/{stopped}/stop?wait=true")["state"] == "succeeded"
    a.stop()

    b = Airlock(a.data_dir, {"AIRLOCK_ACCEL": "tcg"}, prebuild="")
    try:
        b.wait_ready(START_TIMEOUT)
        assert b.api("GET", "/v1/health")["cpu"] == "tcg:max"
        err = refusal(b, f"/v1/sandboxes/{suspended}/wake?wait=true")
        assert err.get("code") == "cpu_mismatch", err
        assert cpu in err["message"] and "tcg:max" in err["message"], err
        assert b.api("GET", f"/v1/sandboxes/{suspended}")["state"] == "suspended"
        err = refusal(b, f"/v1/sandboxes/{stopped}/rollback?wait=true", {"snapshot": full})
        assert err.get("code") == "cpu_mismatch", err
        assert cpu in err["message"] and "tcg:max" in err["message"], err
    finally:
        b.stop()

    c = Airlock(a.data_dir, prebuild="minimal")  # KVM again: the control
    try:
        c.wait_ready(START_TIMEOUT)
        assert c.exec(suspended, ["cat", "/root/f"])["stdout"] == "kept\n"
        assert on_kvm(suspended)
        assert c.api("POST", f"/v1/sandboxes/{stopped}/rollback?wait=true", {"snapshot": full})["state"] == \
            "succeeded"
        assert c.exec(stopped, ["cat", "/root/f"])["stdout"] == "full\n"
        for s in (suspended, stopped):
            assert c.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204
    finally:
        c.stop()


def check_lines(*args, env=None):
    """airlockd --check --json: {item: result}."""
    out = subprocess.run([AIRLOCKD, "--check", "--json", "--data-dir", "/l1/vol/check-none", *args],
                         capture_output=True, env=dict(os.environ, **(env or {})), timeout=120)
    return {r["item"]: r for r in json.loads(out.stdout)}, out.returncode


def test_check_and_doctor_say_what_kvm_the_vms_get(airlock, dev_kvm_mode):
    """airlockd --check and airlock doctor on a KVM host: which accelerator
    and why, whether a VM's uid can use /dev/kvm (probed as such), and the
    VMs' CPU; a CPU model QEMU lacks is an error with its fix."""
    dev_kvm_mode(0o600, "root")
    lines, rc = check_lines()
    accel, cpu = lines["accel"], lines["cpu"]
    assert accel["status"] == "ok" and accel["detail"].startswith("kvm (auto)"), accel
    assert "a VM's uid 2000000 opens its own /dev/kvm node (host node 0600 0:0)" in accel["detail"], accel
    assert cpu["status"] == "ok" and cpu["detail"].startswith("host ("), cpu
    lines, rc = check_lines(env={"AIRLOCK_CPU_MODEL": "NoSuchCpu"})
    assert lines["cpu"]["status"] == "error" and "NoSuchCpu" in lines["cpu"]["detail"], lines["cpu"]
    assert "-cpu help" in lines["cpu"]["fix"] and rc == 1, lines["cpu"]
    lines, _ = check_lines(env={"AIRLOCK_CPU_MODEL": "EPYC-v3"})
    assert lines["cpu"]["status"] == "ok" and lines["cpu"]["detail"].startswith("EPYC-v3"), lines["cpu"]
    # the running Airlock, through the API
    out = airlock.cli("doctor")
    text = out.stdout.decode()
    assert "accel kvm" in text and "a VM's uid" in text and "VM CPU kvm:host:" in text, text


def test_kvm_asked_for_but_absent_is_refused_at_start_with_the_fix(airlock_factory):
    """AIRLOCK_ACCEL=kvm where KVM cannot be had: airlockd refuses to start,
    naming the fix, rather than starting VMs that fail later; with KVM
    back, the same start works (the control)."""
    subprocess.run(["rmmod", "kvm_amd", "kvm"], check=True)
    try:
        lines, rc = check_lines(env={"AIRLOCK_ACCEL": "kvm"})
        assert rc == 1 and lines["accel"]["status"] == "error", lines["accel"]
        assert "modprobe" in lines["accel"]["fix"], lines["accel"]
        d = volume_tempdir("airlock-refused-")
        out = subprocess.run([AIRLOCKD, "--data-dir", d, "--listen", "127.0.0.1:0"], capture_output=True,
                             env=dict(os.environ, AIRLOCK_ACCEL="kvm"), timeout=120)
        err = out.stderr.decode() + out.stdout.decode()
        assert out.returncode != 0 and "kvm" in err and "modprobe" in err, (out.returncode, err)
        shutil.rmtree(d)
    finally:
        subprocess.run(["modprobe", "kvm_amd", "nested=1"], check=True)
    a = airlock_factory(env={"AIRLOCK_ACCEL": "kvm"}, prebuild="minimal")
    assert a.api("GET", "/v1/health")["accel"] == "kvm"
