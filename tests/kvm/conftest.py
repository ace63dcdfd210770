"""The KVM tier (docs/testing.md): test_kvm_tier.py boots L1 and runs
tests/kvm/l1 there; those are not tests of this host."""

collect_ignore = ["l1"]
