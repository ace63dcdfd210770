"""The cluster tests' lab itself (tests/clusterlab.py), no Airlock: a
PostgreSQL server on a lab bridge reached over TCP from three node
namespaces, the namespaces reaching each other and the root namespace
reaching them, the deadlines' messages, and nothing left after close(),
also when the test body fails and the database was killed."""

import os
import subprocess
import sys
import time

import pytest

import clusterlab
from clusterlab import Lab, kill9, lab, log_tail, stop, wait_for, wait_tcp  # noqa: F401 (the lab fixture)

PSQL = os.path.join(clusterlab.PG_BIN, "psql")

# answers every connection with its own name and the peer's address
LISTENER = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen()
print("listening", flush=True)
while True:
    c, peer = s.accept()
    c.sendall(f"{sys.argv[3]} saw {peer[0]}\n".encode())
    c.close()
"""
CLIENT = r"""
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
print(c.makefile().readline().strip())
"""


def _nf_values():
    return {k: clusterlab._read(clusterlab._nf_path(k)).strip() for k in clusterlab.BRIDGE_NF_KEYS
            if os.path.exists(clusterlab._nf_path(k))}


def _nf_original():
    """The bridge sysctls as they were before any lab changed them (another
    suite's lab may hold the change now)."""
    state = clusterlab._load_nf_state()
    return {k: state["saved"].get(k, v) for k, v in _nf_values().items()}


def _assert_nf_restored(original, holder):
    """Our lab no longer holds the change; the values are back unless
    another lab holds it meanwhile."""
    if os.path.exists(clusterlab.BRIDGE_NF_STATE):
        state = clusterlab._load_nf_state()
        assert holder not in state["holders"], state
        assert state["holders"], f"{clusterlab.BRIDGE_NF_STATE} left without holders: {state}"
        assert all(original[k] == v for k, v in state["saved"].items()), (state, original)
    else:
        assert _nf_values() == original


def _what_is_left(net, pg, lab_dir, pids):
    """Everything of this lab still on the machine, as strings."""
    left = []
    netns = sorted(n for n in os.listdir(clusterlab.NETNS_DIR) if n.startswith(f"alnode{net.tag}-"))
    if netns:
        left.append(f"network namespaces {netns}")
    links = sorted(n for n in os.listdir("/sys/class/net")
                   if n == f"albr{net.tag}" or n.startswith(f"alv{net.tag}-"))
    if links:
        left.append(f"links {links}")
    if any(u.overlaps(net.subnet) for u in clusterlab._used_networks()):
        left.append(f"a route into {net.subnet}")
    pg_procs = []
    for pid in clusterlab._all_pids():
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            continue
        if cwd.startswith(pg.dir) or pg.dir in cmdline:
            pg_procs.append(pid)
    if pg_procs:
        left.append(f"PostgreSQL processes {pg_procs}")
    alive = [p for p in pids if clusterlab._alive(p)]
    if alive:
        left.append(f"processes {alive}")
    for d in (pg.dir, lab_dir):
        if os.path.exists(d):
            left.append(f"directory {d}")
    return left


def test_lab_postgres_and_nodes(lab):  # noqa: F811 (the fixture)
    t0 = time.monotonic()
    nf_original = _nf_original()
    net = lab.bridge(nodes=3)
    assert [net.addr(i) for i in range(3)] == [str(net.subnet.network_address + 10 + i) for i in range(3)]
    assert net.netns_path(1) == f"/run/netns/alnode{net.tag}-1" and os.path.exists(net.netns_path(1))
    # bridged frames bypass iptables while the lab runs
    assert all(v == "0" for v in _nf_values().values()), _nf_values()

    pg = lab.postgres(bridge=net)
    assert pg.url == f"postgresql://postgres@{net.host}:{pg.port}/airlock"
    assert pg.psql("SELECT 1").strip() == "1"  # the Unix socket
    r = subprocess.run([PSQL, "-X", "-At", "-d", pg.url_for(host="127.0.0.1"), "-c", "SELECT 1"],
                       capture_output=True, text=True, timeout=30)
    assert (r.returncode, r.stdout.strip()) == (0, "1"), r.stderr
    other = pg.create_database("airlock_b")
    assert other == f"postgresql://postgres@{net.host}:{pg.port}/airlock_b"

    # every node reaches PostgreSQL on the bridge address over TCP, from its
    # own address
    for i, n in enumerate(net.nodes):
        url = other if i == 2 else pg.url
        r = n.check([PSQL, "-X", "-At", "-v", "ON_ERROR_STOP=1", "-d", url,
                     "-c", "SELECT 1, host(inet_client_addr()), current_database()"])
        assert r.returncode == 0, f"psql in {n.name}: {r.stderr}"
        assert r.stdout.strip() == f"1|{n.addr}|{url.rsplit('/', 1)[1]}"
    # the control: a node's 127.0.0.1 is its own, where nothing listens
    r = net.nodes[0].check([PSQL, "-X", "-At", "-d", pg.url_for(host="127.0.0.1"), "-c", "SELECT 1"])
    assert r.returncode != 0 and "refused" in r.stderr, (r.returncode, r.stdout, r.stderr)

    # node to node: a listener in node 1, a client in node 2 (and the root
    # namespace, where the replicas will run, reaches node 1 too)
    port = 7411
    listener = lab.spawn([sys.executable, "-c", LISTENER, net.addr(1), str(port), "node1"],
                         name="listener", netns=net.nodes[1])
    lab.wait_tcp(net.addr(1), port, netns=net.nodes[0], proc=listener, timeout=10)
    wait_tcp(net.addr(1), port, proc=listener, timeout=10)
    r = net.nodes[2].check([sys.executable, "-c", CLIENT, net.addr(1), str(port)])
    assert (r.returncode, r.stdout.strip()) == (0, f"node1 saw {net.addr(2)}"), r.stderr
    assert "listening" in log_tail(listener)

    # the deadlines' messages: a server that exits, one that never listens
    boom = lab.spawn(["sh", "-c", "echo boom: no such config; exit 3"], name="boom", netns=net.nodes[0])
    with pytest.raises(AssertionError) as e:
        wait_tcp(net.addr(0), 7412, netns=net.nodes[0], proc=boom, timeout=10)
    assert "boom exited with status 3" in str(e.value) and "boom: no such config" in str(e.value)
    mute = lab.spawn(["sh", "-c", "echo starting; exec sleep 60"], name="mute", netns=net.nodes[0])
    wait_for(lambda: "starting" in log_tail(mute), 10, "the mute server did not log")
    with pytest.raises(AssertionError) as e:
        wait_tcp(net.addr(0), 7413, netns=net.nodes[0], proc=mute, timeout=0.3)
    msg = str(e.value)
    assert f"from netns alnode{net.tag}-0 within 0.3s" in msg and "starting" in msg and "refused" in msg, msg
    assert stop(mute, timeout=5) == -15
    victim = lab.spawn(["sleep", "60"], name="victim")
    assert kill9(victim) == -9

    # what close() must clean up on its own: a process its starter forgot in
    # a namespace, a child left in a spawned process's group
    stray = net.nodes[2].run(["sleep", "60"])
    parent = lab.spawn(["sh", "-c", "sleep 60 & echo $!; wait"], name="parent")
    orphan = int(wait_for(lambda: log_tail(parent).strip(), 10, "sh did not start its child"))

    pids = [p.pid for p in lab.procs] + [stray.pid, orphan, pg.proc.pid] + pg.pids()
    lab_dir = lab.dir
    assert _what_is_left(net, pg, lab_dir, [])  # the check sees a live lab
    lab.close()
    stray.wait(timeout=10)
    lab.close()  # idempotent (the fixture closes it once more)
    assert _what_is_left(net, pg, lab_dir, pids) == []
    assert any("alnode" in n and str(stray.pid) in n for n in lab.notes), lab.notes
    assert any(n.startswith("parent:") and str(orphan) in n for n in lab.notes), lab.notes
    _assert_nf_restored(nf_original, net.holder)
    print(f"lab self-test: {time.monotonic() - t0:.2f}s")


def test_lab_cleans_up_when_the_test_fails():
    nf_original = _nf_original()
    with pytest.raises(ZeroDivisionError):
        with Lab() as lab_:
            net = lab_.bridge(nodes=2)
            pg = lab_.postgres(bridge=net)
            sleeper = lab_.spawn(["sleep", "60"], name="sleeper", netns=net.nodes[1])
            pids = [sleeper.pid, pg.proc.pid] + pg.pids()
            lab_dir = lab_.dir
            kill9(pg.proc)  # the database crashed: its children are orphans now
            1 / 0
    assert _what_is_left(net, pg, lab_dir, pids) == []
    _assert_nf_restored(nf_original, net.holder)
