# SPDX-License-Identifier: Apache-2.0
"""k8s_rollouts_pending: the one wait for every component (gpuops_cluster_rollout=together)."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.filter.k8s_plan import k8s_rollouts_pending


def ds(name, gen=1, observed=1, desired=3, updated=3, ready=3, **meta):
    return {"kind": "DaemonSet", "metadata": dict({"name": name, "namespace": "gpu-operator", "generation": gen}, **meta),
            "status": {"observedGeneration": observed, "desiredNumberScheduled": desired,
                       "updatedNumberScheduled": updated, "numberReady": ready}}


def test_rolled_out_and_not():
    assert k8s_rollouts_pending([ds("a"), ds("b", desired=0, updated=0, ready=0)]) == []
    assert k8s_rollouts_pending([ds("a", ready=2)]) == ["DaemonSet/gpu-operator/a: 2 ready of 3"]
    assert k8s_rollouts_pending([ds("a", updated=1, ready=1)]) == ["DaemonSet/gpu-operator/a: 1 updated, 1 ready of 3"]
    # a new spec the controller has not seen: its old counts say nothing
    assert k8s_rollouts_pending([ds("a", gen=2)]) == ["DaemonSet/gpu-operator/a: spec not yet seen by its controller"]
    assert k8s_rollouts_pending([ds("a", ready=0, deletionTimestamp="2026-12-03T00:00:00Z")]) == []


def test_deployments():
    dep = {"kind": "Deployment", "metadata": {"name": "m", "namespace": "n", "generation": 1},
           "spec": {"replicas": 1}, "status": {"observedGeneration": 1, "updatedReplicas": 1}}
    assert k8s_rollouts_pending([dep]) == ["Deployment/n/m: 0 available of 1"]
    dep["status"]["availableReplicas"] = 1
    assert k8s_rollouts_pending([dep]) == []


@pytest.mark.parametrize("bad", ["x", [1], [{"metadata": "m"}]])
def test_refused(bad):
    with pytest.raises(AnsibleFilterError):
        k8s_rollouts_pending(bad)
