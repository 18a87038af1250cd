# SPDX-License-Identifier: Apache-2.0
"""Filters of the rolling driver upgrade: max_unavailable parsing, batches, VMIs that block a drain."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.filter import gpu_upgrade as f
from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _upgrade as up


@pytest.mark.parametrize("value,expected", [
    (1, 1), (3, 3), ("2", 2), (" 4 ", 4), ("+2", 2), (2.0, 2),
    ("25%", "25%"), (" 50 % ", "50%"), ("100%", "100%"), ("1%", "1%"),
])
def test_serial_accepts_counts_and_percents(value, expected):
    assert f.gpu_upgrade_serial(value) == expected


@pytest.mark.parametrize("value,why", [
    (0, "0 or fewer"), (-1, "0 or fewer"), ("0", "0 or fewer"), ("-2", "0 or fewer"),
    ("0%", "0% would never"), ("101%", "more than 100%"), ("250%", "more than 100%"),
    ("abc", "not a number"), ("", "not a number"), ("1.5", "not a number"), ("%", "not a number"),
    ("25%%", "not a number"), (True, "not a number"), (None, "not a number"), (1.5, "whole number"),
    ([1], "not a number or a percent"), ({"a": 1}, "not a number or a percent"),
])
def test_serial_refuses_bad_values_with_the_value_named(value, why):
    with pytest.raises(AnsibleFilterError) as e:
        f.gpu_upgrade_serial(value)
    msg = str(e.value)
    assert msg.startswith("gpu_upgrade_serial: gpu_upgrade_max_unavailable must be a count >= 1")
    assert repr(value) in msg and why in msg


@pytest.mark.parametrize("value,nodes,size", [
    (1, 10, 1), (3, 2, 3), ("25%", 8, 2), ("25%", 3, 1), ("50%", 5, 2), ("100%", 7, 7), ("1%", 1, 1),
    ("10%", 0, 1),
])
def test_batch_size_rounds_down_like_serial(value, nodes, size):
    assert up.batch_size(value, nodes) == size


def test_batches_keep_inventory_order():
    assert f.gpu_upgrade_batches(["a", "b", "c", "d", "e"], 2) == [["a", "b"], ["c", "d"], ["e"]]
    assert f.gpu_upgrade_batches(["a", "b", "c", "d"], "50%") == [["a", "b"], ["c", "d"]]
    assert f.gpu_upgrade_batches(["a", "b", "c"]) == [["a"], ["b"], ["c"]]
    assert f.gpu_upgrade_batches([], 1) == []
    assert f.gpu_upgrade_batches((h for h in ["a", "b"]), 1) == [["a"], ["b"]]  # Jinja's select/map


def test_batches_refuse_bad_input():
    with pytest.raises(AnsibleFilterError, match="gpu_upgrade_batches: hosts must be a list"):
        f.gpu_upgrade_batches("a,b", 1)
    with pytest.raises(AnsibleFilterError, match="gpu_upgrade_batches: gpu_upgrade_max_unavailable must be"):
        f.gpu_upgrade_batches(["a"], 0)
    with pytest.raises(AnsibleFilterError, match="hosts must be host names, got 5"):
        f.gpu_upgrade_batches(["a", 5], 1)


def vmi(name, node=None, ns="vms", host_devices=None, gpus=None, phase="Running", label_node=None):
    devices = {"disks": [{"name": "root"}]}
    if host_devices is not None:
        devices["hostDevices"] = host_devices
    if gpus is not None:
        devices["gpus"] = gpus
    meta = {"name": name, "namespace": ns}
    if label_node:
        meta["labels"] = {"kubevirt.io/nodeName": label_node}
    status = {"phase": phase}
    if node:
        status["nodeName"] = node
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": meta,
            "spec": {"domain": {"devices": devices}}, "status": status}


def test_blocking_vms_only_those_with_host_devices_or_gpus():
    vmis = [
        vmi("plain", "n1"),                                                          # migratable: no devices
        vmi("pt", "n1", host_devices=[{"name": "gpu1", "deviceName": "nvidia.com/GA102GL_A10"}]),
        vmi("vgpu", "n2", ns="b", gpus=[{"name": "g", "deviceName": "nvidia.com/NVIDIA_A10-4Q"}]),
        vmi("empty-list", "n2", host_devices=[]),                                    # empty list: migratable
        vmi("done", "n1", host_devices=[{"name": "x", "deviceName": "d"}], phase="Succeeded"),
        vmi("pending", None, host_devices=[{"name": "x", "deviceName": "d"}], phase="Pending"),
        vmi("by-label", None, gpus=[{"name": "g"}], label_node="n3"),
        vmi("a-first", "n1", ns="a", gpus=[{"name": "g", "deviceName": "nvidia.com/GH100_H200"}]),
    ]
    got = f.gpu_upgrade_blocking_vms(vmis)
    assert got == {
        "n1": [{"namespace": "a", "name": "a-first", "devices": ["gpus:nvidia.com/GH100_H200"]},
               {"namespace": "vms", "name": "pt", "devices": ["hostDevices:nvidia.com/GA102GL_A10"]}],
        "n2": [{"namespace": "b", "name": "vgpu", "devices": ["gpus:nvidia.com/NVIDIA_A10-4Q"]}],
        "n3": [{"namespace": "vms", "name": "by-label", "devices": ["gpus:g"]}],
    }


def test_blocking_vms_absent_crd_and_bad_input():
    assert f.gpu_upgrade_blocking_vms(None) == {}
    assert f.gpu_upgrade_blocking_vms([]) == {}
    with pytest.raises(AnsibleFilterError, match="gpu_upgrade_blocking_vms: expected the list"):
        f.gpu_upgrade_blocking_vms({"resources": []})
    with pytest.raises(AnsibleFilterError, match=r"VirtualMachineInstance \[0\] is a str"):
        f.gpu_upgrade_blocking_vms(["vmi"])


def test_states_are_the_operators():
    assert up.STATE_LABEL == "nvidia.com/gpu-driver-upgrade-state"
    assert {"upgrade-required", "cordon-required", "drain-required", "pod-restart-required", "validation-required",
            "uncordon-required", "upgrade-done", "upgrade-failed"} <= set(up.STATES)


def pod(name, owner=None, phase="Running", mirror=False, deleting=False):
    meta = {"name": name, "namespace": "ns"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "o", "controller": True}]
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "x"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def test_pods_left_after_a_drain():
    pods = [pod("ds", "DaemonSet"), pod("rs", "ReplicaSet"), pod("static", mirror=True), pod("job", "Job", "Succeeded"),
            pod("bad", "ReplicaSet", "Failed"), pod("term", "ReplicaSet", deleting=True), pod("bare"),
            pod("vm", "VirtualMachineInstance")]
    assert f.gpu_upgrade_pods_left(pods) == ["ns/bare", "ns/rs", "ns/term", "ns/vm"]
    assert f.gpu_upgrade_pods_left([pod("ds", "DaemonSet")]) == []
    assert f.gpu_upgrade_pods_left(None) == []
    with pytest.raises(AnsibleFilterError, match="gpu_upgrade_pods_left: expected the list of Pod objects"):
        f.gpu_upgrade_pods_left({"resources": []})
    with pytest.raises(AnsibleFilterError, match=r"Pod \[1\] is a int"):
        f.gpu_upgrade_pods_left([pod("a"), 5])
