"""Privilege separation: the API process never holds root. airlockd started
as root becomes airlock-nodemgr, which runs the real airlockd as the system
user `airlock`; a compromised control plane can then reach neither root's
files nor the node's storage, only its own DATA_DIR/control."""

import os
import pwd
import socket
import stat
import subprocess

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


def test_control_plane_cannot_touch_what_is_not_its_own(airlock):
    a = airlock
    sid = a.create("minimal")["id"]
    d = os.stat(a.data_dir)
    assert d.st_uid == 0 and not d.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    # its own directory, private
    control = os.path.join(a.data_dir, "control")
    uid = pwd.getpwnam("airlock").pw_uid
    c = os.stat(control)
    assert c.st_uid == uid and stat.S_IMODE(c.st_mode) == 0o700
    for f in ("admin.token", "airlock.db"):
        st = os.stat(os.path.join(control, f))
        assert st.st_uid == uid and not st.st_mode & 0o077, f
    # no way to replace the node's directories or plant files next to them
    r = as_airlock(["touch", os.path.join(a.data_dir, "planted")])
    assert r.returncode != 0 and "Permission denied" in r.stderr
    r = as_airlock(["mv", os.path.join(a.data_dir, "run"), os.path.join(a.data_dir, "run.old")])
    assert r.returncode != 0
    # root's files stay root's
    r = as_airlock(["cat", "/etc/shadow"])
    assert r.returncode != 0
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


def test_privilege_separation_can_be_turned_off_only_explicitly(tmp_path):
    """AIRLOCK_PRIVSEP=0 is the one way to keep airlockd root; without it a
    root start that cannot find airlock-nodemgr refuses to run rather than
    serve the API as root."""
    env = dict(os.environ, AIRLOCK_NODEMGR_BINARY="/nonexistent/airlock-nodemgr")
    env.pop("AIRLOCK_PRIVSEP", None)
    r = subprocess.run([AIRLOCKD, "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "airlock-nodemgr" in r.stderr
    assert not os.path.exists(tmp_path / "d")  # nothing was started or created


def test_without_privilege_separation_everything_still_works(airlock_factory):
    """AIRLOCK_PRIVSEP=0 (development): airlockd stays root and spawns the
    node itself, and sandboxes run (the node sets its own umask: airlockd's
    077 must not reach the jail's private root)."""
    a = airlock_factory(env={"AIRLOCK_PRIVSEP": "0"}, prebuild="minimal")
    assert exe_name(a.proc.pid) == "airlockd"
    assert status(a.proc.pid)["Uid"].split()[0] == "0"
    sid = a.create("minimal")["id"]
    assert a.exec(sid, ["echo", "ok"])["stdout"] == "ok\n"
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
