"""A hostile guest: whatever code runs inside a sandbox, it must not hurt
the host or a neighbour sandbox, and its VMM must stay confined."""

import os

from harness import qemu_pids


def _status(pid):
    with open(f"/proc/{pid}/status") as f:
        return dict(line.split(":", 1) for line in f if ":" in line)


def test_fork_bomb_stays_inside(airlock):
    a = airlock
    victim = a.create("minimal")["id"]
    neighbour = a.create("minimal")["id"]
    # a classic fork bomb, bounded by the exec timeout
    a.exec(victim, ["sh", "-c", "b() { b | b & }; b"], timeout_s=5)
    assert a.exec(neighbour, ["echo", "fine"])["stdout"] == "fine\n"
    for s in (victim, neighbour):
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204


def test_memory_hog_is_the_guests_problem(airlock):
    a = airlock
    victim = a.create("minimal")["id"]
    neighbour = a.create("minimal")["id"]
    pid = qemu_pids(victim)[0]
    # ask for far more than the VM has: the guest's OOM killer answers
    a.exec(victim, ["sh", "-c", "head -c 2000000000 /dev/zero | tail > /dev/null"], timeout_s=60)
    rss_kib = int(_status(pid)["VmRSS"].split()[0])
    assert rss_kib < 600 * 1024  # bounded by the VM's 256 MiB, plus QEMU's own
    assert a.exec(neighbour, ["echo", "fine"])["stdout"] == "fine\n"
    for s in (victim, neighbour):
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204


def test_disk_fill_stops_at_the_sandbox_disk(airlock):
    a = airlock
    victim = a.create("minimal")["id"]
    neighbour = a.create("minimal")["id"]
    image = os.path.join(a.data_dir, "sandboxes", victim, "rootfs.img")
    size = os.stat(image).st_size
    r = a.exec(victim, ["sh", "-c", "dd if=/dev/zero of=/root/fill bs=1M 2>&1; sync; echo done"], timeout_s=120)
    assert "done" in r["stdout"]
    st = os.stat(image)
    assert st.st_size == size  # the image never grows past its size
    assert st.st_blocks * 512 <= size + (1 << 20)
    a.exec(neighbour, ["sh", "-c", "echo ok > /root/f; sync"])
    assert a.exec(neighbour, ["cat", "/root/f"])["stdout"] == "ok\n"
    for s in (victim, neighbour):
        assert a.request("DELETE", f"/v1/sandboxes/{s}")[0] == 204


def test_vmm_is_confined_by_seccomp_and_no_new_privs(airlock):
    sid = airlock.create("minimal")["id"]
    st = _status(qemu_pids(sid)[0])
    assert st["NoNewPrivs"].strip() == "1"
    assert st["Seccomp"].strip() == "2"
    assert airlock.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_guest_cannot_reach_the_host_through_symlinks(airlock):
    """A symlink in the guest names a guest path: reading it through the
    files API returns guest content, never the host's."""
    a = airlock
    sid = a.create("minimal")["id"]
    with open("/etc/hostname") as f:
        host_name = f.read().strip()
    a.exec(sid, ["sh", "-c", "ln -s /etc/hostname /root/link; ln -s /../../../../etc/hostname /root/up"])
    for p in ("/root/link", "/root/up"):
        got = a.get_file(sid, p).decode().strip()
        assert got == sid and got != host_name
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
