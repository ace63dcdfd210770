"""The KVM tier (docs/testing.md, "The KVM tier"): Airlock under real KVM.

Boots the tier's L1 once for this module (tests/kvm/l1vm.py: a VM under
TCG with AMD SVM emulated, so its KVM works), runs tests/kvm/l1 there with
the same harness as tests/integration, and reports each of those tests
here under its own name: a failure in L1 fails this suite with L1's
message and traceback, a test that did not run or was skipped in L1 fails
too."""

import ast
import os
import re
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ET

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from l1vm import BUILD, L1, OUT, ROOT, VOLUME  # noqa: E402

INNER = os.path.join(HERE, "l1")
# The whole run in L1 at most (about 12 minutes measured; the build of the
# minimal template under KVM is in it)
L1_TIMEOUT = 45 * 60
# a test in L1 past this has its Python stacks written out (pytest's faulthandler)
INNER_TEST_MAX_S = 600


def inner_tests():
    """module::function of every test in tests/kvm/l1, read from the
    sources: the list is known before L1 runs them."""
    names = []
    for f in sorted(os.listdir(INNER)):
        if f.startswith("test_") and f.endswith(".py"):
            with open(os.path.join(INNER, f)) as src:
                tree = ast.parse(src.read())
            names += [f"{f[:-3]}::{n.name}" for n in tree.body
                      if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    return names


@pytest.fixture(scope="module")
def l1_results():
    workdir = tempfile.mkdtemp(prefix="airlock-l1-", dir=BUILD)
    script = (f"cd '{ROOT}'\n"
              f"export AIRLOCK_BUILD_DIR='{BUILD}' AIRLOCK_TEST_VOLUME={VOLUME} AIRLOCK_TEST_PREBUILD=minimal "
              f"AIRLOCK_APT_CACHE='{BUILD}/apt-cache'\n"
              f"exec /usr/bin/python3 -m pytest -p no:cacheprovider -v --durations=20 "
              f"--junitxml={OUT}/junit.xml -o junit_family=xunit1 -o junit_logging=all "
              f"-o faulthandler_timeout={INNER_TEST_MAX_S} tests/kvm/l1\n")
    try:
        res = L1(workdir).run(script, L1_TIMEOUT)
        cases = {}
        try:
            root = ET.parse(os.path.join(workdir, "out", "junit.xml")).getroot()
        except (OSError, ET.ParseError):
            root = None
        for case in root.iter("testcase") if root is not None else ():
            module = case.get("classname", "").rsplit(".", 1)[-1]
            cases.setdefault(f"{module}::{case.get('name').split('[')[0]}", []).append(case)
        print(f"L1 ran for {res.seconds:.0f} s, exit status {res.rc}")
        yield res, cases
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _passed_before_stop(log, name):
    """Whether pytest -v's lines in log say every run of name (each
    parameter) passed: the one L1 stopped in has no status."""
    module, func = name.split("::")
    seen = [m.group(2) for m in re.finditer(rf"^tests/kvm/l1/{module}\.py::{func}(\[[^\]]*\])? ?(\w*)", log, re.M)]
    return bool(seen) and all(st == "PASSED" for st in seen)


def _tail(text, n=60):
    return "\n".join(text.splitlines()[-n:])


@pytest.mark.parametrize("name", inner_tests())
def test_kvm_tier(l1_results, name):
    res, cases = l1_results
    if res.rc is None:
        # the tests that had passed in L1 before it stopped did pass
        if _passed_before_stop(res.log, name):
            return
        pytest.fail(f"L1 stopped after {res.seconds:.0f} s without the tests' exit status; its console:\n"
                    f"{res.console_tail(150)}\n--- the tests' output:\n{_tail(res.log)}")
    if name not in cases:
        pytest.fail(f"{name} did not run in L1 (exit status {res.rc}); the tests' output:\n{_tail(res.log)}")
    for case in cases[name]:
        for kind in ("failure", "error", "skipped"):
            el = case.find(kind)
            if el is not None:
                out = case.find("system-out")
                log = f"\n--- its output (the Airlock's log on failure):\n{_tail(out.text, 150)}" \
                    if out is not None and out.text else ""
                pytest.fail(f"in L1, {name} [{case.get('name')}]: {kind}: {el.get('message', '')}\n"
                            f"{_tail(el.text or '', 80)}{log}", pytrace=False)
