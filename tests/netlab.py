"""A test "internet" on this machine, for the network tests (docs/testing.md).

Two network namespaces the test makes and removes:

  egress (EGRESS_ADDR)  where airlock-gw runs (AIRLOCK_EGRESS_NETNS): its
                        outbound connections leave from here
  inet                  the hosts: ORIGIN (HTTP :80, HTTPS :443 with a
                        certificate from a test CA, /echo reflects request
                        headers), SINK (records every connection, answers
                        nothing), RESOLVER (dnsmasq, authoritative for the
                        test zones, logging every query it gets)

joined by a veth pair, in 198.18.0.0/15 (the benchmarking range: not in the
platform deny set). Nothing leaves the machine.

Zones: a.test and its subdomains -> ORIGIN; e.test -> SINK ("evil");
internal.test -> 10.0.0.5 and meta.test -> 169.254.169.254 (an upstream
that rebinds to internal addresses); registry.test and
blocked-registry.test -> REGISTRY, an OCI registry (Debian's
docker-registry, HTTPS with the test CA) that start_registry() starts and
fills: the two names differ only in what a policy allows;
private-registry.test -> PRIVATE_REGISTRY, one that start_registry(...,
private=(USER, PASSWORD)) starts with HTTP basic auth (htpasswd).
"""

import datetime
import json
import os
import re
import subprocess
import sys
import time
import warnings

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

HERE = os.path.dirname(os.path.abspath(__file__))
EGRESS_ADDR = "198.18.0.1"
ORIGIN = "198.18.0.10"
RESOLVER = "198.18.0.53"
SINK = "198.18.0.66"
REGISTRY = "198.18.0.20"
PRIVATE_REGISTRY = "198.18.0.21"
ZONES = {"a.test": ORIGIN, "e.test": SINK, "internal.test": "10.0.0.5", "meta.test": "169.254.169.254",
         "registry.test": REGISTRY, "blocked-registry.test": REGISTRY, "private-registry.test": PRIVATE_REGISTRY}
# alias.test is a CNAME of sink.evil.test, which is SINK
CNAMES = {"alias.test": "sink.evil.test"}
# a.test.evil.test: a lookalike of a.test that an origin serves (its
# certificate names it), so a request to it really goes out
HOST_RECORDS = {"sink.evil.test": SINK, "a.test.evil.test": ORIGIN}
_seq = 0


def _run(*argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()}")
    return r.stdout


def _cert(names, ca_key=None, ca_cert=None):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0] if names else "airlock test CA")])
    b = (x509.CertificateBuilder().subject_name(subject)
         .issuer_name(ca_cert.subject if ca_cert else subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(hours=1))
         .not_valid_after(now + datetime.timedelta(days=2)))
    if ca_cert:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
    else:
        b = b.add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
    cert = b.sign(ca_key or key, hashes.SHA256())
    return key, cert


def _write_pem(path, key=None, cert=None):
    with open(path, "wb") as f:
        if cert is not None:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
        if key is not None:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))


class Internet:
    def __init__(self, workdir):
        global _seq
        _seq += 1
        tag = f"{os.getpid()}-{_seq}"
        self.inet = f"alk-inet-{tag}"
        self.egress = f"alk-egress-{tag}"
        self.dir = workdir
        self.procs = []
        self.sink_log = os.path.join(workdir, "sink.log")
        self.origin_log = os.path.join(workdir, "origin.log")
        self.capture_log = os.path.join(workdir, "capture.log")
        self.dns_log = os.path.join(workdir, "dns.log")
        self.ca_path = os.path.join(workdir, "ca.pem")
        self.www = os.path.join(workdir, "www")

    def env(self):
        """What Airlock needs to use this internet."""
        return {"AIRLOCK_EGRESS_NETNS": self.egress, "AIRLOCK_DNS_UPSTREAM": RESOLVER,
                "AIRLOCK_UPSTREAM_CA": self.ca_path}

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self):
        _run("ip", "netns", "add", self.inet)
        _run("ip", "netns", "add", self.egress)
        for ns in (self.inet, self.egress):
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "-n", self.egress, "link", "add", "eg0", "type", "veth", "peer", "name", "inet0",
             "netns", self.inet)
        _run("ip", "-n", self.egress, "addr", "add", f"{EGRESS_ADDR}/24", "dev", "eg0")
        _run("ip", "-n", self.egress, "link", "set", "eg0", "up")
        for a in (ORIGIN, RESOLVER, SINK):
            _run("ip", "-n", self.inet, "addr", "add", f"{a}/24", "dev", "inet0")
        _run("ip", "-n", self.inet, "link", "set", "inet0", "up")

        os.makedirs(self.www, exist_ok=True)
        with open(os.path.join(self.www, "hello.txt"), "w") as f:
            f.write("hello from the test internet\n")
        ca_key, ca_cert = _cert([])
        self._ca = (ca_key, ca_cert)
        _write_pem(self.ca_path, cert=ca_cert)
        key, cert = _cert(["a.test", "www.a.test", "a.test.evil.test"], ca_key, ca_cert)
        tls = os.path.join(self.dir, "origin.pem")
        _write_pem(tls, key=key, cert=cert)

        dns = [f"--address=/{z}/{a}" for z, a in ZONES.items()]
        dns += [f"--host-record={n},{a}" for n, a in HOST_RECORDS.items()]
        dns += [f"--cname={n},{t}" for n, t in CNAMES.items()]
        self.procs.append(subprocess.Popen(
            ["ip", "netns", "exec", self.inet, "dnsmasq", "--no-daemon", "--no-resolv", "--no-hosts",
             f"--listen-address={RESOLVER}", "--bind-interfaces", "--log-queries", "--pid-file=",
             "--user=root", f"--log-facility={self.dns_log}", *dns],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        srv = subprocess.Popen(
            ["ip", "netns", "exec", self.inet, sys.executable, os.path.join(HERE, "netlab_servers.py"),
             "--origin", ORIGIN, "--www", self.www, "--tls-cert", tls, "--tls-key", tls, "--sink", SINK,
             "--sink-log", self.sink_log, "--origin-log", self.origin_log, "--iface", "inet0",
             "--gateway", EGRESS_ADDR, "--resolver", RESOLVER, "--capture-log", self.capture_log],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.procs.append(srv)
        if srv.stdout.readline().strip() != "ready":
            raise RuntimeError("the test internet's servers did not start")
        deadline = time.monotonic() + 10
        while "started" not in self._read(self.dns_log):
            if time.monotonic() > deadline:
                raise RuntimeError("dnsmasq did not start")
            time.sleep(0.05)

    def start_registry(self, images, private=None):
        """Starts an OCI registry and pushes images into it: {"NAME:TAG":
        "shell command"}, each a busybox image whose command that is (built
        with umoci, pushed with skopeo from the test internet's namespace).
        The registry answers HTTPS at REGISTRY:443 (a certificate of the
        test CA for registry.test and blocked-registry.test), or with
        private=(USER, PASSWORD) at PRIVATE_REGISTRY:443
        (private-registry.test) behind HTTP basic auth. Stopped by close()."""
        addr, names = (PRIVATE_REGISTRY, ["private-registry.test"]) if private else \
            (REGISTRY, ["registry.test", "blocked-registry.test"])
        _run("ip", "-n", self.inet, "addr", "add", f"{addr}/24", "dev", "inet0")
        reg = os.path.join(self.dir, "registry-" + names[0])
        os.makedirs(os.path.join(reg, "data"))
        key, cert = _cert(names, *self._ca)
        tls = os.path.join(reg, "tls.pem")
        _write_pem(tls, key=key, cert=cert)
        auth = ""
        if private:
            with warnings.catch_warnings():  # crypt: libxcrypt's bcrypt, which the registry's htpasswd wants
                warnings.simplefilter("ignore", DeprecationWarning)
                import crypt
            with open(os.path.join(reg, "htpasswd"), "w") as f:
                f.write(f"{private[0]}:{crypt.crypt(private[1], crypt.mksalt(crypt.METHOD_BLOWFISH))}\n")
            auth = f"auth:\n  htpasswd:\n    realm: test\n    path: {reg}/htpasswd\n"
        with open(os.path.join(reg, "config.yml"), "w") as f:
            f.write(f"version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {reg}/data\n"
                    f"http:\n  addr: {addr}:443\n  tls:\n    certificate: {tls}\n    key: {tls}\n{auth}")
        log = open(os.path.join(reg, "registry.log"), "ab")
        self.procs.append(subprocess.Popen(["ip", "netns", "exec", self.inet, "docker-registry", "serve",
                                            os.path.join(reg, "config.yml")], stdout=log, stderr=log))
        log.close()
        creds = ["--user", f"{private[0]}:{private[1]}"] if private else []
        deadline = time.monotonic() + 30
        while subprocess.run(["ip", "netns", "exec", self.inet, "curl", "-sf", "--cacert", self.ca_path, *creds,
                              "--resolve", f"{names[0]}:443:{addr}", f"https://{names[0]}/v2/"],
                             capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the registry did not start: {self._read(os.path.join(reg, 'registry.log'))}")
            time.sleep(0.1)
        for ref, cmd in images.items():
            self._push(reg, addr, ref, cmd, private)

    def _push(self, reg, addr, ref, cmd, private):
        layout = os.path.join(reg, "oci-" + ref.replace(":", "-").replace("/", "-"))
        bundle = layout + "-bundle"
        _run("umoci", "init", "--layout", layout)
        _run("umoci", "new", "--image", f"{layout}:img")
        _run("umoci", "unpack", "--image", f"{layout}:img", bundle)
        bindir = os.path.join(bundle, "rootfs", "bin")
        os.makedirs(bindir, exist_ok=True)
        _run("cp", "/bin/busybox", os.path.join(bindir, "busybox"))
        for tool in ("sh", "echo", "sleep", "date", "cat", "wget", "ls"):
            os.symlink("busybox", os.path.join(bindir, tool))
        _run("umoci", "repack", "--image", f"{layout}:img", bundle)
        _run("umoci", "config", "--image", f"{layout}:img", "--config.cmd", "/bin/sh", "--config.cmd", "-c",
             "--config.cmd", cmd)
        creds = ["--dest-creds", f"{private[0]}:{private[1]}"] if private else []
        _run("ip", "netns", "exec", self.inet, "skopeo", "--insecure-policy", "copy", "--quiet", *creds,
             "--dest-tls-verify=false", f"oci:{layout}:img", f"docker://{addr}/{ref}")

    @staticmethod
    def _read(path):
        try:
            with open(path) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def sink_hits(self):
        """The connections SINK received: [{port, peer, data}]."""
        return [json.loads(line) for line in self._read(self.sink_log).splitlines() if line]

    def captured(self):
        """Packets that reached the test internet other than the gateway's
        TCP and DNS (ICMP, other UDP, IPv6, forged sources): [{proto, src,
        dst, dport} or {ipv6, ...}]."""
        return [json.loads(line) for line in self._read(self.capture_log).splitlines() if line]

    def leak_from_egress(self):
        """What a leak would look like: a datagram to SINK:443 and a ping
        to SINK, sent from the gateway's own namespace (where anything
        leaving the sandboxes would come from). The observers' control:
        returns once the capture has both."""
        before = len(self.captured())
        _run("ip", "netns", "exec", self.egress, sys.executable, "-c",
             f"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'leak', ('{SINK}', 443))")
        _run("ip", "netns", "exec", self.egress, "busybox", "ping", "-c", "1", "-W", "2", SINK)
        deadline = time.monotonic() + 10
        while True:
            seen = self.captured()[before:]
            if {p.get("proto") for p in seen} >= {1, 17}:
                return seen
            if time.monotonic() > deadline:
                raise AssertionError(f"the capture missed a leak sent on purpose: {seen}")
            time.sleep(0.05)

    def origin_hits(self):
        """The requests ORIGIN received, as they arrived: [{method, path,
        port, headers}]."""
        return [json.loads(line) for line in self._read(self.origin_log).splitlines() if line]

    def dns_queries(self):
        """The names the resolver was asked for."""
        # "Dec  1 15:07:29 dnsmasq[123]: query[A] a.test from 198.18.0.1"
        return [m.group(1) for m in re.finditer(r"query\[\w+\] (\S+) from ", self._read(self.dns_log))]

    def close(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
        for ns in (self.inet, self.egress):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


# ---- what a test does in a sandbox ----

HELLO = "hello from the test internet"


def sh(a, sid, script, timeout_s=30):
    out = a.exec(sid, ["sh", "-c", script], timeout_s=timeout_s)
    return out["exit_code"], out["stdout"] + out["stderr"]


def http_get(host, addr=None, path="/hello.txt"):
    """A shell line: one HTTP/1.0 GET through busybox nc (the minimal
    template has no curl), its output and then 'rc=N'."""
    return (f"printf 'GET {path} HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n' | nc -w 5 {addr or host} 80; "
            "echo rc=$?")


def net_log(a, sid):
    return a.api("GET", f"/v1/sandboxes/{sid}/network/log")["entries"]


def wait_log(a, sid, pred, what, timeout=10):
    deadline = time.monotonic() + timeout
    while True:
        entries = net_log(a, sid)
        if any(pred(e) for e in entries):
            return entries
        assert time.monotonic() < deadline, f"no network log entry {what}: {entries}"
        time.sleep(0.1)


@pytest.fixture
def internet(tmp_path):
    """A test internet for one test (import it into the test module)."""
    with Internet(str(tmp_path)) as net:
        yield net
