# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Controller-side filters of the rolling driver upgrade (playbooks/driver_upgrade.yml).

Documentation: one file per filter (gpu_upgrade_*.yml beside this file). The logic lives in
plugin_utils/_upgrade.py (controller only); these wrappers turn its refusals into AnsibleFilterError.
"""
from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _upgrade as up
from ansible_collections.gpuops.nvidia.plugins.plugin_utils._filters import refusing

_refusing = refusing()


@_refusing
def gpu_upgrade_serial(value):
    """gpu_upgrade_max_unavailable -> the play's serial: (int >= 1 or "N%")."""
    return up.parse_max_unavailable(value)


@_refusing
def gpu_upgrade_batches(hosts, max_unavailable=1):
    """Target hosts -> the list of batches the rollout runs."""
    return up.batches(hosts, max_unavailable)


@_refusing
def gpu_upgrade_blocking_vms(vmis):
    """k8s_info VirtualMachineInstance resources -> {node: [{namespace, name, devices}]}."""
    return up.blocking_vmis(vmis)


@_refusing
def gpu_upgrade_pods_left(pods):
    """k8s_info Pod resources of a drained node -> "namespace/name" of pods the drain should have removed."""
    return up.pods_left(pods)


class FilterModule:
    def filters(self):
        return {"gpu_upgrade_serial": gpu_upgrade_serial, "gpu_upgrade_batches": gpu_upgrade_batches,
                "gpu_upgrade_blocking_vms": gpu_upgrade_blocking_vms, "gpu_upgrade_pods_left": gpu_upgrade_pods_left}
