"""One machine on PostgreSQL (docs/cluster.md, "One machine on
PostgreSQL"): airlockd started as root with a postgres:// store runs this
machine's node too. airlock-nodemgr starts airlockd (the replica,
unprivileged) and, with the join token it writes, `airlock-node --join`
over the loopback: the node is a member of the cluster like any worker,
named after the host; health turns ready with its templates, sandboxes run
on it, and a stop ends it all (the leak checks). A replica started with
--no-local-node runs none: its start's progress says that it waits for
nodes to join and how to add one, then that one is ready."""

import os
import shutil
import socket
import subprocess

import harness
from clusterlab import lab, wait_for  # noqa: F401 (lab: the fixture)
from harness import free_port


def log_text(a):
    with open(a.log_path, errors="replace") as f:
        return f.read()


def test_one_machine_on_postgres_runs_its_own_node(lab, airlock_factory):  # noqa: F811
    pg = lab.postgres()
    name = socket.gethostname().split(".")[0]  # node_name_default()

    # a replica alone: no node of its own, and it says how to add one
    alone_port = free_port()
    alone = airlock_factory(env={"AIRLOCK_STORE": pg.url, "AIRLOCK_LOCAL_NODE": "0",
                                 "AIRLOCK_CLUSTER_LISTEN": f"127.0.0.1:{alone_port}"}, prebuild="", wait=False)
    wait_for(lambda: "no node is ready (0 joined)" in log_text(alone), 60,
             lambda: f"the replica's progress did not say it waits for nodes:\n{alone.log_tail(40)}")
    text = log_text(alone)
    assert f"airlock-node --join 127.0.0.1:{alone_port} --join-token-file join.token" in text, text
    assert "airlock nodes token > join.token" in text, text
    status, _, body = alone.request("GET", "/v1/health", auth=False)
    assert status == 503 and b"no node of the cluster is ready (0 joined" in body, (status, body)
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _is_node_of(p, alone.data_dir)]

    # one machine: the same store, started as root without flags
    one_env = {"AIRLOCK_STORE": pg.url, "AIRLOCK_CLUSTER_LISTEN": f"127.0.0.1:{free_port()}",
               "AIRLOCK_LOCAL_NODE_LISTEN": f"127.0.0.1:{free_port()}"}
    one = airlock_factory(env=one_env, prebuild="minimal")
    wait_for(lambda: "airlock: ready after" in log_text(one), 30,
             lambda: f"the start's progress did not end ready:\n{one.log_tail(60)}")
    assert f"this machine's node {name} joins the cluster" in log_text(one), one.log_tail(60)
    nodes = {n["name"]: n for n in one.api("GET", "/v1/nodes")["nodes"]}
    assert list(nodes) == [name] and nodes[name]["state"] == "ready", nodes
    sid = one.create("minimal")["id"]
    assert one.api("GET", f"/v1/sandboxes/{sid}")["node"] == name
    assert one.exec(sid, ["sh", "-c", "echo $((6*7))"])["stdout"] == "42\n"
    assert [p for p in os.listdir("/proc") if p.isdigit() and _is_node_of(p, one.data_dir)]

    # the replica alone sees the node join, says so, and serves it too
    wait_for(lambda: "1 node of the cluster ready" in log_text(alone), 60,
             lambda: f"the replica did not see the node:\n{alone.log_tail(40)}")
    alone.wait_ready(30)
    assert alone.api("GET", f"/v1/sandboxes/{sid}")["node"] == name
    assert alone.exec(sid, ["cat", "/proc/sys/kernel/hostname"])["exit_code"] == 0
    one.put_file(sid, "/root/kept", b"before the backup")

    # docs/operations.md, "Backups": the store with pg_dump while Airlock
    # is stopped (its data directory as on SQLite), the database lost and
    # restored with pg_restore: the next start has the sandbox
    alone.stop()
    one.stop()
    dump = os.path.join(os.path.dirname(one.data_dir), os.path.basename(one.data_dir) + ".pgdump")
    try:
        subprocess.run([os.path.join(pg.bin, "pg_dump"), "-Fc", "-d", pg.socket_url(), "-f", dump], check=True)
        pg.psql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        subprocess.run([os.path.join(pg.bin, "pg_restore"), "-d", pg.socket_url(), dump], check=True)
    finally:
        if os.path.exists(dump):
            os.unlink(dump)
    again = airlock_factory(data_dir=one.data_dir, prebuild="minimal", env=one_env)  # its settings, as a service
    wait_for(lambda: again.api("GET", f"/v1/sandboxes/{sid}")["state"] == "running", 120,
             lambda: f"the sandbox did not come back:\n{again.log_tail(60)}")
    assert again.get_file(sid, "/root/kept") == b"before the backup"
    again.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)


def _is_node_of(pid, data_dir):
    """Whether process pid is an airlock-node serving data_dir."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    return os.path.basename(argv[0]) == b"airlock-node" and data_dir.encode() in b" ".join(argv)


def test_a_local_node_on_postgres_needs_nodemgr(lab, airlock_factory):  # noqa: F811
    """Where airlock-nodemgr cannot run this machine's node (privilege
    separation off), the start fails at once and says what to do, leaving
    nothing; the control: the same start with --no-local-node serves."""
    pg = lab.postgres()
    data_dir = harness.volume_tempdir("airlock-t-")
    try:
        p = subprocess.run([harness.AIRLOCKD, "--data-dir", data_dir, "--listen", f"127.0.0.1:{free_port()}"],
                           env=dict(os.environ, AIRLOCK_STORE=pg.url, AIRLOCK_PRIVSEP="0"), capture_output=True,
                           timeout=60)
        assert p.returncode == 2, p
        assert b"start airlockd as root without AIRLOCK_PRIVSEP=0, or pass --no-local-node" in p.stderr, p
        assert os.listdir(data_dir) == [], os.listdir(data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    a = airlock_factory(env={"AIRLOCK_STORE": pg.url, "AIRLOCK_LOCAL_NODE": "0", "AIRLOCK_PRIVSEP": "0"},
                        prebuild="", wait=False)
    wait_for(lambda: _health(a) == 503, 60, "the replica serving")


def _health(a):
    try:
        return a.request("GET", "/v1/health", auth=False)[0]
    except OSError:
        return None
