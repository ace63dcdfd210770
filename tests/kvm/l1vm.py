"""The KVM tier's first-level VM, "L1" (docs/testing.md, "The KVM tier").

These machines have no KVM of their own that boots a stock kernel, but
QEMU's TCG emulates AMD SVM with nested paging: an L1 booted under TCG with
`-cpu EPYC-v3,+svm,+npt` loads kvm_amd and runs Airlock's VMs under real
KVM, one level down. L1 is the guest kernel's own Debian package
(tests/kvm/l1-kit.sh); its root is this host's root file system, shared
read-only over virtiofs under a tmpfs overlay, so the build, QEMU, python
and the tests are the host's own and L1 needs no network. Its disk is a
sparse btrfs image made for the run (the templates' kernel seeded), its
results come back through a second, writable virtiofs share.

    l1 = L1(workdir)                        # a fresh directory of the run
    res = l1.run("cd /x && make test", timeout=1800)
    res.rc, res.log, res.console_tail(), l1.out  # what came back

Also a command: python3 tests/kvm/l1vm.py [--timeout S] -- COMMAND...
runs COMMAND in L1 (from the checkout, as root) and prints its output.
"""

import argparse
import hashlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("AIRLOCK_BUILD_DIR", os.path.join(ROOT, "build"))
KIT = os.path.join(BUILD, "kvm-l1")
VIRTIOFSD = "/usr/lib/qemu/virtiofsd"  # Debian's qemu-system-common
QEMU = "qemu-system-x86_64"
# AMD's EPYC-v3 with SVM and nested paging, less what QEMU 7.2's TCG cannot
# emulate (each would be a warning at every start)
CPU = ("EPYC-v3,+svm,+npt,-rdseed,-sha-ni,-fxsr-opt,-misalignsse,-3dnowprefetch,-osvw,-topoext,"
       "-perfctr-core,-clzero,-xsaveerptr,-ibpb,-nrip-save,-xsavec,-xsaves")
VOLUME = "/l1/vol"  # the run's disk, in L1
OUT = "/l1/out"     # the exchange directory, in L1
# L1 with nothing running this long has hung (tests/kvm/l1-stage2.sh's ps.log,
# written every 30 s: four of its periods; 180 s before, which a stall cost
# in full, twice in the last three full runs)
STALL_S = int(os.environ.get("AIRLOCK_L1_STALL_S", "120"))


def build_kit():
    """Makes (or reuses) the L1 kit in KIT; returns its path."""
    env = dict(os.environ)
    env.setdefault("AIRLOCK_APT_CACHE", os.path.join(BUILD, "apt-cache"))
    os.makedirs(env["AIRLOCK_APT_CACHE"], exist_ok=True)
    r = subprocess.run(["bash", os.path.join(HERE, "l1-kit.sh"), KIT], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"tests/kvm/l1-kit.sh failed:\n{r.stderr[-3000:]}")
    return KIT


def kernel_dir_name():
    """The templates' name of the guest kernel's directory, kernel-HASH, as
    the node computes it (src/node/template.c, kernel_hash(): SHA-256 over
    each input's label, NUL, size as u64 and bytes; 16 bytes in hex). A
    name that drifts from the node's only costs L1 the kernel step."""
    h = hashlib.sha256()
    for label, name in (("kernel.sh", "kernel.sh"), ("common.sh", "common.sh")):
        path = os.path.join(ROOT, "images", name)
        if not os.path.exists(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        h.update(label.encode() + b"\0" + struct.pack("<Q", len(data)) + data)
    return "kernel-" + h.hexdigest()[:32]


def host_tsc_khz():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("cpu MHz"):
                return int(float(line.split(":")[1]) * 1000)
    return 0


def mount_point(path):
    return subprocess.run(["findmnt", "-n", "-o", "TARGET", "--target", path], capture_output=True,
                          text=True, check=True).stdout.strip()


class Result:
    def __init__(self, rc, log, console, seconds, stall=""):
        self.rc = rc
        self.log = log
        self.console = console
        self.seconds = seconds
        self.stall = stall  # L1 hung (nothing ran in it): what its vCPUs were doing; "" otherwise

    def console_tail(self, n=40):
        return "\n".join(self.console.splitlines()[-n:])

    @property
    def panic(self):
        """L1's own kernel panicked (it stopped without the run's status):
        its panic line and the lines above it, else "". Seen here with an
        interrupt taken right after VMRUN in kvm_amd's __svm_vcpu_run, on
        the guest's GS: QEMU 7.2's TCG emulating SVM, not Airlock."""
        if self.rc is not None:
            return ""
        lines = self.console.splitlines()
        for i, line in enumerate(lines):
            if "Kernel panic - not syncing" in line:
                return "\n".join(lines[max(0, i - 12):i + 1])
        return ""


class L1:
    def __init__(self, workdir, memory_mib=6144, cpus=2, disk_gib=32):
        self.dir = workdir
        self.out = os.path.join(workdir, "out")
        self.memory_mib = memory_mib
        self.cpus = cpus
        self.disk_gib = disk_gib
        self.procs = []

    def _virtiofsd(self, name, source, shared_root=False):
        sock = os.path.join(self.dir, f"{name}.sock")
        log = open(os.path.join(self.dir, f"{name}.log"), "wb")
        argv = [VIRTIOFSD, f"--socket-path={sock}", "-o", f"source={source}", "-o", "log_level=warn"]
        if shared_root:
            # the host's root, read-only: a bind of each file system the
            # run needs (/, and the checkout's and the build's when they
            # are others), made read-only in a mount namespace of its own
            # that ends with virtiofsd; nothing is mounted on the host
            mounts = sorted({"/", mount_point(ROOT), mount_point(BUILD)}, key=len)
            script = "set -e\n"
            for m in mounts:
                target = source + (m if m != "/" else "")
                script += f"mkdir -p '{target}'\nmount --bind '{m}' '{target}'\n" \
                          f"mount -o remount,bind,ro '{target}'\n"
            script += 'exec "$@"\n'
            argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                    *argv, "-o", "cache=always"]
        else:
            argv += ["-o", "cache=none"]
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        deadline = time.monotonic() + 20
        while not os.path.exists(sock):
            if p.poll() is not None or time.monotonic() > deadline:
                log.close()
                with open(os.path.join(self.dir, f"{name}.log")) as f:
                    raise RuntimeError(f"virtiofsd for {source} did not start: {f.read()[-2000:]}")
            time.sleep(0.05)
        return sock

    def _disk(self, kit):
        """The run's btrfs disk, sparse, with the guest kernel seeded where
        the templates will look for it."""
        seed = os.path.join(self.dir, "seed")
        kdir = os.path.join(seed, "templates", kernel_dir_name())
        os.makedirs(os.path.dirname(kdir))
        shutil.copytree(os.path.join(kit, "guest-kernel"), kdir, symlinks=True)
        img = os.path.join(self.dir, "vol.img")
        with open(img, "wb") as f:
            f.truncate(self.disk_gib << 30)
        subprocess.run(["mkfs.btrfs", "-q", "-f", "--rootdir", seed, img], check=True, capture_output=True)
        shutil.rmtree(seed)
        return img

    def run(self, script, timeout):
        """Boots L1, runs script (sh) in /l1/out there, waits at most
        timeout seconds for L1 to power off; returns a Result (rc None when
        L1 stopped without the script's status)."""
        kit = build_kit()
        os.makedirs(self.out, exist_ok=True)
        os.chmod(self.out, 0o755)
        with open(os.path.join(self.out, "run.sh"), "w") as f:
            f.write(script)
        img = self._disk(kit)
        root = os.path.join(self.dir, "root")
        os.makedirs(root)
        root_sock = self._virtiofsd("hostroot", root, shared_root=True)
        out_sock = self._virtiofsd("out", self.out)
        console = os.path.join(self.dir, "console.log")
        khz = host_tsc_khz()
        append = (f"console=ttyS0 panic=-1 quiet nokaslr tsc=reliable{f' tsc_early_khz={khz}' if khz else ''} "
                  f"airlock.stage2={HERE}/l1-stage2.sh airlock.modules={kit}/modules/lib/modules")
        argv = [QEMU, "-machine", "q35,accel=tcg", "-cpu", CPU,
                "-smp", str(self.cpus), "-m", f"{self.memory_mib}M",
                "-object", f"memory-backend-memfd,id=mem,size={self.memory_mib}M,share=on",
                "-numa", "node,memdev=mem",
                "-kernel", os.path.join(kit, "vmlinuz"), "-initrd", os.path.join(kit, "initramfs.cpio.gz"),
                "-append", append, "-display", "none", "-nodefaults", "-no-user-config", "-no-reboot",
                "-serial", f"file:{console}",
                "-monitor", f"unix:{self._hmp_path()},server=on,wait=off",
                "-chardev", f"socket,id=root,path={root_sock}",
                "-device", "vhost-user-fs-pci,chardev=root,tag=hostroot",
                "-chardev", f"socket,id=out,path={out_sock}",
                "-device", "vhost-user-fs-pci,chardev=out,tag=out",
                "-drive", f"file={img},format=raw,if=virtio,cache=unsafe,discard=unmap"]
        t0 = time.monotonic()
        qemu_log = open(os.path.join(self.dir, "qemu.log"), "wb")
        q = subprocess.Popen(argv, stdout=qemu_log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.insert(0, q)
        hang = self._wait(q, t0, timeout)
        seconds = time.monotonic() - t0
        for p in self.procs:  # QEMU first: the disk is then quiet
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        rc = None
        try:
            with open(os.path.join(self.out, "rc")) as f:
                rc = int(f.read().strip())
        except (OSError, ValueError):
            pass
        logs = "" if rc is not None else self._salvage_logs(img)
        self.close()
        return Result(rc, _read(os.path.join(self.out, "run.log")) + logs,
                      _read(console) + _read(os.path.join(self.dir, "qemu.log")) + hang
                      + f"\n--- L1's processes, last seen:\n{_read(os.path.join(self.out, 'ps.log'))[-6000:]}",
                      seconds, hang)

    def _hmp_path(self):
        return os.path.join(self.dir, "hmp.sock")

    def _wait(self, q, t0, timeout):
        """Waits for L1 to power off, at most timeout seconds. L1 stalled
        (l1-stage2.sh's ps.log, written every 30 s, older than STALL_S:
        nothing in L1 runs) is given up at once, its vCPUs' registers kept
        (QEMU's monitor): returns what to add to the console, "" when L1
        did not stall."""
        ps = os.path.join(self.out, "ps.log")
        booted = time.time()  # until its first ps.log: an L1 can hang before it
        while time.monotonic() - t0 < timeout:
            try:
                q.wait(timeout=5)
                return ""
            except subprocess.TimeoutExpired:
                pass
            try:
                last = os.stat(ps).st_mtime
            except FileNotFoundError:
                last = booted
            if time.time() - last > STALL_S:
                dump = _hmp(self._hmp_path(), ["info cpus", "info registers -a"])
                rips = " ".join(m for m in dump.split() if m.startswith("RIP="))
                with open(os.path.join(self.dir, "stall.log"), "w") as f:
                    f.write(dump)
                return (f"\n--- L1 stalled: nothing ran in it for {STALL_S} s (ps.log unchanged); "
                        f"its vCPUs at {rips} (L1's /proc/kallsyms names them: nokaslr):\n{dump}")
        return ""

    def _salvage_logs(self, img):
        """When L1 stopped without the run's status (it hung, or died): the
        tails of the logs on its disk (the Airlocks' data dirs' logs at the
        top of the test volume), read from the image mounted read-only
        here for a moment."""
        mnt = os.path.join(self.dir, "salvage")
        os.makedirs(mnt, exist_ok=True)
        r = subprocess.run(["mount", "-o", "loop,ro,rescue=all", img, mnt], capture_output=True, text=True)
        if r.returncode != 0:
            return f"\n--- the run's disk did not mount: {r.stderr.strip()}"
        try:
            out = ""
            for name in sorted(os.listdir(mnt)):
                if name.endswith(".log"):
                    lines = _read(os.path.join(mnt, name)).splitlines()
                    out += f"\n--- {name} (last lines, from L1's disk):\n" + "\n".join(lines[-80:])
            return out
        finally:
            subprocess.run(["umount", mnt], capture_output=True)
            os.rmdir(mnt)

    def close(self):
        """Stops QEMU and the virtiofsds (each in a session of its own)."""
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.wait()
        self.procs = []
        try:
            os.unlink(os.path.join(self.dir, "vol.img"))
        except FileNotFoundError:
            pass


def _hmp(path, commands):
    """Each of commands' answers from QEMU's human monitor at path."""
    out = ""
    try:
        with socket.socket(socket.AF_UNIX) as c:
            c.settimeout(10)
            c.connect(path)
            buf = b""
            for cmd in [None] + commands:
                if cmd:
                    c.sendall(cmd.encode() + b"\n")
                while not buf.endswith(b"(qemu) "):
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                if cmd:  # the answer, less the monitor's echo of the command (its first line)
                    answer = buf.decode(errors="replace").rsplit("(qemu) ", 1)[0].partition("\n")[2]
                    out += f"(qemu) {cmd}\n{answer}\n"
                buf = b""
    except OSError as e:
        out += f"(the monitor did not answer: {e})\n"
    return out


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def main():
    ap = argparse.ArgumentParser(description="Runs a command in the KVM tier's L1 (as root, from the checkout).")
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument("--memory-mib", type=int, default=6144)
    ap.add_argument("--keep", action="store_true", help="keep the work dir (its out/ holds what came back)")
    ap.add_argument("command", nargs="+")
    a = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="airlock-l1-", dir=BUILD)
    try:
        quoted = " ".join("'" + c.replace("'", "'\\''") + "'" for c in a.command)
        res = L1(workdir, memory_mib=a.memory_mib).run(f"cd '{ROOT}'\n{quoted}\n", a.timeout)
        sys.stdout.write(res.log)
        if res.rc is None:
            print(f"l1vm: L1 stopped without the command's status after {res.seconds:.0f} s; its console:\n"
                  f"{res.console_tail()}", file=sys.stderr)
            return 1
        print(f"l1vm: exit status {res.rc} after {res.seconds:.0f} s in L1 (out: {workdir}/out)"
              if a.keep else f"l1vm: exit status {res.rc} after {res.seconds:.0f} s in L1", file=sys.stderr)
        return res.rc
    finally:
        if not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
