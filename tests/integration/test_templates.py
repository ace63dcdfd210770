"""Templates built from specs (docs/templates.md): a spec or a Dockerfile
with a build context becomes a template whose sandboxes start with its
files, environment, working directory and user, and with its server
already up; the build is followed live; bad specs are refused before
anything runs and a failed build leaves nothing behind; a tenant's
templates are its own."""

import io
import json
import os
import secrets
import signal
import tarfile
import time

import pytest

from netlab import HELLO, SINK, http_get, internet  # noqa: F401 (internet: a fixture)
from harness import START_TIMEOUT, TEMPLATES, hold_vm_to_cpu_share, multipart_form, node_pids, qemu_pids


def tar_of(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def post_template(a, request, context=None, token=None):
    body, headers = multipart_form(request, context)
    status, _, data = a.request("POST", "/v1/templates", body, headers=headers, token=token)
    return status, json.loads(data) if data else None


def follow(a, name, build_id, token=None):
    """The build's events until its end: (log text, progress events, end)."""
    text, progress = [], []
    for event, data, _ in a.sse(f"/v1/templates/{name}/builds/{build_id}/logs", token=token, timeout=900):
        if event == "log":
            text.append(data["text"])
        elif event == "progress":
            progress.append(data)
        elif event == "end":
            return "".join(text), progress, data
    raise AssertionError("the log stream ended without an end event")


@pytest.fixture
def built(request):
    """Names of templates (airlock, name, token) a test builds: deleted
    after it even when it fails, so the shared templates directory keeps
    nothing of it (each build is a new content id)."""
    names = []
    yield names
    for a, name, token in names:
        try:
            for s in a.api("GET", "/v1/sandboxes", token=token)["sandboxes"]:
                if s.get("template") == name:
                    a.request("DELETE", f"/v1/sandboxes/{s['id']}", token=token)
            a.request("DELETE", f"/v1/templates/{name}", token=token)
        except Exception as e:  # the instance may be gone: its store with it
            print(f"cleanup of template {name}: {e}")


def node_template_dirs():
    return {e for e in os.listdir(TEMPLATES) if e.startswith("c-") or e.startswith(".tmp-c-")}


def web_spec(nonce):
    return {
        "name": "web",
        "base": {"template": "minimal"},
        "steps": [
            {"workdir": "/srv"},
            {"copy": "data.txt", "to": "./"},
            {"copy": "site", "to": "/srv/site"},  # a directory's contents, as Docker copies it
            {"run": "echo 'web:x:1000:1000:web:/srv:/bin/sh' >> /etc/passwd && chown -R 1000 /srv && "
                    "echo built-by-run > /srv/built.txt"},
            {"env": {"GREETING": "hello", "NONCE": nonce}},
            {"user": "web"},
        ],
        "start": ["busybox", "httpd", "-f", "-p", "8080", "-h", "/srv/site"],
        "ready": {"port": 8080, "timeout_s": 120},
        "memory_mib": 320,
    }


def test_template_from_a_spec(airlock_factory, built):
    a = airlock_factory(prebuild="minimal")
    built.append((a, "web", None))
    nonce = secrets.token_hex(8)  # a new build each run, not the last run's
    context = tar_of({"data.txt": b"from the context\n", "site/index.html": b"<p>served</p>\n"})
    before = node_template_dirs()

    # refused before anything runs, each saying what is wrong
    for request, says in (({"spec": dict(web_spec(nonce), cpus=2)}, 'unknown field "cpus"'),
                          ({"spec": dict(web_spec(nonce), base={"template": "nope"})}, "'nope' not found"),
                          ({"dockerfile": "FROM minimal\nADD x /x\n", "name": "df"}, "line 2: ADD"),
                          ({"spec": web_spec(nonce)}, "needs a build context")):
        status, body = post_template(a, request)
        assert status == 400 and says in body["error"]["message"], (request, status, body)
    missing = tar_of({"data.txt": b"x"})  # no site/
    status, body = post_template(a, {"spec": web_spec(nonce)}, missing)
    assert status == 400 and "'site' is not in the build context" in body["error"]["message"], body
    assert a.api("GET", "/v1/templates/web", expect=404)["error"]["code"] == "not_found"

    # the build, followed live
    status, t = post_template(a, {"spec": web_spec(nonce)}, context)
    assert status == 202 and t["state"] == "building" and t["build_id"].startswith("bld-"), (status, t)
    assert t["template_id"].startswith("c-") and len(t["template_id"]) == 34
    log, progress, end = follow(a, "web", t["build_id"])
    assert end["state"] == "ready", (end, log[-3000:])
    # progress is sampled (a fast step may pass between two looks); the
    # log has every step's header
    # base, boot, 7 steps (an env step per variable), start, snapshot
    assert progress and all(p["steps"] == 11 for p in progress), progress
    for header in ("1/11: base template minimal", "5/11: COPY site to /srv/site", "6/11: RUN echo 'web:x",
                   "9/11: USER web", "10/11: start busybox (ready: port)", "11/11: snapshot"):
        assert f"=== step {header}" in log, (header, log[-3000:])
    got = a.api("GET", "/v1/templates/web")
    assert got["state"] == "ready" and got["spec"]["name"] == "web" and "error" not in got, got
    assert got["memory_mib"] == 320, got  # the spec's machine, not the base's 256
    listed = {x["name"]: x for x in a.api("GET", "/v1/templates")["templates"]}
    assert listed["web"]["kind"] == "built" and listed["minimal"]["kind"] == "built-in", listed
    assert not any(n.startswith("c-") for n in listed), listed

    # a sandbox from it: its files, defaults, and its server up from the first instant
    sid = a.create("web")["id"]
    assert a.api("GET", f"/v1/sandboxes/{sid}")["template"] == "web"
    r = a.exec(sid, ["sh", "-c", 'cat data.txt built.txt; pwd; id -un; echo "$GREETING"'])
    assert r["exit_code"] == 0 and r["stdout"] == "from the context\nbuilt-by-run\n/srv\nweb\nhello\n", r
    assert a.exec(sid, ["id", "-un"], cwd="/")["stdout"] == "web\n"
    status, _, page = a.request("GET", f"/v1/sandboxes/{sid}/ports/8080/index.html")
    assert status == 200 and page == b"<p>served</p>\n", (status, page)
    # the build context is not left in the image
    assert a.exec(sid, ["sh", "-c", "ls -a / | grep -c airlock || true"])["stdout"] == "0\n"
    # a node that restarts and adopts the VM keeps the template's defaults
    old = node_pids(a.data_dir)
    os.kill(old[0], signal.SIGKILL)
    deadline = time.monotonic() + START_TIMEOUT
    while not (node_pids(a.data_dir) not in ([], old) and a.request("GET", "/v1/health", auth=False)[0] == 200):
        assert time.monotonic() < deadline, a.log_tail(80)
        time.sleep(0.2)
    assert a.exec(sid, ["sh", "-c", "pwd; id -un"])["stdout"] == "/srv\nweb\n"

    # the same request again: built once per content, nothing runs
    status, again = post_template(a, {"spec": web_spec(nonce)}, context)
    assert status == 200 and again["state"] == "ready" and again["template_id"] == t["template_id"], again

    # deleting: refused while a sandbox uses it, then gone with its files
    status, _, data = a.request("DELETE", "/v1/templates/web")
    assert status == 409 and b"1 sandbox" in data, (status, data)
    a.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)
    a.api("DELETE", "/v1/templates/web", expect=204)
    a.api("GET", "/v1/templates/web", expect=404)
    assert node_template_dirs() == before


def test_failed_build_leaves_nothing(airlock_factory, built):
    a = airlock_factory(prebuild="minimal")
    built.extend((a, name, None) for name in ("broken", "never"))
    before = node_template_dirs()
    spec = {"name": "broken", "base": {"template": "minimal"},
            "steps": [{"run": f"echo step-one-{secrets.token_hex(4)}"}, {"run": "echo about to fail; exit 3"}]}
    status, t = post_template(a, {"spec": spec})
    assert status == 202, t
    log, _, end = follow(a, "broken", t["build_id"])
    assert end["state"] == "failed" and "steps[1] (RUN) exited with 3" in end["error"], end
    assert "about to fail" in log and "error: steps[1] (RUN) exited with 3" in log, log[-2000:]
    got = a.api("GET", "/v1/templates/broken")
    assert got["state"] == "failed" and "exited with 3" in got["error"], got
    status, _, data = a.request("POST", "/v1/sandboxes", {"template": "broken"})
    assert status == 409 and b"failed to build" in data, (status, data)
    # no template directory, no temporary one: only the row and its log stay
    assert {d for d in node_template_dirs() if not d.endswith(".log")} == {d for d in before if not d.endswith(".log")}
    a.api("DELETE", "/v1/templates/broken", expect=204)
    assert node_template_dirs() == before

    # a start command that never gets ready fails the build too
    spec = {"name": "never", "base": {"template": "minimal"}, "steps": [{"env": {"N": secrets.token_hex(4)}}],
            "start": ["sleep", "600"], "ready": {"port": 9, "timeout_s": 3}}
    status, t = post_template(a, {"spec": spec})
    assert status == 202, t
    _, _, end = follow(a, "never", t["build_id"])
    assert end["state"] == "failed" and "port 9 did not accept within 3 s" in end["error"], end
    a.api("DELETE", "/v1/templates/never", expect=204)
    assert node_template_dirs() == before


def test_a_build_vm_starved_of_cpu_keeps_a_fine_grained_clock(airlock_factory, built):
    """A template booted while the host is loaded: here its build VM is held
    to half a CPU from its first instant. microvm has no HPET, so the guest
    kernel's clocksource watchdog compares the TSC with jiffies, and the
    ticks it loses then made it fall back to refined-jiffies in 4 of 5 such
    boots: a 4 ms clock, read by a system call, that every sandbox of the
    template would keep (docs/images.md). tsc=reliable keeps the TSC."""
    a = airlock_factory(prebuild="minimal")
    built.append((a, "starved", None))
    others = set(qemu_pids("qemu"))
    spec = {"name": "starved", "base": {"template": "minimal"},
            "steps": [{"run": f"echo {secrets.token_hex(4)} > /built"}]}
    status, t = post_template(a, {"spec": spec})
    assert status == 202, t
    deadline = time.monotonic() + 60
    while not (vm := set(qemu_pids("qemu")) - others):
        assert time.monotonic() < deadline, "no build VM started"
        time.sleep(0.005)
    assert hold_vm_to_cpu_share(vm.pop(), 0.5)
    _, _, end = follow(a, "starved", t["build_id"])
    assert end["state"] == "ready", end
    sid = a.create("starved")["id"]
    source = a.exec(sid, ["cat", "/sys/devices/system/clocksource/clocksource0/current_clocksource"])["stdout"]
    dmesg = a.exec(sid, ["dmesg"])["stdout"]
    assert source.strip() in ("tsc", "kvm-clock"), (source, [x for x in dmesg.splitlines() if "clocksource" in x])
    assert "unstable" not in dmesg, [x for x in dmesg.splitlines() if "unstable" in x]
    a.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)


def test_a_build_runs_under_its_owners_egress_policy(airlock_factory, internet, built):
    """RUN steps reach the network through the egress gateway under the
    owner's default policy: the allowed name is fetched (the control), a
    denied address and name get nothing, and nothing reaches the sink."""
    a = airlock_factory(prebuild="minimal", env=internet.env())
    tenant = a.api("POST", "/v1/tenants", {"name": "builder", "network": {"allow": [{"host": "a.test"}]}},
                   expect=201)
    key = a.api("POST", f"/v1/tenants/{tenant['id']}/keys", {"name": "builder"}, expect=201)["key"]
    built.append((a, "fetched", key))
    spec = {"name": "fetched", "base": {"template": "minimal"},
            "steps": [{"run": f"echo {secrets.token_hex(4)}; ({http_get('a.test')}) > /allowed.txt 2>&1"},
                      {"run": f"({http_get('e.test', SINK)}; nslookup e.test) > /denied.txt 2>&1; true"}]}
    status, t = post_template(a, {"spec": spec}, token=key)
    assert status == 202, t
    log, _, end = follow(a, "fetched", t["build_id"], token=key)
    assert end["state"] == "ready", (end, log[-3000:])
    sid = a.api("POST", "/v1/sandboxes", {"template": "fetched"}, token=key, expect=201)["id"]
    run = lambda cmd: a.api("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": cmd}, token=key)  # noqa: E731
    allowed = run(["cat", "/allowed.txt"])["stdout"]
    assert HELLO in allowed, allowed
    denied = run(["cat", "/denied.txt"])["stdout"]
    assert HELLO not in denied and f"Address: {SINK}" not in denied and "REFUSED" in denied, denied
    assert internet.sink_hits() == []
    assert not any(q.endswith("e.test") for q in internet.dns_queries()), internet.dns_queries()
    a.api("DELETE", f"/v1/sandboxes/{sid}", token=key, expect=204)


def test_templates_are_their_tenants(airlock_factory, built):
    a = airlock_factory(prebuild="minimal")
    keys = {}
    for name in ("alpha", "beta"):
        t = a.api("POST", "/v1/tenants", {"name": name}, expect=201)
        keys[name] = a.api("POST", f"/v1/tenants/{t['id']}/keys", {"name": name}, expect=201)["key"]
    spec = {"name": "mine", "base": {"template": "minimal"},
            "steps": [{"run": f"echo {secrets.token_hex(4)} > /owner"}]}
    built.append((a, "mine", keys["alpha"]))
    status, t = post_template(a, {"spec": spec}, token=keys["alpha"])
    assert status == 202, t
    _, _, end = follow(a, "mine", t["build_id"], token=keys["alpha"])
    assert end["state"] == "ready", end
    # the owner's (the control) ...
    sid = a.api("POST", "/v1/sandboxes", {"template": "mine"}, token=keys["alpha"], expect=201)["id"]
    assert a.api("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["cat", "/owner"]}, token=keys["alpha"])["exit_code"] == 0
    # ... and nobody else's: not listed, not readable, not usable, not deletable
    assert a.api("GET", "/v1/templates/mine", token=keys["beta"], expect=404)
    assert "mine" not in {x["name"] for x in a.api("GET", "/v1/templates", token=keys["beta"])["templates"]}
    status, _, data = a.request("POST", "/v1/sandboxes", {"template": "mine"}, token=keys["beta"])
    assert status == 404 and b"template 'mine' not found" in data, (status, data)
    # nor by the node's name of it (its content id)
    status, _, data = a.request("POST", "/v1/sandboxes", {"template": t["template_id"]}, token=keys["beta"])
    assert status == 404 and b"not found" in data, (status, data)
    a.api("DELETE", "/v1/templates/mine", token=keys["beta"], expect=404)
    a.api("GET", f"/v1/templates/mine/builds/{t['build_id']}/logs", token=keys["beta"], expect=404)
    a.api("DELETE", f"/v1/sandboxes/{sid}", token=keys["alpha"], expect=204)
    # a tenant that owns templates stays until they are deleted
    alpha = next(t for t in a.api("GET", "/v1/tenants")["tenants"] if t["name"] == "alpha")
    status, _, data = a.request("DELETE", f"/v1/tenants/{alpha['id']}")
    assert status == 409 and b"owns templates" in data, (status, data)
    a.api("DELETE", "/v1/templates/mine", token=keys["alpha"], expect=204)
    a.api("DELETE", f"/v1/tenants/{alpha['id']}", expect=204)


def test_cli_builds_from_a_dockerfile(airlock_factory, tmp_path, built):
    a = airlock_factory(prebuild="minimal")
    built.extend((a, name, None) for name in ("from-cli", "fails"))
    (tmp_path / "hello.txt").write_text("hello from COPY\n")
    (tmp_path / "Dockerfile").write_text(f"""# a small one, whose start is ready when a command says so
FROM minimal
WORKDIR /opt/app
COPY hello.txt ./
RUN echo {secrets.token_hex(4)} > stamp
ENV MODE=cli
CMD ["sh", "-c", "sleep 1; echo up > /tmp/up; exec sleep 100000"]
HEALTHCHECK CMD test -f /tmp/up
""")
    # docker build's words: -t NAME, DIR/Dockerfile without -f
    p = a.cli("template", "build", "-t", "from-cli", str(tmp_path), timeout=900)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert b"step 3 of" in p.stderr and b"built in" in p.stderr, p.stderr
    assert b"(ready: command)" in p.stderr, p.stderr
    assert b"COPY hello.txt" in p.stdout, p.stdout
    sid = a.create("from-cli")["id"]
    r = a.exec(sid, ["sh", "-c", 'cat hello.txt; echo "$MODE"; cat /tmp/up; ps | grep -q "[s]leep 100000" && echo alive'])
    assert r["stdout"] == "hello from COPY\ncli\nup\nalive\n", r
    p = a.cli("template", "ls")
    assert p.returncode == 0 and b"from-cli" in p.stdout, p.stdout
    a.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)

    # a failing build fails the command, with the step that failed (E2B's
    # words: -n NAME, -p DIR, --dockerfile FILE)
    (tmp_path / "fails.Dockerfile").write_text("FROM minimal\nRUN false\n")
    p = a.cli("template", "build", "--dockerfile", str(tmp_path / "fails.Dockerfile"), "-n", "fails",
              "-p", str(tmp_path), timeout=900)
    assert p.returncode == 1 and b"steps[0] (RUN) exited with 1" in p.stderr, (p.stdout, p.stderr)
    # and a bad one before anything is sent
    (tmp_path / "Dockerfile").write_text("FROM minimal\nCOPY missing.txt /x\n")
    p = a.cli("template", "build", "-f", str(tmp_path / "Dockerfile"), "--name", "bad", str(tmp_path))
    assert p.returncode == 1 and b"missing.txt" in p.stderr, p.stderr
    # docker's NAME:TAG, no Dockerfile, no name: each refused with what to do
    p = a.cli("template", "build", "-t", "bad:1.0", str(tmp_path))
    assert p.returncode == 2 and b"-t bad:1.0: a template has a name, no tag (1.0); use -t bad" in p.stderr, p.stderr
    p = a.cli("template", "build", "-t", "bad", str(tmp_path / "hello.txt"))
    assert p.returncode == 2 and b"no -f FILE" in p.stderr and b"hello.txt/Dockerfile" in p.stderr, p.stderr
    p = a.cli("template", "build", str(tmp_path))
    assert p.returncode == 2 and b"needs a name: -t NAME" in p.stderr, p.stderr
    # and the help those errors point at (a command with subcommands too)
    for cmd, usage in (("template", b"Usage: airlock template build [-f FILE] [-t NAME]"),
                       ("secret", b"Usage: airlock secret add NAME")):
        p = a.cli(cmd, "--help")
        assert p.returncode == 0 and p.stdout.startswith(usage), (p.stdout, p.stderr)
    a.api("GET", "/v1/templates/bad", expect=404)
    for name in ("from-cli", "fails"):
        a.api("DELETE", f"/v1/templates/{name}", expect=204)


def busybox_image(tmp_path):
    """A small OCI image (busybox, a user, a working directory, an
    environment variable), as an OCI layout and as a docker-archive."""
    import shutil
    import subprocess

    def run(*args):
        subprocess.run(args, check=True, capture_output=True)

    layout, bundle = tmp_path / "layout", tmp_path / "bundle"
    run("umoci", "init", "--layout", str(layout))
    run("umoci", "new", "--image", f"{layout}:t")
    run("umoci", "unpack", "--image", f"{layout}:t", str(bundle))
    root = bundle / "rootfs"
    for d in ("bin", "etc", "app"):
        (root / d).mkdir(exist_ok=True)
    shutil.copy(shutil.which("busybox"), root / "bin" / "busybox")
    for applet in ("sh", "cat", "id", "tar", "cp", "mkdir", "rm", "sync", "sleep", "true", "echo", "pwd", "ls",
                   "dirname", "chown", "stat"):
        os.symlink("busybox", root / "bin" / applet)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/app:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\napp:x:1000:\n")
    os.chown(root / "app", 1000, 1000)
    (root / "app" / "owned").write_text("the image's user's\n")
    os.chown(root / "app" / "owned", 1000, 1000)
    os.chown(root / "etc" / "group", 0, 1000)
    run("umoci", "repack", "--image", f"{layout}:t", str(bundle))
    run("umoci", "config", "--image", f"{layout}:t", "--config.env", "GREETING=from-image",
        "--config.workingdir", "/app", "--config.user", "app")
    run("skopeo", "--insecure-policy", "copy", f"oci:{layout}:t", f"docker-archive:{tmp_path}/image.tar:test:t")
    return layout, tmp_path / "image.tar"


def tree_tar(base, names):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name in names:
            t.add(os.path.join(base, name), arcname=name)
    return buf.getvalue()


def test_template_from_an_oci_image(airlock_factory, tmp_path, built):
    a = airlock_factory(prebuild="minimal")
    built.extend((a, name, None) for name in ("from-archive", "from-layout"))
    layout, archive = busybox_image(tmp_path)
    stamp = secrets.token_hex(4)
    for name, ref, context in (
            ("from-archive", "docker-archive:image.tar", tree_tar(tmp_path, ["image.tar"])),
            ("from-layout", "oci:layout:t", tree_tar(tmp_path, ["layout"]))):
        spec = {"name": name, "base": {"oci": ref}, "steps": [{"run": f'echo "$GREETING {stamp}" > seen'}]}
        status, t = post_template(a, {"spec": spec}, context)
        assert status == 202, t
        log, _, end = follow(a, name, t["build_id"])
        assert end["state"] == "ready", (end, log[-3000:])
        sid = a.create(name)["id"]
        # the image's config: its working directory, user and environment
        r = a.exec(sid, ["sh", "-c", 'pwd; id -un; cat seen; echo "$GREETING"'])
        assert r["stdout"] == f"/app\napp\nfrom-image {stamp}\nfrom-image\n", (name, r)
        # the image's owners, as the image has them: unpacked in a user
        # namespace whose ids map to a range of their own, read back
        # there by mkfs.ext4 -d (images/oci.sh)
        r = a.exec(sid, ["stat", "-c", "%n %u:%g", "/app", "/app/owned", "/etc/group", "/bin/busybox"])
        assert r["stdout"] == "/app 1000:1000\n/app/owned 1000:1000\n/etc/group 0:1000\n/bin/busybox 0:0\n", \
            (name, r)
        # the context (the image itself) stayed on the host: nothing copies from it
        assert "airlock" not in a.exec(sid, ["ls", "-a", "/"])["stdout"], name
        a.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)
        a.api("DELETE", f"/v1/templates/{name}", expect=204)
    # an archive the context does not have is refused before anything runs
    spec = {"name": "nothing", "base": {"oci": "docker-archive:other.tar"}}
    status, body = post_template(a, {"spec": spec}, tree_tar(tmp_path, ["image.tar"]))
    assert status == 400 and "'other.tar' is not in the build context" in body["error"]["message"], body


def test_template_from_debian(airlock_factory, built):
    a = airlock_factory(prebuild="minimal")
    built.append((a, "deb", None))
    spec = {"name": "deb", "base": {"debian": "bookworm", "packages": ["hello"]},
            "steps": [{"run": f"hello > /greeting && echo {secrets.token_hex(4)} > /stamp"}], "disk_mib": 1536}
    status, t = post_template(a, {"spec": spec})
    assert status == 202, t
    log, _, end = follow(a, "deb", t["build_id"])
    assert end["state"] == "ready", (end, log[-3000:])
    assert "mmdebstrap bookworm" in log, log[:3000]
    sid = a.create("deb")["id"]
    r = a.exec(sid, ["sh", "-c", "cat /greeting; . /etc/os-release; echo $VERSION_CODENAME; df -m / | tail -1"])
    lines = r["stdout"].splitlines()
    assert lines[0] == "Hello, world!" and lines[1] == "bookworm", r
    assert int(lines[2].split()[1]) > 1200, r  # the disk is disk_mib's
    a.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)
    a.api("DELETE", "/v1/templates/deb", expect=204)


def test_template_from_a_registry(airlock_factory, tmp_path, built):
    """An OCI base pulled from a registry the node reaches: Debian's
    docker-registry on loopback, over TLS with a throwaway CA that
    skopeo trusts through /etc/containers/certs.d (removed after)."""
    import shutil
    import socket
    import subprocess
    import time

    from harness import free_port
    from netlab import _cert, _write_pem

    registry = shutil.which("docker-registry")
    assert registry, "docker-registry is missing: scripts/deps.sh --test installs it"
    a = airlock_factory(prebuild="minimal")
    built.append((a, "from-registry", None))
    layout, _ = busybox_image(tmp_path)
    port = free_port()
    host = f"localhost:{port}"
    ca_key, ca_cert = _cert([])
    key, cert = _cert(["localhost"], ca_key, ca_cert)
    _write_pem(tmp_path / "reg.crt", cert=cert)
    _write_pem(tmp_path / "reg.key", key=key)
    (tmp_path / "registry.yml").write_text(f"""version: 0.1
storage:
  filesystem:
    rootdirectory: {tmp_path}/registry-data
http:
  addr: 127.0.0.1:{port}
  tls:
    certificate: {tmp_path}/reg.crt
    key: {tmp_path}/reg.key
""")
    certs_d = f"/etc/containers/certs.d/{host}"
    os.makedirs(certs_d, exist_ok=True)
    _write_pem(f"{certs_d}/ca.crt", cert=ca_cert)
    proc = subprocess.Popen([registry, "serve", str(tmp_path / "registry.yml")], stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "registry.log", "wb"))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "registry.log").read_text()
                time.sleep(0.1)
        subprocess.run(["skopeo", "--insecure-policy", "copy", f"oci:{layout}:t",
                        f"docker://{host}/test/busybox:t"], check=True, capture_output=True)
        spec = {"name": "from-registry", "base": {"oci": f"docker://{host}/test/busybox:t"},
                "steps": [{"run": f"echo {secrets.token_hex(4)} > stamp"}]}
        status, t = post_template(a, {"spec": spec})
        assert status == 202, t
        log, _, end = follow(a, "from-registry", t["build_id"])
        assert end["state"] == "ready", (end, log[-3000:])
        assert f"copying docker://{host}/test/busybox:t" in log, log[-3000:]
        sid = a.create("from-registry")["id"]
        r = a.exec(sid, ["sh", "-c", 'pwd; id -un; echo "$GREETING"'])
        assert r["stdout"] == "/app\napp\nfrom-image\n", r
        # a registry that is not there fails the build, saying so
        spec = {"name": "from-nowhere", "base": {"oci": f"docker://localhost:{free_port()}/none:t"}}
        built.append((a, "from-nowhere", None))
        status, t = post_template(a, {"spec": spec})
        assert status == 202, t
        _, _, end = follow(a, "from-nowhere", t["build_id"])
        assert end["state"] == "failed" and "skopeo could not copy" in end["error"], end
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(certs_d, ignore_errors=True)
