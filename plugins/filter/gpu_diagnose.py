# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller-side diagnosis of a node's gathered GPU facts (pure data, no host access)."""
from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_diagnose
short_description: Diagnose a GPU node from its gpu_facts
version_added: 0.1.0
author: gpuops.nvidia contributors (@gpuops)
description:
  - Turns C(ansible_facts.gpu) into findings for the guide's troubleshooting cases - GPU not
    detected, nouveau conflict, missing kernel headers, driver not loaded, nvidia-smi or the
    container toolkit missing, CUDA version mismatch, MIG mode change pending, VM nodes whose
    GPUs or companions are not on vfio-pci, shared IOMMU groups, IOMMU off, vGPU manager missing.
  - Each finding has C(id), C(severity) (error, warning, info), C(summary), C(remediation) and C(detail).
  - The companion filter C(gpu_readiness(facts, workload, reboot_reasons, validated)) returns C(ready) and
    C(reasons) (error finding ids, C(reboot-pending), C(not-validated)) for the readiness report.
positional: expect
options:
  _input:
    description: C(ansible_facts.gpu), optionally with C(probes) (C(nvidia_smi), C(toolkit), C(mdev_types) booleans).
    type: dict
    required: true
  expect:
    description:
      - What the inventory asks of the node - C(workload) (container, vm-passthrough, vm-vgpu or empty),
        C(cuda_version) (the newest CUDA the workloads need), C(toolkit) (bool).
    type: dict
"""

EXAMPLES = r"""
- name: Diagnose
  ansible.builtin.debug:
    msg: "{{ ansible_facts.gpu | gpuops.nvidia.gpu_diagnose({'workload': 'container', 'cuda_version': '12.8'}) }}"
"""

RETURN = r"""
_value:
  description: The findings, most severe first.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.module_utils._doctor import diagnose, readiness

_ORDER = {"error": 0, "warning": 1, "info": 2}


def gpu_diagnose(facts, expect=None):
    if not isinstance(facts, dict):
        raise AnsibleFilterError("gpu_diagnose expects ansible_facts.gpu (a dict), got %s" % type(facts).__name__)
    findings = diagnose(facts, expect or {})
    return sorted(findings, key=lambda f: _ORDER.get(f["severity"], 3))


def gpu_readiness(facts, workload=None, reboot_reasons=None, validated=None):
    """{ready, reasons}: no error finding for the workload, no reboot pending, validation passed (if any)."""
    if facts is not None and not isinstance(facts, dict):
        raise AnsibleFilterError("gpu_readiness expects ansible_facts.gpu (a dict), got %s" % type(facts).__name__)
    return readiness(facts or {}, workload, reboot_reasons, validated)


class FilterModule:
    def filters(self):
        return {"gpu_diagnose": gpu_diagnose, "gpu_readiness": gpu_readiness}
