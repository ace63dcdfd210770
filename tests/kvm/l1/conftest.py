"""The tests that run inside the KVM tier's L1 (tests/kvm/test_kvm_tier.py
boots it and runs them there; they are not collected on the host): the same
harness as tests/integration (tests/harness.py), each test with its own
Airlock on KVM, real VMs one level down, leak checks. Helpers come from
tests/integration, where the same steps are tested under TCG."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "integration"))

from harness import airlock, airlock_factory, pytest_runtest_makereport, templates  # noqa: E402,F401
from netlab import internet  # noqa: E402,F401
