"""Upgrades keep every sandbox (docs/operations.md, "Upgrades").

The previous release (tests/integration/upgrade-from: its version and
commit) is built from this repository's history into the build directory
(kept between runs, as templates are) and makes a data directory:
sandboxes running, paused, stopped, suspended and with disk and full
snapshots, a secret, a template built from a Dockerfile. That Airlock
stops; this one starts on the same data directory: the store migrates,
every sandbox is there in its state and works (exec, files, resume,
start, wake, rollback), the secret and the template too. The previous
release then refuses the migrated data directory with a message saying
why, and this one starts on it again with nothing lost."""

import json
import os
import secrets
import shutil
import subprocess
import threading
import time

import pytest

from clusterlab import Replica, Worker, lab, shared_objstore  # noqa: F401 (lab: the fixture)
from clusterlab import stop as clusterlab_stop
from clusterlab import wait_for as wait_until
from harness import AIRLOCKD, BUILD, ROOT, START_TIMEOUT, ApiError, airlock_procs, wait_for
from test_cluster import wait_ready
from test_recovery import alive_in_guest, start_sleeper
from test_templates import built, follow, post_template  # noqa: F401 (built: a fixture)

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "upgrade-from")) as f:
    PREVIOUS_VERSION, PREVIOUS_COMMIT = f.read().split()


@pytest.fixture(scope="module")
def previous_release():
    """The previous release's airlockd, built once per build directory."""
    out = os.path.join(BUILD, "upgrade-from", PREVIOUS_COMMIT[:12])
    daemon = os.path.join(out, "build", "src", "daemon", "airlockd")
    if os.path.exists(os.path.join(out, "built")):
        return daemon
    have = subprocess.run(["git", "-C", ROOT, "cat-file", "-e", f"{PREVIOUS_COMMIT}^{{commit}}"],
                          capture_output=True)
    assert have.returncode == 0, (
        f"commit {PREVIOUS_COMMIT} (release {PREVIOUS_VERSION}) is not in {ROOT}'s history: "
        "the upgrade test needs a full clone, not a shallow one")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "src"))
    subprocess.run(f"git -C '{ROOT}' archive {PREVIOUS_COMMIT} | tar -x -C '{out}/src'", shell=True,
                   check=True)
    for argv in (["meson", "setup", f"{out}/build", f"{out}/src", "-Dtests=disabled"],
                 ["ninja", "-C", f"{out}/build"]):
        r = subprocess.run(argv, capture_output=True, text=True)
        assert r.returncode == 0, f"{' '.join(argv)}:\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
    open(os.path.join(out, "built"), "w").close()
    return daemon


def verb(a, sid, name, body=None):
    op = a.api("POST", f"/v1/sandboxes/{sid}/{name}?wait=true", body)
    assert op["state"] == "succeeded", op


def cat(a, sid, path):
    return a.get_file(sid, path).decode()


def state(a, sid):
    return a.api("GET", f"/v1/sandboxes/{sid}")["state"]


def test_upgrade_keeps_every_sandbox(airlock_factory, previous_release, built):
    old = airlock_factory(airlockd=previous_release, prebuild="minimal")
    assert f"airlockd {PREVIOUS_VERSION} is listening" in old.log_tail(400)

    sbx = {}
    for kind in ("running", "paused", "stopped", "suspended", "snapshotted"):
        sbx[kind] = old.create("minimal", metadata={"kind": kind})["id"]
        old.put_file(sbx[kind], "/root/kept", f"{kind} before the upgrade".encode())
    sleeper = start_sleeper(old, sbx["suspended"])
    verb(old, sbx["paused"], "pause")
    verb(old, sbx["stopped"], "stop")
    verb(old, sbx["suspended"], "suspend")
    snap = sbx["snapshotted"]
    disk = old.api("POST", f"/v1/sandboxes/{snap}/snapshots", {"kind": "disk"}, expect=201)["id"]
    full_sleeper = start_sleeper(old, snap)
    full = old.api("POST", f"/v1/sandboxes/{snap}/snapshots", {"kind": "full"}, expect=201)["id"]
    old.put_file(snap, "/root/kept", b"written after the snapshots")
    old.api("POST", "/v1/secrets", {"name": "upgrade-token", "value": "s3cr3t", "hosts": ["api.example.com"]},
            expect=201)
    nonce = secrets.token_hex(4)  # a build of its own, not one an earlier run left
    status, t = post_template(old, {"dockerfile": f"FROM minimal\nRUN echo kept {nonce} > /etc/kept\n",
                                    "name": "kept"})
    built.append((old, "kept", None))
    assert status == 202, t
    assert follow(old, "kept", t["build_id"])[2]["state"] == "ready"
    before = {s["id"]: s["state"] for s in old.api("GET", "/v1/sandboxes")["sandboxes"]}
    assert before == {sbx["running"]: "running", sbx["paused"]: "paused", sbx["stopped"]: "stopped",
                      sbx["suspended"]: "suspended", snap: "running"}, before
    old.stop()

    # this version on the same data directory
    new = airlock_factory(data_dir=old.data_dir, prebuild="minimal")
    built.append((new, "kept", None))
    version = subprocess.run([AIRLOCKD, "--version"], capture_output=True, text=True).stdout.split()[1]
    assert version != PREVIOUS_VERSION and f"airlockd {version} is listening" in new.log_tail(400)
    # the previous release's node stopped their VMs at its stop: booted
    # again (0.1.0 saved no VM), they come back by themselves, and a paused
    # one runs (its memory was gone)
    want = dict(before, **{sbx["paused"]: "running", snap: "running"})
    after = wait_for(lambda: (lambda a: a if {i: s["state"] for i, s in a.items()} == want else None)(
        {s["id"]: s for s in new.api("GET", "/v1/sandboxes")["sandboxes"]}), "the sandboxes back", new)
    assert {s["metadata"]["kind"] for s in after.values()} == set(sbx)

    run = sbx["running"]
    assert new.exec(run, ["echo", "hello"])["stdout"] == "hello\n"
    assert cat(new, run, "/root/kept") == "running before the upgrade"
    assert cat(new, sbx["paused"], "/root/kept") == "paused before the upgrade"
    verb(new, sbx["stopped"], "start")
    assert cat(new, sbx["stopped"], "/root/kept") == "stopped before the upgrade"
    verb(new, sbx["suspended"], "wake")
    assert cat(new, sbx["suspended"], "/root/kept") == "suspended before the upgrade"
    assert alive_in_guest(new, sbx["suspended"], sleeper), "the suspended sandbox's memory"

    listed = {s["id"]: s for s in new.api("GET", f"/v1/sandboxes/{snap}/snapshots")["snapshots"]}
    assert set(listed) >= {disk, full}, listed
    verb(new, snap, "rollback", {"snapshot": full})
    assert cat(new, snap, "/root/kept") == "snapshotted before the upgrade"
    assert alive_in_guest(new, snap, full_sleeper), "the full snapshot's memory"
    verb(new, snap, "rollback", {"snapshot": disk})
    assert cat(new, snap, "/root/kept") == "snapshotted before the upgrade"

    assert [s["name"] for s in new.api("GET", "/v1/secrets")["secrets"]] == ["upgrade-token"]
    with_secret = new.create("minimal", secrets=["upgrade-token"])["id"]
    env = new.exec(with_secret, ["sh", "-c", "echo $UPGRADE_TOKEN"])["stdout"].strip()
    assert env.startswith("airlock_ph_"), env  # a placeholder: the value stays out of the guest
    kept = new.create("kept")["id"]
    assert cat(new, kept, "/etc/kept") == f"kept {nonce}\n"
    # what this version adds works on the upgraded store
    assert new.api("POST", "/v1/webhooks", {"url": "http://198.19.77.2/hook"}, expect=201)["id"]
    run_sleeper = start_sleeper(new, run)
    verb(new, sbx["paused"], "pause")
    new.stop()

    # the previous release refuses what this one migrated, and says why
    again = airlock_factory(data_dir=old.data_dir, airlockd=previous_release, prebuild="minimal", wait=False)
    rc = again.proc.wait(timeout=START_TIMEOUT)
    log = again.log_tail(400)
    assert rc != 0, log
    assert "written by a newer airlockd" in log, log

    # and this one still has everything
    final = airlock_factory(data_dir=old.data_dir, prebuild="minimal")
    built.append((final, "kept", None))
    # this version saved its VMs at its stop: they resume, processes and
    # all, the paused one paused
    want = {i: "running" for i in list(sbx.values()) + [with_secret, kept]}
    want[sbx["paused"]] = "paused"
    wait_for(lambda: {s["id"]: s["state"] for s in final.api("GET", "/v1/sandboxes")["sandboxes"]} == want,
             "the sandboxes resumed as they were", final)
    assert alive_in_guest(final, run, run_sleeper)
    assert alive_in_guest(final, sbx["suspended"], sleeper)
    assert cat(final, run, "/root/kept") == "running before the upgrade"
    assert cat(final, kept, "/etc/kept") == f"kept {nonce}\n"
    print(json.dumps({"previous": PREVIOUS_VERSION, "now": version}))


def test_backup_and_restore_of_a_data_directory(airlock_factory, tmp_path):
    """docs/operations.md, "Backups": the stopped Airlock's data directory
    (its SQLite store, sandboxes, snapshots, the object store's directory)
    into a tar file, the directory lost, the tar file back, and Airlock
    starts on it with every sandbox as it was at the stop."""
    a = airlock_factory(prebuild="minimal")
    run, susp = a.create("minimal")["id"], a.create("minimal")["id"]
    a.put_file(run, "/root/kept", b"backed up")
    sleeper = start_sleeper(a, run)
    a.put_file(susp, "/root/kept", b"suspended, backed up")
    verb(a, susp, "suspend")
    snap = a.api("POST", f"/v1/sandboxes/{run}/snapshots", {"kind": "disk"}, expect=201)["id"]
    a.stop()

    backup = str(tmp_path / "airlock-backup.tar")
    subprocess.run(["tar", "--sparse", "-C", a.data_dir, "-cpf", backup, "."], check=True)
    shutil.rmtree(a.data_dir)
    os.mkdir(a.data_dir, 0o711)
    subprocess.run(["tar", "--sparse", "-C", a.data_dir, "-xpf", backup], check=True)

    b = airlock_factory(data_dir=a.data_dir, prebuild="minimal")
    wait_for(lambda: state(b, run) == "running", "the sandbox resumed from the backup", b)
    assert alive_in_guest(b, run, sleeper)
    assert cat(b, run, "/root/kept") == "backed up"
    assert state(b, susp) == "suspended"
    verb(b, susp, "wake")
    assert cat(b, susp, "/root/kept") == "suspended, backed up"
    b.put_file(run, "/root/kept", b"changed after the restore")
    verb(b, run, "rollback", {"snapshot": snap})
    assert cat(b, run, "/root/kept") == "backed up"


def kept(r, sid):
    """/root/kept of sandbox sid, or None while its node is away."""
    try:
        return r.exec(sid, ["cat", "/root/kept"])["stdout"]
    except ApiError as e:
        if e.status in (409, 502, 503, 504):
            return None
        raise


def test_rolling_upgrade_of_a_cluster(lab, templates, previous_release):  # noqa: F811
    """A cluster of the previous release (two replicas on PostgreSQL, two
    workers) upgraded one machine at a time, the replicas first: a client
    asking the replicas (either will do, as behind a load balancer) is
    answered throughout, a sandbox on the worker that is not being
    upgraded runs commands throughout, and at the end the store is
    migrated, every sandbox runs with its files, and each upgraded node
    takes new sandboxes."""
    old_node = os.path.join(os.path.dirname(os.path.dirname(previous_release)), "node", "airlock-node")
    net = lab.bridge(nodes=2)
    pg = lab.postgres(bridge=net)
    replicas = [Replica(lab, f"r{i}", pg.url, net, lost_after_s=6) for i in range(2)]
    for r in replicas:
        r.argv[0] = previous_release
        r.spawn()
    for r in replicas:
        r.wait_serving()
    token = replicas[0].api("POST", "/v1/nodes/tokens", {"ttl_s": 600}, expect=201)["token"]
    token_file = os.path.join(lab.dir, "join.token")
    with open(os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(token + "\n")
    objstore = shared_objstore(lab)
    workers = [Worker(lab, f"w{i}", net.nodes[i], i, [r.cluster_addr for r in replicas], token_file,
                      objstore=objstore) for i in range(2)]
    for w in workers:
        w.argv[0] = old_node
        w.start()
    wait_ready(replicas[1], {"w0", "w1"})
    sids = {w.name: replicas[0].create("minimal", node=w.name)["id"] for w in workers}
    for name, sid in sids.items():
        replicas[0].exec(sid, ["sh", "-c", f"echo {name} > /root/kept; sync"])

    done, unanswered, answered = threading.Event(), [], [0]

    def client():
        while not done.is_set():
            for r in replicas:
                try:
                    r.api("GET", "/v1/sandboxes", timeout=10)
                    answered[0] += 1
                    break
                except (OSError, ApiError):
                    continue
            else:
                unanswered.append(time.monotonic())
            time.sleep(0.05)

    t = threading.Thread(target=client)
    t.start()
    try:
        for r in replicas:
            clusterlab_stop(r.proc, 30)
            r.argv[0] = AIRLOCKD
            r.start()
            other = replicas[1 - replicas.index(r)]
            assert other.exec(sids["w0"], ["cat", "/root/kept"])["stdout"] == "w0\n"
        n, top = pg.psql("SELECT count(*), max(version) FROM schema_migrations").strip().split("|")
        assert n == top and int(top) == 19, (n, top)
        for i, w in enumerate(workers):
            other = sids[workers[1 - i].name]
            clusterlab_stop(w.proc, 60)
            # the other worker's sandbox runs commands while this one is down
            assert replicas[i].exec(other, ["cat", "/root/kept"])["stdout"] == f"{workers[1 - i].name}\n"
            w.argv[0] = os.path.join(BUILD, "src", "node", "airlock-node")
            w.start()
            # back: its node rejoined and its sandbox (booted again: the
            # previous release saved no VM at its stop) answers
            wait_until(lambda: kept(replicas[1], sids[w.name]) == f"{w.name}\n", 180,
                       f"{w.name}'s sandbox running again on the upgraded node")
            wait_ready(replicas[0], {w.name})
    finally:
        done.set()
        t.join()
    assert not unanswered and answered[0] > 0, (len(unanswered), answered[0])
    for w in list(workers) + list(replicas):  # every process of the cluster this build's
        exes = {os.readlink(f"/proc/{p}/exe") for p in airlock_procs(w.data_dir)}
        assert exes and all(e.startswith(BUILD + "/src/") for e in exes), (w.name, exes)
    for w in workers:
        sid = replicas[1].create("minimal", node=w.name)["id"]
        assert replicas[0].exec(sid, ["echo", "upgraded"])["stdout"] == "upgraded\n"
    for r in replicas:
        assert r.api("GET", "/v1/webhooks")["webhooks"] == []  # this version's API on each
