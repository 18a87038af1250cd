# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""ClusterPolicy import (issue 16, part 4): the exact variables and the exact list of fields with no
equivalent, for ClusterPolicies shaped like the GPU Operator's published samples; the written
group_vars are what the roles' argument specs accept (their defaults templated with them, as Ansible
does) and what the roles' own config validators accept."""
from __future__ import annotations

import copy
import re
import os
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.dataloader import DataLoader
from ansible_collections.gpuops.nvidia.plugins.filter import clusterpolicy as f
from ansible_collections.gpuops.nvidia.plugins.filter import k8s_plan
from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _clusterpolicy as cp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "roles"))
from role_render import ROLES, Role, _untagged  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "clusterpolicy")


def load(name):
    with open(os.path.join(FIXTURES, name)) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


def load_group_vars(text):
    """The written file as Ansible reads group_vars (its YAML loader: the !unsafe tag), as plain values."""
    return _untagged(DataLoader().load(text))


def paths(result):
    return [u["path"] for u in result["unmapped"]]


UPGRADE_DRAIN = ["driver.upgradePolicy.drain.deleteEmptyDir", "driver.upgradePolicy.drain.force",
                 "driver.upgradePolicy.drain.timeoutSeconds"]

EXPECTED = {
    "default-sample.yaml": {
        "vars": {
            "gpuops_cluster_components": ["runtime_class", "nfd", "gfd", "device_plugin", "dcgm_exporter", "mig_manager",
                                          "validator", "policies"],
            "gpuops_default_workload": "container",
            "gpuops_mig_strategy": "single",
            "gpuops_runtime_class": "nvidia",
            "driver_state": "present",
            "gpu_upgrade_drain_delete_emptydir_data": False,
            "gpu_upgrade_drain_force": False,
            "gpu_upgrade_drain_timeout": 300,
            "gpu_upgrade_max_unavailable": 1,
            "container_toolkit_install": True,
            "runtime_class_handlers": [{"name": "nvidia", "handler": "nvidia"}],
            "validator_with_workload": False,
        },
        # drain.enable false: the operator deletes the GPU pods with podDeletion.*, which become the drain's settings
        "unmapped": ["operator.use_ocp_driver_toolkit", "driver.upgradePolicy.autoUpgrade",
                     "driver.upgradePolicy.drain.enable"] + UPGRADE_DRAIN + ["dcgm"],
    },
    "mig-mixed-custom-registry.yaml-stream": {
        "vars": {
            "gpuops_cluster_components": ["runtime_class", "nfd", "gfd", "device_plugin", "mig_manager", "validator",
                                          "policies"],
            "gpuops_default_workload": "container",
            "gpuops_device_plugin_configs": {"any": {
                "version": "v1",
                "flags": {"migStrategy": "mixed", "plugin": {"deviceListStrategy": "volume-mounts", "passDeviceSpecs": True}},
                "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}},
            "gpuops_k8s_tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            "gpuops_mig_configs": {"version": "v1", "mig-configs": {
                "all-disabled": [{"devices": "all", "mig-enabled": False}],
                "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}},
            "gpuops_mig_strategy": "mixed",
            "gpuops_registry": "registry.example.com",
            "gpuops_runtime_class": "nvidia",
            "driver_branch": "580",
            "driver_kernel_module_type": "open",
            "driver_precompiled": "never",
            "driver_state": "present",
            "driver_version": "580.95.05",
            "gpu_upgrade_drain_delete_emptydir_data": True,
            "gpu_upgrade_drain_force": False,
            "gpu_upgrade_drain_timeout": 600,
            "gpu_upgrade_max_unavailable": 1,
            "container_toolkit_cdi_enabled": True,
            "container_toolkit_runtime_cdi_enabled": True,
            "container_toolkit_install": True,
            "container_toolkit_runtime": "containerd",
            "container_toolkit_runtime_config_path": "/etc/containerd/config.toml",
            "container_toolkit_runtime_extra_args": {"socket": "/run/containerd/containerd.sock"},
            "container_toolkit_runtime_mode": "cdi",
            "container_toolkit_runtime_name": "nvidia",
            "container_toolkit_set_as_default": False,
            "container_toolkit_version": "1.17.8-1",
            "runtime_class_handlers": [{"name": "nvidia", "handler": "nvidia"}],
            "device_plugin_default_config": "any",
            "device_plugin_image": {"repository": "nvcr.io/nvidia", "image": "k8s-device-plugin", "version": "v0.20.0"},
            "device_plugin_image_pull_secrets": ["regcred"],
            "device_plugin_priority_class": "system-node-critical",
            "device_plugin_resources": {"limits": {"memory": "512Mi"}},
            "gfd_default_config": "any",
            "gfd_image": {"repository": "nvcr.io/nvidia", "image": "k8s-device-plugin", "version": "v0.20.0"},
            "gfd_priority_class": "system-node-critical",
            "gfd_sleep_interval": "120s",
            "dcgm_exporter_image": {"repository": "nvcr.io/nvidia/k8s", "image": "dcgm-exporter",
                                    "version": "4.6.0-4.8.3-distroless"},
            "dcgm_exporter_priority_class": "system-node-critical",
            "dcgm_exporter_service_monitor": "false",
            "mig_manager_cdi_enabled": True,
            "mig_manager_default_config": "all-1g.10gb",
            "mig_manager_image": {"repository": "nvcr.io/nvidia/cloud-native", "image": "k8s-mig-manager",
                                  "version": "v0.15.0"},
            "mig_manager_priority_class": "system-node-critical",
            "mig_manager_with_reboot": True,
            "validator_image": {"repository": "nvcr.io/nvidia", "image": "gpu-operator", "version": "v26.7.0"},
            "validator_image_pull_policy": "IfNotPresent",
            "validator_image_pull_secrets": ["regcred"],
            "validator_priority_class": "system-node-critical",
        },
        "unmapped": [
            "operator.initContainer", "driver.repository", "driver.image", "driver.imagePullPolicy",
            "driver.imagePullSecrets", "driver.rdma.enabled", "driver.rdma.useHostMofed",
            "driver.upgradePolicy.maxUnavailable", "daemonsets.rollingUpdate.maxUnavailable",
            "driver.upgradePolicy.autoUpgrade", "toolkit.installDir",
            "toolkit.repository", "toolkit.image", "cdi.default", "devicePlugin.env[NVIDIA_MIG_MONITOR_DEVICES]",
            "nodeStatusExporter"],
    },
    "sandbox-vfio-vgpu.yaml": {
        "vars": {
            "gpuops_cluster_components": ["runtime_class", "nfd", "gfd", "device_plugin", "dcgm_exporter", "validator",
                                          "vgpu_device_manager", "sandbox_device_plugin", "kubevirt_config", "policies"],
            "gpuops_default_workload": "vm-passthrough",
            "gpuops_mig_strategy": "single",
            "gpuops_runtime_class": "nvidia",
            "gpuops_sandbox_mode": "kubevirt",
            "gpuops_vgpu_default_config": "A100-1-5C",
            "driver_branch": "580",
            "driver_precompiled": "always",
            "driver_state": "present",
            "container_toolkit_cdi_enabled": False,
            "container_toolkit_runtime_cdi_enabled": False,
            "container_toolkit_install": True,
            "container_toolkit_runtime": "crio",
            "container_toolkit_runtime_mode": "legacy",
            "container_toolkit_version": "1.20.0-1",
            "runtime_class_handlers": [{"name": "nvidia", "handler": "nvidia"}],
            "device_plugin_priority_class": "gpu-critical",
            "gfd_priority_class": "gpu-critical",
            "dcgm_exporter_priority_class": "gpu-critical",
            "dcgm_exporter_service_monitor": "true",
            "dcgm_exporter_service_monitor_interval": "30s",
            "dcgm_exporter_service_monitor_labels": {"release": "prometheus"},
            "mig_manager_cdi_enabled": False,
            "mig_manager_priority_class": "gpu-critical",
            "validator_node_kubelet_dir": "/var/lib/k0s/kubelet",
            "validator_priority_class": "gpu-critical",
            "vgpu_device_manager_image": {"repository": "nvcr.io/nvidia/cloud-native", "image": "vgpu-device-manager",
                                          "version": "v0.5.0"},
            "vgpu_device_manager_priority_class": "gpu-critical",
            "sandbox_device_plugin_image": {"repository": "nvcr.io/nvidia", "image": "kubevirt-gpu-device-plugin",
                                            "version": "v1.6.0"},
            "sandbox_device_plugin_priority_class": "gpu-critical",
        },
        "unmapped": ["daemonsets.updateStrategy", "driver.licensingConfig.secretName", "driver.licensingConfig.nlsEnabled",
                     "vfioManager.repository", "vfioManager.image", "vfioManager.version", "vgpuDeviceManager.config.name",
                     "vgpuManager"],
    },
}

VGPU_CONFIGMAP = {"vgpu-devices-config": {"config.yaml": yaml.safe_dump({"version": "v1", "vgpu-configs": {
    "default": [{"devices": "all", "vgpu-devices": {"A100-4C": 10}}],
    "A100-1-5C": [{"devices": "all", "vgpu-devices": {"A100-1-5C": 7}}]}})}}


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_exact_vars_and_unmapped(fixture):
    r = f.clusterpolicy_to_vars(load(fixture))
    assert r["vars"] == EXPECTED[fixture]["vars"]
    assert paths(r) == EXPECTED[fixture]["unmapped"]
    for u in r["unmapped"]:
        assert u["why"] and "value" in u
    assert set(r["sources"]) == set(r["vars"]) and all(r["sources"].values())


def test_every_unmapped_value_is_the_policys():
    r = f.clusterpolicy_to_vars(load("mig-mixed-custom-registry.yaml-stream"))
    got = {u["path"]: u["value"] for u in r["unmapped"]}
    assert got["driver.rdma.enabled"] is True
    assert got["driver.upgradePolicy.maxUnavailable"] == "25%"
    assert got["daemonsets.rollingUpdate.maxUnavailable"] == 2
    assert got["devicePlugin.env[NVIDIA_MIG_MONITOR_DEVICES]"] == "all"
    assert got["nodeStatusExporter"] == {"enabled": True}
    assert "no node-status-exporter" in next(u["why"] for u in r["unmapped"] if u["path"] == "nodeStatusExporter")


def test_default_sample_sandbox_components_are_notes_not_unmapped():
    r = f.clusterpolicy_to_vars(load("default-sample.yaml"))
    assert not [p for p in paths(r) if p.split(".")[0] in cp.SANDBOX_COMPONENTS]
    assert any(n.startswith("vgpuManager.*") for n in r["notes"])


def test_missing_configmap_is_listed_and_given_one_is_mapped():
    docs = load("sandbox-vfio-vgpu.yaml")
    r = f.clusterpolicy_to_vars(docs)
    assert r["configmaps_needed"] == ["vgpu-devices-config"]
    r2 = f.clusterpolicy_to_vars(docs, VGPU_CONFIGMAP)
    assert r2["configmaps_needed"] == [] and "vgpuDeviceManager.config.name" not in paths(r2)
    cfg = r2["vars"]["gpuops_vgpu_device_manager_config"]
    assert k8s_plan.k8s_vgpu_config_names(cfg, r2["vars"]["gpuops_vgpu_default_config"]) == ["A100-1-5C", "default"]
    # the same ConfigMap as an object beside the ClusterPolicy (a multi-document file, or k8s_info results)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "vgpu-devices-config"},
          "data": VGPU_CONFIGMAP["vgpu-devices-config"]}
    assert f.clusterpolicy_to_vars(docs + [cm])["vars"] == r2["vars"]
    assert f.clusterpolicy_to_vars({"resources": docs}, {"resources": [cm]})["vars"] == r2["vars"]


def test_device_plugin_env_without_configmap_makes_the_default_config():
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {
        "devicePlugin": {"env": [{"name": "DEVICE_LIST_STRATEGY", "value": "cdi-annotations,envvar"},
                                 {"name": "DEVICE_ID_STRATEGY", "value": "index"},
                                 {"name": "FAIL_ON_INIT_ERROR", "value": "false"}]}}}
    r = f.clusterpolicy_to_vars(policy)
    assert r["vars"]["gpuops_device_plugin_configs"] == {"default": {"version": "v1", "flags": {
        "failOnInitError": False,
        "plugin": {"deviceListStrategy": ["cdi-annotations", "envvar"], "deviceIDStrategy": "index"}}}}
    k8s_plan.k8s_device_plugin_data(r["vars"]["gpuops_device_plugin_configs"])  # the role's validator accepts it
    # named configs in a ConfigMap that was not given: the flags cannot be placed
    policy["spec"]["devicePlugin"]["config"] = {"name": "dp-config", "default": "a"}
    r = f.clusterpolicy_to_vars(policy)
    assert "gpuops_device_plugin_configs" not in r["vars"]
    assert {"devicePlugin.config.name", "devicePlugin.env[DEVICE_LIST_STRATEGY]"} <= set(paths(r))


@pytest.mark.parametrize("name", ["USE_NODE_FEATURE_API", "GFD_USE_NODE_FEATURE_API"])
@pytest.mark.parametrize("value, expected", [("false", False), ("true", True)])
def test_gfd_node_feature_api_env(name, value, expected):
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {
        "gfd": {"env": [{"name": name, "value": value}]}}}
    assert f.clusterpolicy_to_vars(policy)["vars"]["gfd_use_node_feature_api"] is expected
    policy["spec"]["gfd"]["env"][0]["value"] = "yes please"
    with pytest.raises(AnsibleFilterError, match=name + r".*must be a boolean"):
        f.clusterpolicy_to_vars(policy)


@pytest.mark.parametrize("value, expected", [("false", False), ("True", True), (" FALSE ", False)])
def test_gfd_fail_on_init_error_env(value, expected):
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {
        "gfd": {"env": [{"name": "GFD_FAIL_ON_INIT_ERROR", "value": value}]}}}
    assert f.clusterpolicy_to_vars(policy)["vars"]["gfd_fail_on_init_error"] is expected
    policy["spec"]["gfd"]["env"][0]["value"] = "sometimes"
    with pytest.raises(AnsibleFilterError, match=r"GFD_FAIL_ON_INIT_ERROR.*must be a boolean"):
        f.clusterpolicy_to_vars(policy)


@pytest.mark.parametrize("enabled, expected", [(True, True), ("true", True), (False, None), (None, None)])
def test_psa_enabled_labels_the_components_namespace(enabled, expected):
    spec = {"psp": {"enabled": True}} if enabled is None else {"psa": {"enabled": enabled}, "psp": {"enabled": True}}
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": spec}
    r = f.clusterpolicy_to_vars(policy)
    assert r["vars"].get("gpuops_k8s_namespace_psa") is expected
    if expected:
        assert r["sources"]["gpuops_k8s_namespace_psa"] == ["psa.enabled"]
        assert load_group_vars(f.clusterpolicy_group_vars(r, "cp.yaml"))["gpuops_k8s_namespace_psa"] is True
    assert "psa.enabled" not in paths(r) and "psp.enabled" in paths(r)   # PodSecurityPolicy: nothing to create


def test_unknown_fields_are_listed_not_dropped():
    docs = load("default-sample.yaml")
    spec = docs[0]["spec"]
    spec["futureComponent"] = {"enabled": True, "knob": {"depth": 3}}
    spec["toolkit"]["newField"] = "x"
    r = f.clusterpolicy_to_vars(docs)
    got = {u["path"]: u["value"] for u in r["unmapped"]}
    assert got["futureComponent.enabled"] is True and got["futureComponent.knob.depth"] == 3
    assert got["toolkit.newField"] == "x"


@pytest.mark.parametrize("policy, match", [
    ([], "exactly one ClusterPolicy or GPUCluster \\(the operator refuses both\\), found 0"),
    ([{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": n}, "spec": {}} for n in "ab"],
     "found 2: ClusterPolicy a, ClusterPolicy b"),
    ({"apiVersion": "nvidia.com/v2", "kind": "ClusterPolicy", "spec": {}}, "apiVersion must be nvidia.com/v1"),
    ({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "spec": {"mig": {"strategy": "double"}}},
     "mig.strategy must be none, single or mixed"),
    ({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "spec": {"driver": {"enabled": "maybe"}}},
     "driver.enabled must be a boolean"),
    ({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "spec": {"toolkit": {"env": "CONTAINERD_CONFIG=x"}}},
     "toolkit.env must be a list"),
    ("text", "expected Kubernetes objects"),
])
def test_refused_with_a_message(policy, match):
    with pytest.raises(AnsibleFilterError, match="clusterpolicy_to_vars: .*" + match):
        f.clusterpolicy_to_vars(policy)


@pytest.mark.parametrize("tag, package", [
    ("v1.17.8", "1.17.8-1"), ("v1.17.8-ubuntu20.04", "1.17.8-1"), ("1.20.0", "1.20.0-1"),
    ("v1.18.0-rc.1", "1.18.0~rc.1-1"), ("sha256:abcd", None), ("latest", None)])
def test_toolkit_package_version(tag, package):
    assert cp.toolkit_package_version(tag) == package


@pytest.mark.parametrize("policy_bits, expected, left", [
    ({"driver": {"upgradePolicy": {"maxParallelUpgrades": 3, "maxUnavailable": 2}}}, 2,
     ["driver.upgradePolicy.maxParallelUpgrades"]),
    ({"driver": {"upgradePolicy": {"maxUnavailable": "10%"}}, "daemonsets": {"rollingUpdate": {"maxUnavailable": "1"}}},
     "10%", ["daemonsets.rollingUpdate.maxUnavailable"]),
    ({"daemonsets": {"rollingUpdate": {"maxUnavailable": "3"}}}, 3, []),
    ({"driver": {"upgradePolicy": {"maxParallelUpgrades": 0}}}, None, ["driver.upgradePolicy.maxParallelUpgrades"]),
])
def test_upgrade_batch(policy_bits, expected, left):
    r = f.clusterpolicy_to_vars({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "spec": policy_bits})
    assert r["vars"].get("gpu_upgrade_max_unavailable") == expected
    assert paths(r) == left


def test_registry_per_component_when_hosts_differ():
    spec = {"devicePlugin": {"repository": "a.example/nvidia", "version": "v0.18.0"},
            "gfd": {"repository": "b.example/mirror/nvidia"}}
    r = f.clusterpolicy_to_vars({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "spec": spec})
    v = r["vars"]
    assert "gpuops_registry" not in v
    assert v["device_plugin_registry"] == "a.example" and v["gfd_registry"] == "b.example"
    assert v["device_plugin_image"] == {"repository": "nvcr.io/nvidia", "image": "k8s-device-plugin", "version": "v0.18.0"}
    assert v["gfd_image"]["repository"] == "b.example/mirror/nvidia"
    # what the roles will pull
    assert k8s_plan.k8s_image(v["gfd_image"], v["gfd_registry"]) == "b.example/mirror/nvidia/k8s-device-plugin:v0.20.0"
    assert k8s_plan.k8s_image(v["device_plugin_image"], v["device_plugin_registry"]) == \
        "a.example/nvidia/k8s-device-plugin:v0.18.0"


def test_default_images_are_the_roles_defaults():
    for key, (prefix, default) in cp.IMAGE_COMPONENTS.items():
        with open(os.path.join(ROLES, prefix, "defaults", "main.yml")) as fh:
            assert yaml.safe_load(fh)[prefix + "_image"] == default, key


def test_cluster_components_are_cluster_ymls_default_order():
    with open(os.path.join(ROLES, "..", "playbooks", "cluster.yml")) as fh:
        play = next(p for p in yaml.safe_load(fh) if p["name"] == "GPU cluster components")
    # the DRA driver comes in only with DRA nodes (gpuops_gpu_allocation dra): a ClusterPolicy has none
    assert [c for c in play["vars"]["_cluster_default_order"] if c != "dra_driver"] == cp.CLUSTER_COMPONENTS


# roles whose defaults read the imported variables (role-level or the cluster-wide gpuops_* ones)
SPEC_ROLES = ["container_toolkit", "driver", "device_plugin", "gfd", "dcgm_exporter", "mig_manager", "validator",
              "vgpu_device_manager", "sandbox_device_plugin", "runtime_class", "node_labels", "gpu_operator", "nfd",
              "doctor", "dra_driver"]


def role_arguments(role, variables, entry="main"):
    """Every option of the role's entry point as the role sees it with these group_vars: its
    defaults templated over the imported variables (which take precedence, as group_vars do)."""
    r = Role(role)
    with open(os.path.join(r.path, "meta", "argument_specs.yml")) as fh:
        specs = yaml.safe_load(fh)["argument_specs"]
    spec = specs[entry]["options"]
    templar = r.templar(**copy.deepcopy(variables))
    values = {}
    for name in spec:
        if name in variables:
            values[name] = variables[name]
        elif name in r.variables():
            values[name] = _untagged(templar.template(r.variables()[name]))
    return spec, values


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_written_group_vars_pass_the_roles_argument_specs(fixture, tmp_path):
    result = f.clusterpolicy_to_vars(load(fixture), VGPU_CONFIGMAP)
    text = f.clusterpolicy_group_vars(result, fixture)
    written = load_group_vars(text)
    assert written == result["vars"]  # the comments carry the rest
    for u in result["unmapped"]:
        assert "#   %s: " % u["path"] in text
    checked = set()
    for role in SPEC_ROLES:
        with open(os.path.join(ROLES, role, "meta", "argument_specs.yml")) as fh:
            entries = yaml.safe_load(fh)["argument_specs"]
        for entry in entries:
            spec, values = role_arguments(role, written, entry)
            res = ArgumentSpecValidator(spec).validate(values)
            assert not res.error_messages, (role, entry, res.error_messages)
            checked |= set(values) & set(written)
    role_vars = {k for k in written if not k.startswith(("gpuops_", "gpu_upgrade_"))}  # gpu_upgrade_*: a playbook's
    assert role_vars <= checked, role_vars - checked
    # the configs the roles validate before applying anything
    dp = k8s_plan.k8s_device_plugin_data(role_arguments("device_plugin", written)[1]["device_plugin_configs"],
                                         written.get("device_plugin_default_config", "default"),
                                         written.get("gpuops_mig_strategy", "single"))
    assert dp["data"]
    k8s_plan.k8s_mig_config_names(role_arguments("mig_manager", written)[1]["mig_manager_configs"])


def test_group_vars_text_is_stable_and_commented():
    result = f.clusterpolicy_to_vars(load("mig-mixed-custom-registry.yaml-stream"))
    text = f.clusterpolicy_group_vars(result, "cp.yaml")
    assert text == f.clusterpolicy_group_vars(f.clusterpolicy_to_vars(load("mig-mixed-custom-registry.yaml-stream")), "cp.yaml")
    assert text.startswith("--- !unsafe\n# gpuops.nvidia group_vars imported from GPU Operator ClusterPolicy cluster-policy (cp.yaml)")
    assert "# from driver.upgradePolicy.maxParallelUpgrades\ngpu_upgrade_max_unavailable: 1\n" in text
    assert "# --- No equivalent in gpuops.nvidia (16) ---" in text
    with pytest.raises(AnsibleFilterError, match="clusterpolicy_group_vars: expected the result"):
        f.clusterpolicy_group_vars({"name": "x"})


def test_drain_settings_come_from_what_the_operator_uses():
    pol = {"drain": {"enable": True, "timeoutSeconds": 900, "force": True, "podSelector": "app=train"},
           "podDeletion": {"timeoutSeconds": 60, "force": False}}
    r = f.clusterpolicy_to_vars({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                                 "spec": {"driver": {"upgradePolicy": pol}}})
    assert {k: v for k, v in r["vars"].items() if k.startswith("gpu_upgrade_drain")} == {
        "gpu_upgrade_drain_timeout": 900, "gpu_upgrade_drain_force": True, "gpu_upgrade_drain_pod_selectors": ["app=train"]}
    assert paths(r) == ["driver.upgradePolicy.podDeletion.timeoutSeconds", "driver.upgradePolicy.podDeletion.force"]
    pol["drain"]["enable"] = False
    r = f.clusterpolicy_to_vars({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                                 "spec": {"driver": {"upgradePolicy": pol}}})
    assert r["vars"]["gpu_upgrade_drain_timeout"] == 60 and r["vars"]["gpu_upgrade_drain_force"] is False
    assert "driver.upgradePolicy.drain.enable" in paths(r) and "driver.upgradePolicy.drain.podSelector" in paths(r)


# -- wrong shapes: every field ends in a variable, the unmapped list, a note or a named refusal --------------

WRONG_SHAPE_FIXTURES = ["every-field.yaml-stream", "default-sample.yaml", "mig-mixed-custom-registry.yaml-stream",
                        "sandbox-vfio-vgpu.yaml"]


def _field_paths(node, keys=()):
    """Every field of a spec, intermediate mappings included: (keys, value). Lists are fields themselves."""
    for key, value in node.items():
        yield keys + (key,), value
        if isinstance(value, dict):
            yield from _field_paths(value, keys + (key,))


def _wrong_values(value):
    """Values of other types than ``value``'s: a string where a mapping, list or boolean is expected, a list
    where a scalar is, a mapping where a scalar is."""
    if isinstance(value, dict):
        return ["wrong", True, ["wrong"]]
    if isinstance(value, list):
        return ["wrong", {"wrong": "wrong"}]
    if isinstance(value, bool):
        return ["wrong", ["wrong"], {"wrong": "wrong"}]
    if isinstance(value, int):
        return ["wrong", ["wrong"], {"wrong": "wrong"}]
    return [["wrong"], {"wrong": "wrong"}]


def _leaves(path, value):
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from _leaves("%s.%s" % (path, k), v)
    else:
        yield path, value


def _related(a, b):
    return a == b or a.startswith((b + ".", b + "[")) or b.startswith((a + ".", a + "["))


def _note_paths(notes):
    out = []
    for n in notes:
        head = n.split(":", 1)[0].split("=", 1)[0]
        out.append(head[:-2] if head.endswith(".*") else head)
    return out


def _holds(haystack, needle):
    if haystack == needle:
        return True
    if isinstance(haystack, dict):
        return any(_holds(v, needle) for v in haystack.values())
    if isinstance(haystack, list):
        return any(_holds(v, needle) for v in haystack)
    return False


def _set_path(spec, keys, value):
    node = spec
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value


def _wrong_shape_cases():
    for fixture in WRONG_SHAPE_FIXTURES:
        spec = load(fixture)[0]["spec"]
        for keys, value in _field_paths(spec):
            for wrong in _wrong_values(value):
                yield fixture, keys, wrong


def test_every_field_with_a_wrong_type_is_accounted_for():
    """Each field the importer knows (every-field.yaml-stream and the samples), one at a time, given a value of a type
    it does not have: the value ends in a variable (unchanged), the unmapped list, a note, or a refusal that names
    the field -- never dropped, never mangled (a string taken for a list of characters)."""
    problems = []
    cases = 0
    parsed = {fixture: load(fixture) for fixture in WRONG_SHAPE_FIXTURES}
    for fixture, keys, wrong in _wrong_shape_cases():
        cases += 1
        path = ".".join(keys)
        docs = copy.deepcopy(parsed[fixture])
        _set_path(docs[0]["spec"], keys, copy.deepcopy(wrong))
        try:
            r = f.clusterpolicy_to_vars(docs)
        except AnsibleFilterError as e:
            if path not in str(e):
                problems.append("%s %s=%r: refused without naming the field: %s" % (fixture, path, wrong, e))
            continue
        unmapped = [u["path"] for u in r["unmapped"]]
        notes = _note_paths(r["notes"])
        for leaf, value in _leaves(path, wrong):
            if any(_related(leaf, u) for u in unmapped) or any(_related(leaf, n) for n in notes):
                continue
            into = [var for var, srcs in r["sources"].items() if any(_related(leaf, s) for s in srcs)]
            if not into:
                problems.append("%s %s=%r: %s dropped" % (fixture, path, wrong, leaf))
            elif not any(_holds(r["vars"][var], value) for var in into):
                problems.append("%s %s=%r: %s mangled into %s" % (
                    fixture, path, wrong, leaf, {var: r["vars"][var] for var in into}))
    assert cases > 600
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("bits, match", [
    ({"devicePlugin": {"imagePullSecrets": "regcred"}}, "devicePlugin.imagePullSecrets must be a list"),
    ({"sandboxWorkloads": True}, "sandboxWorkloads must be a mapping"),
    ({"gds": "on"}, "gds must be a mapping"),
    ({"psa": ["enabled"]}, "psa must be a mapping"),
    ({"validator": {"plugin": "x"}}, "validator.plugin must be a mapping"),
    ({"driver": {"upgradePolicy": {"drain": ["a"]}}}, "driver.upgradePolicy.drain must be a mapping"),
])
def test_wrong_shapes_from_the_issue_are_refused_by_name(bits, match):
    with pytest.raises(AnsibleFilterError, match="clusterpolicy_to_vars: " + re.escape(match)):
        f.clusterpolicy_to_vars({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
                                 "spec": bits})


@pytest.mark.parametrize("cm, key, path", [
    ("custom-mig-parted-config", "config.yaml", ("migManager", "config")),
    ("time-slicing-config", "any", ("devicePlugin", "config")),
])
def test_malformed_configmap_yaml_names_the_configmap_and_key(cm, key, path):
    docs = load("mig-mixed-custom-registry.yaml-stream")
    target = next(d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == cm)
    target["data"][key] = "version: v1\nmig-configs: [unclosed\n  - {a: b"
    with pytest.raises(AnsibleFilterError, match="ConfigMap %s key %s is not valid YAML" % (cm, re.escape(key))):
        f.clusterpolicy_to_vars(docs)


def test_malformed_vgpu_configmap_and_metrics_csv_name_the_configmap_and_key():
    docs = load("sandbox-vfio-vgpu.yaml")
    with pytest.raises(AnsibleFilterError, match="ConfigMap vgpu-devices-config key config.yaml is not valid YAML"):
        f.clusterpolicy_to_vars(docs, {"vgpu-devices-config": {"config.yaml": "vgpu-configs: {a: [1, 2}"}})
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
              "spec": {"dcgmExporter": {"config": {"name": "metrics"}}}}
    with pytest.raises(AnsibleFilterError, match="ConfigMap metrics key dcgm-metrics.csv"):
        f.clusterpolicy_to_vars(policy, {"metrics": {"dcgm-metrics.csv": "DCGM_FI_X, gauge, \"x" + "y" * 200000}})
    with pytest.raises(AnsibleFilterError, match="ConfigMap metrics key dcgm-metrics.csv must be a string"):
        f.clusterpolicy_to_vars(policy, {"metrics": {"dcgm-metrics.csv": ["DCGM_FI_X"]}})


def test_every_variable_the_import_may_write_is_read_by_the_collection():
    """VARIABLES (the only names the group_vars may hold) are options of the roles or variables their defaults
    and the playbooks read: a stale name would be written for nobody."""
    options, text = set(), ""
    for role in sorted(os.listdir(ROLES)):
        spec = os.path.join(ROLES, role, "meta", "argument_specs.yml")
        if os.path.exists(spec):
            with open(spec) as fh:
                for entry in (yaml.safe_load(fh)["argument_specs"] or {}).values():
                    options |= set(entry.get("options") or {})
        defaults = os.path.join(ROLES, role, "defaults", "main.yml")
        if os.path.exists(defaults):
            with open(defaults) as fh:
                text += fh.read()
    books = os.path.join(ROLES, "..", "playbooks")
    for name in sorted(os.listdir(books)):
        if name.endswith(".yml"):
            with open(os.path.join(books, name)) as fh:
                text += fh.read()
    unread = sorted(v for v in cp.VARIABLES if v not in options and not re.search(r"\b%s\b" % v, text))
    assert not unread


def test_group_vars_refuse_a_variable_the_import_does_not_write():
    result = f.clusterpolicy_to_vars(load("default-sample.yaml"))
    result["vars"]["ansible_become_exe"] = "/bin/sh"
    with pytest.raises(AnsibleFilterError, match="'ansible_become_exe' is not a variable the ClusterPolicy import writes"):
        f.clusterpolicy_group_vars(result)


@pytest.mark.parametrize("root, expected", [("/run/nvidia/mps", "/run/nvidia/mps"), ("/var/lib/mps/", "/var/lib/mps")])
def test_device_plugin_mps_root(root, expected):
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {
        "devicePlugin": {"mps": {"root": root}}}}
    assert f.clusterpolicy_to_vars(policy)["vars"]["device_plugin_mps_root"] == expected


@pytest.mark.parametrize("root", ["/", "run/mps", "/run/../etc", "/run/mps\n", "/run/{{ x }}", ["/run"]])
def test_device_plugin_mps_root_refused(root):
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {
        "devicePlugin": {"mps": {"root": root}}}}
    with pytest.raises(AnsibleFilterError, match=r"devicePlugin\.mps\.root must be"):
        f.clusterpolicy_to_vars(policy)


def test_validator_driver_dir_and_dev_char_links():
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {
        "hostPaths": {"driverInstallDir": "/usr/local/nvidia/"},
        "validator": {"driver": {"env": [{"name": "DISABLE_DEV_CHAR_SYMLINK_CREATION", "value": "true"}]}}}}
    got = f.clusterpolicy_to_vars(policy)["vars"]
    assert got["validator_driver_install_dir"] == "/usr/local/nvidia"
    assert got["validator_dev_char_symlinks"] is False
    policy["spec"]["validator"]["driver"]["env"][0]["value"] = "maybe"
    with pytest.raises(AnsibleFilterError, match=r"DISABLE_DEV_CHAR_SYMLINK_CREATION.*must be a boolean"):
        f.clusterpolicy_to_vars(policy)


# -- GPUCluster (the DRA stack of GPU Operator v26.7.0) ------------------------------------------------------

def test_a_gpucluster_maps_to_dra_allocation_and_the_dra_driver_role():
    r = f.clusterpolicy_to_vars(load("gpucluster-dra.yaml"))
    assert r["kind"] == "GPUCluster" and r["name"] == "gpu-cluster"
    v = r["vars"]
    assert v["gpuops_gpu_allocation"] == "dra"
    assert v["gpuops_cluster_components"] == ["nfd", "dra_driver", "runtime_class", "dcgm_exporter"]
    assert v["gpuops_registry"] == "mirror.example.com:5000"
    assert v["dra_driver_feature_gates"] == {"TimeSlicingSettings": True, "MPSSupport": True}
    assert (v["dra_driver_image_pull_policy"], v["dra_driver_image_pull_secrets"]) == ("Always", ["mirror-cred"])
    assert v["dra_driver_image"] == {"repository": "nvcr.io/nvidia", "image": "dra-driver-nvidia-gpu", "version": "v0.5.0"}
    assert v["dra_driver_resources"] == {"limits": {"memory": "512Mi"}}
    assert v["dra_driver_healthcheck_port"] == 51600
    assert v["dra_driver_kubelet_root"] == "/data/kubelet"
    assert v["dcgm_exporter_port"] == 9500
    assert v["dra_driver_priority_class"] == v["dcgm_exporter_priority_class"] == "system-node-critical"
    assert "device_plugin_priority_class" not in v
    # what it cannot: the compute-domain half (on by the API's default), the driver's validation path, env
    assert paths(r) == ["draDriver.gpus.kubeletPlugin.env[LOG_VERBOSITY]", "draDriver.computeDomains",
                        "hostPaths.driverInstallDir"]
    why = {u["path"]: u["why"] for u in r["unmapped"]}
    assert why["draDriver.computeDomains"] == cp.WHY_COMPUTE_DOMAINS


def test_a_gpucluster_without_compute_domains_or_dcgm_exporter():
    r = f.clusterpolicy_to_vars({"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster",
                                 "metadata": {"name": "gpu-cluster"},
                                 "spec": {"draDriver": {"computeDomains": {"enabled": False, "controller": {"env": []}},
                                                        "gpus": {"kubeletPlugin": {"healthcheck": {"enabled": False}}}},
                                          "dcgmExporter": {"enabled": False}}})
    assert r["unmapped"] == []
    assert r["vars"]["gpuops_cluster_components"] == ["nfd", "dra_driver"]
    assert r["vars"]["dra_driver_healthcheck_port"] == 0
    assert any(n.startswith("draDriver.computeDomains.*") for n in r["notes"])


@pytest.mark.parametrize("policy,match", [
    ([{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cp"}, "spec": {}},
      {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "metadata": {"name": "gpu-cluster"}, "spec": {}}],
     "found 2: ClusterPolicy cp, GPUCluster gpu-cluster"),
    ({"apiVersion": "nvidia.com/v1", "kind": "GPUCluster", "spec": {}}, "GPUCluster apiVersion must be nvidia.com/v1alpha1"),
    ({"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "spec": {"draDriver": {"featureGates": {
        "{{ lookup('pipe', 'id') }}": True}}}}, "is not a feature gate of the DRA driver v0.5.0"),
    ({"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "spec": {"draDriver": {"featureGates": {
        "MPSSupport": "yes"}}}}, "featureGates.MPSSupport must be true or false"),
    ({"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "spec": {"draDriver": {"featureGates": ["MPSSupport"]}}},
     "draDriver.featureGates must be a mapping"),
    ({"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "spec": {"draDriver": {"gpus": {"kubeletPlugin": {
        "healthcheck": {"port": "51516; id"}}}}}}, "healthcheck.port must be a port number"),
    ({"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster", "spec": {"hostPaths": {"kubeletRootDir": "/a/../b"}}},
     "hostPaths.kubeletRootDir"),
])
def test_a_gpucluster_refused_with_a_message(policy, match):
    with pytest.raises(AnsibleFilterError, match="clusterpolicy_to_vars: .*" + re.escape(match)):
        f.clusterpolicy_to_vars(policy)


def test_gpucluster_group_vars_pass_the_dra_driver_spec_and_name_the_kind():
    result = f.clusterpolicy_to_vars(load("gpucluster-dra.yaml"))
    text = f.clusterpolicy_group_vars(result, "gc.yaml")
    assert text.startswith("--- !unsafe\n# gpuops.nvidia group_vars imported from GPU Operator GPUCluster gpu-cluster (gc.yaml)")
    written = load_group_vars(text)
    assert written == result["vars"]
    for role in ("dra_driver", "dcgm_exporter"):
        spec, values = role_arguments(role, written)
        res = ArgumentSpecValidator(spec).validate(values)
        assert not res.error_messages, (role, res.error_messages)
    spec, values = role_arguments("dra_driver", written)
    assert values["dra_driver_feature_gates"] == {"TimeSlicingSettings": True, "MPSSupport": True}
