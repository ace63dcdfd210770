"""Volumes (docs/volumes.md): named, sized disks that outlive sandboxes. A
volume is a block device in the guest, mounted by the agent where the
create asked; read-write to one sandbox at a time, read-only to many; it
comes back mounted after pause, stop/start and a disk rollback (which does
not roll it back), goes back to the store when its sandbox is deleted, and
is deleted only when no sandbox holds it. Every bad input is a clear 4xx
that leaves nothing half-made."""

import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import urllib.parse

from harness import ApiError, kill_node, node_pids, qemu_pids, wait_for
from test_recovery import wait_state


def sh(a, sid, script):
    r = a.exec(sid, ["sh", "-c", script])
    return r["exit_code"], r["stdout"], r["stderr"]


def read(a, sid, path):
    code, out, err = sh(a, sid, f"cat {path}")
    assert code == 0, (path, out, err)
    return out


def refused(a, status, method, path, body, *words, token=None):
    """The request is refused with status and a message naming words."""
    got, _, data = a.request(method, path, body, token=token)
    assert got == status, (method, path, body, got, data)
    msg = json.loads(data)["error"]["message"]
    for w in words:
        assert w in msg, (w, msg)
    return msg


def sandbox_ids(a):
    return {s["id"] for s in a.api("GET", "/v1/sandboxes")["sandboxes"]}


def test_volume_lifecycle_cli_and_api(airlock_factory):
    a = airlock_factory(prebuild="minimal")
    # made with the CLI, seen through the API
    r = a.cli("volume", "create", "ws", "--size", "64M")
    assert r.returncode == 0 and r.stdout.decode().strip() == "ws", r
    vol = a.api("GET", "/v1/volumes/ws")
    assert vol["id"].startswith("vol-") and vol["size"] == 64 << 20 and vol["held_by"] == []
    assert a.api("GET", f"/v1/volumes/{vol['id']}")["name"] == "ws"

    # bad input: 4xx with what was wrong, and nothing made
    before = sandbox_ids(a)
    refused(a, 400, "POST", "/v1/volumes", {"name": "x", "size": "lots"}, "size")
    refused(a, 400, "POST", "/v1/volumes", {"name": "x", "size": 4096}, "16M")
    refused(a, 400, "POST", "/v1/volumes", {"name": "../x", "size": "1G"}, "name")
    refused(a, 409, "POST", "/v1/volumes", {"name": "ws", "size": "1G"}, "ws")
    refused(a, 409, "POST", "/v1/volumes", {"name": "huge", "size": "2000G"}, "quota")
    refused(a, 400, "POST", "/v1/sandboxes",
            {"template": "minimal", "volumes": [{"name": "ws", "path": "/etc"}]}, "/etc")
    refused(a, 400, "POST", "/v1/sandboxes",
            {"template": "minimal", "volumes": [{"name": "ws", "path": "/"}]}, "path")
    refused(a, 400, "POST", "/v1/sandboxes",
            {"template": "minimal", "volumes": [{"name": "ws", "path": "/w", "mode": "rw"}]}, "volumes[0]")
    refused(a, 404, "POST", "/v1/sandboxes",
            {"template": "minimal", "volumes": [{"name": "nosuch", "path": "/w"}]}, "nosuch")
    assert [v["name"] for v in a.api("GET", "/v1/volumes")["volumes"]] == ["ws"]
    assert sandbox_ids(a) == before

    # mounted where asked; what is written there stays
    r = a.cli("create", "--template", "minimal", "--volume", "ws:/workspace")
    assert r.returncode == 0, r
    sid = r.stdout.decode().strip()
    code, out, _ = sh(a, sid, "grep ' /workspace ' /proc/mounts && echo hello > /workspace/hello")
    assert code == 0 and "ext4" in out, out
    assert a.api("GET", f"/v1/sandboxes/{sid}")["volumes"] == [
        {"id": vol["id"], "path": "/workspace", "read_only": False}]
    assert [h["sandbox_id"] for h in a.api("GET", "/v1/volumes/ws")["held_by"]] == [sid]

    # read-write to one sandbox at a time; held volumes are not deleted
    before = sandbox_ids(a)
    refused(a, 409, "POST", "/v1/sandboxes",
            {"template": "minimal", "volumes": [{"name": "ws", "path": "/w"}]}, "in use", sid)
    refused(a, 409, "POST", "/v1/sandboxes",
            {"template": "minimal", "volumes": [{"name": "ws", "path": "/w", "read_only": True}]}, "in use")
    refused(a, 409, "DELETE", "/v1/volumes/ws", None, sid)
    assert sandbox_ids(a) == before

    # pause/resume and stop/start: mounted again, content kept
    for verb in ("pause", "resume", "stop", "start"):
        a.api("POST", f"/v1/sandboxes/{sid}/{verb}?wait=true")
    assert read(a, sid, "/workspace/hello") == "hello\n"
    # a disk rollback boots the snapshot's disk: the volume is not rolled back
    snap = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "disk"}, expect=201)
    sh(a, sid, "echo after > /workspace/after && echo after > /root/after && sync")
    a.api("POST", f"/v1/sandboxes/{sid}/rollback?wait=true", {"snapshot": snap["id"]})
    assert read(a, sid, "/workspace/after") == "after\n"
    code, _, _ = sh(a, sid, "test -e /root/after")
    assert code != 0  # the rootfs was rolled back
    # a full snapshot takes the volumes of its instant along: its memory has
    # them mounted, so a rollback to it puts them back too (a running
    # process and the file system as they were, and writable after)
    sh(a, sid, "echo 1 > /workspace/v && sync")
    full = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"}, expect=201)
    assert full["kind"] == "full"
    sh(a, sid, "echo 2 > /workspace/v && echo later > /workspace/later && sync")
    a.api("POST", f"/v1/sandboxes/{sid}/rollback?wait=true", {"snapshot": full["id"]})
    assert read(a, sid, "/workspace/v") == "1\n"
    # and what the disk holds, not only what the restored memory cached:
    # the file system consistent (e2fsck on the node's copy while the
    # sandbox is stopped), and a start mounts it afresh
    a.api("POST", f"/v1/sandboxes/{sid}/stop?wait=true")
    copies = glob.glob(os.path.join(a.data_dir, "**", "sandboxes", sid, "volumes", "0.img"), recursive=True)
    assert len(copies) == 1, copies
    fsck = subprocess.run(["e2fsck", "-fn", copies[0]], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    a.api("POST", f"/v1/sandboxes/{sid}/start?wait=true")
    assert read(a, sid, "/workspace/v") == "1\n"
    code, _, _ = sh(a, sid, "test -e /workspace/later")
    assert code != 0
    code, _, err = sh(a, sid, "echo 3 > /workspace/v && cat /workspace/v")
    assert code == 0, err
    # a fork shares read-only volumes only: one writer at a time
    msg = refused(a, 409, "POST", f"/v1/sandboxes/{sid}/fork?wait=true", {}, "read-write", vol["id"])
    # an archive or an image would carry the sandbox's memory elsewhere,
    # mounted volumes and all: they do not carry volumes (a disk
    # snapshot's export is its rootfs, and goes)
    refused(a, 409, "DELETE", f"/v1/sandboxes/{sid}?keep_snapshots=true", None, "volumes")
    refused(a, 409, "POST", f"/v1/sandboxes/{sid}/images", {}, "publish", "volumes")
    refused(a, 409, "POST", f"/v1/sandboxes/{sid}/images", {"snapshot": full["id"]}, "full snapshot", "volumes")
    img = a.api("POST", f"/v1/sandboxes/{sid}/images", {"snapshot": snap["id"]}, expect=201)
    assert img["kind"] == "disk", img
    a.api("DELETE", f"/v1/images/{img['id']}", expect=204)
    assert a.api("GET", f"/v1/sandboxes/{sid}")["state"] == "running", msg
    # a suspend puts the volume back in the node's store, still held by the
    # sandbox: nobody else may write it or delete it meanwhile, and the
    # wake mounts it again in the memory that has it mounted (unsynced
    # writes included: the suspend syncs)
    sh(a, sid, "echo unsynced > /workspace/s")
    op = a.api("POST", f"/v1/sandboxes/{sid}/suspend?wait=true")
    assert op["state"] == "succeeded", op
    assert a.api("GET", f"/v1/sandboxes/{sid}")["state"] == "suspended"
    refused(a, 409, "POST", "/v1/sandboxes",
            {"template": "minimal", "volumes": [{"name": "ws", "path": "/w"}]}, "in use", sid)
    refused(a, 409, "DELETE", "/v1/volumes/ws", None, sid)
    op = a.api("POST", f"/v1/sandboxes/{sid}/wake?wait=true")
    assert op["state"] == "succeeded", op
    assert read(a, sid, "/workspace/s") == "unsynced\n"
    # what the disk under the memory holds, not only the memory's cache
    code, out, err = sh(a, sid, "echo 3 > /proc/sys/vm/drop_caches && cat /workspace/v /workspace/s && "
                        "echo woken > /workspace/w")
    assert code == 0 and out == "3\nunsynced\n", (out, err)
    # and woken from the object store's image (the node's copy gone): the
    # image names its volumes, their slots and paths
    op = a.api("POST", f"/v1/sandboxes/{sid}/suspend?wait=true")
    assert op["state"] == "succeeded", op
    wait_for(lambda: a.api("GET", f"/v1/sandboxes/{sid}").get("image_uploaded"), "not uploaded", a)
    copy = os.path.join(a.data_dir, "sandboxes", sid, "suspend")
    wait_for(lambda: os.path.exists(os.path.join(copy, "uploaded")), "not marked uploaded", a)
    shutil.rmtree(copy)
    op = a.api("POST", f"/v1/sandboxes/{sid}/wake?wait=true")
    assert op["state"] == "succeeded", op
    assert read(a, sid, "/workspace/w") == "woken\n"
    assert a.api("GET", f"/v1/sandboxes/{sid}")["volumes"] == [
        {"id": vol["id"], "path": "/workspace", "read_only": False}]

    # a snapshot of the volume is a new volume with its content
    r = a.cli("volume", "snapshot", "ws", "--name", "ws-copy")
    assert r.returncode == 0 and r.stdout.decode().strip() == "ws-copy", r
    assert a.api("GET", "/v1/volumes/ws-copy")["source_id"] == vol["id"]

    # the sandbox goes, the volume stays with what it wrote: a write not
    # synced yet too (ext4 commits every 5 s; the delete comes before)
    sh(a, sid, "echo last > /workspace/last")
    r = a.cli("rm", sid)
    assert r.returncode == 0, r
    assert a.api("GET", "/v1/volumes/ws")["held_by"] == []
    ro = [a.create(volumes=[{"name": "ws", "path": "/data", "read_only": True}])["id"] for _ in range(2)]
    for s in ro:
        assert read(a, s, "/data/hello") == "hello\n"
        assert read(a, s, "/data/last") == "last\n"
        code, _, err = sh(a, s, "echo x > /data/x")
        assert code != 0 and "Read-only" in err, err
    refused(a, 409, "POST", "/v1/sandboxes",
            {"template": "minimal", "volumes": [{"name": "ws", "path": "/w"}]}, "read-only")
    # a fork of a read-only holder holds the volume too, mounted where its
    # parent's memory has it, and keeps it when the parent goes
    sh(a, ro[0], "cat /data/hello > /dev/null")  # in the parent's page cache
    op = a.api("POST", f"/v1/sandboxes/{ro[0]}/fork?wait=true", {})
    assert op["state"] == "succeeded", op
    child = op["result"]["sandbox"]["id"]
    assert a.api("GET", f"/v1/sandboxes/{child}")["volumes"] == [
        {"id": vol["id"], "path": "/data", "read_only": True}]
    assert child in [h["sandbox_id"] for h in a.api("GET", "/v1/volumes/ws")["held_by"]]
    a.api("DELETE", f"/v1/sandboxes/{ro[0]}", expect=204)
    ro = ro[1:] + [child]
    assert read(a, child, "/data/hello") == "hello\n"
    code, _, err = sh(a, child, "echo 3 > /proc/sys/vm/drop_caches && cat /data/v && echo x > /data/x")
    assert code != 0 and "Read-only" in err, err
    refused(a, 409, "DELETE", "/v1/volumes/ws", None, "holds it")
    copy = a.create(volumes=[{"name": "ws-copy", "path": "/copy"}])["id"]
    assert read(a, copy, "/copy/hello") == "hello\n"
    code, _, _ = sh(a, copy, "test -e /copy/after")
    assert code == 0  # taken after it was written
    assert read(a, copy, "/copy/v") == "3\n"  # and after the rollback
    assert read(a, copy, "/copy/w") == "woken\n"  # and after the wake

    # CLI listing and deletion once nothing holds it
    r = a.cli("volume", "ls")
    assert r.returncode == 0 and "ws-copy" in r.stdout.decode(), r
    for s in ro + [copy]:
        a.api("DELETE", f"/v1/sandboxes/{s}", expect=204)
    r = a.cli("volume", "rm", "ws")
    assert r.returncode == 0, r
    a.api("DELETE", "/v1/volumes/ws-copy", expect=204)
    assert a.api("GET", "/v1/volumes")["volumes"] == []
    refused(a, 404, "DELETE", "/v1/volumes/ws", None, "ws")


def test_volumes_are_their_tenants(airlock_factory):
    a = airlock_factory(prebuild="minimal")
    keys = {}
    for name in ("alpha", "beta"):
        t = a.api("POST", "/v1/tenants", {"name": name}, expect=201)
        keys[name] = a.api("POST", f"/v1/tenants/{t['id']}/keys", {"name": f"{name}-ci"}, expect=201)["key"]
    va = a.api("POST", "/v1/volumes", {"name": "data", "size": "32M"}, expect=201, token=keys["alpha"])
    # beta may use the same name: names are per owner
    vb = a.api("POST", "/v1/volumes", {"name": "data", "size": "32M"}, expect=201, token=keys["beta"])
    assert va["id"] != vb["id"]
    assert [v["id"] for v in a.api("GET", "/v1/volumes", token=keys["beta"])["volumes"]] == [vb["id"]]
    # another tenant's volume does not exist for beta, by id or in a create
    refused(a, 404, "GET", f"/v1/volumes/{va['id']}", None, va["id"], token=keys["beta"])
    refused(a, 404, "DELETE", f"/v1/volumes/{va['id']}", None, va["id"], token=keys["beta"])
    before = sandbox_ids(a)
    refused(a, 404, "POST", "/v1/sandboxes",
            {"template": "minimal", "volumes": [{"name": va["id"], "path": "/d"}]}, va["id"], token=keys["beta"])
    assert sandbox_ids(a) == before
    # the control: alpha's own works, and the admin sees both
    sid = a.api("POST", "/v1/sandboxes", {"template": "minimal", "volumes": [{"name": "data", "path": "/d"}]},
                expect=201, token=keys["alpha"])["id"]
    assert a.api("GET", f"/v1/sandboxes/{sid}", token=keys["alpha"])["volumes"][0]["id"] == va["id"]
    assert {v["id"] for v in a.api("GET", "/v1/volumes")["volumes"]} == {va["id"], vb["id"]}
    a.api("DELETE", f"/v1/sandboxes/{sid}", expect=204, token=keys["alpha"])
    for key, v in ((keys["alpha"], va), (keys["beta"], vb)):
        a.api("DELETE", f"/v1/volumes/{v['id']}", expect=204, token=key)
    try:
        a.api("GET", f"/v1/volumes/{va['id']}")
        raise AssertionError("deleted volume still there")
    except ApiError as e:
        assert e.status == 404


def test_volumes_survive_a_node_restart_and_a_vmm_crash(airlock_factory):
    """A node killed with SIGKILL: the next one adopts the VM with its
    volume mounted and writable, and still counts it as the volume's
    writer. A VMM that dies: recovery boots the disk with the volume
    mounted again, holding every write the guest synced."""
    a = airlock_factory(prebuild="minimal")
    vol = a.api("POST", "/v1/volumes", {"name": "ws", "size": "32M"}, expect=201)
    sid = a.create(volumes=[{"name": "ws", "path": "/workspace"}])["id"]
    sh(a, sid, "echo one > /workspace/f && sync")
    vm = qemu_pids(sid)
    assert len(vm) == 1
    kill_node(a)
    sbx = wait_state(a, sid, "running")
    assert sbx["execution"] == 1 and qemu_pids(sid) == vm  # adopted, not booted again
    assert sbx["volumes"] == [{"id": vol["id"], "path": "/workspace", "read_only": False}]
    assert read(a, sid, "/workspace/f") == "one\n"
    code, _, err = sh(a, sid, "echo two > /workspace/f && sync")
    assert code == 0, err
    # the new node knows the writer: a second one is refused, naming it
    refused(a, 409, "POST", "/v1/sandboxes",
            {"template": "minimal", "volumes": [{"name": "ws", "path": "/w"}]}, "in use", sid)

    os.kill(vm[0], signal.SIGKILL)
    sbx = wait_state(a, sid, "running", execution=2)
    assert sbx["recoveries"][-1]["ok"] is True, sbx
    code, out, _ = sh(a, sid, "grep ' /workspace ' /proc/mounts")
    assert code == 0 and "ext4" in out, out  # mounted by the agent in the new boot
    assert read(a, sid, "/workspace/f") == "two\n"
    a.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)
    # what it wrote went back to the store with the delete
    other = a.create(volumes=[{"name": "ws", "path": "/w", "read_only": True}])["id"]
    assert read(a, other, "/w/f") == "two\n"
    a.api("DELETE", f"/v1/sandboxes/{other}", expect=204)
    a.api("DELETE", "/v1/volumes/ws", expect=204)


def test_a_delete_cut_off_by_a_node_kill_is_finished(airlock_factory):
    """The node killed in the middle of a delete, once the VM is gone and
    the volume back in the store, while it removes the sandbox's
    directory (the soak's fault that found this): the next node finishes
    the removal rather than taking the half-removed sandbox for one to
    recover; the delete, asked again, is done; the volume holds what the
    guest synced and serves the next sandbox."""
    # where the node (unprivileged) can see it
    release = tempfile.mktemp(prefix="release-", dir=os.environ["AIRLOCK_TEST_VOLUME"])
    a = airlock_factory(prebuild="minimal", env={"AIRLOCK_TEST_HOLD": "delete.renamed",
                                                 "AIRLOCK_TEST_HOLD_RELEASE": release})
    a.api("POST", "/v1/volumes", {"name": "ws", "size": "32M"}, expect=201)
    sid = a.create(volumes=[{"name": "ws", "path": "/workspace"}])["id"]
    sh(a, sid, "echo kept > /workspace/f && sync")
    old = node_pids(a.data_dir)
    t = threading.Thread(target=lambda: a.request("DELETE", f"/v1/sandboxes/{sid}"))
    t.start()
    try:
        wait_for(lambda: "test hold point delete.renamed reached" in a.log_tail(400), "the hold point", a)
        assert os.path.isdir(os.path.join(a.data_dir, "sandboxes", sid + ".deleting"))
    finally:
        os.kill(old[0], signal.SIGKILL)  # also when it failed: a held node never stops by itself
        open(release, "w").close()
        t.join()
    wait_for(lambda: (new := node_pids(a.data_dir)) and new != old and
             a.request("GET", "/v1/health", auth=False)[0] == 200, "no new node", a)
    assert "finishing the removal of a deleted sandbox's" in a.log_tail(400)
    assert not os.path.exists(os.path.join(a.data_dir, "sandboxes", sid + ".deleting"))
    wait_for(lambda: a.request("DELETE", f"/v1/sandboxes/{sid}")[0] in (204, 404), "the delete done", a)
    assert a.request("GET", f"/v1/sandboxes/{sid}")[0] == 404
    other = a.create(volumes=[{"name": "ws", "path": "/w"}])["id"]
    assert read(a, other, "/w/f") == "kept\n"
    a.api("DELETE", f"/v1/sandboxes/{other}", expect=204)
    os.unlink(release)


def test_volume_content_api_goes_where_the_volume_is(airlock_factory):
    """E2B's volume content API (/volumecontent/VOLUME/..., the volume's
    token as bearer) reaches the files through the guest that has the
    volume mounted: a helper sandbox while nothing holds it (gone with the
    request, so a create right after a streamed read gets the volume), a
    running read-only holder for reads, the read-write holder while it
    runs. A write to a volume others read, and any request while its
    writer is stopped, are 409s naming the holder; bad paths and bodies
    are 400s; a tenant's volume is its own."""
    a = airlock_factory(prebuild="minimal")
    vol = a.api("POST", "/v1/volumes", {"name": "data", "size": "32M"}, expect=201)
    token = a.api("GET", f"/volumes/{vol['id']}", auth=False, headers={"X-API-Key": a.token})["token"]
    base = f"/volumecontent/{vol['id']}"

    def content(method, what, path, body=None, expect=200, **query):
        q = urllib.parse.urlencode({"path": path, **query})
        status, _, data = a.request(method, f"{base}/{what}?{q}", body, token=token)
        assert status == expect, (method, what, path, status, data)
        return data

    # nothing holds it: a helper, gone before the answer
    entry = json.loads(content("PUT", "file", "/big", b"x" * (3 << 20), mode="384"))
    assert entry["size"] == 3 << 20 and entry["mode"] == 0o600, entry
    assert sandbox_ids(a) == set()
    assert a.api("GET", "/v1/volumes/data")["held_by"] == []
    # a streamed read's helper goes after its last byte: the create that
    # follows it at once waits for it rather than failing
    assert content("GET", "file", "/big") == b"x" * (3 << 20)
    writer = a.create(volumes=[{"name": "data", "path": "/data"}])["id"]
    entry = json.loads(content("GET", "path", "/big"))
    assert entry["type"] == "file" and entry["size"] == 3 << 20, entry
    assert sandbox_ids(a) == {writer}  # through the writer: no helper
    sh(a, writer, "echo by-writer > /data/w")
    assert content("GET", "file", "/w") == b"by-writer\n"
    # its writer stopped: refused, naming it and its state
    a.api("POST", f"/v1/sandboxes/{writer}/stop?wait=true")
    msg = json.loads(content("GET", "file", "/w", expect=409))["message"]
    assert writer in msg and "stopped" in msg, msg
    a.api("DELETE", f"/v1/sandboxes/{writer}", expect=204)

    # read-only holders: reads go through one, writes are refused
    reader = a.create(volumes=[{"name": "data", "path": "/ro", "read_only": True}])["id"]
    assert content("GET", "file", "/w") == b"by-writer\n"
    msg = json.loads(content("PUT", "file", "/new", b"no", expect=409))["message"]
    assert reader in msg and "read-only" in msg, msg
    content("DELETE", "path", "/w", expect=409)
    assert sandbox_ids(a) == {reader}
    a.api("DELETE", f"/v1/sandboxes/{reader}", expect=204)

    # bad input: a clear 4xx, nothing made
    content("GET", "file", "/../etc/passwd", expect=400)
    content("GET", "dir", "/", expect=400, depth="many")
    content("PATCH", "path", "/big", {"owner": "root"}, expect=400)
    content("PATCH", "path", "/big", {"mode": 0o10000}, expect=400)
    content("DELETE", "path", "/", expect=400)
    status, _, _ = a.request("GET", f"{base}/dir?path=/", token="0" * 64)
    assert status == 401
    status, _, _ = a.request("GET", f"{base}/dir?path=/", token=a.token)  # an API key is not its token
    assert status == 401
    assert sandbox_ids(a) == set()

    # a tenant's volume: its helper is the tenant's (a sandbox of another
    # owner could not take it), and its token is no use for another volume
    tenant = a.api("POST", "/v1/tenants", {"name": "t1"}, expect=201)
    key = a.api("POST", f"/v1/tenants/{tenant['id']}/keys", {"name": "k"}, expect=201)["key"]
    tvol = a.api("POST", "/v1/volumes", {"name": "tdata", "size": "32M"}, expect=201, token=key)
    ttoken = a.api("GET", f"/volumes/{tvol['id']}", auth=False, headers={"X-API-Key": key})["token"]
    status, _, _ = a.request("GET", f"{base}/dir?path=/", token=ttoken)
    assert status == 401
    status, _, data = a.request("GET", f"/volumecontent/{tvol['id']}/dir?path=/", token=ttoken)
    assert status == 200 and [e["name"] for e in json.loads(data)] == ["lost+found"], data
    a.api("DELETE", "/v1/volumes/tdata", expect=204, token=key)
    a.api("DELETE", "/v1/volumes/data", expect=204)
