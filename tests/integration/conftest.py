"""The fixtures of tests/integration come from tests/harness.py (shared
with tests/security): each test gets its own Airlock, real VMs, leak
checks; e2b_sdk (the E2B SDK suite's node and SDK, installed once per run)
from tests/e2b_sdk.py."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import airlock, airlock_factory, pytest_runtest_makereport, templates  # noqa: E402,F401
from e2b_sdk import e2b_sdk  # noqa: E402,F401
