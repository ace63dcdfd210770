"""The chaos soak (bench/soak.py, docs/testing.md "Chaos soak"), 3 minutes:
mixed lifecycle operations over a few sandboxes of an Airlock of its own
while airlock-node, airlockd, a VMM and airlock-nodemgr are killed and the
whole stack is sent SIGTERM, and a restart brings a newer guest agent that
replaces the sandboxes' agents in place; half the sandboxes have a volume
of their own; nothing acknowledged may be lost
or corrupted and nothing may leak. The soak starts and checks its own instance (the
harness's settings, restarted on the same data dir and port), so this test
only needs the templates. AIRLOCK_SOAK_SEED=N replays a seed."""

import importlib.util
import json
import os
import subprocess

from harness import ROOT

SOAK = os.path.join(ROOT, "bench", "soak.py")


def soak_module():
    spec = importlib.util.spec_from_file_location("soak", SOAK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_soak_3_minutes(templates):
    seed = os.environ.get("AIRLOCK_SOAK_SEED")
    # faults every 12-24 s: the five kinds fit in the 3 minutes with room for slow recoveries
    cmd = ["/usr/bin/python3", SOAK, "--minutes", "3", "--fault-interval", "12,24", "--json"]
    cmd += ["--seed", seed] if seed else []
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=ROOT)
    try:
        summary = json.loads(r.stdout)
        detail = soak_module().format_summary(summary)
    except ValueError:
        summary, detail = None, r.stdout[-8000:]
    assert r.returncode == 0, (f"soak failed (exit {r.returncode}; AIRLOCK_SOAK_SEED="
                               f"{summary['seed'] if summary else '?'} replays its schedule):\n{detail}\n"
                               f"--- the soak's progress (stderr, last lines):\n{r.stderr[-4000:]}")
    assert summary["result"] == "pass"
    # it did what it says: every fault kind, enough operations
    assert set(summary["faults"]) == {"node", "airlockd", "vmm", "nodemgr", "sigterm_all"}, detail
    assert sum(v["ok"] for v in summary["ops"].values()) > 50, detail
    # a restart brought a newer guest agent, which replaced running ones
    assert summary["agent_upgrades"] > 0, detail
    # sandboxes with volumes were among them
    assert summary["volumes_made"] > 0, detail
