# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Controller-side diagnosis of a node's gathered GPU facts (pure data, no host access)."""
from __future__ import annotations

# Documentation: one file per filter (gpu_diagnose.yml, gpu_readiness.yml, gpu_doctor_read.yml,
# gpu_doctor_pending.yml), as ansible-doc reads a multi-filter file's docs from <filter name>.yml beside it.


from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.nvidia.plugins.plugin_utils._filters import refusing
from ansible_collections.gpuops.nvidia.plugins.plugin_utils._doctor import (
    diagnose,
    readiness,
    runtime_pending,
    runtime_read,
)

_ORDER = {"error": 0, "warning": 1, "info": 2}


_refusing = refusing()


@_refusing
def gpu_diagnose(facts, expect=None):
    if not isinstance(facts, dict):
        raise AnsibleFilterError("gpu_diagnose expects ansible_facts.gpu (a dict), got %s" % type(facts).__name__)
    findings = diagnose(facts, expect or {})
    return sorted(findings, key=lambda f: _ORDER.get(f["severity"], 3))


@_refusing
def gpu_readiness(facts, workload=None, reboot_reasons=None, validated=None):
    """{ready, reasons}: no error finding for the workload, no reboot pending, validation passed (if any)."""
    if facts is not None and not isinstance(facts, dict):
        raise AnsibleFilterError("gpu_readiness expects ansible_facts.gpu (a dict), got %s" % type(facts).__name__)
    return readiness(facts or {}, workload, reboot_reasons, validated)


@_refusing
def gpu_doctor_read(state, results, globbed=None):
    """Merge a slurp loop's results (item = path on the node) into the doctor's container_runtime state."""
    if state is not None and not isinstance(state, dict):
        raise AnsibleFilterError("gpu_doctor_read expects the container_runtime state (a dict), got %s" % type(state).__name__)
    if not isinstance(results, list):
        raise AnsibleFilterError("gpu_doctor_read expects a slurp loop's results (a list), got %s" % type(results).__name__)
    return runtime_read(state or {}, results, globbed or [])


@_refusing
def gpu_doctor_pending(state):
    """containerd imports still to read: {read: [paths], globs: [{pattern, dir, depth, name}]}."""
    if not isinstance(state, dict):
        raise AnsibleFilterError("gpu_doctor_pending expects the container_runtime state (a dict), got %s" % type(state).__name__)
    return runtime_pending(state)


class FilterModule:
    def filters(self):
        return {"gpu_diagnose": gpu_diagnose, "gpu_readiness": gpu_readiness,
                "gpu_doctor_read": gpu_doctor_read, "gpu_doctor_pending": gpu_doctor_pending}
