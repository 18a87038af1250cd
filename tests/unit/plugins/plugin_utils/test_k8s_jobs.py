"""Per-node validation Jobs: names (immutable pod template -> keyed names, 63-char limit) and outcomes."""
from __future__ import annotations

import re

import pytest
from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _k8s_jobs as kj

DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def test_name_is_stable_and_keyed():
    a = kj.job_name("gpuops-validate", "k1", "h200-0")
    assert a == kj.job_name("gpuops-validate", "k1", "h200-0")
    assert a.startswith("gpuops-validate-") and a.endswith("-h200-0")
    assert a != kj.job_name("gpuops-validate", "k2", "h200-0")  # new image/options -> new Job


@pytest.mark.parametrize("node", [
    "h200-0",
    "ip-10-0-12-34.eu-west-1.compute.internal",  # dots: valid node name, not a DNS label
    "n" * 253,
    "GPU-Node-A",
])
def test_names_are_valid_label_values(node):
    name = kj.job_name("gpuops-validate", "key", node)
    assert len(name) <= 63 and DNS_LABEL.match(name), name
    label = kj.node_label_value(node)
    assert len(label) <= 63


def test_long_names_sharing_a_prefix_do_not_collide():
    a = "gpu-node-" + "x" * 60 + "-a"
    b = "gpu-node-" + "x" * 60 + "-b"
    names = [j["name"] for j in kj.jobs([a, b], "gpuops-validate", "k")]
    assert len(set(names)) == 2


def _job(name, node, *conds):
    return {"metadata": {"name": name, "annotations": {kj.NODE_LABEL: node}},
            "status": {"conditions": [{"type": t, "status": s} for t, s in conds]}}


def test_condition_false_is_not_an_outcome():
    assert kj.job_state(_job("j", "n", ("Complete", "False"))) == "running"


def _node(name, **alloc):
    return {"metadata": {"name": name}, "status": {"allocatable": dict({"cpu": "64", "pods": "110"}, **alloc)}}


def test_nodes_split_by_advertised_gpus():
    nodes = [_node("b", **{"nvidia.com/gpu": "8"}), _node("a"), _node("c", **{"nvidia.com/gpu": "0"}),
             _node("d", **{"nvidia.com/mig-1g.18gb": "7"}), {"metadata": {"name": "e"}}]
    assert kj.split_by_gpu_allocatable(nodes) == (["b", "d"], ["a", "c", "e"])
    assert kj.gpu_allocatable(_node("x", **{"nvidia.com/gpu": "bogus"})) == 0
