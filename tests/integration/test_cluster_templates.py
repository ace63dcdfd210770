"""Templates shared through the object store (docs/storage.md,
"Templates"): in a cluster whose nodes share an S3 store (Swift's), a
template is built once per content hash. Two nodes that need it at the same
moment build it once between them (one claims it, the other waits and
fetches it); a node that has neither the template nor its kernel fetches
both; what lies in the bucket is sealed; a fetched template runs
sandboxes."""

import glob
import json
import os
import pwd
import shutil
import subprocess

import harness

from clusterlab import Replica, Worker, lab, s3_objstore, wait_for  # noqa: F401 (lab: the fixture)
from test_byok import tree_contains
from test_cluster import wait_ready


def own_templates_dir(lab, name, kernel=None):
    """An empty templates directory of the node user's, with a copy of
    the kernel directory kernel when given (the kernel step then has
    nothing to do)."""
    d = harness.volume_tempdir(f"airlock-templates-{name}-", 0o755)  # where the sandboxes' reflinks are
    lab.defer(shutil.rmtree, d, True)
    if kernel:
        subprocess.run(["cp", "-a", "--reflink=auto", kernel, d], check=True)
    pw = pwd.getpwnam("airlock-node")
    subprocess.run(["chown", "-R", f"{pw.pw_uid}:{pw.pw_gid}", d], check=True)
    return d


def built_minimal():
    """The run's minimal template directory and its manifest."""
    best = None
    for m in glob.glob(os.path.join(harness.TEMPLATES, "minimal-*", "manifest.json")):
        if best is None or os.path.getmtime(m) > os.path.getmtime(best):
            best = m
    assert best, "the run's templates have no minimal"
    with open(best) as f:
        return os.path.dirname(best), json.load(f)


def log_of(worker):
    with open(worker.proc.log_path, errors="replace") as f:
        return f.read()


def test_template_built_once_in_the_cluster_and_fetched(lab, templates):
    tdir, manifest = built_minimal()
    kernel = os.path.join(harness.TEMPLATES, manifest["kernel"])
    net = lab.bridge(nodes=3)
    pg = lab.postgres(bridge=net)
    r0 = Replica(lab, "r0", pg.url, net).spawn()
    r0.wait_serving()
    token = r0.api("POST", "/v1/nodes/tokens", {"ttl_s": 600}, expect=201)["token"]
    token_file = os.path.join(lab.dir, "join.token")
    with open(os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(token + "\n")
    s3, objstore = s3_objstore(lab, net)

    def worker(i, kernel_dir):
        w = Worker(lab, f"w{i}", net.nodes[i], i, [r0.cluster_addr], token_file, objstore=objstore)
        w.env["AIRLOCK_TEMPLATES_DIR"] = own_templates_dir(lab, w.name, kernel_dir)
        return w

    # w0 and w1 need minimal at the same moment (their prebuild): one builds
    # it for the cluster, the other waits for it and fetches it
    pair = [worker(0, kernel), worker(1, kernel)]
    for w in pair:
        w.start()
    wait_ready(r0, {"w0", "w1"})
    logs = {w.name: log_of(w) for w in pair}
    built = [n for n, t in logs.items() if "building template minimal-" in t]
    fetched = [n for n, t in logs.items() if "fetched from the object store" in t]
    assert len(built) == 1 and len(fetched) == 1 and built != fetched, (built, fetched)
    assert "published to the object store" in logs[built[0]]
    ids = [os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(pair[0].env["AIRLOCK_TEMPLATES_DIR"], "minimal-*", "manifest.json"))]
    assert ids == [os.path.basename(tdir)], ids  # the same content hash as the run's own build

    # the bucket holds the template sealed: neither its manifest nor its
    # kernel's version string is there in the clear (the control: both
    # are in the files the nodes have)
    listing = s3.request("GET", f"/{s3.bucket}", query=[("list-type", "2")]).body.decode()
    snap = f"snapshots/t-{manifest['hash']}-minimal/manifest.json"
    assert snap in listing and "claims/" not in listing, listing  # published, claim released
    with open(os.path.join(kernel, "vmlinux"), "rb") as f:
        assert b"Linux version" in f.read()
    assert tree_contains(tdir, '"build_ms"')
    assert not tree_contains(s3.dir, "Linux version") and not tree_contains(s3.dir, '"build_ms"')

    # w2 has nothing, not even the kernel: it fetches both, builds nothing,
    # and its sandboxes run
    w2 = worker(2, None).start()
    wait_ready(r0, {"w2"})
    log2 = log_of(w2)
    assert "fetched from the object store" in log2 and "building template" not in log2 and \
        "building kernel" not in log2, log2[-3000:]
    own = w2.env["AIRLOCK_TEMPLATES_DIR"]
    with open(os.path.join(own, manifest["kernel"], "vmlinux"), "rb") as a, \
            open(os.path.join(kernel, "vmlinux"), "rb") as b:
        assert a.read() == b.read()
    sid = r0.create("minimal", node="w2")["id"]
    out = r0.exec(sid, ["sh", "-c", "echo fetched-and-running"])
    assert out["exit_code"] == 0 and out["stdout"] == "fetched-and-running\n", out
    r0.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)
