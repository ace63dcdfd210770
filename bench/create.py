#!/usr/bin/env python3
"""Create-latency benchmark: sandboxes created through the public API versus
the raw baseline, a bare QEMU restore of the same template snapshot driven
over QMP by this script (no control plane, no node, no guest handshake),
measured in the same run on the same machine.

  sudo bench/create.py [--n 30] [--template minimal] [--pool-wait]

Needs a running Airlock (./run.sh) or starts none: pass --url and --token,
or --data-dir (reads DATA_DIR/control/admin.token). Prints medians and tails (p90,
p99, max) and the ratio API/raw. Creates served from a warm pool (the reply
says "pool":"hit") are summarised apart from cold ones; --pool-wait waits
before every round until the template's pool is full again, so that each
create can be a hit (refills only keep up with creates slower than them)."""

import argparse
import fcntl
import http.client
import json
import os
import glob
import socket
import statistics
import struct
import subprocess
import tempfile
import time


def pct(xs, p):
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def summary(name, xs):
    return (f"{name:<28} n={len(xs):<4} median={statistics.median(xs):7.1f} ms  "
            f"p90={pct(xs, 90):7.1f}  p99={pct(xs, 99):7.1f}  max={max(xs):7.1f}")


def api(url, token, method, path, body=None):
    host, port = url.split("//")[1].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=600)
    h = {"Authorization": f"Bearer {token}"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    out = r.read()
    c.close()
    return r.status, json.loads(out) if out else None


class Qmp:
    def __init__(self, path, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.s = socket.socket(socket.AF_UNIX)
                self.s.connect(path)
                break
            except OSError:
                self.s.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.001)
        self.f = self.s.makefile("rwb")
        self.f.readline()
        self.cmd("qmp_capabilities")

    def cmd(self, name, **args):
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        self.f.write(json.dumps(msg).encode() + b"\n")
        self.f.flush()
        while True:
            r = json.loads(self.f.readline())
            if "return" in r:
                return r["return"]
            if "error" in r:
                raise RuntimeError(r["error"])


def tap_open():
    """A tap for the bare VM's NIC, as lib/vmnet makes one (vnet headers:
    the NIC's state carries the offloads they bring). It is never brought
    up, and goes when the last fd on it closes."""
    fd = os.open("/dev/net/tun", os.O_RDWR)
    try:
        fcntl.ioctl(fd, 0x400454CA, struct.pack("16sH", b"", 0x0002 | 0x1000 | 0x4000))  # TUNSETIFF: TAP|NO_PI|VNET_HDR
    except OSError:
        os.close(fd)
        raise
    return fd


def accel_argv(manifest):
    """The accelerator and CPU the template was built for (its manifest's
    "cpu", src/node/vmm.h): the baseline restores on what the node uses,
    KVM against KVM. A manifest without one is a TCG build's."""
    cpu = manifest.get("cpu", "tcg:max")
    if cpu.startswith("kvm:host:"):
        return ["-accel", "kvm", "-cpu", "host"]
    if cpu.startswith("kvm:"):
        return ["-accel", "kvm", "-cpu", cpu[4:] + ",enforce"]
    return ["-accel", "tcg,tb-size=32", "-cpu", "max"]


# src/node/vmm.h: VMM_VOLUMES_MAX of VMM_MACHINE_REVISION "microvm-4 rtc=on
# virtio-serial+virtio-blk+virtio-net+4 volume slots"
VOLUME_SLOTS = 4


def qemu_argv(tpl_dir, manifest, work, khz, memory_object, rootfs, tap_fd):
    """The machine of src/node/vmm-qemu.c's vmm_build_argv(), device for
    device (or the state will not load; VMM_MACHINE_REVISION; checked by
    tests/integration/test_bench_baseline.py), without the jail, the
    seccomp filter and the egress gateway: its NIC's tap leads nowhere.
    The binary is the node's: AIRLOCK_QEMU, else qemu-system-x86_64."""
    mem = manifest["memory_mib"]
    vmlinux = os.path.join(os.path.dirname(tpl_dir), manifest["kernel"], "vmlinux")
    return [os.environ.get("AIRLOCK_QEMU", "qemu-system-x86_64"), "-M", "microvm,x-option-roms=off,rtc=on,memory-backend=mem",
            *accel_argv(manifest), "-m", str(mem), "-smp", str(manifest.get("vcpus", 1)),
            "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-object", memory_object.format(mem=mem),
            "-kernel", vmlinux, "-initrd", os.path.join(tpl_dir, "initramfs.cpio"),
            "-append", f"console=ttyS0 quiet panic=-1 tsc_early_khz={khz} airlock.root=/dev/vda",
            "-serial", "null",
            "-device", "virtio-serial-device",
            "-chardev", f"socket,id=ch0,path={work}/guest.sock,server=on,wait=off",
            "-device", "virtserialport,chardev=ch0,name=airlock.0",
            "-drive", f"id=d0,file={rootfs},format=raw,if=none,cache=writeback", "-device", "virtio-blk-device,drive=d0",
            "-netdev", f"tap,id=n0,fd={tap_fd}", "-device", "virtio-net-device,netdev=n0,mac=02:a1:0c:00:00:02",
            "-qmp", f"unix:{work}/qmp.sock,server=on,wait=off",
            # the volume slots (VMM_VOLUMES_MAX), empty
            *[arg for i in range(VOLUME_SLOTS)
              for arg in ("-drive", f"id=v{i},driver=null-co,size=0,if=none",
                          "-device", f"virtio-blk-device,drive=v{i},serial=vol{i}")],
            "-incoming", "defer"]


def spawn_restored(tpl_dir, manifest, work, khz):
    """Spawns a bare QEMU restore of the template snapshot: -incoming defer,
    migrate-incoming, cont. Returns (process, Qmp, ms from spawn to running).
    The caller kills the process and removes WORK/rootfs.img."""
    rootfs = os.path.join(work, "rootfs.img")
    subprocess.run(["cp", "--reflink=auto", "--sparse=always", os.path.join(tpl_dir, "rootfs.img"), rootfs], check=True)
    tap = tap_open()
    args = qemu_argv(tpl_dir, manifest, work, khz,
                     f"memory-backend-file,id=mem,size={{mem}}M,mem-path={tpl_dir}/mem,share=off", rootfs, tap)
    log = os.path.join(work, "qemu.log")
    t0 = time.monotonic()
    try:
        with open(log, "wb") as err:
            p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, pass_fds=(tap,))
    finally:
        os.close(tap)
    try:
        q = Qmp(os.path.join(work, "qmp.sock"))
        q.cmd("migrate-set-capabilities", capabilities=[{"capability": "x-ignore-shared", "state": True}])
        q.cmd("migrate-incoming", uri=f"exec:cat {tpl_dir}/state")
        while q.cmd("query-migrate").get("status") != "completed":
            time.sleep(0.0005)
        q.cmd("cont")
        return p, q, (time.monotonic() - t0) * 1000
    except BaseException as e:
        p.kill()
        p.wait()
        os.unlink(rootfs)
        with open(log, errors="replace") as f:
            said = f.read().strip()
        if said and isinstance(e, Exception):
            # a machine that is not the node's says so here, not in the QMP error
            raise RuntimeError(f"the bare restore of {tpl_dir} failed: {said}") from e
        raise


def raw_restore(tpl_dir, manifest, work, khz):
    """One bare restore; returns ms from spawn to running."""
    p, _, ms = spawn_restored(tpl_dir, manifest, work, khz)
    p.kill()
    p.wait()
    os.unlink(os.path.join(work, "rootfs.img"))
    return ms


def find_template(data_dir, templates_dir, name):
    """Returns (template dir, manifest) of the newest build of name."""
    tdir = templates_dir
    if not tdir:
        cands = glob.glob(os.path.join(data_dir, "vol", "templates")) + [os.path.join(data_dir, "templates")]
        tdir = next(c for c in cands if os.path.isdir(c))
    tpl = sorted(glob.glob(os.path.join(tdir, name + "-*", "manifest.json")), key=os.path.getmtime)[-1]
    return os.path.dirname(tpl), json.load(open(tpl))


def host_tsc_khz():
    return int(float(next(l for l in open("/proc/cpuinfo") if l.startswith("cpu MHz")).split(":")[1]) * 1000)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default=os.environ.get("AIRLOCK_URL", "http://127.0.0.1:7420"))
    ap.add_argument("--data-dir", default=os.environ.get("AIRLOCK_DATA_DIR", "/var/lib/airlock"))
    ap.add_argument("--token")
    ap.add_argument("--template", default="minimal")
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--templates-dir")
    ap.add_argument("--pool-wait", action="store_true",
                    help="before each round, wait until the template's warm pool is full")
    a = ap.parse_args()
    token = a.token or open(os.path.join(a.data_dir, "control", "admin.token")).read().strip()

    tpl_dir, manifest = find_template(a.data_dir, a.templates_dir, a.template)
    tdir = os.path.dirname(tpl_dir)
    khz = host_tsc_khz()

    def wait_pool_full():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            _, r = api(a.url, token, "GET", "/v1/templates")
            p = next((t.get("pool") for t in r["templates"] if t["name"] == a.template), None)
            if not p or not p["size"] or p["ready"] >= p["size"]:
                return
            time.sleep(0.05)
        raise TimeoutError("warm pool did not refill in 120 s")

    api_ms, raw_ms, node_ms = [], [], []
    by_pool = {"hit": [], "miss": []}
    with tempfile.TemporaryDirectory(dir=tdir) as work:
        for i in range(a.n):
            if a.pool_wait:
                wait_pool_full()  # before the raw restore: refills must not slow it down
            # interleave so both see the same machine noise
            raw_ms.append(raw_restore(tpl_dir, manifest, work, khz))
            t0 = time.monotonic()
            st, sbx = api(a.url, token, "POST", "/v1/sandboxes", {"template": a.template})
            api_ms.append((time.monotonic() - t0) * 1000)
            assert st == 201, sbx
            if "restore_ms" in sbx:
                node_ms.append(sbx["restore_ms"])
            if sbx.get("pool") in by_pool:
                by_pool[sbx["pool"]].append(api_ms[-1])
            api(a.url, token, "DELETE", f"/v1/sandboxes/{sbx['id']}")
    print(f"template={a.template} memory={manifest['memory_mib']}MiB n={a.n}")
    print(summary("raw QEMU restore (baseline)", raw_ms))
    if node_ms:
        print(summary("node restore_ms (in node)", node_ms))
    print(summary("API create (end to end)", api_ms))
    for k in ("hit", "miss"):
        if by_pool[k] and len(by_pool[k]) < len(api_ms):
            print(summary(f"API create, pool {k}", by_pool[k]))
        elif by_pool[k]:
            print(f"(every create was a pool {k})")
    print(f"ratio API/raw: median {statistics.median(api_ms) / statistics.median(raw_ms):.2f}x  "
          f"p90 {pct(api_ms, 90) / pct(raw_ms, 90):.2f}x")


if __name__ == "__main__":
    main()
