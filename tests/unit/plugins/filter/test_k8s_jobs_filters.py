"""The k8s_plan filters over per-node validation Jobs (plugins/plugin_utils/_k8s_jobs.py behind them;
tests/unit/plugins/plugin_utils/test_k8s_jobs.py tests _k8s_jobs itself)."""
from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.filter import k8s_plan as f
from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _k8s_jobs as kj


def _job(name, node, *conds):
    return {"metadata": {"name": name, "annotations": {kj.NODE_LABEL: node}},
            "status": {"conditions": [{"type": t, "status": s} for t, s in conds]}}


def _node(name, **alloc):
    return {"metadata": {"name": name}, "status": {"allocatable": dict({"cpu": "64", "pods": "110"}, **alloc)}}


def test_jobs_sorted_and_deduplicated():
    out = f.k8s_validation_jobs(["b", "a", "b"], "gpuops-validate", "k")
    assert [j["node"] for j in out] == ["a", "b"]


def test_outcomes():
    wanted = {n: kj.job_name("v", "k", n) for n in ("a", "b", "c", "d")}
    jobs = [
        _job(wanted["a"], "a", ("SuccessCriteriaMet", "True"), ("Complete", "True")),
        _job(wanted["b"], "b", ("FailureTarget", "True"), ("Failed", "True")),
        _job(wanted["c"], "c"),
        _job("v-old-a", "a", ("Complete", "True")),  # a previous validator version: stale
    ]
    out = f.k8s_job_outcomes(jobs, list(wanted.values()))
    assert out == {"complete": ["a"], "failed": ["b"], "running": ["c"], "stale": ["v-old-a"],
                   "missing": [wanted["d"]]}


def test_named_objects():
    assert f.k8s_named_objects(["j1"], "batch/v1", "Job", "ns") == [
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"namespace": "ns", "name": "j1"}}]


def test_nodes_split_by_advertised_gpus():
    nodes = [_node("b", **{"nvidia.com/gpu": "8"}), _node("a"), _node("c", **{"nvidia.com/gpu": "0"}),
             _node("d", **{"nvidia.com/mig-1g.18gb": "7"}), {"metadata": {"name": "e"}}]
    assert f.k8s_gpu_allocatable_split(nodes) == {"gpu": ["b", "d"], "no_gpu": ["a", "c", "e"]}
