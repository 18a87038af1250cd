# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Controller-side filters for KubeVirt: resource names of the sandbox device plugin, the permitted
host devices of the vm-passthrough / vm-vgpu nodes, and their merge into the cluster's KubeVirt CR.

Documentation: one file per filter (kubevirt_*.yml beside this file). The logic lives in
plugin_utils/_kubevirt.py (controller only); these wrappers read hostvars and turn refusals into
AnsibleFilterError.
"""
from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _kubevirt as kv
from ansible_collections.gpuops.nvidia.plugins.plugin_utils._filters import hostvar, refusing

_refusing = refusing()


def _node(host, hv, default_workload):
    if not isinstance(hv, Mapping):
        raise kv.KubeVirtInputError("hostvars[%r] must be a mapping, got %r" % (host, hv))
    facts = hostvar(hv, "ansible_facts", {}) or {}
    gpu_facts = facts.get("gpu") if isinstance(facts, Mapping) else None
    devices = gpu_facts.get("devices") if isinstance(gpu_facts, Mapping) else None
    declared = hostvar(hv, "gpuops_gpu_inventory")
    workload = hostvar(hv, "gpu_workload")
    if isinstance(workload, (list, tuple)) and len(set(workload)) == 1:
        workload = list(workload)[0]  # the node plan refuses two kinds; one kind twice is that kind
    if workload in (None, "") and (devices or declared):
        workload = default_workload
    return {
        "name": hostvar(hv, "gpuops_k8s_node_name", host),
        "workload": workload,
        "devices": devices,
        "gpu": declared,
        "extra_labels": hostvar(hv, "gpuops_k8s_node_labels", {}),
        "vgpu_config": hostvar(hv, "gpuops_vgpu_device_manager_config"),
        "vgpu_default_config": hostvar(hv, "gpuops_vgpu_default_config"),
    }


@_refusing
def kubevirt_host_devices(hosts, hostvars, vgpu_config=None, default_config="default", default_workload="container"):
    """Inventory hosts -> KubeVirt permitted host devices of their vm-passthrough / vm-vgpu nodes."""
    if isinstance(hosts, (str, bytes, Mapping)) or not hasattr(hosts, "__iter__"):
        raise kv.KubeVirtInputError("hosts must be a list of host names, got %r" % (hosts,))
    if not isinstance(hostvars, Mapping):
        raise kv.KubeVirtInputError("hostvars must be a mapping, got %r" % (type(hostvars).__name__,))
    if vgpu_config is not None and not isinstance(vgpu_config, Mapping):
        raise kv.KubeVirtInputError("vgpu_config must be the vGPU device manager config (a mapping), got %r"
                                    % (vgpu_config,))
    nodes = []
    for host in hosts:
        if host not in hostvars:
            raise kv.KubeVirtInputError("host %s is not in hostvars" % (host,))
        nodes.append(_node(host, hostvars[host], default_workload))
    return kv.host_devices(nodes, vgpu_config or None, default_config)


@_refusing
def kubevirt_permitted_merge(kubevirt, desired, state="present"):
    """A KubeVirt CR (k8s_info) + kubevirt_host_devices' result -> what to apply, and what changes."""
    return kv.merge(kubevirt, desired, state)


@_refusing
def kubevirt_resource_name(item):
    """A gpu_facts device -> its passthrough resource name; an mdev type name -> its vGPU resource name."""
    return kv.resource_name(item)


class FilterModule:
    def filters(self):
        return {
            "kubevirt_host_devices": kubevirt_host_devices,
            "kubevirt_permitted_merge": kubevirt_permitted_merge,
            "kubevirt_resource_name": kubevirt_resource_name,
        }
