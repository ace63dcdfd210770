"""Node-level behaviour: templates, health, storage set-up, restarts."""

import os
import subprocess
import tempfile

from harness import mounts_under


def test_templates_and_health(airlock):
    status, _, body = airlock.request("GET", "/v1/health", auth=False)
    assert status == 200
    tpls = {t["name"]: t for t in airlock.api("GET", "/v1/templates")["templates"]}
    assert tpls["minimal"]["state"] == "ready"
    assert tpls["python"]["state"] == "ready"
    st = os.stat(os.path.join(airlock.data_dir, "control", "admin.token"))
    assert st.st_mode & 0o777 == 0o600


def test_loop_volume_when_data_dir_cannot_reflink(airlock_factory):
    """A data dir on ext4 gets a btrfs loop volume, unmounted at shutdown.
    The ext4 is a file system of its own (a loop image), whatever /var/tmp
    is: on btrfs or xfs the test would otherwise check nothing of this."""
    base = tempfile.mkdtemp(prefix="airlock-ext4-", dir="/var/tmp")
    img = base + ".img"
    a = None
    mounted = False
    try:
        with open(img, "wb") as f:
            f.truncate(8 << 30)  # sparse
        subprocess.run(["mkfs.ext4", "-q", "-F", img], check=True, capture_output=True)
        subprocess.run(["mount", "-o", "loop", img, base], check=True)
        mounted = True
        os.chmod(base, 0o755)  # airlockd (user airlock) passes through to its data dir
        fs = subprocess.run(["stat", "-f", "-c", "%T", base], capture_output=True, text=True).stdout.strip()
        assert fs == "ext2/ext3", fs  # what stat calls ext4
        a = airlock_factory(base=base, env={"AIRLOCK_VOLUME_GIB": "4"}, prebuild="minimal")
        assert os.path.exists(os.path.join(a.data_dir, "volume.btrfs"))
        assert mounts_under(a.data_dir)
        sid = a.create("minimal")["id"]
        assert a.exec(sid, ["echo", "ok"])["stdout"] == "ok\n"
        a.stop()
        assert mounts_under(a.data_dir) == []
    finally:
        if a:
            a.stop()  # before the unmount, also when the test failed
        if mounted:
            subprocess.run(["umount", base], check=True)
        subprocess.run(["rm", "-rf", "--one-file-system", base, img])


def test_superseded_template_builds_are_removed(airlock_factory):
    """A build of a template under another hash (an older agent or recipe)
    is removed once the current one is ready; other names are left alone."""
    from harness import TEMPLATES
    stale = os.path.join(TEMPLATES, "minimal-" + "0" * 32)
    other = os.path.join(TEMPLATES, "minimal-notahash")
    os.makedirs(stale)
    open(stale + ".lock", "w").close()
    os.makedirs(other)
    try:
        airlock_factory(prebuild="minimal")
        assert not os.path.exists(stale)
        assert not os.path.exists(stale + ".lock")
        assert os.path.isdir(other)
    finally:
        subprocess.run(["rm", "-rf", stale, stale + ".lock", other])


def test_new_templates_dir_is_made_and_built_into(airlock_factory):
    """AIRLOCK_TEMPLATES_DIR naming a directory that does not exist yet:
    the stack makes it, hands it to the node and builds into it (airlock-
    nodemgr once registered it as a root before it existed, and refused
    every build step in it). Control: the template builds and runs."""
    from harness import TEMPLATES
    fresh = tempfile.mktemp(prefix="templates-new-", dir=os.path.dirname(TEMPLATES))
    a = None
    try:
        a = airlock_factory(env={"AIRLOCK_TEMPLATES_DIR": fresh}, prebuild="minimal")
        st = os.stat(fresh)
        assert st.st_uid != 0  # the node's, not root's
        assert any(n.startswith("minimal-") for n in os.listdir(fresh))
        sid = a.create("minimal")["id"]
        assert a.exec(sid, ["echo", "ok"])["stdout"] == "ok\n"
        assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
        assert "bad dir" not in a.log_tail(2000)
    finally:
        if a:
            a.stop()  # before its templates go
        subprocess.run(["rm", "-rf", fresh])
