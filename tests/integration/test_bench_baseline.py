"""The benchmarks' raw baseline is the node's machine, device for device
(bench/create.py's qemu_argv): a bare QEMU restores the template the node
built, and one saved to a file loads again (bench/restart.py's save and
restore, through snapshots.py's spawn_from_state). Every ratio bench/
prints is against these; when the node's machine gained its volume slots
and the bench's did not follow, each bare restore failed ("Unknown savevm
section ... virtio-blk") and nothing said so until a bench ran."""

import os
import shutil
import sys

from harness import ROOT, volume_tempdir

sys.path.insert(0, os.path.join(ROOT, "bench"))
from create import find_template, host_tsc_khz, raw_restore  # noqa: E402
from restart import raw_save_restore  # noqa: E402


def test_a_bare_qemu_restores_the_nodes_template(templates):
    tpl_dir, manifest = find_template(None, templates, "minimal")
    work = volume_tempdir("bench-baseline-")
    try:
        khz = host_tsc_khz()
        assert raw_restore(tpl_dir, manifest, work, khz) > 0
        save, restore = raw_save_restore(tpl_dir, manifest, work, khz)
        assert save > 0 and restore > 0
    finally:
        shutil.rmtree(work)
