# SPDX-License-Identifier: Apache-2.0
"""KubeVirt: the sandbox device plugin's resource names, permitted host devices from GPU facts, and
their merge into a KubeVirt CR whose lists are atomic (the user's entries and fields kept)."""
from __future__ import annotations

import copy
import json

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.filter import kubevirt as f
from ansible_collections.gpuops.nvidia.plugins.module_utils import _gpu_facts
from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _kubevirt as kv


# -- names: the plugin's getDeviceName / readVgpuIDFromFile rule ---------------------------------------

@pytest.mark.parametrize("pci_name,device_id,expected", [
    ("GH100 [H100 PCIe]", "2331", "GH100_H100_PCIE"),             # the reference's example
    ("TU104GL [Tesla T4]", "1eb8", "TU104GL_TESLA_T4"),            # upper-cased (the repo's TU104GL_Tesla_T4 is stale)
    ("GA100 [A100 PCIe 80GB]", "20b5", "GA100_A100_PCIE_80GB"),
    ("AD102GL [L40S]", "26b9", "AD102GL_L40S"),
    ("TU102GL [Quadro RTX 6000/8000]", "1e30", "TU102GL_QUADRO_RTX_6000_8000"),   # '/' -> '_'
    ("GA107GL [A2 / A16]", "25b6", "GA107GL_A2___A16"),            # ' / ': space, '_', space -> three '_'
    ("GK110BGL [Tesla K40m v1.1]", "1023", "GK110BGL_TESLA_K40M_V1_1"),   # '.' -> '_'
    ("GH100 [H100 SXM5 80GB] (H100-SXM)", "2330", "GH100_H100_SXM5_80GB_H100SXM"),  # ( ) - removed
    ("  GA102GL\t[A10]\n", "2236", "GA102GL_A10"),                # trimmed; tab is whitespace
    ("GB100  [B200]", "2901", "GB100_B200"),                       # a run of spaces is one '_'
    ("AD102 [GeForce RTX 4090 D+]", "2685", "AD102_GEFORCE_RTX_4090_D"),  # '+' removed
    ("Stra\u00dfe [X]", "abcd", "STRAE_X"),                        # Go's ToUpper keeps ß (then removed), no 'SS'
    ("GA100\u00a0[A100]", "20b0", "GA100A100"),                    # NBSP is not Go's \s: removed, not '_'
    ("10de:2bb5", "2bb5", "2bb5"),                                 # gpu_facts' name for an unknown ID
    (None, "2BB5", "2bb5"),                                        # unknown: the ID as sysfs has it
    ("", "2bb5", "2bb5"),
    ("[]", "2bb5", "2bb5"),                                        # nothing left: the ID
])
def test_pci_names_like_the_device_plugin(pci_name, device_id, expected):
    assert kv.device_plugin_pci_name(pci_name, device_id) == expected
    assert kv.pci_resource_name(device_id, pci_name) == "nvidia.com/" + expected


@pytest.mark.parametrize("mdev,expected", [
    ("GRID T4-1Q", "nvidia.com/GRID_T4-1Q"),
    ("NVIDIA A10-4Q", "nvidia.com/NVIDIA_A10-4Q"),
    ("NVIDIA  A100-1-5C", "nvidia.com/NVIDIA_A100-1-5C"),          # whitespace run -> one '_'
    ("NVIDIA A100-1-5CME\n", "nvidia.com/NVIDIA_A100-1-5CME"),     # the sysfs line end
    ("GRID\tRTX6000-4Q", "nvidia.com/GRID_RTX6000-4Q"),
])
def test_mdev_names_keep_case(mdev, expected):
    assert kv.mdev_resource_name(mdev) == expected
    assert f.kubevirt_resource_name(mdev) == expected


@pytest.mark.parametrize("vgpu_type,cc,expected", [
    ("A10-4Q", "8.6", "NVIDIA A10-4Q"),
    ("T4-1Q", "7.5", "GRID T4-1Q"),
    ("V100D-8Q", "7.0", "GRID V100D-8Q"),
    ("RTX6000-4Q", "7.5", "GRID RTX6000-4Q"),      # Turing Quadro RTX 6000: cc decides, not the letter
    ("RTXA6000-4Q", "8.6", "NVIDIA RTXA6000-4Q"),
    ("A100-1-5C", None, "NVIDIA A100-1-5C"),
    ("A100-1-5CME", 8.0, "NVIDIA A100-1-5CME"),
    ("T4-2Q", None, "GRID T4-2Q"),                  # no cc: board letter M/P/V/T means pre-Ampere
    ("M60-0Q", None, "GRID M60-0Q"),
    ("L40S-48Q", None, "NVIDIA L40S-48Q"),
    ("H100-80C", "9.0", "NVIDIA H100-80C"),
])
def test_mdev_type_names(vgpu_type, cc, expected):
    assert kv.mdev_type_name(vgpu_type, cc) == expected


@pytest.mark.parametrize("bad", ["a10-4q", "A10-4", "A10 4Q", "NVIDIA A10-4Q", "A10-4X", "", None, 4])
def test_mdev_type_refuses_what_the_vgpu_device_manager_refuses(bad):
    with pytest.raises(kv.KubeVirtInputError):
        kv.mdev_type_name(bad)


def test_resource_name_of_a_facts_device_and_bad_input():
    assert f.kubevirt_resource_name({"device_id": "2331", "name": "GH100 [H100 PCIe]"}) == "nvidia.com/GH100_H100_PCIE"
    for bad in ({"device_id": "23311", "name": "x"}, {"name": "x"}, "", None):
        with pytest.raises(AnsibleFilterError, match="^kubevirt_resource_name: "):
            f.kubevirt_resource_name(bad)
    assert kv.pci_vendor_selector("20b5") == "10DE:20B5"


# -- host devices from facts -----------------------------------------------------------------------------

def facts_of(root):
    facts, _warnings = _gpu_facts.gather(root, ("pci", "iommu"), load_nvml=lambda: (None, "no NVML (test)"))
    return facts


VGPU_CONFIG = {"version": "v1", "vgpu-configs": {
    "default": [{"devices": "all", "vgpu-devices": {"A10-4Q": 6}}],
    "split": [{"devices": [0, 1], "vgpu-devices": {"A10-2Q": 12}}, {"devices": [2, 3], "vgpu-devices": {"A10-8Q": 3}}],
}}
A10 = {"product": "NVIDIA A10", "count": 4, "compute_capability": "8.6"}
L40S = {"product": "NVIDIA L40S", "count": 2, "compute_capability": "8.9"}


def lab_hostvars(roots):
    return {
        "h200-0": {"gpu_workload": "container", "ansible_facts": {"gpu": facts_of(roots["h200"])}},
        "pt-0": {"gpu_workload": "vm-passthrough", "ansible_facts": {"gpu": facts_of(roots["passthrough"])}},
        "pt-1": {"gpu_workload": "vm-passthrough", "gpuops_gpu_inventory": L40S},
        "vgpu-0": {"gpu_workload": "vm-vgpu", "gpuops_gpu_inventory": A10},
        "cpu-0": {"ansible_facts": {"gpu": facts_of(roots["no-gpu"])}},
    }


def test_lab_fleet(roots):
    out = f.kubevirt_host_devices(["h200-0", "pt-0", "pt-1", "vgpu-0", "cpu-0"], lab_hostvars(roots), VGPU_CONFIG)
    assert out["pciHostDevices"] == [
        {"pciVendorSelector": "10DE:20B5", "resourceName": "nvidia.com/GA100_A100_PCIE_80GB", "externalResourceProvider": True},
        {"pciVendorSelector": "10DE:26B9", "resourceName": "nvidia.com/AD102GL_L40S", "externalResourceProvider": True},
    ]
    assert out["mediatedDevices"] == [
        {"mdevNameSelector": "NVIDIA A10-4Q", "resourceName": "nvidia.com/NVIDIA_A10-4Q", "externalResourceProvider": True}]
    assert out["nodes"] == {"pt-0": ["nvidia.com/GA100_A100_PCIE_80GB"], "pt-1": ["nvidia.com/AD102GL_L40S"],
                            "vgpu-0": ["nvidia.com/NVIDIA_A10-4Q"]}
    assert out["resource_names"] == ["nvidia.com/AD102GL_L40S", "nvidia.com/GA100_A100_PCIE_80GB",
                                     "nvidia.com/NVIDIA_A10-4Q"]
    assert out["warnings"] == []


def test_inventory_order_does_not_matter_and_models_are_one_entry(roots):
    hv = lab_hostvars(roots)
    hv["pt-2"] = copy.deepcopy(hv["pt-0"])
    a = f.kubevirt_host_devices(["pt-0", "pt-1", "pt-2", "vgpu-0"], hv, VGPU_CONFIG)
    b = f.kubevirt_host_devices(["vgpu-0", "pt-2", "pt-1", "pt-0"], hv, VGPU_CONFIG)
    assert a == b and len(a["pciHostDevices"]) == 2


def test_vgpu_node_config_label_and_own_config():
    hv = {"g": {"gpu_workload": "vm-vgpu", "gpuops_gpu_inventory": A10,
                "gpuops_k8s_node_labels": {"nvidia.com/vgpu.config": "split"}},
          "t": {"gpu_workload": "vm-vgpu", "gpuops_gpu_inventory": {"product": "Tesla T4", "compute_capability": "7.5"},
                "gpuops_vgpu_device_manager_config": {"version": "v1", "vgpu-configs": {
                    "t4": [{"devices": "all", "vgpu-devices": {"T4-1Q": 16}}]}},
                "gpuops_vgpu_default_config": "t4"}}
    out = f.kubevirt_host_devices(["g", "t"], hv, VGPU_CONFIG)
    assert [e["mdevNameSelector"] for e in out["mediatedDevices"]] == ["GRID T4-1Q", "NVIDIA A10-2Q", "NVIDIA A10-8Q"]
    assert out["nodes"]["t"] == ["nvidia.com/GRID_T4-1Q"]
    assert out["nodes"]["g"] == ["nvidia.com/NVIDIA_A10-2Q", "nvidia.com/NVIDIA_A10-8Q"]


def test_declared_inventory_device_id_and_pci_name():
    hv = {"n": {"gpu_workload": "vm-passthrough",
                "gpuops_gpu_inventory": {"product": "NVIDIA B300", "device_id": "10de:31C2", "pci_name": "GB110 [B300 SXM6]"}},
          "u": {"gpu_workload": "vm-passthrough", "gpuops_gpu_inventory": {"product": "Mystery GPU"}},
          "i": {"gpu_workload": "vm-passthrough", "gpuops_gpu_inventory": {"product": "x", "device_id": "2bb5"}}}
    out = f.kubevirt_host_devices(["n", "u", "i"], hv)
    assert [(e["pciVendorSelector"], e["resourceName"]) for e in out["pciHostDevices"]] == [
        ("10DE:2BB5", "nvidia.com/2bb5"), ("10DE:31C2", "nvidia.com/GB110_B300_SXM6")]
    assert any(w.startswith("u: the PCI device ID of the declared GPU 'Mystery GPU' is unknown") for w in out["warnings"])
    assert any(w.startswith("i: no pci.ids name known for device 2bb5") for w in out["warnings"])


def test_nodes_left_out_with_a_reason():
    hv = {"c": {"gpu_workload": "container", "gpuops_gpu_inventory": L40S},
          "d": {"gpuops_gpu_inventory": L40S},                      # default kind: container
          "e": {"gpu_workload": "vm-passthrough"},                  # nothing known
          "g": {"gpu_workload": "vm-vgpu", "gpuops_gpu_inventory": A10,
                "gpuops_k8s_node_labels": {"nvidia.com/vgpu.config": "nope"}},
          "cpu": {}}
    out = f.kubevirt_host_devices(["c", "d", "e", "g", "cpu"], hv, VGPU_CONFIG)
    assert out["pciHostDevices"] == [] and out["mediatedDevices"] == []
    assert out["warnings"] == [
        "e: vm-passthrough node without GPU facts or a declared GPU inventory: nothing to permit",
        "g: vGPU config 'nope' is not defined in the vGPU device manager config: no mediated devices"]
    # a default kind of vm-passthrough makes GPU nodes without gpu_workload VM nodes, CPU nodes stay out
    out = f.kubevirt_host_devices(["d", "cpu"], hv, default_workload="vm-passthrough")
    assert out["nodes"] == {"d": ["nvidia.com/AD102GL_L40S"]} and out["warnings"] == []


def test_two_pci_ids_versions_keep_both_names_with_a_warning():
    dev = {"bdf": "0000:01:00.0", "vendor_id": "10de", "device_id": "26b9", "compute_capability": "8.9"}
    hv = {"a": {"gpu_workload": "vm-passthrough", "ansible_facts": {"gpu": {"devices": [dict(dev, name="AD102GL [L40S]")]}}},
          "b": {"gpu_workload": "vm-passthrough", "ansible_facts": {"gpu": {"devices": [dict(dev, name="10de:26b9")]}}}}
    out = f.kubevirt_host_devices(["a", "b"], hv)
    assert [e["resourceName"] for e in out["pciHostDevices"]] == ["nvidia.com/26b9", "nvidia.com/AD102GL_L40S"]
    assert out["warnings"] == ["10DE:26B9 has two names on different nodes (nvidia.com/26b9, nvidia.com/AD102GL_L40S): "
                               "their pci.ids differ; the device plugin advertises the name of the pci.ids in its image"]


@pytest.mark.parametrize("hosts,hostvars,cfg,match", [
    ("pt-0", {}, None, "hosts must be a list"),
    (["x"], {}, None, "host x is not in hostvars"),
    (["x"], {"x": "s"}, None, r"hostvars\['x'\] must be a mapping"),
    (["x"], {"x": {"gpu_workload": "vm-passthrough", "ansible_facts": {"gpu": {"devices": "0000:01:00.0"}}}}, None,
     "devices must be a list"),
    (["x"], {"x": {"gpu_workload": "vm-passthrough", "ansible_facts": {"gpu": {"devices": [{"bdf": "a"}]}}}}, None,
     r"devices\[0\] has no device_id"),
    (["x"], {"x": {"gpu_workload": "vm-passthrough", "gpuops_gpu_inventory": {"device_id": "zz"}}}, None,
     "device_id must be 4 hex digits"),
    (["x"], {"x": {"gpu_workload": "vm-vgpu", "gpuops_gpu_inventory": A10}}, {"version": "v1"}, "must have vgpu-configs"),
    (["x"], {"x": {"gpu_workload": "vm-vgpu", "gpuops_gpu_inventory": A10}},
     {"vgpu-configs": {"default": [{"devices": "all"}]}}, "every entry needs vgpu-devices"),
    (["x"], {"x": {"gpu_workload": "vm-vgpu", "gpuops_gpu_inventory": A10}},
     {"vgpu-configs": {"default": [{"devices": "all", "vgpu-devices": {"a10-4q": 1}}]}}, "is not a vGPU type name"),
    (["x"], {}, ["not", "a", "config"], "vgpu_config must be"),
])
def test_host_devices_bad_input(hosts, hostvars, cfg, match):
    with pytest.raises(AnsibleFilterError, match="^kubevirt_host_devices: .*" + match):
        f.kubevirt_host_devices(hosts, hostvars, cfg)


# -- merge into the CR (lists are atomic: we read, merge and apply the whole list) -------------------------

OURS = {"pciHostDevices": [
    {"pciVendorSelector": "10DE:20B5", "resourceName": "nvidia.com/GA100_A100_PCIE_80GB", "externalResourceProvider": True},
    {"pciVendorSelector": "10DE:26B9", "resourceName": "nvidia.com/AD102GL_L40S", "externalResourceProvider": True}],
    "mediatedDevices": [
    {"mdevNameSelector": "NVIDIA A10-4Q", "resourceName": "nvidia.com/NVIDIA_A10-4Q", "externalResourceProvider": True}]}
USER_PCI = {"pciVendorSelector": "8086:0D5C", "resourceName": "intel.com/qat"}
USER_MDEV = {"mdevNameSelector": "i915-GVTg_V5_4", "resourceName": "intel.com/gvt"}


def cr(phd=None, annotations=None, **config):
    conf = dict(config)
    if phd is not None:
        conf["permittedHostDevices"] = phd
    meta = {"name": "kubevirt", "namespace": "kubevirt", "resourceVersion": "7"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": meta,
            "spec": {"configuration": conf, "certificateRotateStrategy": {}}}


def server_apply(obj, manifest):
    """What the API server keeps after our server-side apply: the lists are atomic, so ours replace them
    whole; fields we stop applying (and own) go; everything else stays."""
    out = copy.deepcopy(obj)
    ann = out["metadata"].setdefault("annotations", {})
    ann.pop(kv.ANNOTATION, None)
    ann.update((manifest["metadata"].get("annotations") or {}))
    if not ann:
        out["metadata"].pop("annotations")
    phd = out["spec"].setdefault("configuration", {}).setdefault("permittedHostDevices", {})
    new = ((manifest.get("spec") or {}).get("configuration") or {}).get("permittedHostDevices") or {}
    for k in kv.LISTS:
        phd.pop(k, None)
        if k in new:
            phd[k] = copy.deepcopy(new[k])
    if not phd:
        out["spec"]["configuration"].pop("permittedHostDevices")
    return out


def test_merge_into_an_empty_cr_then_rerun_is_no_change():
    obj = cr(developerConfiguration={"featureGates": ["HostDevices"]})
    m = f.kubevirt_permitted_merge(obj, OURS)
    assert m["changed"] and m["name"] == "kubevirt" and m["namespace"] == "kubevirt"
    assert m["apply"]["spec"] == {"configuration": {"permittedHostDevices": {
        "pciHostDevices": OURS["pciHostDevices"], "mediatedDevices": OURS["mediatedDevices"]}}}
    assert json.loads(m["apply"]["metadata"]["annotations"][kv.ANNOTATION]) == {
        "mediatedDevices": [["NVIDIA A10-4Q", "nvidia.com/NVIDIA_A10-4Q"]],
        "pciHostDevices": [["10DE:20B5", "nvidia.com/GA100_A100_PCIE_80GB"], ["10DE:26B9", "nvidia.com/AD102GL_L40S"]]}
    assert "developerConfiguration" not in m["apply"]["spec"]["configuration"]  # never sent, never owned
    after = server_apply(obj, m["apply"])
    again = f.kubevirt_permitted_merge(after, OURS)
    assert not again["changed"] and again["added"] == [] and again["removed"] == []


def test_users_entries_stay_first_and_whole():
    user_pci = dict(USER_PCI, externalResourceProvider=False)
    obj = cr({"pciHostDevices": [user_pci], "mediatedDevices": [USER_MDEV], "usb": [{"resourceName": "k/u"}]})
    m = f.kubevirt_permitted_merge(obj, OURS)
    phd = m["apply"]["spec"]["configuration"]["permittedHostDevices"]
    assert phd["pciHostDevices"] == [user_pci] + OURS["pciHostDevices"]
    assert phd["mediatedDevices"] == [USER_MDEV] + OURS["mediatedDevices"]
    assert "usb" not in phd                            # not ours to send
    assert m["kept"] == ["pciHostDevices 8086:0D5C=intel.com/qat", "mediatedDevices i915-GVTg_V5_4=intel.com/gvt"]
    after = server_apply(obj, m["apply"])
    assert after["spec"]["configuration"]["permittedHostDevices"]["usb"] == [{"resourceName": "k/u"}]
    assert not f.kubevirt_permitted_merge(after, OURS)["changed"]


def test_removing_a_model_removes_only_our_entry():
    obj = server_apply(cr({"pciHostDevices": [USER_PCI]}), f.kubevirt_permitted_merge(cr({"pciHostDevices": [USER_PCI]}),
                                                                                      OURS)["apply"])
    fewer = {"pciHostDevices": OURS["pciHostDevices"][:1], "mediatedDevices": OURS["mediatedDevices"]}
    m = f.kubevirt_permitted_merge(obj, fewer)
    assert m["changed"] and m["removed"] == ["pciHostDevices 10DE:26B9=nvidia.com/AD102GL_L40S"]
    assert m["apply"]["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"] == [USER_PCI] + fewer["pciHostDevices"]
    assert json.loads(m["apply"]["metadata"]["annotations"][kv.ANNOTATION])["pciHostDevices"] == [
        ["10DE:20B5", "nvidia.com/GA100_A100_PCIE_80GB"]]


def test_absent_and_an_empty_fleet_take_out_ours_only():
    start = cr({"pciHostDevices": [USER_PCI]}, annotations={"team": "virt"})
    obj = server_apply(start, f.kubevirt_permitted_merge(start, OURS)["apply"])
    for m in (f.kubevirt_permitted_merge(obj, OURS, "absent"),
              f.kubevirt_permitted_merge(obj, {"pciHostDevices": [], "mediatedDevices": []})):
        assert m["changed"] and "annotations" not in m["apply"]["metadata"]
        assert m["apply"]["spec"] == {"configuration": {"permittedHostDevices": {"pciHostDevices": [USER_PCI]}}}
        after = server_apply(obj, m["apply"])
        assert after["metadata"]["annotations"] == {"team": "virt"}
        assert after["spec"]["configuration"]["permittedHostDevices"] == {"pciHostDevices": [USER_PCI]}
        assert not f.kubevirt_permitted_merge(after, OURS, "absent")["changed"]
    # nothing of anybody's left: the manifest carries no lists at all (server-side apply drops what we owned)
    obj = server_apply(cr(), f.kubevirt_permitted_merge(cr(), OURS)["apply"])
    m = f.kubevirt_permitted_merge(obj, OURS, "absent")
    assert m["apply"] == {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
                          "metadata": {"name": "kubevirt", "namespace": "kubevirt"}}
    assert "permittedHostDevices" not in server_apply(obj, m["apply"])["spec"]["configuration"]
    assert not f.kubevirt_permitted_merge(cr(), OURS, "absent")["changed"]   # never there: nothing to do


def test_an_entry_the_user_already_has_stays_theirs():
    obj = cr({"pciHostDevices": [dict(OURS["pciHostDevices"][0])]})
    m = f.kubevirt_permitted_merge(obj, OURS)
    rec = json.loads(m["apply"]["metadata"]["annotations"][kv.ANNOTATION])
    assert rec["pciHostDevices"] == [["10DE:26B9", "nvidia.com/AD102GL_L40S"]]       # not the user's 20B5
    after = server_apply(obj, m["apply"])
    gone = f.kubevirt_permitted_merge(after, OURS, "absent")
    assert gone["apply"]["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"] == [OURS["pciHostDevices"][0]]


def test_a_device_the_user_permits_under_another_name_is_reported():
    theirs = {"pciVendorSelector": "10de:20b5", "resourceName": "nvidia.com/A100"}
    m = f.kubevirt_permitted_merge(cr({"pciHostDevices": [theirs]}), OURS)
    assert m["conflicts"] == ["pciHostDevices 10DE:20B5: the CR also permits it as nvidia.com/A100 (not ours, kept)"]
    assert m["apply"]["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"][0] == theirs


def test_our_entry_edited_by_hand_is_put_back():
    obj = server_apply(cr(), f.kubevirt_permitted_merge(cr(), OURS)["apply"])
    obj["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"][0]["externalResourceProvider"] = False
    m = f.kubevirt_permitted_merge(obj, OURS)
    assert m["changed"] and m["apply"]["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"] == \
        OURS["pciHostDevices"]


def test_foreign_annotation_value_takes_nothing_as_ours():
    obj = cr({"pciHostDevices": [USER_PCI]}, annotations={kv.ANNOTATION: "not json"})
    m = f.kubevirt_permitted_merge(obj, OURS)
    assert m["kept"] == ["pciHostDevices 8086:0D5C=intel.com/qat"]
    assert m["warnings"][0].startswith("annotation gpuops.nvidia/permitted-host-devices is not what this collection writes")


@pytest.mark.parametrize("obj,desired,state,match", [
    ({}, OURS, "present", "kubevirt must be a KubeVirt resource"),
    (cr(), OURS, "gone", "state must be present or absent"),
    (cr(), ["x"], "present", "desired must be host_devices' result"),
    (cr(), {"pciHostDevices": [{"resourceName": "a"}]}, "present", "desired pciHostDevices entries need pciVendorSelector"),
    (cr({"pciHostDevices": {"a": 1}}), OURS, "present", "permittedHostDevices.pciHostDevices is not a list"),
])
def test_merge_bad_input(obj, desired, state, match):
    with pytest.raises(AnsibleFilterError, match="^kubevirt_permitted_merge: .*" + match):
        f.kubevirt_permitted_merge(obj, desired, state)
