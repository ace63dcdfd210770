"""The servers of the test "internet" (tests/netlab.py), one process run
inside its network namespace:

  ORIGIN:80   HTTP, files from --www (and /echo, /api/..., /admin...: the
              request's headers back; a POST to /echo also its body's length
              and SHA-256, whether it came with a length or chunked); every
              request it gets is a JSON line in --origin-log (method, path as
              it arrived, headers, port)
  ORIGIN:443  the same over TLS, with a certificate for --tls-names from the
              test CA (--tls-cert/--tls-key)
  SINK:*      every port of --sink-ports (TCP) and --sink-udp-ports: records
              each connection or datagram (first bytes included) as a JSON
              line in --sink-log, answers nothing; ORIGIN:5432 the same (a
              port of the allowed host where no service is)
  capture     every packet arriving on --iface that is not what the gateway
              may send (TCP from --gateway, DNS from it to the resolver):
              ICMP, other UDP, IPv6, forged sources; a JSON line each in
              --capture-log (AF_PACKET: it sees them before any filter)

Each listener is up before "ready" is printed on stdout.
"""

import argparse
import hashlib
import http.server
import json
import socket
import ssl
import threading
import time


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY: the head and the body are separate writes, which Nagle
    # would hold for the client's delayed ACK (40 ms per kept-alive request)
    disable_nagle_algorithm = True

    origin_log = None
    lock = None

    def log_message(self, fmt, *args):
        pass

    def parse_request(self):
        ok = super().parse_request()
        if ok and self.origin_log:  # before any answer: what reached the origin, as it came
            with self.lock, open(self.origin_log, "a") as f:
                f.write(json.dumps({"method": self.command, "path": self.path, "port": self.server.server_port,
                                    "headers": dict(self.headers.items()), "ts": time.time()}) + "\n")
        return ok

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def echoes(self):
        return self.path.startswith(("/echo", "/api/", "/admin"))

    def do_POST(self):
        if not self.echoes():
            self.send_error(405)
            return
        data = self.read_body()
        self.do_GET(extra={"method": self.command, "body_len": len(data), "body_sha256": hashlib.sha256(data).hexdigest(),
                           "framing": "chunked" if "Transfer-Encoding" in self.headers else "length"})

    do_PUT = do_POST

    def do_GET(self, extra=None):
        if self.echoes():
            body = json.dumps({"host": self.headers.get("Host"), "path": self.path,
                               "headers": dict(self.headers.items()), **(extra or {})}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


def serve_http(addr, port, www, tls_ctx=None):
    class H(Handler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=www, **kw)
    srv = http.server.ThreadingHTTPServer((addr, port), H)
    if tls_ctx:
        srv.socket = tls_ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()


def serve_sink(addr, port, log_path, lock):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(64)

    def one(c, peer):
        c.settimeout(2)
        data = b""
        try:
            data = c.recv(4096)
        except OSError:
            pass
        with lock, open(log_path, "a") as f:
            f.write(json.dumps({"addr": addr, "port": port, "peer": peer[0], "data": data[:512].decode("latin-1"),
                                "ts": time.time()}) + "\n")
        c.close()

    def loop():
        while True:
            c, peer = s.accept()
            threading.Thread(target=one, args=(c, peer), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()


def serve_capture(iface, gateway, resolver, log_path, lock):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
    s.bind((iface, 0))

    def one(frame):
        kind = int.from_bytes(frame[12:14], "big")
        if kind == 0x0806:  # ARP
            return None
        if kind == 0x86DD:
            nh = frame[14 + 6]
            dst6 = socket.inet_ntop(socket.AF_INET6, frame[38:54])
            if nh == 58 or (nh == 0 and dst6.startswith("ff02:")):  # the link's own neighbour discovery, MLD
                return None
            return {"ipv6": True, "next": nh, "src": socket.inet_ntop(socket.AF_INET6, frame[22:38]),
                    "dst": socket.inet_ntop(socket.AF_INET6, frame[38:54])}
        if kind != 0x0800:
            return {"ethertype": kind}
        ip = frame[14:]
        proto, src, dst = ip[9], socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])
        l4 = ip[(ip[0] & 15) * 4:]
        dport = int.from_bytes(l4[2:4], "big") if proto in (6, 17) else None
        if src == gateway and (proto == 6 or (proto == 17 and dst == resolver and dport == 53)):
            return None
        return {"proto": proto, "src": src, "dst": dst, "dport": dport}

    def loop():
        while True:
            frame, addr = s.recvfrom(65535)
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            seen = one(frame)
            if seen:
                with lock, open(log_path, "a") as f:
                    f.write(json.dumps({**seen, "ts": time.time()}) + "\n")
    threading.Thread(target=loop, daemon=True).start()


def serve_udp_sink(addr, port, log_path, lock):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))

    def loop():
        while True:
            data, peer = s.recvfrom(4096)
            with lock, open(log_path, "a") as f:
                f.write(json.dumps({"port": port, "udp": True, "peer": peer[0],
                                    "data": data[:512].decode("latin-1"), "ts": time.time()}) + "\n")
    threading.Thread(target=loop, daemon=True).start()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--origin", required=True)
    p.add_argument("--www", required=True)
    p.add_argument("--tls-cert", required=True)
    p.add_argument("--tls-key", required=True)
    p.add_argument("--sink", required=True)
    p.add_argument("--sink-ports", default="80,443,22,53,853,5432")
    p.add_argument("--sink-udp-ports", default="53,123,443,5353")
    p.add_argument("--sink-log", required=True)
    p.add_argument("--origin-log", required=True)
    p.add_argument("--iface", required=True)
    p.add_argument("--gateway", required=True)
    p.add_argument("--resolver", required=True)
    p.add_argument("--capture-log", required=True)
    a = p.parse_args()
    Handler.origin_log, Handler.lock = a.origin_log, threading.Lock()
    serve_http(a.origin, 80, a.www)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(a.tls_cert, a.tls_key)
    serve_http(a.origin, 443, a.www, ctx)
    lock = threading.Lock()
    for port in a.sink_ports.split(","):
        serve_sink(a.sink, int(port), a.sink_log, lock)
    for port in a.sink_udp_ports.split(","):
        serve_udp_sink(a.sink, int(port), a.sink_log, lock)
    serve_sink(a.origin, 5432, a.sink_log, lock)
    serve_capture(a.iface, a.gateway, a.resolver, a.capture_log, lock)
    print("ready", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
