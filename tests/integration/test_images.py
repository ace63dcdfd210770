"""Images: a sandbox's full snapshot published to the object store, which
outlives its sandbox and makes new sandboxes (memory, processes and disk as
they were, each with its own identity); scoped to its tenant like
sandboxes."""
import os

from harness import qemu_pids
from test_recovery import alive_in_guest, start_sleeper
from test_tenants import _tenant_with_key


def _manifests(a):
    d = os.path.join(a.data_dir, "objstore", "snapshots")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_an_image_outlives_its_sandbox_and_makes_new_ones(airlock):
    a = airlock
    src = a.create("minimal", env={"FROM": "source"})["id"]
    a.exec(src, ["sh", "-c", "echo imaged > /root/f"])
    sleeper = start_sleeper(a, src)

    img = a.api("POST", f"/v1/sandboxes/{src}/images", {"name": "base-1"}, expect=201)
    assert img["id"].startswith("img-") and img["name"] == "base-1"
    assert img["sandbox_id"] == src and img["template"] == "minimal" and img["size"] > 0
    assert img["pause_ms"] >= 0 and img["created_at"]
    # the source runs on, untouched
    assert a.api("GET", f"/v1/sandboxes/{src}")["state"] == "running"
    assert alive_in_guest(a, src, sleeper)
    a.exec(src, ["sh", "-c", "echo later > /root/f"])

    # what was asked wrongly is refused, and nothing is made
    assert a.request("POST", f"/v1/sandboxes/{src}/images", {"name": "base-1"})[0] == 409
    assert a.request("POST", f"/v1/sandboxes/{src}/images", {"name": "no/slash"})[0] == 400
    assert a.request("POST", f"/v1/sandboxes/{src}/images", {"kind": "full"})[0] == 400
    assert a.request("POST", "/v1/sandboxes/sbx-0123456789abcdef/images", {})[0] == 404
    assert [i["id"] for i in a.api("GET", "/v1/images")["images"]] == [img["id"]]
    assert a.api("GET", f"/v1/images/{img['id']}")["name"] == "base-1"
    assert a.api("GET", f"/v1/images?sandbox_id={src}")["images"][0]["id"] == img["id"]
    assert a.api("GET", "/v1/images?sandbox_id=sbx-other")["images"] == []
    assert _manifests(a) == [img["id"]]

    # the image outlives its sandbox
    assert a.request("DELETE", f"/v1/sandboxes/{src}")[0] == 204
    assert a.api("GET", f"/v1/images/{img['id']}")["sandbox_id"] == src

    # two sandboxes from it: the instant it was taken, each its own
    made = []
    for extra in ("one", "two"):
        sbx = a.api("POST", "/v1/sandboxes", {"image": img["id"], "env": {"EXTRA": extra}}, expect=201)
        assert sbx["template"] == "minimal" and sbx["state"] == "running" and sbx["id"] != src
        sid = sbx["id"]
        made.append(sid)
        assert a.exec(sid, ["cat", "/root/f"])["stdout"] == "imaged\n"
        assert alive_in_guest(a, sid, sleeper)
        assert a.exec(sid, ["hostname"])["stdout"].strip() == sid
        assert a.exec(sid, ["sh", "-c", "echo $FROM $EXTRA"])["stdout"] == f"source {extra}\n"
        assert len(qemu_pids(sid)) == 1
    a.exec(made[0], ["sh", "-c", "echo diverged > /root/f"])
    assert a.exec(made[1], ["cat", "/root/f"])["stdout"] == "imaged\n"
    seeds = {a.exec(s, ["sh", "-c", "head -c 16 /dev/urandom | od -An -tx1"])["stdout"] for s in made}
    assert len(seeds) == 2

    # a create that names no image, or two sources, makes nothing
    before = {s["id"] for s in a.api("GET", "/v1/sandboxes")["sandboxes"]}
    assert a.request("POST", "/v1/sandboxes", {"image": "img-0123456789abcdef"})[0] == 404
    assert a.request("POST", "/v1/sandboxes", {"image": img["id"], "template": "minimal"})[0] == 400
    assert {s["id"] for s in a.api("GET", "/v1/sandboxes")["sandboxes"]} == before

    # deleted: gone from the store and from the object store
    assert a.request("DELETE", f"/v1/images/{img['id']}")[0] == 204
    assert a.request("DELETE", f"/v1/images/{img['id']}")[0] == 404
    assert a.request("POST", "/v1/sandboxes", {"image": img["id"]})[0] == 404
    assert _manifests(a) == []
    for sid in made:
        assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_images_belong_to_their_tenant(airlock_factory):
    a = airlock_factory(prebuild="minimal")
    ta, ka = _tenant_with_key(a, "alpha")
    tb, kb = _tenant_with_key(a, "beta")
    sa = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=ka["key"])["id"]
    img = a.api("POST", f"/v1/sandboxes/{sa}/images", {"name": "mine"}, expect=201, token=ka["key"])
    assert img["tenant_id"] == ta["id"]
    # the control: its tenant and the admin see it
    assert a.api("GET", f"/v1/images/{img['id']}", token=ka["key"])["id"] == img["id"]
    assert [i["id"] for i in a.api("GET", "/v1/images")["images"]] == [img["id"]]
    # another tenant sees nothing and can use nothing, as for an unknown id
    assert a.api("GET", "/v1/images", token=kb["key"])["images"] == []
    for method, path, body in (("GET", f"/v1/images/{img['id']}", None),
                               ("DELETE", f"/v1/images/{img['id']}", None),
                               ("POST", "/v1/sandboxes", {"image": img["id"]})):
        status, _, data = a.request(method, path, body, token=kb["key"])
        assert status == 404 and b"not found" in data, (method, path, status, data)
    # a second image may take the same name in another tenant
    sb = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=kb["key"])["id"]
    other = a.api("POST", f"/v1/sandboxes/{sb}/images", {"name": "mine"}, expect=201, token=kb["key"])
    # a tenant that owns images cannot be deleted
    for s, k in ((sa, ka), (sb, kb)):
        assert a.request("DELETE", f"/v1/sandboxes/{s}", token=k["key"])[0] == 204
    assert a.request("DELETE", f"/v1/tenants/{ta['id']}")[0] == 409
    # its own sandbox from its own image
    made = a.api("POST", "/v1/sandboxes", {"image": img["id"]}, expect=201, token=ka["key"])
    assert made["tenant_id"] == ta["id"]
    assert a.request("DELETE", f"/v1/sandboxes/{made['id']}", token=ka["key"])[0] == 204
    for i, k in ((img, ka), (other, kb)):
        assert a.request("DELETE", f"/v1/images/{i['id']}", token=k["key"])[0] == 204
    assert a.request("DELETE", f"/v1/tenants/{ta['id']}")[0] == 204


def test_kept_snapshots_exported_as_images(airlock):
    """A disk and a full snapshot exported to the object store outlive
    their sandbox and its node's copies: the disk one boots what was on
    the disk, the full one resumes its processes."""
    a = airlock
    src = a.create("minimal")["id"]
    other = a.create("minimal")["id"]
    a.exec(src, ["sh", "-c", "echo disk-time > /root/f && sync"])
    disk = a.api("POST", f"/v1/sandboxes/{src}/snapshots", {"kind": "disk"}, expect=201)["id"]
    a.exec(src, ["sh", "-c", "echo full-time > /root/f && sync"])
    sleeper = start_sleeper(a, src)
    full = a.api("POST", f"/v1/sandboxes/{src}/snapshots", {"kind": "full"}, expect=201)["id"]
    a.exec(src, ["sh", "-c", "echo later > /root/f"])

    # refused without making anything: another sandbox's snapshot, an
    # unknown one, not a string
    other_snap = a.api("POST", f"/v1/sandboxes/{other}/snapshots", {"kind": "disk"}, expect=201)["id"]
    for body, status in (({"snapshot": other_snap}, 404), ({"snapshot": "snap-0123456789abcdef"}, 404),
                         ({"snapshot": 7}, 400)):
        got, _, data = a.request("POST", f"/v1/sandboxes/{src}/images", body)
        assert got == status and b"snapshot" in data, (body, got, data)
    assert a.api("GET", "/v1/images")["images"] == []

    # the disk one from the running sandbox, the full one once it stopped
    d_img = a.api("POST", f"/v1/sandboxes/{src}/images", {"snapshot": disk, "name": "disk-export"}, expect=201)
    assert d_img["kind"] == "disk" and d_img["snapshot_id"] == disk and d_img["name"] == "disk-export"
    a.api("POST", f"/v1/sandboxes/{src}/stop?wait=true")
    f_img = a.api("POST", f"/v1/sandboxes/{src}/images", {"snapshot": full}, expect=201)
    assert f_img["kind"] == "full" and f_img["snapshot_id"] == full and f_img["size"] > 0
    assert a.api("GET", f"/v1/images/{d_img['id']}")["kind"] == "disk"
    assert sorted(_manifests(a)) == sorted([d_img["id"], f_img["id"]])

    # the sandbox goes, with its snapshots and every file of them here
    assert a.request("DELETE", f"/v1/sandboxes/{src}")[0] == 204
    assert not os.path.exists(os.path.join(a.data_dir, "sandboxes", src))

    booted = a.api("POST", "/v1/sandboxes", {"image": d_img["id"]}, expect=201)["id"]
    assert a.exec(booted, ["cat", "/root/f"])["stdout"] == "disk-time\n"
    assert a.exec(booted, ["hostname"])["stdout"].strip() == booted
    assert not alive_in_guest(a, booted, sleeper)  # a boot: no process of then
    resumed = a.api("POST", "/v1/sandboxes", {"image": f_img["id"]}, expect=201)["id"]
    assert a.exec(resumed, ["cat", "/root/f"])["stdout"] == "full-time\n"
    assert alive_in_guest(a, resumed, sleeper)
    for sid in (booted, resumed, other):
        assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    for img in (d_img, f_img):
        assert a.request("DELETE", f"/v1/images/{img['id']}")[0] == 204
    assert _manifests(a) == []
