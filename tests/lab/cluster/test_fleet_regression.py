# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""Fleet regression check (issue 18): playbooks/cluster.yml at 100 KWOK GPU nodes on a control plane of
its own (every request in the API server's audit log), through benchmarks/cluster_deploy's own code.

A no-op rerun must change nothing and write nothing: what is already as planned is not sent
(k8s_bulk_apply, for the node labels, the validation Jobs and, with gpuops_cluster_rollout together, every
component's objects in one run). At most MAX_RERUN_WRITES write requests: 0. A change that made the rerun
write per node, or re-apply an object that is in sync (an atomic map or a value the API server
normalizes read as a difference), fails here.
Timings are printed, never asserted (benchmarks/ measure them)."""
from __future__ import annotations

import importlib.util
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
NODES = int(os.environ.get("FLEET_CHECK_NODES", "100"))
# nothing at all: every object is compared with what the API server holds before it is sent
MAX_RERUN_WRITES = 0


def _bench():
    os.environ.setdefault("CLUSTER_BENCH_DIR", os.path.join(os.environ.get("GPUOPS_CACHE", os.path.expanduser(
        "~/.cache/gpuops")), "cluster", "fleet-check"))
    os.environ.setdefault("CLUSTER_BENCH_PORT_BASE", "26743")
    spec = importlib.util.spec_from_file_location("bench_run", os.path.join(ROOT, "benchmarks", "cluster_deploy", "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_op_rerun_at_100_nodes_writes_nothing_per_node():
    bench = _bench()
    try:
        r = bench.one(NODES, False, [], 16)
    finally:  # its control plane stops whatever happened
        bench.sh([os.path.join(bench.LAB, "down.sh"), "--purge"],
                 env=dict(os.environ, CLUSTER_DIR=bench.DIR, GPUOPS_CACHE=bench.CACHE))
    print(json.dumps({k: r[k] for k in ("nodes", "first_run_s", "rerun_s", "rerun_requests")}, indent=1))
    assert r["rerun_changed_tasks"] == 0, r["rerun_changed_task_names"]
    assert r["nodes_not_ready_after_rerun"] == 0
    writes = r["rerun_requests"]["playbook_writes_by_resource"]
    assert not writes.get("nodes") and not writes.get("jobs"), writes
    total = r["rerun_requests"]["writes"].get("ansible (playbook)", 0)
    assert total <= MAX_RERUN_WRITES, (total, writes)
    # and the first run labelled every node (run.py's verify) with one write per node for labels and
    # one per node for the validated label, plus one Job per node: no retries, no double writes
    first = r["first_run_requests"]["playbook_writes_by_resource"]
    assert first.get("nodes") == 2 * NODES and first.get("jobs") == NODES, first
