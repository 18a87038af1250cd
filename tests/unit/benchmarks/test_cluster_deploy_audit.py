# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""benchmarks/cluster_deploy counts the playbook's requests from the API server's audit log: the lab's
own node creation (which may end a fraction of a second before the run starts) and the benchmark's
own reads must never be counted as the playbook's (the 100-node fleet check once saw 218 Node writes
for 200: 18 of the lab's node creates, inside the old one-second slack)."""
from __future__ import annotations

import calendar
import importlib.util
import json
import os
import sys
import time

from conftest import needs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BENCH = os.path.join(ROOT, "benchmarks", "cluster_deploy")
# the benchmark is the repository's, not in the Galaxy tarball (galaxy.yml build_ignore)
pytestmark = needs("benchmarks/cluster_deploy/run.py")


def _run_module():
    sys.path.insert(0, BENCH)
    try:
        spec = importlib.util.spec_from_file_location("bench_run_audit", os.path.join(BENCH, "run.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(BENCH)


def _event(ts, agent, verb, resource, name="gpu-0"):
    return {"stage": "ResponseComplete", "requestReceivedTimestamp": ts, "userAgent": agent, "verb": verb,
            "objectRef": {"resource": resource, "name": name, "apiVersion": "v1"},
            "responseStatus": {"code": 201 if verb == "create" else 200}}


PLAYBOOK = "OpenAPI-Generator/31.0.0/python"
LAB = "gpuops-lab-nodes"


def test_lab_node_creates_and_earlier_requests_are_not_the_playbooks(tmp_path):
    run = _run_module()
    start = calendar.timegm(time.strptime("2026-12-04T02:40:10", "%Y-%m-%dT%H:%M:%S")) + 0.5
    events = [
        _event("2026-12-04T02:40:10.200000Z", LAB, "create", "nodes"),        # lab, just before the run
        _event("2026-12-04T02:40:10.400000Z", PLAYBOOK, "patch", "nodes"),    # 0.1 s before the run
        _event("2026-12-04T02:40:10.600000Z", LAB, "create", "nodes", "gpu-1"),  # lab, after: still the lab's
        _event("2026-12-04T02:40:10.700000Z", "gpuops-bench", "list", "nodes"),
        _event("2026-12-04T02:40:11.000000Z", PLAYBOOK, "patch", "nodes"),
        _event("2026-12-04T02:40:11Z", PLAYBOOK, "create", "jobs"),
        _event("2026-12-04T02:40:12.000001Z", "kwok/v0.7.0", "patch", "nodes"),
        _event("2026-12-04T02:40:12.5Z", PLAYBOOK, "get", "nodes"),
    ]
    audit = tmp_path / "audit.log"
    audit.write_text("".join(json.dumps(e) + "\n" for e in events))
    by_client, by_verb, writes, by_resource = run.count_audit(str(audit), start)
    assert by_resource == {"nodes": 1, "jobs": 1}
    assert writes == {"ansible (playbook)": 2}
    assert by_client == {"lab": 2, "ansible (playbook)": 3, "kwok": 1}
    assert by_verb == {"patch": 1, "create": 1, "get": 1}


def test_received_at_reads_fractions_and_whole_seconds():
    run = _run_module()
    whole = run.floor.received_at({"requestReceivedTimestamp": "2026-12-04T02:40:11Z"})
    assert whole == calendar.timegm((2026, 12, 4, 2, 40, 11, 0, 0, 0))
    assert run.floor.received_at({"requestReceivedTimestamp": "2026-12-04T02:40:11.250000Z"}) == whole + 0.25
