"""Images sealed under the tenant's key (BYOK, docs/storage.md): what a
suspend puts in the object store holds none of the sandbox's bytes in the
clear, and a revoked key makes it unreadable for good."""
import glob
import json
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile

import pytest

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

    # an image published from it is sealed the same way, and makes sandboxes
    img = a.api("POST", f"/v1/sandboxes/{sid}/images", {"name": "sealed-image"}, expect=201, token=ka)
    manifest = os.path.join(objstore, "snapshots", img["id"], "manifest.json")
    with open(manifest) as f:
        assert json.load(f)["version"] == 3
    assert not tree_contains(objstore, MARK)
    child = a.api("POST", "/v1/sandboxes", {"image": img["id"]}, expect=201, token=ka)["id"]
    assert a.api("POST", f"/v1/sandboxes/{child}/exec", {"cmd": ["tail", "-1", "/root/secret.txt"]},
                 token=ka)["stdout"] == f"{MARK} 2000\n"
    assert a.request("DELETE", f"/v1/sandboxes/{child}", token=ka)[0] == 204

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
    status, _, body = a.request("POST", "/v1/sandboxes", {"image": img["id"]}, token=ka)
    assert status == 409 and b"key_revoked" in body, (status, body)  # nor its images
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


@pytest.fixture
def softhsm():
    """A throwaway PKCS#11 token (SoftHSM2 from Debian), its files airlockd's
    user's: (environment for airlockd, token dir)."""
    util = shutil.which("softhsm2-util")
    module = next((m for m in glob.glob("/usr/lib/softhsm/libsofthsm2.so") +
                   glob.glob("/usr/lib/*-linux-gnu/softhsm/libsofthsm2.so") if os.path.exists(m)), None)
    assert util and module, "softhsm2 is missing: scripts/deps.sh --test installs it"
    d = tempfile.mkdtemp(prefix="airlock-hsm-", dir="/tmp")
    try:
        tokens = os.path.join(d, "tokens")
        os.mkdir(tokens)
        conf = os.path.join(d, "softhsm2.conf")
        with open(conf, "w") as f:
            f.write(f"directories.tokendir = {tokens}\nobjectstore.backend = file\nlog.level = ERROR\n")
        pin = secrets.token_hex(8)
        env = dict(os.environ, SOFTHSM2_CONF=conf)
        subprocess.run([util, "--init-token", "--free", "--label", "airlock-byok", "--pin", pin,
                        "--so-pin", secrets.token_hex(8)], env=env, check=True, capture_output=True)
        pin_file = os.path.join(d, "pin")
        with open(pin_file, "w") as f:
            f.write(pin + "\n")
        os.chmod(pin_file, 0o600)
        pw = pwd.getpwnam("airlock")  # airlockd's user opens the token
        for root, dirs, files in os.walk(d):
            for x in [root] + [os.path.join(root, y) for y in dirs + files]:
                os.chown(x, pw.pw_uid, pw.pw_gid)
        os.chmod(d, 0o755)
        yield {"SOFTHSM2_CONF": conf, "AIRLOCK_PKCS11_MODULE": module, "AIRLOCK_PKCS11_TOKEN": "airlock-byok",
               "AIRLOCK_PKCS11_PIN_FILE": pin_file}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_tenant_key_on_a_pkcs11_token(softhsm, airlock_factory):
    """A tenant whose key is an AES key on a PKCS#11 token (SoftHSM2): its
    images are sealed under it and open again; a rotation makes a new key
    and the old one still opens what it sealed; a tampered wrapped key is
    refused and the untouched one opens; revoked, the token's keys are
    destroyed and nothing of it opens any more."""
    a = airlock_factory(prebuild="minimal", env=softhsm)
    objstore = os.path.join(a.data_dir, "objstore")
    t, k = tenant(a, "hsm")
    status, _, body = a.request("PUT", f"/v1/tenants/{t}/kms", {"kind": "pkcs11", "label": "none-such"})
    assert status == 404 and b"no key labelled" in body, (status, body)
    r = a.api("PUT", f"/v1/tenants/{t}/kms", {"kind": "pkcs11", "label": "tenant-hsm", "generate": True})
    assert r["kind"] == "pkcs11" and r["state"] == "active" and r["label"] == "tenant-hsm", r

    sid = a.api("POST", "/v1/sandboxes", {"template": "minimal"}, expect=201, token=k)["id"]
    fill = f"for i in $(seq 2000); do echo {MARK} $i; done > /root/secret.txt && sync"
    assert a.api("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["sh", "-c", fill]}, token=k)["exit_code"] == 0
    shutil.rmtree(suspended_to_store_only(a, sid, k))
    assert not tree_contains(objstore, MARK)
    manifest = os.path.join(objstore, "snapshots", f"{sid}.suspended", "manifest.json")
    with open(manifest) as f:
        m = json.load(f)
    assert m["key"].startswith("p:v1.pkcs11.tenant-hsm."), m["key"]

    # tampered: one character of the wrapped key changed; the control is
    # the same wake with the key put back
    good = m["key"]
    m["key"] = good[:-5] + ("A" if good[-5] != "A" else "B") + good[-4:]
    with open(manifest, "w") as f:
        json.dump(m, f)
    op = a.api("POST", f"/v1/sandboxes/{sid}/wake?wait=true", token=k)
    # refused for the key, not for any failure (a manifest the rewrite broke)
    assert op["state"] == "failed" and "data key does not open with its tenant's key" in op["error"]["message"], op
    assert a.api("GET", f"/v1/sandboxes/{sid}", token=k)["state"] == "suspended"
    m["key"] = good
    with open(manifest, "w") as f:
        json.dump(m, f)
    assert verb(a, sid, "wake")["state"] == "succeeded"
    assert a.api("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["tail", "-1", "/root/secret.txt"]},
                 token=k)["stdout"] == f"{MARK} 2000\n"

    # rotated: sealed under the old key, it still opens
    shutil.rmtree(suspended_to_store_only(a, sid, k))
    r = a.api("POST", f"/v1/tenants/{t}/kms/rotate", expect=201)
    assert r["label"] == "tenant-hsm-r2", r
    assert verb(a, sid, "wake")["state"] == "succeeded"
    shutil.rmtree(suspended_to_store_only(a, sid, k))
    with open(manifest) as f:
        assert json.load(f)["key"].startswith("p:v1.pkcs11.tenant-hsm-r2."), "sealed under the new key"

    # revoked: both keys destroyed on the token
    assert a.api("POST", f"/v1/tenants/{t}/kms/revoke")["state"] == "revoked"
    status, _, body = a.request("POST", f"/v1/sandboxes/{sid}/wake", token=k)
    assert status == 409 and b"key_revoked" in body, (status, body)
    for label in ("tenant-hsm", "tenant-hsm-r2"):
        status, _, body = a.request("PUT", f"/v1/tenants/{t}/kms", {"kind": "pkcs11", "label": label})
        assert status == 404 and b"no key labelled" in body, (label, status, body)
    assert a.api("GET", f"/v1/tenants/{t}/kms")["state"] == "revoked"
    assert a.request("DELETE", f"/v1/sandboxes/{sid}", token=k)[0] == 204
