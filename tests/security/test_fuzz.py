"""Bounded coverage-guided fuzzing in the suite: every target in
tests/fuzz/ (each fuzz-*.c but the replay driver fuzz-main.c) runs under
libFuzzer with ASan and UBSan for a few seconds (AIRLOCK_FUZZ_SECONDS,
default 9) through scripts/fuzz.sh, as many at once as there are CPUs
(each target is one process on one core, so it runs as long and as fast as
alone); a crash, a sanitizer report, a leak or a hang fails the test, and
so does a missing clang (./test.sh installs it: without it nothing would be
fuzzed). `meson test` only replays the corpus;
this searches. Long runs: `scripts/fuzz.sh 3600 fuzz-proto`
(docs/testing.md)."""

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "fuzz.sh")
FUZZ_DIR = os.path.join(ROOT, "tests", "fuzz")
# read from the directory, so a new target cannot be left out
TARGETS = sorted(f[:-2] for f in os.listdir(FUZZ_DIR)
                 if f.startswith("fuzz-") and f.endswith(".c") and f != "fuzz-main.c")
# every target for 9 s, two at a time on 2 CPUs: about 2 min
SECONDS = int(os.environ.get("AIRLOCK_FUZZ_SECONDS", "9"))


def fuzz_one(target):
    """(exit status, output) of one target's bounded run."""
    r = subprocess.run([SCRIPT, str(SECONDS), target], capture_output=True, timeout=SECONDS + 120)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


@pytest.fixture(scope="module")
def runs():
    """Builds the targets, then fuzzes them all, a CPU's worth at a time:
    {target: (exit status, output)}, read by each target's test."""
    if not shutil.which("clang"):
        pytest.fail("clang is not installed, so nothing can be fuzzed: scripts/deps.sh --test installs it "
                    "(./test.sh runs that first)")
    r = subprocess.run([SCRIPT, "--build"], capture_output=True, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr).decode(errors="replace")[-4000:]
    with ThreadPoolExecutor(max_workers=max(1, len(os.sched_getaffinity(0)))) as pool:
        return dict(zip(TARGETS, pool.map(fuzz_one, TARGETS)))


@pytest.mark.parametrize("target", TARGETS)
def test_libfuzzer_finds_nothing(runs, target):
    status, out = runs[target]
    assert status == 0, out[-6000:]
    assert f"{target}: " in out and "no finding" in out, out[-6000:]
