"""The S3 lab itself (tests/s3lab.py), no Airlock, no VM: Swift's S3 API
answering curl --aws-sigv4 (curl 7.88, what libcurl does for lib/objstore's
S3 backend) like S3 does — round trips, ranges, listings, multipart
uploads, and the refusals a SigV4 client relies on, each next to the same
request with the right values (its control) — and the lab's own promises:
the proxy killed mid-upload and back on its port, nothing left after
stop(), the run mode's environment and exit status. Needs python3-swift
and curl (scripts/deps.sh --test), and only AIRLOCK_TEST_VOLUME set for
the conftest:

    AIRLOCK_TEST_VOLUME=$PWD/build/test-vol \\
      /usr/bin/python3 -m pytest -p no:cacheprovider -q tests/integration/test_s3lab.py

What curl 7.88 needs from its caller (see curl()): x-amz-content-sha256
given as a header (curl signs whatever value the header has, and sends
none by itself, which s3api refuses); the query string already in SigV4's
canonical form (sorted, "uploads=", values percent-encoded: curl signs it
as written); the path percent-encoded as SigV4 does (unreserved characters
as they are, everything else %XX upper-case)."""

import base64
import hashlib
import http.client
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

import harness
import pytest

import s3lab

MiB = 1024 * 1024
UNSIGNED = "UNSIGNED-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
CURL = shutil.which("curl")


@pytest.fixture(scope="module")
def lab():
    if CURL is None:
        pytest.fail("curl not found: install it (scripts/deps.sh --test)")
    with s3lab.SwiftS3() as lab:
        yield lab


_buckets = iter(range(1, 1_000_000))


@pytest.fixture
def bucket(lab):
    return lab.make_bucket(f"lab-{os.getpid()}-{next(_buckets)}")


class Reply:
    def __init__(self, status, body, headers):
        self.status = status
        self.body = body
        self.headers = headers

    @property
    def code(self):
        return s3lab.S3Response(self.status, self.headers, self.body).error_code

    def __repr__(self):
        return f"<curl {self.status} {self.body[:400]!r}>"


def curl(lab, tmp_path, path, *args, sha=UNSIGNED, secret=None):
    """curl --aws-sigv4 against the lab: path with its query, already
    encoded as it is to be signed; args more curl arguments (-X, -T, -H).
    The credentials go in the URL, the access key's colon as %3A: curl's
    --user cuts "test:tester:SECRET" at the first colon (the access key
    would be "test"); libcurl's CURLOPT_USERNAME and CURLOPT_PASSWORD,
    given apart, have no such problem."""
    body, hdrs = tmp_path / "curl.body", tmp_path / "curl.headers"
    user = urllib.parse.quote(lab.access_key, safe="")
    url = f"http://{user}:{secret or lab.secret_key}@127.0.0.1:{lab.port}{path}"
    cmd = [CURL, "-sS", "--noproxy", "*", "--aws-sigv4", f"aws:amz:{lab.region}:s3",
           "-H", f"x-amz-content-sha256: {sha}", "-o", str(body), "-D", str(hdrs),
           "-w", "%{http_code}", *[str(a) for a in args], url]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"curl exit status {r.returncode}: {r.stderr}"
    headers = {}
    for line in hdrs.read_text(errors="replace").splitlines()[1:]:
        k, sep, v = line.partition(":")
        if sep:
            headers[k.strip().lower()] = v.strip()
    return Reply(int(r.stdout), body.read_bytes() if body.exists() else b"", headers)


def random_file(tmp_path, name, size):
    p = tmp_path / name
    p.write_bytes(os.urandom(size))
    return p


def sha256_of(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def md5_b64(data):
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def keys_of(listing):
    return re.findall(rb"<Key>([^<]*)</Key>", listing)


# ---- S3 through curl ---------------------------------------------------------

def test_put_get_round_trip(lab, bucket, tmp_path):
    f = random_file(tmp_path, "obj", 3 * MiB + 17)
    r = curl(lab, tmp_path, f"/{bucket}/dir/obj", "-T", f, sha=sha256_of(f))
    assert r.status == 200, r
    assert r.headers["etag"] == '"%s"' % hashlib.md5(f.read_bytes()).hexdigest()
    r = curl(lab, tmp_path, f"/{bucket}/dir/obj")
    assert r.status == 200, r
    assert r.body == f.read_bytes()
    # also signed by the lab's own SigV4 (Python), not only curl's
    assert lab.request("GET", f"/{bucket}/dir/obj").body == f.read_bytes()


def test_ranged_get(lab, bucket, tmp_path):
    f = random_file(tmp_path, "obj", 2 * MiB)
    assert curl(lab, tmp_path, f"/{bucket}/obj", "-T", f).status == 200
    r = curl(lab, tmp_path, f"/{bucket}/obj", "-H", "Range: bytes=1048570-1048599")
    assert r.status == 206, r
    assert r.body == f.read_bytes()[1048570:1048600]
    assert r.headers["content-range"] == f"bytes 1048570-1048599/{2 * MiB}"
    r = curl(lab, tmp_path, f"/{bucket}/obj", "-H", "Range: bytes=-10")
    assert (r.status, r.body) == (206, f.read_bytes()[-10:])
    r = curl(lab, tmp_path, f"/{bucket}/obj", "-H", f"Range: bytes={2 * MiB}-")
    assert (r.status, r.code) == (416, "InvalidRange"), r
    # control: no range, the whole object
    r = curl(lab, tmp_path, f"/{bucket}/obj")
    assert (r.status, r.body) == (200, f.read_bytes())


def test_wrong_secret_refused(lab, bucket, tmp_path):
    f = random_file(tmp_path, "obj", 1000)
    assert curl(lab, tmp_path, f"/{bucket}/obj", "-T", f).status == 200
    r = curl(lab, tmp_path, f"/{bucket}/obj", secret="0" * 40)
    assert (r.status, r.code) == (403, "SignatureDoesNotMatch"), r
    r = curl(lab, tmp_path, f"/{bucket}/obj2", "-T", f, secret="0" * 40)
    assert (r.status, r.code) == (403, "SignatureDoesNotMatch"), r
    assert curl(lab, tmp_path, f"/{bucket}/obj2").code == "NoSuchKey"
    # the access key alone is no credential either
    r = lab.request("GET", f"/{bucket}/obj", access_key="test:nobody")
    assert r.status == 403, r
    # control
    r = curl(lab, tmp_path, f"/{bucket}/obj")
    assert (r.status, r.body) == (200, f.read_bytes())


def test_wrong_region_refused(lab, bucket, tmp_path):
    r = curl(lab, tmp_path, f"/{bucket}?list-type=2", "--aws-sigv4", "aws:amz:eu-west-1:s3")
    assert (r.status, r.code) == (400, "AuthorizationHeaderMalformed"), r
    assert curl(lab, tmp_path, f"/{bucket}?list-type=2").status == 200


def test_bad_content_md5_refused(lab, bucket, tmp_path):
    f = random_file(tmp_path, "obj", 100_000)
    data = f.read_bytes()
    r = curl(lab, tmp_path, f"/{bucket}/obj", "-T", f, "-H", f"Content-MD5: {md5_b64(b'other')}")
    assert (r.status, r.code) == (400, "BadDigest"), r
    r = curl(lab, tmp_path, f"/{bucket}/obj", "-T", f, "-H", "Content-MD5: not-base64!")
    assert (r.status, r.code) == (400, "InvalidDigest"), r
    assert curl(lab, tmp_path, f"/{bucket}/obj").code == "NoSuchKey"
    # control
    r = curl(lab, tmp_path, f"/{bucket}/obj", "-T", f, "-H", f"Content-MD5: {md5_b64(data)}")
    assert r.status == 200, r
    assert curl(lab, tmp_path, f"/{bucket}/obj").body == data


def test_wrong_content_sha256_refused(lab, bucket, tmp_path):
    """s3api 2.30 checks x-amz-content-sha256 against the body whenever
    the request has a Content-Length: a mismatch is 400 BadDigest (AWS
    says XAmzContentSHA256Mismatch), found at the body's end, and nothing
    is stored. curl signs the header's value, so the signature itself
    verifies. Without the header every request is refused."""
    f = random_file(tmp_path, "obj", MiB + 1)
    r = curl(lab, tmp_path, f"/{bucket}/obj", "-T", f, sha=hashlib.sha256(b"x").hexdigest())
    assert (r.status, r.code) == (400, "BadDigest"), r
    assert curl(lab, tmp_path, f"/{bucket}/obj").code == "NoSuchKey"
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    r = curl(lab, tmp_path, f"/{bucket}/empty", "-T", empty, sha=sha256_of(f))
    assert (r.status, r.code) == (400, "BadDigest"), r
    # no header at all (what curl 7.88 sends unless told)
    r = subprocess.run([CURL, "-sS", "--noproxy", "*", "--aws-sigv4", f"aws:amz:{lab.region}:s3",
                        f"http://{urllib.parse.quote(lab.access_key, safe='')}:{lab.secret_key}"
                        f"@127.0.0.1:{lab.port}/{bucket}?list-type=2"],
                       capture_output=True, timeout=60)
    assert b"<Code>InvalidRequest</Code>" in r.stdout and b"x-amz-content-sha256" in r.stdout
    # controls: the right hash, and UNSIGNED-PAYLOAD
    assert curl(lab, tmp_path, f"/{bucket}/obj", "-T", f, sha=sha256_of(f)).status == 200
    assert curl(lab, tmp_path, f"/{bucket}/empty", "-T", empty, sha=EMPTY_SHA256).status == 200
    assert curl(lab, tmp_path, f"/{bucket}/obj2", "-T", f, sha=UNSIGNED).status == 200
    assert curl(lab, tmp_path, f"/{bucket}/obj").body == f.read_bytes()


def test_object_listing(lab, bucket, tmp_path):
    f = random_file(tmp_path, "obj", 10)
    names = ["a/b/one", "a/b/two", "a/c", "z", "with space+plus"]
    for n in names:
        r = curl(lab, tmp_path, f"/{bucket}/{urllib.parse.quote(n, safe='/-_.~')}", "-T", f)
        assert r.status == 200, (n, r)
    r = curl(lab, tmp_path, f"/{bucket}?list-type=2")
    assert r.status == 200, r
    assert keys_of(r.body) == sorted(n.encode() for n in names)
    r = curl(lab, tmp_path, f"/{bucket}?list-type=2&prefix=a%2Fb")
    assert keys_of(r.body) == [b"a/b/one", b"a/b/two"], r
    r = curl(lab, tmp_path, f"/{bucket}?delimiter=%2F&list-type=2")
    assert keys_of(r.body) == [b"with space+plus", b"z"]
    assert b"<CommonPrefixes><Prefix>a/</Prefix></CommonPrefixes>" in r.body
    r = curl(lab, tmp_path, f"/{bucket}?list-type=2&max-keys=2")
    assert keys_of(r.body) == [b"a/b/one", b"a/b/two"]
    assert b"<IsTruncated>true</IsTruncated>" in r.body


def test_curl_signs_query_and_path_as_written(lab, bucket, tmp_path):
    """curl 7.88 puts the URL's query and path into the canonical request
    as they are: only the canonical forms verify."""
    f = random_file(tmp_path, "obj", 10)
    pairs = [  # (canonical: verifies, as written otherwise: refused)
        (f"/{bucket}?list-type=2&prefix=a", f"/{bucket}?prefix=a&list-type=2"),  # sorted
        (f"/{bucket}?list-type=2&prefix=a%2Fb", f"/{bucket}?list-type=2&prefix=a/b"),  # encoded
        (f"/{bucket}?uploads=", f"/{bucket}?uploads"),  # "=" after an empty value
    ]
    for good, bad in pairs:
        assert curl(lab, tmp_path, good).status == 200, good
        r = curl(lab, tmp_path, bad)
        assert (r.status, r.code) == (403, "SignatureDoesNotMatch"), (bad, r)
    for good, bad in [("a%20b%2Bc", "a+b"), ("x~y", "x%7Ey"), ("p%2Bq", "p%2bq")]:
        assert curl(lab, tmp_path, f"/{bucket}/{good}", "-T", f).status == 200, good
        r = curl(lab, tmp_path, f"/{bucket}/{bad}", "-T", f)
        assert (r.status, r.code) == (403, "SignatureDoesNotMatch"), (bad, r)


def _upload_id(body):
    return re.search(rb"<UploadId>([^<]+)</UploadId>", body).group(1).decode()


def test_multipart_upload(lab, bucket, tmp_path):
    p1 = random_file(tmp_path, "p1", 5 * MiB)  # every part but the last >= 5 MiB
    p2 = random_file(tmp_path, "p2", 1234)
    r = curl(lab, tmp_path, f"/{bucket}/big?uploads=", "-X", "POST")
    assert r.status == 200, r
    up = _upload_id(r.body)
    etags = []
    for n, p in ((1, p1), (2, p2)):
        r = curl(lab, tmp_path, f"/{bucket}/big?partNumber={n}&uploadId={up}", "-T", p,
                 sha=sha256_of(p))
        assert r.status == 200, r
        etags.append(r.headers["etag"])
    r = curl(lab, tmp_path, f"/{bucket}/big?uploadId={up}")
    assert r.status == 200, r
    assert b"<PartNumber>1</PartNumber>" in r.body and b"<PartNumber>2</PartNumber>" in r.body
    r = curl(lab, tmp_path, f"/{bucket}?uploads=")
    assert r.status == 200 and up.encode() in r.body, r
    xml = "<CompleteMultipartUpload>" + "".join(
        f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>"
        for n, e in enumerate(etags, 1)) + "</CompleteMultipartUpload>"
    done = tmp_path / "complete.xml"
    done.write_text(xml)
    r = curl(lab, tmp_path, f"/{bucket}/big?uploadId={up}", "-X", "POST", "--data-binary",
             f"@{done}", sha=hashlib.sha256(xml.encode()).hexdigest())
    assert r.status == 200 and b"<CompleteMultipartUploadResult" in r.body, r
    assert b'-2"</ETag>' in r.body, r  # an S3 multipart ETag: MD5 of the parts' MD5s, "-2"
    r = curl(lab, tmp_path, f"/{bucket}/big")
    assert r.body == p1.read_bytes() + p2.read_bytes()
    r = curl(lab, tmp_path, f"/{bucket}/big", "-H", f"Range: bytes={5 * MiB - 2}-{5 * MiB + 1}")
    assert (r.status, r.body) == (206, (p1.read_bytes() + p2.read_bytes())[5 * MiB - 2:5 * MiB + 2])
    assert keys_of(curl(lab, tmp_path, f"/{bucket}?list-type=2").body) == [b"big"]

    # a part under 5 MiB before the last: refused at completion
    r = curl(lab, tmp_path, f"/{bucket}/small?uploads=", "-X", "POST")
    up2 = _upload_id(r.body)
    small = []
    for n in (1, 2):
        r = curl(lab, tmp_path, f"/{bucket}/small?partNumber={n}&uploadId={up2}", "-T", p2)
        small.append(r.headers["etag"])
    done.write_text("<CompleteMultipartUpload>" + "".join(
        f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>"
        for n, e in enumerate(small, 1)) + "</CompleteMultipartUpload>")
    r = curl(lab, tmp_path, f"/{bucket}/small?uploadId={up2}", "-X", "POST", "--data-binary",
             f"@{done}")
    assert (r.status, r.code) == (400, "EntityTooSmall"), r

    # abort: the upload and its parts are gone
    r = curl(lab, tmp_path, f"/{bucket}/small?uploadId={up2}", "-X", "DELETE")
    assert r.status == 204, r
    r = curl(lab, tmp_path, f"/{bucket}/small?uploadId={up2}")
    assert (r.status, r.code) == (404, "NoSuchUpload"), r
    assert up2.encode() not in curl(lab, tmp_path, f"/{bucket}?uploads=").body
    assert curl(lab, tmp_path, f"/{bucket}/small").code == "NoSuchKey"


# ---- the lab's own promises ----------------------------------------------------

def test_key_files(lab, tmp_path):
    ak, sk = lab.write_key_files(str(tmp_path))
    for path, value in ((ak, lab.access_key), (sk, lab.secret_key)):
        st = os.stat(path)
        assert st.st_mode & 0o777 == 0o600 and st.st_uid == os.geteuid()
        assert open(path).read() == value
    assert lab.access_key == "test:tester" and len(lab.secret_key) == 40
    assert lab.endpoint == f"http://127.0.0.1:{lab.port}" and lab.region == "us-east-1"


def _object_server_writing(lab):
    """Whether the object server has an object's file open (a PUT under
    way): an unnamed O_TMPFILE in the object's directory where the
    filesystem has them (ext4, XFS, btrfs; one in tmp/ elsewhere), so its
    open files tell, not the directories."""
    pid = lab.procs["object"].pid
    d1 = os.path.join(lab.dir, "devices", "d1")
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith((d1 + "/objects/", d1 + "/tmp/")):
                return True
        except OSError:
            pass
    return False


def test_proxy_killed_mid_upload_and_back(lab, bucket):
    assert lab.request("PUT", f"/{bucket}/before", body=b"kept").status == 200
    size = 4 * MiB
    first = os.urandom(MiB)
    h = s3lab.sigv4_headers("PUT", f"127.0.0.1:{lab.port}", f"/{bucket}/cut", [],
                            {"content-length": str(size)}, UNSIGNED, lab.access_key,
                            lab.secret_key, lab.region)
    c = http.client.HTTPConnection("127.0.0.1", lab.port, timeout=30)
    c.putrequest("PUT", f"/{bucket}/cut", skip_host=True, skip_accept_encoding=True)
    for k, v in h.items():
        c.putheader(k, v)
    c.endheaders()
    c.send(first)  # a quarter of it: the proxy waits for the rest
    # until the object server writes it: the upload is under way
    deadline = time.monotonic() + 30
    while not _object_server_writing(lab):
        assert time.monotonic() < deadline, "the upload never reached the object server"
        time.sleep(0.02)
    port = lab.port
    lab.kill_proxy()
    with pytest.raises(OSError):
        for _ in range(3 * 64):  # the rest, into a connection that is gone
            c.send(os.urandom(16 * 1024))
        c.getresponse()
    c.close()
    with pytest.raises(OSError):
        http.client.HTTPConnection("127.0.0.1", port, timeout=5).request("GET", "/healthcheck")
    lab.restart_proxy()
    assert lab.port == port and lab.endpoint == f"http://127.0.0.1:{port}"
    assert lab.request("GET", f"/{bucket}/cut").error_code == "NoSuchKey"
    r = lab.request("GET", f"/{bucket}/before")
    assert (r.status, r.body) == (200, b"kept")
    # the restarted proxy takes whole uploads again
    data = os.urandom(size)
    assert lab.request("PUT", f"/{bucket}/cut", body=data).status == 200
    assert lab.request("GET", f"/{bucket}/cut").body == data


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


@pytest.fixture
def base_dir():
    """An empty directory the servers' user can pass through (pytest's
    tmp_path is under a 0700 directory of root's)."""
    d = tempfile.mkdtemp(prefix="airlock-s3lab-test-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d)


def test_stop_leaves_nothing(base_dir):
    lab = s3lab.SwiftS3(base_dir=base_dir)
    lab.start()
    d, pids = lab.dir, lab.pids()
    try:
        assert len(pids) == 4 and all(_alive(p) for p in pids)
        assert os.path.dirname(d) == base_dir and os.path.isdir(d)
        if os.geteuid() == 0:  # the servers run as swift, in a directory of theirs
            swift = pwd.getpwnam("swift").pw_uid
            assert os.stat(d).st_uid == swift
            assert all(os.stat(f"/proc/{p}").st_uid == swift for p in pids)
        lab.make_bucket("stop-test")
        lab.kill_proxy()  # a server already dead is no obstacle
    finally:
        lab.stop()
    assert not any(_alive(p) for p in pids)
    assert harness.procs_naming(d) == []
    assert not os.path.exists(d) and os.listdir(base_dir) == []
    lab.stop()  # idempotent


def test_start_failure_says_why_and_cleans_up(base_dir, monkeypatch):
    monkeypatch.setattr(s3lab, "_proxy_conf", lambda *a: "[DEFAULT]\nbind_port = nope\n")
    lab = s3lab.SwiftS3(base_dir=base_dir)
    with pytest.raises(s3lab.LabError) as e:
        lab.start()
    msg = str(e.value)
    assert "the proxy server exited (status 1)" in msg and "No section 'proxy-server'" in msg, msg
    assert "--- proxy.log" in msg
    assert os.listdir(base_dir) == [] and lab.pids() == []
    assert harness.procs_naming(base_dir) == []

    monkeypatch.setattr(s3lab, "SWIFT_S3API", "/nonexistent/s3api.py")
    with pytest.raises(s3lab.LabError, match=r"install python3-swift \(scripts/deps.sh --test\)"):
        s3lab.SwiftS3(base_dir=base_dir).start()


def test_run_mode(tmp_path, base_dir):
    script = r"""
set -eu
for v in ENDPOINT REGION BUCKET ACCESS_KEY_FILE SECRET_KEY_FILE; do
  eval "test -n \"\${AIRLOCK_TEST_S3_$v}\""
done
stat -c %a "$AIRLOCK_TEST_S3_ACCESS_KEY_FILE" "$AIRLOCK_TEST_S3_SECRET_KEY_FILE" > "$OUT/modes"
ak=$(sed 's/:/%3A/' "$AIRLOCK_TEST_S3_ACCESS_KEY_FILE")
sk=$(cat "$AIRLOCK_TEST_S3_SECRET_KEY_FILE")
hp=${AIRLOCK_TEST_S3_ENDPOINT#http://}
curl -sS --noproxy '*' --aws-sigv4 "aws:amz:$AIRLOCK_TEST_S3_REGION:s3" \
  -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -o "$OUT/listing" -w '%{http_code}' \
  "http://$ak:$sk@$hp/$AIRLOCK_TEST_S3_BUCKET?list-type=2" > "$OUT/status"
dirname "$AIRLOCK_TEST_S3_ACCESS_KEY_FILE" > "$OUT/keydir"
exit 3
"""
    out = tmp_path / "out"
    out.mkdir()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([os.path.join(here, "unit", "with-swift.sh"), "sh", "-c", script],
                       env=dict(os.environ, OUT=str(out), TMPDIR=base_dir),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    assert (out / "status").read_text() == "200", r.stderr
    assert b"<ListBucketResult" in (out / "listing").read_bytes()
    assert (out / "modes").read_text().split() == ["600", "600"]
    assert not os.path.exists((out / "keydir").read_text().strip())
    assert os.listdir(base_dir) == []

    r = subprocess.run([sys.executable, os.path.join(here, "s3lab.py"), "run"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "usage" in r.stderr
