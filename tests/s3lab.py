"""A throwaway S3 server for the tests: OpenStack Swift 2.30 (Debian 12's
python3-swift) with its S3 API (the s3api middleware) and tempauth, all on
127.0.0.1, in a temporary directory that stop() removes.

    with SwiftS3() as lab:                      # start() ... stop()
        lab.make_bucket("bkt")                  # S3 names: 3 characters at least
        lab.endpoint, lab.region                # http://127.0.0.1:PORT, us-east-1
        lab.access_key, lab.secret_key          # test:tester, 40 hex digits per lab
        ak, sk = lab.write_key_files(some_dir)  # each key alone in a 0600 file
        lab.request("GET", "/bkt", query={"list-type": "2"})  # signed here, not by curl
        lab.kill_proxy(); lab.restart_proxy()   # same port, same data

or around a command (tests/unit/with-swift.sh):

    python3 tests/s3lab.py run [--dir BASE_DIR] -- CMD [ARG...]

which runs CMD with AIRLOCK_TEST_S3_ENDPOINT, AIRLOCK_TEST_S3_REGION,
AIRLOCK_TEST_S3_BUCKET (a bucket made for it),
AIRLOCK_TEST_S3_ACCESS_KEY_FILE and AIRLOCK_TEST_S3_SECRET_KEY_FILE, stops
the lab however CMD ends (SIGINT, SIGTERM and SIGHUP are passed to CMD) and
exits with CMD's status (128+N for a signal).

Four plain processes, no init scripts, no rsync, replicators or auditors:
the proxy (pipeline ... cache s3api tempauth copy slo dlo ... proxy-server),
and one account, container and object server on one device
(DIR/devices/d1), rings of one replica built with swift-ring-builder's code.
Only the library package is needed (scripts/deps.sh --test installs
python3-swift): the servers and the ring builder run from a small launcher
this module writes into the lab's directory (DIR/labserver.py), which does
what /usr/bin/swift-*-server and swift-ring-builder do, plus three things:
swift.conf (the hash path prefix and suffix, random per lab) is read from
the lab's directory, not /etc/swift; the servers log to DIR/NAME.log, not
syslog; and the cache tempauth insists on ("Memcache required") is one that
holds nothing, so no memcached is needed and none is shared.

Started as root, the servers run as the user swift (python3-swift's
postinst makes it), who owns the lab's directory; otherwise as the caller.
Swift itself drops to the conf's `user` only in the workers it forks; with
`workers = 0` (one process per server, no fork) it never would and stays
root, so the launcher drops before Swift starts (the ports are
unprivileged). The directories above the lab's must let swift through
(not /root). The object server keeps metadata in user xattrs: the
directory must be on a filesystem that has them (ext4, btrfs, XFS; tmpfs
since Linux 6.6); start() checks.

What a SigV4 client must do for s3api here (and curl 7.88 with
--aws-sigv4 does not do by itself; tests/integration/test_s3lab.py shows
each): send x-amz-content-sha256 (s3api refuses a request without it,
400 InvalidRequest; curl sends none unless given one as a header, and
then signs with the header's value; UNSIGNED-PAYLOAD is accepted); write
the query in SigV4's canonical form (names sorted, "uploads=", values
percent-encoded, "/" as %2F: curl signs the query as written, s3api
the canonical form) and the path percent-encoded the same way
(unreserved characters as they are, others %XX upper-case); keep the
access key test:tester whole (curl's --user cuts at the first colon:
give it in the URL as test%3Atester, or libcurl's CURLOPT_USERNAME and
CURLOPT_PASSWORD apart); send a Content-Length (s3api compares the body
with x-amz-content-sha256 only then: 400 BadDigest, nothing stored;
a chunked upload is taken unchecked, where S3 would refuse it).

Nothing here is Python outside the standard library; the servers run under
/usr/bin/python3 (AIRLOCK_SWIFT_PYTHON), whatever python3 runs this.
"""

import datetime
import hashlib
import hmac
import http.client
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

SWIFT_PYTHON = os.environ.get("AIRLOCK_SWIFT_PYTHON", "/usr/bin/python3")
# where Debian's python3-swift puts the middleware the lab needs
SWIFT_S3API = "/usr/lib/python3/dist-packages/swift/common/middleware/s3api/s3api.py"
ACCOUNT = "test"
USER = "tester"
REGION = "us-east-1"
# what AWS requires of every part but the last (s3api's default too)
MIN_SEGMENT_SIZE = 5 * 1024 * 1024
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
BACKENDS = ("account", "container", "object")
SERVERS = BACKENDS + ("proxy",)


class LabError(Exception):
    """The lab could not be set up, started or stopped; the message says
    what failed and carries the servers' logs."""


# ---- what the lab writes into its directory --------------------------------

LAUNCHER = r'''"""Written by tests/s3lab.py: runs one Swift server, or builds the
rings, the way /usr/bin/swift-*-server and swift-ring-builder do, with
swift.conf from the lab's directory and logs to a file. Also the proxy's
null cache (paste: labserver:null_cache_factory)."""
import logging
import os
import pwd
import sys


class NullCache:
    """What tempauth needs from a memcache client, holding nothing: every
    get misses, so every request sees the account and container servers'
    current answer."""

    def get(self, key, raise_on_error=False):
        return None

    def set(self, key, value, serialize=True, time=0, min_compress_len=0,
            raise_on_error=False):
        pass

    def delete(self, key, server_key=None):
        pass

    def get_multi(self, keys, server_key):
        return [None] * len(keys)

    def set_multi(self, mapping, server_key, serialize=True, time=0,
                  min_compress_len=0):
        pass

    def incr(self, key, delta=1, time=0):
        from swift.common.memcached import MemcacheConnectionError
        raise MemcacheConnectionError("the lab has no memcache")

    decr = incr


def null_cache_factory(global_conf, **local_conf):
    cache = NullCache()

    def factory(app):
        def middleware(env, start_response):
            env["swift.cache"] = cache
            return app(env, start_response)
        return middleware
    return factory


def _setup(swift_dir, log_path):
    from swift.common import storage_policy, utils

    class FileLog(logging.StreamHandler):
        """Instead of syslog (/dev/log, or UDP to localhost:514)."""
        def __init__(self, address=None, facility=None, **kwargs):
            super().__init__(open(log_path, "a", buffering=1))

    utils.ThreadSafeSysLogHandler = FileLog
    utils.set_swift_dir(swift_dir)
    storage_policy.reload_storage_policies()


def main():
    what, swift_dir, log_path = sys.argv[1:4]
    if os.geteuid() == 0:
        # as the owner of the lab's directory (swift), from the start: with
        # workers = 0 (no fork) Swift would never drop to the conf's user
        from swift.common.utils import drop_privileges
        drop_privileges(pwd.getpwuid(os.stat(swift_dir).st_uid).pw_name)
    _setup(swift_dir, log_path)
    if what == "rings":
        # swift-ring-builder's main, once per command: RING-FILE CMD ARGS,
        # commands separated by "--"
        from swift.cli.ringbuilder import main as ring_builder
        cmd = []
        for arg in sys.argv[4:] + ["--"]:
            if arg != "--":
                cmd.append(arg)
                continue
            if not cmd:
                continue
            try:
                rc = ring_builder(["swift-ring-builder"] + cmd)
            except SystemExit as e:
                rc = e.code
            if rc not in (0, None):
                sys.exit("swift-ring-builder %s: exit status %s" % (" ".join(cmd), rc))
            cmd = []
        return 0
    from swift.common.wsgi import run_wsgi
    kwargs = {}
    if what == "object-server":
        from swift.obj import server
        kwargs["global_conf_callback"] = server.global_conf_callback
    return run_wsgi(sys.argv[4], what, **kwargs)


if __name__ == "__main__":
    sys.exit(main())
'''


def _swift_conf(prefix, suffix):
    return f"""[swift-hash]
swift_hash_path_prefix = {prefix}
swift_hash_path_suffix = {suffix}

[storage-policy:0]
name = Policy-0
default = yes

[swift-constraints]
"""


def _backend_conf(kind, port, user, d):
    extra = {
        # the listing must have an object once its PUT answered: the update
        # to the container server is synchronous up to this, then left to an
        # updater this lab does not run (1 s by default: too short on a busy
        # machine)
        "object": "container_update_timeout = 20\n",
        # the same for a container's line in the account (ListBuckets)
        "container": "node_timeout = 20\nconn_timeout = 5\n",
        "account": "",
    }[kind]
    return f"""[DEFAULT]
bind_ip = 127.0.0.1
bind_port = {port}
workers = 0
user = {user}
swift_dir = {d}
devices = {d}/devices
mount_check = false
recon_cache_path = {d}/cache
log_name = {kind}-server
# a nearly full disk on a test machine is no reason to refuse writes
fallocate_reserve = 0

[pipeline:main]
pipeline = healthcheck {kind}-server

[app:{kind}-server]
use = egg:swift#{kind}
{extra}
[filter:healthcheck]
use = egg:swift#healthcheck
"""


def _proxy_conf(port, user, d, key, region, min_segment_size, host):
    return f"""[DEFAULT]
bind_ip = {host}
bind_port = {port}
workers = 0
user = {user}
swift_dir = {d}
log_name = proxy-server

[pipeline:main]
# s3api before tempauth (it turns an S3 signature into what tempauth
# checks), slo after s3api (multipart uploads are SLOs); the cache is the
# launcher's null cache, tempauth refuses to run without one
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo versioned_writes proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
# the account test is made by the first request that needs it
account_autocreate = true
node_timeout = 20
conn_timeout = 5

[filter:s3api]
use = egg:swift#s3api
# the region in the SigV4 credential scope, and GET ?location
location = {region}
# ACLs kept as Swift's, not s3api's own sysmeta: the one user is the
# account's admin and owns everything; nothing here tests S3 ACLs
s3_acl = false
# ListBuckets lists every bucket of the account (meaningful only with s3_acl)
check_bucket_owner = false
# initiate, upload part, list parts, complete, abort, list uploads
allow_multipart_uploads = true
# AWS: every part but the last at least 5 MiB
min_segment_size = {min_segment_size}
# AWS allows 10000 parts (s3api's default is 1000; slo below matches)
max_upload_part_num = 10000
max_parts_listing = 1000
dns_compliant_bucket_names = true
allowable_clock_skew = 900

[filter:tempauth]
use = egg:swift#tempauth
# S3 access key "{ACCOUNT}:{USER}", secret the key
user_{ACCOUNT}_{USER} = {key} .admin

[filter:cache]
paste.filter_factory = labserver:null_cache_factory

[filter:catch_errors]
use = egg:swift#catch_errors

[filter:gatekeeper]
use = egg:swift#gatekeeper

[filter:healthcheck]
use = egg:swift#healthcheck

[filter:proxy-logging]
use = egg:swift#proxy_logging

[filter:listing_formats]
use = egg:swift#listing_formats

[filter:copy]
use = egg:swift#copy

[filter:slo]
use = egg:swift#slo
max_manifest_segments = 10000

[filter:dlo]
use = egg:swift#dlo

# S3 versioning's backing; the proxy would add it itself
[filter:versioned_writes]
use = egg:swift#versioned_writes
"""


# ---- helpers ----------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _tail(path, n=30):
    return "\n".join(_read(path).splitlines()[-n:])


def _blocked_for(path, uid, gid):
    """The first directory above path (path included) that uid, in group
    gid, cannot traverse; None when it reaches path."""
    p = os.path.abspath(path)
    chain = [p]
    while p != "/":
        p = os.path.dirname(p)
        chain.append(p)
    for d in reversed(chain):
        st = os.stat(d)
        if st.st_uid == uid:
            ok = st.st_mode & 0o100
        elif st.st_gid == gid:
            ok = st.st_mode & 0o010
        else:
            ok = st.st_mode & 0o001
        if not ok:
            return d
    return None


def _check_xattrs(d):
    f = os.path.join(d, ".xattr-check")
    with open(f, "w"):
        pass
    try:
        os.setxattr(f, "user.s3lab", b"1")
    except OSError as e:
        raise LabError(f"s3lab: {d} has no user xattrs ({e.strerror}), which Swift's object "
                       "server keeps its metadata in: give a directory on ext4, btrfs or XFS")
    finally:
        os.unlink(f)


def _uri_encode(s, safe):
    # SigV4's encoding: everything but A-Z a-z 0-9 - _ . ~ (and what safe adds)
    return urllib.parse.quote(s, safe=safe)


def sigv4_headers(method, host, path, query, headers, payload_hash, access_key, secret_key,
                  region, now=None):
    """The headers that sign a request with AWS Signature V4 (service s3):
    the given headers plus host, x-amz-date, x-amz-content-sha256 (the
    payload_hash as given, so a test can give a wrong one) and
    authorization. query: (name, value) pairs, sent as canonical_query()."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    scope = f"{amz_date[:8]}/{region}/s3/aws4_request"
    h = {k.lower(): " ".join(str(v).split()) for k, v in headers.items()}
    h["host"] = host
    h["x-amz-date"] = amz_date
    h["x-amz-content-sha256"] = payload_hash
    signed = sorted(h)
    canonical = "\n".join([
        method,
        _uri_encode(path, "/-_.~"),
        canonical_query(query),
        "".join(f"{k}:{h[k]}\n" for k in signed),
        ";".join(signed),
        payload_hash,
    ])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret_key).encode()
    for part in (amz_date[:8], region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    h["authorization"] = (f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
                          f"SignedHeaders={';'.join(signed)}, Signature={sig}")
    return h


def canonical_query(query):
    """SigV4's canonical query string: pairs sorted, each name and value
    encoded, "=" also after an empty value (uploads=)."""
    return "&".join(f"{_uri_encode(k, '-_.~')}={_uri_encode(v, '-_.~')}"
                    for k, v in sorted((str(k), str(v)) for k, v in (query or [])))


class S3Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # names lower-case
        self.body = body

    @property
    def error_code(self):
        """The <Code> of an S3 error document, or None."""
        m = re.search(rb"<Code>([^<]*)</Code>", self.body)
        return m.group(1).decode() if m else None

    def __repr__(self):
        return f"<S3Response {self.status} {self.body[:300]!r}>"


# ---- the lab ----------------------------------------------------------------

class SwiftS3:
    """A Swift with s3api on 127.0.0.1 in a temporary directory under
    base_dir (tempfile's default if None). timeout: how long start() and
    restart_proxy() wait for the servers to answer. host: the address the
    S3 endpoint (the proxy) listens on, e.g. a test bridge's so that nodes
    in network namespaces reach it; the other servers stay on loopback."""

    def __init__(self, base_dir=None, timeout=START_TIMEOUT, region=REGION,
                 min_segment_size=MIN_SEGMENT_SIZE, host="127.0.0.1"):
        self.host = host
        self.base_dir = base_dir
        self.timeout = timeout
        self.region = region
        self.min_segment_size = min_segment_size
        self.dir = None
        self.ports = {}
        self.procs = {}
        self.access_key = f"{ACCOUNT}:{USER}"
        self.secret_key = None
        self.port = None
        self.endpoint = None
        self.started_in = None  # seconds start() took

    # -- start and stop --

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        if self.dir is not None:
            raise LabError("s3lab: already started")
        t0 = time.monotonic()
        if not os.path.exists(SWIFT_S3API):
            raise LabError(f"s3lab: {SWIFT_S3API} not found: install python3-swift "
                           "(scripts/deps.sh --test)")
        if not os.access(SWIFT_PYTHON, os.X_OK):
            raise LabError(f"s3lab: {SWIFT_PYTHON} not found (the python3 python3-swift is for)")
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("swift")
            except KeyError:
                raise LabError("s3lab: running as root, and there is no user swift to run the "
                               "servers as (python3-swift's postinst makes it)") from None
        else:
            pw = pwd.getpwuid(os.geteuid())
        self.dir = tempfile.mkdtemp(prefix="airlock-s3lab-", dir=self.base_dir)
        try:
            self._setup(pw)
            for kind in SERVERS:
                self._spawn(kind)
            self._wait_ready(SERVERS, time.monotonic() + self.timeout)
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - t0
        return self

    def _setup(self, pw):
        d = self.dir
        # the directory itself becomes theirs below; the ones above must let them through
        blocked = (_blocked_for(os.path.dirname(d), pw.pw_uid, pw.pw_gid)
                   if os.geteuid() == 0 else None)
        if blocked:
            raise LabError(f"s3lab: the user {pw.pw_name} the servers run as cannot reach {d} "
                           f"({blocked} is closed to it): give a base_dir under /tmp or /srv")
        _check_xattrs(d)
        self.secret_key = secrets.token_hex(20)
        self.ports = {k: free_port() for k in SERVERS}
        while len(set(self.ports.values())) < len(SERVERS):
            self.ports = {k: free_port() for k in SERVERS}
        self.port = self.ports["proxy"]
        self.endpoint = f"http://{self.host}:{self.port}"
        for sub in ("devices/d1", "cache"):
            os.makedirs(os.path.join(d, sub))
        files = {
            "labserver.py": LAUNCHER,
            "swift.conf": _swift_conf(secrets.token_hex(16), secrets.token_hex(16)),
            "proxy-server.conf": _proxy_conf(self.port, pw.pw_name, d, self.secret_key,
                                             self.region, self.min_segment_size, self.host),
        }
        for kind in BACKENDS:
            files[f"{kind}-server.conf"] = _backend_conf(kind, self.ports[kind], pw.pw_name, d)
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        for kind in SERVERS + ("rings",):
            open(os.path.join(d, f"{kind}.log"), "w").close()
        if os.geteuid() == 0:
            for root, dirs, names in os.walk(d):
                for n in [root] + [os.path.join(root, x) for x in dirs + names]:
                    os.chown(n, pw.pw_uid, pw.pw_gid)
        # the rings: one replica, one device, 2^6 partitions
        args = []
        for kind in BACKENDS:
            builder = os.path.join(d, f"{kind}.builder")
            args += [builder, "create", "6", "1", "1", "--",
                     builder, "add", "--region", "1", "--zone", "1", "--ip", "127.0.0.1",
                     "--port", str(self.ports[kind]), "--device", "d1", "--weight", "100", "--",
                     builder, "rebalance", "--"]
        log = os.path.join(d, "rings.log")
        with open(log, "ab") as out:
            r = subprocess.run([SWIFT_PYTHON, os.path.join(d, "labserver.py"), "rings", d, log]
                               + args, stdout=out, stderr=subprocess.STDOUT, cwd=d,
                               timeout=self.timeout)
        if r.returncode != 0:
            raise LabError(f"s3lab: building the rings failed (exit status {r.returncode}):\n"
                           + _tail(log))

    def _spawn(self, kind):
        d = self.dir
        log = os.path.join(d, f"{kind}.log")
        with open(log, "ab") as out:
            self.procs[kind] = subprocess.Popen(
                [SWIFT_PYTHON, os.path.join(d, "labserver.py"), f"{kind}-server", d, log,
                 os.path.join(d, f"{kind}-server.conf")],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=d,
                start_new_session=True)

    def _logs(self, kinds=SERVERS):
        return "\n".join(f"--- {k}.log (last lines) ---\n"
                         + _tail(os.path.join(self.dir, k + ".log")) for k in kinds)

    def _wait_ready(self, kinds, deadline):
        """Polls each server's /healthcheck, then a signed ListBuckets
        through the proxy, until they answer or the deadline passes."""
        pending = list(kinds)
        last = {}
        while True:
            for kind in list(pending):
                p = self.procs[kind]
                if p.poll() is not None:
                    raise LabError(f"s3lab: the {kind} server exited (status {p.returncode}) "
                                   f"while starting\n" + self._logs())
                try:
                    c = http.client.HTTPConnection(self.host if kind == "proxy" else "127.0.0.1",
                                                   self.ports[kind], timeout=2)
                    c.request("GET", "/healthcheck")
                    status = c.getresponse().status
                    c.close()
                    last[kind] = f"healthcheck {status}"
                    if status == 200:
                        pending.remove(kind)
                except OSError as e:
                    last[kind] = f"healthcheck: {e}"
            if not pending:
                try:
                    r = self.request("GET", "/")
                    if r.status == 200:
                        return
                    last["s3"] = f"ListBuckets {r.status} {r.body[:200]!r}"
                except OSError as e:
                    last["s3"] = f"ListBuckets: {e}"
            if time.monotonic() >= deadline:
                raise LabError(f"s3lab: the servers did not answer within {self.timeout:g}s "
                               f"({'; '.join(f'{k}: {v}' for k, v in last.items())})\n"
                               + self._logs())
            time.sleep(0.05)

    def _terminate(self, kinds, sig=signal.SIGTERM):
        """Signals the servers' process groups (each is a session of its
        own), then SIGKILL to what is left after STOP_TIMEOUT; reaps them.
        The servers that would not go on SIGTERM."""
        procs = [(k, self.procs[k]) for k in kinds if k in self.procs]
        for _, p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
        stubborn = []
        deadline = time.monotonic() + STOP_TIMEOUT
        for k, p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stubborn.append(k)
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        # (with workers = 0 a server forks nothing: its group is itself)
        for k, _ in procs:
            del self.procs[k]
        return stubborn

    def stop(self):
        """Stops every server (SIGTERM, SIGKILL after STOP_TIMEOUT) and
        removes the directory. Idempotent."""
        try:
            self._terminate(list(self.procs))
        finally:
            if self.dir is not None:
                shutil.rmtree(self.dir, ignore_errors=True)
                if os.path.exists(self.dir):
                    raise LabError(f"s3lab: could not remove {self.dir}")
                self.dir = None

    def pids(self):
        """The servers' pids (the ones running now)."""
        return [p.pid for p in self.procs.values() if p.poll() is None]

    # -- the proxy, killed and back --

    def kill_proxy(self):
        """SIGKILL to the proxy (connections through it break mid-request);
        the backends and the data stay."""
        self._terminate(["proxy"], signal.SIGKILL)

    def restart_proxy(self):
        """Starts the proxy again on the same port (after kill_proxy(), or
        stopping it first) and waits until it answers."""
        if "proxy" in self.procs:
            self._terminate(["proxy"])
        self._spawn("proxy")
        try:
            self._wait_ready(["proxy"], time.monotonic() + self.timeout)
        except LabError:
            self._terminate(["proxy"])
            raise

    # -- S3 --

    def request(self, method, path, query=None, headers=None, body=b"", payload_hash=None,
                access_key=None, secret_key=None, timeout=60):
        """One SigV4-signed request to the proxy (Python's own signing,
        independent of curl's): path unencoded ("/bucket/key"), query
        (name, value) pairs or a dict. payload_hash, access_key and
        secret_key override what would be right, for refusal tests."""
        if isinstance(query, dict):
            query = list(query.items())
        if payload_hash is None:
            payload_hash = hashlib.sha256(body).hexdigest()
        h = sigv4_headers(method, f"{self.host}:{self.port}", path, query, headers or {},
                          payload_hash, access_key or self.access_key,
                          secret_key or self.secret_key, self.region)
        target = _uri_encode(path, "/-_.~")
        q = canonical_query(query)
        if q:
            target += "?" + q
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            c.request(method, target, body=body, headers=h)
            r = c.getresponse()
            return S3Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            c.close()

    def make_bucket(self, name):
        r = self.request("PUT", f"/{name}")
        if r.status != 200:
            raise LabError(f"s3lab: PUT bucket {name}: {r.status} {r.body[:500]!r}")
        return name

    def write_key_files(self, d, owner=None):
        """The access and the secret key, each alone in a file of its own
        (mode 0600, owned by the caller or by the user named owner, no
        newline) in d: (access_path, secret_path)."""
        paths = []
        pw = pwd.getpwnam(owner) if owner else None
        for name, value in (("s3-access-key", self.access_key), ("s3-secret-key", self.secret_key)):
            path = os.path.join(d, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as f:
                os.fchmod(f.fileno(), 0o600)
                if pw:
                    os.fchown(f.fileno(), pw.pw_uid, pw.pw_gid)
                f.write(value)  # no newline: the key is the file's whole content
            paths.append(path)
        return tuple(paths)


# ---- run mode ---------------------------------------------------------------

def _run(argv):
    usage = "usage: s3lab.py run [--dir BASE_DIR] -- CMD [ARG...]"
    base = None
    args = list(argv)
    if args[:1] == ["--dir"] and len(args) >= 2:
        base, args = args[1], args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print(usage, file=sys.stderr)
        return 2

    child = None
    got = []

    def on_signal(signum, frame):
        got.append(signum)
        if child is not None and child.poll() is None:
            child.send_signal(signum)
        else:
            raise SystemExit(128 + signum)

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    lab = SwiftS3(base_dir=base)
    try:
        lab.start()
        bucket = lab.make_bucket("airlock-test-" + secrets.token_hex(4))
        keys = os.path.join(lab.dir, "keys")
        os.mkdir(keys, 0o700)
        ak, sk = lab.write_key_files(keys)
        env = dict(os.environ,
                   AIRLOCK_TEST_S3_ENDPOINT=lab.endpoint,
                   AIRLOCK_TEST_S3_REGION=lab.region,
                   AIRLOCK_TEST_S3_BUCKET=bucket,
                   AIRLOCK_TEST_S3_ACCESS_KEY_FILE=ak,
                   AIRLOCK_TEST_S3_SECRET_KEY_FILE=sk)
        try:
            child = subprocess.Popen(args, env=env)
        except OSError as e:
            print(f"s3lab: {args[0]}: {e.strerror}", file=sys.stderr)
            return 127
        while True:
            try:
                status = child.wait()
                break
            except InterruptedError:
                continue
        if got:
            return 128 + got[0]
        return status if status >= 0 else 128 - status
    except LabError as e:
        print(e, file=sys.stderr)
        return 1
    finally:
        try:
            lab.stop()
        except LabError as e:
            print(e, file=sys.stderr)


def main(argv):
    if len(argv) >= 1 and argv[0] == "run":
        return _run(argv[1:])
    print("usage: s3lab.py run [--dir BASE_DIR] -- CMD [ARG...]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
