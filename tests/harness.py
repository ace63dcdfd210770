"""The test harness of tests/integration and tests/security (their
conftest.py files take the fixtures from here): every test gets its own
Airlock (airlockd plus the airlock-node it spawns) in its own data directory on its own port, and
leaves no VM, mount or file behind, checked after each test.

Templates are shared: every instance points AIRLOCK_TEMPLATES_DIR at one
directory on the run's btrfs test volume, so `minimal` and `python` are built
once per run (the first instance builds them; the others wait on the build's
lock and reuse it)."""

import base64
import contextlib
import glob
import http.client
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time
import urllib.parse
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("AIRLOCK_BUILD_DIR", os.path.join(ROOT, "build"))
AIRLOCKD = os.path.join(BUILD, "src", "daemon", "airlockd")
CLI = os.path.join(BUILD, "src", "cli", "airlock")
VOLUME = os.environ.get("AIRLOCK_TEST_VOLUME") or pytest.fail(
    "AIRLOCK_TEST_VOLUME is not set: run the suite with ./test.sh")
TEMPLATES = os.path.join(VOLUME, "templates")
# One egress CA for the run, as for the templates whose trust store holds it
EGRESS_CA = os.path.join(VOLUME, "egress-ca")
# The templates every instance builds at its start unless a test names
# others: the KVM tier's L1, with no network for the python template's
# Debian packages, sets "minimal"
PREBUILD = os.environ.get("AIRLOCK_TEST_PREBUILD", "minimal,python")
# No template is built in the background (AIRLOCK_PREBUILD_BACKGROUND, the
# code interpreter's by default) unless a test asks: every Airlock of the
# run, a cluster's nodes included, would otherwise take a core for minutes
os.environ.setdefault("AIRLOCK_PREBUILD_BACKGROUND", "")
FIRST_START_TIMEOUT = 1800  # building the python template under TCG
START_TIMEOUT = 120


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def procs_naming(text):
    """pids of the processes whose command line has text."""
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(p))
            except OSError:
                pass
    return found


def qemu_pids(needle):
    """PIDs of QEMU processes whose command line mentions needle, or whose
    disk (opened through the run dir's disk.img link) does: a sandbox id
    appears only in the link's target."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if not argv or "qemu-system" not in argv[0]:
            continue
        where = list(argv)
        for arg in argv:
            if arg.startswith("id=d0,file="):
                try:
                    where.append(os.readlink(arg[len("id=d0,file="):].split(",")[0]))
                except OSError:
                    pass
        if any(needle in w for w in where):
            pids.append(int(pid))
    return pids


def airlock_procs(data_dir):
    """{pid: program} of the airlock-nodemgr, airlockd, airlock-node and
    airlock-gw processes serving data_dir, by their binary rather than
    argv[0]: under root the harness's Popen pid is airlock-nodemgr (airlockd
    exec'd it, argv unchanged) and airlockd, the node and the gateway (whose
    command line names no data dir) are its children."""
    out, gateways = {}, []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            exe = os.path.basename(os.readlink(f"/proc/{pid}/exe")).replace(" (deleted)", "")
            if exe == "airlock-gw":
                with open(f"/proc/{pid}/stat") as f:
                    gateways.append((int(pid), int(f.read().rsplit(")", 1)[1].split()[1])))
        except OSError:
            continue
        if exe in ("airlock-nodemgr", "airlockd", "airlock-node") and data_dir.encode() in argv:
            out[int(pid)] = exe
    for pid, ppid in gateways:
        if out.get(ppid) == "airlock-nodemgr":
            out[pid] = "airlock-gw"
    return out


def node_pids(data_dir):
    """The airlock-node processes serving data_dir."""
    return sorted(p for p, exe in airlock_procs(data_dir).items() if exe == "airlock-node")


def kill_node(a):
    """SIGKILLs a's airlock-node and waits for airlockd's next one to
    answer health (it adopts the running VMs)."""
    old = node_pids(a.data_dir)
    assert len(old) == 1, old
    os.kill(old[0], signal.SIGKILL)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        new = node_pids(a.data_dir)
        if new and new != old and a.request("GET", "/v1/health", auth=False)[0] == 200:
            return
        time.sleep(0.2)
    raise AssertionError("airlockd did not start a new node\n" + a.log_tail(80))


def vcpu_threads(sid):
    """/proc paths of the vCPU threads of the sandbox's QEMU (named "CPU
    n/TCG" or "CPU n/KVM": the node starts QEMU with debug-threads=on)."""
    out = []
    for pid in qemu_pids(sid):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().startswith("CPU "):
                    out.append(f"/proc/{pid}/task/{tid}/stat")
    return out


def vcpu_cpu_ticks(threads):
    """User plus system clock ticks the threads have run."""
    total = 0
    for path in threads:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total


def mounts_under(path):
    with open("/proc/self/mountinfo") as f:
        return [l.split()[4] for l in f if l.split()[4].startswith(path)]


class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body!r}")
        self.status = status
        self.body = body


class Airlock:
    """One running airlockd + airlock-node."""

    def __init__(self, data_dir, env_extra=None, prebuild=None, airlockd=None):
        """airlockd: another build's (an earlier release's, for upgrades)."""
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = data_dir + ".log"
        env = dict(os.environ)
        env.update({
            "AIRLOCK_TEMPLATES_DIR": TEMPLATES,
            "AIRLOCK_EGRESS_CA_DIR": EGRESS_CA,
            "AIRLOCK_PREBUILD": PREBUILD if prebuild is None else prebuild,
            "AIRLOCK_LOG_LEVEL": "debug",
            # warm pools off unless a test asks: several tests count QEMUs
            "AIRLOCK_POOL_SIZE": "0",
        })
        env.update(env_extra or {})
        self.log = open(self.log_path, "ab")  # a restart on the same data dir adds to it
        self.proc = subprocess.Popen(
            [airlockd or AIRLOCKD, "--data-dir", data_dir, "--listen", f"127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.token = None

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"airlockd exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                status, _, _ = self.request("GET", "/v1/health", auth=False)
                if status == 200:
                    with open(os.path.join(self.data_dir, "control", "admin.token")) as f:
                        self.token = f.read().strip()
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"airlock not ready after {timeout}s:\n{self.log_tail()}")


    def wait_built(self, timeout):
        """wait_ready() for an Airlock whose start builds templates: fails
        at once, with the build's error, when one of them failed (health
        says template_failed: waiting would not help)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                status, _, body = self.request("GET", "/v1/health", auth=False, timeout=30)
            except OSError:
                status, body = None, b""
            if status == 200:
                return self.wait_ready(30)  # reads the admin token
            if status == 503 and json.loads(body or b"{}").get("error", {}).get("code") == "template_failed":
                pytest.fail(f"a template failed to build: {body.decode(errors='replace')}", pytrace=False)
            if self.proc.poll() is not None:
                pytest.fail(f"airlockd exited with {self.proc.returncode}:\n{self.log_tail()}", pytrace=False)
            time.sleep(2)
        pytest.fail(f"templates not built after {timeout} s:\n{self.log_tail()}", pytrace=False)
    def pid_of(self, program):
        """The one pid of program ("airlockd", "airlock-node",
        "airlock-nodemgr") serving this instance."""
        pids = [p for p, exe in airlock_procs(self.data_dir).items() if exe == program]
        assert len(pids) == 1, f"{program} of {self.data_dir}: pids {pids}"
        return pids[0]

    def log_tail(self, n=60):
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def console_tails(self, n=30):
        """The last n lines of each VM's serial console under the data dir."""
        out = []
        for path in sorted(glob.glob(os.path.join(self.data_dir, "**", "console.log"), recursive=True)):
            try:
                with open(path, "rb") as f:
                    lines = f.read().splitlines()[-n:]
            except OSError:
                continue
            out.append(f"--- console of {os.path.relpath(path, self.data_dir)}\n"
                       + b"\n".join(lines).decode(errors="replace"))
        return "\n".join(out)

    # --- HTTP -------------------------------------------------------------
    def request(self, method, path, body=None, auth=True, token=None, headers=None, timeout=600):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = dict(headers or {})
        if auth:
            h["Authorization"] = f"Bearer {token or self.token}"
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=body, headers=h)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, dict(resp.getheaders()), data

    def api(self, method, path, body=None, expect=200, **kw):
        status, _, data = self.request(method, path, body, **kw)
        if status != expect:
            raise ApiError(status, data)
        return json.loads(data) if data else None

    def create(self, template="minimal", **fields):
        return self.api("POST", "/v1/sandboxes", dict(template=template, **fields), expect=201)

    def exec(self, sbx, cmd, **fields):
        return self.api("POST", f"/v1/sandboxes/{sbx}/exec", dict(cmd=cmd, **fields))

    def put_file(self, sbx, path, data):
        q = urllib.parse.urlencode({"path": path})
        status, _, body = self.request("PUT", f"/v1/sandboxes/{sbx}/files?{q}", body=data)
        if status not in (200, 201, 204):
            raise ApiError(status, body)

    def get_file(self, sbx, path):
        q = urllib.parse.urlencode({"path": path})
        status, _, body = self.request("GET", f"/v1/sandboxes/{sbx}/files?{q}")
        if status != 200:
            raise ApiError(status, body)
        return body

    def sse(self, path, token=None, timeout=120):
        """Yields (event, data_dict, monotonic_time) from an SSE stream, up to
        and including the exit event; fails once the stream has run for
        timeout seconds in all (keep-alive comments would reset a socket
        timeout for ever)."""
        deadline = time.monotonic() + timeout
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        conn.request("GET", path, headers={"Authorization": f"Bearer {token or self.token}",
                                           "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise ApiError(resp.status, resp.read())
        event, data = None, []
        while True:
            line = resp.readline()  # decodes the chunked transfer encoding
            if not line:
                break
            if time.monotonic() > deadline:
                conn.close()
                raise AssertionError(f"{path}: the stream did not end within {timeout}s")
            line = line.decode().rstrip("\r\n")
            if line == "":
                if event or data:
                    yield event, json.loads("\n".join(data)) if data else None, time.monotonic()
                    if event == "exit":
                        break
                event, data = None, []
            elif line.startswith(":"):
                continue
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        conn.close()

    def cli(self, *args, input=None, timeout=300):
        env = dict(os.environ, AIRLOCK_URL=self.url, AIRLOCK_DATA_DIR=self.data_dir)
        env.pop("AIRLOCK_TOKEN", None)
        return subprocess.run([CLI, *args], input=input, capture_output=True, env=env, timeout=timeout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def wait_for(pred, what, a, timeout=120):
    """pred()'s first true value, polled every 0.1 s; after timeout an
    AssertionError naming what did not happen, with Airlock a's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"{what} after {timeout}s\n{a.log_tail(80)}")


def multipart_form(request, context=None, boundary=None):
    """A template build's multipart/form-data body (the JSON request, and a
    context tar when given) and its headers; boundary (bytes) or a random
    one."""
    boundary = boundary or uuid.uuid4().hex.encode()
    parts = [(b'Content-Disposition: form-data; name="request"\r\nContent-Type: application/json\r\n\r\n',
              json.dumps(request).encode())]
    if context is not None:
        parts.append((b'Content-Disposition: form-data; name="context"; filename="context.tar"\r\n'
                      b'Content-Type: application/x-tar\r\n\r\n', context))
    body = b"".join(b"--" + boundary + b"\r\n" + head + data + b"\r\n" for head, data in parts)
    body += b"--" + boundary + b"--\r\n"
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary.decode()}"}


def b64(data):
    return base64.b64encode(data).decode()


@pytest.fixture(scope="session")
def templates():
    """Builds the default templates once for the run (first start builds,
    the rest reuse)."""
    os.makedirs(TEMPLATES, exist_ok=True)
    data_dir = volume_tempdir("airlock-tpl-")
    a = Airlock(data_dir)
    try:
        a.wait_ready(FIRST_START_TIMEOUT)
    except Exception:
        print(f"--- log of the first start\n{a.log_tail(200)}")
        raise
    finally:
        a.stop()
        _remove(a)
    return TEMPLATES


def vm_cgroups():
    """The VM cgroups (airlock-vm-UID) in the hierarchies a node may use
    (docs/security.md, "The VMM jail")."""
    tops = ["/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/unified"]
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        tops.append("/sys/fs/cgroup")
    found = []
    for top in tops:
        depth = top.count("/")
        for dirpath, dirnames, _ in os.walk(top):
            found += [os.path.join(dirpath, d) for d in dirnames if d.startswith("airlock-vm-")]
            if dirpath.count("/") - depth >= 3:
                dirnames[:] = []
    return sorted(set(found))


def hold_vm_to_cpu_share(pid, share):
    """Lowers the CPU limit of the VM cgroup QEMU pid runs in to share of
    one CPU: a loaded host, for that VM alone. False when it has none."""
    with open(f"/proc/{pid}/status") as f:
        uid = next(line.split()[1] for line in f if line.startswith("Uid:"))
    done = False
    for cg in vm_cgroups():
        if os.path.basename(cg) != f"airlock-vm-{uid}":
            continue
        if os.path.exists(os.path.join(cg, "cpu.max")):
            with open(os.path.join(cg, "cpu.max"), "w") as f:
                f.write(f"{int(100000 * share)} 100000")
            done = True
        elif os.path.exists(os.path.join(cg, "cpu.cfs_quota_us")):
            with open(os.path.join(cg, "cpu.cfs_period_us")) as f:
                period = int(f.read())
            with open(os.path.join(cg, "cpu.cfs_quota_us"), "w") as f:
                f.write(str(int(period * share)))
            done = True
    return done


def _cgroup_procs(path):
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return f.read().split()
    except OSError:
        return []


def loop_devices_on(path):
    """Loop devices whose backing file lies under path."""
    out = []
    for dev in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{dev}/loop/backing_file") as f:
                if f.read().strip().startswith(path):
                    out.append(dev)
        except OSError:
            pass
    return out


def store_sandbox_ids(data_dir):
    """The ids of the sandboxes the store holds (airlockd's SQLite file,
    read-only: airlockd has stopped)."""
    db = os.path.join(data_dir, "control", "airlock.db")
    if not os.path.exists(db):
        return set()
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
        return {row[0] for row in c.execute("SELECT id FROM sandboxes")}


def _data_dir_leaks(data_dir):
    """What a stopped Airlock must not leave in its data dir: a VM run dir
    (live or stray), the warm pool, a sandbox dir the store does not know,
    half-written objects, files in a jail's private root."""
    leaks = []
    vm = os.path.join(data_dir, "run", "vm")
    if os.path.isdir(vm) and os.listdir(vm):
        leaks.append(f"VM run dirs left: {sorted(os.listdir(vm))}")
    if os.path.exists(os.path.join(data_dir, "pool")):
        leaks.append(f"warm pool dir left: {sorted(os.listdir(os.path.join(data_dir, 'pool')))}")
    sandboxes = os.path.join(data_dir, "sandboxes")
    if os.path.isdir(sandboxes):
        known = store_sandbox_ids(data_dir)
        orphans = sorted(d for d in os.listdir(sandboxes) if d not in known)
        if orphans:
            leaks.append(f"sandbox dirs without a sandbox: {orphans}")
    tmp = os.path.join(data_dir, "objstore", ".tmp")
    if os.path.isdir(tmp) and os.listdir(tmp):
        leaks.append(f"half-written objects left: {sorted(os.listdir(tmp))}")
    jails = os.path.join(data_dir, "run", "jails")
    if os.path.isdir(jails):
        full = sorted(j for j in os.listdir(jails) if os.listdir(os.path.join(jails, j)))
        if full:
            leaks.append(f"jail roots not emptied: {full}")
    return leaks


RUN = os.getpid()  # names what this run puts on the volume: other suites may share it


def volume_tempdir(prefix, mode=0o700):
    """A new directory at the top of the test volume for this run; the leak
    check fails a test that leaves one behind."""
    d = tempfile.mkdtemp(prefix=f"{prefix}{RUN}-", dir=VOLUME)
    os.chmod(d, mode)
    return d


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _volume_entries():
    """This run's entries at the top of the test volume (data dirs, their
    logs, a test's own dirs: all removed after the test), and the temporary
    dirs of template builds whose node is gone (.tmp-NAME-HASH-PID-RANDOM: a
    build removes its own when it ends)."""
    mine = re.compile(rf"^[a-z0-9]+(-[a-z0-9]+)*-{RUN}-")
    entries = {n for n in os.listdir(VOLUME) if mine.match(n)}
    if os.path.isdir(TEMPLATES):
        for n in os.listdir(TEMPLATES):
            m = re.match(r"^\.tmp-.*-(\d+)-[^-]+$", n)
            if m and not _pid_alive(int(m.group(1))):
                entries.add(os.path.join("templates", n))
    return entries


def _check_no_leaks(data_dir):
    leaks = _data_dir_leaks(data_dir)
    pids = qemu_pids(data_dir)
    if pids:
        leaks.append(f"QEMU processes left: {pids}")
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    cgroups = [c for c in vm_cgroups() if not _cgroup_procs(c)]
    # VM cgroups are host-wide: another Airlock on this host (a second
    # suite) may be removing one of its own right now; ours stay
    deadline = time.monotonic() + 5
    while cgroups and time.monotonic() < deadline:
        time.sleep(0.2)
        cgroups = [c for c in cgroups if os.path.exists(c) and not _cgroup_procs(c)]
    if cgroups:
        leaks.append(f"VM cgroups left: {cgroups}")
        for c in cgroups:
            try:
                os.rmdir(c)
            except OSError:
                pass
    m = mounts_under(data_dir)
    if m:
        leaks.append(f"mounts left: {m}")
        for path in reversed(m):
            subprocess.run(["umount", "-l", path])
    loops = loop_devices_on(data_dir)
    if loops:
        leaks.append(f"loop devices left: {loops}")
        for dev in loops:
            subprocess.run(["losetup", "-d", f"/dev/{dev}"])
    return leaks


def _remove(a):
    shutil.rmtree(a.data_dir, ignore_errors=True)
    try:
        os.unlink(a.log_path)
    except OSError:
        pass


@contextlib.contextmanager
def airlock_instance(env=None, prebuild=None, timeout=START_TIMEOUT):
    """One Airlock for a longer scope than a test (a module fixture of the
    red-team suite), with the same leak checks as airlock_factory."""
    before = _volume_entries()
    data_dir = volume_tempdir("airlock-m-")
    a = Airlock(data_dir, env, prebuild)
    leaks = []
    try:
        a.wait_ready(timeout)
        yield a
    finally:
        a.stop()
        leaks = _check_no_leaks(a.data_dir)
        if leaks:
            print(f"--- log of {a.data_dir}\n{a.log_tail(200)}")
        _remove(a)
        leaks += [f"files left on the test volume: {sorted(_volume_entries() - before)}"] \
            if _volume_entries() - before else []
    assert not leaks, "left resources behind: " + "; ".join(leaks)


@pytest.fixture
def airlock_factory(templates, request):
    """Starts Airlock instances for one test; stops them and checks that
    nothing is left behind: QEMU processes, VM cgroups, mounts, loop
    devices, VM run dirs, sandbox dirs the store does not know, files on
    the test volume outside the data dirs (see _check_no_leaks)."""
    started = []
    before = _volume_entries()

    def start(base=VOLUME, env=None, prebuild=None, wait=True, airlockd=None, data_dir=None):
        """data_dir: another instance's, stopped (the same data, started
        again: by another build's airlockd, say)."""
        if not data_dir:
            data_dir = volume_tempdir("airlock-t-") if base == VOLUME else tempfile.mkdtemp(prefix="airlock-t-",
                                                                                         dir=base)
        a = Airlock(data_dir, env, prebuild, airlockd)
        started.append(a)
        if wait:
            a.wait_ready(START_TIMEOUT)
        return a

    yield start
    leaks = []
    failed = request.node.rep_call.failed if hasattr(request.node, "rep_call") else False
    last = list({a.data_dir: a for a in started}.values())  # each data dir's latest instance
    for a in last:
        if failed:  # what the guests printed, while their VMs are still there
            print(a.console_tails())
    for a in started:  # all first: VM cgroups are host-wide
        a.stop()
    for a in last:
        left_behind = _check_no_leaks(a.data_dir)
        leaks += left_behind
        if failed or left_behind:
            print(f"--- log of {a.data_dir}\n{a.log_tail(200)}")
        _remove(a)
    left = _volume_entries() - before
    if left:
        leaks.append(f"files left on the test volume: {sorted(left)}")
    assert not leaks, "test left resources behind: " + "; ".join(leaks)


@pytest.fixture
def airlock(airlock_factory):
    return airlock_factory()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
