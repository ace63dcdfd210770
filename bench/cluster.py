#!/usr/bin/python3
"""The cluster's benchmarks (docs/benchmarks.md, "Cluster"), in one run on
one machine, everything started here and removed again:

  sudo bench/cluster.py [--quick] [--creates 20] [--nodes 1000] [--rows 100000]
                        [--seconds 30] [--rps-seconds 10] [--clients 8] [--json [FILE]]

1. Create latency, PostgreSQL against SQLite, in the same run: (a) one
   machine's Airlock (airlockd on SQLite with its own node, as
   tests/harness.py's Airlock starts it) and (b) a throwaway PostgreSQL, one
   replica and one worker node in a network namespace (tests/clusterlab.py),
   both with pool size 0 (cold creates) and template minimal. --creates
   rounds, after one warm-up round each, alternating which of the two goes
   first; each create is deleted before the next. Each create is split by
   the logs: airlockd's own request time (`done status=201 ms=`), the
   node's handling of sandbox.create (`request done: r=0 ms=`, debug) and
   the VM's restore (`restore_ms` of the reply): what is left of airlockd's
   time after the node's is the control plane's own (store, placement, the
   connection to the node). PostgreSQL runs with the durability of
   airlockd's SQLite (WAL with synchronous=NORMAL: no fsync per commit):
   fsync on, synchronous_commit off (--pg-synchronous-commit on for a
   flush per commit), its data on the same test volume.
2. GET /v1/sandboxes/{id} per second against one replica, then two on the
   same store (the client's threads split across them), of a sandbox on the
   real worker: the replica reads the row and asks the node (sandbox.get
   over mutual TLS). Python threads with kept-alive connections; the client,
   the replicas, PostgreSQL and the worker share the machine's cores.
3. build/bench/cluster-sim (bench/cluster-sim.c) against one replica:
   placement (nodes_place(), the replica's code on the same store) with the
   one real node; --nodes simulated nodes join (key, CSR, cluster.join with
   a join token) and heartbeat at the real rate (each every 2 s, spread
   evenly) for --seconds: heartbeats served per second and their round
   trip, the replica's and PostgreSQL's CPU per heartbeat (utime + stime
   from /proc over the run); then placement at that size; then --rows
   sandbox rows inserted with SQL, spread over the simulated nodes (state
   running), and placement, GET /v1/nodes, GET /v1/sandboxes (admin: at
   most 10,000 rows, and a sandbox.list to each node they name, refused at
   once here) and GET /v1/sandboxes/{id} of one row, idle and again while
   the nodes heartbeat.

Needs root, the templates built (minimal) on the test volume
(AIRLOCK_TEST_VOLUME, default build/test-vol: mounted here from
build/test-vol.btrfs when it is not, and unmounted at the end), PostgreSQL
15's binaries (scripts/deps.sh --test) and a build (ninja -C build).
--quick: a few of everything (about two to three minutes). --json prints
the figures as JSON on stdout (the summary goes to stderr); --json FILE
writes them there."""

import argparse
import contextlib
import http.client
import json
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
DEFAULT_VOLUME = os.path.join(ROOT, "build", "test-vol")
os.environ.setdefault("AIRLOCK_TEST_VOLUME", DEFAULT_VOLUME)
import harness  # noqa: E402
import clusterlab  # noqa: E402

SIM = os.path.join(harness.BUILD, "bench", "cluster-sim")
TEMPLATE = "minimal"

FULL = {"creates": 20, "nodes": 1000, "rows": 100000, "seconds": 30, "rps_seconds": 10, "place": 200,
        "get_nodes": 20, "get_list": 10, "get_one": 100}
QUICK = {"creates": 5, "nodes": 200, "rows": 20000, "seconds": 10, "rps_seconds": 4, "place": 50,
         "get_nodes": 5, "get_list": 3, "get_one": 30}


def say(*args):
    print(*args, file=sys.stderr, flush=True)


def pct(xs, p):
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def stats(xs):
    """median, p90, p99, max (ms) of xs, and n."""
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "median_ms": statistics.median(xs), "p90_ms": pct(xs, 90), "p99_ms": pct(xs, 99),
            "max_ms": max(xs)}


def fmt(s):
    if not s or not s.get("n"):
        return "n=0"
    return (f"median {s['median_ms']:.1f} ms, p90 {s['p90_ms']:.1f}, p99 {s['p99_ms']:.1f}, "
            f"max {s['max_ms']:.1f} (n={s['n']})")


# ---- CPU from /proc ------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pids):
    """{pid: utime + stime} of those still there."""
    out = {}
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[p] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return out


def machine_busy():
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle, iowait
    return sum(v) - idle, sum(v)


class CpuMeter:
    """CPU seconds a group of processes ran between start() and stop():
    pids is a function giving the group's pids now (PostgreSQL's backends
    come and go); one that was not there at start counts from zero, one
    gone by the stop is not counted (said in `gone`)."""

    def __init__(self, pids):
        self.pids = pids

    def start(self):
        self.before = cpu_ticks(self.pids())
        return self

    def stop(self):
        after = cpu_ticks(self.pids())
        ticks = sum(t - self.before.get(p, 0) for p, t in after.items())
        return {"cpu_s": ticks / CLK_TCK, "gone": len(set(self.before) - set(after))}


# ---- HTTP ------------------------------------------------------------------------

def timed(inst, method, path, body=None, expect=200):
    """One request on a new connection (as harness.Airlock.request); (ms, parsed body)."""
    t0 = time.monotonic()
    status, _, data = inst.request(method, path, body)
    ms = (time.monotonic() - t0) * 1000
    if status != expect:
        raise harness.ApiError(status, data[:300])
    return ms, (json.loads(data) if data else None)


def repeat(inst, method, path, n):
    """n requests, one after another; their stats and the reply's size."""
    xs, size = [], 0
    for _ in range(n):
        t0 = time.monotonic()
        status, _, data = inst.request(method, path)
        xs.append((time.monotonic() - t0) * 1000)
        if status != 200:
            raise harness.ApiError(status, data[:300])
        size = len(data)
    return dict(stats(xs), reply_bytes=size)


def load(targets, path, token_of, clients, seconds):
    """clients threads, thread i on targets[i % len], each a kept-alive
    connection sending GET path back to back for seconds: (count, latencies
    in ms, errors)."""
    lat, errors, lock = [], [], threading.Lock()
    deadline = time.monotonic() + seconds

    def worker(i):
        t = targets[i % len(targets)]
        mine, errs = [], []
        conn = http.client.HTTPConnection("127.0.0.1", t.port, timeout=30)
        h = {"Authorization": f"Bearer {token_of(t)}"}
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            try:
                conn.request("GET", path, headers=h)
                r = conn.getresponse()
                r.read()
                if r.status != 200:
                    errs.append(r.status)
                    continue
            except (OSError, http.client.HTTPException) as e:
                errs.append(repr(e))
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", t.port, timeout=30)
                continue
            mine.append((time.monotonic() - t0) * 1000)
        conn.close()
        with lock:
            lat.extend(mine)
            errors.extend(errs)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(lat), lat, errors, time.monotonic() - t0


# ---- logs --------------------------------------------------------------------------

def log_from(path, offset):
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def log_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


CREATE_DONE = re.compile(r'method=POST path=/v1/sandboxes msg="done status=201 ms=(\d+)"')
NODE_CREATE_DONE = re.compile(r"op=sandbox\.create\b.*request done: r=0 ms=(\d+)")


def creates_in_logs(api_text, node_text):
    """airlockd's times of successful creates and the node's times of its
    sandbox.create handling, in order."""
    api = [int(m.group(1)) for m in CREATE_DONE.finditer(api_text)]
    node = [int(m.group(1)) for m in NODE_CREATE_DONE.finditer(node_text)]
    return api, node


# ---- the two Airlocks -------------------------------------------------------------------

class Single:
    """One machine's Airlock: harness.Airlock, pool 0, minimal only."""

    name = "sqlite"

    def __init__(self):
        self.data_dir = harness.volume_tempdir("airlock-bench-single-")
        self.a = harness.Airlock(self.data_dir, {"AIRLOCK_POOL_SIZE": "0"}, prebuild=TEMPLATE)
        self.port = self.a.port

    def wait(self):
        self.a.wait_ready(harness.START_TIMEOUT)
        self.token = self.a.token
        return self

    def request(self, *args, **kw):
        return self.a.request(*args, **kw)

    @property
    def api_log(self):
        return self.a.log_path

    @property
    def node_log(self):
        return self.a.log_path

    def close(self):
        """Stops it; what it left behind (the harness's leak checks)."""
        try:
            self.a.stop()
        finally:
            leaks = harness._check_no_leaks(self.data_dir)
            if leaks:
                say(f"--- log of the SQLite Airlock\n{self.a.log_tail(80)}")
            harness._remove(self.a)
        return leaks


class Cluster:
    """PostgreSQL, replica r0, worker w0 in a namespace (clusterlab)."""

    name = "postgres"

    def __init__(self, lab, pg_settings):
        self.lab = lab
        self.net = lab.bridge(nodes=1)
        self.pg = lab.postgres(bridge=self.net, settings=dict(pg_settings,
                                                             shared_preload_libraries="pg_stat_statements"))
        self.pg.psql("CREATE EXTENSION pg_stat_statements")
        pg_conf(self.pg, **{"pg_stat_statements.track": "none"})
        self.r0 = clusterlab.Replica(lab, "r0", self.pg.url, self.net, lost_after_s=600).start()
        self.replicas = [self.r0]
        token = self.r0.api("POST", "/v1/nodes/tokens", {"ttl_s": 7200}, expect=201)["token"]
        self.token_file = os.path.join(lab.dir, "join.token")
        with open(os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(token + "\n")
        # a VM uid range of our own: a cluster test may run beside us
        self.w0 = clusterlab.Worker(lab, "w0", self.net.nodes[0], 100 + os.getpid() % 100, [self.r0.cluster_addr],
                                    self.token_file).start()

    def wait(self, timeout=300):
        def ready():
            n = self.r0.nodes().get("w0")
            return n and n["state"] == "ready" and TEMPLATE in (n.get("templates") or [])
        clusterlab.wait_for(ready, timeout, "worker w0 ready with the minimal template")
        self.port, self.token = self.r0.port, self.r0.token
        return self

    def request(self, *args, **kw):
        return self.r0.request(*args, **kw)

    @property
    def api_log(self):
        return self.r0.log_path

    @property
    def node_log(self):
        return self.w0.proc.log_path

    def add_replica(self, name):
        r = clusterlab.Replica(self.lab, name, self.pg.url, self.net, lost_after_s=600).start()
        self.replicas.append(r)
        return r

    def pg_pids(self):
        return self.pg.pids()


def pg_conf(pg, **settings):
    """ALTER SYSTEM SET each, then a reload (backends take it at their next
    statement)."""
    for k, v in settings.items():
        pg.psql(f"ALTER SYSTEM SET {k} = '{v}'")
    pg.psql("SELECT pg_reload_conf()")


def pg_statements(pg):
    """(calls, ms executing) of every statement pg_stat_statements saw, and
    the top ones by calls."""
    total = pg.psql("SELECT COALESCE(sum(calls), 0), COALESCE(sum(total_exec_time), 0) FROM pg_stat_statements")
    calls, ms = total.strip().split("|")
    top = []
    for line in pg.psql("SELECT calls, round(total_exec_time::numeric, 3), "
                        "regexp_replace(left(query, 90), '\\s+', ' ', 'g') FROM pg_stat_statements "
                        "ORDER BY calls DESC, total_exec_time DESC LIMIT 20").splitlines():
        c, t, q = line.split("|", 2)
        top.append({"calls": int(c), "exec_ms": float(t), "query": q})
    return int(calls), float(ms), top


def statements_of(pg, fn):
    """The statements PostgreSQL ran while fn() ran (the replica's own beat
    and any heartbeats included: a few a second)."""
    pg_conf(pg, **{"pg_stat_statements.track": "top"})
    time.sleep(0.2)
    pg.psql("SELECT pg_stat_statements_reset()")
    t0 = time.monotonic()
    fn()
    seconds = time.monotonic() - t0
    calls, ms, top = pg_statements(pg)
    pg_conf(pg, **{"pg_stat_statements.track": "none"})
    return {"statements": calls, "exec_ms": ms, "seconds": seconds, "top": top[:5]}


# ---- 1. create latency ------------------------------------------------------------------

def create_once(inst):
    """One create and its delete; (client ms, restore_ms)."""
    ms, sb = timed(inst, "POST", "/v1/sandboxes", {"template": TEMPLATE}, expect=201)
    timed(inst, "DELETE", f"/v1/sandboxes/{sb['id']}", expect=204)
    return ms, sb.get("restore_ms")


def bench_creates(single, cluster, n):
    for inst in (single, cluster):  # warm-up, not counted
        create_once(inst)
    pg = cluster.pg
    pg_conf(pg, **{"pg_stat_statements.track": "top"})
    pg.psql("SELECT pg_stat_statements_reset()")
    t_rounds = time.monotonic()
    marks = {i.name: (log_size(i.api_log), log_size(i.node_log)) for i in (single, cluster)}
    got = {i.name: {"client": [], "restore": []} for i in (single, cluster)}
    for k in range(n):
        for inst in ((single, cluster) if k % 2 == 0 else (cluster, single)):
            ms, restore = create_once(inst)
            got[inst.name]["client"].append(ms)
            if restore is not None:
                got[inst.name]["restore"].append(restore)
        say(f"  round {k + 1}/{n}: sqlite {got['sqlite']['client'][-1]:.0f} ms, "
            f"postgres {got['postgres']['client'][-1]:.0f} ms")
    rounds_s = time.monotonic() - t_rounds
    calls, exec_ms, top = pg_statements(pg)
    # what the replica and the worker's heartbeats run meanwhile anyway
    pg.psql("SELECT pg_stat_statements_reset()")
    time.sleep(5)
    bg_calls, bg_ms, _ = pg_statements(pg)
    pg_conf(pg, **{"pg_stat_statements.track": "none"})
    time.sleep(0.5)  # the last lines reach the logs
    out = {"postgres_statements": {
        "per_create_and_delete": (calls - bg_calls / 5 * rounds_s) / n,
        "exec_ms_per_create_and_delete": (exec_ms - bg_ms / 5 * rounds_s) / n,
        "background_per_s": bg_calls / 5, "rounds_s": rounds_s,
        "top": [dict(t, per_round=t["calls"] / n) for t in top]}}
    for inst in (single, cluster):
        g = got[inst.name]
        a_off, n_off = marks[inst.name]
        api, node = creates_in_logs(log_from(inst.api_log, a_off), log_from(inst.node_log, n_off))
        r = {"client": stats(g["client"]), "node_restore_ms": stats(g["restore"])}
        if len(api) == n and len(node) == n:
            # per create: what each layer adds to the one inside it
            r["airlockd"] = stats(api)
            r["node_sandbox_create"] = stats(node)
            r["client_minus_airlockd"] = stats([c - x for c, x in zip(g["client"], api)])
            r["airlockd_minus_node"] = stats([x - y for x, y in zip(api, node)])
            if len(g["restore"]) == n:
                r["node_minus_restore"] = stats([y - z for y, z in zip(node, g["restore"])])
        else:
            r["log_split"] = f"not done: {len(api)} airlockd and {len(node)} node lines for {n} creates"
        out[inst.name] = r
    s, c = out["sqlite"]["client"], out["postgres"]["client"]
    out["ratio"] = {k: c[k] / s[k] for k in ("median_ms", "p90_ms", "p99_ms", "max_ms")}
    return out


# ---- 2. requests per second -------------------------------------------------------------

def bench_rps(cluster, seconds, clients):
    sb = cluster.r0.create(TEMPLATE)
    path = f"/v1/sandboxes/{sb['id']}"
    try:
        r1 = cluster.add_replica("r1")
        for r in cluster.replicas:
            for _ in range(20):  # warm: routes, connections, caches
                timed(r, "GET", path)
        node_pids = lambda: list(cluster.w0.pids())  # noqa: E731
        out = {"sandbox_node": sb.get("node"), "clients": clients, "cores": os.cpu_count()}
        runs = {1: [], 2: []}
        for rnd in range(2):  # 1, 2, 1, 2: both see the machine's drift
            for k in (1, 2):
                targets = cluster.replicas[:k]
                meters = {"replicas": CpuMeter(lambda t=targets: [r.proc.pid for r in t]).start(),
                          "postgres": CpuMeter(cluster.pg_pids).start(),
                          "worker": CpuMeter(node_pids).start(),
                          "client": CpuMeter(lambda: [os.getpid()]).start()}
                busy0 = machine_busy()
                n, lat, errors, wall = load(targets, path, lambda t: t.token, clients, seconds / 2)
                busy1 = machine_busy()
                cpu = {name: m.stop()["cpu_s"] for name, m in meters.items()}
                cpu["machine_busy"] = (busy1[0] - busy0[0]) / max(busy1[1] - busy0[1], 1)
                runs[k].append((n, lat, errors, wall, cpu))
                say(f"  {k} replica{'s' if k > 1 else ''}: {n / wall:.0f} requests/s, "
                    f"median {statistics.median(lat):.2f} ms, errors {len(errors)}")
        for k, rs in runs.items():
            n = sum(r[0] for r in rs)
            wall = sum(r[3] for r in rs)
            lat = [x for r in rs for x in r[1]]
            busy = statistics.mean(r[4].pop("machine_busy") for r in rs)
            cpu = {name: sum(r[4][name] for r in rs) for name in rs[0][4]}
            out[f"replicas_{k}"] = {"requests": n, "seconds": wall, "rps": n / wall, "latency": stats(lat),
                                    "errors": sum(len(r[2]) for r in rs),
                                    "first_error": next((r[2][0] for r in rs if r[2]), None),
                                    "cpu_ms_per_request": {name: v * 1000 / max(n, 1) for name, v in cpu.items()},
                                    "machine_busy": busy}
        out["ratio_rps_2_over_1"] = out["replicas_2"]["rps"] / out["replicas_1"]["rps"]
        clusterlab.stop(r1.proc)
        cluster.replicas.remove(r1)
        return out
    finally:
        cluster.r0.api("DELETE", f"/v1/sandboxes/{sb['id']}", expect=204)


# ---- 3. the simulated nodes ------------------------------------------------------------

class Sim:
    """build/bench/cluster-sim driven over its stdin and stdout."""

    def __init__(self, lab, cluster, threads):
        self.log_path = os.path.join(lab.dir, "cluster-sim.log")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([SIM, "--store", cluster.pg.url, "--join", cluster.r0.cluster_addr,
                                          "--token-file", cluster.token_file, "--threads", str(threads)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                         start_new_session=True)
        lab.defer(self.close)

    def cmd(self, line, timeout=900):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        out = self.proc.stdout.readline() if ready else ""
        if not out:
            raise RuntimeError(f"cluster-sim gave no answer to {line!r}:\n{clusterlab.log_tail(self.log_path)}")
        r = json.loads(out)
        if "error" in r:
            raise RuntimeError(f"cluster-sim {line!r}: {r['error']}")
        return r

    def close(self):
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                clusterlab.kill9(self.proc)
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                f.close()


def measured_beats(sim, cluster, line):
    """The sim's heartbeat command with the replica's, PostgreSQL's and the
    sim's own CPU over it."""
    meters = {"replica": CpuMeter(lambda: [cluster.r0.proc.pid]).start(),
              "postgres": CpuMeter(cluster.pg_pids).start(),
              "sim": CpuMeter(lambda: [sim.proc.pid]).start()}
    r = sim.cmd(line)
    n = max(r["heartbeats"], 1)
    r["cpu_ms_per_heartbeat"] = {}
    for name, m in meters.items():
        c = m.stop()
        r["cpu_ms_per_heartbeat"][name] = c["cpu_s"] * 1000 / n
        r[f"{name}_cpu_of_one_core"] = c["cpu_s"] / r["seconds"]
    return r


def insert_rows(cluster, rows, nodes):
    """rows sandbox rows, state running, on the simulated nodes in turn,
    created_at one ms apart (oldest first: the first 10,000 name every
    node)."""
    t0 = time.monotonic()
    cluster.pg.psql(
        "INSERT INTO sandboxes (id, template, state, metadata, env_keys, created_at, updated_at, node) "
        f"SELECT 'sbx-' || lpad(to_hex(i), 16, '0'), '{TEMPLATE}', 'running', '{{}}', '[]', "
        "1700000000000 + i, 1700000000000 + i, 'sim-' || lpad((i % " + str(nodes) + ")::text, 5, '0') "
        f"FROM generate_series(1, {rows}) AS i", timeout=600)
    cluster.pg.psql("ANALYZE sandboxes")
    return time.monotonic() - t0


def api_at_size(sim, cluster, k, sid, count_statements=False):
    r0 = cluster.r0
    out = {"place": sim.cmd(f"place {k['place']}"),
           "get_nodes": repeat(r0, "GET", "/v1/nodes", k["get_nodes"]),
           "get_sandboxes": repeat(r0, "GET", "/v1/sandboxes", k["get_list"]),
           "get_sandbox": repeat(r0, "GET", f"/v1/sandboxes/{sid}", k["get_one"])}
    if count_statements:  # one call each
        out["statements"] = {
            "place": statements_of(cluster.pg, lambda: sim.cmd("place 1")),
            "get_nodes": statements_of(cluster.pg, lambda: repeat(r0, "GET", "/v1/nodes", 1)),
            "get_sandboxes": statements_of(cluster.pg, lambda: repeat(r0, "GET", "/v1/sandboxes", 1)),
            "get_sandbox": statements_of(cluster.pg, lambda: repeat(r0, "GET", f"/v1/sandboxes/{sid}", 1))}
    return out


def nodes_table(pg):
    """The nodes table's updates, how many were HOT (no index touched), its
    dead rows."""
    row = pg.psql("SELECT n_tup_upd, n_tup_hot_upd, n_dead_tup, n_live_tup FROM pg_stat_user_tables "
                  "WHERE relname = 'nodes'").strip().split("|")
    return dict(zip(("updates", "hot_updates", "dead_rows", "live_rows"), map(int, row)))


def say_beat(b):
    cpu = b["cpu_ms_per_heartbeat"]
    say(f"  {b['nodes']} nodes heartbeating: {b['served_per_s']:.0f}/s of {b['offered_per_s']:.0f} offered, round "
        f"trip median {b['latency']['median_ms']:.1f} ms p99 {b['latency']['p99_ms']:.1f} (handshake median "
        f"{b['handshake']['median_ms']:.1f}), CPU per heartbeat: replica {cpu['replica']:.2f} ms, PostgreSQL "
        f"{cpu['postgres']:.2f} ms")


def bench_scale(lab, cluster, k, threads):
    # one replica (r1 is gone); the worker w0 stays: the one real node
    sim = Sim(lab, cluster, threads)
    out = {"threads": threads, "steps": []}
    out["place_1_node"] = sim.cmd(f"place {k['place']}")
    say(f"  placement, 1 node: median {out['place_1_node']['place']['median_ms']:.2f} ms")
    # heartbeats at a size this machine serves, then at the full one
    sizes = [k["nodes"]] if k["nodes"] <= 200 else [200, k["nodes"]]
    joined = 0
    for size in sizes:
        j = sim.cmd(f"join {size - joined}")
        joined = size
        say(f"  {j['joined']} nodes joined in {j['wall_s']:.1f} s ({j['joins_per_s']:.0f}/s), failed {j['failed']}")
        sim.cmd("beat 4")  # each beats once: its templates (placement needs them); warm
        table_before = nodes_table(cluster.pg)
        b = measured_beats(sim, cluster, f"beat {k['seconds']}")
        table_after = nodes_table(cluster.pg)
        b["nodes_table"] = {key: table_after[key] - table_before[key] for key in ("updates", "hot_updates")}
        b["nodes_table"]["dead_rows"] = table_after["dead_rows"]
        say_beat(b)
        out["steps"].append({"join": j, "beat": b})
    out["at_nodes_0_rows"] = {"place": sim.cmd(f"place {k['place']}"),
                              "get_nodes": repeat(cluster.r0, "GET", "/v1/nodes", k["get_nodes"])}
    say(f"  placement, {k['nodes']} nodes: median "
        f"{out['at_nodes_0_rows']['place']['place']['median_ms']:.2f} ms")
    out["insert_s"] = insert_rows(cluster, k["rows"], k["nodes"])
    say(f"  {k['rows']} rows inserted in {out['insert_s']:.1f} s")
    sid = "sbx-" + format(k["rows"] // 2, "016x")
    out["at_rows_idle"] = api_at_size(sim, cluster, k, sid, count_statements=True)
    say(f"  idle, {k['rows']} rows: placement median {out['at_rows_idle']['place']['place']['median_ms']:.2f} ms, "
        f"GET /v1/sandboxes median {out['at_rows_idle']['get_sandboxes']['median_ms']:.0f} ms")
    meters = {"replica": CpuMeter(lambda: [cluster.r0.proc.pid]).start(),
              "postgres": CpuMeter(cluster.pg_pids).start(),
              "sim": CpuMeter(lambda: [sim.proc.pid]).start()}
    sim.cmd("beat-start")
    time.sleep(2)
    out["at_rows_beating"] = api_at_size(sim, cluster, k, sid)
    b = sim.cmd("beat-stop")
    n = max(b["heartbeats"], 1)
    b["cpu_ms_per_heartbeat"] = {name: m.stop()["cpu_s"] * 1000 / n for name, m in meters.items()}
    b["note"] = "CPU over the whole window, the API requests and placements included"
    out["at_rows_beating"]["beat"] = b
    say(f"  while beating, {k['rows']} rows: placement median "
        f"{out['at_rows_beating']['place']['place']['median_ms']:.2f} ms, heartbeats {b['served_per_s']:.0f}/s")
    sim.close()
    return out


# ---- the run ------------------------------------------------------------------------------

def summary(res):
    lines = []
    c = res.get("creates")
    if c:
        lines.append(f"1. create latency, template {TEMPLATE}, pool 0, n={c['sqlite']['client']['n']} each:")
        for name in ("sqlite", "postgres"):
            r = c[name]
            lines.append(f"   {name:<8} client     {fmt(r['client'])}")
            for key in ("airlockd", "node_sandbox_create", "node_restore_ms", "airlockd_minus_node",
                        "client_minus_airlockd", "node_minus_restore"):
                if key in r:
                    lines.append(f"   {'':<8} {key:<22} median {r[key]['median_ms']:.1f} ms, "
                                 f"p90 {r[key]['p90_ms']:.1f}")
            if "log_split" in r:
                lines.append(f"   {'':<8} {r['log_split']}")
        d = [c[name]["airlockd_minus_node"]["median_ms"] for name in ("sqlite", "postgres")
             if "airlockd_minus_node" in c[name]]
        if len(d) == 2:
            lines.append(f"   the control plane's own time (airlockd's less the node's), medians: sqlite {d[0]:.1f} ms, "
                         f"postgres {d[1]:.1f} ms: +{d[1] - d[0]:.1f} ms")
        st = c["postgres_statements"]
        lines.append(f"   PostgreSQL per create + delete: {st['per_create_and_delete']:.1f} statements, "
                     f"{st['exec_ms_per_create_and_delete']:.2f} ms executing them (background "
                     f"{st['background_per_s']:.1f} statements/s subtracted)")
        q = c["ratio"]
        lines.append(f"   ratio postgres/sqlite: median {q['median_ms']:.2f}x, p90 {q['p90_ms']:.2f}x, "
                     f"p99 {q['p99_ms']:.2f}x (target <= 1.1x median: "
                     f"{'met' if q['median_ms'] <= 1.1 else 'MISSED'})")
    r = res.get("rps")
    if r:
        lines.append(f"2. GET /v1/sandboxes/ID, {r['clients']} client threads, {r['cores']} cores shared by all:")
        for k in (1, 2):
            x = r[f"replicas_{k}"]
            cpu = ", ".join(f"{n} {v:.2f}" for n, v in x["cpu_ms_per_request"].items())
            lines.append(f"   {k} replica{'s' if k > 1 else ' '}: {x['rps']:.0f} requests/s, {fmt(x['latency'])}, "
                         f"errors {x['errors']}; CPU ms per request: {cpu}; the machine "
                         f"{x['machine_busy']:.0%} busy")
        lines.append(f"   2 over 1: {r['ratio_rps_2_over_1']:.2f}x")
    s = res.get("scale")
    if s:
        lines.append(f"3. simulated nodes against one replica ({s['threads']} client threads):")
        for st in s["steps"]:
            j, b = st["join"], st["beat"]
            cpu = b["cpu_ms_per_heartbeat"]
            lines.append(f"   {j['joined']} joined in {j['wall_s']:.1f} s ({j['joins_per_s']:.0f}/s), round trip "
                         f"{fmt(j['latency'])}")
            lines.append(f"   {b['nodes']} nodes, heartbeats for {b['seconds']:.0f} s: {b['served_per_s']:.0f}/s served "
                         f"of {b['offered_per_s']:.0f}/s offered, failed {b['failed']}; round trip "
                         f"{fmt(b['latency'])}; its handshake median {b['handshake']['median_ms']:.1f} ms; "
                         f"lateness median {b['lateness']['median_ms']:.0f} ms, p99 {b['lateness']['p99_ms']:.0f}")
            lines.append(f"     CPU per heartbeat: replica {cpu['replica']:.2f} ms, PostgreSQL {cpu['postgres']:.2f} "
                         f"ms, the simulated nodes {cpu['sim']:.2f} ms (replica at {b['replica_cpu_of_one_core']:.0%} "
                         f"of a core, PostgreSQL {b['postgres_cpu_of_one_core']:.0%}); nodes table: "
                         f"{b['nodes_table']['updates']} updates, {b['nodes_table']['hot_updates']} HOT")
        n_nodes = s["steps"][-1]["beat"]["nodes"]
        for label, p in (("1 node, 0 rows", s["place_1_node"]),
                         (f"{n_nodes} nodes, 0 rows", s["at_nodes_0_rows"]["place"]),
                         (f"{n_nodes} nodes, {s['at_rows_idle']['place']['sandbox_rows']} rows, idle",
                          s["at_rows_idle"]["place"]),
                         ("the same, nodes heartbeating", s["at_rows_beating"]["place"])):
            lines.append(f"   placement, {label}: {fmt(p['place'])}; store_node_list median "
                         f"{p['store_node_list']['median_ms']:.2f} ms, count_by_node median "
                         f"{p['store_sandbox_count_by_node']['median_ms']:.2f} ms")
        lines.append(f"   GET /v1/nodes, 0 rows: {fmt(s['at_nodes_0_rows']['get_nodes'])}")
        for label, key in (("idle", "at_rows_idle"), ("nodes heartbeating", "at_rows_beating")):
            x = s[key]
            lines.append(f"   {label}: GET /v1/nodes {fmt(x['get_nodes'])}")
            lines.append(f"   {'':<{len(label)}}  GET /v1/sandboxes {fmt(x['get_sandboxes'])}")
            lines.append(f"   {'':<{len(label)}}  GET /v1/sandboxes/ID {fmt(x['get_sandbox'])}")
        st = s["at_rows_idle"].get("statements")
        if st:
            lines.append("   PostgreSQL statements while one call ran, idle (the replica's background included: "
                         "its audit poller reads a cursor per node every 2 s):")
            for name, v in st.items():
                top = v["top"][0] if v["top"] else {"calls": 0, "exec_ms": 0, "query": ""}
                lines.append(f"     {name}: {v['statements']} in {v['seconds'] * 1000:.0f} ms, {v['exec_ms']:.1f} ms "
                             f"executing; most: {top['calls']}x {top['query'][:60]}")
        bb = s["at_rows_beating"]["beat"]
        lines.append(f"   heartbeats meanwhile: {bb['served_per_s']:.0f}/s, round trip {fmt(bb['latency'])}")
    return "\n".join(lines)


def interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def ensure_volume():
    """Mounts the default test volume when it is not; whether we did."""
    vol = harness.VOLUME
    if os.path.ismount(vol):
        return False
    image = os.path.join(ROOT, "build", "test-vol.btrfs")
    if os.path.realpath(vol) != os.path.realpath(DEFAULT_VOLUME) or not os.path.exists(image):
        sys.exit(f"{vol} is not mounted (mount -o loop build/test-vol.btrfs build/test-vol)")
    os.makedirs(vol, exist_ok=True)
    subprocess.run(["mount", "-o", "loop", image, vol], check=True)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a few of everything (2-3 minutes)")
    ap.add_argument("--creates", type=int, help="create rounds (each: one per Airlock)")
    ap.add_argument("--nodes", type=int, help="simulated nodes")
    ap.add_argument("--rows", type=int, help="sandbox rows inserted for the simulated nodes")
    ap.add_argument("--seconds", type=int, help="how long the simulated nodes heartbeat for the measurement")
    ap.add_argument("--rps-seconds", type=int, help="seconds of load for each replica count")
    ap.add_argument("--clients", type=int, default=8, help="load generator threads")
    ap.add_argument("--sim-threads", type=int, default=8, help="cluster-sim's heartbeat threads")
    ap.add_argument("--only", default="creates,rps,scale", help="a subset of creates,rps,scale")
    ap.add_argument("--pg-synchronous-commit", choices=("on", "off"), default="off")
    ap.add_argument("--json", nargs="?", const="-", help="the figures as JSON: on stdout, or to FILE")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/cluster.py needs root (network namespaces, the node's privileges)")
    if not os.access(SIM, os.X_OK):
        sys.exit(f"{SIM} is not built: ninja -C build")
    k = dict(QUICK if a.quick else FULL)
    for key in ("creates", "nodes", "rows", "seconds", "rps_seconds"):
        if getattr(a, key) is not None:
            k[key] = getattr(a, key)
    if k["nodes"] > 99999:
        sys.exit("--nodes: at most 99999")
    only = set(a.only.split(","))

    # SIGTERM ends the run as Ctrl-C does: everything is removed
    signal.signal(signal.SIGTERM, interrupted)
    mounted = ensure_volume()
    res = {"machine": {"cores": os.cpu_count(), "load_before": os.getloadavg()}, "params": k,
           "pg_settings": {"fsync": "on", "full_page_writes": "on",
                           "synchronous_commit": a.pg_synchronous_commit}}
    started = time.monotonic()
    single, lab, leaks = None, None, []
    try:
        lab = clusterlab.Lab(base_dir=harness.VOLUME)
        say("starting: PostgreSQL, replica r0, worker w0; one machine's Airlock on SQLite")
        cluster = Cluster(lab, res["pg_settings"])
        if "creates" in only:
            single = Single()
            single.wait()
        cluster.wait()
        if "creates" in only:
            say(f"1. creates, {k['creates']} rounds")
            res["creates"] = bench_creates(single, cluster, k["creates"])
            leaks += single.close()
            single = None
        if "rps" in only:
            say(f"2. GET /v1/sandboxes/ID per second, {a.clients} clients, {k['rps_seconds']} s each")
            res["rps"] = bench_rps(cluster, k["rps_seconds"], a.clients)
        if "scale" in only:
            say(f"3. {k['nodes']} simulated nodes, {k['rows']} rows")
            res["scale"] = bench_scale(lab, cluster, k, a.sim_threads)
    finally:
        if single is not None:
            leaks += single.close()
        if lab is not None:
            lab.close()
        if mounted:
            subprocess.run(["umount", harness.VOLUME])
    res["machine"]["load_after"] = os.getloadavg()
    res["wall_s"] = time.monotonic() - started
    if leaks:
        res["leaks"] = leaks
    text = summary(res) + f"\n(load {res['machine']['load_before'][0]:.1f} before, " \
                          f"{res['machine']['load_after'][0]:.1f} after; {res['wall_s']:.0f} s)"
    if a.json == "-":
        say(text)
        json.dump(res, sys.stdout, indent=1)
        print()
    else:
        print(text)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    if leaks:
        sys.exit("left behind: " + "; ".join(leaks))


if __name__ == "__main__":
    main()
