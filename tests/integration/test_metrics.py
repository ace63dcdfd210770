"""GET /metrics (docs/metrics.md): Prometheus' text format, read with the
Prometheus client's own parser as a scraper would; what airlockd counts
(API requests, lifecycle operations), what the store knows (sandboxes by
state), what the node counts (its requests, capability decisions, warm
pool, sandboxes, per-sandbox VMM CPU and memory when asked); and who may
scrape (the metrics token or the admin token, not a tenant's key, and the
metrics token opens nothing else)."""

import os

from clusterlab import wait_for
from prometheus_client.parser import text_string_to_metric_families

from test_tenants import _tenant_with_key


def scrape(a, token, query=""):
    status, headers, body = a.request("GET", f"/metrics{query}", token=token)
    assert status == 200, (status, body)
    assert headers.get("Content-Type", "").startswith("text/plain; version=0.0.4"), headers
    samples = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def test_metrics(airlock_factory):
    a = airlock_factory(env={"AIRLOCK_POOL_SIZE": "1"}, prebuild="minimal")
    wait_for(lambda: any(p["ready"] >= 1 for p in a.api("GET", "/v1/pools")["pools"]), 120, "a warm VM")
    with open(os.path.join(a.data_dir, "control", "metrics.token")) as f:
        token = f.read().strip()
    assert token.startswith("alk_")

    made = a.create("minimal")
    assert made["pool"] == "hit", made
    sid = made["id"]
    assert a.exec(sid, ["true"])["exit_code"] == 0
    a.api("POST", f"/v1/sandboxes/{sid}/pause?wait=true")
    a.api("POST", f"/v1/sandboxes/{sid}/resume?wait=true")
    assert a.request("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": "snap-0123456789abcdef"})[0] == 404

    m = scrape(a, token)
    # airlockd's own
    assert value(m, "airlock_sandboxes", state="running") == 1
    assert value(m, "airlock_http_requests_total", route="/v1/sandboxes/{id}/exec", method="POST", code="200") == 1
    assert value(m, "airlock_http_requests_total", route="/v1/sandboxes/{id}/rollback", method="POST",
                 code="404") == 1
    assert value(m, "airlock_http_request_seconds_count", route="/v1/sandboxes", method="POST") == 1
    for verb in ("pause", "resume"):
        assert value(m, "airlock_operations_total", verb=verb, outcome="succeeded") == 1
        assert value(m, "airlock_operation_seconds_count", verb=verb) == 1
        assert value(m, "airlock_operation_seconds_bucket", verb=verb, le="+Inf") == 1
    # the node's, under its name
    assert value(m, "airlock_node_scrape_ok", node="local") == 1
    assert value(m, "airlock_node_sandboxes", state="running", node="local") == 1
    assert value(m, "airlock_node_requests_total", op="exec", outcome="ok", node="local") >= 1
    assert value(m, "airlock_capability_decisions_total", decision="allow", reason="", node="local") >= 1
    assert value(m, "airlock_pool_claims_total", template="minimal", outcome="hit", node="local") == 1
    # per sandbox only when asked for
    assert not [k for k in m if k[0].startswith("airlock_sandbox_")]
    per = scrape(a, token, "?per_sandbox=1")
    assert value(per, "airlock_sandbox_cpu_seconds_total", sandbox=sid, node="local") > 0
    assert value(per, "airlock_sandbox_memory_bytes", sandbox=sid, node="local") > 1 << 20

    # the admin token scrapes too; nobody else, and the metrics token reads
    # nothing but the metrics
    assert a.request("GET", "/metrics")[0] == 200
    _, key = _tenant_with_key(a, "gamma")
    assert a.request("GET", "/metrics", token=key["key"])[0] == 403
    assert a.request("GET", "/metrics", token="alk_" + "0" * 64)[0] == 401
    assert a.request("GET", "/metrics", auth=False)[0] == 401
    assert a.request("GET", "/v1/sandboxes", token=token)[0] == 401
    assert a.request("DELETE", f"/v1/sandboxes/{sid}", token=token)[0] == 401
    assert a.api("GET", f"/v1/sandboxes/{sid}")["state"] == "running"


def test_sandbox_metrics(airlock_factory):
    """GET /v1/sandboxes/{id}/metrics: its VMM's CPU and memory and its disk
    now and as its node sampled them (every second here), and the guest's
    own view; another tenant's sandbox is a 404; a sandbox no node holds
    has no samples."""
    a = airlock_factory(env={"AIRLOCK_USAGE_SAMPLE_S": "1"}, prebuild="minimal")
    sid = a.create("minimal")["id"]
    # busy for a while: the samples see its CPU
    a.exec(sid, ["sh", "-c", "dd if=/dev/zero of=/dev/null bs=64k count=20000 2>/dev/null; "
                             "head -c 8000000 /dev/urandom > /root/blob && sync"])
    m = wait_for(lambda: (lambda m: m if len(m["history"]) >= 3 else None)(
        a.api("GET", f"/v1/sandboxes/{sid}/metrics")), 60, "three usage samples")
    assert m["sandbox_id"] == sid and m["state"] == "running" and m["sample_s"] == 1
    now = m["now"]
    assert now["memory_bytes"] > 1 << 20 and now["disk_bytes"] > 8000000 and now["ts_ms"] > 0, now
    ts = [h["ts_ms"] for h in m["history"]]
    assert ts == sorted(ts) and all(h["memory_bytes"] > 0 for h in m["history"]), m["history"]
    assert any(h.get("cpu_pct", 0) > 0 for h in m["history"] + [now]), m
    g = m["guest"]
    assert g["cpu_count"] >= 1 and 0 < g["mem_used"] <= g["mem_total"] and g["disk_total"] > 0, g

    _, key = _tenant_with_key(a, "delta")
    assert a.request("GET", f"/v1/sandboxes/{sid}/metrics", token=key["key"])[0] == 404
    a.api("POST", f"/v1/sandboxes/{sid}/suspend?wait=true")
    m = a.api("GET", f"/v1/sandboxes/{sid}/metrics")
    assert m["state"] == "suspended" and m["now"] is None and m["history"] == [] and "guest" not in m, m
