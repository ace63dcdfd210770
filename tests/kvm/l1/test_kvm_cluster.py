"""A cluster of a KVM node and a TCG node (in the KVM tier's L1): each says
what CPU its VMs get, a create goes where its template is ready, and a
suspended sandbox wakes only on a node that can run its memory snapshot:
with its KVM node lost, the wake is refused with the reason (409
cpu_mismatch naming both CPUs) instead of restoring a KVM state under TCG;
with the KVM node back it wakes there."""

import json
import os
import shutil

import harness
from clusterlab import Replica, Worker, lab, wait_for  # noqa: F401 (lab: the fixture)

LOST_AFTER_S = 6


def test_a_sandbox_wakes_only_on_a_node_with_its_cpu(lab, templates):
    net = lab.bridge(nodes=2)
    pg = lab.postgres(bridge=net)
    r0 = Replica(lab, "r0", pg.url, net, lost_after_s=LOST_AFTER_S).spawn().wait_serving(timeout=300)
    token = r0.api("POST", "/v1/nodes/tokens", {"ttl_s": 600}, expect=201)["token"]
    token_file = os.path.join(lab.dir, "join.token")
    with open(os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(token + "\n")
    objstore = harness.volume_tempdir("airlock-objstore-", 0o755)  # shared: a wake may happen on any node
    lab.defer(shutil.rmtree, objstore, True)
    join = [r0.cluster_addr]
    kvm = Worker(lab, "kvm", net.nodes[0], 0, join, token_file, objstore=objstore).start()
    # the TCG node builds nothing (a TCG boot inside L1 takes minutes): it
    # is there to be the only node left
    tcg = Worker(lab, "tcg", net.nodes[1], 1, join, token_file, objstore=objstore, accel="tcg", prebuild="").start()

    def ready():
        n = r0.nodes()
        return all(w in n and n[w]["state"] == "ready" for w in ("kvm", "tcg")) and \
            "minimal" in (n["kvm"].get("templates") or [])
    wait_for(ready, 300, "both nodes ready, the KVM one with minimal")
    nodes = r0.nodes()
    kvm_cpu = nodes["kvm"]["cpu"]
    assert kvm_cpu.startswith("kvm:host:") and nodes["tcg"]["cpu"] == "tcg:max", nodes

    sid = r0.create("minimal")["id"]  # where the template is ready
    assert r0.api("GET", f"/v1/sandboxes/{sid}")["node"] == "kvm"
    r0.exec(sid, ["sh", "-c", "echo kept > /root/f && sync"])
    assert r0.api("POST", f"/v1/sandboxes/{sid}/suspend?wait=true")["state"] == "succeeded"
    wait_for(lambda: r0.api("GET", f"/v1/sandboxes/{sid}").get("image_uploaded") is True, 120,
             "the suspended image uploaded")

    kvm.kill9()
    wait_for(lambda: r0.nodes()["kvm"]["state"] == "lost", LOST_AFTER_S + 30, "the KVM node lost")
    status, _, body = r0.request("POST", f"/v1/sandboxes/{sid}/wake?wait=true")
    err = json.loads(body)["error"]
    assert status == 409 and err["code"] == "cpu_mismatch", (status, body)
    assert kvm_cpu in err["message"] and "tcg runs tcg:max" in err["message"], err
    sbx = r0.api("GET", f"/v1/sandboxes/{sid}")
    assert sbx["state"] == "suspended" and sbx["node"] == "kvm", sbx

    # the control: its node back, the same wake succeeds there
    kvm.start()
    wait_for(lambda: r0.nodes()["kvm"]["state"] == "ready", 300, "the KVM node ready again")
    assert r0.api("POST", f"/v1/sandboxes/{sid}/wake?wait=true")["state"] == "succeeded"
    assert r0.exec(sid, ["cat", "/root/f"])["stdout"] == "kept\n"
    assert r0.api("GET", f"/v1/sandboxes/{sid}")["node"] == "kvm"
    r0.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)
