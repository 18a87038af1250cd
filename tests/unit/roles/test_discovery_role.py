# Copyright: gpuops.nvidia contributors
# Apache License 2.0
# SPDX-License-Identifier: Apache-2.0
"""The discovery role, run for real (ansible-playbook, connection local) against node roots.

Its two refusals -- a workload kind that is not one of the three (or several at once), and a GPU
workload on a node where no NVIDIA GPU is seen -- are made by the role's argument spec and by
gpu_facts' ``require_gpu``, so that discovery costs one task per host (issue 18, host side).
"""
from __future__ import annotations

import pytest

from test_initramfs_retry import play, recap


@pytest.mark.parametrize("check", [False, True])
def test_gpu_workload_on_a_node_without_gpus_is_refused(tmp_path, roots, check):
    res = play(tmp_path, "discovery", ["main"], {"gpu_workload": "container", "gpu_facts_root": roots["no-gpu"]},
               check=check)
    assert res.returncode != 0
    assert "no NVIDIA GPU was found under %s, but this node has a GPU workload kind" % roots["no-gpu"] in res.stdout


@pytest.mark.parametrize("workload", ["gpu", "container,vm-vgpu", ["container", "vm-vgpu"]])
def test_unknown_or_mixed_workload_kinds_are_refused_before_the_gather(tmp_path, roots, workload):
    res = play(tmp_path, "discovery", ["main"], {"gpu_workload": workload, "gpu_facts_root": roots["h200"]})
    assert res.returncode != 0
    assert "discovery_workload must be one of: , container, vm-passthrough, vm-vgpu" in res.stdout, res.stdout
    assert "TASK [gpuops.nvidia.discovery : Gather GPU" not in res.stdout


@pytest.mark.parametrize("node, extra", [
    ("h200", {"gpu_workload": "container"}),
    ("passthrough", {"gpu_workload": "vm-passthrough"}),
    ("no-gpu", {}),                                                          # a CPU node
    ("no-gpu", {"gpu_workload": None}),                                      # a CPU node (gpu_workload: with no value)
    ("no-gpu", {"discovery_workload": None}),
    ("no-gpu", {"gpu_workload": "vm-vgpu", "discovery_require_gpu": False}),  # a lab stand-in
])
def test_nodes_that_fit_their_workload_pass_with_one_task(tmp_path, roots, node, extra):
    res = play(tmp_path, "discovery", ["main"], dict(extra, gpu_facts_root=roots[node]))
    assert res.returncode == 0, res.stdout[-3000:]
    counts = recap(res)
    assert counts["failed"] == "0" and counts["changed"] == "0"
    # the argument spec check and the gather: nothing else runs per host
    assert res.stdout.count("TASK [gpuops.nvidia.discovery : ") == 2, res.stdout
