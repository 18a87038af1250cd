"""Node plan: deploy labels per workload, taints, validation (refused before apply)."""
from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils import _k8s_labels as kl

H200 = {"product": "NVIDIA H200", "count": 8, "memory_mib": 143771, "mig_capable": True,
        "compute_capability": "9.0"}
L40S = {"product": "NVIDIA L40S", "count": 4, "memory_mib": 46068, "mig_capable": False,
        "compute_capability": "8.9"}
CONTAINER = ["client", "dcgm", "dcgm-exporter", "device-plugin", "driver", "gpu-feature-discovery",
             "node-status-exporter", "operator-validator", "container-toolkit"]


def deploy(labels):
    return sorted(k[len(kl.DEPLOY):] for k in labels if k.startswith(kl.DEPLOY))


def plan(nodes, current=None, **opts):
    return {n["name"]: n for n in kl.node_plan(nodes, current, opts)["nodes"]}


@pytest.mark.parametrize("workload,mig,expected", [
    ("container", False, sorted(CONTAINER)),
    ("container", True, sorted(CONTAINER + ["mig-manager"])),
    ("vm-passthrough", True, ["cc-manager", "client", "kata-manager", "sandbox-device-plugin",
                              "sandbox-validator", "vfio-manager"]),
    ("vm-vgpu", False, ["cc-manager", "client", "sandbox-device-plugin", "sandbox-validator",
                        "vgpu-device-manager", "vgpu-manager"]),
])
def test_deploy_components_match_operator(workload, mig, expected):
    assert kl.deploy_components(workload, mig_capable=mig) == expected


def test_kata_mode_uses_kata_sandbox_plugin():
    assert "kata-sandbox-device-plugin" in kl.deploy_components("vm-passthrough", sandbox_mode="kata")


def test_vgpu_host_driver_suppresses_mig_manager():
    assert "mig-manager" not in kl.deploy_components("container", mig_capable=True, vgpu_host=True)


def test_plan_mixed_fleet_labels_and_taints():
    p = plan([
        {"name": "h200", "gpu": H200, "workload": "container", "mig_config": "all-1g.18gb"},
        {"name": "l40s", "gpu": L40S},
        {"name": "pt", "gpu": L40S, "workload": "vm-passthrough"},
        {"name": "cpu"},
    ])
    h = p["h200"]["labels"]
    assert h["nvidia.com/gpu.workload.config"] == "container"
    assert h["nvidia.com/gpu.present"] == "true"
    assert h["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert h["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert h["nvidia.com/gpu.count"] == "8"
    assert h["nvidia.com/gpu.family"] == "hopper"
    assert h["nvidia.com/mig.config"] == "all-1g.18gb"
    assert h["nvidia.com/mig.strategy"] == "single"
    assert "mig-manager" in deploy(h)
    assert "mig-manager" not in deploy(p["l40s"]["labels"])
    assert p["l40s"]["labels"]["nvidia.com/gpu.workload.config"] == "container"  # default kind
    assert "nvidia.com/mig.strategy" not in p["l40s"]["labels"]
    assert deploy(p["pt"]["labels"]) == sorted(kl.deploy_components("vm-passthrough"))
    assert p["cpu"]["labels"] == {} and p["cpu"]["taints"] == []
    assert p["h200"]["taints"] == [kl.DEFAULT_TAINT]


def test_existing_values_honoured_and_foreign_taints_kept():
    current = {"n": {"labels": {kl.DEPLOY + "dcgm-exporter": "false"},
                     "taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
                                {"key": "nvidia.com/gpu", "value": "old", "effect": "NoExecute"}]}}
    n = plan([{"name": "n", "gpu": L40S}], current)["n"]
    assert n["labels"][kl.DEPLOY + "dcgm-exporter"] == "false"
    assert n["labels"][kl.DEPLOY + "device-plugin"] == "true"
    assert n["taints"] == [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}, kl.DEFAULT_TAINT]


def test_operands_false_strips_all_deploy_labels():
    current = {"n": {"labels": {kl.DEPLOY + "operands": "false"}}}
    assert deploy(plan([{"name": "n", "gpu": L40S}], current)["n"]["labels"]) == []


def test_absent_removes_ours_keeps_others():
    current = {"n": {"labels": {}, "taints": [{"key": "x", "effect": "NoSchedule"}, kl.DEFAULT_TAINT]}}
    n = plan([{"name": "n", "gpu": L40S}], current, state="absent")["n"]
    assert n["labels"] == {} and n["taints"] == [{"key": "x", "effect": "NoSchedule"}]


def test_workload_change_moves_components():
    before = plan([{"name": "n", "gpu": H200, "workload": "container"}])["n"]
    after = plan([{"name": "n", "gpu": H200, "workload": "vm-vgpu"}],
                 {"n": {"labels": before["labels"]}})["n"]
    assert "device-plugin" not in deploy(after["labels"])
    assert "vgpu-manager" in deploy(after["labels"])


def test_time_slicing_config_sets_gfd_sharing_labels():
    cfgs = {"ts4": {"version": "v1", "sharing": {"timeSlicing": {"resources": [
        {"name": "nvidia.com/gpu", "replicas": 4}]}}}}
    n = plan([{"name": "n", "gpu": L40S, "device_plugin_config": "ts4"}], device_plugin_configs=cfgs)["n"]
    assert n["labels"]["nvidia.com/device-plugin.config"] == "ts4"
    assert n["labels"]["nvidia.com/gpu.replicas"] == "4"
    assert n["labels"]["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert n["labels"]["nvidia.com/gpu.product"] == "NVIDIA-L40S-SHARED"
    assert n["labels"]["nvidia.com/mps.capable"] == "false"


def test_mps_config_sets_the_labels_gfd_sets():
    """The cluster-side labels of a node whose device plugin config shares the GPU through MPS are GFD's
    (the same _labels code as the host side): mps.capable=true, strategy mps (MPS wins over time-slicing
    in GFD), replicas, -SHARED unless renamed; a renamed resource keeps the product."""
    cfgs = {"mps4": {"version": "v1", "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}},
            "mps-renamed": {"version": "v1", "sharing": {"mps": {"renameByDefault": True, "resources": [
                {"name": "nvidia.com/gpu", "replicas": 2}]}}},
            "plain": {"version": "v1"}}
    nodes = [{"name": n, "gpu": L40S, "device_plugin_config": n} for n in cfgs]
    p = plan(nodes, device_plugin_configs=cfgs)
    mps = p["mps4"]["labels"]
    assert (mps["nvidia.com/mps.capable"], mps["nvidia.com/gpu.sharing-strategy"], mps["nvidia.com/gpu.replicas"],
            mps["nvidia.com/gpu.product"]) == ("true", "mps", "4", "NVIDIA-L40S-SHARED")
    assert p["mps-renamed"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-L40S"
    plain = p["plain"]["labels"]
    assert (plain["nvidia.com/mps.capable"], plain["nvidia.com/gpu.sharing-strategy"], plain["nvidia.com/gpu.replicas"]) == (
        "false", "none", "1")


@pytest.mark.parametrize("node,opts,match", [
    ({"name": "n", "gpu": L40S, "workload": "vm-gpu"}, {}, "unknown GPU workload kind 'vm-gpu'"),
    ({"name": "n", "gpu": L40S, "workload": ["container", "vm-vgpu"]}, {}, "one GPU workload kind per node"),
    ({"name": "n", "gpu": L40S, "workload": "container,vm-vgpu"}, {}, "one GPU workload kind per node"),
    ({"name": "n", "gpu": L40S}, {"mig_strategy": "dual"}, "unknown MIG strategy 'dual'"),
    ({"name": "n", "workload": "container"}, {}, "without NVIDIA GPUs"),
    ({"name": "n", "gpu": L40S, "mig_config": "all-1g.10gb"}, {}, "without MIG-capable"),
    ({"name": "n", "gpu": L40S, "device_plugin_config": "nope"}, {"device_plugin_configs": {"a": {}}},
     "'nope' is not defined"),
    ({"name": "n", "gpu": L40S, "workload": "vm-vgpu", "mig_config": "x"}, {}, "apply to container nodes"),
])
def test_bad_input_refused(node, opts, match):
    with pytest.raises(kl.LabelPlanError, match=match):
        kl.node_plan([node], None, opts)


def test_every_error_reported_at_once():
    with pytest.raises(kl.LabelPlanError) as e:
        kl.node_plan([{"name": "a", "gpu": L40S, "workload": "x"}, {"name": "b", "gpu": L40S, "workload": "y"}])
    assert len(e.value.errors) == 2


def test_facts_labels_take_precedence_over_declared_inventory():
    facts = {"feature.node.kubernetes.io/pci-10de.present": "true", "nvidia.com/gpu.product": "NVIDIA-H200",
             "nvidia.com/mig.capable": "true"}
    n = plan([{"name": "n", "labels": facts, "gpu": L40S}])["n"]
    assert n["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert "mig-manager" in deploy(n["labels"])


def test_mig_capable_product_fallback():
    assert kl.is_mig_capable({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    assert not kl.is_mig_capable({"nvidia.com/gpu.product": "NVIDIA-L40S"})


def test_placement_and_objects():
    p = kl.node_plan([{"name": "a", "gpu": H200}, {"name": "b", "gpu": L40S, "workload": "vm-vgpu"}])
    where = kl.placement(p)
    assert where["mig-manager"] == ["a"] and where["vgpu-manager"] == ["b"]
    objs = kl.node_objects(p)
    assert objs[0]["kind"] == "Node" and objs[0]["spec"]["taints"] == [kl.DEFAULT_TAINT]


def _managed(manager, *labels, taints=False):
    fields = {"f:metadata": {"f:labels": {"f:" + k: {} for k in labels}}}
    if taints:
        fields["f:spec"] = {"f:taints": {}}
    return [{"manager": manager, "operation": "Apply", "fieldsV1": fields},
            {"manager": "kwok", "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": {"f:type": {}}}}}]


def test_only_nodes_that_would_change_are_applied():
    node = {"name": "n1", "labels": {"a": "1", "b": "2"}, "taints": [kl.DEFAULT_TAINT]}
    plan = {"nodes": [node]}
    same = {"labels": {"a": "1", "b": "2", "type": "kwok"}, "taints": [kl.DEFAULT_TAINT],
            "owned_labels": kl.owned_labels(_managed("gpuops", "a", "b", taints=True), "gpuops")}
    assert same["owned_labels"] == {"a", "b"}
    assert kl.node_objects(plan, current={"n1": same}) == []
    # a value differs, a label we own is no longer wanted, a taint differs, ownership unknown
    for change in ({"labels": dict(same["labels"], b="3")},
                   {"owned_labels": {"a", "b", "old"}},
                   {"taints": []},
                   {"owned_labels": None}):
        have = dict(same, **change)
        if have["owned_labels"] is None:
            del have["owned_labels"]
        assert [o["metadata"]["name"] for o in kl.node_objects(plan, current={"n1": have})] == ["n1"], change
    # without current state every node is applied (as before)
    assert len(kl.node_objects(plan)) == 1


def test_vm_workload_nodes_are_not_tainted_so_virt_launcher_pods_run_there():
    """KubeVirt's virt-launcher pods tolerate nothing of ours: VM nodes stay untainted (issue 14), a taint of
    ours left from a container past is removed, others' taints stay; taint_vm_nodes=True taints them."""
    nodes = [{"name": "pt", "gpu": L40S, "workload": "vm-passthrough"},
             {"name": "vg", "gpu": L40S, "workload": "vm-vgpu", "labels": {}},
             {"name": "c", "gpu": L40S, "workload": "container"}]
    current = {"pt": {"labels": {}, "taints": [kl.DEFAULT_TAINT, {"key": "dedicated", "value": "vms", "effect": "NoSchedule"}]}}
    p = {n["name"]: n for n in kl.node_plan(nodes, current)["nodes"]}
    assert p["pt"]["taints"] == [{"key": "dedicated", "value": "vms", "effect": "NoSchedule"}]
    assert p["vg"]["taints"] == [] and p["c"]["taints"] == [kl.DEFAULT_TAINT]
    tainted = {n["name"]: n for n in kl.node_plan(nodes, current, {"taint_vm_nodes": True})["nodes"]}
    assert all(kl.DEFAULT_TAINT in n["taints"] for n in tainted.values())


def test_mig_default_config_labels_capable_container_nodes_that_name_none():
    """The MIG manager acts on nvidia.com/mig.config only: with its default given, a MIG-capable container node
    naming no config gets it (as the operator labels all-disabled); a node's own config, a label someone else
    set, a node without MIG and a VM node are left as they are; a label of ours is kept on the next run."""
    nodes = [{"name": "h200", "gpu": H200}, {"name": "own", "gpu": H200, "mig_config": "all-1g.18gb"},
             {"name": "theirs", "gpu": H200}, {"name": "l40s", "gpu": L40S},
             {"name": "vm", "gpu": H200, "workload": "vm-passthrough"}]
    current = {"theirs": {"labels": {kl.MIG_CONFIG_LABEL: "all-balanced"}, "taints": [], "owned_labels": set()},
               "h200": {"labels": {kl.MIG_CONFIG_LABEL: "all-disabled"}, "taints": [],
                        "owned_labels": {kl.MIG_CONFIG_LABEL}}}
    got = {n: p["labels"].get(kl.MIG_CONFIG_LABEL)
           for n, p in plan(nodes, current, mig_default_config="all-disabled").items()}
    assert got == {"h200": "all-disabled", "own": "all-1g.18gb", "theirs": None, "l40s": None, "vm": None}
    # no default (the MIG manager not deployed): no label of ours
    assert plan(nodes[:1])["h200"]["labels"].get(kl.MIG_CONFIG_LABEL) is None
    with pytest.raises(kl.LabelPlanError, match="mig_default_config must be a string"):
        plan(nodes[:1], mig_default_config=["all-disabled"])
    for bad in ("all-disabled\nx", "a b", "{{ lookup('pipe', 'id') }}", "x" * 64):
        with pytest.raises(kl.LabelPlanError, match="is not a label value"):
            plan(nodes[:1], mig_default_config=bad)


def test_labels_left_by_only_what_no_one_else_set():
    """What a removed component wrote on a node (NVIDIA's MIG manager: its state label, a deploy label it found
    missing) is found by managedFields; a label another manager also set, one outside the keys, and one nobody's
    managedFields name stay."""
    def entry(manager, operation, *labels):
        return {"manager": manager, "operation": operation,
                "fieldsV1": {"f:metadata": {"f:labels": {"f:" + k: {} for k in labels}}}}
    node = {"metadata": {"name": "gpu-0", "labels": {
        "nvidia.com/mig.config.state": "success", "nvidia.com/gpu.deploy.nvsm": "true",
        "nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/mig.config": "all-disabled",
        "nvidia.com/gpu.deploy.dcgm": "true", "kubernetes.io/hostname": "gpu-0"},
        "managedFields": [
            entry("nvidia-mig-manager", "Update", "nvidia.com/mig.config.state", "nvidia.com/gpu.deploy.nvsm",
                  "nvidia.com/gpu.deploy.device-plugin", "kubernetes.io/hostname"),
            entry("gpuops-nvidia", "Apply", "nvidia.com/gpu.deploy.device-plugin", "nvidia.com/mig.config")]}}
    keys = ["nvidia.com/mig.config.state", "nvidia.com/gpu.deploy."]
    assert kl.labels_left_by([node], ["nvidia-mig-manager"], keys) == [{"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "gpu-0", "labels": {"nvidia.com/mig.config.state": "success", "nvidia.com/gpu.deploy.nvsm": "true"}}}]
    assert kl.labels_left_by([node], ["someone-else"], keys) == []
    bare = {"metadata": {"name": "n", "labels": {"nvidia.com/mig.config.state": "success"}}}
    assert kl.labels_left_by([bare], ["nvidia-mig-manager"], keys) == []


def test_a_dra_node_gets_the_dra_driver_instead_of_the_device_plugin_and_validator():
    p = plan([{"name": "d", "gpu": H200, "allocation": "dra"}, {"name": "p", "gpu": H200},
              {"name": "v", "gpu": L40S, "workload": "vm-passthrough"}])
    assert deploy(p["d"]["labels"]) == sorted(set(CONTAINER + ["mig-manager", "dra-driver"])
                                              - {"device-plugin", "operator-validator"})
    assert "dra-driver" not in deploy(p["p"]["labels"]) and "device-plugin" in deploy(p["p"]["labels"])
    assert (p["d"]["allocation"], p["p"]["allocation"], p["v"]["allocation"]) == ("dra", "device-plugin", None)
    assert kl.placement({"nodes": list(p.values())})["dra-driver"] == ["d"]


def test_the_fleet_default_allocation_reaches_container_nodes_only():
    p = plan([{"name": "d", "gpu": L40S}, {"name": "v", "gpu": L40S, "workload": "vm-vgpu"},
              {"name": "x", "gpu": L40S, "allocation": ["device-plugin"]}], default_allocation="dra")
    assert p["d"]["allocation"] == "dra" and "dra-driver" in deploy(p["d"]["labels"])
    assert p["v"]["allocation"] is None and "dra-driver" not in deploy(p["v"]["labels"])
    assert p["x"]["allocation"] == "device-plugin"


def test_switching_a_node_to_dra_drops_our_device_plugin_label_but_refuses_anothers():
    have = {"labels": {kl.DEPLOY + "device-plugin": "true"}}
    ours = plan([{"name": "d", "gpu": L40S, "allocation": "dra"}],
                {"d": dict(have, owned_labels={kl.DEPLOY + "device-plugin"})})
    assert kl.DEPLOY + "device-plugin" not in ours["d"]["labels"]
    with pytest.raises(kl.LabelPlanError, match="set by another field manager"):
        plan([{"name": "d", "gpu": L40S, "allocation": "dra"}], {"d": dict(have, owned_labels=set())})


@pytest.mark.parametrize("node,opts,match", [
    ({"name": "n", "gpu": L40S, "allocation": ["dra", "device-plugin"]}, {}, "one GPU allocation model per node"),
    ({"name": "n", "gpu": L40S, "allocation": "dra\n"}, {}, "unknown GPU allocation model"),
    ({"name": "n", "gpu": L40S, "allocation": "Dra"}, {}, "unknown GPU allocation model 'Dra'"),
    ({"name": "n", "gpu": L40S}, {"default_allocation": "both"}, "default GPU allocation model 'both'"),
    ({"name": "n", "gpu": L40S, "allocation": "dra", "workload": "vm-vgpu"}, {}, "DRA allocation applies to container"),
    ({"name": "n", "gpu": L40S, "allocation": "dra", "device_plugin_config": "ts"}, {},
     "device plugin config 'ts' on a node that allocates by DRA"),
    ({"name": "n", "gpu": L40S}, {"default_allocation": 1}, "options.default_allocation must be a string"),
])
def test_bad_allocation_refused(node, opts, match):
    with pytest.raises(kl.LabelPlanError, match=match):
        kl.node_plan([node], None, opts)
