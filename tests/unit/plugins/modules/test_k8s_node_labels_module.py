# SPDX-License-Identifier: Apache-2.0
"""k8s_node_labels' input checks: every bad input is refused with its reason before any connection (the
kubeconfig given points nowhere, so a check that let bad input through would fail on the connection instead).
The module against a real API server: the cluster lane (test_node_labels_module_writes_only_the_nodes_that_differ)."""
from __future__ import annotations

import pytest

from ansible_collections.gpuops.nvidia.plugins.modules import k8s_node_labels
from conftest import run_module

GPU = {"count": 8, "product": "NVIDIA-H100-80GB-HBM3", "memory": 81559, "compute": "9.0"}


def run(capsys, tmp_path, **args):
    args.setdefault("field_manager", "gpuops-nvidia")
    args.setdefault("kubeconfig", str(tmp_path / "no-such-kubeconfig"))
    return run_module(capsys, k8s_node_labels.main, args)


@pytest.mark.parametrize("args, words", [
    ({"nodes": [{"name": "a", "gpu": GPU}, {"name": "a", "gpu": GPU}]}, ["invalid GPU node inventory", "a: listed twice"]),
    ({"nodes": [{"name": "a", "gpu": GPU, "workload": ["container", "vm-passthrough"]},
                {"name": "b", "gpu": GPU, "workload": "vm-gpu"}]},
     ["invalid GPU node inventory", "a: one GPU workload kind per node", "b: unknown GPU workload kind 'vm-gpu'"]),
    ({"nodes": [{"name": "a", "gpu": GPU, "mig_config": "all-1g.10gb", "workload": "vm-passthrough"}]},
     ["device plugin / MIG configs apply to container nodes"]),
    ({"nodes": [{"name": "a", "gpu": GPU, "device_plugin_config": "nope"}],
      "device_plugin_configs": {"ts": {"version": "v1"}}}, ["device plugin config 'nope' is not defined"]),
    ({"nodes": [], "concurrency": 0}, ["concurrency"]),
    ({"nodes": [], "list_page_size": -1}, ["list_page_size must be 0", "-1"]),
    ({"nodes": [], "field_manager": ""}, ["field_manager"]),
    ({"nodes": [], "mig_strategy": "dual"}, ["mig_strategy", "dual"]),
    ({"nodes": [], "default_workload": "vm"}, ["default_workload"]),
])
def test_bad_input_is_refused_before_any_connection(capsys, tmp_path, args, words):
    rc, out = run(capsys, tmp_path, **args)
    assert rc == 1, out
    assert "cannot reach the API server" not in out["msg"]
    for word in words:
        assert word in out["msg"], out["msg"]


def test_good_input_goes_on_to_connect(capsys, tmp_path):
    # the same checks pass good input: the run gets as far as the (missing) kubeconfig
    rc, out = run(capsys, tmp_path, nodes=[{"name": "a", "gpu": GPU}, {"name": "cpu-0"}])
    assert rc == 1 and "cannot reach the API server" in out["msg"], out
