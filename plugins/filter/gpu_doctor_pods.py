# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Controller-side filter ``gpu_doctor_pods``: the doctor's findings about the GPU Operator component pods of a node.

Documentation: gpu_doctor_pods.yml beside this file. The logic lives in plugin_utils/_doctor_pods.py.
"""
from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _doctor_pods
from ansible_collections.gpuops.nvidia.plugins.plugin_utils._filters import refusing

_refusing = refusing()


@_refusing
def gpu_doctor_pods(pods_resources, nodes_resources, node_name, namespace=None, pods_error=None, workload=None,
                    slices=None):
    """k8s_info Pod and Node (and ResourceSlice) resources -> {findings, pods} for the component pods on ``node_name``."""
    return _doctor_pods.pod_findings(pods_resources, nodes_resources, node_name,
                                     namespace=namespace, pods_error=pods_error, workload=workload, slices=slices)


class FilterModule:
    def filters(self):
        return {"gpu_doctor_pods": gpu_doctor_pods}
