"""The red-team suite (issue 4): every test here is an attack that passes
only if the attack fails. It runs on the integration harness (each test
starts its own Airlock, real VMs, leak checks), loaded under its own module
name so both suites can be collected in one pytest run."""

import importlib.util
import os
import sys

_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration", "conftest.py")
_spec = importlib.util.spec_from_file_location("airlock_harness", _path)
harness = importlib.util.module_from_spec(_spec)
sys.modules["airlock_harness"] = harness
_spec.loader.exec_module(harness)

# the fixtures and the report hook, as pytest finds them in a conftest
templates = harness.templates
airlock_factory = harness.airlock_factory
airlock = harness.airlock
pytest_runtest_makereport = harness.pytest_runtest_makereport
