#!/usr/bin/env python3
"""The egress gateway alone: what airlock-gw adds to a connection, with no VM.

  sudo python3 bench/gateway.py [--n 200] [--mib 200]     (curl for the keep-alive part)

bench/network.py measures a sandbox, so its numbers hold the TCG guest as
well as the gateway. Here the guest is a network namespace wired the way
airlock-nodemgr wires a VM's (lib/vmnet): a veth named tap0 in a "VM"
namespace whose nftables redirect every TCP connection to a listener there,
the guest's end at 10.200.0.2 with the gateway as its resolver. The bench
makes the listener and the DNS socket in that namespace, starts airlock-gw
itself (in the test internet's egress namespace, tests/netlab.py) and hands
it the sockets as the node would (op attach, lib/mgr framing). The probe of
bench/network.py then runs natively in the guest namespace, and once straight
from the egress namespace to the origin: the raw baseline of the same run.
Under allow-all (by address, TLS passed through) and an allowlist (Host
read, TLS terminated). Then, under the allowlist, curl makes --n requests on
one kept-alive TLS connection, over HTTP/1.1 and over HTTP/2 (the gateway's
HTTP/2 front, which speaks HTTP/1.1 to the origin); the baseline is the same
HTTP/1.1 requests straight to the origin (it speaks no HTTP/2). The first
request of each run pays the handshakes and is left out."""

import argparse
import ctypes
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
import netlab  # noqa: E402
from network import PROBE  # noqa: E402

BUILD = os.environ.get("AIRLOCK_BUILD_DIR", os.path.join(os.path.dirname(HERE), "build"))
GW = os.path.join(BUILD, "src", "gw", "airlock-gw")
PROTO_MAGIC, PROTO_GW_REQUEST, PROTO_GW_REPLY = 0x314B4C41, 96, 97
CLONE_NEWNET = 0x40000000
RULES = """table inet bench {
  chain to_gateway {
    type nat hook prerouting priority dstnat; policy accept;
    iifname "tap0" meta l4proto tcp redirect to :15001
  }
}
"""


def run(*argv):
    subprocess.run(argv, check=True, capture_output=True)


def sockets_in(ns):
    """The gateway's TCP listener and DNS socket, made inside netns ns (a
    thread of our own joins it: setns changes the calling thread only)."""
    out = {}

    def make():
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            out["error"] = os.strerror(ctypes.get_errno())
            return
        os.close(fd)
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind(("0.0.0.0", 15001))
        tcp.listen(512)
        tcp.setblocking(False)
        dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        dns.bind(("10.200.0.1", 53))
        dns.setblocking(False)
        out["socks"] = (tcp, dns)

    t = threading.Thread(target=make)
    t.start()
    t.join()
    if "error" in out:
        raise SystemExit(f"setns {ns}: {out['error']}")
    return out["socks"]


def gw_call(path, req, fds=()):
    payload = json.dumps(req).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)  # our own listening socket accepts even when the gateway is gone
        s.connect(path)
        hdr = struct.pack("<IBBHII", PROTO_MAGIC, 1, PROTO_GW_REQUEST, 0, 0, len(payload))
        s.sendmsg([hdr + payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
                   if fds else [])
        data = b""
        while len(data) < 16 or len(data) < 16 + struct.unpack("<I", data[12:16])[0]:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    reply = json.loads(data[16:])
    if "error" in reply:
        raise SystemExit(f"airlock-gw refused {req['op']}: {reply['error']}")
    return reply


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def keepalive_in(ns, n, proto, cacert, extra=()):
    """n GETs of /hello.txt on one connection: p50/p90 of the 2nd..nth, in ms."""
    argv = ["ip", "netns", "exec", ns, "curl", "-sS", proto, "--cacert", cacert, *extra,
            "-w", "\nT %{time_total} %{num_connects} %{http_version}\n"] + ["https://a.test/hello.txt"] * n
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"curl in {ns} failed: {out.stderr[-2000:]}")
    rows = [ln.split()[1:] for ln in out.stdout.splitlines() if ln.startswith("T ")]
    if len(rows) != n or sum(int(c) for _, c, _ in rows) != 1:
        raise SystemExit(f"curl in {ns}: {len(rows)} requests, not all on one connection: {rows[:5]}")
    ms = [float(t) * 1000 for t, _, _ in rows[1:]]
    return {"p50": pct(ms, 0.5), "p90": pct(ms, 0.9), "version": rows[-1][2]}


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the cleanup runs on a kill too
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--mib", type=int, default=200)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="airlock-bench-gw-")
    tag = f"gwb{os.getpid()}"
    vm, guest = f"alk-vm-{tag}", f"alk-guest-{tag}"
    etc = f"/etc/netns/{guest}"
    gw = None
    made = []
    try:
        with netlab.Internet(work) as net:
            with open(os.path.join(net.www, "big.bin"), "wb") as f:
                f.write(os.urandom(a.mib << 20))
            probe = os.path.join(work, "probe.py")
            with open(probe, "w") as f:
                f.write(PROBE)
            for ns in (vm, guest):
                run("ip", "netns", "add", ns)
                made.append(ns)
                run("ip", "-n", ns, "link", "set", "lo", "up")
            run("ip", "-n", vm, "link", "add", "tap0", "type", "veth", "peer", "name", "eth0", "netns", guest)
            run("ip", "-n", vm, "addr", "add", "10.200.0.1/30", "dev", "tap0")
            run("ip", "-n", vm, "link", "set", "tap0", "up")
            run("ip", "-n", guest, "addr", "add", "10.200.0.2/30", "dev", "eth0")
            run("ip", "-n", guest, "link", "set", "eth0", "up")
            run("ip", "-n", guest, "route", "add", "default", "via", "10.200.0.1")
            subprocess.run(["ip", "netns", "exec", vm, "nft", "-f", "-"], input=RULES.encode(), check=True)
            os.makedirs(etc, exist_ok=True)
            with open(os.path.join(etc, "resolv.conf"), "w") as f:
                f.write("nameserver 10.200.0.1\n")
            tcp, dns = sockets_in(vm)

            ctl_path = os.path.join(work, "gw.sock")
            ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            ctl.bind(ctl_path)
            ctl.listen(16)
            ca_dir = os.path.join(work, "egress-ca")
            os.makedirs(ca_dir)
            ca_fd = os.open(net.ca_path, os.O_RDONLY)
            env = dict(os.environ, AIRLOCK_GW_LISTEN_FD=str(ctl.fileno()), AIRLOCK_GW_PEER_UID="0",
                       AIRLOCK_EGRESS_CA_DIR=ca_dir, AIRLOCK_DNS_UPSTREAM=netlab.RESOLVER,
                       AIRLOCK_UPSTREAM_CA_FD=str(ca_fd), AIRLOCK_LOG_LEVEL="warn")
            gw = subprocess.Popen(["ip", "netns", "exec", net.egress, GW], env=env, pass_fds=(ctl.fileno(), ca_fd))
            for _ in range(100):
                try:
                    gw_call(ctl_path, {"op": "hello"})
                    break
                except (OSError, ValueError):
                    if gw.poll() is not None:
                        raise SystemExit("airlock-gw exited")
                    threading.Event().wait(0.05)
            gw_call(ctl_path, {"op": "attach", "sandbox": "bench", "execution": 1,
                               "policy": {"mode": "allow-all"}}, (tcp.fileno(), dns.fileno()))

            def probe_in(ns, host="a.test"):
                out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, probe, host, str(a.n),
                                      str(a.mib)], capture_output=True, text=True, timeout=900)
                if out.returncode != 0:
                    raise SystemExit(f"probe in {ns} failed: {out.stderr}")
                return json.loads(out.stdout)

            # the origin by address: the egress namespace has no resolver for the test names
            results = {"direct (egress namespace)": probe_in(net.egress, netlab.ORIGIN)}
            results["gateway, allow-all (TLS passed through)"] = probe_in(guest)
            gw_call(ctl_path, {"op": "policy", "sandbox": "bench", "policy": {"allow": [{"host": "a.test"}]}})
            results["gateway, allowlist (TLS terminated)"] = probe_in(guest)
            egress_ca = os.path.join(ca_dir, "ca.crt")
            kept = {
                "direct, HTTP/1.1": keepalive_in(net.egress, a.n, "--http1.1", net.ca_path,
                                                 ("--resolve", f"a.test:443:{netlab.ORIGIN}")),
                "gateway terminated, HTTP/1.1": keepalive_in(guest, a.n, "--http1.1", egress_ca),
                "gateway terminated, HTTP/2 front": keepalive_in(guest, a.n, "--http2", egress_ca),
            }
            b = results["direct (egress namespace)"]
            print(f"n={a.n}, download {a.mib} MiB, no VM")
            print(f"{'path':40} {'TCP+request p50/p90 ms':>24} {'TLS handshake p50/p90 ms':>26} {'download MiB/s':>15}")
            for label, r in results.items():
                t, s = r["tcp_request_ms"], r["tls_handshake_ms"]
                print(f"{label:40} {t['p50']:10.2f} / {t['p90']:8.2f}   {s['p50']:10.2f} / {s['p90']:8.2f}  "
                      f"{r['download_mib_s']:10.1f} ({r['download_mib_s'] / b['download_mib_s'] * 100:.0f} %)")
            for label, r in results.items():
                if r is not b:
                    print(f"added by the gateway, {label}: TCP+request p50 "
                          f"{r['tcp_request_ms']['p50'] - b['tcp_request_ms']['p50']:.2f} ms, TLS p50 "
                          f"{r['tls_handshake_ms']['p50'] - b['tls_handshake_ms']['p50']:.2f} ms")
            kb = kept["direct, HTTP/1.1"]
            print(f"\n{a.n} requests on one kept-alive TLS connection (curl), the 2nd..{a.n}th:")
            print(f"{'path':40} {'version':>8} {'request p50/p90 ms':>20} {'added p50 ms':>13}")
            for label, r in kept.items():
                print(f"{label:40} {r['version']:>8} {r['p50']:10.2f} / {r['p90']:6.2f}  {r['p50'] - kb['p50']:+10.2f}")
    finally:
        if gw and gw.poll() is None:
            gw.terminate()
            gw.wait(timeout=30)
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(etc, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
