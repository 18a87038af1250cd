# SPDX-License-Identifier: Apache-2.0
"""GPU allocation through DRA on the cluster lane (issue 32, part 3): the dra_driver role's objects on the lane's
real API server, scheduler and controller-manager, beside KWOK nodes.

h200-0 (facts from the real H200 capture) and l40s-0 allocate by DRA (an inventory of host vars added with a second
``-i``); the others keep the device plugin. The API server accepts the DeviceClasses (their CEL compiled), the
admission policy and the DaemonSet; the DRA driver's pods land on the DRA nodes only and the device plugin's
nowhere there. The kubelet plugin itself cannot run without a GPU: where a test needs what it publishes, the
ResourceSlice is written by the test, its attributes computed from the Node's labels (the H200 capture's), under
the plugin's driver name -- so the scheduler allocates a claim by CEL through our DeviceClass for real.
Tests run in file order and build on each other (refusals -> apply -> rerun -> policy -> claims -> foreign label
-> back to the device plugin -> absent).
"""
from __future__ import annotations

import json
import time

import pytest
import yaml
from conftest import KUBECONFIG, cluster_playbook, recap_changed
from kubernetes import client, config

NS = "gpu-operator"
DEPLOY = "nvidia.com/gpu.deploy."
DRA_NODES = ["h200-0", "l40s-0"]
COMPONENTS = ("-e", json.dumps({"gpuops_cluster_components": ["runtime_class", "device_plugin", "dra_driver"]}))
CLASSES = {"gpu.nvidia.com": "gpu", "mig.nvidia.com": "mig", "vfio.gpu.nvidia.com": "vfio"}
DS = "nvidia-dra-driver-kubelet-plugin"
WORK_NS = "dra-lane"

config.load_kube_config(KUBECONFIG)
core = client.CoreV1Api()
apps = client.AppsV1Api()
custom = client.CustomObjectsApi()


def inventory(tmp_path, hosts):
    """A second inventory of host vars (``{host: {var: value}}``) over the lane's own."""
    p = tmp_path / "dra-hosts.yml"
    p.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return str(p)


def playbook(tmp_path, hosts, *extra, check=True):
    return cluster_playbook("-i", inventory(tmp_path, hosts), *COMPONENTS, *extra, check=check, timing=True)


def dra_hosts(**more):
    hosts = {n: {"gpuops_gpu_allocation": "dra"} for n in DRA_NODES}
    for node, hv in more.items():
        hosts.setdefault(node.replace("_", "-"), {}).update(hv)
    return hosts


def flat(stdout):
    return " ".join(stdout.split())


def device_class(name):
    try:
        return custom.get_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", name)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


def labels(node):
    return core.read_node(node).metadata.labels or {}


def pod_nodes(app):
    pods = core.list_namespaced_pod(NS, label_selector="app=" + app).items
    return sorted(p.spec.node_name for p in pods if p.spec.node_name)


def wait_for(what, fn, timeout=60):
    end = time.time() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.time() > end:
            pytest.fail("timed out waiting for " + what)
        time.sleep(1)


def test_a_node_naming_both_models_is_refused_before_anything_is_applied(tmp_path):
    r = playbook(tmp_path, dra_hosts(l40s_0={"gpuops_gpu_allocation": ["dra", "device-plugin"]}), check=False)
    assert r.returncode != 0
    assert "l40s-0: one GPU allocation model per node" in flat(r.stdout)
    assert device_class("gpu.nvidia.com") is None
    assert DEPLOY + "dra-driver" not in labels("h200-0")


def test_a_device_plugin_config_on_a_dra_node_is_refused(tmp_path):
    # h100-0 names the device plugin config time-sliced-4 in the lane's node spec
    r = playbook(tmp_path, dra_hosts(h100_0={"gpuops_gpu_allocation": "dra"}), check=False)
    assert r.returncode != 0
    assert "h100-0: device plugin config 'time-sliced-4' on a node that allocates by DRA" in flat(r.stdout)
    assert device_class("gpu.nvidia.com") is None


def test_dra_nodes_without_the_dra_driver_component_are_refused(tmp_path):
    r = cluster_playbook("-i", inventory(tmp_path, dra_hosts()), "-e",
                         json.dumps({"gpuops_cluster_components": ["runtime_class", "device_plugin"]}), check=False)
    assert r.returncode != 0
    assert "dra_driver is not among gpuops_cluster_components" in flat(r.stdout)


def test_unknown_feature_gates_and_refused_pairs_are_refused(tmp_path):
    r = playbook(tmp_path, dra_hosts(), "-e", json.dumps(
        {"dra_driver_feature_gates": {"TimeSlicing": True, "DynamicMIG": True, "MPSSupport": True}}), check=False)
    assert r.returncode != 0
    out = flat(r.stdout)
    assert 'unknown: ["TimeSlicing"]' in out and '[["DynamicMIG", "MPSSupport"]]' in out, out[-3000:]
    assert device_class("gpu.nvidia.com") is None
    assert DEPLOY + "dra-driver" not in labels("h200-0")


def test_apply_puts_the_dra_driver_on_the_dra_nodes_only(tmp_path):
    playbook(tmp_path, dra_hosts(), "-e", json.dumps({"dra_driver_feature_gates": {"TimeSlicingSettings": True}}))
    for name, kind in CLASSES.items():
        dc = device_class(name)
        assert dc is not None, name
        assert [s["cel"]["expression"] for s in dc["spec"]["selectors"]] == [
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '%s'" % kind]
    ds = apps.read_namespaced_daemon_set(DS, NS)
    assert ds.spec.template.spec.node_selector == {DEPLOY + "dra-driver": "true"}
    env = {e.name: e.value for e in ds.spec.template.spec.containers[0].env}
    assert env["FEATURE_GATES"] == "TimeSlicingSettings=true"
    assert env["IMAGE_NAME"] == "registry.lab.internal:5000/nvidia/dra-driver-nvidia-gpu:v0.5.0"
    assert env["KUBELET_PLUGINS_DIRECTORY_PATH"] == "/var/lib/kubelet/plugins"
    wait_for("the DRA driver's pods on the DRA nodes", lambda: pod_nodes(DS) == DRA_NODES)
    dp_nodes = pod_nodes("nvidia-device-plugin-daemonset")
    assert dp_nodes and not set(dp_nodes) & set(DRA_NODES), dp_nodes
    for node in DRA_NODES:
        have = labels(node)
        assert have.get(DEPLOY + "dra-driver") == "true", node
        assert DEPLOY + "device-plugin" not in have and DEPLOY + "operator-validator" not in have, node
    assert labels("h100-0").get(DEPLOY + "device-plugin") == "true"
    assert DEPLOY + "dra-driver" not in labels("h100-0")


def test_rerun_changes_nothing(tmp_path):
    r = playbook(tmp_path, dra_hosts(), "--diff", "-e",
                 json.dumps({"dra_driver_feature_gates": {"TimeSlicingSettings": True}}))
    assert recap_changed(r.stdout).get("localhost") == 0, r.stdout[-4000:]


def test_check_mode_reports_the_switch_back_and_changes_nothing(tmp_path):
    r = playbook(tmp_path, {"h200-0": {"gpuops_gpu_allocation": "dra"}}, "--check", "--diff")
    assert recap_changed(r.stdout).get("localhost", 0) > 0
    assert labels("l40s-0").get(DEPLOY + "dra-driver") == "true"


def test_the_doctor_names_a_dra_node_whose_plugin_publishes_no_slice(tmp_path):
    """The plugin's pods are Ready (KWOK) but nothing publishes a ResourceSlice: the doctor names it on h200-0;
    with the slice there, it is quiet."""
    def ask():
        r = cluster_playbook("-i", inventory(tmp_path, dra_hosts()), "--limit", "h200-0", playbook="doctor.yml")
        return [line.strip() for line in r.stdout.splitlines() if "] dra-" in line]
    assert ask() == ["[ERROR] dra-no-resourceslice: node h200-0 allocates GPUs by DRA and its kubelet plugin is Ready, "
                     "but no ResourceSlice of gpu.nvidia.com lists the node: the scheduler sees no GPU there"]
    custom.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices",
                                        _slice("h200-0", [_device_from_labels("h200-0")]))
    try:
        assert ask() == []
    finally:
        custom.delete_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", "lane-h200-0")


def _plugin_client(node):
    """An API client holding the token of the DRA driver's service account bound to its pod on ``node``."""
    pod = [p for p in core.list_namespaced_pod(NS, label_selector="app=" + DS).items if p.spec.node_name == node][0]
    req = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
        audiences=[], expiration_seconds=600,
        bound_object_ref=client.V1BoundObjectReference(kind="Pod", api_version="v1", name=pod.metadata.name)))
    token = core.create_namespaced_service_account_token("nvidia-dra-driver-kubeletplugin", NS, req).status.token
    cfg = client.Configuration()
    base = client.Configuration.get_default_copy()
    cfg.host, cfg.ssl_ca_cert, cfg.verify_ssl = base.host, base.ssl_ca_cert, base.verify_ssl
    cfg.api_key = {"authorization": "Bearer " + token}
    return client.CustomObjectsApi(client.ApiClient(cfg))


def _slice(node, devices):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "lane-" + node}, "spec": {
                "driver": "gpu.nvidia.com", "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


def test_the_admission_policy_lets_the_plugin_write_only_its_own_nodes_slices():
    as_plugin = _plugin_client("l40s-0")
    dev = [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}]
    as_plugin.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", _slice("l40s-0", dev))
    try:
        with pytest.raises(client.ApiException) as e:
            as_plugin.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", _slice("h200-0", dev))
        assert e.value.status == 422
        assert "may write only its own node's ResourceSlices" in e.value.body
    finally:
        custom.delete_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", "lane-l40s-0")


def _device_from_labels(node):
    """gpu-0 of ``node`` as NVIDIA's kubelet plugin publishes a full GPU, from the Node's GFD labels."""
    lb = labels(node)
    cc = "%s.%s.0" % (lb["nvidia.com/gpu.compute.major"], lb["nvidia.com/gpu.compute.minor"])
    return {"name": "gpu-0",
            "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-lane-" + node},
                           "productName": {"string": lb["nvidia.com/gpu.product"].replace("-", " ")},
                           "cudaComputeCapability": {"version": cc}},
            "capacity": {"memory": {"value": "%sMi" % lb["nvidia.com/gpu.memory"]}}}


def _claim_pod(name, cel):
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": {
        "devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": cel}}]}}]}}}
    custom.create_namespaced_custom_object("resource.k8s.io", "v1", WORK_NS, "resourceclaims", claim)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
        "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "cuda", "image": "lane/cuda-check:1", "resources": {"claims": [{"name": "gpu"}]}}]}}
    core.create_namespaced_pod(WORK_NS, pod)


def test_a_claim_by_cel_is_allocated_through_our_device_class_and_one_nothing_satisfies_stays_pending():
    core.create_namespace({"metadata": {"name": WORK_NS}})
    custom.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices",
                                        _slice("h200-0", [_device_from_labels("h200-0")]))
    try:
        _claim_pod("big-memory", "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('100Gi')) >= 0")
        _claim_pod("too-big", "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('200Gi')) >= 0")
        placed = wait_for("the 100Gi claim's pod placed", lambda: core.read_namespaced_pod("big-memory", WORK_NS).spec.node_name)
        assert placed == "h200-0"
        claim = custom.get_namespaced_custom_object("resource.k8s.io", "v1", WORK_NS, "resourceclaims", "big-memory")
        results = claim["status"]["allocation"]["devices"]["results"]
        assert [(r["driver"], r["pool"], r["device"]) for r in results] == [("gpu.nvidia.com", "h200-0", "gpu-0")]

        def unschedulable():
            for c in core.read_namespaced_pod("too-big", WORK_NS).status.conditions or []:
                if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                    return c.message
            return None
        msg = wait_for("the 200Gi claim's pod reported unschedulable", unschedulable)
        assert "cannot allocate all claims" in msg, msg
        assert core.read_namespaced_pod("too-big", WORK_NS).spec.node_name is None
    finally:
        core.delete_namespace(WORK_NS)
        custom.delete_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", "lane-h200-0")


def test_another_managers_device_plugin_label_on_a_dra_node_is_refused(tmp_path):
    core.patch_node("l40s-0", {"metadata": {"labels": {DEPLOY + "device-plugin": "true"}}})
    try:
        r = playbook(tmp_path, dra_hosts(), check=False)
        assert r.returncode != 0
        assert ("l40s-0: allocates by DRA but nvidia.com/gpu.deploy.device-plugin=true was set by another field "
                "manager") in flat(r.stdout)
    finally:
        core.patch_node("l40s-0", {"metadata": {"labels": {DEPLOY + "device-plugin": None}}})


def test_back_to_the_device_plugin_moves_the_node_over(tmp_path):
    playbook(tmp_path, {"h200-0": {"gpuops_gpu_allocation": "dra"}})
    have = labels("l40s-0")
    assert DEPLOY + "dra-driver" not in have and have.get(DEPLOY + "device-plugin") == "true"
    wait_for("the DRA driver's pod gone from l40s-0", lambda: pod_nodes(DS) == ["h200-0"])
    wait_for("the device plugin's pod on l40s-0", lambda: "l40s-0" in pod_nodes("nvidia-device-plugin-daemonset"))


def test_absent_removes_the_dra_objects_and_labels(tmp_path):
    playbook(tmp_path, {"h200-0": {"gpuops_gpu_allocation": "dra"}}, "-e", "gpuops_cluster_state=absent")
    assert all(device_class(n) is None for n in CLASSES)
    with pytest.raises(client.ApiException) as e:
        client.AdmissionregistrationV1Api().read_validating_admission_policy("gpuops-nvidia-dra-driver-resourceslices")
    assert e.value.status == 404
    assert DEPLOY + "dra-driver" not in labels("h200-0")
