"""Bounded coverage-guided fuzzing in the suite: every target in
tests/fuzz/ (each fuzz-*.c but the replay driver fuzz-main.c) runs under
libFuzzer with ASan and UBSan for a few seconds (AIRLOCK_FUZZ_SECONDS,
default 9) through scripts/fuzz.sh; a crash, a sanitizer report, a leak or
a hang fails the test, and so does a missing clang (./test.sh installs it:
without it nothing would be fuzzed). `meson test` only replays the corpus;
this searches. Long runs: `scripts/fuzz.sh 3600 fuzz-proto`
(docs/testing.md)."""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "fuzz.sh")
FUZZ_DIR = os.path.join(ROOT, "tests", "fuzz")
# read from the directory, so a new target cannot be left out
TARGETS = sorted(f[:-2] for f in os.listdir(FUZZ_DIR)
                 if f.startswith("fuzz-") and f.endswith(".c") and f != "fuzz-main.c")
# 17 targets x 9 s: about 2.5 min
SECONDS = int(os.environ.get("AIRLOCK_FUZZ_SECONDS", "9"))


@pytest.fixture(scope="module")
def built():
    if not shutil.which("clang"):
        pytest.fail("clang is not installed, so nothing can be fuzzed: scripts/deps.sh --test installs it "
                    "(./test.sh runs that first)")
    r = subprocess.run([SCRIPT, "--build"], capture_output=True, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr).decode(errors="replace")[-4000:]


@pytest.mark.parametrize("target", TARGETS)
def test_libfuzzer_finds_nothing(built, target):
    r = subprocess.run([SCRIPT, str(SECONDS), target], capture_output=True, timeout=SECONDS + 120)
    out = (r.stdout + r.stderr).decode(errors="replace")
    assert r.returncode == 0, out[-6000:]
    assert "no finding" in out
