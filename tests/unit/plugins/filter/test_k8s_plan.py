"""Filters: inventory/hostvars -> plan, k8s_info -> current, image references."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.filter import k8s_plan as f

GPU = {"product": "NVIDIA L40S", "count": 2, "memory_mib": 46068, "compute_capability": "8.9"}


def test_inputs_prefer_gathered_facts():
    hostvars = {
        "a": {"gpu_workload": "container", "gpuops_gpu_inventory": GPU,
              "ansible_facts": {"gpu": {"labels": {"nvidia.com/gpu.present": "true"}}}},
        "b": {"gpuops_k8s_node_name": "node-b", "gpuops_gpu_inventory": GPU},
    }
    a, b = f.k8s_node_inputs(["a", "b"], hostvars)
    assert a["labels"] == {"nvidia.com/gpu.present": "true"} and a["workload"] == "container"
    assert b["name"] == "node-b" and b["labels"] == {} and b["gpu"] == GPU


def test_plan_skips_nodes_missing_from_cluster():
    plan = f.k8s_node_plan([{"name": "a", "gpu": GPU}, {"name": "ghost", "gpu": GPU}], {"a": {}})
    assert [n["name"] for n in plan["nodes"]] == ["a"] and plan["missing"] == ["ghost"]


def test_plan_error_lists_all_nodes():
    with pytest.raises(AnsibleFilterError, match="(?s)a: unknown.*b: unknown"):
        f.k8s_node_plan([{"name": "a", "gpu": GPU, "workload": "x"}, {"name": "b", "gpu": GPU, "workload": "y"}])


def test_current_from_k8s_info():
    res = [{"metadata": {"name": "n", "labels": {"a": "b"}}, "spec": {"taints": [{"key": "k"}]}},
           {"metadata": {"name": "m"}, "spec": {}}]
    assert f.k8s_node_current(res) == {"n": {"labels": {"a": "b"}, "taints": [{"key": "k"}]},
                                       "m": {"labels": {}, "taints": []}}


@pytest.mark.parametrize("spec,registry,expected", [
    ({"repository": "nvcr.io/nvidia", "image": "k8s-device-plugin", "version": "v0.20.0"}, None,
     "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"),
    ({"repository": "nvcr.io/nvidia/k8s", "image": "dcgm-exporter", "version": "4.6.0-4.8.3-distroless"},
     "mirror.lab:5000", "mirror.lab:5000/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless"),
    ({"repository": "nvcr.io/nvidia", "image": "gpu-operator", "version": "sha256:abc"}, None,
     "nvcr.io/nvidia/gpu-operator@sha256:abc"),
])
def test_image(spec, registry, expected):
    assert f.k8s_image(spec, registry) == expected


def test_device_plugin_filter_errors():
    with pytest.raises(AnsibleFilterError, match="replicas must be"):
        f.k8s_device_plugin_data({"x": {"sharing": {"timeSlicing": {"resources": [
            {"name": "nvidia.com/gpu", "replicas": 1}]}}}})


def test_ready_pod_nodes():
    pods = [
        {"spec": {"nodeName": "a"}, "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "x"}]}},
        {"spec": {"nodeName": "b"}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        {"spec": {"nodeName": "c"}, "metadata": {"deletionTimestamp": "now"},
         "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        {"spec": {}, "status": {}},
    ]
    assert f.k8s_ready_pod_nodes(pods) == ["a"]


def test_queue_appends_under_the_manager_and_drops_empty_documents():
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}}
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "a", "namespace": "gpu-operator"}}
    first = f.k8s_queue(None, "gpuops-gfd", [None, ns, {}])
    assert first == {"gpuops-gfd": [ns]}
    second = f.k8s_queue(first, "gpuops-gfd", (x for x in [ds]))   # a generator, as Jinja's select gives
    third = f.k8s_queue(second, "gpuops-nfd", [ns])
    assert third == {"gpuops-gfd": [ns, ds], "gpuops-nfd": [ns]}
    assert first == {"gpuops-gfd": [ns]}                             # the queue given is not changed


@pytest.mark.parametrize("args, message", [
    (([], "m", []), "the queue .* must be a mapping, got list"),
    (({}, "", []), "field_manager must be a non-empty string"),
    (({}, "m", "kind: Namespace"), "objects must be a list, got str"),
    (({}, "m", [{"kind": "Namespace"}, "x"]), r"objects\[1\] must be a mapping, got str"),
])
def test_queue_refuses_bad_input(args, message):
    with pytest.raises(AnsibleFilterError, match=message):
        f.k8s_queue(*args)


def test_plan_with_current_carries_the_changes_k8s_node_objects_gives():
    inputs = [{"name": n, "gpu": GPU, "workload": "container"} for n in ("a", "b", "c")]
    first = f.k8s_node_plan(inputs, {"a": {}, "b": {}, "c": {}})
    assert "changes" not in f.k8s_node_plan(inputs)              # no current: nothing to compare with
    assert [o["metadata"]["name"] for o in first["changes"]] == ["a", "b", "c"]
    # b as planned and owned by our field manager, a with one label off, c unknown ownership
    want = {n["name"]: n for n in first["nodes"]}
    current = {"a": {"labels": dict(want["a"]["labels"], **{"nvidia.com/gpu.present": "false"}),
                     "taints": want["a"]["taints"], "owned_labels": list(want["a"]["labels"])},
               "b": {"labels": dict(want["b"]["labels"]), "taints": want["b"]["taints"],
                     "owned_labels": list(want["b"]["labels"])},
               "c": {"labels": dict(want["c"]["labels"]), "taints": want["c"]["taints"]}}
    plan = f.k8s_node_plan(inputs, current)
    assert [o["metadata"]["name"] for o in plan["changes"]] == ["a", "c"]
    assert plan["changes"] == f.k8s_node_objects(plan, current)


def _ds(generation=2, observed=2, **counts):
    status = {"observedGeneration": observed, "desiredNumberScheduled": 3, "currentNumberScheduled": 3,
              "updatedNumberScheduled": 3, "numberReady": 3, "numberMisscheduled": 0}
    status.update(counts)
    return [{"metadata": {"name": "nvidia-operator-validator", "generation": generation}, "status": status}]


NODES3 = [{"metadata": {"name": n}} for n in ("c", "a", "b")]


def test_daemonset_ready_nodes_when_the_status_proves_a_ready_pod_on_every_node():
    assert f.k8s_daemonset_ready_nodes(_ds(), NODES3) == ["a", "b", "c"]


@pytest.mark.parametrize("ds, nodes", [
    (_ds(numberReady=2), NODES3),                      # a pod not Ready: which one is known from the pods only
    (_ds(updatedNumberScheduled=2), NODES3),           # a pod of the old template
    (_ds(generation=3), NODES3),                       # the controller has not seen the current spec
    (_ds(numberMisscheduled=1), NODES3),               # a pod where it should not be
    (_ds(), NODES3 + [{"metadata": {"name": "d"}}]),   # a selected node it cannot schedule on (a taint)
    ([], NODES3),                                      # no DaemonSet
    (_ds() + _ds(), NODES3),                           # not one DaemonSet
    ([{"metadata": {"name": "x", "generation": 1}, "status": {}}], []),  # no status yet
])
def test_daemonset_ready_nodes_is_none_when_the_pods_must_be_read(ds, nodes):
    assert f.k8s_daemonset_ready_nodes(ds, nodes) is None
