"""The red-team suite (issue 4): every test here is an attack that passes
only if the attack fails. Same harness as tests/integration
(tests/harness.py): its own Airlock per test, real VMs, leak checks."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import airlock, airlock_factory, pytest_runtest_makereport, templates  # noqa: E402,F401


# ---- counting the attack cases (docs/security.md, "Red-team suite") ----
#
# Every test here is one attack case, or as many as its marker says when it
# runs a table of them (each on its own, with its evidence and the control
# after it): @pytest.mark.cases(len(TABLE)). The count of the cases that
# passed, by class, ends the run's summary. test_fuzz.py replays fuzz
# corpora: no attack case of its own.

CLASSES = {
    "test_egress_attacks": "network", "test_credential_attacks": "network",
    "test_tenant_attacks": "tenant", "test_api_abuse": "tenant", "test_capabilities": "tenant",
    "test_api_hostile_client": "hostile client", "test_hostile_build": "hostile build input",
    "test_guest_confinement": "guest", "test_hostile_guest": "guest", "test_vmm_jail": "guest",
    "test_privileges": "privileges",
}
_cases = {}   # nodeid -> (class, number of cases)
_passed = {}  # class -> cases passed


def pytest_configure(config):
    config.addinivalue_line("markers", "cases(n): the attack cases the test runs, when more than one")


def pytest_collection_finish(session):
    for item in session.items:  # those selected
        cls = CLASSES.get(item.module.__name__.rsplit(".", 1)[-1]) if getattr(item, "module", None) else None
        if cls:
            m = item.get_closest_marker("cases")
            _cases[item.nodeid] = (cls, m.args[0] if m else 1)


def pytest_runtest_logreport(report):
    if report.when == "call" and report.passed and report.nodeid in _cases:
        cls, n = _cases[report.nodeid]
        _passed[cls] = _passed.get(cls, 0) + n


def pytest_terminal_summary(terminalreporter):
    if not _cases:
        return
    declared = {}
    for cls, n in _cases.values():
        declared[cls] = declared.get(cls, 0) + n
    by = ", ".join(f"{c} {_passed.get(c, 0)}/{n}" for c, n in sorted(declared.items()))
    terminalreporter.write_line(f"red-team: {sum(_passed.values())} of {sum(declared.values())} attack cases "
                                f"passed ({by})")
