"""The fixtures of tests/integration come from tests/harness.py (shared
with tests/security): each test gets its own Airlock, real VMs, leak
checks."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import airlock, airlock_factory, pytest_runtest_makereport, templates  # noqa: E402,F401
