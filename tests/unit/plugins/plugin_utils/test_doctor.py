"""The doctor's diagnoses over real-capture and synthetic node facts."""
from __future__ import annotations

import copy

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils import _gpu_facts
from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _doctor


def facts_of(root, nvml=None, probes=None):
    facts, _warnings = _gpu_facts.gather(root, _gpu_facts.SUBSETS, nvml_lib=nvml,
                                         load_nvml=lambda: (None, "no pynvml in unit tests"))
    facts["probes"] = probes if probes is not None else {"nvidia_smi": True, "toolkit": True}
    return facts


def ids(findings):
    return sorted(f["id"] for f in findings)


def test_healthy_h200_has_no_findings(roots, h200_nvml):
    assert _doctor.diagnose(facts_of(roots["h200"], h200_nvml), {"workload": "container", "cuda_version": "13.0"}) == []


def test_cuda_mismatch_uses_nvml_cuda_version(roots, h200_nvml):
    findings = _doctor.diagnose(facts_of(roots["h200"], h200_nvml), {"workload": "container", "cuda_version": "13.1"})
    assert ids(findings) == ["cuda-version-mismatch"]
    assert "supports CUDA 13.0" in findings[0]["summary"]


def test_cuda_from_branch_table_without_nvml(roots):
    # workstation runs 550 -> CUDA 12.4
    facts = facts_of(roots["workstation"])
    assert _doctor.driver_cuda(facts) == "12.4"
    assert ids(_doctor.diagnose(facts, {"workload": "container", "cuda_version": "12.8"})) == ["cuda-version-mismatch"]
    assert _doctor.diagnose(facts, {"workload": "container", "cuda_version": "12.4"}) == []


def test_nouveau_node(roots):
    findings = _doctor.diagnose(facts_of(roots["nouveau"]), {"workload": "container"})
    assert ids(findings) == ["driver-not-loaded", "kernel-headers-missing", "nouveau-conflict"]
    nouveau = [f for f in findings if f["id"] == "nouveau-conflict"][0]
    assert nouveau["detail"]["holders"] == ["0000:5e:00.0"]


def test_missing_smi_and_toolkit(roots, h200_nvml):
    facts = facts_of(roots["h200"], h200_nvml, probes={"nvidia_smi": False, "toolkit": False})
    assert ids(_doctor.diagnose(facts, {"workload": "container"})) == ["nvidia-smi-not-found", "toolkit-missing"]


def test_no_gpu_on_a_gpu_node(roots):
    assert ids(_doctor.diagnose(facts_of(roots["no-gpu"]), {"workload": "container"})) == ["gpu-not-detected"]
    assert _doctor.diagnose(facts_of(roots["no-gpu"]), {}) == []


def test_vm_passthrough_node_with_gpus_on_nvidia(roots):
    findings = _doctor.diagnose(facts_of(roots["workstation"]), {"workload": "vm-passthrough"})
    assert ids(findings) == ["vfio-not-bound"]
    assert "0000:01:00.0" in findings[0]["summary"] and "0000:02:00.0" in findings[0]["summary"]


def test_passthrough_host_shared_group(roots):
    findings = _doctor.diagnose(facts_of(roots["passthrough"]), {"workload": "vm-passthrough"})
    # the third A100 is neither on vfio-pci nor alone in its group
    assert ids(findings) == ["iommu-group-shared", "vfio-not-bound"]
    assert "0000:c1:00.1" in [f for f in findings if f["id"] == "iommu-group-shared"][0]["summary"]


def test_companion_left_on_audio_driver(roots):
    facts = facts_of(roots["workstation"])
    for dev in facts["devices"]:
        dev["driver"] = "vfio-pci"
    findings = _doctor.diagnose(facts, {"workload": "vm-passthrough"})
    assert ids(findings) == ["vfio-companion-not-bound", "vfio-companion-not-bound"]


def test_vm_node_without_iommu(roots):
    findings = _doctor.diagnose(facts_of(roots["iommu-off"]), {"workload": "vm-passthrough"})
    assert "iommu-off" in ids(findings)


def test_mig_pending(roots, h200_nvml):
    facts = facts_of(roots["h200"], h200_nvml)
    facts = copy.deepcopy(facts)
    facts["nvml"]["devices"][0]["mig_mode"] = {"current": False, "pending": True}
    assert ids(_doctor.diagnose(facts, {"workload": "container"})) == ["mig-mode-pending"]


def test_vgpu_node_without_manager(roots):
    facts = facts_of(roots["nouveau"], probes={"mdev_types": False})
    assert ids(_doctor.diagnose(facts, {"workload": "vm-vgpu"})) == ["iommu-off", "vgpu-manager-missing", "vgpu-no-mdev-types"]


@pytest.mark.parametrize("version,cuda", [("580.159.04", "13.0"), ("570.124.06", "12.8"), ("535.104.05", "12.2"), ("460.1", None)])
def test_branch_table(version, cuda):
    assert _doctor.driver_cuda({"driver": {"version": version}}) == cuda


def test_readiness_healthy_container_node(roots, h200_nvml):
    facts = facts_of(roots["h200"], h200_nvml)
    assert _doctor.readiness(facts, "container") == {"ready": True, "reasons": []}
    # a validated node must have passed; a node outside validation (None) is judged on facts alone
    assert _doctor.readiness(facts, "container", validated=False) == {"ready": False, "reasons": ["not-validated"]}
    assert _doctor.readiness(facts, "container", reboot_reasons=["kernel args"])["reasons"] == ["reboot-pending"]


def test_readiness_uses_the_workload_kind(roots, h200_nvml):
    facts = facts_of(roots["h200"], h200_nvml)  # GPU on the nvidia driver: wrong for vm-passthrough
    r = _doctor.readiness(facts, "vm-passthrough")
    assert not r["ready"] and "vfio-not-bound" in r["reasons"]


def test_readiness_cpu_node_and_missing_gpu(roots):
    facts = facts_of(roots["no-gpu"])
    assert _doctor.readiness(facts, None)["ready"] is True  # CPU node
    assert _doctor.readiness(facts, "container")["reasons"] == ["gpu-not-detected"]
