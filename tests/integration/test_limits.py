"""A sandbox's own size within its template's (docs/api.md, "Create a
sandbox": memory_mib, vcpus): enforced by its VMM's cgroup, kept across a
suspend and wake, shown by the API; more than the template has, or less
than the least, is refused before anything starts."""

from harness import qemu_pids

MARGIN_MIB = 192  # lib/jail's JAIL_VMM_MEMORY_MARGIN_MIB: QEMU's own beyond the guest's RAM


def memory_limit(sid):
    """The memory limit of the cgroup the sandbox's VMM runs in, bytes."""
    pids = qemu_pids(sid)
    assert len(pids) == 1, pids
    with open(f"/proc/{pids[0]}/cgroup") as f:
        lines = [line.strip().split(":", 2) for line in f if line.strip()]
    for _, controllers, path in lines:
        if "memory" in controllers.split(","):  # v1 (a hybrid host has a v2 line too)
            with open(f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes") as f:
                return int(f.read())
    for _, controllers, path in lines:
        if controllers == "":  # v2
            with open(f"/sys/fs/cgroup{path}/memory.max") as f:
                return int(f.read())
    raise AssertionError(f"no memory cgroup in {lines}")


def test_sandbox_size_within_the_template(airlock_factory):
    a = airlock_factory(prebuild="minimal")
    whole = a.create("minimal")["id"]
    small = a.api("POST", "/v1/sandboxes", {"template": "minimal", "memory_mib": 128, "vcpus": 1}, expect=201)
    sid = small["id"]
    assert small["memory_mib"] == 128 and small["vcpus"] == 1, small
    got = a.api("GET", f"/v1/sandboxes/{sid}")
    assert got["memory_mib"] == 128 and "memory_mib" not in a.api("GET", f"/v1/sandboxes/{whole}")
    # the cgroup: 128 MiB and QEMU's margin, against the template's 256
    assert memory_limit(whole) == (256 + MARGIN_MIB) << 20
    assert memory_limit(sid) == (128 + MARGIN_MIB) << 20
    assert a.exec(sid, ["sh", "-c", "echo small"])["stdout"] == "small\n"

    # a new VMM (a wake) gets the same cgroup
    for verb in ("suspend", "wake"):
        op = a.api("POST", f"/v1/sandboxes/{sid}/{verb}?wait=true")
        assert op["state"] == "succeeded", op
    assert memory_limit(sid) == (128 + MARGIN_MIB) << 20
    assert a.exec(sid, ["true"])["exit_code"] == 0

    # refused, with what was wrong, and nothing made
    before = {s["id"] for s in a.api("GET", "/v1/sandboxes")["sandboxes"]}
    for body, says in (({"memory_mib": 512}, b"256"), ({"vcpus": 2}, b"vcpus"), ({"memory_mib": 16}, b"memory_mib"),
                       ({"vcpus": "one"}, b"vcpus")):
        status, _, data = a.request("POST", "/v1/sandboxes", dict(body, template="minimal"))
        assert status == 400 and says in data, (body, status, data)
    assert {s["id"] for s in a.api("GET", "/v1/sandboxes")["sandboxes"]} == before
