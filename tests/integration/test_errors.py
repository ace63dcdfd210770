"""Bad input gets the right error and leaves nothing behind."""

import json
import os

from conftest import qemu_pids


def error_of(resp):
    status, _, body = resp
    err = json.loads(body)["error"]
    assert err["code"] and err["message"]
    return status, err


def test_bad_inputs(airlock):
    a = airlock
    sid = a.create("minimal")["id"]

    # authentication
    assert error_of(a.request("GET", "/v1/sandboxes", auth=False))[0] == 401
    assert error_of(a.request("GET", "/v1/sandboxes", token="alk_wrong"))[0] == 401
    assert error_of(a.request("POST", "/v1/sandboxes", {"template": "minimal"}, auth=False))[0] == 401

    # malformed bodies and fields
    assert error_of(a.request("POST", "/v1/sandboxes", b"{not json",
                              headers={"Content-Type": "application/json"}))[0] == 400
    assert error_of(a.request("POST", "/v1/sandboxes", {"template": 42}))[0] == 400
    assert error_of(a.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": []}))[0] == 400
    assert error_of(a.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "ls"}))[0] == 400
    assert error_of(a.request("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"], "env": {"A": 1}}))[0] == 400

    # unknown things
    status, err = error_of(a.request("POST", "/v1/sandboxes", {"template": "no-such-template"}))
    assert status == 404 and "no-such-template" in err["message"]
    assert error_of(a.request("GET", "/v1/sandboxes/sbx-0000000000000000"))[0] == 404
    assert error_of(a.request("DELETE", "/v1/sandboxes/sbx-0000000000000000"))[0] == 404
    assert error_of(a.request("POST", "/v1/sandboxes/sbx-0000000000000000/exec", {"cmd": ["true"]}))[0] == 404
    assert error_of(a.request("GET", "/v1/sessions/ses-0000000000000000/events"))[0] == 404
    assert error_of(a.request("GET", "/v1/nothing-here"))[0] == 404

    # paths
    for bad in ["/root/../etc/passwd", "relative/path", "", "/a/..", "/" + "x" * 5000]:
        q = f"/v1/sandboxes/{sid}/files?path={bad}"
        assert error_of(a.request("GET", q))[0] == 400, bad
        assert error_of(a.request("PUT", q, body=b"x"))[0] == 400, bad
    assert error_of(a.request("GET", f"/v1/sandboxes/{sid}/files"))[0] == 400
    assert error_of(a.request("GET", f"/v1/sandboxes/{sid}/ls?path=../"))[0] == 400

    # bodies over their limits
    huge = b'{"template":"' + b"a" * (2 << 20) + b'"}'
    assert error_of(a.request("POST", "/v1/sandboxes", huge,
                              headers={"Content-Type": "application/json"}))[0] == 413

    # none of that created anything
    assert [s["id"] for s in a.api("GET", "/v1/sandboxes")["sandboxes"]] == [sid]
    assert os.listdir(os.path.join(a.data_dir, "sandboxes")) == [sid]
    assert len(qemu_pids(a.data_dir)) == 1
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
    assert os.listdir(os.path.join(a.data_dir, "sandboxes")) == []
    assert qemu_pids(a.data_dir) == []
