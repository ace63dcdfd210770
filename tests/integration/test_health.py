"""Health says what the node is doing: each default template's state, and a
template build that failed as a failure with its log (not "still
building" forever)."""

import json
import os
import shutil
import time

import pytest

import tempfile

from harness import ROOT, VOLUME, volume_tempdir


def health(a):
    status, _, body = a.request("GET", "/v1/health", auth=False)
    return status, json.loads(body)


def wait_health(a, pred, timeout=180):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = health(a)
            if pred(*last):
                return last
        except (OSError, ValueError):
            pass
        time.sleep(0.3)
    raise AssertionError(f"health never matched, last {last}\n{a.log_tail(60)}")


def by_name(body):
    return {t["name"]: t for t in body["templates"]}


def test_health_lists_ready_templates(airlock_factory):
    a = airlock_factory(prebuild="minimal")
    status, body = health(a)
    assert status == 200 and body["status"] == "ok"
    assert by_name(body)["minimal"]["state"] == "ready"


@pytest.fixture
def broken_images():
    """The same images with one recipe that fails the way a broken install
    does, where the node's user can read them."""
    top = volume_tempdir("images-")
    os.chmod(top, 0o755)
    images = os.path.join(top, "images")
    shutil.copytree(os.path.join(ROOT, "images"), images)
    with open(os.path.join(images, "templates", "broken.sh"), "w") as f:
        f.write("#!/bin/bash\necho 'broken.sh: error: E: Unable to locate package no-such-package' >&2\nexit 3\n")
    yield images
    shutil.rmtree(top)


def test_failed_template_build_is_reported_with_its_log(airlock_factory, broken_images):
    images = broken_images
    a = airlock_factory(prebuild="minimal,broken", env={"AIRLOCK_IMAGES_DIR": images}, wait=False)
    status, body = wait_health(a, lambda s, b: b.get("error", {}).get("code") == "template_failed")
    assert status == 503
    msg = body["error"]["message"]
    assert "template broken failed" in msg and "log" in msg, msg
    # what the recipe said last, not an errno
    assert "Unable to locate package no-such-package" in msg, msg
    broken = by_name(body)["broken"]
    assert broken["state"] == "failed" and broken["error"]
    # the log it names holds what the recipe said
    with open(broken["log"]) as f:
        assert "Unable to locate package no-such-package" in f.read()
    # control: the template that built is usable all the same
    assert by_name(body)["minimal"]["state"] == "ready"
    with open(os.path.join(a.data_dir, "control", "admin.token")) as f:
        a.token = f.read().strip()
    sid = a.create("minimal")["id"]
    assert a.exec(sid, ["echo", "ok"])["stdout"] == "ok\n"
    assert a.request("DELETE", f"/v1/sandboxes/{sid}")[0] == 204


def test_prebuild_without_recipe_is_a_failure(airlock_factory):
    a = airlock_factory(prebuild="minimal,nosuch", wait=False)
    status, body = wait_health(a, lambda s, b: b.get("error", {}).get("code") == "template_failed")
    assert status == 503 and "nosuch" in body["error"]["message"]
    assert "no recipe" in by_name(body)["nosuch"]["error"]
    # the failure of one does not hide the others' state
    status, body = wait_health(a, lambda s, b: by_name(b)["minimal"]["state"] == "ready")
    assert status == 503 and body["error"]["code"] == "template_failed"
