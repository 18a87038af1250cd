"""roles/gfd rendered as Ansible renders it: where GFD writes its labels (the NodeFeature API, NVIDIA's and the
GPU Operator's default since v0.18, or the features.d file), the identity the NodeFeature path needs (node,
namespace, pod), and the namespaced RBAC it writes with."""
from __future__ import annotations

import pytest
from role_render import Role, by_kind

ROLE = Role("gfd")
CONFIGS = {"default": {"version": "v1", "flags": {"migStrategy": "none"}}}


def render(**overrides):
    base = {"gfd_configs": CONFIGS, "_gfd_config": {"data": {"default": "version: v1\n"}}}
    return ROLE.render("gfd.yaml.j2", **dict(base, **overrides))


def gfd_env(objs):
    ds = by_kind(objs, "DaemonSet", "gpu-feature-discovery")
    c = next(c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "gpu-feature-discovery")
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def test_node_feature_api_by_default_with_the_identity_it_needs():
    env = gfd_env(render())
    assert env["USE_NODE_FEATURE_API"] == "true"
    # v0.20.0 exits with "required flag namespace not set" without NAMESPACE; POD_NAME gives the object its owner
    assert env["NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}


@pytest.mark.parametrize("value, expected", [(False, "false"), ("false", "false"), (True, "true")])
def test_features_d_file_when_asked(value, expected):
    assert gfd_env(render(gfd_use_node_feature_api=value))["USE_NODE_FEATURE_API"] == expected


def test_nodefeatures_written_in_its_namespace_only():
    objs = render(gfd_namespace="gpu-ops")
    role = by_kind(objs, "Role", "gpuops-gpu-feature-discovery")
    assert role["metadata"]["namespace"] == "gpu-ops"
    rules = {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in role["rules"]}
    assert rules == {("nfd.k8s-sigs.io", "nodefeatures"): {"get", "list", "watch", "create", "update"},
                     ("", "pods"): {"get"}}
    binding = by_kind(objs, "RoleBinding", "gpuops-gpu-feature-discovery")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "nvidia-gpu-feature-discovery",
                                    "namespace": "gpu-ops"}]
    cluster = by_kind(objs, "ClusterRole", "gpuops-gpu-feature-discovery")
    assert all("nfd.k8s-sigs.io" not in r["apiGroups"] for r in cluster["rules"]), "no cluster-wide NodeFeature writes"


def test_host_sys_read_only():
    ds = by_kind(render(), "DaemonSet", "gpu-feature-discovery")
    c = next(c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "gpu-feature-discovery")
    assert {"name": "host-sys", "mountPath": "/sys", "readOnly": True} in c["volumeMounts"]
