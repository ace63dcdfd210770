#!/usr/bin/python3
"""Chaos soak: a bounded run of mixed lifecycle operations over a few
sandboxes of an Airlock of its own while processes around them are killed
on a schedule; afterwards (and after every fault) it checks that nothing
acknowledged was lost or corrupted and that nothing leaked.

  sudo bench/soak.py [--minutes 3] [--seed N] [--sandboxes 3] [--template minimal]
                     [--workers 2] [--fault-interval 15,30] [--faults KIND,...]
                     [--recovery boot|checkpoint] [--upload-sync] [--json] [--keep]
  sudo bench/soak.py --cluster [--replicas 2] [--nodes 2] [--node-lost-after-s 10] ...

(docs/testing.md, "Chaos soak", says what the output means.)

It starts airlockd (as root: airlock-nodemgr, airlockd and airlock-node,
three processes) with tests/harness.py's settings in a data dir of its own
on the test volume (AIRLOCK_TEST_VOLUME, default build/test-vol: mount it
first, see docs/testing.md) on a port of its own, and restarts that same
data dir and port itself when a fault took the whole stack down, as a
service manager would.

Operations (each worker owns some sandboxes; the choice is seeded):
  write     exec `echo N >> /root/ledger && sync`: N is acknowledged only
            when the exec returned exit 0 (a write whose exec did not
            return may be there or not)
  upload    PUT a file of random bytes: its SHA-256 is acknowledged when the
            PUT answered 200 (docs/api.md: a file the API wrote survives a
            VMM crash); with --upload-sync only after an exec of `sync` too
  read      read the ledger and every file back and check them
  pause, resume, stop, start, suspend, wake (explicit), write_wake (a
  write to a suspended sandbox: a transparent wake), snapshot_disk,
  snapshot_full (each remembers the expected ledger and files at that
  instant), rollback (expectations become the snapshot's), fork (the child
  inherits the parent's expectations), delete and create, and agent_upgrade
  (the guest agent replaced in place, docs/guest-protocol.md): the first
  restart of the stack brings a newer agent (the test build's
  airlock-guest-next), which the node then also puts into every idle
  sandbox by itself; --no-agent-upgrade keeps the agent.
Volumes (docs/volumes.md): every --volume-every'th sandbox made (2: half)
gets a volume of its own, read-write at /vol, where half its uploads go. A
disk rollback leaves the volume's files as they were, a full one takes
them back with the memory; such a sandbox is not forked (one writer at a
time); its volume is deleted after it, and every volume at the end.
Lifecycle verbs carry an Idempotency-Key; one cut off by a fault is asked
again with the same key once the stack is healthy, which says what it did.

Faults, one every --fault-interval seconds (seeded; half of the process
kills wait for a suspend in flight, a quarter of the VMM kills for a slow
verb; --faults picks the kinds): SIGKILL of airlock-node (nodemgr
restarts it), of airlockd's own pid (nodemgr hands the VMs over and exits:
we start the stack again), of one VMM (the node recovers it), of
airlock-nodemgr (airlockd and the node follow it: we start the stack
again), and once per run SIGTERM to all three at once (systemd's
KillMode=control-group, a terminal's Ctrl-C), then a start. Each fault's
recovery window lasts until /v1/health answers 200 and every sandbox is in
a settled state again; its length is the recovery time. Ops that fail in a
window are expected and counted apart; failures outside one are errors.

Checks after every fault and at the end: every acknowledged ledger entry is
there in order, every acknowledged file has its checksum, every sandbox is
listed and usable, and no leak: one QEMU per running or paused sandbox and
none of a sandbox the API does not know, nothing mounted twice, no loop
device, no empty VM cgroup (airlock-vm-UID of one of our VMs' uids), no
directory of a deleted sandbox. Exit status 1 on any loss, corruption,
leak or a stack that did not recover; 2 on bad arguments.

--cluster: the same operations, models and checks against a cluster of its
own (docs/cluster.md), started through tests/clusterlab.py: a throwaway
PostgreSQL on a lab bridge, --replicas airlockd replicas on it (--store
postgres, --cluster-listen on the bridge), a join token, --nodes workers
each in its own network namespace (clusterlab.Worker). Every request goes
to a replica chosen per request (seeded per thread), so one sandbox's
requests alternate between replicas; a verb cut off by a fault is asked
again with its Idempotency-Key of any replica once the cluster is healthy.
Its faults: SIGKILL of a replica (started again on its data dir; its
operations are settled by another after their lease), of a worker's
airlock-node (its nodemgr starts another), of one VMM on a worker, and of
a whole worker (every process, VMs included: lost after
--node-lost-after-s, started again a while later; its sandboxes must come
back with what they had acknowledged). A recovery window lasts until every
replica is healthy, every worker ready, every sandbox settled and no
operation of a dead replica unsettled; a sandbox `lost` meanwhile (409 to
every operation) is the fault's expected outcome. The checks add: every
sandbox row names one of the workers, no sandbox's VM runs under two
workers' data dirs (or under another than its row names), no operation
unfinished past its lease (10 s) plus a margin, and leaks per worker."""

import argparse
import collections
import copy
import hashlib
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
os.environ.setdefault("AIRLOCK_TEST_VOLUME", os.path.join(ROOT, "build", "test-vol"))
import harness  # noqa: E402
import clusterlab  # noqa: E402

# the guest agent a restart brings (the test build's, version 0.99.0)
NEXT_AGENT = os.path.join(harness.BUILD, "tests", "airlock-guest-next")

STABLE = {"running", "paused", "stopped", "suspended"}
HEAVY = {"suspend", "wake", "write_wake", "fork", "snapshot_full", "rollback", "start", "stop", "create", "delete"}
FAULTS = ("node", "airlockd", "vmm", "nodemgr")
FAULTS_CLUSTER = ("replica", "node", "vmm", "worker")
LEASE_S = 10  # an operation's lease (src/daemon/replica.h, REPLICA_LEASE_MS)
LEASE_MARGIN_S = 20  # past its lease by this much, an unfinished operation was left behind
OPS_SETTLE_S = 90  # with nothing of ours in flight, every operation ends within this
RECOVER_TIMEOUT = 300  # a fault's recovery window may last this long
FAILED_GRACE = 30  # a sandbox failed this long with the stack healthy is not coming back (lost)
OP_TIMEOUT = 240  # one HTTP request
SNAP_FILES_MAX = 10  # our pinned snapshot files per sandbox (the node keeps 64, scheduled ones included)
FILES_PER_SANDBOX = 6
VOLUME_PATH = "/vol"  # where a sandbox's volume is mounted (docs/volumes.md)
VOLUME_SIZE = "32M"
MAX_PROBLEMS_SHOWN = 40


def now():
    return time.monotonic()


class OpFailed(Exception):
    pass


# --- expectations ----------------------------------------------------------

class Model:
    """What one sandbox must hold: ledger entries acknowledged in order,
    entries that may be there (their exec did not return) and, per file,
    the acknowledged checksum plus those that may be there."""

    def __init__(self):
        self.committed = []
        self.uncertain = set()
        self.files = {}  # path -> {"must": sha or None, "may": set(), "old": set()}

    def clone(self):
        return copy.deepcopy(self)

    def problems(self, entries, bad_lines, files):
        """[(kind, text)] for what was read back: entries (ints in file
        order), lines that were no entry, files {path: sha or None}."""
        out = []
        if bad_lines:
            out.append(("corrupt", f"ledger lines that are no entry: {bad_lines[:5]!r}"))
        allowed = set(self.committed) | self.uncertain
        unknown = [e for e in entries if e not in allowed]
        if unknown:
            out.append(("corrupt", f"ledger entries never written here: {unknown[:10]}"))
        dup = sorted(e for e, n in collections.Counter(entries).items() if n > 1)
        if dup:
            out.append(("corrupt", f"ledger entries twice: {dup[:10]}"))
        want = set(self.committed)
        got = [e for e in entries if e in want]
        missing = [e for e in self.committed if e not in set(got)]
        if missing:
            out.append(("lost", f"{len(missing)} acknowledged ledger entries missing: {missing[:20]}"
                                f" (acknowledged {len(self.committed)}, last {self.committed[-3:]}; ledger has"
                                f" {len(entries)} entries, last {entries[-3:]})", len(missing)))
        elif got != self.committed:
            out.append(("corrupt", f"acknowledged ledger entries out of order: {got[:20]}"))
        for path, f in sorted(self.files.items()):
            sha = files.get(path)
            if sha == f["must"] or sha in f["may"]:
                continue
            if sha is None:
                out.append(("lost", f"acknowledged file {path} is gone", 1))
            elif sha in f["old"]:
                out.append(("lost", f"file {path} went back to an earlier version ({sha[:12]}, acknowledged "
                                    f"{(f['must'] or 'absent')[:12]})", 1))
            else:
                out.append(("corrupt", f"file {path} has checksum {sha[:12]}, acknowledged "
                                       f"{(f['must'] or 'absent')[:12]}"))
        return out

    def accept(self, entries, files):
        """Takes what was read back as the new expectation (after a loss was
        counted, so the same loss is not counted again)."""
        seen = set(entries)
        self.committed = [e for e in entries if e in set(self.committed)]
        self.uncertain |= seen - set(self.committed)
        for path, f in self.files.items():
            f["must"] = files.get(path)
            f["may"].clear()


def keep_volume_files(after, before):
    """What after (models of a disk snapshot) expects of the volume's files:
    what before (the models until the rollback) did, any of them."""
    prefix = VOLUME_PATH + "/"
    vol = {}
    for b in before:
        for path, f in b.files.items():
            if path.startswith(prefix):
                g = vol.setdefault(path, {"must": f["must"], "may": set(), "old": set()})
                g["may"] |= f["may"] | ({f["must"]} - {g["must"], None})
                g["old"] |= f["old"]
    for m in after:
        for path in [p for p in m.files if p.startswith(prefix)]:
            del m.files[path]
        m.files.update(copy.deepcopy(vol))


class Sandbox:
    def __init__(self, sid, worker, models, state="running"):
        self.id = sid
        self.worker = worker
        self.models = models  # candidates: an ambiguous rollback leaves two
        self.state = state
        self.execution = None
        self.snapshots = []  # (snap_id, kind, [Model])
        self.snap_files = 0
        self.vmm_kills = []  # monotonic times
        self.history = collections.deque(maxlen=40)
        self.lost = False
        self.volume = None  # its own volume's name (read-write at VOLUME_PATH), or None

    def note(self, t0, what):
        self.history.append(f"t={t0:7.1f}s {what}")


# --- the stack -------------------------------------------------------------

class Stack(harness.Airlock):
    """The harness's Airlock, startable again on the same data dir and
    port (a service manager's restart); the log is appended to across
    starts."""

    def __init__(self, data_dir, prebuild, env_extra):
        self.data_dir = data_dir
        self.port = harness.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = data_dir + ".log"
        self.env = dict(os.environ)
        self.env.update({"AIRLOCK_TEMPLATES_DIR": harness.TEMPLATES, "AIRLOCK_EGRESS_CA_DIR": harness.EGRESS_CA, "AIRLOCK_PREBUILD": prebuild,
                         "AIRLOCK_LOG_LEVEL": "debug", "AIRLOCK_POOL_SIZE": "0"})
        self.env.update(env_extra)
        self.log = open(self.log_path, "ab")
        self.token = None
        self.starts = 0
        self.proc = None
        self.spawn()

    def spawn(self):
        self.starts += 1
        self.log.write(f"--- soak: start {self.starts} of airlockd at {time.strftime('%H:%M:%S')}\n".encode())
        self.log.flush()
        self.proc = subprocess.Popen(
            [harness.AIRLOCKD, "--data-dir", self.data_dir, "--listen", f"127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)

    def mark(self, text):
        if self.log.closed:
            return
        self.log.write(f"--- soak: {text}\n".encode())
        self.log.flush()

    def call(self, method, path, body=None, expect=(200,), key=None, timeout=OP_TIMEOUT):
        h = {"Idempotency-Key": key} if key else None
        status, _, data = self.request(method, path, body, headers=h, timeout=timeout)
        if status not in expect:
            raise harness.ApiError(status, data[:300])
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return data


class ClusterStack:
    """A cluster of its own through tests/clusterlab.py: PostgreSQL on a lab
    bridge, replicas r0.. on it, workers w0.. each in a network namespace,
    joined with one token and ready with the template. Requests go to a
    replica chosen per request (seeded per thread: seed_thread()) among
    those up; a replica the soak killed is out until it serves again, as
    behind a load balancer. The soak's marks go to DIR/soak.log and to every
    process's log; close() copies the lab's logs to DIR before the lab goes."""

    def __init__(self, a, keep_dir):
        self.a = a
        self.keep_dir = keep_dir
        self.log_path = os.path.join(keep_dir, "soak.log")
        self.log = open(self.log_path, "ab")
        self.lab = clusterlab.Lab()
        self.lock = threading.Lock()
        self.local = threading.local()
        self.rng = random.Random(a.seed ^ 0xC1)  # threads without seed_thread()
        self.busy = {}  # request -> (replica name, path): what is in flight where
        self.n_req = 0
        self.per_replica = collections.Counter()  # requests sent to each
        self.replicas, self.workers = [], []
        self.down = set()  # replicas killed and not serving again yet
        self.ids = {}  # replica name -> id of its running process (rep-…)
        self.pg = self.net = self.objstore = None

    # --- start ---------------------------------------------------------------
    def start(self):
        a = self.a
        self.net = self.lab.bridge(nodes=a.nodes)
        self.pg = self.lab.postgres(bridge=self.net)
        for i in range(a.replicas):
            r = clusterlab.Replica(self.lab, f"r{i}", self.pg.url, self.net, lost_after_s=a.node_lost_after_s)
            self.replicas.append(r)
            self.start_replica(r)
        token = self.replicas[0].api("POST", "/v1/nodes/tokens", {"ttl_s": 3600}, expect=201)["token"]
        token_file = os.path.join(self.lab.dir, "join.token")
        with open(os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(token + "\n")
        join = [r.cluster_addr for r in self.replicas]
        self.objstore = clusterlab.shared_objstore(self.lab)  # a suspended sandbox may wake on any worker
        for i in range(a.nodes):
            w = clusterlab.Worker(self.lab, f"w{i}", self.net.nodes[i], i, join, token_file, objstore=self.objstore)
            w.argv[w.argv.index("--prebuild") + 1] = a.template
            self.workers.append(w)
            w.start()
        names = {w.name for w in self.workers}

        def ready():
            try:
                nodes = self.replicas[-1].nodes()
            except (OSError, harness.ApiError):
                return False
            return all(n in nodes and nodes[n]["state"] == "ready" and a.template in (nodes[n].get("templates") or [])
                       for n in names)
        clusterlab.wait_for(ready, harness.FIRST_START_TIMEOUT, f"workers {sorted(names)} ready with {a.template}",
                            interval=0.5)

    def start_replica(self, r):
        """Starts r (again: the same data dir and ports) and takes it back
        into the rotation once it serves; reads its id from its log."""
        r.start(timeout=harness.START_TIMEOUT)
        m = re.search(r"replica (rep-[0-9A-Za-z]+) ", clusterlab.log_tail(r.log_path, 400))
        with self.lock:
            self.ids[r.name] = m.group(1) if m else None
            self.down.discard(r.name)

    def seed_thread(self, seed):
        self.local.rng = random.Random(seed)

    # --- requests ------------------------------------------------------------
    def pick(self):
        with self.lock:
            up = [r for r in self.replicas if r.name not in self.down] or list(self.replicas)
            rng = getattr(self.local, "rng", None) or self.rng
            r = rng.choice(up)
        via = getattr(self.local, "via", None)
        if via is not None:
            via.append(r.name)
        return r

    def request(self, method, path, body=None, auth=True, headers=None, timeout=600, replica=None):
        r = replica or self.pick()
        with self.lock:
            self.n_req += 1
            key = self.n_req
            self.busy[key] = (r.name, path)
            self.per_replica[r.name] += 1
        try:
            return r.request(method, path, body, auth=auth, headers=headers, timeout=timeout)
        finally:
            with self.lock:
                self.busy.pop(key, None)

    call = Stack.call

    def mark(self, text):
        line = f"--- soak: {text}\n".encode()
        paths = [getattr(p.proc, "log_path", None) for p in (list(self.replicas) + list(self.workers))
                 if getattr(p, "proc", None)]
        for path in paths:
            try:
                with open(path, "ab") as f:  # O_APPEND: whole lines between the process's own
                    f.write(line)
            except (OSError, TypeError):
                pass
        if not self.log.closed:
            self.log.write(f"[{time.strftime('%H:%M:%S')}] ".encode() + line)
            self.log.flush()

    # --- what runs where -----------------------------------------------------
    def sql(self, query):
        """Rows of query (psql -At over the server's socket), split on |."""
        return [line.split("|") for line in self.pg.psql(query).splitlines() if line]

    def replica_carrying(self, sid):
        """The replica a request about sandbox sid is in flight on, if any."""
        if not sid:
            return None
        with self.lock:
            names = [n for n, path in self.busy.values() if sid in path]
        return next((r for r in self.replicas if names and r.name == names[0]), None)

    def worker_named(self, name):
        return next((w for w in self.workers if w.name == name), None)

    def worker_hosting(self, sid):
        if not sid or not re.fullmatch(r"sbx-[0-9a-z]+", sid):
            return None
        rows = self.sql(f"SELECT coalesce(node, '') FROM sandboxes WHERE id = '{sid}'")
        return self.worker_named(rows[0][0]) if rows else None

    def worker_of_path(self, path):
        return next((w.name for w in self.workers if path.startswith(w.data_dir + "/")), None)

    def node_pids(self, w):
        return [p for p, n in airlock_procs(w.data_dir).items() if n == "airlock-node"]

    def node_states(self):
        return {n["name"]: n["state"] for n in self.call("GET", "/v1/nodes", timeout=30)["nodes"]}

    def health(self):
        """None when every replica answers /v1/health 200, every worker is
        ready and no operation of a replica that died is unsettled, else
        what is not."""
        with self.lock:
            down = sorted(self.down)
            live = {i for n, i in self.ids.items() if n not in self.down}
        if down:
            return f"replica {down[0]} is down"
        for r in self.replicas:
            status, _, body = self.request("GET", "/v1/health", auth=False, timeout=10, replica=r)
            if status != 200:
                return f"{r.name} health: {status} {body[:100]!r}"
        states = self.node_states()
        for w in self.workers:
            if states.get(w.name) != "ready":
                return f"worker {w.name} is {states.get(w.name)}"
        if None not in live:
            orphans = [row for row in self.sql("SELECT id, verb, sandbox_id, coalesce(owner, '') FROM operations "
                                               "WHERE state IN ('pending', 'running')")
                       if row[3] and row[3] not in live]
            if orphans:
                return f"operations of a replica that died not settled yet: {orphans[:3]}"
        return None

    def unfinished_ops(self):
        """(id, verb, state, sandbox_id, owner, seconds past its lease (< 0:
        before it), age s) of every operation not finished, by the store's
        clock."""
        out = []
        q = ("SELECT id, verb, state, sandbox_id, coalesce(owner, ''), "
             "(extract(epoch from clock_timestamp()) * 1000)::bigint - coalesce(lease_until, 0), "
             "(extract(epoch from clock_timestamp()) * 1000)::bigint - created_at "
             "FROM operations WHERE state IN ('pending', 'running') ORDER BY created_at")
        for row in self.sql(q):
            out.append((row[0], row[1], row[2], row[3], row[4], int(row[5]) / 1000, int(row[6]) / 1000))
        return out

    # --- the end -------------------------------------------------------------
    def stop(self):
        """Stops the workers (SIGTERM: nodemgr stops its node and gateway),
        then the replicas; returns what the workers left (Worker.leaks, and
        the harness's data-dir checks, which clean up what they find)."""
        out = []
        try:
            rows = self.sql("SELECT id, coalesce(node, '') FROM sandboxes")
        except Exception as e:  # noqa: BLE001
            rows = []
            out.append(f"cannot read the store: {e}")
        for w in self.workers:
            if w.proc is not None:
                clusterlab.stop(w.proc, 60)
        for w in self.workers:
            out += w.leaks()
            # the harness's check reads a SQLite store; a worker's sandboxes are the rows naming it
            out += [f"{w.name}: {x}" for x in harness._check_no_leaks(w.data_dir)
                    if x.startswith(("warm pool", "half-written", "jail roots"))]
            try:
                dirs = set(os.listdir(os.path.join(w.data_dir, "sandboxes")))
            except OSError:
                dirs = set()
            orphans = sorted(dirs - {sid for sid, node in rows if node == w.name})
            if orphans:
                out.append(f"{w.name}: sandbox dirs without a sandbox there: {orphans}")
        for r in self.replicas:
            if r.proc is not None:
                clusterlab.stop(r.proc, 30)
        return out

    def close(self):
        """Copies the lab's logs (every process's, PostgreSQL's) to DIR and
        closes the lab (everything it started goes). Returns what closing
        found that stop() had not."""
        out = []
        try:
            for n in os.listdir(self.lab.dir):
                if n.endswith(".log"):
                    shutil.copy(os.path.join(self.lab.dir, n), self.keep_dir)
            if self.pg is not None and self.pg.dir and os.path.exists(self.pg.log_path):
                shutil.copy(self.pg.log_path, os.path.join(self.keep_dir, "postgres.log"))
        except OSError as e:
            out.append(f"copying the logs: {e}")
        try:
            self.lab.close()
        except AssertionError as e:
            if "worker left resources behind" not in str(e):  # stop() reported those
                out.append(f"closing the lab: {e}")
        except Exception as e:  # noqa: BLE001
            out.append(f"closing the lab: {e!r}")
        out += [f"lab: {n}" for n in self.lab.notes]
        self.log.close()
        return out


airlock_procs = harness.airlock_procs


def vm_map(data_dir):
    """({sandbox_id: [qemu pids]}, [qemu pids of no sandbox]) from each
    QEMU's run dir: its vmm.pid must name this QEMU (else the run dir is
    another VM's now, or nobody's), and its disk.img link names the
    sandbox."""
    by_id, unknown = collections.defaultdict(list), []
    for pid in harness.qemu_pids(data_dir):
        sid = None
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
            for arg in argv:
                if arg.startswith("id=d0,file="):
                    link = arg[len("id=d0,file="):].split(",")[0]
                    with open(os.path.join(os.path.dirname(link), "vmm.pid")) as f:
                        owner = int(f.read().split()[0])
                    m = re.search(r"/sandboxes/(sbx-[0-9a-f]+)/", os.readlink(link))
                    sid = m.group(1) if m and owner == pid else None
        except (OSError, ValueError, IndexError):
            pass
        (by_id[sid] if sid else unknown).append(pid)
    return dict(by_id), unknown


def qemu_run_dir(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode(errors="replace").split("\0")
    except OSError:
        return "?"
    return next((os.path.dirname(x[len("id=d0,file="):].split(",")[0]) for x in argv
                 if x.startswith("id=d0,file=")), "?")


def loop_backing():
    out = []
    for dev in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{dev}/loop/backing_file") as f:
                out.append((dev, f.read().strip()))
        except OSError:
            pass
    return out


def vm_uids(data_dir):
    """The VM uids this data dir's VMs have (their jails' dirs, their
    vmm.pid records)."""
    uids = set()
    try:
        uids |= {int(d) for d in os.listdir(os.path.join(data_dir, "run", "jails")) if d.isdigit()}
    except OSError:
        pass
    vmdir = os.path.join(data_dir, "run", "vm")
    try:
        for n in os.listdir(vmdir):
            try:
                with open(os.path.join(vmdir, n, "vmm.pid")) as f:
                    uids.add(int(f.read().split()[2]))
            except (OSError, IndexError, ValueError):
                pass
    except OSError:
        pass
    return uids


# --- the soak --------------------------------------------------------------

class Soak:
    def __init__(self, args):
        self.a = args
        self.cluster = args.cluster
        self.t_start = now()
        self.lock = threading.RLock()  # registry and counters
        self.cv = threading.Condition(self.lock)
        self.sandboxes = {}
        self.deleted = set()
        self.unknown_reported = set()
        self.entry = 0
        self.key_n = 0
        self.ops = collections.defaultdict(lambda: {"ok": 0, "failed_in_window": 0, "failed_outside": 0})
        self.errors_outside = []
        self.retries = 0
        self.faults = []  # {"kind", "at", "recovery_s", "detail"}
        self.windows = []  # [start, end or None]
        self.problems = []  # (kind, text)
        self.lost_entries = self.lost_files = self.lost_sandboxes = self.corrupt = 0
        self.leaks = []
        self.cluster_bad = []  # cluster checks that failed (each once)
        self.hold = False
        self.idle = set()
        self.active = set()
        self.inflight = {}
        self.stopping = threading.Event()
        self.fatal = None
        self.uids = set()
        self.leaked_pids = set()  # QEMUs already reported: later checks do not wait for them
        self.stack = None
        self.baseline_cgroups = set()
        self.baseline_loops = []
        self.upgrades = None  # guest agents upgraded, counted before the log goes
        self.n_made = 0  # sandboxes made, for --volume-every
        self.volumes_made = 0

    # --- bookkeeping -------------------------------------------------------
    def t(self):
        return now() - self.t_start

    def log(self, text):
        print(f"[{self.t():7.1f}s] {text}", file=sys.stderr, flush=True)

    def next_entry(self):
        with self.lock:
            self.entry += 1
            return self.entry

    def next_key(self, what):
        with self.lock:
            self.key_n += 1
            return f"soak-{self.a.seed}-{self.key_n}-{what}"

    def window_open(self):
        with self.lock:
            return bool(self.windows) and self.windows[-1][1] is None

    def in_window(self, t0, t1):
        with self.lock:
            return any(s <= t1 and (e is None or e >= t0) for s, e in self.windows)

    def wait_window_closed(self):
        """True when a fault's window was open (now closed): the caller may
        resolve what it did by asking again."""
        with self.cv:
            if not (self.windows and self.windows[-1][1] is None):
                return False
            while self.windows[-1][1] is None and not self.fatal:
                self.cv.wait(1)
            return True

    def problem(self, kind, text, sbx=None, n=1):
        with self.lock:
            if kind == "lost":
                if "ledger" in text:
                    self.lost_entries += n
                elif "file" in text:
                    self.lost_files += n
                else:
                    self.lost_sandboxes += n
            elif kind == "corrupt":
                self.corrupt += 1
            elif kind == "leak":
                what = re.sub(r"^\([^)]*\) ", "", text)
                if what in self.leaks:
                    return  # the same leak seen again by a later check
                self.leaks.append(what)
            elif kind == "cluster":
                what = re.sub(r"^\([^)]*\) ", "", text)
                if what in self.cluster_bad:
                    return
                self.cluster_bad.append(what)
            detail = text
            if sbx is not None:
                detail = f"{sbx.id}: {text}\n      recent ops of {sbx.id}:\n        " + "\n        ".join(sbx.history)
            self.problems.append((kind, detail))
        self.stack.mark(f"PROBLEM {kind}: {text}")
        self.log(f"PROBLEM {kind}: {sbx.id + ': ' if sbx else ''}{text}")

    def record(self, kind, ok, t0, t1, err=None, sbx=None, via=None):
        with self.lock:
            c = self.ops[kind]
            if ok:
                c["ok"] += 1
            elif self.in_window(t0, t1):
                c["failed_in_window"] += 1
            else:
                c["failed_outside"] += 1
                self.errors_outside.append(f"t={t0 - self.t_start:.1f}s {kind} {sbx.id if sbx else ''}: {err}")
                self.log(f"error outside a recovery window: {kind} {sbx.id if sbx else ''}: {err}")
        if sbx is not None:
            how = f" via {via}" if via else ""
            sbx.note(t0 - self.t_start, f"{kind}{how}: {'ok' if ok else 'FAILED ' + str(err)[:200]}")

    # --- HTTP helpers ------------------------------------------------------
    def api(self, *args, **kw):
        return self.stack.call(*args, **kw)

    def get_sbx(self, sid):
        return self.api("GET", f"/v1/sandboxes/{sid}", timeout=30)

    def verb(self, sbx, verb, body=None, key=None):
        """POST a lifecycle verb (?wait=true); returns the operation, which
        may have failed. With a fault cut in between, asks again with the
        same key once the stack is healthy (the operation as it ended)."""
        key = key or self.next_key(verb)
        path = f"/v1/sandboxes/{sbx.id}/{verb}?wait=true"
        for attempt in range(6):
            try:
                op = self.api("POST", path, body, key=key)
            except Exception as e:  # noqa: BLE001 (connection reset, 5xx, 409...)
                busy = isinstance(e, harness.ApiError) and e.status == 409 and b"in progress" in e.body
                if self.wait_window_closed():
                    continue  # resolve: same key, the stack is back
                if busy and attempt < 5:  # a scheduled snapshot: the API says try again
                    with self.lock:
                        self.retries += 1
                    time.sleep(0.3 * (attempt + 1))
                    key = self.next_key(verb)  # the refused request recorded nothing under the old one
                    continue
                raise
            if op and op.get("state") in ("succeeded", "failed"):
                return op
            raise OpFailed(f"operation not finished: {op}")
        raise OpFailed("no answer after the retries")

    # --- verification -------------------------------------------------------
    def read_back(self, sbx):
        r = self.api("POST", f"/v1/sandboxes/{sbx.id}/exec",
                     {"cmd": ["sh", "-c", "cat /root/ledger 2>/dev/null; exit 0"]})
        if r["exit_code"] != 0 or r.get("stdout_truncated"):
            raise OpFailed(f"reading the ledger: {r}")
        entries, bad = [], []
        for line in r["stdout"].splitlines():
            (entries.append(int(line)) if line.isdigit() else bad.append(line))
        paths = set()
        for m in sbx.models:
            paths |= set(m.files)
        files = {}
        for p in sorted(paths):
            q = urllib.parse.urlencode({"path": p})
            status, _, body = self.stack.request("GET", f"/v1/sandboxes/{sbx.id}/files?{q}", timeout=OP_TIMEOUT)
            if status == 404:
                files[p] = None
            elif status == 200:
                files[p] = hashlib.sha256(body).hexdigest()
            else:
                raise OpFailed(f"reading {p}: HTTP {status} {body[:200]!r}")
        return entries, bad, files

    def verify(self, sbx, why):
        """Reads the ledger and files of a running sandbox back and counts
        what does not match. Raises when it cannot read (an op failure)."""
        entries, bad, files = self.read_back(sbx)
        results = [(m, m.problems(entries, bad, files)) for m in sbx.models]
        good = [m for m, p in results if not p]
        if good:
            sbx.models = good[:1]
            return True
        m, probs = min(results, key=lambda x: len(x[1]))
        for p in probs:
            self.problem(p[0], f"({why}) {p[1]}", sbx, n=p[2] if len(p) > 2 else 1)
        m.accept(entries, files)
        sbx.models = [m]
        return False

    # --- operations --------------------------------------------------------
    def pick(self, rng, sbx, total):
        k = self.a.sandboxes
        can_snap = sbx.snap_files < SNAP_FILES_MAX
        w = {}
        if sbx.state == "running":
            w = {"write": 30, "upload": 10, "read": 6, "pause": 5, "stop": 4, "suspend": 5,
                 "snapshot_disk": 4 if can_snap else 0, "snapshot_full": 5 if can_snap else 0,
                 "rollback": 5 if sbx.snapshots else 0, "fork": 4 if total < k + 1 and not sbx.volume else 0,
                 "delete": 3,
                 "agent_upgrade": 3 if self.a.agent_upgrade and not self.cluster else 0}
        elif sbx.state == "paused":
            w = {"resume": 50, "stop": 8, "suspend": 8, "snapshot_full": 8 if can_snap else 0,
                 "fork": 8 if total < k + 1 and not sbx.volume else 0, "delete": 3}
        elif sbx.state == "stopped":
            w = {"start": 50, "snapshot_disk": 10 if can_snap else 0, "rollback": 15 if sbx.snapshots else 0,
                 "delete": 5}
        elif sbx.state == "suspended":
            w = {"wake": 40, "write_wake": 40, "delete": 4}
        kinds = [x for x, n in w.items() if n > 0]
        if not kinds:
            return None
        return rng.choices(kinds, weights=[w[x] for x in kinds])[0]

    def run_op(self, rng, wid, sbx, kind):
        t0 = now()
        with self.lock:
            self.inflight[wid] = (kind, sbx.id if sbx else None, t0)
        if self.cluster:
            self.stack.local.via = []  # the replicas this op's requests went to
        ok, err = False, None
        try:
            ok = getattr(self, "op_" + kind)(rng, wid, sbx)
            if not ok:
                err = "failed"
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {e}"
            if not isinstance(e, (harness.ApiError, OpFailed, OSError)):
                err += " " + traceback.format_exc(limit=3).replace("\n", " | ")
        finally:
            with self.lock:
                self.inflight.pop(wid, None)
        via = ",".join(dict.fromkeys(getattr(self.stack.local, "via", None) or [])) if self.cluster else None
        self.record(kind, ok, t0, now(), err, sbx, via)
        if not ok:
            # after a failure: wait for the fault to be over, or back off a little
            if not self.wait_window_closed():
                self.stopping.wait(0.5)
        return ok

    def exec_ok(self, sbx, cmd):
        r = self.api("POST", f"/v1/sandboxes/{sbx.id}/exec", {"cmd": cmd})
        return r["exit_code"] == 0

    def op_write(self, rng, wid, sbx):
        n = self.next_entry()
        ok = False
        try:
            ok = self.exec_ok(sbx, ["sh", "-c", f"echo {n} >> /root/ledger && sync"])
        finally:
            for m in sbx.models:
                (m.committed.append(n) if ok else m.uncertain.add(n))
        if ok:
            sbx.state = "running"
        return ok

    def op_write_wake(self, rng, wid, sbx):
        return self.op_write(rng, wid, sbx)

    def op_upload(self, rng, wid, sbx):
        where = VOLUME_PATH if sbx.volume and rng.random() < 0.5 else "/root"
        path = f"{where}/soak-f{rng.randrange(FILES_PER_SANDBOX)}"
        data = rng.randbytes(rng.randint(1, 64 * 1024))
        sha = hashlib.sha256(data).hexdigest()
        for m in sbx.models:
            f = m.files.setdefault(path, {"must": None, "may": set(), "old": set()})
            f["may"].add(sha)  # from here on it may be there
        q = urllib.parse.urlencode({"path": path})
        status, _, body = self.stack.request("PUT", f"/v1/sandboxes/{sbx.id}/files?{q}", body=data,
                                             timeout=OP_TIMEOUT)
        if status not in (200, 201, 204):
            raise harness.ApiError(status, body[:300])
        # the API's word is that a file it wrote survives a crash (docs/api.md, recovery);
        # --upload-sync asks only for what a synced disk keeps
        if self.a.upload_sync and not self.exec_ok(sbx, ["sync"]):
            return False
        for m in sbx.models:
            f = m.files[path]
            if f["must"]:
                f["old"].add(f["must"])
            f["old"] |= f["may"] - {sha}
            f["must"], f["may"] = sha, set()
        return True

    def op_read(self, rng, wid, sbx):
        self.verify(sbx, "read")
        return True

    def _simple_verb(self, sbx, verb, then):
        op = self.verb(sbx, verb)
        if op["state"] != "succeeded":
            raise OpFailed(f"{verb} operation failed: {op.get('error')}")
        sbx.state = then
        if then == "running":
            self.verify(sbx, f"after {verb}")
        return True

    def op_agent_upgrade(self, rng, wid, sbx):
        """Its guest agent up to the node's: 200 (done, or nothing to do), or
        409 while a verb runs on it (the upgrader's own, or a scheduled
        snapshot's). What it holds is checked as after every operation."""
        r = self.api("POST", f"/v1/sandboxes/{sbx.id}/agent/upgrade", expect=(200, 409))
        version = (r or {}).get("agent", {}).get("version") if isinstance(r, dict) else None
        if version:
            sbx.note(self.t(), f"guest agent {version}")
        return True

    def op_pause(self, rng, wid, sbx):
        return self._simple_verb(sbx, "pause", "paused")

    def op_resume(self, rng, wid, sbx):
        return self._simple_verb(sbx, "resume", "running")

    def op_stop(self, rng, wid, sbx):
        return self._simple_verb(sbx, "stop", "stopped")

    def op_start(self, rng, wid, sbx):
        return self._simple_verb(sbx, "start", "running")

    def op_suspend(self, rng, wid, sbx):
        return self._simple_verb(sbx, "suspend", "suspended")

    def op_wake(self, rng, wid, sbx):
        return self._simple_verb(sbx, "wake", "running")

    def _snapshot(self, sbx, kind):
        models = [m.clone() for m in sbx.models]
        snap = self.api("POST", f"/v1/sandboxes/{sbx.id}/snapshots", {"kind": kind}, expect=(201,))
        sbx.snapshots.append((snap["id"], kind, models))
        sbx.snap_files += 2 if kind == "full" else 1
        sbx.note(self.t(), f"snapshot {snap['id']} ({kind}) at ledger length {len(models[0].committed)}")
        return True

    def op_snapshot_disk(self, rng, wid, sbx):
        return self._snapshot(sbx, "disk")

    def op_snapshot_full(self, rng, wid, sbx):
        return self._snapshot(sbx, "full")

    def op_rollback(self, rng, wid, sbx):
        snap_id, kind, models = rng.choice(sbx.snapshots)
        sbx.note(self.t(), f"rollback to {snap_id} ({kind}, ledger length {len(models[0].committed)})")
        before = sbx.models
        try:
            op = self.verb(sbx, "rollback", {"snapshot": snap_id})
        except Exception:
            sbx.models = [m.clone() for m in models] + before  # it may have happened
            raise
        if op["state"] != "succeeded":
            sbx.models = [m.clone() for m in models] + before
            raise OpFailed(f"rollback operation failed: {op.get('error')}")
        after = [m.clone() for m in models]
        for m in after:  # files first written after the snapshot are gone with it
            for b in before:
                for path, f in b.files.items():
                    if path not in m.files:
                        m.files[path] = {"must": None, "may": set(), "old": {f["must"]} - {None} | f["may"]}
        if kind == "disk":  # the volume is not rolled back (a full snapshot's rollback does)
            keep_volume_files(after, before)
        sbx.models = after
        sbx.state = "running"
        self.verify(sbx, f"after rollback to {snap_id}")
        return True

    def op_fork(self, rng, wid, sbx):
        models = [m.clone() for m in sbx.models]
        op = self.verb(sbx, "fork")
        if op["state"] != "succeeded":
            raise OpFailed(f"fork operation failed: {op.get('error')}")
        cid = op["result"]["sandbox"]["id"]
        child = Sandbox(cid, wid, models)
        with self.lock:
            self.sandboxes[cid] = child
        child.note(self.t(), f"forked from {sbx.id}")
        sbx.note(self.t(), f"fork: child {cid}")
        self.log(f"fork {sbx.id} -> {cid}")
        self.verify(child, "fork child")
        return True

    def op_delete(self, rng, wid, sbx):
        key = self.next_key("delete")
        retried = False
        while True:
            try:
                self.api("DELETE", f"/v1/sandboxes/{sbx.id}", expect=(204, 404) if retried else (204,), key=key)
                break
            except Exception:  # noqa: BLE001
                if retried or not self.wait_window_closed():
                    raise
                retried = True  # cut off by a fault: the same key says how it ended
        with self.lock:
            self.sandboxes.pop(sbx.id, None)
            self.deleted.add(sbx.id)
            total = len([s for s in self.sandboxes.values() if not s.lost])
        self.log(f"deleted {sbx.id}")
        if sbx.volume:
            # free now that its holder is gone: deleted at once (one whose
            # node is away is deleted at the cleanup)
            self.delete_volume(sbx.volume)
        if total < self.a.sandboxes:
            self.run_op(rng, wid, None, "create")
        return True

    def op_create(self, rng, wid, _sbx):
        self.make_sandbox(wid, faults=True)
        return True

    def make_sandbox(self, wid, faults):
        """A new sandbox (every --volume-every'th with a volume of its own
        at VOLUME_PATH): asked again with the same key after a fault
        (faults) cut it off."""
        with self.lock:
            self.n_made += 1
            volume = f"soak-v{self.n_made}" if self.a.volume_every and self.n_made % self.a.volume_every == 0 \
                else None
        if volume:
            self.with_retry(faults, lambda retried: self.api(
                "POST", "/v1/volumes", {"name": volume, "size": VOLUME_SIZE},
                expect=(201, 409) if retried else (201,)))  # 409: the first one landed
            with self.lock:
                self.volumes_made += 1
        key = self.next_key("create")
        body = {"template": self.a.template}
        if self.a.recovery:
            body["recovery"] = self.a.recovery
        if volume:
            body["volumes"] = [{"name": volume, "path": VOLUME_PATH}]
        try:
            r = self.with_retry(faults, lambda retried: self.api("POST", "/v1/sandboxes", body, expect=(200, 201),
                                                                 key=key))
        except Exception:
            if volume:
                self.delete_volume(volume)
            raise
        s = Sandbox(r["id"], wid, [Model()])
        s.volume = volume
        with self.lock:
            self.sandboxes[s.id] = s
        s.note(self.t(), "created" + (f" with volume {volume}" if volume else ""))
        self.log(f"created {s.id}" + (f" with volume {volume}" if volume else ""))
        return s

    def with_retry(self, faults, call):
        """call(retried): once more after a fault's window closed."""
        try:
            return call(False)
        except Exception:  # noqa: BLE001
            if not faults or not self.wait_window_closed():
                raise
        return call(True)

    def delete_volume(self, name):
        """Deletes a volume nothing holds any more; one that cannot go now
        (its node away) is left to the cleanup, which deletes every one."""
        try:
            self.with_retry(True, lambda retried: self.api("DELETE", f"/v1/volumes/{name}",
                                                           expect=(204, 404) if retried else (204,)))
        except Exception as e:  # noqa: BLE001
            self.log(f"volume {name} not deleted yet: {e}")

    # --- workers -----------------------------------------------------------
    def checkpoint(self, wid):
        with self.cv:
            if self.hold:
                self.idle.add(wid)
                self.cv.notify_all()
                while self.hold and not self.fatal:
                    self.cv.wait(1)
                self.idle.discard(wid)

    def worker(self, wid):
        rng = random.Random(self.a.seed * 1000 + wid)
        if self.cluster:
            self.stack.seed_thread(self.a.seed * 1000 + 500 + wid)  # its own stream: ops stay as seeded
        try:
            while not self.stopping.is_set() and not self.fatal:
                self.checkpoint(wid)
                if self.stopping.is_set():
                    break
                with self.lock:
                    mine = sorted((s for s in self.sandboxes.values() if s.worker == wid and not s.lost),
                                  key=lambda s: s.id)
                    total = len([s for s in self.sandboxes.values() if not s.lost])
                if total < self.a.sandboxes and (not mine or rng.random() < 0.5):
                    self.run_op(rng, wid, None, "create")  # one was deleted or lost
                    continue
                if not mine:
                    self.stopping.wait(1)
                    continue
                sbx = rng.choice(mine)
                try:
                    o = self.get_sbx(sbx.id)
                    sbx.state, sbx.execution = o["state"], o.get("execution")
                except Exception as e:  # noqa: BLE001
                    t0 = now()
                    self.record("get", False, t0, now(), e, sbx)
                    if not self.wait_window_closed():
                        self.stopping.wait(0.5)
                    continue
                kind = self.pick(rng, sbx, total)
                if kind is None:  # transitional (a recovery under way) or failed
                    self.stopping.wait(0.5)
                    continue
                self.run_op(rng, wid, sbx, kind)
        except Exception:  # noqa: BLE001
            self.fatal = f"worker {wid} crashed: {traceback.format_exc()}"
            self.log(self.fatal)
        finally:
            with self.cv:
                self.active.discard(wid)
                self.cv.notify_all()

    def hold_workers(self):
        with self.cv:
            self.hold = True
            deadline = now() + 600
            while not self.active <= self.idle and now() < deadline and not self.fatal:
                self.cv.wait(1)
            if not self.active <= self.idle:
                self.fatal = f"workers {sorted(self.active - self.idle)} did not come to rest in 600 s"

    def release_workers(self):
        with self.cv:
            self.hold = False
            self.cv.notify_all()

    # --- faults ------------------------------------------------------------
    def places(self):
        """(worker name, or None on one machine; data dir) of every node."""
        if self.cluster:
            return [(w.name, w.data_dir) for w in self.stack.workers]
        return [(None, self.stack.data_dir)]

    def vm_map_all(self):
        """vm_map() over every node's data dir, merged."""
        by_id, unknown = collections.defaultdict(list), []
        for _, d in self.places():
            v, u = vm_map(d)
            for sid, pids in v.items():
                by_id[sid] += pids
            unknown += u
        return dict(by_id), unknown

    def pids_of(self, program):
        return [p for p, n in airlock_procs(self.stack.data_dir).items() if n == program]

    def wait_down(self, timeout=120):
        """Waits until every process of the old stack has exited; kills what
        is left after timeout (a finding)."""
        deadline = now() + timeout
        while now() < deadline:
            if self.stack.proc.poll() is not None and not airlock_procs(self.stack.data_dir):
                return
            time.sleep(0.1)
        left = airlock_procs(self.stack.data_dir)
        self.problem("leak", f"processes of the stopped stack still there after {timeout} s: {left}")
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.stack.proc.wait()

    def restart(self, adopts=True):
        # a restart is where a platform puts its new binaries: from the
        # first one that adopts running VMs on (not a SIGTERM to all, after
        # which every VM boots again, with whatever agent the node has), the
        # node has a newer guest agent and upgrades its sandboxes' agents in
        # place (by itself once idle, and agent_upgrade)
        if (adopts and self.a.agent_upgrade and not self.cluster
                and self.stack.env.get("AIRLOCK_GUEST_BINARY") != NEXT_AGENT):
            self.stack.env.update({"AIRLOCK_GUEST_BINARY": NEXT_AGENT, "AIRLOCK_AGENT_UPGRADE_IDLE": "1"})
            self.log(f"the stack restarts with a newer guest agent ({os.path.basename(NEXT_AGENT)})")
        self.stack.spawn()
        self.stack.wait_ready(harness.START_TIMEOUT)

    def choose_victim(self, rng, aimed_sid):
        with self.lock:
            cands = sorted((s for s in self.sandboxes.values() if not s.lost), key=lambda s: s.id)
        t = now()
        vms, _ = self.vm_map_all()
        # a third crash within 10 minutes leaves a sandbox failed by design
        cands = [s for s in cands if vms.get(s.id) and len([k for k in s.vmm_kills if t - k < 660]) < 2]
        if not cands:
            return None
        for s in cands:
            if s.id == aimed_sid:
                return s
        try:
            states = {o["id"]: o["state"] for o in self.api("GET", "/v1/sandboxes", timeout=30)["sandboxes"]}
        except Exception:  # noqa: BLE001
            states = {}

        def weight(s):
            # a crash of a running VM written to after its full snapshot is the telling one
            if states.get(s.id) != "running":
                return 1
            fulls = [m for _, k, m in s.snapshots if k == "full"]
            return 6 if fulls and len(s.models[0].committed) > len(fulls[-1][0].committed) else 2
        return rng.choices(cands, weights=[weight(s) for s in cands])[0]

    def inject(self, kind, victim, rng=None, aimed=None):
        """Sends the fault; returns (detail, predicate for 'it took effect'),
        (None, None) when there was nothing to hit."""
        if self.cluster:
            return self.inject_cluster(kind, victim, rng, aimed)
        data_dir = self.stack.data_dir
        if kind == "node":
            old = self.pids_of("airlock-node")
            for p in old:
                os.kill(p, signal.SIGKILL)
            return f"SIGKILL airlock-node {old}", lambda: (set(self.pids_of("airlock-node")) - set(old))
        if kind == "airlockd":
            pids = self.pids_of("airlockd")
            for p in pids:
                os.kill(p, signal.SIGKILL)
            self.wait_down()
            self.restart()
            return f"SIGKILL airlockd {pids}, stack started again", None
        if kind == "nodemgr":
            pid = self.stack.proc.pid
            assert airlock_procs(data_dir).get(pid) == "airlock-nodemgr", airlock_procs(data_dir)
            os.kill(pid, signal.SIGKILL)
            self.wait_down()
            self.restart()
            return f"SIGKILL airlock-nodemgr {pid}, stack started again", None
        if kind == "sigterm_all":
            procs = airlock_procs(data_dir)
            for p in procs:
                os.kill(p, signal.SIGTERM)
            self.wait_down()
            self.restart(adopts=False)
            return f"SIGTERM to {procs} at once, stack started again", None
        if kind == "vmm":
            return self.kill_vmm(victim)
        raise ValueError(kind)

    def kill_vmm(self, victim):
        vms, _ = self.vm_map_all()
        if not vms.get(victim.id):
            return None, None  # it stopped meanwhile
        pid = vms[victim.id][0]
        where = f" on {self.stack.worker_of_path(qemu_run_dir(pid))}" if self.cluster else ""
        try:
            before = self.get_sbx(victim.id).get("execution")
        except Exception:  # noqa: BLE001
            before = victim.execution
        os.kill(pid, signal.SIGKILL)
        victim.vmm_kills.append(now())
        victim.note(self.t(), f"FAULT: its VMM {pid}{where} killed (execution {before})")

        def took():
            try:
                o = self.get_sbx(victim.id)
            except harness.ApiError as e:
                return e.status == 404  # a delete of ours won the race
            return o.get("execution") != before or o["state"] in ("recovering", "failed", "stopped",
                                                                   "suspended", "archived", "lost")
        return f"SIGKILL qemu {pid} of {victim.id}{where}", took

    def inject_cluster(self, kind, victim, rng, aimed):
        """The cluster's faults. aimed: a sandbox a slow verb of ours is in
        flight on: the replica carrying it, the worker hosting it."""
        st = self.stack
        if kind == "replica":
            rep = st.replica_carrying(aimed) or rng.choice(st.replicas)
            pid, old_id = rep.proc.pid, st.ids.get(rep.name)
            with st.lock:
                st.down.add(rep.name)  # no new requests go there
            rep.kill9()
            pause = rng.uniform(0.5, 3.0)  # a service manager's RestartSec
            time.sleep(pause)
            st.start_replica(rep)
            return (f"SIGKILL replica {rep.name} (pid {pid}, {old_id}), started again {pause:.1f} s later as "
                    f"{st.ids.get(rep.name)}"), None
        if kind == "node":
            w = st.worker_hosting(aimed) or rng.choice(st.workers)
            old = st.node_pids(w)
            if not old:
                return None, None  # between two of its processes: later
            for p in old:
                os.kill(p, signal.SIGKILL)
            return f"SIGKILL airlock-node {old} of {w.name}", lambda: set(st.node_pids(w)) - set(old)
        if kind == "vmm":
            return self.kill_vmm(victim)
        if kind == "worker":
            w = st.worker_hosting(aimed) or rng.choice(st.workers)
            hosted = {row[0] for row in st.sql(f"SELECT id FROM sandboxes WHERE node = '{w.name}'")}
            t_kill = now()
            n = len(w.pids())
            w.kill9()  # the machine dies: nodemgr, node, gateway and VMs at once
            with self.lock:
                for s in self.sandboxes.values():
                    if s.id in hosted:
                        s.note(self.t(), f"FAULT: its worker {w.name} killed")
            state = None
            deadline = now() + self.a.node_lost_after_s + 60
            while now() < deadline:
                try:
                    state = st.node_states().get(w.name)
                except Exception:  # noqa: BLE001
                    state = None
                if state == "lost":
                    break
                time.sleep(0.5)
            lost_after = now() - t_kill
            if state != "lost":
                self.problem("cluster", f"worker {w.name} killed {lost_after:.0f} s ago is {state}, not lost")
            pause = rng.uniform(3.0, 12.0)  # the machine reboots
            time.sleep(pause)
            w.start()
            return (f"SIGKILL worker {w.name} ({n} processes, {len(hosted)} sandboxes): lost after {lost_after:.1f} s, "
                    f"started again {pause:.1f} s later"), None
        raise ValueError(kind)

    def settled(self, failed_since, exempt_ours=True):
        """None when /v1/health is 200 and every sandbox is in a settled
        state or failed (failed_since: since when; one failed for
        FAILED_GRACE s is lost, counted by the check), else what is not.
        exempt_ours: a sandbox in the transitional state of a verb of ours
        still in flight counts as settled (it is the op, not the fault)."""
        try:
            if self.cluster:
                why = self.stack.health()  # replicas, workers, operations of dead replicas
                if why:
                    return why
            else:
                status, _, body = self.stack.request("GET", "/v1/health", auth=False, timeout=10)
                if status != 200:
                    return f"health: {status} {body[:100]!r}"
        except Exception as e:  # noqa: BLE001
            return f"health: {e}"
        with self.lock:
            sbxs = [s for s in self.sandboxes.values() if not s.lost]
            busy = {v[1] for v in self.inflight.values()} if exempt_ours else set()
            deleting = {v[1] for v in self.inflight.values() if v[0] == "delete"}
        for s in sbxs:
            try:
                o = self.get_sbx(s.id)
            except harness.ApiError as e:
                if e.status == 404 and s.id in deleting:
                    continue  # our delete, cut off by the fault, landed: the op resolves it
                return f"{s.id}: {e}"
            except Exception as e:  # noqa: BLE001
                return f"{s.id}: {e}"
            if o["state"] not in STABLE | {"failed", "recovering"} and s.id in busy:
                continue
            if o["state"] == "failed":
                failed_since.setdefault(s.id, now())
            elif o["state"] not in STABLE:
                return f"{s.id} is {o['state']}"
            else:
                failed_since.pop(s.id, None)
        return None

    def wait_recovered(self, t0, took, exempt_ours=True):
        deadline = t0 + RECOVER_TIMEOUT
        why = "?"
        failed_since = {}
        t_settled = None  # when all but the failed ones were settled
        while now() < deadline:
            try:
                if took is None or took():
                    took = None
                    why = self.settled(failed_since, exempt_ours)
                    if why is None:
                        t_settled = t_settled or now()
                        if not failed_since or now() - max(failed_since.values()) >= FAILED_GRACE:
                            return t_settled - t0
                        why = f"failed: {sorted(failed_since)}"
                    else:
                        t_settled = None
                else:
                    why = "the fault has not shown yet"
            except Exception as e:  # noqa: BLE001
                why = str(e)
            time.sleep(0.2)
        return why

    def fault(self, kind, rng, aimed_sid):
        victim = None
        if kind == "vmm":
            victim = self.choose_victim(rng, aimed_sid)
            if victim is None:
                return False
        with self.cv:
            self.windows.append([now(), None])
        t0 = now()
        for _, d in self.places():
            self.uids |= vm_uids(d)
        self.stack.mark(f"fault {kind} at t={self.t():.1f}s")
        detail, took = self.inject(kind, victim, rng, aimed_sid)
        if detail is None:
            with self.cv:
                self.windows.pop()
                self.cv.notify_all()
            return False
        self.log(f"fault {kind}: {detail}")
        rec = self.wait_recovered(t0, took)
        with self.cv:
            self.windows[-1][1] = now()
            self.cv.notify_all()
        if isinstance(rec, str):
            self.problem("stuck", f"not recovered {RECOVER_TIMEOUT} s after fault {kind} ({detail}): {rec}")
            self.fatal = f"the stack did not recover from {kind}"
            rec = None
        else:
            self.log(f"recovered from {kind} in {rec:.1f} s")
        self.stack.mark(f"recovered from {kind}: {rec}")
        self.faults.append({"kind": kind, "at_s": round(t0 - self.t_start, 1),
                            "recovery_s": None if rec is None else round(rec, 2), "detail": detail})
        if self.fatal:
            return True
        self.hold_workers()
        try:
            self.check_all(f"after fault {kind}", bring_up=False)
        finally:
            self.release_workers()
        return True

    def fault_loop(self):
        rng = random.Random(self.a.seed ^ 0x5eed)
        lo, hi = self.a.fault_interval
        end = self.t_start + self.a.minutes * 60
        first = list(self.a.faults)
        rng.shuffle(first)
        queue = collections.deque(first)
        again = [k for k in self.a.faults if k != "sigterm_all"]  # SIGTERM to all: once per run
        t_next = now() + rng.uniform(lo, hi)
        try:
            while not self.stopping.is_set() and not self.fatal:
                if self.stopping.wait(max(0, t_next - now())):
                    break
                if now() > end - 15:
                    break
                if not queue:
                    if not again:
                        t_next = end
                        continue
                    more = list(again)
                    rng.shuffle(more)
                    queue.extend(more)
                kind = queue.popleft()
                aimed = None
                if rng.random() < (0.25 if kind == "vmm" else 0.5):
                    # aim: a process kill at a suspend in flight (where the state
                    # moves between node, object store and control plane), else
                    # at any slow verb; a VMM kill at a slow verb's sandbox
                    want = HEAVY if kind == "vmm" else {"suspend"}
                    deadline = now() + 8
                    while now() < deadline and not self.stopping.is_set():
                        with self.lock:
                            hits = [v for v in self.inflight.values() if v[0] in want and v[1]]
                        if hits:
                            aimed = hits[0][1]
                            time.sleep(rng.uniform(0, 1.0))
                            break
                        if now() > deadline - 4:
                            want = HEAVY
                        time.sleep(0.05)
                t_inject = now()
                if not self.fault(kind, rng, aimed) and kind in ("vmm", "node"):
                    queue.append(kind)  # nothing to kill now: later
                t_next = max(t_inject + rng.uniform(lo, hi), now() + 2)
        except Exception:  # noqa: BLE001
            self.fatal = f"fault loop crashed: {traceback.format_exc()}"
            self.log(self.fatal)
            with self.cv:
                if self.windows and self.windows[-1][1] is None:
                    self.windows[-1][1] = now()
                self.cv.notify_all()

    # --- checks ------------------------------------------------------------
    def check_all(self, why, bring_up):
        """Every sandbox listed and usable, its data as acknowledged, no
        leak. bring_up: resume, start and wake every sandbox first (the
        end), else check the running ones' data. The workers are held: a
        sandbox still in a transitional state is stuck there."""
        deadline = now() + 60
        while now() < deadline:
            why_not = self.settled({}, exempt_ours=False)
            if why_not is None:
                break
            time.sleep(0.5)
        else:
            self.problem("stuck", f"({why}) not settled 60 s after the recovery with no op in flight: {why_not}")
        try:
            listed = {s["id"]: s for s in self.api("GET", "/v1/sandboxes", timeout=60)["sandboxes"]}
        except Exception as e:  # noqa: BLE001
            self.problem("stuck", f"({why}) cannot list sandboxes: {e}")
            return
        with self.lock:
            sbxs = sorted((s for s in self.sandboxes.values() if not s.lost), key=lambda s: s.id)
        n_read = 0
        for s in sbxs:
            o = listed.get(s.id)
            if o is None:
                s.lost = True
                self.problem("lost", f"({why}) sandbox is not listed any more", s)
                continue
            try:
                o = self.get_sbx(s.id)
            except Exception:  # noqa: BLE001
                pass
            s.state, s.execution = o["state"], o.get("execution")
            if s.state == "lost":  # its node never came back
                s.lost = True
                self.problem("lost", f"({why}) sandbox is lost (its node {o.get('node')} is away)", s)
                continue
            if s.state == "failed":
                s.lost = True
                self.problem("lost", f"({why}) sandbox failed: {o.get('error')}; recoveries {o.get('recoveries')}", s)
                continue
            try:
                if bring_up and s.state != "running":
                    verb = {"paused": "resume", "stopped": "start", "suspended": "wake"}.get(s.state)
                    if verb:
                        op = self.verb(s, verb)
                        if op["state"] != "succeeded":
                            raise OpFailed(f"{verb} failed: {op.get('error')}")
                        s.state = "running"
                if s.state == "running":
                    self.verify(s, why)
                    n_read += 1
            except Exception as e:  # noqa: BLE001
                s.lost = True
                self.problem("lost", f"({why}) sandbox not usable ({s.state}): {e}", s)
        known = set(listed)
        for sid in sorted(known & self.deleted):
            self.problem("leak", f"({why}) deleted sandbox {sid} is listed again")
        with self.lock:
            mine = set(self.sandboxes)
        for sid in sorted(known - mine - self.deleted - self.unknown_reported):
            self.problem("leak", f"({why}) sandbox {sid} is listed but was never acknowledged to us "
                                 f"({listed[sid].get('state')})")
            self.unknown_reported.add(sid)
        self.check_leaks(why)
        if self.cluster:
            self.check_cluster(why)
        self.log(f"checked {why}: {len(sbxs)} sandboxes ({n_read} running, read back)"
                 + (f" on {dict(collections.Counter(o.get('node') for o in listed.values()))}" if self.cluster else ""))

    def check_leaks(self, why):
        places = self.places()
        for _, d in places:
            self.uids |= vm_uids(d)
        # QEMUs against sandboxes: settle for a while (a node may be tearing down)
        deadline = now() + 30
        while True:
            bad, unknown_all = [], []
            try:
                listed = {s["id"]: (s["state"], s.get("node"))
                          for s in self.api("GET", "/v1/sandboxes", timeout=60)["sandboxes"]}
            except Exception as e:  # noqa: BLE001
                bad = [f"cannot list: {e}"]
                listed = {}
            for name, data_dir in places:
                at = f" on {name}" if name else ""
                # the sandboxes of this node (on one machine: all)
                here = {sid: st for sid, (st, node) in listed.items() if name is None or node == name}
                vms, unknown = vm_map(data_dir)
                unknown = [p for p in unknown if p not in self.leaked_pids]
                unknown_all += unknown
                for pid in unknown:
                    bad.append(f"QEMU {pid}{at} of no sandbox (run dir {qemu_run_dir(pid)}: its vmm.pid names "
                               f"another VM or is gone)")
                for sid, pids in sorted(vms.items()):
                    st = here.get(sid)
                    if sid in listed and st is None:
                        continue  # another node's sandbox: check_cluster says where it runs
                    if st is None:
                        bad.append(f"QEMU {pids}{at} of {sid}, which the API does not know (unowned)")
                    elif len(pids) > 1:
                        bad.append(f"{len(pids)} QEMUs {pids}{at} for {sid}")
                    elif st in ("stopped", "suspended", "archived", "failed"):
                        bad.append(f"QEMU {pids}{at} for {sid}, which is {st}")
                for sid, st in sorted(here.items()):
                    if st in ("running", "paused") and not vms.get(sid):
                        bad.append(f"{sid} is {st} but has no QEMU{at}")
                sbxdir = os.path.join(data_dir, "sandboxes")
                try:
                    dirs = set(os.listdir(sbxdir))
                except OSError:
                    dirs = set()
                for d in sorted(dirs - set(here)):
                    if d in listed:
                        bad.append(f"directory {sbxdir}/{d} of a sandbox whose node is {listed[d][1]}")
                    else:
                        bad.append(f"directory {sbxdir}/{d} of a sandbox the API does not know"
                                   f"{' (deleted)' if d in self.deleted else ''}")
            with self.lock:
                new = [b for b in bad if b not in self.leaks]  # reported ones need not settle again
            if not new or now() > deadline:
                break
            time.sleep(0.5)
        self.leaked_pids |= set(unknown_all)
        for b in bad:
            self.problem("leak", f"({why}) {b}")
        for name, data_dir in places:
            at = f" ({name})" if name else ""
            mounts = harness.mounts_under(data_dir)
            for m, n in collections.Counter(mounts).items():
                if n > 1:
                    self.problem("leak", f"({why}) {m} is mounted {n} times")
            loops = [l for l in loop_backing() if l[1].startswith(data_dir) and l not in self.baseline_loops]
            if len(loops) > 1 or (loops and not mounts):
                self.problem("leak", f"({why}) loop devices on the data dir{at}: {loops}")
        empty = self.empty_cgroups()
        if empty:
            time.sleep(3)  # host-wide: a VM of ours may be going right now
            empty &= self.empty_cgroups()
        if empty:
            # one of a VM that ended just as airlock-nodemgr was killed is
            # swept by the next one once no longer fresh (lib/jail:
            # JAIL_CGROUP_FRESH_S, 15 s, then a second sweep)
            youngest = max(cgroup_ctime(c) for c in empty)
            time.sleep(max(0.0, youngest + CGROUP_SWEPT_AFTER - time.time()))
            empty &= self.empty_cgroups()
        for c in sorted(empty):
            self.problem("leak", f"({why}) empty VM cgroup {c} (uid of one of our VMs)")
            try:
                os.rmdir(c)  # report once
            except OSError:
                pass

    def check_cluster(self, why):
        """Every sandbox row names one of the workers; each sandbox's VM runs
        under one worker's data dir, the one its row names; no operation
        stays unfinished past its lease (the workers are held: nothing of
        ours is in flight)."""
        st = self.stack
        names = {w.name for w in st.workers}
        try:
            rows = st.sql("SELECT id, coalesce(node, ''), state FROM sandboxes ORDER BY id")
        except Exception as e:  # noqa: BLE001
            self.problem("stuck", f"({why}) cannot read the store: {e}")
            return
        for sid, node, state in rows:
            if node not in names:
                self.problem("cluster", f"({why}) sandbox {sid} ({state}) is on {node or 'no node'}, not one of "
                                        f"the workers {sorted(names)}")
        row_node = {sid: node for sid, node, _ in rows}
        with self.lock:
            ids = set(row_node) | set(self.sandboxes)
        for sid in sorted(ids):
            where = collections.defaultdict(list)
            for pid in harness.qemu_pids(sid):
                run_dir = qemu_run_dir(pid)
                if sid not in os.path.realpath(os.path.join(run_dir, "disk.img")):
                    continue  # another sandbox's VM that names sid (a fork's source)
                where[st.worker_of_path(run_dir) or f"no worker ({run_dir})"].append(pid)
            if len(where) > 1:
                self.problem("cluster", f"({why}) {sid} runs on {len(where)} nodes: {dict(where)}")
            elif where and sid in row_node and row_node[sid] not in where:
                self.problem("cluster", f"({why}) {sid} runs on {next(iter(where))} {dict(where)}, but its row "
                                        f"says {row_node[sid] or 'no node'}")
        deadline = now() + OPS_SETTLE_S
        while True:
            try:
                ops = st.unfinished_ops()
            except Exception as e:  # noqa: BLE001
                self.problem("stuck", f"({why}) cannot read the operations: {e}")
                return
            if not ops or now() > deadline:
                break
            time.sleep(1)
        for op_id, verb, state, sid, owner, past, age in ops:
            if past > LEASE_MARGIN_S:
                self.problem("cluster", f"({why}) operation {op_id} ({verb} of {sid}) still {state} {past:.0f} s "
                                        f"past its lease (owner {owner or 'none'}): no replica settled it")
            else:
                self.problem("stuck", f"({why}) operation {op_id} ({verb} of {sid}) still {state} after {age:.0f} s "
                                      f"with nothing of ours in flight (owner {owner} renews its lease)")

    def empty_cgroups(self):
        out = set()
        for c in harness.vm_cgroups():
            try:
                uid = int(os.path.basename(c)[len("airlock-vm-"):])
            except ValueError:
                continue
            if uid in self.uids and c not in self.baseline_cgroups and not harness._cgroup_procs(c):
                out.add(c)
        return out

    # --- the run -----------------------------------------------------------
    def run(self):
        a = self.a
        os.makedirs(harness.TEMPLATES, exist_ok=True)
        self.baseline_cgroups = {c for c in harness.vm_cgroups() if not harness._cgroup_procs(c)}
        self.baseline_loops = loop_backing()
        if self.cluster:
            keep_dir = tempfile.mkdtemp(prefix="airlock-soak-cluster-", dir=a.base)
            self.stack = ClusterStack(a, keep_dir)
        else:
            data_dir = tempfile.mkdtemp(prefix="airlock-soak-", dir=a.base)
            self.stack = Stack(data_dir, a.template, {})
        ok = False
        try:
            if self.cluster:
                self.log(f"seed {a.seed}; {a.minutes} min; {a.sandboxes} sandboxes of {a.template}; "
                         f"{a.workers} workers; cluster of {a.replicas} replicas and {a.nodes} workers (lost after "
                         f"{a.node_lost_after_s} s); logs {keep_dir}")
                self.stack.start()
                reps = [(r.name, r.url, self.stack.ids.get(r.name)) for r in self.stack.replicas]
                self.log(f"cluster ready: replicas {reps}, "
                         f"workers {[(w.name, w.netns.addr, w.data_dir) for w in self.stack.workers]}")
            else:
                self.log(f"seed {a.seed}; {a.minutes} min; {a.sandboxes} sandboxes of {a.template}; "
                         f"{a.workers} workers; data {data_dir}; log {self.stack.log_path}")
                self.stack.wait_ready(harness.FIRST_START_TIMEOUT)
            for i in range(a.sandboxes):
                self.make_sandbox(i % a.workers, faults=False)
            self.t_start = now()
            threads = []
            for w in range(a.workers):
                self.active.add(w)
                threads.append(threading.Thread(target=self.worker, args=(w,), daemon=True))
            ft = threading.Thread(target=self.fault_loop, daemon=True)
            for t in threads + [ft]:
                t.start()
            end = self.t_start + a.minutes * 60
            while now() < end and not self.fatal:
                time.sleep(0.5)
            self.stopping.set()
            ft.join()
            for t in threads:
                t.join(timeout=OP_TIMEOUT * 2)
            if any(t.is_alive() for t in threads):
                self.fatal = self.fatal or "a worker did not finish"
            if not self.fatal:
                why = self.wait_recovered(now(), None)
                if isinstance(why, str):
                    self.problem("stuck", f"not settled at the end: {why}")
                else:
                    self.check_all("at the end", bring_up=True)
                    self.cleanup_check()
            ok = True
        finally:
            self.teardown(ok)

    def cleanup_check(self):
        """Deletes every sandbox; nothing of theirs may stay in the data dir."""
        with self.lock:
            ids = sorted(self.sandboxes)
        for sid in ids:
            try:
                self.api("DELETE", f"/v1/sandboxes/{sid}", expect=(204, 404))
            except Exception as e:  # noqa: BLE001
                self.problem("leak", f"(cleanup) cannot delete {sid}: {e}")
        # every volume is free now, and goes
        try:
            vols = self.api("GET", "/v1/volumes", timeout=60)["volumes"]
        except Exception as e:  # noqa: BLE001
            vols = []
            self.problem("leak", f"(cleanup) cannot list volumes: {e}")
        for v in vols:
            try:
                self.api("DELETE", f"/v1/volumes/{v['id']}", expect=(204,))
            except Exception as e:  # noqa: BLE001
                self.problem("leak", f"(cleanup) cannot delete volume {v['name']} (held by {v.get('held_by')}): {e}")
        deadline = now() + 30
        while True:
            left = []
            for name, d in self.places():
                at = f"{name}: " if name else ""
                for sub in ("sandboxes", "pool", "volumes"):
                    try:
                        left += [f"{at}{sub}/{x}" for x in os.listdir(os.path.join(d, sub))]
                    except OSError:
                        pass
                try:
                    left += [f"{at}objstore/snapshots/{x}"
                             for x in os.listdir(os.path.join(d, "objstore", "snapshots"))]
                except OSError:
                    pass
                vms, unknown = vm_map(d)
                left += [f"{at}QEMU {p}" for ps in vms.values() for p in ps] + [f"{at}QEMU {p}" for p in unknown]
            if self.cluster:
                try:
                    left += [f"objstore/snapshots/{x}"
                             for x in os.listdir(os.path.join(self.stack.objstore, "snapshots"))]
                except OSError:
                    pass
                try:
                    left += [f"sandbox row {r[0]} ({r[1]} on {r[2]})"
                             for r in self.stack.sql("SELECT id, state, coalesce(node, '') FROM sandboxes")]
                except Exception as e:  # noqa: BLE001
                    left.append(f"cannot read the store: {e}")
            if not left or now() > deadline:
                break
            time.sleep(0.5)
        for x in left:
            self.problem("leak", f"(after deleting every sandbox) left: {x}")

    def teardown(self, ok):
        if not self.stack:
            return
        if self.cluster:
            return self.teardown_cluster()
        data_dir = self.stack.data_dir
        try:
            self.stack.stop()
        except Exception as e:  # noqa: BLE001
            self.problem("leak", f"stopping the stack: {e}")
        for p in airlock_procs(data_dir):
            self.problem("leak", f"process {p} of the stack still running after it stopped")
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        empty = self.empty_cgroups()
        if empty:
            time.sleep(3)
            for c in sorted(empty & self.empty_cgroups()):
                self.problem("leak", f"(after stopping) empty VM cgroup {c}")
        for leak in harness._check_no_leaks(data_dir):
            if "cgroups" in leak:  # host-wide: only ours count
                continue
            self.problem("leak", f"(after stopping) {leak}")
        for dev, f in loop_backing():
            if f.startswith(data_dir):
                self.problem("leak", f"(after stopping) loop device {dev} on {f}")
                subprocess.run(["losetup", "-d", f"/dev/{dev}"])
        failed = self.failed()
        self.upgrades = self.agent_upgrades()  # the log may go next
        if self.a.keep:
            self.log(f"kept: data dir {data_dir}, log {self.stack.log_path}")
        elif failed:
            shutil.rmtree(data_dir, ignore_errors=True)
            self.log(f"kept the log {self.stack.log_path}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
            try:
                os.unlink(self.stack.log_path)
            except OSError:
                pass

    def teardown_cluster(self):
        """Stops the workers and replicas, reports what the workers left,
        keeps the logs (DIR) when the run failed or --keep, and closes the
        lab: nothing of the cluster stays."""
        st = self.stack
        try:
            try:
                left = st.stop()
            except Exception as e:  # noqa: BLE001
                left = [f"stopping the cluster: {e!r}"]
            for leak in left:
                self.problem("leak", f"(after stopping) {leak}")
            empty = self.empty_cgroups()
            if empty:
                time.sleep(3)
                for c in sorted(empty & self.empty_cgroups()):
                    self.problem("leak", f"(after stopping) empty VM cgroup {c}")
            for w in st.workers:
                for dev, f in loop_backing():
                    if f.startswith(w.data_dir):
                        self.problem("leak", f"(after stopping) loop device {dev} on {f}")
                        subprocess.run(["losetup", "-d", f"/dev/{dev}"])
        finally:
            for leak in st.close():  # whatever happened above: nothing of the cluster stays
                self.problem("leak", f"(after stopping) {leak}")
        if self.a.keep or self.failed():
            self.log(f"kept the logs: {st.keep_dir}")
        else:
            shutil.rmtree(st.keep_dir, ignore_errors=True)

    def failed(self):
        return bool(self.fatal or self.lost_entries or self.lost_files or self.lost_sandboxes or self.corrupt
                    or self.leaks or self.cluster_bad or any(k == "stuck" for k, _ in self.problems))

    # --- the summary -------------------------------------------------------
    def agent_upgrades(self):
        """How many guest agents the node upgraded in place (its log says)."""
        if self.cluster or not self.stack:
            return 0
        try:
            with open(self.stack.log_path, "rb") as f:
                return f.read().count(b"guest agent upgraded from")
        except OSError:
            return 0

    def summary(self):
        rec = collections.defaultdict(list)
        nfaults = collections.Counter()
        for f in self.faults:
            nfaults[f["kind"]] += 1
            if f["recovery_s"] is not None:
                rec[f["kind"]].append(f["recovery_s"])
        out = {
            "result": "fail" if self.failed() else "pass",
            "mode": "cluster" if self.cluster else "single",
            "seed": self.a.seed, "minutes": self.a.minutes, "sandboxes": self.a.sandboxes,
            "template": self.a.template, "workers": self.a.workers, "fault_kinds": self.a.faults,
            "recovery": self.a.recovery or "boot", "upload_sync": self.a.upload_sync,
            "ops": {k: dict(v) for k, v in sorted(self.ops.items())},
            "retries_on_conflict": self.retries,
            "faults": dict(sorted(nfaults.items())),
            "recovery_s": {k: {"n": len(v), "median": round(statistics.median(v), 2), "max": max(v)}
                           for k, v in sorted(rec.items())},
            "fault_log": self.faults,
            "agent_upgrades": self.upgrades if self.upgrades is not None else self.agent_upgrades(),
            "volumes_made": self.volumes_made,
            "errors_outside_windows": len(self.errors_outside),
            "errors_outside_detail": self.errors_outside[:MAX_PROBLEMS_SHOWN],
            "lost": {"sandboxes": self.lost_sandboxes, "ledger_entries": self.lost_entries, "files": self.lost_files},
            "corrupt": self.corrupt,
            "leaks": len(self.leaks),
            "problems": [f"{k}: {t}" for k, t in self.problems[:MAX_PROBLEMS_SHOWN]],
            "fatal": self.fatal,
            "log": (self.stack.keep_dir if self.cluster else self.stack.log_path) if self.stack else None,
        }
        if self.cluster:
            out.update({"replicas": self.a.replicas, "nodes": self.a.nodes,
                        "node_lost_after_s": self.a.node_lost_after_s, "cluster_problems": len(self.cluster_bad),
                        "requests_per_replica": dict(sorted(self.stack.per_replica.items()))})
        return out


def format_summary(s):
    """The summary (as Soak.summary() returns it) as text."""
    out = []
    p = out.append
    cluster = s.get("mode") == "cluster"
    where = (f"cluster of {s['replicas']} replicas and {s['nodes']} workers (lost after {s['node_lost_after_s']} s), "
             if cluster else "")
    p(f"soak: seed {s['seed']}, {s['minutes']} min, {where}{s['sandboxes']} sandboxes of {s['template']} "
      f"(recovery {s['recovery']}), {s['workers']} workers, faults {','.join(s['fault_kinds']) or 'none'}")
    p(f"{'op':<16}{'ok':>6}{'failed in window':>18}{'failed outside':>16}")
    for k, v in s["ops"].items():
        p(f"  {k:<14}{v['ok']:>6}{v['failed_in_window']:>18}{v['failed_outside']:>16}")
    p(f"  (409 'in progress' retried: {s['retries_on_conflict']})")
    if not cluster:
        p(f"guest agents upgraded in place: {s.get('agent_upgrades', 0)}")
        p(f"volumes made (each a sandbox's, read-write at {VOLUME_PATH}): {s.get('volumes_made', 0)}")
    if cluster:
        p("requests per replica: " + ", ".join(f"{k} {v}" for k, v in s["requests_per_replica"].items()))
    p(f"{'fault':<16}{'n':>4}{'recovery median':>18}{'max':>10}")
    for k, n in s["faults"].items():
        r = s["recovery_s"].get(k)
        p(f"  {k:<14}{n:>4}{(str(r['median']) + ' s') if r else '-':>18}{(str(r['max']) + ' s') if r else '-':>10}")
    p(f"errors outside recovery windows: {s['errors_outside_windows']}")
    for e in s["errors_outside_detail"]:
        p(f"  {e}")
    lost = s["lost"]
    p(f"lost: {lost['sandboxes']} sandboxes, {lost['ledger_entries']} ledger entries, {lost['files']} files; "
      f"corrupt: {s['corrupt']}; leaks: {s['leaks']}"
      + (f"; cluster: {s['cluster_problems']}" if cluster else ""))
    for x in s["problems"]:
        p(f"  {x}")
    if s["fatal"]:
        p(f"fatal: {s['fatal']}")
    if s["result"] == "fail":
        p(f"{'logs' if cluster else 'instance log'}: {s['log']}")
    p(f"RESULT: {s['result'].upper()}")
    return "\n".join(out)


def interval(text):
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("expected LO,HI in seconds, e.g. 15,30")
    if not 1 <= lo <= hi <= 3600:
        raise argparse.ArgumentTypeError("need 1 <= LO <= HI <= 3600")
    return lo, hi


CGROUP_SWEPT_AFTER = 35  # s: made at most 15 s before a nodemgr start, swept again 16 s after it


def cgroup_ctime(path):
    try:
        return os.stat(path).st_ctime
    except OSError:
        return 0.0


def fault_kinds(text):
    kinds = [k for k in text.split(",") if k]
    if kinds == ["none"]:
        return []
    bad = [k for k in kinds if k not in FAULTS + ("sigterm_all",) + FAULTS_CLUSTER]
    if bad or len(set(kinds)) != len(kinds):
        raise argparse.ArgumentTypeError(f"unknown or repeated fault kinds {bad or kinds}; choose from "
                                         f"{','.join(FAULTS)},sigterm_all (--cluster: {','.join(FAULTS_CLUSTER)}) "
                                         f"or none")
    return kinds


def bounded(kind, lo, hi):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}")
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be between {lo} and {hi}")
        return v
    return parse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=bounded(float, 0.5, 24 * 60), default=3.0)
    ap.add_argument("--seed", type=bounded(int, 0, 2**31), default=None, help="default: random, printed")
    ap.add_argument("--sandboxes", type=bounded(int, 1, 16), default=3)
    ap.add_argument("--workers", type=bounded(int, 1, 8), default=2)
    ap.add_argument("--template", default="minimal")
    ap.add_argument("--fault-interval", type=interval, default=(15.0, 30.0), metavar="LO,HI")
    ap.add_argument("--faults", type=fault_kinds, default=None, metavar="KIND,...",
                    help=f"the fault kinds to inject (default all: {','.join(FAULTS)},sigterm_all; with --cluster "
                         f"{','.join(FAULTS_CLUSTER)}; none: no faults)")
    ap.add_argument("--recovery", choices=("boot", "checkpoint"), default=None,
                    help="the sandboxes' recovery mode (default: the API's, boot); checkpoint loses the writes "
                         "after the checkpoint by design, which the soak reports: a way to see the check work")
    ap.add_argument("--upload-sync", action="store_true",
                    help="acknowledge an upload only after an exec of sync too (default: its 200)")
    ap.add_argument("--base", default=None, help="where the data dir goes (default: the test volume)")
    ap.add_argument("--cluster", action="store_true",
                    help="soak a cluster of its own (tests/clusterlab.py): PostgreSQL, replicas, workers")
    ap.add_argument("--replicas", type=bounded(int, 1, 4), default=2, help="--cluster: airlockd replicas (2)")
    ap.add_argument("--nodes", type=bounded(int, 1, 4), default=2, help="--cluster: worker nodes (2)")
    ap.add_argument("--node-lost-after-s", type=bounded(int, 3, 300), default=10,
                    help="--cluster: the replicas' --node-lost-after-s (10)")
    ap.add_argument("--no-agent-upgrade", dest="agent_upgrade", action="store_false",
                    help="keep the guest agent: no restart brings a newer one (default: the first does)")
    ap.add_argument("--volume-every", type=bounded(int, 0, 1000), default=2, metavar="K",
                    help="every K-th sandbox made gets a volume of its own at /vol, read-write, where half its "
                         "uploads go (not forked: one writer at a time); 0: none (default 2)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the data dir and log (--cluster: the logs)")
    a = ap.parse_args()
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,63}", a.template):
        ap.error(f"bad template name {a.template!r}")
    if os.geteuid() != 0:
        ap.error("run as root (VMs, jails, loop mounts)")
    kinds = FAULTS_CLUSTER if a.cluster else FAULTS + ("sigterm_all",)
    if a.faults is None:
        a.faults = list(kinds)
    elif any(k not in kinds for k in a.faults):
        ap.error(f"fault kinds {[k for k in a.faults if k not in kinds]} are not of "
                 f"{'--cluster' if a.cluster else 'one machine (without --cluster)'}: choose from {','.join(kinds)}")
    if not a.cluster and any(x.startswith(("--replicas", "--nodes", "--node-lost")) for x in sys.argv[1:]):
        ap.error("--replicas, --nodes and --node-lost-after-s need --cluster")
    a.base = a.base or harness.VOLUME
    if not os.path.ismount(harness.VOLUME):
        ap.error(f"{harness.VOLUME} is not mounted (mount -o loop build/test-vol.btrfs build/test-vol)")
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(2**31)
    a.workers = min(a.workers, a.sandboxes)
    soak = Soak(a)
    try:
        soak.run()
    except Exception:  # noqa: BLE001
        soak.fatal = soak.fatal or traceback.format_exc()
        soak.log(soak.fatal)
    s = soak.summary()
    if a.json:
        print(json.dumps(s, indent=1))
    else:
        print(format_summary(s))
    sys.exit(1 if s["result"] == "fail" else 0)


if __name__ == "__main__":
    main()
