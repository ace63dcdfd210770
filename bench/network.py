#!/usr/bin/env python3
"""Egress benchmark: what the gateway costs a sandbox's connections.

  sudo python3 bench/network.py [--n 50] [--mib 100] [--templates-dir DIR] [--work-dir DIR]

Starts its own Airlock (a temporary data dir; templates from --templates-dir
or built) and its own test internet (tests/netlab.py: an origin with HTTP and
HTTPS, nothing leaves the machine). Inside a python sandbox it times, N times
each, a TCP connect plus one HTTP request, a TLS handshake, and once a --mib
MiB download; under allow-all (decided by address, TLS passed through) and
under an allowlist (the gateway reads Host, and terminates TLS: the handshake
is the gateway's with the guest plus its own with the origin). The raw
baseline is the same script run in the gateway's own network namespace,
straight to the origin, in the same run: the difference is the VM (TCG here)
plus the gateway. The guest's loopback download says what the VM alone
manages."""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import netlab  # noqa: E402

BUILD = os.environ.get("AIRLOCK_BUILD_DIR", os.path.join(os.path.dirname(HERE), "build"))

# The download both probes time: /big.bin from addr:port, with Host.
DOWNLOAD = r"""
import socket, time
def download(addr, port, host):
    t = time.perf_counter()
    s = socket.create_connection((addr, port), timeout=60)
    s.sendall(f"GET /big.bin HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    got = 0
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        got += len(b)
    return got, time.perf_counter() - t
"""

PROBE = DOWNLOAD + r"""
import json, socket, ssl, statistics, sys, time
host, n, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
addr = socket.gethostbyname(host)
def pct(xs, p):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(p * len(xs)))]
out = {}
tcp = []
for _ in range(n):
    t = time.perf_counter()
    s = socket.create_connection((addr, 80), timeout=10)
    s.sendall(f"GET /hello.txt HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    while s.recv(65536):
        pass
    s.close()
    tcp.append((time.perf_counter() - t) * 1000)
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
tls = []
for _ in range(n):
    t = time.perf_counter()
    s = ctx.wrap_socket(socket.create_connection((addr, 443), timeout=10), server_hostname=host)
    s.close()
    tls.append((time.perf_counter() - t) * 1000)
got, dl = download(addr, 80, host)
for k, xs in (("tcp_request_ms", tcp), ("tls_handshake_ms", tls)):
    out[k] = {"p50": statistics.median(xs), "p90": pct(xs, 0.9), "max": max(xs)}
out["download_mib_s"] = got / (1 << 20) / dl
out["download_bytes"] = got
print(json.dumps(out))
"""

# The guest's own ceiling: a --mib MiB download from a server on its loopback.
LOOPBACK = DOWNLOAD + r"""
import http.server, json, os, socket, sys, threading, time
mib = int(sys.argv[1])
os.makedirs("/tmp/lb", exist_ok=True)
with open("/tmp/lb/big.bin", "wb") as f:
    f.write(os.urandom(mib << 20))
os.chdir("/tmp/lb")
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 8099), http.server.SimpleHTTPRequestHandler)
srv.RequestHandlerClass.log_message = lambda *a: None
threading.Thread(target=srv.serve_forever, daemon=True).start()
got, dl = download("127.0.0.1", 8099, "x")
print(json.dumps({"download_mib_s": got / (1 << 20) / dl}))
"""


def api(port, token, method, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read() or b"null")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--mib", type=int, default=100)
    ap.add_argument("--templates-dir", default=None, help="built templates to reuse (else they are built)")
    ap.add_argument("--work-dir", default=None,
                    help="where the data dir goes (reflink-capable, or every create copies the rootfs)")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="airlock-bench-net-", dir=os.path.abspath(a.work_dir) if a.work_dir else None)
    os.chmod(work, 0o711)  # the node's and the VMs' users pass through to the data dir
    data = os.path.join(work, "data")
    proc = None
    try:
        with netlab.Internet(work) as net:
            with open(os.path.join(net.www, "big.bin"), "wb") as f:
                f.write(os.urandom(a.mib << 20))
            probe = os.path.join(work, "probe.py")
            with open(probe, "w") as f:
                f.write(PROBE)
            # the raw baseline: from the gateway's namespace straight to the origin
            base = json.loads(subprocess.run(
                ["ip", "netns", "exec", net.egress, sys.executable, probe, netlab.ORIGIN, str(a.n), str(a.mib)],
                check=True, capture_output=True, text=True).stdout)
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            env = dict(os.environ, AIRLOCK_PREBUILD="python", AIRLOCK_PREBUILD_BACKGROUND="", AIRLOCK_POOL_SIZE="0", **net.env())
            if a.templates_dir:  # its templates trust the egress CA beside them
                env["AIRLOCK_TEMPLATES_DIR"] = a.templates_dir
                env["AIRLOCK_EGRESS_CA_DIR"] = os.path.join(os.path.dirname(os.path.abspath(a.templates_dir)),
                                                            "egress-ca")
            log = open(os.path.join(work, "airlock.log"), "wb")
            proc = subprocess.Popen([os.path.join(BUILD, "src", "daemon", "airlockd"), "--data-dir", data,
                                     "--listen", f"127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)
            deadline = time.monotonic() + 1800
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/health", timeout=5) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    with open(log.name, errors="replace") as f:
                        tail = "".join(f.readlines()[-20:])
                    raise SystemExit(f"airlockd did not become ready; its log ends:\n{tail}")
                time.sleep(0.5)
            token = open(os.path.join(data, "control", "admin.token")).read().strip()
            results = {"direct (host namespace, no VM)": base}
            for label, policy in (("allow-all (by address)", {"mode": "allow-all"}),
                                  ("allowlist (Host read, TLS terminated)", {"allow": [{"host": "a.test"}]})):
                sbx = api(port, token, "POST", "/v1/sandboxes", {"template": "python", "network": policy})["id"]
                host = "a.test"
                req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/sandboxes/{sbx}/files?path=/root/probe.py",
                                             method="PUT", data=PROBE.encode(),
                                             headers={"Authorization": f"Bearer {token}"})
                urllib.request.urlopen(req, timeout=60).read()
                out = api(port, token, "POST", f"/v1/sandboxes/{sbx}/exec",
                          {"cmd": ["python3", "/root/probe.py", host, str(a.n), str(a.mib)], "timeout_s": 600})
                if out["exit_code"] != 0:
                    raise SystemExit(f"probe failed in the sandbox: {out['stderr']}")
                results[label] = json.loads(out["stdout"])
                if label.startswith("allow-all"):
                    # the VM alone: the same download over the guest's loopback
                    out = api(port, token, "POST", f"/v1/sandboxes/{sbx}/exec",
                              {"cmd": ["python3", "-c", LOOPBACK, str(a.mib)], "timeout_s": 600})
                    if out["exit_code"] != 0:
                        raise SystemExit(f"loopback probe failed in the sandbox: {out['stderr']}")
                    loopback = json.loads(out["stdout"])["download_mib_s"]
                api(port, token, "DELETE", f"/v1/sandboxes/{sbx}")
            b = results["direct (host namespace, no VM)"]
            print(f"n={a.n}, download {a.mib} MiB")
            print(f"{'path':34} {'TCP+request p50/p90 ms':>24} {'TLS handshake p50/p90 ms':>26} {'download MiB/s':>15}")
            for label, r in results.items():
                t, s = r["tcp_request_ms"], r["tls_handshake_ms"]
                print(f"{label:34} {t['p50']:10.2f} / {t['p90']:8.2f}   {s['p50']:10.2f} / {s['p90']:8.2f}  "
                      f"{r['download_mib_s']:10.1f} ({r['download_mib_s'] / b['download_mib_s'] * 100:.0f} %)")
            print(f"{'guest loopback (the VM alone)':34} {'':>24} {'':>26} {loopback:10.1f} "
                  f"({loopback / b['download_mib_s'] * 100:.0f} %)")
            for label, r in results.items():
                if r is b:
                    continue
                print(f"added over direct, {label}: TCP+request p50 "
                      f"{r['tcp_request_ms']['p50'] - b['tcp_request_ms']['p50']:.2f} ms, TLS p50 "
                      f"{r['tls_handshake_ms']['p50'] - b['tls_handshake_ms']['p50']:.2f} ms")
    finally:
        if proc and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
