# SPDX-License-Identifier: Apache-2.0
"""k8s_bulk_apply's logic against a small server-side-apply model: what is sent, what counts as a change.

The model keeps each object and one managedFields entry per manager (its applied field set), as the API
server does for server-side apply; the real server is exercised by the cluster lane and the benchmark."""
from __future__ import annotations

import copy
import threading

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils import _k8s_bulk as kb
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError


def fields_v1(obj):
    out = {}
    for path in kb.leaf_paths(obj):
        node = out
        for key in path:
            node = node.setdefault("f:" + key, {})
    return out


class Server:
    """Objects by (kind, namespace, name); apply = SSA of one manager (fields it no longer gives are removed)."""

    def __init__(self):
        self.objects, self.reads, self.writes, self.lock = {}, 0, [], threading.Lock()
        self.refuse = set()

    def put(self, obj, manager=None):
        obj = copy.deepcopy(obj)
        owned = fields_v1(obj)
        obj.setdefault("metadata", {}).setdefault("managedFields", [])
        if manager:
            obj["metadata"]["managedFields"].append({"manager": manager, "operation": "Apply", "fieldsV1": owned})
        self.objects[(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])] = obj

    def read(self, api_version, kind, namespace, names):
        self.reads += 1
        return {k[2]: copy.deepcopy(v) for k, v in self.objects.items()
                if k[0] == kind and k[1] == namespace and k[2] in names}, 1

    def apply_as(self, manager):
        def apply(obj):
            with self.lock:
                self.writes.append(kb.object_id(obj))
                if obj["metadata"]["name"] in self.refuse:
                    raise RuntimeError("422 admission webhook said no")
                key = (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
                live = copy.deepcopy(self.objects.get(key) or {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                                                               "metadata": {"name": obj["metadata"]["name"]}})
                mf = live["metadata"].setdefault("managedFields", [])
                old = next((e for e in mf if e["manager"] == manager), None)
                # fields we owned and no longer give: removed (labels here)
                for path in kb.owned_paths(live, manager) - kb.leaf_paths(obj):
                    parent = kb.value_at(live, path[:-1])
                    if isinstance(parent, dict):
                        parent.pop(path[-1], None)
                for path in kb.leaf_paths(obj):
                    node = live
                    for key_ in path[:-1]:
                        node = node.setdefault(key_, {})
                    node[path[-1]] = copy.deepcopy(kb.value_at(obj, path))
                if old:
                    mf.remove(old)
                mf.append({"manager": manager, "operation": "Apply", "fieldsV1": fields_v1(obj)})
                live.setdefault("status", {})["heartbeat"] = len(self.writes)  # status moves on every write
                self.objects[key] = live
                return copy.deepcopy(live)
        return apply


def node(name, labels, taints=None):
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)}}
    if taints is not None:
        obj["spec"] = {"taints": taints}
    return obj


def run(server, objects, manager="gpuops", concurrency=8):
    return kb.Applier(server.read, server.apply_as(manager), manager, concurrency).run(objects)


def test_first_apply_then_noop_sends_nothing():
    server = Server()
    for i in range(50):
        server.put(node("n%d" % i, {"kubernetes.io/hostname": "n%d" % i}))  # kubelet's labels, not ours
    want = [node("n%d" % i, {"nvidia.com/gpu.present": "true"}, taints=[]) for i in range(50)]
    result, diffs = run(server, want)
    assert result["changed"] and len(result["updated"]) == 50 and result["requests"] == {"read": 1, "apply": 50}
    assert len(diffs) == 50 and '"nvidia.com/gpu.present": "true"' in diffs[0]["after"]
    server.writes.clear()
    result, diffs = run(server, want)
    assert not result["changed"] and result["in_sync"] == 50 and server.writes == [] and diffs == []
    assert result["requests"] == {"read": 1, "apply": 0}
    # kubelet's label is untouched
    assert server.objects[("Node", None, "n3")]["metadata"]["labels"]["kubernetes.io/hostname"] == "n3"


def test_only_the_nodes_that_differ_are_written():
    server = Server()
    for i in range(10):
        server.put(node("n%d" % i, {"a": "1"}, taints=[]), manager="gpuops")
    want = [node("n%d" % i, {"a": "2" if i in (3, 7) else "1"}, taints=[]) for i in range(10)]
    result = run(server, want)[0]
    assert sorted(server.writes) == ["Node/n3", "Node/n7"] and result["updated"] == ["Node/n3", "Node/n7"]


def test_a_label_we_stop_giving_is_removed_and_is_a_change():
    server = Server()
    server.put(node("n0", {"a": "1", "b": "1"}), manager="gpuops")
    result, diffs = run(server, [node("n0", {"a": "1"})])
    assert result["updated"] == ["Node/n0"] and "b" not in server.objects[("Node", None, "n0")]["metadata"]["labels"]
    assert '"b": "1"' in diffs[0]["before"] and '"b"' not in diffs[0]["after"]


def test_same_value_owned_by_someone_else_is_still_applied():
    # the value is there but not ours: skipping would leave us unable to remove it later
    server = Server()
    server.put(node("n0", {"a": "1"}), manager="kubectl")
    assert not kb.in_sync(node("n0", {"a": "1"}), server.objects[("Node", None, "n0")], "gpuops")
    result = run(server, [node("n0", {"a": "1"})])[0]
    assert server.writes == ["Node/n0"] and result["updated"] == ["Node/n0"]  # our field set changed


def test_status_moving_is_not_a_change():
    server = Server()
    server.put(node("n0", {"a": "1"}), manager="gpuops")
    # force a send although in sync, by an object the model sees as not ours: a different manager name
    applier = kb.Applier(server.read, server.apply_as("gpuops"), "gpuops", 1)
    before = server.objects[("Node", None, "n0")]
    after = server.apply_as("gpuops")(node("n0", {"a": "1"}))
    assert after["status"] != before.get("status")
    assert not kb.changed(node("n0", {"a": "1"}), before, after, "gpuops")
    assert applier.run([node("n0", {"a": "1"})])[0]["in_sync"] == 1


def test_created_objects_and_server_defaults():
    server = Server()
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "gpu-operator"},
           "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    result = run(server, [job])[0]
    assert result["created"] == ["Job/gpu-operator/j"]
    # the server adds defaults inside list items; still in sync
    live = server.objects[("Job", "gpu-operator", "j")]
    live["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"] = "/dev/termination-log"
    server.writes.clear()
    result = run(server, [job])[0]
    assert result["in_sync"] == 1 and server.writes == []


def test_type_matters_in_comparisons():
    assert not kb.matches("1", 1) and not kb.matches(True, 1) and kb.matches({"a": [1]}, {"a": [1], "b": 2})
    assert not kb.matches([1], [1, 2])


def test_failures_are_listed_and_the_others_applied():
    server = Server()
    server.refuse = {"n2"}
    with pytest.raises(kb.PartialApply) as e:
        run(server, [node("n%d" % i, {"a": "1"}) for i in range(4)])
    assert "1 of 4 object(s)" in str(e.value) and "Node/n2: 422 admission webhook said no" in str(e.value)
    assert sorted(e.value.updated + e.value.created) == ["Node/n0", "Node/n1", "Node/n3"]
    assert e.value.result()["failed"] == [{"object": "Node/n2", "error": "422 admission webhook said no"}]


@pytest.mark.parametrize("objects, text", [
    ("nodes", "objects must be a list"),
    ([{"kind": "Node", "metadata": {"name": "a"}}], "objects[0] has no valid apiVersion"),
    ([{"apiVersion": "v1", "kind": "Node", "metadata": {}}], "metadata.name"),
    ([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": 3}}], "metadata.namespace"),
    ([node("a", {}), node("a", {"x": "y"})], "Node/a is given twice"),
    (["a"], "objects[0] is not a mapping"),
])
def test_bad_input_is_refused_before_any_request(objects, text):
    server = Server()
    with pytest.raises(InputError, match=text.replace("[", r"\[").replace("]", r"\]")):
        run(server, objects)
    assert server.reads == 0 and server.writes == []


@pytest.mark.parametrize("manager, concurrency", [("", 4), ("m", 0), ("m", 1000), ("m", True)])
def test_bad_settings(manager, concurrency):
    with pytest.raises(InputError):
        kb.Applier(None, None, manager, concurrency)


def test_one_read_per_kind_and_namespace():
    server = Server()
    objs = [node("n%d" % i, {"a": "1"}) for i in range(3)] + [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c%d" % i, "namespace": ns}, "data": {"k": "v"}}
        for i, ns in enumerate(["a", "a", "b"])]
    result = run(server, objs)[0]
    assert server.reads == 3 and result["requests"]["read"] == 3 and len(result["created"]) == 6


def test_owned_paths_reads_list_items_as_one_field():
    live = {"metadata": {"managedFields": [{"manager": "m", "operation": "Apply", "fieldsV1": {
        "f:metadata": {"f:labels": {".": {}, "f:a": {}}},
        "f:spec": {"f:taints": {"k:{\"effect\":\"NoSchedule\",\"key\":\"x\"}": {".": {}, "f:key": {}}}}}},
        {"manager": "m", "operation": "Update", "fieldsV1": {"f:spec": {"f:other": {}}}},
        {"manager": "m", "operation": "Apply", "subresource": "status", "fieldsV1": {"f:status": {"f:x": {}}}}]}}
    assert kb.owned_paths(live, "m") == {("metadata", "labels", "a"), ("spec", "taints")}


def _obj(kind, name, ns=None, api="v1"):
    meta = {"name": name}
    if ns:
        meta["namespace"] = ns
    return {"apiVersion": api, "kind": kind, "metadata": meta, "data": {"k": name}}


def test_waves_put_namespaces_and_crds_first_and_workloads_last():
    objs = [_obj("DaemonSet", "ds", "gpu", "apps/v1"), _obj("ConfigMap", "cm", "gpu"), _obj("Namespace", "gpu"),
            _obj("ServiceAccount", "sa", "gpu"), _obj("CustomResourceDefinition", "x.y", None, "apiextensions.k8s.io/v1"),
            _obj("Deployment", "d", "gpu", "apps/v1")]
    names = [[o["metadata"]["name"] for o in w] for w in kb.waves(objs)]
    assert names == [["gpu", "x.y"], ["cm", "sa"], ["ds", "d"]]
    assert [len(w) for w in kb.waves([_obj("ConfigMap", "a", "n")])] == [1]


def test_each_wave_is_applied_before_the_next_is_read():
    server, seen = Server(), []
    apply = server.apply_as("gpuops")

    def read(api_version, kind, namespace, names):
        seen.append((kind, list(server.writes)))
        return server.read(api_version, kind, namespace, names)

    objs = [_obj("DaemonSet", "ds", "gpu", "apps/v1"), _obj("ConfigMap", "cm", "gpu"), _obj("Namespace", "gpu")]
    kb.Applier(read, apply, "gpuops", 4).run(objs)
    assert seen == [("Namespace", []), ("ConfigMap", ["Namespace/gpu"]),
                    ("DaemonSet", ["Namespace/gpu", "ConfigMap/gpu/cm"])]


def test_a_failed_wave_stops_the_later_ones():
    server = Server()
    server.refuse = {"sa"}
    objs = [_obj("DaemonSet", "ds", "gpu", "apps/v1"), _obj("ServiceAccount", "sa", "gpu"), _obj("ConfigMap", "cm", "gpu")]
    with pytest.raises(kb.PartialApply) as e:
        run(server, objs)
    assert "ServiceAccount/gpu/sa: 422 admission webhook said no" in str(e.value).split(";", maxsplit=1)[0]
    assert "2 of 3 object(s)" in str(e.value)
    assert e.value.created == ["ConfigMap/gpu/cm"] and "DaemonSet/gpu/ds" not in server.writes
    assert {"object": "DaemonSet/gpu/ds", "error": "not sent: an object it may need failed before it"} in e.value.failed


def test_a_read_failing_after_writes_lists_what_was_applied():
    server = Server()

    def read(api_version, kind, namespace, names):
        if kind == "DaemonSet":
            raise RuntimeError("403 forbidden: daemonsets")
        return server.read(api_version, kind, namespace, names)

    with pytest.raises(kb.PartialApply) as e:
        kb.Applier(read, server.apply_as("gpuops"), "gpuops", 4).run(
            [_obj("Namespace", "gpu"), _obj("DaemonSet", "ds", "gpu", "apps/v1")])
    assert e.value.created == ["Namespace/gpu"]
    assert e.value.failed == [{"object": "DaemonSet/gpu/ds", "error": "403 forbidden: daemonsets"}]


def test_a_read_failing_before_any_write_is_the_reads_own_error():
    def read(*_args):
        raise RuntimeError("401 unauthorized")

    with pytest.raises(RuntimeError, match="401"):
        kb.Applier(read, None, "gpuops", 4).run([_obj("Namespace", "gpu")])


def test_atomic_maps_are_one_field_and_must_be_exact():
    """roleRef, label selectors and nodeSelector are atomic: managedFields holds them as one field."""
    want = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "b"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"}}
    live = copy.deepcopy(want)
    live["metadata"]["managedFields"] = [{"manager": "m", "operation": "Apply", "fieldsV1": {"f:roleRef": {}}}]
    assert kb.in_sync(want, live, "m")
    live["roleRef"]["name"] = "other"
    assert not kb.in_sync(want, live, "m")
    live["roleRef"] = dict(want["roleRef"], extra="x")  # the server would drop it on apply: not in sync
    assert not kb.in_sync(want, live, "m")


def test_empty_values_the_server_leaves_out_still_match():
    want = {"env": [{"name": "KUBECONFIG", "value": ""}, {"name": "A", "value": "1"}]}
    assert kb.matches(want, {"env": [{"name": "KUBECONFIG"}, {"name": "A", "value": "1"}]})
    assert not kb.matches(want, {"env": [{"name": "KUBECONFIG"}, {"name": "A"}]})
    assert not kb.matches({"a": 0}, {}) and not kb.matches({"a": False}, {}) and kb.matches({"a": {}}, {})


# --- k8s_bulk_info: many reads in one run ---

def test_queries_get_their_defaults():
    q = kb.check_queries({"ds": {"kind": "DaemonSet", "api_version": "apps/v1", "label_selectors": ["a=b"]},
                          "crd": {"kind": "CustomResourceDefinition", "api_version": "apiextensions.k8s.io/v1",
                                  "name": "x.example.com"},
                          "nodes": {"kind": "Node"}})
    assert q["nodes"] == {"api_version": "v1", "kind": "Node", "namespace": None, "name": None,
                          "label_selectors": [], "field_selectors": [], "fields": None,
                          "field_managers": None}
    assert q["ds"]["label_selectors"] == ["a=b"] and q["crd"]["name"] == "x.example.com"


@pytest.mark.parametrize("queries,words", [
    ({}, ["non-empty mapping"]),
    ([{"kind": "Node"}], ["non-empty mapping"]),
    ({"a": "Node"}, ["a is not a mapping"]),
    ({"a": {"api_version": "v1"}}, ["a: kind must be a non-empty string"]),
    ({"a": {"kind": "Node", "labels": ["x"]}}, ["a: unknown key(s) labels"]),
    ({"a": {"kind": "Node", "label_selectors": "x=y"}}, ["a: label_selectors must be a list"]),
    ({"a": {"kind": "Node", "label_selectors": ["x=y", ""]}}, ["a: label_selectors must be a list"]),
    ({"a": {"kind": "Pod", "namespace": ""}}, ["a: namespace must be a non-empty string"]),
    ({"a": {"kind": "Node", "name": "n1", "label_selectors": ["x"]}}, ["a: name and selectors exclude each other"]),
    # every problem is named, not only the first
    ({"a": {"kind": ""}, "b": {"kind": "Node", "field_selectors": [1]}},
     ["a: kind must be", "b: field_selectors must be"]),
])
def test_bad_queries_are_refused_with_every_reason(queries, words):
    with pytest.raises(InputError) as e:
        kb.check_queries(queries)
    for word in words:
        assert word in str(e.value)


def test_reads_run_at_once_and_come_back_under_their_names():
    seen, lock, both = [], threading.Lock(), threading.Barrier(3, timeout=5)

    def read(query):
        with lock:
            seen.append(query["kind"])
        both.wait()  # all three in flight together, or the barrier breaks
        return query["kind"] != "GrafanaDashboard", [{"kind": query["kind"]}] if query["kind"] == "Node" else []

    q = kb.check_queries({"n": {"kind": "Node"}, "j": {"kind": "Job", "api_version": "batch/v1"},
                          "g": {"kind": "GrafanaDashboard", "api_version": "grafana.integreatly.org/v1beta1"}})
    out = kb.read_all(q, read)
    assert sorted(seen) == ["GrafanaDashboard", "Job", "Node"]
    assert out == {"n": {"resources": [{"kind": "Node"}], "api_found": True},
                   "j": {"resources": [], "api_found": True},
                   "g": {"resources": [], "api_found": False}}


def test_a_failed_read_fails_the_whole_run_after_the_others_end():
    ended = []

    def read(query):
        if query["kind"] == "Job":
            raise RuntimeError("403 jobs.batch is forbidden")
        ended.append(query["kind"])
        return True, []

    with pytest.raises(RuntimeError, match="forbidden"):
        kb.read_all(kb.check_queries({"a": {"kind": "Job"}, "b": {"kind": "Node"}, "c": {"kind": "Pod"}}), read,
                    concurrency=1)
    assert sorted(ended) == ["Node", "Pod"]


def test_read_concurrency_is_bounded():
    with pytest.raises(InputError, match="concurrency"):
        kb.read_all(kb.check_queries({"a": {"kind": "Node"}}), lambda q: (True, []), concurrency=0)


def test_a_projection_keeps_the_fields_asked_and_the_name():
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-1", "labels": {"a": "b"}, "managedFields": [{"manager": "x"}]},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "images": ["big"] * 50}}
    assert kb.project(node, ["status.allocatable", "spec.taints", "metadata.labels.a"]) == {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "gpu-1", "labels": {"a": "b"}}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    assert kb.project(node, []) == {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1"}}
    assert kb.project(node, None) is node
    # a path through a scalar or a list keeps nothing rather than failing
    assert kb.project(node, ["metadata.name.x", "status.images.0"]) == kb.project(node, [])


def test_reads_are_cut_to_their_fields():
    q = kb.check_queries({"n": {"kind": "Node", "fields": ["status.allocatable"]}, "whole": {"kind": "Node"}})
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u"},
            "status": {"allocatable": {}, "capacity": {}}}
    out = kb.read_all(q, lambda query: (True, [node]))
    assert out["n"]["resources"] == [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                                      "status": {"allocatable": {}}}]
    assert out["whole"]["resources"] == [node]


def test_only_the_managed_fields_of_the_managers_asked_are_kept():
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu-1", "managedFields": [
                {"manager": "kwok", "fieldsV1": {"f:status": {}}}, {"manager": "gpuops-node-labels", "fieldsV1": {}}, "x"]}}
    cut = kb.project(node, ["metadata.managedFields"], ["gpuops-node-labels"])
    assert cut["metadata"]["managedFields"] == [{"manager": "gpuops-node-labels", "fieldsV1": {}}]
    assert len(node["metadata"]["managedFields"]) == 3  # the object read is not changed
    assert kb.project(node, None, [])["metadata"]["managedFields"] == []
    q = kb.check_queries({"n": {"kind": "Node", "field_managers": ["gpuops-node-labels"]}})
    out = kb.read_all(q, lambda query: (True, [node]))
    assert [m["manager"] for m in out["n"]["resources"][0]["metadata"]["managedFields"]] == ["gpuops-node-labels"]


# --- what a rollout check needs, from the apply's own read or answer ---

def daemonset(name, generation, observed, ready, desired=4):
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": "gpu-operator", "generation": generation},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}},
            "status": {"observedGeneration": observed, "desiredNumberScheduled": desired,
                       "updatedNumberScheduled": ready, "numberReady": ready}}


def test_rollouts_come_from_the_read_when_in_sync_and_from_the_answer_when_written():
    server = Server()
    want = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "dp", "namespace": "gpu-operator"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}}}
    server.put(want, manager="gpuops")
    live = server.objects[("DaemonSet", "gpu-operator", "dp")]  # what the controller added since
    live["metadata"]["generation"], live["status"] = 3, daemonset("dp", 3, 3, 4)["status"]
    server.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "gpu-operator"}})
    result = run(server, [want, {"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": "cm", "namespace": "gpu-operator"}, "data": {"a": "1"}}])[0]
    # the DaemonSet was in sync: its status as read, cut down to what the check needs; the ConfigMap is no workload
    assert result["in_sync"] == 1 and result["rollouts"] == [{
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "dp", "namespace": "gpu-operator", "generation": 3},
        "status": {"observedGeneration": 3, "desiredNumberScheduled": 4, "updatedNumberScheduled": 4,
                   "numberReady": 4}}]
    # a new image: written, and the answer is what comes back (the model's answer carries the old status)
    changed = copy.deepcopy(want)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "i:2"
    result = run(server, [changed])[0]
    assert result["updated"] == ["DaemonSet/gpu-operator/dp"]
    assert [r["metadata"]["name"] for r in result["rollouts"]] == ["dp"]
    assert result["rollouts"][0]["status"]["heartbeat"] == len(server.writes)  # the write's answer, not the read


def test_a_deployment_keeps_its_replicas_and_nodes_give_no_rollouts():
    live = {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "n", "generation": 2, "uid": "u", "managedFields": []},
            "spec": {"replicas": 2, "template": {}}, "status": {"observedGeneration": 2}}
    assert kb.rollout_view(live) == {"apiVersion": "apps/v1", "kind": "Deployment",
                                     "metadata": {"name": "d", "namespace": "n", "generation": 2},
                                     "spec": {"replicas": 2}, "status": {"observedGeneration": 2}}
    server = Server()
    assert run(server, [node("n1", {"a": "1"})])[0]["rollouts"] == []
