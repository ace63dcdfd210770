"""The VMM jail (docs/security.md, "The VMM jail"): every QEMU runs under
its own uid in its own namespaces, on a private root, in a cgroup with
limits, and the node talks only to that very process on its sockets. Each
test looks from the host (/proc) or plays the attacker: it passes only if
the attack fails."""

import errno
import os
import pwd
import re
import socket
import subprocess
import threading
import time

import pytest

from harness import BUILD, TEMPLATES, ApiError, _cgroup_procs, kill_node, node_pids, qemu_pids

NAMESPACES = ("mnt", "pid", "ipc", "uts", "net")


def status_of(pid):
    with open(f"/proc/{pid}/status") as f:
        return {k: v.strip() for k, v in (line.split(":", 1) for line in f if ":" in line)}


def argv_of(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode().split("\0")


def run_dir_of(pid):
    """The VM's run dir, from its -qmp unix:RUN_DIR/vm/qmp.sock argument."""
    argv = argv_of(pid)
    qmp = argv[argv.index("-qmp") + 1]
    return os.path.dirname(os.path.dirname(qmp[len("unix:"):].split(",")[0]))


def disk_of(pid):
    """The host file behind the VM's disk link."""
    for arg in argv_of(pid):
        if arg.startswith("id=d0,file="):
            return os.path.realpath(arg[len("id=d0,file="):].split(",")[0])
    raise AssertionError(f"no disk in the command line of {pid}")


def cgroup_parents(a):
    """(version, [dirs]) of the VM cgroups this node makes, as nodemgr
    logged them at start ("vmm cgroups: v2, one cgroup per VM below
    /sys/fs/cgroup/x (...)", or v1 with a dir per controller)."""
    with open(a.log_path, errors="replace") as f:
        m = re.search(r"vmm cgroups: v([12]), one cgroup per VM below (.*?) \(", f.read())
    assert m, "the node logged no cgroup hierarchy: VMs would run without limits\n" + a.log_tail(80)
    return int(m.group(1)), m.group(2).split(" ")


def fs_type_of(path):
    """The file system type of the mount path is on (/proc/self/mountinfo)."""
    path = os.path.realpath(path)  # /sys/fs/cgroup/cpu may lead to cpu,cpuacct
    best, fstype = "", None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, post = line.split(" - ", 1)
            mnt = pre.split()[4]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, fstype = mnt, post.split()[0]
    return fstype


def vm_cgroup(a, pid, uid):
    """The VM's own cgroup dirs in the hierarchy the node uses (v2: one;
    v1: one per controller) and their limits, each checked to hold pid."""
    version, parents = cgroup_parents(a)
    dirs = [f"{p}/airlock-vm-{uid}" for p in parents]
    limits = {}
    for d in dirs:
        assert fs_type_of(d) == ("cgroup2" if version == 2 else "cgroup"), (version, d)
        assert str(pid) in _cgroup_procs(d), f"QEMU {pid} is not in {d}"
        for name in ("memory.max", "memory.limit_in_bytes", "pids.max", "cpu.max", "cpu.cfs_quota_us"):
            try:
                with open(os.path.join(d, name)) as f:
                    limits[name] = f.read().strip()
            except OSError:
                pass
    # and /proc agrees: in each hierarchy the node uses, that cgroup
    with open(f"/proc/{pid}/cgroup") as f:
        paths = [l.rstrip("\n").split(":", 2)[2] for l in f]
    assert sum(p.endswith(f"/airlock-vm-{uid}") for p in paths) == len(dirs), (paths, dirs)
    return dirs, limits


def wait_gone(dirs, timeout=10):
    deadline = time.monotonic() + timeout
    while any(os.path.exists(d) for d in dirs):
        assert time.monotonic() < deadline, f"VM cgroups left: {[d for d in dirs if os.path.exists(d)]}"
        time.sleep(0.05)


def test_every_vmm_is_jailed(airlock):
    a = airlock
    sids = [a.create("minimal")["id"] for _ in range(2)]
    pids = [qemu_pids(s)[0] for s in sids]
    node = node_pids(a.data_dir)[0]
    disks = [disk_of(p) for p in pids]
    uids = []
    cgroups = []
    for i, pid in enumerate(pids):
        st = status_of(pid)
        uid = {int(x) for x in st["Uid"].split()}
        gid = {int(x) for x in st["Gid"].split()}
        assert len(uid) == 1 and len(gid) == 1, st  # real, effective, saved, fs all alike
        assert uid != {0} and gid != {0}
        # no groups; under KVM at most /dev/kvm's (when it is not open to all)
        assert st["Groups"] in ("", str(os.stat("/dev/kvm").st_gid) if os.path.exists("/dev/kvm") else ""), st
        assert st["NoNewPrivs"] == "1"
        assert st["Seccomp"] == "2"
        assert int(st["CapEff"], 16) == 0 and int(st["CapPrm"], 16) == 0 and int(st["CapBnd"], 16) == 0
        uids.append(uid.pop())
        for ns in NAMESPACES:
            assert os.readlink(f"/proc/{pid}/ns/{ns}") != os.readlink(f"/proc/{node}/ns/{ns}"), ns
        # its root: what it runs and its own files, nothing else
        root = f"/proc/{pid}/root"
        # (a top directory the checkout itself lives under, like /tmp in a
        # CI clone, exists as the way to the VM's own mounts: see below)
        ours = (a.data_dir, TEMPLATES, BUILD)
        tops = [t for t in ("/root", "/home", "/var", "/tmp") if not any(p.startswith(t + "/") for p in ours)]
        for absent in ("/etc/shadow", "/etc/passwd", *tops,
                       a.data_dir + "/control/airlock.db", a.data_dir + "/control/admin.token", disks[1 - i]):
            assert not os.path.lexists(root + absent), absent
        for t in set(("/root", "/home", "/var", "/tmp")) - set(tops):  # only the way down to its mounts
            for dirpath, dirnames, filenames in os.walk(root + t):
                inner = dirpath[len(root):]
                assert any(p == inner or p.startswith(inner + "/") or inner.startswith(p + "/") for p in
                           (*ours, run_dir_of(pid), os.path.dirname(disk_of(pid)))), inner
                if any(inner.startswith(p + "/") or inner == p for p in (run_dir_of(pid),)):
                    dirnames[:] = []
        assert os.path.exists(root + "/usr/bin/qemu-system-x86_64") or os.path.exists(root + argv_of(pid)[0])
        assert sorted(os.listdir(root + "/dev")) in (["null", "random", "urandom", "zero"],
                                                      ["kvm", "null", "random", "urandom", "zero"])
        run_dir = run_dir_of(pid)
        assert sorted(os.listdir(root + run_dir)) == ["disk.img", "vm"]
        # cgroup limits, in the VM's own cgroup of the hierarchy the node uses
        cg_dirs, cg = vm_cgroup(a, pid, uids[-1])
        cgroups.append(cg_dirs)
        mem = int(cg.get("memory.max") or cg.get("memory.limit_in_bytes"))
        assert 256 << 20 < mem <= 1 << 30, cg
        assert cg["pids.max"] == "256"
        assert cg.get("cpu.max", "") == "100000 100000" or cg.get("cpu.cfs_quota_us") == "100000", cg
        # its network namespace holds its tap and loopback, nothing else
        # (lib/vmnet; the egress gateway serves the tap)
        with open(f"/proc/{pid}/net/dev") as f:
            devs = sorted(line.split(":")[0].strip() for line in f.readlines()[2:])
        assert devs == ["lo", "tap0"], devs
        # no fd open to anything unexpected: the tap's queue is the one device beyond the jail's
        taps = 0
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            taps += target == "/dev/net/tun"
            ok = (target.startswith(("socket:", "pipe:", "anon_inode:", "/memfd:airlock-template-ram"))
                  or target in ("/dev/null", "/dev/urandom", "/dev/random", "/dev/kvm", "/dev/net/tun")
                  or target.startswith(run_dir + "/"))
            assert ok, f"fd {fd} of {pid}: {target}"
        assert taps == 1, f"{taps} tap fds in {pid}"
    assert uids[0] != uids[1]
    for s in sids:  # and they work
        assert a.exec(s, ["echo", "ok"])["stdout"] == "ok\n"
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204
    for dirs in cgroups:  # the cgroups went with the VMs
        wait_gone(dirs)


CG_CLAIM_FRESH_S = 15  # lib/jail: an empty VM cgroup younger than this is another node's claim


def test_a_vm_cgroup_left_empty_goes_at_the_next_start(airlock_factory):
    """A VM that ends while airlock-nodemgr is down (killed, being
    restarted) leaves its cgroup: only nodemgr may remove it. The next
    nodemgr removes every empty VM cgroup of its uid range when it starts,
    once it is over a minute old (a younger one is another node's claim on
    its uid: its QEMU is about to join it, and it stays); one with a
    process in it stays (the control: a live VM's), and so does one
    outside the range; VMs start after it."""
    a = airlock_factory(prebuild="minimal")
    a.create("minimal")  # (the hierarchies are logged once a VM needs them)
    _, parents = cgroup_parents(a)
    a.stop()
    base = 2000000  # the default AIRLOCK_VMM_UID_BASE; the far end of its range
    empty = [f"{p}/airlock-vm-{base + 65000}" for p in parents]
    live = [f"{p}/airlock-vm-{base + 65001}" for p in parents]
    fresh = [f"{p}/airlock-vm-{base + 65002}" for p in parents]  # a claim made just now
    outside = [f"{p}/airlock-vm-{base - 1}" for p in parents]  # not ours to touch
    sleeper = None
    try:
        for d in empty + live + outside:
            os.mkdir(d)
        sleeper = subprocess.Popen(["sleep", "600"])
        for d in live:
            with open(os.path.join(d, "cgroup.procs"), "w") as f:
                f.write(str(sleeper.pid))
        # a leftover is one older than a claim (its ctime cannot be set back)
        made = max(os.stat(d).st_ctime for d in empty)
        time.sleep(max(0.0, made + CG_CLAIM_FRESH_S + 1 - time.time()))
        for d in fresh:
            os.mkdir(d)
        b = airlock_factory(prebuild="minimal")
        with open(b.log_path, errors="replace") as f:
            assert re.search(r"removed \d+ empty VM cgroups? left from before", f.read()), b.log_tail(40)
        assert not any(os.path.exists(d) for d in empty)
        for d in live:
            assert _cgroup_procs(d) == [str(sleeper.pid)], d
        assert all(os.path.isdir(d) for d in outside + fresh)
        sid = b.create("minimal")["id"]  # and VMs still start
        assert b.exec(sid, ["echo", "ok"])["stdout"] == "ok\n"
        assert b.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    finally:
        if sleeper:
            sleeper.kill()
            sleeper.wait()
        for d in empty + live + fresh + outside:
            for _ in range(200):
                try:
                    os.rmdir(d)
                except FileNotFoundError:
                    break
                except OSError:  # the killed sleeper is still leaving it
                    time.sleep(0.01)
                    continue
                break


def _open_as(uid, gid, paths):
    """What opening each of paths for reading gives a process of uid and
    gid (no other groups): "opened" or "denied" (EACCES, nothing else)."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        res = []
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            for how in paths:
                try:
                    os.close(os.open(how, os.O_RDONLY))
                    res.append("opened")
                except PermissionError as e:
                    res.append("denied" if e.errno == errno.EACCES else f"errno {e.errno}")
        finally:
            os.write(w, " ".join(res).encode())
            os._exit(0)
    os.close(w)
    got = os.read(r, 200).decode().split()
    os.close(r)
    os.waitpid(child, 0)
    return got


@pytest.mark.cases(2)  # by path, by the inode alone
def test_a_vmm_uid_cannot_open_another_vms_disk(airlock):
    """The first VM's uid opens the second VM's disk by its path (stopped
    by the node's 0700 sandbox directory) and by the inode alone (an fd
    opened with O_PATH, reopened through /proc: only the file's own 0660
    counts): EACCES both. The controls: the node's user opens it by its
    path, the second VM's own uid by the inode."""
    a = airlock
    sids = [a.create("minimal")["id"] for _ in range(2)]
    pids = [qemu_pids(s)[0] for s in sids]
    uid0 = int(status_of(pids[0])["Uid"].split()[0])
    uid1 = int(status_of(pids[1])["Uid"].split()[0])
    other = disk_of(pids[1])
    st = os.stat(other)
    # the VM's uid, the node's group (so that an unprivileged node can
    # reflink and remove it), nobody else: 0660 uid1:airlock-node
    node = pwd.getpwnam("airlock-node")
    assert st.st_uid == uid1 and st.st_mode & 0o007 == 0, oct(st.st_mode)
    assert st.st_gid == node.pw_gid and st.st_gid not in (uid0, uid1)
    opath = os.open(other, os.O_PATH)
    try:
        by_inode = f"/proc/self/fd/{opath}"
        assert _open_as(uid0, uid0, [other, by_inode]) == ["denied", "denied"]
        # the controls: those the file and its directory are for
        assert _open_as(node.pw_uid, node.pw_gid, [other]) == ["opened"]
        assert _open_as(uid1, uid1, [by_inode]) == ["opened"]
    finally:
        os.close(opath)
    # nor does it see the file in its root
    assert not os.path.lexists(f"/proc/{pids[0]}/root{other}")
    for s in sids:
        assert a.exec(s, ["echo", "ok"])["stdout"] == "ok\n"
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204


class Impostor:
    """A listener on a VMM socket's path that records what reaches it."""

    def __init__(self, path):
        os.unlink(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        os.chmod(path, 0o777)  # open to the (unprivileged) node: the peer check must stop it, not the mode
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.connections = 0
        self.received = b""
        self.stop = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            self.connections += 1
            # a QMP greeting and an airlock frame header's worth of bait
            try:
                c.sendall(b'{"QMP": {"version": {}, "capabilities": []}}\r\n')
            except OSError:
                pass
            c.settimeout(2)
            try:
                while True:
                    d = c.recv(65536)
                    if not d:
                        break
                    self.received += d
            except OSError:
                pass
            c.close()

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


def wait_running(a, sid, old_pid, timeout=180):
    """Waits until sid runs on a VM other than old_pid (it may read
    `failed` on the way: the take-over failed, the recovery is next),
    or the node reports the recovery failed."""
    deadline = time.monotonic() + timeout
    sbx = last = None
    while time.monotonic() < deadline:
        try:
            sbx = a.api("GET", f"/v1/sandboxes/{sid}")
        except (OSError, ApiError) as e:
            # the node may be restarting (502-504); any other answer fails at once
            if isinstance(e, ApiError) and e.status not in (502, 503, 504):
                raise
            last = e
            time.sleep(0.2)
            continue
        if sbx["state"] == "running" and qemu_pids(sid) and qemu_pids(sid) != [old_pid]:
            return sbx
        if sbx["state"] == "failed" and sbx.get("recoveries") and not sbx["recoveries"][-1]["ok"]:
            break
        time.sleep(0.2)
    raise AssertionError(f"sandbox {sid} was not recovered: {sbx} (last error: {last!r})\n{a.log_tail(80)}")


def impostor_test(a, sock_name):
    sid = a.create("minimal", env={"SECRET_TOKEN": "hunter2-do-not-leak"})["id"]
    pid = qemu_pids(sid)[0]
    uid_line = status_of(pid)["Uid"]
    cg_dirs, _ = vm_cgroup(a, pid, int(uid_line.split()[0]))
    path = os.path.join(run_dir_of(pid), "vm", sock_name)
    # the VM's socket path now leads to us; the node restarts and adopts
    imp = Impostor(path)
    try:
        kill_node(a)
        # the node came to us and was turned away before a single byte
        deadline = time.monotonic() + 30
        while imp.connections == 0:
            assert time.monotonic() < deadline, "the new node never connected\n" + a.log_tail(80)
            time.sleep(0.1)
        # the sandbox never ran on the impostor: it runs again as a new VM
        # (recovered from its disk, docs/security.md), with its env
        wait_running(a, sid, pid)
    finally:
        imp.close()
    assert imp.received == b"", imp.received
    # the peer check's own refusal, naming us (this process, root) and the VM
    refusal = f"refusing {path}: its listener (pid {os.getpid()} uid 0) is not this VM's QEMU (pid {pid} "
    assert refusal in a.log_tail(400), a.log_tail(80)
    out = a.exec(sid, ["sh", "-c", "echo $SECRET_TOKEN"])["stdout"]
    assert out == "hunter2-do-not-leak\n"
    # the adopted VM that was refused is gone, its cgroup with it (unless
    # the new VM got the freed uid, and with it the cgroup's name)
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}"):  # nodemgr reaps it
        assert time.monotonic() < deadline, f"the refused VM {pid} lives on"
        time.sleep(0.1)
    new_pid = qemu_pids(sid)[0]
    if status_of(new_pid)["Uid"] == uid_line:
        assert vm_cgroup(a, new_pid, int(uid_line.split()[0]))[0] == cg_dirs
    else:
        wait_gone(cg_dirs)
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_impostor_on_the_guest_socket_gets_nothing(airlock):
    impostor_test(airlock, "guest.sock")


def test_impostor_on_the_qmp_socket_gets_nothing(airlock):
    impostor_test(airlock, "qmp.sock")
