"""Images sealed under the tenant's key (BYOK, docs/storage.md): what a
suspend puts in the object store holds none of the sandbox's bytes in the
clear, and a revoked key makes it unreadable for good."""
import os
import shutil

from test_fork_suspend import verb, wait_for

MARK = "airlock-byok-known-plaintext"


def tree_contains(root, needle):
    """Whether any file under root holds needle."""
    needle = needle.encode()
    for d, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                if needle in fh.read():
                    return True
    return False


def tenant(a, name):
    t = a.api("POST", "/v1/tenants", {"name": name}, expect=201)
    k = a.api("POST", f"/v1/tenants/{t['id']}/keys", {"name": name}, expect=201)
    return t["id"], k["key"]


def suspended_to_store_only(a, sid, token):
    """Suspends sid and waits for its image to land; removes the node's own
    copy, so that a wake must open the object store's."""
    assert a.api("POST", f"/v1/sandboxes/{sid}/suspend?wait=true", token=token)["state"] == "succeeded"
    wait_for(lambda: a.api("GET", f"/v1/sandboxes/{sid}", token=token).get("image_uploaded"), "not uploaded", a)
    copy = os.path.join(a.data_dir, "sandboxes", sid, "suspend")
    wait_for(lambda: os.path.exists(os.path.join(copy, "uploaded")), "not marked uploaded", a)
    return copy


def test_sealed_images_and_a_revoked_key(airlock_factory):
    a = airlock_factory(prebuild="minimal")
    objstore = os.path.join(a.data_dir, "objstore")
    kms = os.path.join(a.data_dir, "control", "kms")
    ta, ka = tenant(a, "sealed-a")
    tb, kb = tenant(a, "sealed-b")
    assert a.api("GET", f"/v1/tenants/{ta}/kms")["state"] == "none"

    sid = a.api("POST", "/v1/sandboxes", {"template": "minimal", "env": {"BYOK_ENV": MARK + "-env"}}, expect=201,
                token=ka)["id"]
    other = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=kb)["id"]
    fill = f"for i in $(seq 2000); do echo {MARK} $i; done > /root/secret.txt && sync"
    for s, k in ((sid, ka), (other, kb)):
        assert a.api("POST", f"/v1/sandboxes/{s}/exec", {"cmd": ["sh", "-c", fill]}, token=k)["exit_code"] == 0

    copy = suspended_to_store_only(a, sid, ka)
    # the control: the node's own copy holds the file in the clear...
    assert tree_contains(copy, MARK)
    # ...the object store none of it, nor the environment
    assert not tree_contains(objstore, MARK)
    st = a.api("GET", f"/v1/tenants/{ta}/kms")
    assert st["state"] == "active" and st["version"] == 1, st
    assert os.listdir(os.path.join(kms, ta)), "the tenant's key file"
    shutil.rmtree(copy)
    assert verb(a, sid, "wake")["state"] == "succeeded"  # opened from the store, with the tenant's key
    out = a.api("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["sh", "-c", "tail -1 /root/secret.txt; echo $BYOK_ENV"]},
                token=ka)
    assert out["stdout"] == f"{MARK} 2000\n{MARK}-env\n", out

    # revoked: the key is destroyed, the image in the store can never open
    copy = suspended_to_store_only(a, sid, ka)
    other_copy = suspended_to_store_only(a, other, kb)
    shutil.rmtree(copy)
    shutil.rmtree(other_copy)
    r = a.api("POST", f"/v1/tenants/{ta}/kms/revoke")
    assert r["state"] == "revoked", r
    assert not os.path.exists(os.path.join(kms, ta)), os.listdir(kms)
    status, _, body = a.request("POST", f"/v1/sandboxes/{sid}/wake", token=ka)
    assert status == 409 and b"key_revoked" in body, (status, body)
    assert a.api("GET", f"/v1/sandboxes/{sid}", token=ka)["state"] == "suspended"
    # the control: another tenant's wakes
    assert verb(a, other, "wake")["state"] == "succeeded"
    assert a.api("POST", f"/v1/sandboxes/{other}/exec", {"cmd": ["tail", "-1", "/root/secret.txt"]},
                 token=kb)["stdout"] == f"{MARK} 2000\n"

    # a new key seals what comes, and opens nothing from before
    r = a.api("POST", f"/v1/tenants/{ta}/kms/rotate", expect=201)
    assert r["state"] == "active" and r["version"] == 1, r  # the old versions went with the revocation
    op = a.api("POST", f"/v1/sandboxes/{sid}/wake?wait=true", token=ka)
    assert op["state"] == "failed" and op["error"]["code"] == "key_revoked", op
    assert a.api("GET", f"/v1/sandboxes/{sid}", token=ka)["state"] == "suspended"
    fresh = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=ka)["id"]
    suspended_to_store_only(a, fresh, ka)
    assert verb(a, fresh, "wake")["state"] == "succeeded"
    out = a.cli("keys", "kms", ta)
    assert out.returncode == 0 and out.stdout.decode().strip() == "active", out
    for s, k in ((sid, ka), (other, kb), (fresh, ka)):
        assert a.request("DELETE", f"/v1/sandboxes/{s}", token=k)[0] == 204
