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
import warnings
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


def _script(deselect=()):
    """L1's run.sh: tests/kvm/l1 with the integration harness, less the
    node ids in deselect."""
    skip = "".join(f" --deselect 'tests/kvm/l1/{n}'" for n in deselect)
    return (f"cd '{ROOT}'\n"
            f"export AIRLOCK_BUILD_DIR='{BUILD}' AIRLOCK_TEST_VOLUME={VOLUME} AIRLOCK_TEST_PREBUILD=minimal "
            f"AIRLOCK_APT_CACHE='{BUILD}/apt-cache'\n"
            f"exec /usr/bin/python3 -m pytest -p no:cacheprovider -v --durations=20 "
            f"--junitxml={OUT}/junit.xml -o junit_family=xunit1 -o junit_logging=all "
            f"-o faulthandler_timeout={INNER_TEST_MAX_S}{skip} tests/kvm/l1\n")


def _junit_cases(workdir):
    """module::function -> its testcase elements in the run's JUnit report."""
    cases = {}
    try:
        root = ET.parse(os.path.join(workdir, "out", "junit.xml")).getroot()
    except (OSError, ET.ParseError):
        return cases
    for case in root.iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        cases.setdefault(f"{module}::{case.get('name').split('[')[0]}", []).append(case)
    return cases


@pytest.fixture(scope="module")
def l1_results():
    """(the last L1 run's Result, its JUnit cases, the tests that passed in
    an L1 that stopped before it). An L1 that hangs itself (nothing runs in
    it for l1vm.STALL_S) or whose own kernel panics (an interrupt taken
    inside kvm_amd's VMRUN window): QEMU 7.2's TCG emulating SVM, seen in
    4 of 10 L1 boots here, docs/testing.md. That is not a test's failure:
    it is reported as a warning, with the vCPUs' registers or the panic,
    and a fresh L1 runs the tests that had not passed, once. A test that
    fails, in either L1, fails here."""
    workdirs, passed_ids, passed_before = [], set(), set()
    try:
        for attempt in (1, 2):
            workdirs.append(tempfile.mkdtemp(prefix="airlock-l1-", dir=BUILD))
            res = L1(workdirs[-1]).run(_script(sorted(passed_ids)), L1_TIMEOUT)
            print(f"L1 ran for {res.seconds:.0f} s, exit status {res.rc}")
            if not (res.stall or res.panic) or attempt == 2:
                break
            passed_ids |= _passed_ids(res.log)
            passed_before |= {n for n in inner_tests() if _passed_before_stop(res.log, n)}
            what = "stalled" if res.stall else "had its kernel panic"
            warnings.warn(f"L1 {what} after {res.seconds:.0f} s (its own, not a test's failure); a fresh L1 "
                          f"runs the {len(inner_tests()) - len(passed_before)} tests it had not passed. Its last "
                          f"output:\n{_tail(res.log, 5)}\n{(res.stall or res.panic)[:1500]}")
        yield res, _junit_cases(workdirs[-1]), passed_before
    finally:
        for w in workdirs:
            shutil.rmtree(w, ignore_errors=True)


def _passed_ids(log):
    """The node ids (with parameters) pytest -v's lines in log say passed."""
    return {m.group(1) for m in re.finditer(r"^tests/kvm/l1/(\S+) PASSED", log, re.M)}


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
    res, cases, passed_before = l1_results
    if name in passed_before:
        return  # in an L1 that stalled after it
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
