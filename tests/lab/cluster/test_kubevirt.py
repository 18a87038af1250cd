# SPDX-License-Identifier: Apache-2.0
"""KubeVirt's permitted host devices on the cluster lane (issue 14, part 1), with KubeVirt's real CRDs.

KubeVirt's own kubevirts.kubevirt.io and virtualmachines.kubevirt.io CRDs (kubevirt_crds.py, from the
published module kubevirt.io/kubevirt) are installed, so the API server validates the CR we apply and
the VirtualMachine example of docs/kubevirt.md. Tests run in file order and build on each other
(no CRD -> user's CR merged -> rerun -> model removed -> absent).
"""
from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml
from conftest import HERE, INVENTORY, KUBECONFIG, ROOT, cluster_playbook, recap_changed
from kubernetes import client, config

DOC = os.path.join(ROOT, "docs", "kubevirt.md")
KV_NS, KV_NAME = "kubevirt", "kubevirt"
ANNOTATION = "gpuops.nvidia/permitted-host-devices"
FIELD_MANAGER = "gpuops-nvidia"
USER_MANAGER = "kubevirt-admin"
# the lab's VM nodes (nodes/default.yml): pt-0 = passthrough node root (A100 80GB PCIe, 10de:20b5),
# pt-1 = declared NVIDIA L40S (10de:26b9), vgpu-0 = declared NVIDIA A10 with the built-in A10-4Q config
A100 = {"pciVendorSelector": "10DE:20B5", "resourceName": "nvidia.com/GA100_A100_PCIE_80GB", "externalResourceProvider": True}
L40S = {"pciVendorSelector": "10DE:26B9", "resourceName": "nvidia.com/AD102GL_L40S", "externalResourceProvider": True}
A10_4Q = {"mdevNameSelector": "NVIDIA A10-4Q", "resourceName": "nvidia.com/NVIDIA_A10-4Q", "externalResourceProvider": True}
USER_PCI = {"pciVendorSelector": "8086:4940", "resourceName": "intel.com/qat", "externalResourceProvider": True}
USER_MDEV = {"mdevNameSelector": "i915-GVTg_V5_4", "resourceName": "intel.com/gvt"}
FEATURE_GATES = ["HostDevices", "Snapshot"]
ONLY_KUBEVIRT = "-e", '{"gpuops_cluster_components": ["kubevirt_config"]}'

config.load_kube_config(KUBECONFIG)
core = client.CoreV1Api()
apps = client.AppsV1Api()
custom = client.CustomObjectsApi()
ext = client.ApiextensionsV1Api()


def playbook(*extra, inventory=INVENTORY, check=True):
    return cluster_playbook(*extra, inventory=inventory, check=check, timing=True)


def flat(stdout):
    return " ".join(stdout.split())  # the YAML callback folds long messages


def kubevirt():
    return custom.get_namespaced_custom_object("kubevirt.io", "v1", KV_NS, "kubevirts", KV_NAME)


def permitted(obj=None):
    obj = obj or kubevirt()
    return (obj.get("spec", {}).get("configuration") or {}).get("permittedHostDevices") or {}


def owners(obj, path):
    """Field managers whose managedFields cover spec.configuration.<path> (f:a/f:b)."""
    out = set()
    for mf in obj["metadata"].get("managedFields") or []:
        node = (mf.get("fieldsV1") or {}).get("f:spec", {}).get("f:configuration", {})
        for part in path.split("."):
            node = node.get("f:" + part) if isinstance(node, dict) else None
        if node is not None:
            out.add(mf["manager"])
    return out


def wait_established(name):
    for _ in range(120):
        crd = ext.read_custom_resource_definition(name)
        if any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or [])):
            return
        time.sleep(0.5)
    raise AssertionError(f"CRD {name} not established")


@pytest.fixture(scope="module")
def crds():
    """KubeVirt's CRDs (built by build.sh kubevirt-crds; built here when the cache lacks them)."""
    r = subprocess.run([sys.executable, os.path.join(HERE, "kubevirt_crds.py"), "--print-dir"],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    d = r.stdout.strip()
    with open(os.path.join(d, "SOURCE.json")) as f:
        source = json.load(f)
    print(f"KubeVirt CRDs: {source['module']}@{source['version']} {source['sum']}")
    out = {}
    for name in ("kubevirts.kubevirt.io", "virtualmachines.kubevirt.io"):
        with open(os.path.join(d, name + ".json")) as f:
            out[name] = json.load(f)
    return out


def test_without_kubevirt_the_play_says_so_and_goes_on():
    assert not [c for c in ext.list_custom_resource_definition().items if c.metadata.name == "kubevirts.kubevirt.io"]
    r = playbook(*ONLY_KUBEVIRT)
    text = flat(r.stdout)
    # kubernetes.core's discovery cache (/tmp/k8srcp-*.json, per server and credentials) may still know the kind
    # from an earlier cluster at this address: then the read finds no CR instead of no API; both are "not there"
    assert ("KubeVirt permitted host devices NOT configured: the KubeVirt CRD (kubevirts.kubevirt.io) is not "
            "installed." in text or "KubeVirt permitted host devices NOT configured: no KubeVirt CR." in text), \
        r.stdout[-4000:]
    assert "Once KubeVirt is installed, rerun to permit: nvidia.com/AD102GL_L40S, nvidia.com/GA100_A100_PCIE_80GB, " \
           "nvidia.com/NVIDIA_A10-4Q" in text


def test_the_users_cr_gets_our_entries_and_keeps_theirs(crds):
    for body in crds.values():
        ext.create_custom_resource_definition(body)
    for name in crds:
        wait_established(name)
    crd = ext.read_custom_resource_definition("kubevirts.kubevirt.io")
    schema = crd.spec.versions[0].schema.open_apiv3_schema
    phd = schema.properties["spec"].properties["configuration"].properties["permittedHostDevices"]
    assert phd.properties["pciHostDevices"].x_kubernetes_list_type == "atomic"      # the finding the merge is built on
    assert phd.properties["mediatedDevices"].x_kubernetes_list_type == "atomic"
    core.create_namespace({"metadata": {"name": KV_NS}})
    user_cr = {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": KV_NAME, "namespace": KV_NS},
               "spec": {"certificateRotateStrategy": {}, "workloadUpdateStrategy": {},
                        "configuration": {"developerConfiguration": {"featureGates": FEATURE_GATES},
                                          "permittedHostDevices": {"pciHostDevices": [USER_PCI],
                                                                   "mediatedDevices": [USER_MDEV]}}}}
    custom.create_namespaced_custom_object("kubevirt.io", "v1", KV_NS, "kubevirts", user_cr, field_manager=USER_MANAGER)
    # KubeVirt's schema is in force: an entry without resourceName is refused by the API server
    bad = copy.deepcopy(user_cr)
    bad["metadata"]["name"] = "refused"
    bad["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"] = [{"pciVendorSelector": "10DE:20B5"}]
    with pytest.raises(client.ApiException) as e:
        custom.create_namespaced_custom_object("kubevirt.io", "v1", KV_NS, "kubevirts", bad)
    assert e.value.status == 422 and "resourceName" in e.value.body

    playbook("-e", '{"gpuops_cluster_components": ["sandbox_device_plugin", "kubevirt_config"]}')
    obj = kubevirt()
    assert permitted(obj) == {"pciHostDevices": [USER_PCI, A100, L40S], "mediatedDevices": [USER_MDEV, A10_4Q]}
    assert obj["spec"]["configuration"]["developerConfiguration"] == {"featureGates": FEATURE_GATES}
    assert owners(obj, "developerConfiguration.featureGates") == {USER_MANAGER}
    assert owners(obj, "permittedHostDevices.pciHostDevices") == {FIELD_MANAGER}
    assert json.loads(obj["metadata"]["annotations"][ANNOTATION]) == {
        "pciHostDevices": [[A100["pciVendorSelector"], A100["resourceName"]], [L40S["pciVendorSelector"], L40S["resourceName"]]],
        "mediatedDevices": [[A10_4Q["mdevNameSelector"], A10_4Q["resourceName"]]]}


def docs_vms():
    with open(DOC) as f:
        blocks = re.findall(r"```yaml\n(.*?)```", f.read(), re.S)
    return [d for b in blocks for d in yaml.safe_load_all(b) if d and d.get("kind") == "VirtualMachine"]


def test_plugin_cr_and_docs_name_the_same_resources():
    ds = apps.read_namespaced_daemon_set("nvidia-sandbox-device-plugin-daemonset", "gpu-operator")
    advertised = json.loads(ds.metadata.annotations["gpuops.nvidia/kubevirt-resources"])
    ours = [e["resourceName"] for e in (A100, L40S, A10_4Q)]
    assert advertised == sorted(ours)
    cr_names = {e["resourceName"] for lst in permitted().values() for e in lst}
    vms = docs_vms()
    assert len(vms) == 2
    for vm in vms:
        custom.create_namespaced_custom_object("kubevirt.io", "v1", vm["metadata"]["namespace"], "virtualmachines", vm)
        got = custom.get_namespaced_custom_object("kubevirt.io", "v1", vm["metadata"]["namespace"], "virtualmachines",
                                                  vm["metadata"]["name"])
        gpus = got["spec"]["template"]["spec"]["domain"]["devices"]["gpus"]
        for g in gpus:
            assert g["deviceName"] in cr_names and g["deviceName"] in advertised, g
    assert {g["deviceName"] for vm in vms for g in vm["spec"]["template"]["spec"]["domain"]["devices"]["gpus"]} == \
        {A100["resourceName"], A10_4Q["resourceName"]}


def test_rerun_changes_nothing():
    before = kubevirt()["metadata"]["resourceVersion"]
    r = playbook(*ONLY_KUBEVIRT)
    changed = recap_changed(r.stdout)
    assert changed and all(v == 0 for v in changed.values()), changed
    assert kubevirt()["metadata"]["resourceVersion"] == before


def test_removing_a_model_removes_only_our_entry(tmp_path):
    with open(INVENTORY) as f:
        inv = yaml.safe_load(f)
    inv["all"]["children"]["k8s_nodes"]["hosts"]["pt-1"]["gpu_workload"] = "container"  # the L40S leaves the VMs
    path = tmp_path / "pt-1-container.yml"
    path.write_text(yaml.safe_dump(inv))
    playbook(*ONLY_KUBEVIRT, inventory=str(path))
    obj = kubevirt()
    assert permitted(obj) == {"pciHostDevices": [USER_PCI, A100], "mediatedDevices": [USER_MDEV, A10_4Q]}
    assert json.loads(obj["metadata"]["annotations"][ANNOTATION])["pciHostDevices"] == [
        [A100["pciVendorSelector"], A100["resourceName"]]]
    assert obj["spec"]["configuration"]["developerConfiguration"] == {"featureGates": FEATURE_GATES}


def test_absent_leaves_the_cr_as_the_user_made_it():
    playbook(*ONLY_KUBEVIRT, "-e", "gpuops_cluster_state=absent")
    obj = kubevirt()
    assert permitted(obj) == {"pciHostDevices": [USER_PCI], "mediatedDevices": [USER_MDEV]}
    assert ANNOTATION not in (obj["metadata"].get("annotations") or {})
    assert obj["spec"]["configuration"]["developerConfiguration"] == {"featureGates": FEATURE_GATES}
    r = playbook(*ONLY_KUBEVIRT, "-e", "gpuops_cluster_state=absent")
    assert recap_changed(r.stdout).get("localhost") == 0
