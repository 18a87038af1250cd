"""The doctor's filters (plugins/filter/gpu_diagnose.py) over real-capture and synthetic node facts.

Controller code (filters raise ansible.errors.AnsibleFilterError): kept out of tests/unit/plugins/module_utils,
which ansible-test units runs with ansible.module_utils alone, as on a target."""
from __future__ import annotations

import base64

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.filter import gpu_diagnose as f
from ansible_collections.gpuops.nvidia.plugins.module_utils import _gpu_facts


def facts_of(root, probes):
    facts, _warnings = _gpu_facts.gather(root, _gpu_facts.SUBSETS, nvml_lib=None,
                                         load_nvml=lambda: (None, "no pynvml in unit tests"))
    facts["probes"] = probes
    return facts


def _slurp(tree, path):
    return {"item": path, "failed": False, "encoding": "base64",
            "content": base64.b64encode(tree[path].encode()).decode(), "source": path}


def test_filter_sorts_errors_first_and_rejects_bad_input(roots):
    facts = facts_of(roots["h200"], probes={"nvidia_smi": True, "toolkit": True})
    facts["nvml"] = {"devices": [{"index": 0, "mig_mode": {"current": True, "pending": False}}], "cuda_driver_version": "13.0"}
    out = f.gpu_diagnose(facts, {"workload": "container", "cuda_version": "13.1"})
    assert [x["severity"] for x in out] == ["error", "warning"]
    with pytest.raises(AnsibleFilterError, match="expects ansible_facts.gpu"):
        f.gpu_diagnose("nope")


def test_readiness_filter_refuses_non_dict():
    with pytest.raises(AnsibleFilterError):
        f.gpu_readiness(["not", "facts"])
    assert f.gpu_readiness(None, None) == {"ready": True, "reasons": []}


def test_filters_check_their_input():
    assert set(f.FilterModule().filters()) >= {"gpu_doctor_read", "gpu_doctor_pending"}
    with pytest.raises(AnsibleFilterError, match="slurp loop"):
        f.gpu_doctor_read({}, "nope")
    with pytest.raises(AnsibleFilterError, match="container_runtime state"):
        f.gpu_doctor_pending(None)
    state = f.gpu_doctor_read(None, [_slurp({"/etc/containerd/config.toml": 'imports = ["x.toml"]'}, "/etc/containerd/config.toml"),
                                     {"item": "/etc/docker/daemon.json", "skipped": True}])
    assert state["files"] == {"/etc/containerd/config.toml": 'imports = ["x.toml"]'}
    assert f.gpu_doctor_pending(state) == {"read": ["/etc/containerd/x.toml"], "globs": []}
