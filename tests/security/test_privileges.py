"""Privilege separation: only airlock-nodemgr holds root. airlockd started
as root becomes airlock-nodemgr, which runs the real airlockd as the system
user `airlock` and the node as `airlock-node`; a compromised control plane
can then reach neither root's files nor the node's storage, only its own
DATA_DIR/control; a compromised node reaches its storage and asks
airlock-nodemgr for the rest through a fixed, checked set of requests."""

import errno
import glob
import json
import os
import pwd
import socket
import stat
import subprocess

import pytest

from harness import AIRLOCKD


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(p))
    return out


def status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def exe_name(pid):
    return os.path.basename(os.readlink(f"/proc/{pid}/exe"))


def daemon_pid(a):
    pids = [p for p in children(a.proc.pid) if exe_name(p) == "airlockd"]
    assert len(pids) == 1, pids
    return pids[0]


def as_airlock(args):
    """Runs argv as the user airlockd runs as: what a compromised airlockd
    could do."""
    pw = pwd.getpwnam("airlock")

    def drop():
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)

    return subprocess.run(args, preexec_fn=drop, capture_output=True, text=True, timeout=30)


DENIED = ("Permission denied", "Operation not permitted")  # EACCES, EPERM as the tools print them


def assert_denied(r, args):
    """r (a run of args) failed for want of permission, not for a missing
    file, process or tool."""
    assert r.returncode != 0 and any(d in r.stderr for d in DENIED), (args, r.returncode, r.stderr)


def assert_root_may(args):
    """The control: root's same command succeeds (so the refusal above was
    the user's, not a bad path, pid or command)."""
    r = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, (args, r.returncode, r.stderr)


def test_api_process_runs_unprivileged(airlock):
    a = airlock
    assert exe_name(a.proc.pid) == "airlock-nodemgr"  # what airlockd became as root
    st = status(daemon_pid(a))
    uid = pwd.getpwnam("airlock").pw_uid
    assert st["Uid"].split() == [str(uid)] * 4
    assert "0" not in st["Gid"].split()
    assert st["Groups"].strip() == ""
    assert int(st["CapEff"], 16) == 0 and int(st["CapPrm"], 16) == 0
    assert st["NoNewPrivs"].strip() == "1"
    # and it serves: the whole API works through it
    sid = a.create("minimal")["id"]
    assert a.exec(sid, ["echo", "ok"])["stdout"] == "ok\n"
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def node_pid(a):
    pids = [p for p in children(a.proc.pid) if exe_name(p) == "airlock-node"]
    assert len(pids) == 1, pids
    return pids[0]


def test_node_runs_unprivileged(airlock):
    """airlock-node runs as airlock-node: no root, no capabilities, no
    groups but its own, no_new_privs; its VMs still start, serve and stop
    (through airlock-nodemgr)."""
    a = airlock
    node = pwd.getpwnam("airlock-node")
    st = status(node_pid(a))
    assert st["Uid"].split() == [str(node.pw_uid)] * 4
    assert st["Gid"].split() == [str(node.pw_gid)] * 4
    assert st["Groups"].strip() == ""
    assert int(st["CapEff"], 16) == 0 and int(st["CapPrm"], 16) == 0 and int(st["CapBnd"], 16) != 0
    assert st["NoNewPrivs"].strip() == "1"
    sid = a.create("minimal")["id"]
    assert a.exec(sid, ["echo", "ok"])["stdout"] == "ok\n"
    # the VM's disk: its uid, the node's group, nobody else
    recs = [[int(x) for x in open(p).read().split()[:3]]
            for p in glob.glob(os.path.join(a.data_dir, "**", "vmm.pid"), recursive=True)]
    live = [r for r in recs if os.path.exists(f"/proc/{r[0]}")]
    assert live
    # what a compromised node could try: root's files, the data dir, the
    # control plane, nodemgr, a VM (all another uid)
    pw = node

    def drop():
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)

    planted = os.path.join(a.data_dir, "planted")
    for args in (["cat", "/etc/shadow"], ["touch", planted],
                 ["cat", os.path.join(a.data_dir, "control", "admin.token")],
                 ["kill", "-0", str(a.proc.pid)], ["kill", "-0", str(daemon_pid(a))], ["kill", "-0", str(live[0][0])]):
        r = subprocess.run(args, preexec_fn=drop, capture_output=True, text=True, timeout=30)
        assert_denied(r, args)
        assert not os.path.exists(planted)
        assert_root_may(args)  # the pids are live, the paths there
        if os.path.exists(planted):
            os.unlink(planted)
    assert os.path.exists(f"/proc/{live[0][0]}")
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_control_plane_cannot_touch_what_is_not_its_own(airlock):
    a = airlock
    sid = a.create("minimal")["id"]
    d = os.stat(a.data_dir)
    assert d.st_uid == 0 and not d.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    # its own directory, private
    control = os.path.join(a.data_dir, "control")
    uid = pwd.getpwnam("airlock").pw_uid
    c = os.stat(control)
    # traversable (the node reads keys/public), not listable
    assert c.st_uid == uid and stat.S_IMODE(c.st_mode) == 0o711
    for f in ("admin.token", "airlock.db"):
        st = os.stat(os.path.join(control, f))
        assert st.st_uid == uid and not st.st_mode & 0o077, f
    # no way to replace the node's directories or plant files next to them
    planted = os.path.join(a.data_dir, "planted")
    args = ["touch", planted]
    assert_denied(as_airlock(args), args)
    assert not os.path.exists(planted)
    assert_root_may(args)
    os.unlink(planted)
    run = os.path.join(a.data_dir, "run")
    args = ["mv", run, run + ".old"]
    assert_denied(as_airlock(args), args)
    assert os.path.isdir(run) and not os.path.exists(run + ".old")
    # the control on a directory of root's beside it (the node's own run
    # directory is in use)
    scratch = os.path.join(a.data_dir, "scratch")
    os.mkdir(scratch)
    assert_root_may(["mv", scratch, scratch + ".old"])
    os.rmdir(scratch + ".old")
    # root's files stay root's
    args = ["cat", "/etc/shadow"]
    assert_denied(as_airlock(args), args)
    assert_root_may(args)
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_node_socket_is_only_for_airlockd(airlock):
    a = airlock
    path = os.path.join(a.data_dir, "run", "node.sock")
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_uid == 0
    assert st.st_gid == pwd.getpwnam("airlock").pw_gid
    # any other unprivileged user is refused by the file mode
    probe = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
             "try:\n s.connect(sys.argv[1]); print('connected')\nexcept OSError as e: print(e.errno)\n")
    nobody = pwd.getpwnam("nobody")

    def drop():
        os.setgroups([])
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)

    r = subprocess.run(["/usr/bin/python3", "-c", probe, path], preexec_fn=drop, capture_output=True, text=True,
                       timeout=30)
    assert r.stdout.strip() in ("13",), r.stdout + r.stderr  # EACCES
    # the control: airlockd's own user connects (its group may)
    airlock = pwd.getpwnam("airlock")

    def drop_to_airlock():
        os.setgroups([])
        os.setgid(airlock.pw_gid)
        os.setuid(airlock.pw_uid)

    r = subprocess.run(["/usr/bin/python3", "-c", probe, path], preexec_fn=drop_to_airlock, capture_output=True,
                       text=True, timeout=30)
    assert r.stdout.strip() == "connected", r.stdout + r.stderr
    assert a.request("GET", "/v1/sandboxes")[0] == 200


def test_privilege_separation_can_be_turned_off_only_explicitly(tmp_path, airlock_factory):
    """AIRLOCK_PRIVSEP=0 is the one way to keep airlockd root; without it a
    root start that cannot find airlock-nodemgr refuses to run rather than
    serve the API as root, and says why. The control: the same start with
    airlock-nodemgr there runs under it and serves."""
    env = dict(os.environ, AIRLOCK_NODEMGR_BINARY="/nonexistent/airlock-nodemgr")
    env.pop("AIRLOCK_PRIVSEP", None)
    r = subprocess.run([AIRLOCKD, "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "started as root, but cannot run /nonexistent/airlock-nodemgr: " \
        "No such file or directory (AIRLOCK_PRIVSEP=0 runs all as root)" in r.stderr, (r.returncode, r.stderr)
    assert not os.path.exists(tmp_path / "d")  # nothing was started or created
    a = airlock_factory(prebuild="minimal")
    assert exe_name(a.proc.pid) == "airlock-nodemgr" and status(daemon_pid(a))["Uid"].split()[0] == \
        str(pwd.getpwnam("airlock").pw_uid)
    assert a.request("GET", "/v1/sandboxes")[0] == 200


MGR_CLIENT = r"""
import json, socket, struct, sys
path, req = sys.argv[1], sys.argv[2].encode()
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(path)
except OSError as e:
    print(json.dumps({"connect_errno": e.errno})); sys.exit(0)
try:
    frame = struct.pack("<IBBHII", 0x314B4C41, 1, 80, 0, 0, len(req)) + req
    if len(sys.argv) > 3:  # with an fd (SCM_RIGHTS), opened for writing
        socket.send_fds(s, [frame], [__import__("os").open(sys.argv[3], 1)])
    else:
        s.sendall(frame)
except (BrokenPipeError, ConnectionResetError):  # refused before we were done
    print(json.dumps({"closed": 0})); sys.exit(0)
buf = b""
while True:
    try:
        k = s.recv(65536)
    except ConnectionResetError:  # closed with our request unread
        k = b""
    if not k:
        break
    buf += k
if len(buf) < 16:
    print(json.dumps({"closed": len(buf)})); sys.exit(0)
magic, ver, typ, _, _, n = struct.unpack("<IBBHII", buf[:16])
assert magic == 0x314B4C41 and typ == 81, (magic, typ)
print(buf[16:16 + n].decode())
"""


def mgr_request(a, req, user="airlock-node", fd_path=None):
    """One request to airlock-nodemgr as user (None: as root), with the
    file fd_path opened for writing as its fd."""
    path = os.path.join(a.data_dir, "run", "nodemgr.sock")
    drop = None
    if user:
        pw = pwd.getpwnam(user)

        def drop():
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)

    r = subprocess.run(["/usr/bin/python3", "-c", MGR_CLIENT, path, json.dumps(req)] + ([fd_path] if fd_path else []),
                       preexec_fn=drop,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def start_time(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def test_nodemgr_socket_serves_only_the_node_user(airlock):
    a = airlock
    path = os.path.join(a.data_dir, "run", "nodemgr.sock")
    st = os.stat(path)
    node = pwd.getpwnam("airlock-node")
    assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_uid == 0 and st.st_gid == node.pw_gid
    assert node.pw_uid != 0 and node.pw_uid != pwd.getpwnam("airlock").pw_uid
    assert mgr_request(a, {"op": "ping"}) == {"ok": True, "uid": node.pw_uid}
    # airlockd's user and nobody: the file mode; root (who passes any
    # mode): SO_PEERCRED, the connection is closed unanswered
    assert mgr_request(a, {"op": "ping"}, "airlock") == {"connect_errno": 13}
    assert mgr_request(a, {"op": "ping"}, "nobody") == {"connect_errno": 13}
    assert mgr_request(a, {"op": "ping"}, None) == {"closed": 0}
    # no shell, no op outside the fixed set, no stray keys
    for bad in ({"op": "exec", "argv": ["/bin/sh"]}, {"op": "ping", "x": 1}, {"op": "../ping"}, []):
        r = mgr_request(a, bad)
        assert r["error"]["errno"] == errno.EINVAL, (bad, r)
    # the control, after them all: the node's user is served
    assert mgr_request(a, {"op": "ping"}) == {"ok": True, "uid": node.pw_uid}


@pytest.mark.cases(6)  # nodemgr, airlockd, init; a uid outside the range; a reused pid; another VM's uid
def test_nodemgr_signals_only_vms(airlock):
    a = airlock
    base = 2000000
    # a real VM, for the controls: it passes the check (verify only: it keeps running)
    sid = a.create("minimal")["id"]
    recs = [[int(x) for x in open(p).read().split()[:3]]
            for p in glob.glob(os.path.join(a.data_dir, "**", "vmm.pid"), recursive=True)]
    recs = [r for r in recs if os.path.exists(f"/proc/{r[0]}")]
    assert recs, "no live vmm.pid"
    pid, st, uid = recs[0]

    def control():
        assert mgr_request(a, {"op": "vmm.verify", "pid": pid, "start_time": st, "uid": uid}) == {"ok": True}
        assert a.exec(sid, ["echo", "ok"])["stdout"] == "ok\n"

    def not_a_vm(r, pid, uid, err=errno.EPERM):
        assert r.get("error") == {"errno": err, "message": f"pid {pid} is not a VM with uid {uid}"}, (pid, r)

    # nodemgr itself, airlockd, init: not VMs, whatever uid the request claims
    for victim in (a.proc.pid, daemon_pid(a), 1):
        for op in ("vmm.signal", "vmm.verify"):
            req = {"op": op, "pid": victim, "start_time": start_time(victim), "uid": base}
            if op == "vmm.signal":
                req["signal"] = "kill"
            r = mgr_request(a, req)
            if victim == 1:  # refused by the request parser already
                assert r.get("error") == {"errno": errno.EINVAL, "message": "bad pid"}, r
            else:
                not_a_vm(r, victim, base)
        control()
    assert os.path.exists(f"/proc/{a.proc.pid}") and a.request("GET", "/v1/sandboxes")[0] == 200
    # a uid outside the VM range is refused before anything is looked at
    r = mgr_request(a, {"op": "vmm.signal", "pid": a.proc.pid, "start_time": start_time(a.proc.pid), "uid": 0,
                        "signal": "kill"})
    assert r["error"]["errno"] == errno.EINVAL, r
    control()
    # the same pid with another start time (a reused pid) or another VM uid: refused
    not_a_vm(mgr_request(a, {"op": "vmm.verify", "pid": pid, "start_time": st + 1, "uid": uid}), pid, uid,
             errno.ESRCH)
    control()
    other = uid + 1 if uid + 1 < base + 65536 else uid - 1
    not_a_vm(mgr_request(a, {"op": "vmm.signal", "pid": pid, "start_time": st, "uid": other, "signal": "kill"}),
             pid, other)
    control()
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_nodemgr_hands_out_only_the_nodes_files(airlock):
    a = airlock
    base = 2000000
    shadow = os.stat("/etc/shadow")
    for path in ("/etc/shadow", os.path.join(a.data_dir, "..", "..", "etc", "shadow"), a.data_dir,
                 os.path.join(a.data_dir, "control", "admin.token") + "/"):
        r = mgr_request(a, {"op": "file.give", "path": path, "uid": base, "mode": 0o600})
        assert r["error"]["errno"] == errno.EINVAL, (path, r)
    # under the data dir, but through a symlink (planted by root here; the
    # unprivileged node could plant one in its own storage)
    link = os.path.join(a.data_dir, "sandboxes", "evil")
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink("/etc", link)
    try:
        r = mgr_request(a, {"op": "file.give", "path": link + "/shadow", "uid": base, "mode": 0o600})
        assert r["error"]["errno"] == errno.ELOOP, r
        r = mgr_request(a, {"op": "file.give", "path": link, "uid": base, "mode": 0o700})
        assert r["error"]["errno"] == errno.ELOOP, r
    finally:
        os.unlink(link)
    # a file of someone else's under the data dir (airlockd's token): refused
    token = os.path.join(a.data_dir, "control", "admin.token")
    before = os.stat(token)
    r = mgr_request(a, {"op": "file.give", "path": token, "uid": base, "mode": 0o600})
    assert r.get("error") == {"errno": errno.EPERM, "message": f"{token} is not a VM file of the node"}, r
    after = os.stat(token)
    assert (after.st_uid, after.st_mode) == (before.st_uid, before.st_mode)
    # taking a file back, or running a build step, from outside: refused
    r = mgr_request(a, {"op": "file.reclaim", "path": "/etc/shadow", "mode": 0o644})
    assert r["error"]["errno"] == errno.EINVAL, r
    s2 = os.stat("/etc/shadow")
    assert (s2.st_uid, s2.st_gid, s2.st_mode) == (shadow.st_uid, shadow.st_gid, shadow.st_mode)
    for name, err in (("../../../bin/sh", errno.EINVAL), ("x;sh", errno.EINVAL), ("nosuch", errno.ENOENT)):
        r = mgr_request(a, {"op": "template.step", "step": "rootfs", "name": name, "dir": a.data_dir + "/sandboxes",
                            "out": "r.img", "kernel_dir": ""}, fd_path="/dev/null")
        assert r["error"]["errno"] == err, (name, r)
    assert not os.path.exists(a.data_dir + "/sandboxes/r.img")
    # the control: a file of the node's own is handed to a VM uid, and taken back
    node = pwd.getpwnam("airlock-node")
    mine = os.path.join(a.data_dir, "sandboxes", "node-file")
    with open(mine, "wb") as f:
        f.write(b"x")
    os.chown(mine, node.pw_uid, node.pw_gid)
    try:
        assert mgr_request(a, {"op": "file.give", "path": mine, "uid": base, "mode": 0o600}) == {"ok": True}
        st = os.stat(mine)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (base, node.pw_gid, 0o600), st
        assert mgr_request(a, {"op": "file.reclaim", "path": mine, "mode": 0o640}) == {"ok": True}
        st = os.stat(mine)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (node.pw_uid, 0o640), st
    finally:
        os.unlink(mine)


def test_privsep_off_still_runs_jailed_vms(airlock_factory):
    """AIRLOCK_PRIVSEP=0 (development): no airlock-nodemgr, the root node
    jails its VMs itself (with airlockd's umask 077 inherited)."""
    a = airlock_factory(env={"AIRLOCK_PRIVSEP": "0"}, prebuild="minimal")
    assert exe_name(a.proc.pid) == "airlockd"
    assert not os.path.exists(os.path.join(a.data_dir, "run", "nodemgr.sock"))
    sid = a.create("minimal")["id"]
    assert a.exec(sid, ["echo", "ok"])["stdout"] == "ok\n"
    recs = [[int(x) for x in open(p).read().split()[:3]]
            for p in glob.glob(os.path.join(a.data_dir, "**", "vmm.pid"), recursive=True)]
    live = [r for r in recs if os.path.exists(f"/proc/{r[0]}")]
    assert live and all(r[2] >= 2000000 for r in live)
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
