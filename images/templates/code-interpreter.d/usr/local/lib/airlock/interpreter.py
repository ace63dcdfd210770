#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Airlock's code interpreter server: the HTTP API that E2B's
@e2b/code-interpreter SDK speaks to port 49999 of a sandbox (docs/e2b.md),
on Jupyter kernels from Debian (ipykernel, jupyter_client).

  POST   /execute               {"code", "context_id"?, "language"?, "env_vars"?}
                                -> newline-delimited JSON, streamed while the code runs
  POST   /contexts              {"language"?, "cwd"?} -> {"id", "language", "cwd"}
  GET    /contexts              -> [{"id", "language", "cwd"}]
  DELETE /contexts/ID           -> 204
  POST   /contexts/ID/restart   -> 204
  GET    /health                -> 200 once the default context's kernel is up

`interpreter.py --ready-file PATH` writes PATH (its pid) once it serves.

The template build starts it (etc/airlock/template-start) and the snapshot
keeps it running, its default kernel warm, in every sandbox made from the
template. Sandboxes restored from one snapshot would share the kernel's
pseudo-random state: the first execution in a new sandbox (a new
/run/airlock/sandbox-id) reseeds `random` and numpy in each kernel.
Only Python is served.
"""

import json
import os
import queue
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jupyter_client.manager import KernelManager

PORT = 49999
BODY_MAX = 4 << 20  # bytes of one request body
CONTEXTS_MAX = 32
KERNEL_START_S = 300  # a cold kernel under TCG takes its time
IDLE_WAIT_S = 1.0  # how often a stream looks at its client between messages
SANDBOX_ID_FILE = "/run/airlock/sandbox-id"

# mime type -> the key E2B's Result has for it
MIME_KEYS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}

RESEED = (
    "import random as _airlock_random, sys as _airlock_sys\n"
    "_airlock_random.seed()\n"
    "if 'numpy' in _airlock_sys.modules:\n"
    "    _airlock_sys.modules['numpy'].random.seed()\n"
    "del _airlock_random, _airlock_sys\n"
)


def now():
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def sandbox_id():
    try:
        with open(SANDBOX_ID_FILE) as f:
            return f.read().strip()
    except OSError:
        return ""


class Context:
    """One Jupyter kernel, one execution at a time."""

    def __init__(self, cid, language, cwd):
        self.id, self.language, self.cwd = cid, language, cwd
        self.lock = threading.Lock()
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=cwd)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=KERNEL_START_S)
        self.seen_sandbox = sandbox_id()

    def json(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def silent(self, code):
        """Runs code without output or history; waits for it."""
        msg_id = self.kc.execute(code, silent=True, store_history=False)
        self._wait_idle(msg_id)

    def _wait_idle(self, msg_id, deadline=60):
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            try:
                msg = self.kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                continue
            if (msg.get("parent_header", {}).get("msg_id") == msg_id and msg["msg_type"] == "status"
                    and msg["content"].get("execution_state") == "idle"):
                return

    def execute(self, code, env_vars, emit):
        """Runs code, passing each output to emit(dict) as it comes;
        returns when the kernel is idle again. emit returns False when the
        client is gone (the execution goes on, unobserved)."""
        with self.lock:
            sid = sandbox_id()
            if sid != self.seen_sandbox:
                self.silent(RESEED)
                self.seen_sandbox = sid
            restore = None
            if env_vars:
                restore = {k: os.environ.get(k) for k in env_vars}
                self.silent("import os as _airlock_os\n_airlock_os.environ.update(%r)\ndel _airlock_os\n"
                            % (dict(env_vars),))
            try:
                self._execute(code, emit)
            finally:
                if restore is not None:
                    self.silent("import os as _airlock_os\n"
                                "for _k, _v in %r.items():\n"
                                "    _airlock_os.environ.pop(_k, None) if _v is None else "
                                "_airlock_os.environ.__setitem__(_k, _v)\n"
                                "del _airlock_os\n" % (restore,))

    def _execute(self, code, emit):
        msg_id = self.kc.execute(code, store_history=True, allow_stdin=False)
        listening = True
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=IDLE_WAIT_S)
            except queue.Empty:
                if not self.km.is_alive():
                    emit({"type": "error", "name": "KernelDied", "value": "the kernel exited",
                          "traceback": ""})
                    return
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            out = None
            if kind == "stream":
                out = {"type": "stdout" if content.get("name") == "stdout" else "stderr",
                       "text": content.get("text", ""), "timestamp": now()}
            elif kind in ("execute_result", "display_data"):
                out = result(content.get("data", {}), kind == "execute_result")
            elif kind == "error":
                out = {"type": "error", "name": content.get("ename", ""), "value": content.get("evalue", ""),
                       "traceback": "\n".join(content.get("traceback", []))}
            elif kind == "execute_input":
                out = {"type": "number_of_executions", "execution_count": content.get("execution_count", 0)}
            elif kind == "status" and content.get("execution_state") == "idle":
                return
            if out is not None and listening:
                listening = emit(out)

    def restart(self):
        with self.lock:
            self.km.restart_kernel(now=True)
            self.kc.wait_for_ready(timeout=KERNEL_START_S)

    def shutdown(self):
        try:
            self.kc.stop_channels()
            self.km.shutdown_kernel(now=True)
        except Exception:  # noqa: BLE001 -- going away either way
            pass


def result(data, main):
    r = {"type": "result", "is_main_result": main}
    extra = {}
    for mime, value in data.items():
        key = MIME_KEYS.get(mime)
        if key == "json":
            r[key] = value
        elif key:
            r[key] = value if isinstance(value, str) else json.dumps(value)
        else:
            extra[mime] = value
    if extra:
        r["extra"] = extra
    return r


class Interpreter:
    def __init__(self):
        self.lock = threading.Lock()
        self.contexts = {}
        self.default = self.create("python", "/root", default=True)

    def create(self, language, cwd, default=False):
        with self.lock:
            if len(self.contexts) >= CONTEXTS_MAX:
                raise ValueError(f"at most {CONTEXTS_MAX} contexts")
        cid = "default" if default else uuid.uuid4().hex
        ctx = Context(cid, language, cwd)
        with self.lock:
            self.contexts[cid] = ctx
        return ctx

    def get(self, cid):
        with self.lock:
            return self.contexts.get(cid)

    def remove(self, cid):
        with self.lock:
            ctx = self.contexts.pop(cid, None) if cid != "default" else None
        if ctx:
            ctx.shutdown()
        return ctx is not None


class Handler(BaseHTTPRequestHandler):
    server_version = "airlock-interpreter/1"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # the console is not for requests
        pass

    def reply(self, status, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, status, message):
        self.reply(status, {"error": message})

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > BODY_MAX:
            raise ValueError("request body over 4 MiB")
        raw = self.rfile.read(n) if n else b"{}"
        o = json.loads(raw or b"{}")
        if not isinstance(o, dict):
            raise ValueError("request body must be a JSON object")
        return o

    def do_GET(self):
        if self.path.split("?")[0] == "/health":
            return self.reply(200, {"status": "ok"})
        if self.path.split("?")[0] == "/contexts":
            with interp.lock:
                ctxs = list(interp.contexts.values())
            return self.reply(200, [c.json() for c in ctxs])
        self.error(404, "no such path")

    def do_DELETE(self):
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) == 2 and parts[0] == "contexts":
            return self.reply(204) if interp.remove(parts[1]) else self.error(404, "no such context")
        self.error(404, "no such path")

    def do_POST(self):
        path = self.path.split("?")[0]
        try:
            req = self.body()
        except (ValueError, json.JSONDecodeError) as e:
            return self.error(400, str(e))
        parts = path.strip("/").split("/")
        if path == "/execute":
            return self.execute(req)
        if path == "/contexts":
            language = req.get("language") or "python"
            if language != "python":
                return self.error(400, f"language {language!r} is not served (only python)")
            cwd = req.get("cwd") or "/root"
            if not isinstance(cwd, str) or not os.path.isdir(cwd):
                return self.error(400, f"cwd {cwd!r} is not a directory")
            try:
                return self.reply(200, interp.create(language, cwd).json())
            except ValueError as e:
                return self.error(429, str(e))
        if len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart":
            ctx = interp.get(parts[1])
            if not ctx:
                return self.error(404, "no such context")
            ctx.restart()
            return self.reply(204)
        self.error(404, "no such path")

    def execute(self, req):
        code, cid, language = req.get("code"), req.get("context_id"), req.get("language")
        env = req.get("env_vars") or {}
        if not isinstance(code, str):
            return self.error(400, "'code' must be a string")
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            return self.error(400, "'env_vars' must map strings to strings")
        if language not in (None, "python"):
            return self.error(400, f"language {language!r} is not served (only python)")
        ctx = interp.get(cid) if cid else interp.default
        if not ctx:
            return self.error(404, f"context {cid!r} not found")
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def emit(msg):
            line = (json.dumps(msg) + "\n").encode()
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                return True
            except OSError:
                return False

        ctx.execute(code, env, emit)
        if emit({"type": "end_of_execution"}):
            try:
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


if __name__ == "__main__":
    # --ready-file PATH: made once the default kernel is up and the port is
    # bound (template-start waits for it without polling the port: a curl
    # every half second took a third of the one vCPU under TCG)
    ready = sys.argv[2] if len(sys.argv) == 3 and sys.argv[1] == "--ready-file" else None
    interp = Interpreter()
    server = Server(("0.0.0.0", PORT), Handler)
    if ready:
        with open(ready, "w") as f:
            f.write(f"{os.getpid()}\n")
    server.serve_forever()
