"""Bounded coverage-guided fuzzing in the suite: every target in
tests/fuzz/ runs under libFuzzer with ASan and UBSan for a few seconds
(AIRLOCK_FUZZ_SECONDS, default 12) through scripts/fuzz.sh; a crash, a
sanitizer report, a leak or a hang fails the test. `meson test` only
replays the corpus; this searches. Long runs: `scripts/fuzz.sh 3600
fuzz-proto` (docs/testing.md)."""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "fuzz.sh")
TARGETS = ["fuzz-proto", "fuzz-guest-json", "fuzz-qmp", "fuzz-http-json", "fuzz-manifest", "fuzz-retention",
           "fuzz-cap"]
SECONDS = int(os.environ.get("AIRLOCK_FUZZ_SECONDS", "12"))


@pytest.fixture(scope="module")
def built():
    if not shutil.which("clang"):
        pytest.skip("clang is not installed (scripts/deps.sh --test installs it)")
    r = subprocess.run([SCRIPT, "--build"], capture_output=True, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr).decode(errors="replace")[-4000:]


@pytest.mark.parametrize("target", TARGETS)
def test_libfuzzer_finds_nothing(built, target):
    r = subprocess.run([SCRIPT, str(SECONDS), target], capture_output=True, timeout=SECONDS + 120)
    out = (r.stdout + r.stderr).decode(errors="replace")
    assert r.returncode == 0, out[-6000:]
    assert "no finding" in out
