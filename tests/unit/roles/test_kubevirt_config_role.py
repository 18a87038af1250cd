# SPDX-License-Identifier: Apache-2.0
"""roles/kubevirt_config and the sandbox device plugin rendered as Ansible renders them: the devices
entry point over lab-like hostvars, the DaemonSet annotation with the same names, the built-in vGPU
config kept equal to the vGPU device manager's, and cluster.yml's order."""
from __future__ import annotations

import json
import os

import yaml
from role_render import REPO, Role, by_kind, k8s_strict_errors

ROLE = Role("kubevirt_config")
SDP = Role("sandbox_device_plugin")
A10 = {"product": "NVIDIA A10", "count": 4, "compute_capability": "8.6"}
L40S = {"product": "NVIDIA L40S", "count": 2, "compute_capability": "8.9"}
HOSTVARS = {
    "pt-1": {"gpu_workload": "vm-passthrough", "gpuops_gpu_inventory": L40S},
    "vgpu-0": {"gpu_workload": "vm-vgpu", "gpuops_gpu_inventory": A10},
    "l40s-0": {"gpu_workload": "container", "gpuops_gpu_inventory": L40S},
    "cpu-0": {},
}


def test_builtin_vgpu_config_is_the_vgpu_device_managers():
    mine = ROLE.plain("defaults/main.yml")["_kubevirt_config_vgpu_builtin"]
    theirs = Role("vgpu_device_manager").plain("defaults/main.yml")["_vgpu_device_manager_builtin"]
    assert mine == theirs


def test_devices_entry_point_over_the_inventory():
    ok, facts = ROLE.set_fact("devices.yml", "KubeVirt host devices of the vm-passthrough and vm-vgpu nodes "
                              "(GPU facts, vGPU configs)", groups={"k8s_nodes": list(HOSTVARS)}, hostvars=HOSTVARS)
    assert ok
    got = facts["kubevirt_config_host_devices"]
    assert got["resource_names"] == ["nvidia.com/AD102GL_L40S", "nvidia.com/NVIDIA_A10-4Q"]
    assert got["mediatedDevices"] == [{"mdevNameSelector": "NVIDIA A10-4Q", "resourceName": "nvidia.com/NVIDIA_A10-4Q",
                                       "externalResourceProvider": True}]
    # the cluster-wide vGPU config and default config reach the role
    cfg = {"version": "v1", "vgpu-configs": {"big": [{"devices": "all", "vgpu-devices": {"A10-24Q": 1}}]}}
    facts = ROLE.set_fact("devices.yml", "KubeVirt host devices of the vm-passthrough and vm-vgpu nodes "
                          "(GPU facts, vGPU configs)", groups={"k8s_nodes": list(HOSTVARS)}, hostvars=HOSTVARS,
                          gpuops_vgpu_device_manager_config=cfg, gpuops_vgpu_default_config="big")[1]
    assert facts["kubevirt_config_host_devices"]["nodes"]["vgpu-0"] == ["nvidia.com/NVIDIA_A10-24Q"]


def test_sandbox_device_plugin_annotation_carries_the_same_names():
    names = ["nvidia.com/AD102GL_L40S", "nvidia.com/NVIDIA_A10-4Q"]
    objs = SDP.render("sandbox_device_plugin.yaml.j2", sandbox_device_plugin_image={"repository": "nvcr.io/nvidia", "image": "x", "version": "1"},
                      kubevirt_config_host_devices={"resource_names": names})
    ds = by_kind(objs, "DaemonSet", "nvidia-sandbox-device-plugin-daemonset")
    assert json.loads(ds["metadata"]["annotations"]["gpuops.nvidia/kubevirt-resources"]) == names
    assert k8s_strict_errors(ds) == []
    # absent (no devices computed): still renders
    objs = SDP.render("sandbox_device_plugin.yaml.j2", sandbox_device_plugin_image={"repository": "nvcr.io/nvidia", "image": "x", "version": "1"})
    ds = by_kind(objs, "DaemonSet", "nvidia-sandbox-device-plugin-daemonset")
    assert ds["metadata"]["annotations"]["gpuops.nvidia/kubevirt-resources"] == "[]"


def test_cluster_yml_runs_it_after_the_sandbox_device_plugin():
    with open(os.path.join(REPO, "playbooks", "cluster.yml")) as fh:
        plays = yaml.safe_load(fh)
    order = next(p for p in plays if p["name"] == "GPU cluster components")["vars"]["_cluster_default_order"]
    assert order.index("kubevirt_config") == order.index("sandbox_device_plugin") + 1


def test_argument_specs_cover_the_defaults():
    specs = ROLE.plain("meta/argument_specs.yml")["argument_specs"]
    public = {k for k in ROLE.plain("defaults/main.yml") if not k.startswith("_")}
    assert set(specs["main"]["options"]) == public
    assert set(specs["devices"]["options"]) <= public


def test_report_condition_is_a_boolean_whatever_the_merge_says():
    """Ansible 2.19 refuses a conditional that is a list (the lane's rerun found it)."""
    from ansible.template import Templar

    task = ROLE.task("main.yml", "What changed in the KubeVirt CR, and what is not ours")
    for merge, shown in (({"changed": False, "conflicts": [], "warnings": []}, False),
                         ({"changed": True, "conflicts": [], "warnings": []}, True),
                         ({"changed": False, "conflicts": ["x"], "warnings": []}, True),
                         ({"changed": False, "conflicts": [], "warnings": ["w"]}, True)):
        templar = Templar(loader=ROLE.loader, variables=ROLE.variables(
            _kubevirt_config_crs={"resources": [{}]}, _kubevirt_config_merge=merge))
        assert all(templar.evaluate_conditional(c) for c in task["when"]) is shown, merge
