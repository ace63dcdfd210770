"""Hostile build inputs (issue 29): a template build's context (a tar the
client uploads) and an OCI image in it are the client's bytes, and the
host must never unpack them as it is told.

Each test is one attack that passes only if the attack fails, and shows
it: the request was made, the defence itself refused it (its message
names the entry and what was wrong), nothing was written where the
attack aimed (a canary path under /tmp stays absent, a canary directory
stays empty) nor stayed behind (no template directory or row, no file of
the image namespace's uids, no upload), and then the control succeeds.

A build context is refused by airlockd on upload (lib/buildctx): a 400
before anything else looks at it, so there is no build and no build log
yet; the node checks it again before it unpacks anything
(test_the_node_checks_the_context_again, straight on its socket). An OCI
image's layers are checked after skopeo copied them (checking every
blob's digest) and before umoci unpacks them, inside images/oci.sh's
unprivileged user namespace: a failed build at its base step, before any
VM boots, with the reason as the last line of its log and in its error.

The control: one template built once for the module, after the first
attack, from an OCI image in the context (its files owned by uid 1000)
with a COPY of a directory holding a link and a hard link that stay
inside. Every test sends its request again after the attack: the same
context passes airlockd's check and is answered by the template built
(200, ready)."""

import hashlib
import io
import json
import os
import secrets
import shutil
import socket
import struct
import tarfile
import zlib

import pytest

from harness import TEMPLATES, airlock_instance, multipart_form

# images/oci.sh's namespace: its root is this uid on the host, its ids
# 0-65535 the 65536 from here
NS_UID_BASE = 1500000000
NS_UIDS = 65536


# ---- requests ----

def post_template(a, spec, context):
    body, headers = multipart_form({"spec": spec}, context)
    status, _, data = a.request("POST", "/v1/templates", body, headers=headers, timeout=300)
    return status, json.loads(data) if data else None


def follow(a, name, build_id):
    """The build's events until its end: (log text, progress events, end)."""
    text, progress = [], []
    for event, data, _ in a.sse(f"/v1/templates/{name}/builds/{build_id}/logs", timeout=900):
        if event == "log":
            text.append(data["text"])
        elif event == "progress":
            progress.append(data)
        elif event == "end":
            return "".join(text), progress, data
    raise AssertionError("the log stream ended without an end event")


# ---- archives ----

def tar_of(entries):
    """A tar of entries: (name, "f", data[, mode[, uid]]), (name, "d"[,
    mode[, uid]]), (name, "l", target), (name, "h", target), (name, "c",
    major, minor)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, kind, *rest in entries:
            i = tarfile.TarInfo(name)
            i.mtime = 1700000000
            data = None
            if kind == "f":
                data, rest = rest[0], rest[1:]
                i.size = len(data)
                data = io.BytesIO(data)
            elif kind == "d":
                i.type = tarfile.DIRTYPE
            elif kind == "l":
                i.type, i.linkname = tarfile.SYMTYPE, rest[0]
            elif kind == "h":
                i.type, i.linkname = tarfile.LNKTYPE, rest[0]
            elif kind == "c":
                i.type, i.devmajor, i.devminor = tarfile.CHRTYPE, rest[0], rest[1]
            if kind in ("f", "d"):
                i.mode = rest[0] if rest else (0o755 if kind == "d" else 0o644)
                i.uid = i.gid = rest[1] if len(rest) > 1 else 0
            t.addfile(i, data)
    return buf.getvalue()


def gzip_member(data):
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    return z.compress(data) + z.flush()


def octal(v, width):
    return (b"%0*o" % (width - 1, v) + b"\0") if v < 8 ** (width - 1) else \
        b"\x80" + v.to_bytes(width - 1, "big")


def gnu_sparse(name, apparent):
    """An old GNU sparse file: `apparent` bytes, one block of data at its
    end (as GNU tar -S writes one)."""
    h = bytearray(512)
    h[0:len(name)] = name.encode()
    h[100:108] = octal(0o644, 8)
    h[108:116] = octal(0, 8)
    h[116:124] = octal(0, 8)
    h[124:136] = octal(512, 12)
    h[136:148] = octal(1700000000, 12)
    h[156:157] = b"S"
    h[257:265] = b"ustar  \0"
    h[386:398] = octal(apparent - 512, 12)
    h[398:410] = octal(512, 12)
    h[483:495] = octal(apparent, 12)
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h) + b"x" * 512


def oci_layout(layers, config=None, lie=False):
    """An OCI layout ("image/", tag t) of uncompressed tar layers, as
    entries of a context. lie: the last layer's blob is not the bytes its
    digest names."""
    blobs, descs = {}, []

    def blob(data):
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    for layer in layers:
        descs.append(dict(blob(layer), mediaType="application/vnd.oci.image.layer.v1.tar"))
    if lie:
        d = descs[-1]["digest"]
        blobs[d] = blobs[d] + b"\0" * 512
        descs[-1]["size"] += 512
    cfg = {"architecture": "amd64", "os": "linux", "config": config or {},
           "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in descs]}}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": dict(blob(json.dumps(cfg).encode()), mediaType="application/vnd.oci.image.config.v1+json"),
                "layers": descs}
    mdesc = dict(blob(json.dumps(manifest).encode()), mediaType="application/vnd.oci.image.manifest.v1+json",
                 annotations={"org.opencontainers.image.ref.name": "t"})
    entries = [("image/", "d"), ("image/oci-layout", "f", b'{"imageLayoutVersion":"1.0.0"}'),
               ("image/index.json", "f", json.dumps({"schemaVersion": 2, "manifests": [mdesc]}).encode()),
               ("image/blobs/", "d"), ("image/blobs/sha256/", "d")]
    entries += [(f"image/blobs/sha256/{d[7:]}", "f", data) for d, data in blobs.items()]
    return entries


def busybox_layer():
    """A root file system with busybox (what a build's steps need: sh,
    tar, cp, mkdir, sync), a user app (1000) and its files."""
    with open(shutil.which("busybox"), "rb") as f:
        busybox = f.read()
    entries = [("bin/", "d"), ("bin/busybox", "f", busybox, 0o755, 0)]
    entries += [(f"bin/{applet}", "l", "busybox")
                for applet in ("sh", "cat", "id", "tar", "cp", "mkdir", "rm", "sync", "sleep", "true", "echo", "ls",
                               "stat", "dirname", "readlink")]
    entries += [("etc/", "d"), ("etc/passwd", "f", b"root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/app:/bin/sh\n"),
                ("etc/group", "f", b"root:x:0:\napp:x:1000:\n"),
                ("app/", "d", 0o755, 1000), ("app/owned", "f", b"the image's user's\n", 0o644, 1000)]
    return tar_of(entries)


# ---- the module's Airlock and its control ----

@pytest.fixture(scope="module")
def api(templates):
    with airlock_instance(prebuild="minimal") as a:
        yield a
        for s in a.api("GET", "/v1/sandboxes")["sandboxes"]:
            a.request("DELETE", f"/v1/sandboxes/{s['id']}")
        for t in a.api("GET", "/v1/templates")["templates"]:
            if t.get("kind") == "built":
                a.request("DELETE", f"/v1/templates/{t['name']}")


class Control:
    """The module's control build: an OCI image from the context, a COPY
    of app/ (a relative link and a hard link inside it)."""

    SPEC = {"name": "ctl", "base": {"oci": "oci:image:t"}, "steps": [{"copy": "app", "to": "/srv/app"}],
            "memory_mib": 256}
    APP = [("app/", "d"), ("app/data.txt", "f", b"control data\n"), ("app/sub/", "d"),
           ("app/sub/link", "l", "../data.txt"), ("app/same.txt", "h", "app/data.txt"),
           ("app/run.sh", "f", b"#!/bin/sh\necho ran\n", 0o755)]

    def __init__(self, a):
        self.a = a
        self.image = oci_layout([busybox_layer()], config={"Env": ["PATH=/bin"], "WorkingDir": "/app"})
        self.built = None

    def context(self, extra=()):
        return tar_of(self.image + self.APP + list(extra))

    def again(self):
        """The control request, after an attack: built once (checked in a
        sandbox), then answered by that build."""
        status, t = post_template(self.a, self.SPEC, self.context())
        if self.built is None:
            assert status == 202, (status, t)
            log, _, end = follow(self.a, "ctl", t["build_id"])
            assert end["state"] == "ready", (end, log[-3000:])
            assert "1 layers" in log and "checked" in log, log[-3000:]  # the layer check ran
            sid = self.a.create("ctl")["id"]
            try:
                r = self.a.exec(sid, ["sh", "-c", "stat -c '%n %u:%g' /app /app/owned; cat /srv/app/data.txt "
                                      "/srv/app/sub/link /srv/app/same.txt; readlink /srv/app/sub/link; "
                                      "/srv/app/run.sh"])
                assert r["stdout"] == ("/app 1000:1000\n/app/owned 1000:1000\ncontrol data\ncontrol data\n"
                                       "control data\n../data.txt\nran\n"), r
            finally:
                self.a.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)
            self.built = t["template_id"]
        else:
            assert status == 200 and t["state"] == "ready" and t["template_id"] == self.built, (status, t)


@pytest.fixture(scope="module")
def control(api):
    return Control(api)


@pytest.fixture
def canary():
    """Host paths an attack aims at: a file that must not appear, a
    directory that must stay empty."""
    nonce = secrets.token_hex(6)
    c = {"file": f"/tmp/airlock-canary-{nonce}", "dir": f"/tmp/airlock-canary-dir-{nonce}"}
    os.mkdir(c["dir"])
    os.chmod(c["dir"], 0o1777)  # anyone may write there: only the defence keeps it empty
    yield c
    shutil.rmtree(c["dir"], ignore_errors=True)
    if os.path.lexists(c["file"]):
        os.unlink(c["file"])


def snapshot(a):
    return {"templates": sorted(t["name"] for t in a.api("GET", "/v1/templates")["templates"]
                                if t.get("kind") == "built"),
            "dir": sorted(os.listdir(TEMPLATES))}


def namespace_files(*tops):
    """Files owned by the image namespace's uids under tops."""
    found = []
    for top in tops:
        for dirpath, dirnames, filenames in os.walk(top):
            for n in dirnames + filenames:
                p = os.path.join(dirpath, n)
                try:
                    uid = os.lstat(p).st_uid
                except FileNotFoundError:
                    continue
                if NS_UID_BASE <= uid < NS_UID_BASE + NS_UIDS:
                    found.append(p)
    return found


def namespace_processes():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if NS_UID_BASE <= os.stat(f"/proc/{pid}").st_uid < NS_UID_BASE + NS_UIDS:
                found.append(pid)
        except FileNotFoundError:
            pass
    return found


def assert_nothing_written(a, canary, before):
    assert not os.path.lexists(canary["file"]), "the attack wrote its canary"
    assert os.listdir(canary["dir"]) == [], "the attack wrote into the canary directory"
    assert [e for e in os.listdir("/tmp") if e.startswith("airlock-canary-") and "dir" not in e] == [], \
        "a canary file under /tmp"
    assert snapshot(a) == before, "a template, a build directory or an upload stayed"
    assert namespace_files(a.data_dir, TEMPLATES) == [], "files of the image namespace stayed"
    assert namespace_processes() == [], "processes of the image namespace run on"


# ---- the build context: refused by airlockd on upload ----

def bomb():
    """2 GiB of zeros in 32 files, as a gzip of about 2 MiB: each file's
    header and its zeros are gzip members of their own (a stream of
    members is one gzip stream), the zeros' member made once."""
    zeros = gzip_member(b"\0" * (64 << 20))
    out = []
    for i in range(32):
        info = tarfile.TarInfo(f"zero{i}")
        info.size = 64 << 20
        out += [gzip_member(info.tobuf(tarfile.GNU_FORMAT)), zeros]
    return b"".join(out) + gzip_member(b"\0" * 1024)


CONTEXT_ATTACKS = {
    # name: (entries after the control's context | raw context, what the message shows, why)
    "dotdot": (lambda c: [("../../../../../../../.." + c["file"], "f", b"pwned\n")],
               "../../../../../../../../tmp/airlock-canary-", "climbs out ('..')"),
    "absolute": (lambda c: [(c["file"], "f", b"pwned\n")], "'/tmp/airlock-canary-", "is an absolute path"),
    "symlink-out-then-through": (lambda c: [("out", "l", c["dir"]), ("out/pwned", "f", b"pwned\n")],
                                 "'out' is a symbolic link to '/tmp/airlock-canary-dir-", "an absolute path"),
    "symlink-climbing-out": (lambda c: [("up", "l", "../../../../../../../.." + c["dir"]),
                                        ("up/pwned", "f", b"pwned\n")],
                             "'up' is a symbolic link to '../../", "which climbs out of the context"),
    "file-through-inner-symlink": (lambda c: [("in", "l", "app"), ("in/pwned", "f", b"pwned\n")],
                                   "'in/pwned' goes through the symbolic link 'in'", ""),
    "hardlink-to-passwd": (lambda c: [("pw", "h", "/etc/passwd")],
                           "'pw' is a hard link to '/etc/passwd', outside the context", ""),
    "char-device": (lambda c: [("mem", "c", 1, 1)], "'mem' is a character device", "devices are refused"),
    "setuid": (lambda c: [("app/su", "f", b"#!/bin/sh\n", 0o4755)], "'app/su' is set-user-ID", "setuid"),
    "decompression-bomb": (lambda c: bomb(), "zero", "times its compressed size past 16 MiB"),
    "huge-sparse-file": (lambda c: gnu_sparse("holes", 100 << 30) + b"\0" * 1024,
                         "'holes' is 100 GiB (a sparse file's apparent size)", "at most 1 GiB"),
}


@pytest.mark.parametrize("attack", list(CONTEXT_ATTACKS))
def test_hostile_build_context(api, control, canary, attack):
    make, shown, why = CONTEXT_ATTACKS[attack]
    made = make(canary)
    context = made if isinstance(made, bytes) else control.context(made)
    if attack == "decompression-bomb":
        assert len(context) < 4 << 20  # small on the wire, 2 GiB unpacked
    before = snapshot(api)
    status, body = post_template(api, control.SPEC, context)
    assert status == 400, (attack, status, body)
    msg = body["error"]["message"]
    assert msg.startswith("build context: ") and shown in msg and why in msg, (attack, msg)
    assert_nothing_written(api, canary, before)
    control.again()
    assert_nothing_written(api, canary, snapshot(api))


# ---- the node, straight on its socket: the same check again ----

MAGIC = 0x314B4C41
NODE_REQUEST, NODE_REPLY, NODE_DATA, NODE_END = 64, 65, 67, 68


def node_build(a, req, context):
    """template.build on the node's socket, the context streamed after it."""
    frame = lambda typ, data: struct.pack("<IBBHII", MAGIC, 1, typ, 0, 0, len(data)) + data  # noqa: E731
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(120)
        s.connect(os.path.join(a.data_dir, "run", "node.sock"))
        s.sendall(frame(NODE_REQUEST, json.dumps(req).encode()))
        for i in range(0, len(context), 65536):
            s.sendall(frame(NODE_DATA, context[i:i + 65536]))
        s.sendall(frame(NODE_END, b"{}"))
        head = b""
        while len(head) < 16:
            chunk = s.recv(16 - len(head))
            assert chunk, "the node closed the connection without a reply"
            head += chunk
        magic, _, typ, _, _, length = struct.unpack("<IBBHII", head)
        assert magic == MAGIC and typ == NODE_REPLY
        body = b""
        while len(body) < length:
            body += s.recv(length - len(body))
    return json.loads(body)


def test_the_node_checks_the_context_again(api, control, canary):
    """A hostile context sent to the node as airlockd would, past
    airlockd's check (a stale or compromised control plane): the node's
    own check refuses it before it unpacks or keeps anything. The control:
    the control's own request and context, on the same socket, answered
    by the template built."""
    control.again()
    t = api.api("GET", "/v1/templates/ctl")
    req = {"op": "template.build", "name": t["template_id"], "spec": t["spec"], "context": True}
    before = snapshot(api)
    for entries, shown in (([("../../../../../../../.." + canary["file"], "f", b"pwned\n")], "climbs out ('..')"),
                           ([("pw", "h", "/etc/passwd")], "'pw' is a hard link to '/etc/passwd', outside"),
                           ([("out", "l", canary["dir"]), ("out/x", "f", b"x")], "'out' is a symbolic link to")):
        rep = node_build(api, req, control.context(entries))
        assert rep.get("error", {}).get("code") == "invalid", rep
        assert rep["error"]["message"].startswith("build context: ") and shown in rep["error"]["message"], rep
    assert not [e for e in os.listdir(TEMPLATES) if e.startswith(".upload-") or e.startswith(".context-")]
    assert_nothing_written(api, canary, before)
    rep = node_build(api, req, control.context())
    assert rep.get("state") == "ready" and rep.get("name") == t["template_id"], rep


# ---- an OCI image's layers: refused inside the namespace, before umoci ----

def base_files():
    return [("bin/", "d"), ("etc/", "d"), ("etc/passwd", "f", b"root:x:0:0::/root:/bin/sh\n")]


OCI_ATTACKS = {
    # name: (layers for a canary, what the error shows)
    "layer-climbing-out": (lambda c: [tar_of(base_files() + [("../../../../../../../.." + c["file"], "f", b"x")])],
                           "image layer 1: '../../../../../../../../tmp/airlock-canary-"),
    "whiteout-outside": (lambda c: [tar_of(base_files()), tar_of([("etc/.wh...", "f", b"")])],
                         "image layer 2: 'etc/.wh...' whites out '..'"),
    "symlinked-parent": (lambda c: [tar_of(base_files() + [("evil", "l", c["dir"]), ("evil/pwned", "f", b"x")])],
                         "image layer 1: 'evil/pwned' goes through the symbolic link 'evil'"),
    "symlinked-parent-across-layers": (lambda c: [tar_of(base_files() + [("evil", "l", c["dir"])]),
                                                  tar_of([("evil/pwned", "f", b"x")])],
                                       "image layer 2: 'evil/pwned' goes through the symbolic link 'evil'"),
    "device-node": (lambda c: [tar_of(base_files() + [("dev/", "d"), ("dev/kmem", "c", 1, 2)])],
                    "image layer 1: 'dev/kmem' is a character device"),
    # nothing under the link: the layer is fine, it is oci.sh that must
    # not write through it (as root it once wrote the image's config there)
    "etc-is-a-link-into-the-host": (lambda c: [tar_of([("bin/", "d"), ("etc", "l", c["dir"])])],
                                    "the image's /etc is a symbolic link"),
    "too-many-layers": (lambda c: [tar_of(base_files())] + [tar_of([(f"l{i}", "f", b"x")]) for i in range(128)],
                        "the image has 129 layers: at most 128"),
}


@pytest.mark.parametrize("attack", list(OCI_ATTACKS) + ["lying-manifest"])
def test_hostile_oci_image(api, control, canary, attack):
    if attack == "lying-manifest":
        image, shown = oci_layout([tar_of(base_files())], lie=True), "Digest did not match"
    else:
        make, shown = OCI_ATTACKS[attack]
        image = oci_layout(make(canary))
    name = "hostile-" + attack
    before = snapshot(api)
    status, t = post_template(api, {"name": name, "base": {"oci": "oci:image:t"}}, tar_of(image))
    assert status == 202, (attack, status, t)
    log, progress, end = follow(api, name, t["build_id"])
    assert end["state"] == "failed" and shown in end.get("error", ""), (attack, end, log[-2000:])
    # the refusal is the log's own line, and no VM booted: the base step
    # was the build's last
    assert "oci.sh: error: " in log and shown in log, log[-2000:]
    assert [p["step_text"] for p in progress] == ["base oci:image:t"], progress
    api.api("DELETE", f"/v1/templates/{name}", expect=204)
    assert_nothing_written(api, canary, before)
    control.again()
    assert_nothing_written(api, canary, snapshot(api))


def test_oci_image_links_into_the_host_are_kept_not_followed(api, control, canary):
    """An image whose /etc/hostname and /etc/hosts are links to host paths
    (the canaries): images/oci.sh adds those files only where the image
    has none, never through a link (as root it would have written the
    host's file), and its namespace could not have written them anyway.
    The image builds, its links are the guest's own; the canaries stay
    absent. The control: the module's build, requested again."""
    before = snapshot(api)
    links = tar_of([("etc/hostname", "l", canary["file"]), ("etc/hosts", "l", canary["dir"] + "/hosts")])
    image = oci_layout([busybox_layer(), links], config={"Env": ["PATH=/bin"]})
    status, t = post_template(api, {"name": "links", "base": {"oci": "oci:image:t"}, "memory_mib": 256},
                              tar_of(image))
    assert status == 202, (status, t)
    log, _, end = follow(api, "links", t["build_id"])
    assert end["state"] == "ready", (end, log[-3000:])
    sid = api.create("links")["id"]
    try:
        # (the guest agent writes its own /etc/hostname at boot)
        r = api.exec(sid, ["readlink", "/etc/hosts"])
        assert r["stdout"] == f"{canary['dir']}/hosts\n", r
    finally:
        api.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)
    api.api("DELETE", "/v1/templates/links", expect=204)
    assert_nothing_written(api, canary, before)
    control.again()
