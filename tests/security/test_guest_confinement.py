"""A hostile guest: whatever code runs inside a sandbox, it must not hurt
the host or a neighbour sandbox, and its VMM must stay confined. Each
attack is checked to have run up to the limit that stops it (the OOM kill,
ENOSPC, SIGSYS), not merely to have been started."""

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from harness import START_TIMEOUT, qemu_pids, vcpu_cpu_ticks, vcpu_threads

SECCOMP_SANDBOX = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"


def _status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.split(":", 1) for line in f if ":" in line)


def test_fork_bomb_stays_inside(airlock):
    """A classic fork bomb: the shell that starts it returns at once and the
    bomb runs on inside the VM (nothing bounds it but the VM: its own
    kernel, its fixed vCPUs and RAM). It is shown to run (the victim's vCPU
    burns a second of CPU time); meanwhile the victim's own agent answers
    (it runs at real-time priority: a file read, which starts no process,
    takes milliseconds, where a normal task would get 1/N of the vCPU), the
    neighbour answers, the node is the same process and healthy, the victim
    is still one QEMU, and a delete gets rid of it, QEMU included."""
    a = airlock
    victim = a.create("minimal")["id"]
    neighbour = a.create("minimal")["id"]
    node = a.pid_of("airlock-node")
    vcpu = vcpu_threads(victim)
    assert vcpu, f"no vCPU thread of {victim}"
    r = a.exec(victim, ["sh", "-c", "b() { b | b & }; b"], timeout_s=5)
    assert r["exit_code"] == 0 and not r["timed_out"], r
    start = vcpu_cpu_ticks(vcpu)
    deadline = time.monotonic() + 60
    while vcpu_cpu_ticks(vcpu) - start < os.sysconf("SC_CLK_TCK"):
        assert time.monotonic() < deadline, "the fork bomb did not keep the victim's vCPU busy"
        time.sleep(0.2)
    hostname = a.get_file(neighbour, "/etc/hostname")
    for _ in range(5):
        assert a.get_file(victim, "/etc/hostname") == victim.encode() + b"\n"
    assert hostname == neighbour.encode() + b"\n"
    assert a.exec(neighbour, ["echo", "fine"])["stdout"] == "fine\n"
    assert a.request("GET", "/v1/health", auth=False)[0] == 200
    assert a.pid_of("airlock-node") == node
    assert len(qemu_pids(victim)) == 1
    t0 = time.monotonic()
    assert a.request("DELETE", f"/v1/sandboxes/{victim}")[0] == 204
    assert time.monotonic() - t0 < 60, "deleting the bombed sandbox took over a minute"
    assert qemu_pids(victim) == []
    assert a.exec(neighbour, ["echo", "fine"])["stdout"] == "fine\n"
    assert a.request("DELETE", f"/v1/sandboxes/{neighbour}")[0] == 204


def test_memory_hog_is_the_guests_problem(airlock):
    """A process that doubles a string until memory runs out: the guest's
    own OOM killer ends it once it holds most of the VM's RAM (the attack
    ran to the limit); QEMU is the same process (the host's cgroup limit
    never had to act) and its RSS stays bounded; the victim's agent still
    answers, and so does the neighbour."""
    a = airlock
    victim = a.create("minimal")["id"]
    neighbour = a.create("minimal")["id"]
    pid = qemu_pids(victim)[0]
    r = a.exec(victim, ["sh", "-c", "awk 'BEGIN { s = \"x\"; while (1) s = s s }'; echo rc=$?; "
                                    "dmesg | grep 'Out of memory'"], timeout_s=60)
    assert not r["timed_out"] and "rc=137\n" in r["stdout"], f"the hog was not killed: {r}"
    m = re.search(r"Out of memory: Killed process \d+ \(awk\) .*anon-rss:(\d+)kB", r["stdout"])
    assert m, f"the guest's OOM killer did not end the hog: {r}"
    assert int(m.group(1)) > 128 << 10, f"the hog was killed at {int(m.group(1)) >> 10} MiB, not at the VM's 256"
    assert qemu_pids(victim) == [pid]
    rss_kib = int(_status(pid)["VmRSS"].split()[0])
    assert rss_kib < 600 * 1024  # bounded by the VM's 256 MiB, plus QEMU's own
    assert a.exec(victim, ["echo", "survived"])["stdout"] == "survived\n"
    assert a.exec(neighbour, ["echo", "fine"])["stdout"] == "fine\n"
    for s in (victim, neighbour):
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204


def test_disk_fill_stops_at_the_sandbox_disk(airlock):
    """dd until the disk is full: it stops at ENOSPC having written about
    the whole file system (the attack ran to the limit); the image on the
    host never grows past its size; the victim can write again once it
    frees the space, and the neighbour writes on."""
    a = airlock
    victim = a.create("minimal")["id"]
    neighbour = a.create("minimal")["id"]
    image = os.path.join(a.data_dir, "sandboxes", victim, "rootfs.img")
    size = os.stat(image).st_size
    r = a.exec(victim, ["sh", "-c", "df -k / | tail -1; dd if=/dev/zero of=/root/fill bs=1M 2>&1; echo rc=$?; "
                                    "sync; stat -c %s /root/fill; df -k / | tail -1"], timeout_s=120)
    out = r["stdout"].splitlines()
    assert not r["timed_out"] and "No space left on device" in r["stdout"] and "rc=1" in out, \
        f"dd never hit ENOSPC: {r}"
    avail_before, filled, avail_after = int(out[0].split()[3]) << 10, int(out[-2]), int(out[-1].split()[3])
    assert filled >= avail_before and filled >= size * 0.8 and avail_after == 0, (filled, avail_before, size, out)
    st = os.stat(image)
    assert st.st_size == size  # the image never grows past its size
    assert st.st_blocks * 512 <= size + (1 << 20)
    r = a.exec(victim, ["sh", "-c", "rm /root/fill && echo ok > /root/f && sync && cat /root/f"])
    assert r["stdout"] == "ok\n", r
    a.exec(neighbour, ["sh", "-c", "echo ok > /root/f; sync"])
    assert a.exec(neighbour, ["cat", "/root/f"])["stdout"] == "ok\n"
    for s in (victim, neighbour):
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204


def _read_reply(f):
    """The next QMP reply (events skipped), or None at EOF."""
    while True:
        try:
            line = f.readline()
        except ConnectionResetError:
            line = b""
        if not line:
            return None
        msg = json.loads(line)
        if "event" not in msg:
            return msg


def _spawn_uri(target):
    # a migration to "exec:" makes QEMU fork and exec /bin/sh
    return f"exec:/bin/sh -c 'echo spawned > {target}'"


def _control_qemu_spawns(sandbox):
    """The control: a QEMU outside the jail, asked the same thing, spawns
    (with -sandbox off) or is killed by SIGSYS (with the product's
    -sandbox setting), so the attack below is a real spawn and the filter
    is what stops it."""
    out = {}
    for mode in ("off", sandbox):
        with tempfile.TemporaryDirectory() as d:
            target = os.path.join(d, "spawned")
            p = subprocess.Popen(["qemu-system-x86_64", "-machine", "none", "-nodefaults", "-display", "none",
                                  "-sandbox", mode, "-qmp", "stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            try:
                assert "QMP" in json.loads(p.stdout.readline())
                for cmd in ({"execute": "qmp_capabilities"},
                            {"execute": "migrate", "arguments": {"uri": _spawn_uri(target)}}):
                    p.stdin.write(json.dumps(cmd).encode() + b"\n")
                    p.stdin.flush()
                    if _read_reply(p.stdout) is None:
                        break
                deadline = time.monotonic() + 10
                while not os.path.exists(target) and p.poll() is None:
                    assert time.monotonic() < deadline, f"-sandbox {mode}: QEMU neither spawned nor died"
                    time.sleep(0.05)
            finally:
                if p.poll() is None:
                    p.kill()
                p.wait(timeout=10)
            out[mode] = (os.path.exists(target), p.returncode)
    assert out["off"][0], f"an unconfined QEMU did not run the command: {out}"
    assert out[sandbox] == (False, -signal.SIGSYS), f"-sandbox {sandbox}: {out}"


def _stat_fields(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def test_vmm_is_confined_by_seccomp_and_no_new_privs(airlock):
    """A VMM taken over tries to spawn a process: the sandbox's own QEMU,
    through its QMP socket, is told to migrate to "exec:/bin/sh ..." (QEMU
    forks and execs for it). Its seccomp filter (-sandbox on, spawn=deny)
    kills it with SIGSYS at the fork; the command never runs. It runs with
    no_new_privs and in seccomp filter mode, so nothing it could exec would
    gain privileges either. Beside it the control (an unconfined QEMU runs
    the same command) and, on the same QMP connection, an ordinary command
    that QEMU answers. The node holds the VM's only QMP connection, so it
    is killed first, with airlock-nodemgr stopped so that no new node takes
    the socket back; afterwards the new node recovers the sandbox."""
    a = airlock
    _control_qemu_spawns(SECCOMP_SANDBOX)
    sid = a.create("minimal")["id"]
    pid = qemu_pids(sid)[0]
    st = _status(pid)
    assert st["NoNewPrivs"].strip() == "1"
    assert st["Seccomp"].strip() == "2"
    argv = open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\0")
    qmp_path = argv[argv.index("-qmp") + 1][len("unix:"):].split(",")[0]
    target = os.path.join(os.path.dirname(qmp_path), "spawned")  # the VM's uid may write there
    nodemgr, node = a.pid_of("airlock-nodemgr"), a.pid_of("airlock-node")
    os.kill(nodemgr, signal.SIGSTOP)
    try:
        os.kill(node, signal.SIGKILL)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(qmp_path)  # QEMU takes it once the node's connection is gone
            f = s.makefile("rwb")
            assert "QMP" in json.loads(f.readline())
            for cmd, want in (({"execute": "qmp_capabilities"}, {}), ({"execute": "query-status"}, "running")):
                f.write(json.dumps(cmd).encode() + b"\n")
                f.flush()
                got = _read_reply(f)
                assert got and (got["return"] == want or got["return"].get("status") == want), got
            f.write(json.dumps({"execute": "migrate", "arguments": {"uri": _spawn_uri(target)}}).encode() + b"\n")
            f.flush()
            assert _read_reply(f) is None, "QEMU answered a migration that needs a fork"
        # nodemgr (stopped) has not reaped it: the zombie keeps its status
        deadline = time.monotonic() + 10
        while _stat_fields(pid)[0] != "Z":
            assert time.monotonic() < deadline, "QEMU lives on after being asked to spawn"
            time.sleep(0.05)
        status = int(_stat_fields(pid)[49])
        assert status & 0x7f == signal.SIGSYS, f"QEMU ended with wait status {status:#x}, not SIGSYS"
        assert not os.path.exists(target), "the VMM ran a command"
    finally:
        os.kill(nodemgr, signal.SIGCONT)
    assert argv[argv.index("-sandbox") + 1] == SECCOMP_SANDBOX, argv  # the setting the control tried
    # a new node comes up, finds the VM dead and recovers the sandbox
    assert _served_again(a, sid)["stdout"] == "back\n"
    assert qemu_pids(sid) and qemu_pids(sid) != [pid]
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


@pytest.mark.cases(2)
def test_guest_cannot_reach_the_host_through_symlinks(airlock):
    """A symlink in the guest names a guest path: reading it through the
    files API returns guest content, never the host's. The links are shown
    to be there (readlink in the guest); the control after each: the guest
    file they name, read by its own path, is the same."""
    a = airlock
    sid = a.create("minimal")["id"]
    with open("/etc/hostname") as f:
        host_name = f.read().strip()
    r = a.exec(sid, ["sh", "-c", "ln -s /etc/hostname /root/link && ln -s /../../../../etc/hostname /root/up && "
                                 "readlink /root/link && readlink /root/up"])
    assert r["exit_code"] == 0 and r["stdout"] == "/etc/hostname\n/../../../../etc/hostname\n", r
    for p in ("/root/link", "/root/up"):
        got = a.get_file(sid, p).decode().strip()
        assert got == sid and got != host_name
        assert a.get_file(sid, "/etc/hostname").decode().strip() == sid  # the control
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def _served_again(a, sid):
    """The sandbox's first exec answered once a new node serves it."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        status, _, body = a.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["echo", "back"]}, timeout=60)
        if status == 200:
            return json.loads(body)
        assert time.monotonic() < deadline, (status, body, a.log_tail(60))
        time.sleep(0.5)


def _qmp_of_a_vm_without_its_node(a, sid, commands):
    """The answers of the sandbox's QEMU to commands over its own QMP
    socket, taken while the node (which holds its only connection) is
    killed and airlock-nodemgr stopped; then nodemgr goes on, and a new
    node adopts the VM, which ran on untouched."""
    pid = qemu_pids(sid)[0]
    argv = open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\0")
    qmp_path = argv[argv.index("-qmp") + 1][len("unix:"):].split(",")[0]
    nodemgr, node = a.pid_of("airlock-nodemgr"), a.pid_of("airlock-node")
    os.kill(nodemgr, signal.SIGSTOP)
    answers = []
    try:
        os.kill(node, signal.SIGKILL)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(qmp_path)
            f = s.makefile("rwb")
            assert "QMP" in json.loads(f.readline())
            for cmd in [{"execute": "qmp_capabilities"}] + commands:
                f.write(json.dumps(cmd).encode() + b"\n")
                f.flush()
                answers.append(_read_reply(f))
            f.close()  # the socket's fd stays open while its file object does: QEMU serves one client
    finally:
        os.kill(nodemgr, signal.SIGCONT)
    _served_again(a, sid)
    assert qemu_pids(sid) == [pid], "the new node did not adopt the VM"  # it ran on, untouched
    return answers[1:], argv


# The device models a VM has (docs/security.md, "The QEMU device set"):
# microvm's own board (interrupt controllers, timer, RTC, the serial port
# of -serial, the ACPI generic event device it signals power events with,
# fw_cfg that hands the boot loader the kernel) and three kinds of virtio device on
# virtio-mmio transports (the disk five times: its own and four volume
# slots); no PCI bus, nothing hot-pluggable.
DEVICE_SET = {
    # the board (under KVM its interrupt controllers and timer are the kernel's)
    "kvm-ioapic", "ioapic", "kvm-i8259", "isa-i8259", "kvm-pit", "isa-pit",
    "mc146818rtc", "isa-serial", "isabus-bridge", "acpi-ged-x86", "fw_cfg_io", "kvmvapic",
    # buses and the transports the board always makes (empty ones answer "no device")
    "virtio-mmio", "virtio-mmio-bus", "isa-bus", "System", "main-system-bus", "sysbus",
    # ours
    "virtio-serial-device", "virtio-serial-bus", "virtserialport", "virtio-blk-device", "virtio-net-device",
}


def test_the_vm_has_exactly_the_devices_docs_name(airlock):
    """The device models are the boundary a guest attacks (a recent
    Firecracker CVE was in an opt-in virtio-pci transport): QEMU's own
    device tree of a running VM (QMP `info qtree`) holds exactly the set
    docs/security.md names, query-pci finds no PCI bus, and the guest sees
    the same: no PCI, seven virtio devices (console, NIC, its disk and four
    volume slots); a PCI rescan from the guest
    adds nothing. The control: the same QMP connection answers query-status
    (and the VM runs on with its node after)."""
    a = airlock
    sid = a.create("minimal")["id"]
    guest = ("ls /sys/bus/pci/devices 2>&1 | head -3; echo ---; "
             "for d in /sys/bus/virtio/devices/*; do cat $d/device; done; echo ---; "
             "echo 1 > /sys/bus/pci/rescan 2>&1; echo rescan-rc=$?; "
             "for d in /sys/bus/virtio/devices/*; do cat $d/device; done")
    before = a.exec(sid, ["sh", "-c", guest])["stdout"]
    answers, argv = _qmp_of_a_vm_without_its_node(a, sid, [
        {"execute": "query-status"},
        {"execute": "human-monitor-command", "arguments": {"command-line": "info qtree"}},
        {"execute": "query-pci"}])
    status, qtree, pci = answers
    assert status["return"]["status"] == "running", status  # the control
    text = qtree["return"]
    devices = set(re.findall(r"dev: ([\w-]+)", text)) | set(re.findall(r"bus: [\w.-]+\n\s+type ([\w-]+)", text))
    assert devices and devices <= DEVICE_SET, (sorted(devices - DEVICE_SET), text)
    assert {"virtio-serial-device", "virtio-blk-device", "virtio-net-device", "virtserialport"} <= devices, devices
    assert pci == {"return": []}, pci  # no PCI bus at all
    # and what QEMU was asked for is that set: no -device outside it
    asked = [argv[i + 1].split(",")[0] for i, v in enumerate(argv) if v == "-device"]
    assert set(asked) <= DEVICE_SET, asked
    # the guest's view: no PCI, console (3), block (2: its disk and the four
    # volume slots) and net (1) on virtio, and a rescan changes nothing
    parts = before.split("---")
    virtio = ["0x0001"] + ["0x0002"] * 5 + ["0x0003"]
    assert "No such file" in parts[0] or parts[0].strip() == "", before
    assert sorted(parts[1].split()) == virtio, before
    assert sorted(parts[2].split("rescan-rc=")[1].split()[1:]) == virtio, before
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
