"""A cluster on one machine (docs/cluster.md): a throwaway PostgreSQL, two
airlockd replicas sharing it, and worker nodes each in its own network
namespace on a bridge (tests/clusterlab.py), with real VMs.

Placement spreads creates and honours pins; a sandbox's requests reach its
node through either replica (capabilities signed by one replica verify on
nodes that got its key through heartbeats); a node killed outright turns
lost with its sandboxes while the others go on, and reconciles when it
comes back; a replica killed in the middle of a create or of a lifecycle
verb has its operation settled by the other, and an Idempotency-Key still
answers with what happened."""

import json
import os
import threading
import time

import harness
import pytest

from test_recovery import alive_in_guest, start_sleeper
from clusterlab import Replica, Worker, kill9, lab, s3_objstore, wait_for  # noqa: F401 (lab: the fixture)

LOST_AFTER_S = 6


def start_cluster(lab, n_workers, labels=None):
    """PostgreSQL, two replicas, n_workers workers joined and ready with
    the minimal template, their object store S3 (Swift's); returns
    (replicas, workers, pg, s3)."""
    net = lab.bridge(nodes=n_workers)
    pg = lab.postgres(bridge=net)
    # started together: they race to migrate the empty database
    replicas = [Replica(lab, f"r{i}", pg.url, net, lost_after_s=LOST_AFTER_S).spawn() for i in range(2)]
    for r in replicas:
        r.wait_serving()
    n, top = pg.psql("SELECT count(*), max(version) FROM schema_migrations").strip().split("|")
    assert n == top and int(top) >= 12, (n, top)  # every version once, none missing
    token = replicas[0].api("POST", "/v1/nodes/tokens", {"ttl_s": 600}, expect=201)["token"]
    token_file = os.path.join(lab.dir, "join.token")
    with open(os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(token + "\n")
    join = [r.cluster_addr for r in replicas]
    s3, objstore = s3_objstore(lab, net)
    workers = [Worker(lab, f"w{i}", net.nodes[i], i, join, token_file, labels=(labels or {}).get(i),
                      objstore=objstore).start() for i in range(n_workers)]
    wait_ready(replicas[1], {w.name for w in workers})
    return replicas, workers, pg, s3


def wait_ready(replica, names, timeout=180):
    def ready():
        nodes = replica.nodes()
        return all(n in nodes and nodes[n]["state"] == "ready" and "minimal" in (nodes[n].get("templates") or [])
                   for n in names)
    wait_for(ready, timeout, f"nodes {sorted(names)} ready with the minimal template")


def delete_all(replica):
    for s in replica.api("GET", "/v1/sandboxes")["sandboxes"]:
        replica.api("DELETE", f"/v1/sandboxes/{s['id']}", expect=204)


def sandbox(replica, sid):
    return replica.api("GET", f"/v1/sandboxes/{sid}")


def test_placement_lost_node_and_return(lab, templates):
    (r0, r1), workers, pg, s3 = start_cluster(lab, 3, labels={1: "zone=b"})
    w0, w1, w2 = workers

    # spread: creates through both replicas land on more than one node,
    # each shows its node, and every sandbox answers through the other
    # replica (whose capability the node checks with the key its
    # heartbeats brought)
    made = []
    for i in range(6):
        sb = (r0, r1)[i % 2].create("minimal")
        assert sb["node"] in ("w0", "w1", "w2"), sb
        made.append(sb)
    assert len({sb["node"] for sb in made}) >= 2, [sb["node"] for sb in made]
    for i, sb in enumerate(made):
        out = (r1, r0)[i % 2].exec(sb["id"], ["sh", "-c", f"echo {sb['id']}"])
        assert out["exit_code"] == 0 and out["stdout"].strip() == sb["id"], out
    # r0 rotates its signing key twice: its capabilities verify at once on
    # every node (an unknown key makes a node beat for the keys), and the
    # key retired by the second rotation leaves the store and the nodes
    first = r0.api("GET", "/v1/capability-keys")["current"]
    for _ in range(2):
        r0.api("POST", "/v1/capability-keys", expect=201)
        for sb in made:
            assert r0.exec(sb["id"], ["true"])["exit_code"] == 0
    wait_for(lambda: first not in pg.psql("SELECT kid FROM cap_keys") and all(
        not os.path.exists(os.path.join(w.data_dir, "cluster", "keys", "public", f"{first}.pub")) for w in workers),
        20, f"the retired key {first} gone from the nodes")
    # pins: by name and by label; a pin nothing matches is refused
    assert r0.create("minimal", node="w2")["node"] == "w2"
    assert r1.create("minimal", node_labels={"zone": "b"})["node"] == "w1"
    status, _, body = r0.request("POST", "/v1/sandboxes", {"template": "minimal", "node": "w9"})
    assert status == 404 and b"w9" in body, (status, body)
    status, _, body = r0.request("POST", "/v1/sandboxes", {"template": "minimal", "node_labels": {"zone": "z"}})
    assert status == 503 and b"no node" in body, (status, body)
    listed = {s["id"]: s["node"] for s in r1.api("GET", "/v1/sandboxes")["sandboxes"]}
    assert len(listed) == 8 and set(listed.values()) <= {"w0", "w1", "w2"}, listed
    out = r0.cli("nodes")
    assert out.returncode == 0, out.stderr
    assert all(f"w{i}" in out.stdout.decode() for i in range(3)), out.stdout

    # a sandbox on w2 suspended, its image whole in the (S3) object store
    on_w2 = [s for s, n in listed.items() if n == "w2"]
    elsewhere = [s for s, n in listed.items() if n != "w2"]
    assert on_w2 and elsewhere
    # with a volume on w2's store (a create goes to its volume's node)
    vol = r0.api("POST", "/v1/volumes", {"name": "nap-ws", "size": "32M", "node": "w2"}, expect=201)
    assert vol["node"] == "w2", vol
    napping = r0.create("minimal", volumes=[{"name": "nap-ws", "path": "/ws"}])
    assert napping["node"] == "w2", napping
    napping = napping["id"]
    r0.exec(napping, ["sh", "-c", "echo still-me > /root/mark && echo on-the-volume > /ws/f && sync"])
    sleeper = start_sleeper(r0, napping)
    r0.api("POST", f"/v1/sandboxes/{napping}/suspend?wait=true")
    wait_for(lambda: sandbox(r1, napping).get("image_uploaded") is True, 60, "the suspended image uploaded")
    listing = s3.request("GET", f"/{s3.bucket}", query=[("list-type", "2")]).body.decode()
    assert f"snapshots/{napping}" in listing, listing  # in the bucket, where any node finds it
    # a disk snapshot of a sandbox on w2, exported: it outlives w2
    r0.exec(on_w2[0], ["sh", "-c", "echo kept-on-w2 > /root/mark && sync"])
    snap = r0.api("POST", f"/v1/sandboxes/{on_w2[0]}/snapshots", {"kind": "disk"}, expect=201)["id"]
    exported = r0.api("POST", f"/v1/sandboxes/{on_w2[0]}/images", {"snapshot": snap}, expect=201)
    assert exported["kind"] == "disk" and exported["snapshot_id"] == snap, exported

    # w2 dies outright: lost after the grace, with its sandboxes; the others
    # go on, and nothing new goes there
    w2.kill9()
    wait_for(lambda: r1.nodes()["w2"]["state"] == "lost", LOST_AFTER_S + 15, "w2 lost")
    wait_for(lambda: all(sandbox(r0, s)["state"] == "lost" for s in on_w2), 15, "w2's sandboxes lost")
    status, _, body = r0.request("POST", f"/v1/sandboxes/{on_w2[0]}/exec", {"cmd": ["true"]})
    assert status == 409 and b"lost" in body, (status, body)
    for s in elsewhere:
        assert r1.exec(s, ["true"])["exit_code"] == 0
    for _ in range(4):
        assert r1.create("minimal")["node"] in ("w0", "w1")
    # the exported snapshot boots elsewhere, though its node is gone
    again = r1.api("POST", "/v1/sandboxes", {"image": exported["id"]}, expect=201)
    assert again["node"] in ("w0", "w1"), again
    assert r0.exec(again["id"], ["cat", "/root/mark"])["stdout"] == "kept-on-w2\n"
    # the suspended one is not lost: it wakes on another node, as it was
    assert sandbox(r0, napping)["state"] == "suspended"
    r1.api("POST", f"/v1/sandboxes/{napping}/wake?wait=true")
    woke = sandbox(r0, napping)
    assert woke["state"] == "running" and woke["node"] in ("w0", "w1"), woke
    assert r0.exec(napping, ["cat", "/root/mark"])["stdout"] == "still-me\n"
    assert alive_in_guest(r1, napping, sleeper)  # its processes go on there
    # its volume came along in its image (w2 is gone): what the disk under
    # its memory holds, mounted where it was; and the volume follows it
    out = r0.exec(napping, ["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches && cat /ws/f && echo moved > /ws/g"])
    assert out["exit_code"] == 0 and out["stdout"] == "on-the-volume\n", out
    assert r1.api("GET", "/v1/volumes/nap-ws")["node"] == woke["node"]
    # a lost sandbox deleted meanwhile: its row goes now, its VM when w2 is back
    gone = on_w2.pop()
    r0.api("DELETE", f"/v1/sandboxes/{gone}", expect=204)
    assert r0.request("GET", f"/v1/sandboxes/{gone}")[0] == 404

    # w2 comes back (a member already: no new join): it reconciles
    w2.start()
    wait_for(lambda: r0.nodes()["w2"]["state"] == "ready", 120, "w2 ready again")
    wait_for(lambda: all(sandbox(r1, s)["state"] == "running" for s in on_w2), 180,
             "w2's sandboxes running again")
    for s in on_w2:
        assert r0.exec(s, ["true"])["exit_code"] == 0
    wait_for(lambda: not os.path.exists(os.path.join(w2.data_dir, "sandboxes", gone)), 30,
             f"the deleted {gone} removed from w2")
    # the volume's writer goes: what it wrote stays with the volume, on its
    # new node, where the next sandbox that uses it runs
    r1.api("DELETE", f"/v1/sandboxes/{napping}", expect=204)
    reader = r0.create("minimal", volumes=[{"name": "nap-ws", "path": "/ws", "read_only": True}])
    assert reader["node"] == woke["node"], reader
    assert r1.exec(reader["id"], ["cat", "/ws/f", "/ws/g"])["stdout"] == "on-the-volume\nmoved\n"
    r0.api("DELETE", f"/v1/sandboxes/{reader['id']}", expect=204)
    r0.api("DELETE", "/v1/volumes/nap-ws", expect=204)

    # drain: nothing new goes to w0; undrain: it may again
    r0.api("POST", "/v1/nodes/w0/drain")
    assert r1.nodes()["w0"]["state"] == "draining"
    for _ in range(4):
        assert r1.create("minimal")["node"] != "w0"
    r0.api("POST", "/v1/nodes/w0/undrain")
    assert r0.create("minimal", node="w0")["node"] == "w0"
    # a node with sandboxes is not removed; an empty one is
    status, _, body = r0.request("DELETE", "/v1/nodes/w1")
    assert status == 409 and b"sandboxes" in body, (status, body)
    delete_all(r1)
    r1.api("DELETE", "/v1/nodes/w1", expect=204)
    assert "w1" not in r0.nodes()


def stall_updates(pg, from_state, to_state):
    """Makes PostgreSQL hold (in pg_sleep) the update that moves a sandbox
    row from from_state to to_state: the replica making it is caught after
    its node did the work and before the store says so."""
    pg.psql(f"""
        CREATE OR REPLACE FUNCTION airlock_test_stall() RETURNS trigger AS $$
        BEGIN PERFORM pg_sleep(120); RETURN NEW; END $$ LANGUAGE plpgsql;
        CREATE TRIGGER airlock_test_stall BEFORE UPDATE ON sandboxes FOR EACH ROW
          WHEN (OLD.state = '{from_state}' AND NEW.state = '{to_state}')
          EXECUTE FUNCTION airlock_test_stall();""")


def stall_deletes(pg):
    """The same for the delete of a sandbox row (the last step of a delete)."""
    pg.psql("""
        CREATE OR REPLACE FUNCTION airlock_test_stall() RETURNS trigger AS $$
        BEGIN PERFORM pg_sleep(120); RETURN OLD; END $$ LANGUAGE plpgsql;
        CREATE TRIGGER airlock_test_stall BEFORE DELETE ON sandboxes FOR EACH ROW
          EXECUTE FUNCTION airlock_test_stall();""")


def stalled(pg):
    out = pg.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'")
    return out.strip().splitlines()[-1].strip() not in ("0", "")


def unstall(pg):
    """The killed replica's session dies with it; the trigger goes."""
    pg.psql("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE wait_event = 'PgSleep';"
            "DROP TRIGGER airlock_test_stall ON sandboxes;")


def in_thread(fn, *args, **kwargs):
    out = {}

    def run():
        try:
            out["value"] = fn(*args, **kwargs)
        except Exception as e:  # the replica it talks to is killed
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_replica_killed_mid_operation(lab, templates):
    (r0, r1), (w0,), pg, _ = start_cluster(lab, 1)

    # mid-create: w0 made the VM, r0 dies before the store says so; r1
    # takes the operation over when r0's lease runs out and adopts the
    # sandbox; the same Idempotency-Key, asked of r1, answers with it
    stall_updates(pg, "creating", "running")
    key = {"Idempotency-Key": "create-1"}
    t, _ = in_thread(r0.request, "POST", "/v1/sandboxes", {"template": "minimal"}, headers=key, timeout=60)
    wait_for(lambda: stalled(pg), 60, "r0's create held after the node made the VM")
    r0.kill9()
    unstall(pg)
    t.join(10)
    status, _, body = r1.request("POST", "/v1/sandboxes", {"template": "minimal"}, headers=key)
    assert status in (200, 201), (status, body)
    sb = json.loads(body)
    assert sb["state"] == "running" and sb["node"] == "w0", sb
    assert r1.exec(sb["id"], ["true"])["exit_code"] == 0
    op = r1.api("GET", f"/v1/operations/{sb['operation_id']}")
    assert op["state"] == "succeeded", op
    assert [s["id"] for s in r1.api("GET", "/v1/sandboxes")["sandboxes"]] == [sb["id"]]  # nothing duplicated

    # mid-verb: r0 is back (a new replica on the same data dir); w0 paused
    # the VM, r0 dies before the store says so; r1 settles the pause as
    # succeeded from what w0 reports
    r0.start()
    stall_updates(pg, "pausing", "paused")
    t, _ = in_thread(r0.request, "POST", f"/v1/sandboxes/{sb['id']}/pause", None,
                     headers={"Idempotency-Key": "pause-1"}, timeout=60)
    wait_for(lambda: stalled(pg), 60, "r0's pause held after the node paused the VM")
    r0.kill9()
    unstall(pg)
    t.join(10)
    wait_for(lambda: sandbox(r1, sb["id"])["state"] == "paused", 60, "the pause settled by r1")
    ops = pg.psql("SELECT state FROM operations WHERE idempotency_key = 'pause-1'")
    assert "succeeded" in ops, ops
    # the key still holds on r1: the same pause answers with that operation
    status, _, body = r1.request("POST", f"/v1/sandboxes/{sb['id']}/pause?wait=true", None,
                                 headers={"Idempotency-Key": "pause-1"})
    assert status == 200 and json.loads(body)["state"] == "succeeded", (status, body)
    r1.api("POST", f"/v1/sandboxes/{sb['id']}/resume?wait=true")
    assert r1.exec(sb["id"], ["true"])["exit_code"] == 0

    # mid-fork: the child runs on w0, r0 dies before the store says so; r1
    # finds the child through the operation and keeps it
    r0.start()
    stall_updates(pg, "creating", "running")
    t, _ = in_thread(r0.request, "POST", f"/v1/sandboxes/{sb['id']}/fork", None,
                     headers={"Idempotency-Key": "fork-1"}, timeout=60)
    wait_for(lambda: stalled(pg), 60, "r0's fork held after the node made the child")
    r0.kill9()
    unstall(pg)
    t.join(10)

    def fork_settled():
        op = pg.psql("SELECT state, result FROM operations WHERE idempotency_key = 'fork-1'").strip()
        return op.startswith("succeeded|") and op
    op = wait_for(fork_settled, 60, "the fork settled by r1")
    child = json.loads(op.split("|", 1)[1])["sandbox"]["id"]
    assert sandbox(r1, child)["state"] == "running"
    assert r1.exec(child, ["true"])["exit_code"] == 0

    # mid-delete: w0 removed the VM, r0 dies before the row goes; r1
    # finishes the delete
    r0.start()
    stall_deletes(pg)
    t, _ = in_thread(r0.request, "DELETE", f"/v1/sandboxes/{child}", None,
                     headers={"Idempotency-Key": "delete-1"}, timeout=60)
    wait_for(lambda: stalled(pg), 60, "r0's delete held after the node removed the VM")
    r0.kill9()
    unstall(pg)
    t.join(10)
    wait_for(lambda: r1.request("GET", f"/v1/sandboxes/{child}")[0] == 404, 60, "the delete finished by r1")
    assert "succeeded" in pg.psql("SELECT state FROM operations WHERE idempotency_key = 'delete-1'")
    assert r1.request("DELETE", f"/v1/sandboxes/{child}", headers={"Idempotency-Key": "delete-1"})[0] == 204
    assert not harness.qemu_pids(child)
    delete_all(r1)
