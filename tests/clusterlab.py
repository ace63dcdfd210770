"""Scaffolding for cluster tests (docs/testing.md): a control plane of
several airlockd replicas on one PostgreSQL database, and worker nodes each
in its own network namespace.

  Lab              a cleanup stack: what a test starts through it (servers,
                   the network, processes, directories) is torn down in
                   reverse order by close(), which is idempotent and runs
                   however the test ends (context manager, or the `lab`
                   fixture: import it into the test module)
  PostgresServer   a throwaway PostgreSQL 15 (Debian's binaries) in a
                   temporary directory: a Unix socket there and TCP on the
                   addresses the caller names
  Bridge           a Linux bridge in the root namespace with an address
                   (HOST, 10.203.X.1/24, X random per lab) and N network
                   namespaces (NodeNetns), each on a veth pair into the
                   bridge at 10.203.X.(10+i), its default route via HOST

Processes in the namespaces reach HOST (PostgreSQL and the replicas listen
there, in the root namespace), each other, and nothing else; the root
namespace reaches them. Nothing leaves the machine.

    with Lab() as lab:
        net = lab.bridge(nodes=3)
        pg = lab.postgres(bridge=net)                  # pg.url on net.host
        r = lab.spawn([AIRLOCKD, ...], name="replica0")
        lab.wait_tcp(net.host, port, proc=r, netns=net.nodes[0])
        n = lab.spawn([NODE, ...], name="node0", netns=net.nodes[0])
"""

import contextlib
import ctypes
import fcntl
import glob
import ipaddress
import json
import os
import pwd
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

PG_BIN = os.environ.get("AIRLOCK_PG_BIN", "/usr/lib/postgresql/15/bin")
NETNS_DIR = "/run/netns"
# 10.203.X.0/24, X random per lab; the guests' own networks (lib/vmnet,
# 10.200.0.0/24) live in their sandboxes' namespaces, never here
LAB_NET = ipaddress.ip_network("10.203.0.0/16")
# While labs run, bridged IPv4 frames bypass iptables and arptables (see
# _bridge_nf_acquire); this file holds the values to restore and the labs
# that hold the change, and exists only while one does.
BRIDGE_NF_STATE = "/run/airlock-clusterlab-bridge-nf.json"
BRIDGE_NF_KEYS = ("bridge-nf-call-iptables", "bridge-nf-call-arptables")


# ---- processes -------------------------------------------------------------

def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def log_tail(what, n=40):
    """The last n lines of a log: a path, or a process started by
    Lab.spawn (its log_path); "" when there is none."""
    path = getattr(what, "log_path", what)
    if not isinstance(path, str):
        return ""
    return "\n".join(_read(path).splitlines()[-n:])


def _stat_fields(pid):
    """Fields 3.. of /proc/PID/stat (state, ppid, pgrp, ...), or None when
    the process is gone."""
    s = _read(f"/proc/{pid}/stat")
    return s.rsplit(")", 1)[1].split() if s else None


def _alive(pid):
    """Whether pid exists and is not a zombie."""
    f = _stat_fields(pid)
    return f is not None and f[0] not in ("Z", "X")


def _all_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def wait_for(cond, timeout, what, interval=0.05):
    """Polls cond() until it returns something true (returned) or timeout
    seconds pass: then AssertionError with what (a string, or a function
    giving one, for a message that says what was seen)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            msg = what() if callable(what) else what
            raise AssertionError(f"{msg} (after {timeout}s)")
        time.sleep(interval)


def _wait_pids_gone(pids, timeout):
    """Waits until none of pids is alive; the ones still alive."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if _alive(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


def kill9(proc):
    """SIGKILL to one process (a Popen, or a pid), nothing else (its
    children stay: a crash, as a test wants it), and waits until it is gone
    (reaped, for a Popen)."""
    if isinstance(proc, int):
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc, signal.SIGKILL)
        left = _wait_pids_gone([proc], 10)
        if left:
            raise RuntimeError(f"pid {proc} still alive 10s after SIGKILL")
        return None
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    return proc.wait()


def stop(proc, timeout=10):
    """SIGTERM, then SIGKILL if the process has not exited within timeout
    seconds; reaps it and returns its exit status (negative: the signal)."""
    if proc.poll() is not None:
        return proc.returncode
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return kill9(proc)


# ---- network namespaces ------------------------------------------------------

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _netns_path(netns):
    """/run/netns/NAME for a NodeNetns, a name or a path."""
    netns = getattr(netns, "path", netns)
    return netns if netns.startswith("/") else os.path.join(NETNS_DIR, netns)


def netns_socket(netns, family=socket.AF_INET, type=socket.SOCK_STREAM):
    """A socket in another network namespace (a NodeNetns, a name or a
    path). A socket belongs to the namespace it was created in, so a thread
    of ours enters the namespace, creates it and ends; nothing else of this
    process changes namespace, and no process is started."""
    path = _netns_path(netns)
    out = {}

    def inner():
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if hasattr(os, "setns"):
                    os.setns(fd, _CLONE_NEWNET)
                elif _libc.setns(fd, _CLONE_NEWNET) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, f"setns({path}): {os.strerror(e)}")
            finally:
                os.close(fd)
            out["sock"] = socket.socket(family, type)
        except BaseException as e:  # noqa: B902 - handed to the caller's thread
            out["err"] = e

    t = threading.Thread(target=inner, name="clusterlab-setns")
    t.start()
    t.join()
    if "err" in out:
        raise out["err"]
    return out["sock"]


def wait_tcp(host, port, timeout=30, netns=None, proc=None, what=None):
    """Waits until host:port accepts a TCP connection, made from the root
    namespace or from netns (a NodeNetns, a name or a path). Fails at once
    if proc (the server, a Popen) exits first, else after timeout seconds;
    either message has proc's log tail (Lab.spawn's log, or log_path)."""
    where = f" from netns {os.path.basename(_netns_path(netns))}" if netns is not None else ""
    name = what or getattr(proc, "name", None) or (f"pid {proc.pid}" if proc is not None else f"{host}:{port}")
    deadline = time.monotonic() + timeout
    last = None

    def tail():
        t = log_tail(proc) if proc is not None else ""
        return f"\n--- last lines of {proc.log_path}:\n{t}" if t else ""

    while True:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{name} exited with status {proc.returncode} before {host}:{port} "
                                 f"accepted a connection{where}{tail()}")
        s = netns_socket(netns) if netns is not None else socket.socket()
        try:
            s.settimeout(max(0.05, min(1.0, deadline - time.monotonic())))
            s.connect((host, port))
            return
        except OSError as e:
            last = e
        finally:
            s.close()
        if time.monotonic() >= deadline:
            raise AssertionError(f"{name}: {host}:{port} did not accept a connection{where} within "
                                 f"{timeout}s (last error: {last}){tail()}")
        time.sleep(0.05)


def _ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


@contextlib.contextmanager
def _global_lock():
    """One lab at a time, across processes (another suite may run labs):
    choosing a subnet and changing the bridge sysctls. The lock is an
    flock on /run/netns, which `ip netns` makes and keeps anyway, so that
    no lock file is left behind."""
    os.makedirs(NETNS_DIR, exist_ok=True)
    fd = os.open(NETNS_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _nf_path(key):
    return f"/proc/sys/net/bridge/{key}"


def _load_nf_state():
    try:
        with open(BRIDGE_NF_STATE) as f:
            state = json.load(f)
    except (OSError, ValueError):
        state = {}
    state.setdefault("saved", {})
    # holders are "PID:TAG"; a lab whose process died without close() no
    # longer holds the change
    state["holders"] = [h for h in state.get("holders", []) if _alive(int(h.split(":")[0]))]
    return state


def _bridge_nf_acquire(holder):
    """With br_netfilter loaded and bridge-nf-call-iptables on (Docker and
    Kubernetes hosts), frames between two ports of a bridge go through
    iptables' FORWARD chain, whose policy there is DROP: node-to-node
    traffic would vanish. So while any lab runs, those sysctls are 0 (a
    host-wide setting); the last lab to close restores the values found by
    the first (under _global_lock, counting the labs in BRIDGE_NF_STATE; a
    lab killed without close() is dropped from the count by the next lab,
    so the next close restores them). Without br_netfilter nothing is
    changed. Nothing else needs changing: node-to-node traffic is bridged,
    not routed (ip_forward does not apply), traffic to HOST is local
    delivery to the root namespace (Debian has no INPUT rules by default),
    and each source address routes back through the interface it came in
    on, so rp_filter (strict or loose) passes it."""
    with _global_lock():
        if not os.path.isdir("/proc/sys/net/bridge"):
            return
        state = _load_nf_state()
        for key in BRIDGE_NF_KEYS:
            cur = _read(_nf_path(key)).strip()
            if cur and cur != "0":
                state["saved"].setdefault(key, cur)
                with open(_nf_path(key), "w") as f:
                    f.write("0")
        state["holders"].append(holder)
        with open(BRIDGE_NF_STATE + ".tmp", "w") as f:
            json.dump(state, f)
        os.replace(BRIDGE_NF_STATE + ".tmp", BRIDGE_NF_STATE)


def _bridge_nf_release(holder):
    with _global_lock():
        if not os.path.exists(BRIDGE_NF_STATE):
            return
        state = _load_nf_state()
        state["holders"] = [h for h in state["holders"] if h != holder]
        if state["holders"]:
            with open(BRIDGE_NF_STATE + ".tmp", "w") as f:
                json.dump(state, f)
            os.replace(BRIDGE_NF_STATE + ".tmp", BRIDGE_NF_STATE)
            return
        for key, value in state["saved"].items():
            with contextlib.suppress(OSError):
                with open(_nf_path(key), "w") as f:
                    f.write(value)
        os.unlink(BRIDGE_NF_STATE)


def _used_networks():
    """The IPv4 networks of every route of the root namespace (all tables;
    the local table has every address), as ip_network objects."""
    out = []
    for r in json.loads(_ip("-j", "-4", "route", "show", "table", "all").stdout or "[]"):
        dst = r.get("dst")
        if not dst or dst == "default":
            continue
        with contextlib.suppress(ValueError):
            out.append(ipaddress.ip_network(dst, strict=False))
    return out


def pids_in_netns(netns):
    """Processes whose network namespace is netns (a NodeNetns, a name or
    a path)."""
    try:
        st = os.stat(_netns_path(netns))
    except OSError:
        return []
    out = []
    for pid in _all_pids():
        try:
            s = os.stat(f"/proc/{pid}/ns/net")
        except OSError:
            continue
        if (s.st_dev, s.st_ino) == (st.st_dev, st.st_ino):
            out.append(pid)
    return out


class NodeNetns:
    """One worker node's network namespace: NAME (alnodeTAG-I) with lo and
    eth0 (ADDR/24, a veth into the bridge) up and a default route via the
    bridge's address."""

    def __init__(self, bridge, index):
        self.bridge = bridge
        self.index = index
        self.name = f"alnode{bridge.tag}-{index}"
        self.path = os.path.join(NETNS_DIR, self.name)
        self.veth = f"alv{bridge.tag}-{index}"  # its end in the root namespace
        self.addr = str(bridge.subnet.network_address + 10 + index)
        self.created = False  # the namespace is ours to remove

    def argv(self, argv):
        """argv run inside this namespace: nsenter enters its network
        namespace alone and execs argv (the Popen's pid is the program's
        own); `ip netns exec` would also mount a /sys of its own, without
        the cgroup tree the VMs' limits live in."""
        return ["nsenter", f"--net={self.path}", "--", *argv]

    def run(self, argv, **popen_kwargs):
        """Starts argv inside the namespace (argv()). The caller stops it;
        see Lab.spawn for one the lab stops and logs."""
        return subprocess.Popen(self.argv(argv), **popen_kwargs)

    def check(self, argv, timeout=30, **kwargs):
        """Runs argv inside the namespace to completion (subprocess.run,
        output captured as text)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.argv(argv), timeout=timeout, **kwargs)

    def socket(self, family=socket.AF_INET, type=socket.SOCK_STREAM):
        """A socket in this namespace (netns_socket)."""
        return netns_socket(self.path, family, type)

    def pids(self):
        return pids_in_netns(self.path)

    def _create(self):
        b = self.bridge
        if os.path.exists(self.path):
            raise RuntimeError(f"a network namespace {self.name} exists already")
        _ip("netns", "add", self.name)
        self.created = True
        _ip("-n", self.name, "link", "set", "lo", "up")
        _ip("link", "add", self.veth, "type", "veth", "peer", "name", "eth0", "netns", self.name)
        _ip("link", "set", self.veth, "master", b.name, "up")
        _ip("-n", self.name, "addr", "add", f"{self.addr}/{b.subnet.prefixlen}", "dev", "eth0")
        _ip("-n", self.name, "link", "set", "eth0", "up")
        _ip("-n", self.name, "route", "add", "default", "via", b.host)

    def _destroy(self, notes):
        """Kills what still runs in the namespace (noted: whoever started
        it should have stopped it), then removes the namespace and the veth
        pair."""
        if not self.created:
            return
        pids = self.pids()
        if pids:
            notes.append(f"netns {self.name}: killed processes still in it: "
                         f"{[(p, _read(f'/proc/{p}/comm').strip()) for p in pids]}")
            for p in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
            left = _wait_pids_gone(pids, 10)
            if left:
                raise RuntimeError(f"netns {self.name}: processes {left} survive SIGKILL")
        if os.path.exists(self.path):
            _ip("netns", "del", self.name)
        # the namespace goes away asynchronously (and not while something
        # holds it open): remove the root end of the pair ourselves
        if os.path.exists(f"/sys/class/net/{self.veth}"):
            _ip("link", "del", self.veth, check=False)


class Bridge:
    """A bridge NAME (albrTAG) in the root namespace with HOST
    (10.203.X.1/24) and nodes: NodeNetns, each on a veth pair into it.
    Construct it through Lab.bridge(), or use it as a context manager."""

    def __init__(self, nodes=0, tag=None):
        self.tag = tag or secrets.token_hex(3)
        self.name = f"albr{self.tag}"
        self.holder = f"{os.getpid()}:{self.tag}"
        self.subnet = None
        self.host = None
        self.nodes = []
        self.notes = []  # what close() found and cleaned up (processes left in a namespace)
        self._nf = False
        self._created = False  # the bridge is ours to remove
        self._closed = False
        self._want = nodes

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self):
        with _global_lock():  # a subnet no other lab has chosen meanwhile
            if os.path.exists(f"/sys/class/net/{self.name}"):
                raise RuntimeError(f"a link {self.name} exists already")
            used = _used_networks()
            free = [n for n in LAB_NET.subnets(new_prefix=24) if not any(n.overlaps(u) for u in used)]
            if not free:
                raise RuntimeError(f"no free /24 in {LAB_NET}: every one overlaps a route")
            self.subnet = random.choice(free)
            self.host = str(self.subnet.network_address + 1)
            _ip("link", "add", self.name, "type", "bridge")
            self._created = True
            _ip("addr", "add", f"{self.host}/{self.subnet.prefixlen}", "dev", self.name)
            _ip("link", "set", self.name, "up")
        _bridge_nf_acquire(self.holder)
        self._nf = True
        for _ in range(self._want):
            self.add_node()
        return self

    def add_node(self):
        """One more namespace on the bridge; returns its NodeNetns."""
        if self.subnet is None or self._closed:
            raise RuntimeError(f"bridge {self.name} is not started")
        if len(self.nodes) >= 240:
            raise RuntimeError("at most 240 nodes on a /24 (10..249)")
        n = NodeNetns(self, len(self.nodes))
        self.nodes.append(n)  # before it exists: close() removes a half-made one
        n._create()
        return n

    def addr(self, i):
        """Node i's address."""
        return self.nodes[i].addr

    def netns(self, i):
        """Node i's namespace name (for `ip netns exec`, AIRLOCK_*_NETNS)."""
        return self.nodes[i].name

    def netns_path(self, i):
        """Node i's namespace as a path (/run/netns/NAME: setns, nsenter --net=)."""
        return self.nodes[i].path

    def run(self, i, argv, **popen_kwargs):
        return self.nodes[i].run(argv, **popen_kwargs)

    def close(self):
        if self._closed:
            return
        self._closed = True
        errors = []
        for n in reversed(self.nodes):
            try:
                n._destroy(self.notes)
            except Exception as e:
                errors.append(e)
        if self._created and os.path.exists(f"/sys/class/net/{self.name}"):
            r = _ip("link", "del", self.name, check=False)
            if r.returncode != 0:
                errors.append(RuntimeError(f"ip link del {self.name}: {r.stderr.strip()}"))
        if self._nf:
            try:
                _bridge_nf_release(self.holder)
            except Exception as e:
                errors.append(e)
        if errors:
            raise errors[0]


# ---- PostgreSQL ----------------------------------------------------------------

def _free_port(addrs):
    """A TCP port free on every address of addrs (as of now)."""
    def sock(a):
        return socket.socket(socket.AF_INET6 if ":" in a else socket.AF_INET)

    for _ in range(50):
        with sock(addrs[0]) as s:
            s.bind((addrs[0], 0))
            port = s.getsockname()[1]
            try:
                for a in addrs[1:]:
                    with sock(a) as o:
                        o.bind((a, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no TCP port free on all of {addrs}")


_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class PostgresServer:
    """A throwaway PostgreSQL server (as tests/unit/with-postgres.sh, plus
    TCP): initdb as the system user postgres (initdb refuses root) in a
    temporary directory DIR, the server running as postgres with fsync and
    full_page_writes off, its Unix socket in DIR and TCP on every address
    of listen (127.0.0.1 by default) on one free port, database airlock
    made. stop() is an immediate shutdown and removes DIR.

    Authentication is trust, for the Unix socket, loopback and the networks
    in clients (Lab.postgres(bridge=...) passes the lab's /24): acceptable
    only because the server listens on test-only addresses (loopback, a
    lab bridge's) that nothing outside this machine can complete a
    connection to, and lives for one test."""

    def __init__(self, listen=("127.0.0.1",), clients=(), databases=("airlock",), port=None, settings=None,
                 bin_dir=None, base_dir=None):
        self.bin = bin_dir or PG_BIN
        self.listen = list(listen)
        self.clients = [str(ipaddress.ip_network(c, strict=False)) for c in clients]
        self.databases = list(databases)
        self.settings = dict(settings or {})
        self.base_dir = base_dir
        self.dir = None
        self.want_port = port
        self.port = None
        self.proc = None
        self._closed = False
        self._shm_before = set()
        if not self.listen:
            raise ValueError("PostgresServer: listen on at least one address")

    # -- paths and URLs
    @property
    def data_dir(self):
        return os.path.join(self.dir, "data")

    @property
    def log_path(self):
        return os.path.join(self.dir, "server.log")

    @property
    def host(self):
        """The first listen address: the one url names."""
        return self.listen[0]

    def url_for(self, db="airlock", host=None):
        """postgresql://postgres@HOST:PORT/DB (HOST: the first listen address
        unless given)."""
        h = host or self.host
        if ":" in h:
            h = f"[{h}]"
        return f"postgresql://postgres@{h}:{self.port}/{db}"

    @property
    def url(self):
        """The URL of database airlock over TCP on the first listen address."""
        return self.url_for(self.databases[0] if self.databases else "airlock")

    def socket_url(self, db="airlock"):
        """The same database over the Unix socket in DIR."""
        return f"postgresql:///{db}?host={self.dir}&port={self.port}&user=postgres"

    def log_tail(self, n=40):
        return log_tail(self.log_path, n)

    # -- life
    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def _as_postgres(self):
        """(argv prefix, Popen kwargs) to run a program as postgres when we
        are root."""
        if os.geteuid() != 0:
            return [], {}
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            raise RuntimeError("running as root, and there is no user postgres to run the server as "
                               "(scripts/deps.sh --test installs postgresql-15)") from None
        return ["runuser", "-u", "postgres", "--"], {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}

    def _setup(self, argv, what):
        with open(os.path.join(self.dir, "setup.log"), "ab") as log:
            r = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"PostgreSQL: {what} failed ({r.returncode}):\n"
                               f"{log_tail(os.path.join(self.dir, 'setup.log'), 20)}")

    def start(self):
        for b in ("initdb", "postgres", "createdb", "psql"):
            if not os.access(os.path.join(self.bin, b), os.X_OK):
                raise RuntimeError(f"{self.bin}/{b} not found: install postgresql-15 "
                                   "(scripts/deps.sh --test) or set AIRLOCK_PG_BIN")
        prefix, as_pg = self._as_postgres()
        self._shm_before = set(glob.glob("/dev/shm/PostgreSQL.*"))  # another server's (the machine's own)
        self.dir = tempfile.mkdtemp(prefix="airlock-pg-", dir=self.base_dir)
        # other users may use the socket (a replica that dropped root); the
        # data directory inside stays postgres's own (0700)
        os.chmod(self.dir, 0o755)
        if as_pg:
            os.chown(self.dir, as_pg["user"], as_pg["group"])
        self._setup([*prefix, os.path.join(self.bin, "initdb"), "--no-sync", "-A", "trust", "-U", "postgres",
                     "-E", "UTF8", "--locale=C", "-D", self.data_dir], "initdb")
        with open(os.path.join(self.data_dir, "pg_hba.conf"), "a") as f:
            f.write("# clusterlab: the lab's networks (test-only addresses)\n")
            for c in self.clients:
                f.write(f"host all all {c} trust\n")
        for attempt in range(5):
            self.port = self.want_port or _free_port(self.listen)
            if self._start_server(as_pg):
                break
            if attempt == 4 or self.want_port:
                raise RuntimeError(f"PostgreSQL could not listen on {self.listen} port {self.port}:\n"
                                   f"{self.log_tail()}")
        for db in self.databases:
            self.create_database(db)
        return self

    def _start_server(self, as_pg):
        """Starts the postmaster (exec'd as postgres directly, so that
        self.proc is the postmaster itself: kill9(pg.proc) crashes the
        database); False if a port was taken meanwhile."""
        # dynamic shared memory in files of the data directory, removed
        # with it: an immediate shutdown (stop()) or a killed postmaster
        # leaves the default's /dev/shm/PostgreSQL.* segments behind
        opts = {"listen_addresses": ",".join(self.listen), "port": str(self.port),
                "unix_socket_directories": self.dir, "fsync": "off", "full_page_writes": "off",
                "dynamic_shared_memory_type": "mmap"}
        opts.update({k: str(v) for k, v in self.settings.items()})
        argv = [os.path.join(self.bin, "postgres"), "-D", self.data_dir]
        for k, v in opts.items():
            argv += ["-c", f"{k}={v}"]
        with open(self.log_path, "ab") as log:
            start = log.tell()  # this attempt's lines
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.dir, start_new_session=True, **as_pg)
        pidfile = os.path.join(self.data_dir, "postmaster.pid")
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                if "could not bind" in _read(self.log_path)[start:]:
                    return False
                raise RuntimeError(f"PostgreSQL exited with {self.proc.returncode} at start:\n{self.log_tail()}")
            lines = _read(pidfile).splitlines()
            # line 8 of postmaster.pid is the postmaster's status (as pg_ctl -w reads it)
            if len(lines) >= 8 and lines[7].strip() == "ready":
                break
            if time.monotonic() >= deadline:
                raise RuntimeError(f"PostgreSQL not ready after 60s:\n{self.log_tail()}")
            time.sleep(0.02)
        # a listen address it could not bind is only a warning to it
        if "could not bind" in _read(self.log_path)[start:]:
            self._kill_server()
            return False
        return True

    def create_database(self, name):
        """Creates database name; returns its URL (url_for)."""
        if not _DB_NAME.match(name):
            raise ValueError(f"database name {name!r}: lowercase letters, digits and _ only")
        self._setup([os.path.join(self.bin, "createdb"), "-h", self.dir, "-p", str(self.port), "-U", "postgres",
                     name], f"creating database {name}")
        return self.url_for(name)

    def psql(self, sql, db="airlock", timeout=30):
        """Runs sql over the Unix socket (psql -At); its output. A failure
        raises with psql's message."""
        r = subprocess.run([os.path.join(self.bin, "psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1",
                            "-d", self.socket_url(db), "-c", sql], capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"psql {sql!r}: {r.stderr.strip()}")
        return r.stdout

    def pids(self):
        """Every process of this server: the postmaster and its children all
        run in the data directory (found so even once the postmaster was
        killed and its children were orphaned)."""
        if not self.dir:
            return []
        out = []
        for pid in _all_pids():
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if cwd == self.data_dir or cwd == self.data_dir + " (deleted)":
                out.append(pid)
        return out

    def _kill_server(self):
        """Immediate shutdown (SIGQUIT to the postmaster), SIGKILL to what
        is left after 10 s; waits for every process of the server."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kill9(self.proc)
        left = _wait_pids_gone(self.pids(), 10)
        for p in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        left = _wait_pids_gone(left, 10)
        if left:
            raise RuntimeError(f"PostgreSQL processes {left} survive SIGKILL")

    def stop(self):
        """Stops the server at once (idempotent) and removes its directory."""
        if self._closed:
            return
        self._closed = True
        try:
            self._kill_server()
        finally:
            if self.dir:
                shutil.rmtree(self.dir, ignore_errors=True)
        left = set(glob.glob("/dev/shm/PostgreSQL.*")) - self._shm_before
        assert not left, f"PostgreSQL's shared memory left behind: {sorted(left)}"


# ---- the lab ---------------------------------------------------------------------

class Lab:
    """What one test starts, torn down in reverse order by close()
    (idempotent; every step runs even when an earlier one fails, and the
    first failure is raised at the end). Use it as a context manager or
    through the `lab` fixture.

    DIR (lab.dir, a temporary directory, removed at close) holds the logs
    of the processes spawn() starts; mkdir() makes directories there."""

    def __init__(self, base_dir=None):
        self.tag = secrets.token_hex(3)
        self.dir = tempfile.mkdtemp(prefix=f"airlock-lab-{self.tag}-", dir=base_dir)
        os.chmod(self.dir, 0o755)  # reachable for a process that dropped root
        self.base_dir = base_dir
        self.procs = []
        self.notes = []  # what close() had to clean up that its owner had not
        self._cleanups = [(shutil.rmtree, (self.dir,), {"ignore_errors": True})]
        self._closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def defer(self, fn, *args, **kwargs):
        """Calls fn(*args, **kwargs) at close(), before what was registered
        earlier."""
        self._cleanups.append((fn, args, kwargs))
        return fn

    def enter(self, cm):
        """Enters a context manager now and exits it at close()."""
        v = cm.__enter__()
        self.defer(cm.__exit__, None, None, None)
        return v

    def mkdir(self, name, mode=0o755):
        """A new directory DIR/name (removed with DIR)."""
        path = os.path.join(self.dir, name)
        os.makedirs(path)
        os.chmod(path, mode)
        return path

    def postgres(self, bridge=None, listen=None, clients=(), **kwargs):
        """A PostgresServer, stopped at close(). With bridge, it listens on
        the bridge's address (first: pg.url names it) and 127.0.0.1 and
        trusts the bridge's /24."""
        if bridge is not None:
            listen = listen or [bridge.host, "127.0.0.1"]
            clients = [*clients, str(bridge.subnet)]
        pg = PostgresServer(listen=listen or ["127.0.0.1"], clients=clients, base_dir=self.base_dir, **kwargs)
        self.defer(pg.stop)  # before start: a failed start is cleaned up
        return pg.start()

    def bridge(self, nodes=0):
        """A Bridge with that many NodeNetns, removed at close()."""
        b = Bridge(nodes=nodes)

        def close():
            try:
                b.close()
            finally:
                self.notes += b.notes
        self.defer(close)
        return b.start()

    def spawn(self, argv, name=None, netns=None, stop_timeout=10, env=None, **popen_kwargs):
        """Starts argv (inside netns: a NodeNetns, or a name) in a session of
        its own, stdout and stderr to DIR/NAME.log; returns the Popen with
        .name and .log_path. close() stops it (stop(): SIGTERM, SIGKILL
        after stop_timeout) and then SIGKILLs anything left in its process
        group (noted)."""
        name = name or os.path.basename(argv[0])
        if any(p.name == name for p in self.procs):
            name = f"{name}-{len(self.procs)}"
        log_path = os.path.join(self.dir, f"{name}.log")
        if netns is not None:
            path = getattr(netns, "path", None) or os.path.join(NETNS_DIR, netns)
            argv = ["nsenter", f"--net={path}", "--", *argv]
        popen_kwargs.setdefault("stdin", subprocess.DEVNULL)
        popen_kwargs.setdefault("start_new_session", True)
        with open(log_path, "ab") as log:
            p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                 env=None if env is None else {**os.environ, **env}, **popen_kwargs)
        p.name, p.log_path = name, log_path
        p.own_group = bool(popen_kwargs["start_new_session"])
        self.procs.append(p)
        self.defer(self._reap, p, stop_timeout)
        return p

    def _reap(self, p, timeout):
        stop(p, timeout)
        if not p.own_group:
            return
        # the group (id: the leader's pid) outlives its leader
        group = [q for q in _all_pids() if (_stat_fields(q) or [None] * 3)[2] == str(p.pid) and _alive(q)]
        if group:
            self.notes.append(f"{p.name}: killed processes left in its process group: "
                              f"{[(q, _read(f'/proc/{q}/comm').strip()) for q in group]}")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            left = _wait_pids_gone(group, 10)
            if left:
                raise RuntimeError(f"{p.name}: processes {left} survive SIGKILL")

    def wait_tcp(self, host, port, timeout=30, netns=None, proc=None, what=None):
        """wait_tcp() (module level)."""
        return wait_tcp(host, port, timeout=timeout, netns=netns, proc=proc, what=what)

    def print_logs(self, n=80):
        """The last lines of every spawned process's log, and the notes (what
        a failing test's fixture prints)."""
        for p in self.procs:
            print(f"--- {p.name} (pid {p.pid}, status {p.poll()}): last lines of {p.log_path}\n{log_tail(p, n)}")
        for note in self.notes:
            print(f"--- lab: {note}")

    def close(self):
        if self._closed:
            return
        self._closed = True
        errors = []
        while self._cleanups:
            fn, args, kwargs = self._cleanups.pop()
            try:
                fn(*args, **kwargs)
            except BaseException as e:  # noqa: B902 - every step runs; the first failure is raised
                errors.append(e)
        for note in self.notes:
            print(f"--- lab: {note}", file=sys.stderr)
        if errors:
            if len(errors) > 1:
                print("--- lab: further errors while closing: " + "; ".join(repr(e) for e in errors[1:]),
                      file=sys.stderr)
            raise errors[0]


@pytest.fixture
def lab(request):
    """A Lab for one test (import it into the test module), closed however
    the test ends; a failed test prints its processes' log tails first."""
    lab = Lab()

    def fin():
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            lab.print_logs()
        lab.close()
    request.addfinalizer(fin)
    return lab


# ---- Airlock on the lab: replicas and workers ------------------------------

def _harness():
    """tests/harness.py (imported late: it needs AIRLOCK_TEST_VOLUME, which
    the lab's own self-test does not)."""
    import harness
    return harness


def _shared_kms_dir(lab):
    """The tenants' key-encryption keys every replica of the lab uses (a
    directory the replicas share, as --kms-dir asks of a cluster): owned by
    airlockd's user, 0700, removed at close."""
    d = getattr(lab, "_kms_dir", None)
    if d is None:
        d = lab._kms_dir = _harness().volume_tempdir("airlock-kms-")
        lab.defer(shutil.rmtree, d, True)
        pw = pwd.getpwnam("airlock")
        os.chown(d, pw.pw_uid, pw.pw_gid)
        os.chmod(d, 0o700)
    return d


class Replica:
    """One airlockd replica on the lab's store: its API on 127.0.0.1, its
    cluster port on the bridge (where the workers reach it), the lab's one
    key directory. The HTTP helpers are tests/harness.py's Airlock's."""

    def __init__(self, lab, name, store_url, bridge, lost_after_s=6, extra=()):
        h = _harness()
        self.lab, self.name = lab, name
        self.data_dir = h.volume_tempdir(f"airlock-{name}-")
        lab.defer(shutil.rmtree, self.data_dir, True)
        self.port = _free_port(["127.0.0.1"])
        self.cluster_port = _free_port([bridge.host])
        self.cluster_addr = f"{bridge.host}:{self.cluster_port}"
        self.url = f"http://127.0.0.1:{self.port}"
        self.argv = [h.AIRLOCKD, "--data-dir", self.data_dir, "--listen", f"127.0.0.1:{self.port}",
                     "--store", store_url, "--no-local-node", "--cluster-listen", self.cluster_addr,
                     "--node-lost-after-s", str(lost_after_s), "--kms-dir", _shared_kms_dir(lab), *extra]
        self.token = None
        self.proc = None

    def start(self, timeout=60):
        return self.spawn().wait_serving(timeout)

    def spawn(self):
        """Starts it without waiting (replicas started together race to
        migrate the store: each migration must still run once)."""
        self.proc = self.lab.spawn(self.argv, name=f"{self.name}-{len(self.lab.procs)}",
                                   env={"AIRLOCK_LOG_LEVEL": "debug"})
        self.log_path = self.proc.log_path
        return self

    def wait_serving(self, timeout=60):
        token = os.path.join(self.data_dir, "control", "admin.token")

        def up():
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{log_tail(self.log_path)}")
            if not os.path.exists(token):
                return False
            with open(token) as f:
                self.token = f.read().strip()
            try:
                return self.request("GET", "/v1/nodes")[0] == 200
            except OSError:
                return False
        wait_for(up, timeout, f"replica {self.name} serving")
        return self

    def kill9(self):
        kill9(self.proc)

    # the HTTP helpers of harness.Airlock, which need only url, port, token
    def request(self, *args, **kwargs):
        return _harness().Airlock.request(self, *args, **kwargs)

    def api(self, *args, **kwargs):
        return _harness().Airlock.api(self, *args, **kwargs)

    def create(self, *args, **kwargs):
        return _harness().Airlock.create(self, *args, **kwargs)

    def exec(self, *args, **kwargs):
        return _harness().Airlock.exec(self, *args, **kwargs)

    def cli(self, *args, **kwargs):
        return _harness().Airlock.cli(self, *args, **kwargs)

    def log_tail(self, n=60):
        return log_tail(self.log_path, n)

    def nodes(self):
        return {n["name"]: n for n in self.api("GET", "/v1/nodes")["nodes"]}


def s3_objstore(lab, bridge):
    """An S3 object store every worker of the lab uses: OpenStack Swift's
    S3 API (tests/s3lab.py) listening on the bridge's address, a bucket of
    its own, the keys in files only the node user reads. Returns (the
    SwiftS3, the workers' environment for it); stopped at close."""
    from s3lab import SwiftS3
    s3 = SwiftS3(base_dir="/tmp", host=bridge.host)
    lab.defer(s3.stop)
    s3.start()
    bucket = s3.bucket = s3.make_bucket(f"airlock-{bridge.tag}")
    keys = lab.mkdir("s3-keys")
    access, secret = s3.write_key_files(keys, owner="airlock-node")
    return s3, {"AIRLOCK_OBJSTORE": f"s3://{bucket}?endpoint={s3.endpoint}&region={s3.region}",
                "AIRLOCK_S3_ACCESS_KEY_FILE": access, "AIRLOCK_S3_SECRET_KEY_FILE": secret}


def shared_objstore(lab):
    """An object store directory every worker of the lab uses (a local
    directory standing for the cluster's shared one), owned by the node
    user, removed at close."""
    h = _harness()
    d = h.volume_tempdir("airlock-objstore-")
    lab.defer(shutil.rmtree, d, True)
    pw = pwd.getpwnam("airlock-node")
    os.chown(d, pw.pw_uid, pw.pw_gid)
    return d


class Worker:
    """One worker node in namespace netns: airlock-node started as root
    with --join, which becomes airlock-nodemgr --worker (the node and the
    gateway unprivileged), its data dir on the test volume, the run's
    shared templates, a VM uid range of its own."""

    def __init__(self, lab, name, netns, index, join, token_file, labels=None, objstore=None, accel=None,
                 prebuild="minimal"):
        h = _harness()
        self.lab, self.name, self.netns = lab, name, netns
        self.data_dir = h.volume_tempdir(f"airlock-{name}-")
        lab.defer(self._remove)
        self.argv = [os.path.join(h.BUILD, "src", "node", "airlock-node"), "--join", ",".join(join),
                     "--join-token-file", token_file, "--data-dir", self.data_dir,
                     "--vmm-uid-base", str(2200000 + index * 65536), "--node-name", name,
                     "--cluster-listen", "0.0.0.0:7421", "--advertise", f"{netns.addr}:7421",
                     "--prebuild", prebuild, "--pool-size", "0", "--log-level", "debug"]
        if accel:  # a node that must run TCG on a KVM host (the KVM tier's mixed cluster)
            self.argv += ["--accel", accel]
        if labels:
            self.argv += ["--labels", labels]
        if isinstance(objstore, str):  # shared with other workers: a wake may happen on any
            self.argv += ["--objstore-dir", objstore]
        self.env = {"AIRLOCK_TEMPLATES_DIR": h.TEMPLATES, "AIRLOCK_EGRESS_CA_DIR": h.EGRESS_CA,
                    "AIRLOCK_DNS_UPSTREAM": "127.0.0.1"}
        if isinstance(objstore, dict):  # an S3 store's settings (s3_objstore)
            self.env.update(objstore)
        self.proc = None

    def start(self):
        self.proc = self.lab.spawn(self.argv, name=f"{self.name}-{len(self.lab.procs)}", netns=self.netns,
                                   env=self.env, stop_timeout=60)
        return self

    def pids(self):
        """Every process of this worker: nodemgr, node, gateway, VMMs."""
        h = _harness()
        return set(h.airlock_procs(self.data_dir)) | set(h.qemu_pids(self.data_dir))

    def kill9(self):
        """The machine dies: every process of it at once, VMs included."""
        pids = self.pids()
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.wait(10)
        left = _wait_pids_gone(list(pids), 10)
        assert not left, f"{self.name}: processes outlived SIGKILL: {left}"

    def leaks(self):
        """What this worker left once stopped: processes, mounts, loop
        devices, VM run dirs."""
        h = _harness()
        out = []
        if self.pids():
            out.append(f"{self.name}: processes left: {sorted(self.pids())}")
        if h.mounts_under(self.data_dir):
            out.append(f"{self.name}: mounts left: {h.mounts_under(self.data_dir)}")
        if h.loop_devices_on(self.data_dir):
            out.append(f"{self.name}: loop devices left: {h.loop_devices_on(self.data_dir)}")
        vm = os.path.join(self.data_dir, "run", "vm")
        if os.path.isdir(vm) and os.listdir(vm):
            out.append(f"{self.name}: VM run dirs left: {sorted(os.listdir(vm))}")
        return out

    def _remove(self):
        """After the worker stopped (the lab stops it first): fails the
        test on what it left behind, having removed that too."""
        h = _harness()
        leaks = self.leaks()
        for p in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        for m in reversed(h.mounts_under(self.data_dir)):
            subprocess.run(["umount", "-l", m])
        shutil.rmtree(self.data_dir, ignore_errors=True)
        assert not leaks, "worker left resources behind: " + "; ".join(leaks)
