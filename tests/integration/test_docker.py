"""Docker in a sandbox (docs/images.md, "templates/docker.sh"): the `docker`
template's dockerd, running since its build, pulls from an OCI registry on
the test internet (Debian's docker-registry behind HTTPS of the test CA:
tests/netlab.py start_registry) through the sandbox's egress gateway, under
its policy; `docker run` prints the image's output; a registry the policy
does not allow is refused by the gateway, the allowed one the control in
the same test; a private registry's password, an Airlock secret, is put
into the pulls by the gateway."""

import json
import time

import pytest

from netlab import internet, wait_log  # noqa: F401

DOCKER_BUILD_TIMEOUT = 1800  # the template's first build under TCG: the rootfs, then dockerd's start
IMAGES = {
    "hello:1": "echo hello from the test registry",
    "ticker:1": "while true; do date +%s >> /data/ticks; sleep 1; done",
}


@pytest.fixture
def docker_lab(airlock_factory, internet):  # noqa: F811
    internet.start_registry(IMAGES)
    a = airlock_factory(env=internet.env(), prebuild="minimal,docker", wait=False)
    a.wait_built(DOCKER_BUILD_TIMEOUT)
    return a, internet


def _docker(a, sid, cmd, timeout_s=300):
    """A shell line in the sandbox: {exit_code, stdout, stderr}."""
    return a.exec(sid, ["sh", "-c", cmd], timeout_s=timeout_s)


def test_docker_run_from_the_registry_through_the_gateway(docker_lab):
    """docker pull and run of an image from registry.test, allowed by name:
    it prints its output inside the sandbox; blocked-registry.test (the
    same registry, another name) is refused by the gateway and its refusal
    logged, before and after the allowed pull; a container's own
    connections pass the same gateway: a.test allowed, e.test refused."""
    a, net = docker_lab
    policy = {"allow": [{"host": "registry.test"}, {"host": "a.test"}]}
    sid = a.api("POST", "/v1/sandboxes", {"template": "docker", "network": policy}, expect=201)["id"]

    denied = _docker(a, sid, "docker pull blocked-registry.test/hello:1 2>&1; echo rc=$?")
    assert "rc=0" not in denied["stdout"], denied
    wait_log(a, sid, lambda e: "blocked-registry.test" in json.dumps(e),
             "refusing blocked-registry.test", timeout=30)

    run = _docker(a, sid, "docker run --rm registry.test/hello:1")
    assert run["exit_code"] == 0 and run["stdout"] == "hello from the test registry\n", run

    again = _docker(a, sid, "docker pull blocked-registry.test/hello:1 2>&1; echo rc=$?")
    assert "rc=0" not in again["stdout"], again

    out = _docker(a, sid, "docker run --rm registry.test/hello:1 sh -c "
                          "'wget -q -O - http://a.test/hello.txt; wget -q -T 5 -O - http://e.test/ || echo refused'")
    assert out["stdout"] == "hello from the test internet\nrefused\n", out
    assert not net.sink_hits(), "a container's connection to e.test got out"


def _ticks(a, sid):
    out = _docker(a, sid, "wc -l < /srv/ticks 2>/dev/null || echo 0")
    return int(out["stdout"].strip() or 0)


def _ticking(a, sid, what, after=None):
    """Waits until the ticker container has written a line more than it
    had (after, default: now): it runs."""
    start = _ticks(a, sid) if after is None else after
    deadline = time.monotonic() + 120
    while _ticks(a, sid) <= start:
        assert time.monotonic() < deadline, f"the container does not run {what}"
        time.sleep(1)
    running = _docker(a, sid, "docker inspect -f '{{.State.Running}}' ticker")
    assert running["stdout"] == "true\n", (what, running)


def test_containers_run_on_through_the_sandbox_lifecycle(docker_lab):
    """A container started in the sandbox (writing a line a second to a
    bind-mounted file) runs on across pause and resume, a full snapshot and
    the rollback to it (the line count back to the snapshot's, then
    growing), a fork (the child's copy runs too) and a suspend and wake."""
    a, _ = docker_lab
    sid = a.api("POST", "/v1/sandboxes", {"template": "docker", "network": {"allow": [{"host": "registry.test"}]}},
                expect=201)["id"]
    started = _docker(a, sid, "mkdir -p /srv && docker run -d --name ticker -v /srv:/data registry.test/ticker:1")
    assert started["exit_code"] == 0, started
    _ticking(a, sid, "after its start")

    a.api("POST", f"/v1/sandboxes/{sid}/pause?wait=true", expect=200)
    a.api("POST", f"/v1/sandboxes/{sid}/resume?wait=true", expect=200)
    _ticking(a, sid, "after pause and resume")

    snap = a.api("POST", f"/v1/sandboxes/{sid}/snapshots", {"kind": "full"}, expect=201)["id"]
    at_snap = _ticks(a, sid)
    _ticking(a, sid, "after the snapshot", after=at_snap + 2)
    op = a.api("POST", f"/v1/sandboxes/{sid}/rollback?wait=true", {"snapshot": snap}, expect=200)
    assert op["state"] == "succeeded", op
    back = _ticks(a, sid)
    assert back <= at_snap + 2, (back, at_snap)  # the file went back with the disk and memory
    _ticking(a, sid, "after the rollback", after=back)

    fork = a.api("POST", f"/v1/sandboxes/{sid}/fork?wait=true", expect=200)
    child = fork["result"]["sandbox"]["id"]
    _ticking(a, child, "in the fork's child")
    _ticking(a, sid, "in the fork's parent")
    a.request("DELETE", f"/v1/sandboxes/{child}")

    op = a.api("POST", f"/v1/sandboxes/{sid}/suspend?wait=true", expect=200)
    assert op["state"] == "succeeded", op
    a.api("POST", f"/v1/sandboxes/{sid}/wake?wait=true", expect=200)
    _ticking(a, sid, "after a suspend and a wake")


def test_docker_build_and_compose(docker_lab):
    """docker build of a Dockerfile FROM an image of the registry (a RUN
    step, a CMD) and a run of the result; docker compose up of a two
    service file (Debian's docker-compose 1.29 through the CLI plugin) with
    each service's output."""
    a, _ = docker_lab
    sid = a.api("POST", "/v1/sandboxes", {"template": "docker", "network": {"allow": [{"host": "registry.test"}]}},
                expect=201)["id"]
    build = _docker(a, sid, "mkdir -p /root/app && cd /root/app && "
                            "printf 'FROM registry.test/hello:1\\nRUN echo built in the sandbox > /built\\n"
                            "CMD [\"cat\", \"/built\"]\\n' > Dockerfile && docker build -q -t local/built . && "
                            "docker run --rm local/built", timeout_s=600)
    assert build["exit_code"] == 0 and build["stdout"].endswith("built in the sandbox\n"), build
    compose = _docker(a, sid, "mkdir -p /root/stack && cd /root/stack && "
                              "printf 'version: \"3\"\\nservices:\\n  one:\\n    image: registry.test/hello:1\\n"
                              "  two:\\n    image: registry.test/hello:1\\n    command: [\"echo\", \"two says hi\"]\\n'"
                              " > docker-compose.yml && docker compose up --no-color 2>&1; docker compose down",
                      timeout_s=600)
    assert compose["exit_code"] == 0, compose
    assert "hello from the test registry" in compose["stdout"] and "two says hi" in compose["stdout"], compose


PASSWORD = "pw-8c1f2e9d7b"


def test_private_registry_credential_injected_by_the_gateway(airlock_factory, internet):  # noqa: F811
    """A registry behind basic auth, its password an Airlock secret for its
    host: a sandbox with the secret pulls and runs its image without any
    docker login (the gateway puts the credential into the requests), and
    the password is nowhere in the guest; the control, a sandbox without
    it under the same policy, is refused by the registry."""
    internet.start_registry({"secret:1": "echo a private image"}, private=("agent", PASSWORD))
    a = airlock_factory(env=internet.env(), prebuild="minimal,docker", wait=False)
    a.wait_built(DOCKER_BUILD_TIMEOUT)
    a.api("POST", "/v1/secrets", {"name": "registry", "value": PASSWORD, "hosts": ["private-registry.test"],
                                  "basic": "agent"}, expect=201)
    policy = {"allow": [{"host": "private-registry.test"}]}
    without = a.api("POST", "/v1/sandboxes", {"template": "docker", "network": policy}, expect=201)["id"]
    refused = _docker(a, without, "docker pull private-registry.test/secret:1 2>&1; echo rc=$?")
    assert "rc=0" not in refused["stdout"] and "auth" in refused["stdout"].lower(), refused

    sid = a.api("POST", "/v1/sandboxes", {"template": "docker", "network": policy, "secrets": ["registry"]},
                expect=201)["id"]
    run = _docker(a, sid, "docker run --rm private-registry.test/secret:1")
    assert run["exit_code"] == 0 and run["stdout"] == "a private image\n", run
    leak = _docker(a, sid, f"grep -rls {PASSWORD} /root /etc /var/lib/docker /run 2>/dev/null; env | grep -c {PASSWORD}")
    assert leak["stdout"] == "0\n", leak
    events = a.api("GET", f"/v1/audit?sandbox={sid}&secret=registry")["events"]
    assert any(e["action"] == "injected" and e.get("host") == "private-registry.test" for e in events), events
