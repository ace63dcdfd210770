"""The red-team suite (issue 4): every test here is an attack that passes
only if the attack fails. Same harness as tests/integration
(tests/harness.py): its own Airlock per test, real VMs, leak checks."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import airlock, airlock_factory, pytest_runtest_makereport, templates  # noqa: E402,F401
