"""What the KVM tier's tests in L1 share."""

import os

from harness import qemu_pids


def template(a, name):
    return {t["name"]: t for t in a.api("GET", "/v1/templates")["templates"]}[name]


def on_kvm(sid):
    """The sandbox's QEMU runs under KVM: its command line asks for it and
    its vCPU threads are KVM's ("CPU 0/KVM": debug-threads=on)."""
    pids = qemu_pids(sid)
    assert len(pids) == 1, pids
    with open(f"/proc/{pids[0]}/cmdline", "rb") as f:
        argv = f.read().decode().split("\0")
    assert argv[argv.index("-accel") + 1] == "kvm", argv
    comms = set()
    for tid in os.listdir(f"/proc/{pids[0]}/task"):
        with open(f"/proc/{pids[0]}/task/{tid}/comm") as f:
            comms.add(f.read().strip())
    assert "CPU 0/KVM" in comms, comms
    return True
