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
  - On container nodes with a loaded driver, when the input has C(container_runtime) (the doctor role reads it),
    the "nvidia-smi not found in the container" case - no CDI spec for C(nvidia.com/gpu), no nvidia runtime in
    the containerd (with its imports), CRI-O or Docker config, no runtime config at all, a broken or unreadable
    config, and (containerd before 2.1) a later import that shadows the nvidia runtime.
  - Each finding has C(id), C(severity) (error, warning, info), C(summary), C(remediation) and C(detail).
  - The companion filter C(gpu_readiness(facts, workload, reboot_reasons, validated)) returns C(ready) and
    C(reasons) (error finding ids, C(reboot-pending), C(not-validated)) for the readiness report.
  - The companion filters C(gpu_doctor_read(state, slurp_results, globbed)) and C(gpu_doctor_pending(state)) are
    the doctor role's plumbing - merge slurped config files into C(container_runtime), and name the containerd
    imports still to be read.
positional: expect
options:
  _input:
    description:
      - C(ansible_facts.gpu), optionally with C(probes) (C(nvidia_smi), C(toolkit), C(mdev_types) booleans)
        and C(container_runtime) - C(runtime) (auto, containerd, crio, docker, none), C(runtime_name),
        C(containerd_config), C(crio_config), C(crio_config_dir), C(docker_config), C(cdi_dirs) and the
        node's files as C(files) (path to text, null when absent), C(unreadable), C(globbed).
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

from ansible_collections.gpuops.nvidia.plugins.module_utils._doctor import (
    diagnose,
    readiness,
    runtime_pending,
    runtime_read,
)

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


def gpu_doctor_read(state, results, globbed=None):
    """Merge a slurp loop's results (item = path on the node) into the doctor's container_runtime state."""
    if state is not None and not isinstance(state, dict):
        raise AnsibleFilterError("gpu_doctor_read expects the container_runtime state (a dict), got %s" % type(state).__name__)
    if not isinstance(results, list):
        raise AnsibleFilterError("gpu_doctor_read expects a slurp loop's results (a list), got %s" % type(results).__name__)
    return runtime_read(state or {}, results, globbed or [])


def gpu_doctor_pending(state):
    """containerd imports still to read: {read: [paths], globs: [{pattern, dir, depth, name}]}."""
    if not isinstance(state, dict):
        raise AnsibleFilterError("gpu_doctor_pending expects the container_runtime state (a dict), got %s" % type(state).__name__)
    return runtime_pending(state)


class FilterModule:
    def filters(self):
        return {"gpu_diagnose": gpu_diagnose, "gpu_readiness": gpu_readiness,
                "gpu_doctor_read": gpu_doctor_read, "gpu_doctor_pending": gpu_doctor_pending}
