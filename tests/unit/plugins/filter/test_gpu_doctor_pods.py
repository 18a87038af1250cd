# SPDX-License-Identifier: Apache-2.0
"""The doctor's view of the GPU Operator component pods on a node (filter gpu_doctor_pods,
plugin_utils/_doctor_pods.py, roles/doctor/tasks/pods.yml): every finding id, a healthy node, pods of other
nodes, the missing case, malformed and hostile answers of the API server."""
from __future__ import annotations

import copy
import os
import re
import shlex

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.filter.gpu_doctor_pods import FilterModule, gpu_doctor_pods
from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _doctor_pods as dp

NODE = "gpu-p02"
NS = "gpu-operator"
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

# app label -> (a container name, the deploy label) as the roles render them
APPS = {
    "nvidia-device-plugin-daemonset": ("nvidia-device-plugin-ctr", "nvidia.com/gpu.deploy.device-plugin"),
    "gpu-feature-discovery": ("gpu-feature-discovery", "nvidia.com/gpu.deploy.gpu-feature-discovery"),
    "nvidia-dcgm-exporter": ("nvidia-dcgm-exporter", "nvidia.com/gpu.deploy.dcgm-exporter"),
    "nvidia-mig-manager": ("nvidia-mig-manager", "nvidia.com/gpu.deploy.mig-manager"),
    "nvidia-operator-validator": ("nvidia-operator-validator", "nvidia.com/gpu.deploy.operator-validator"),
    "nvidia-sandbox-device-plugin-daemonset": ("nvidia-sandbox-device-plugin-ctr", "nvidia.com/gpu.deploy.sandbox-device-plugin"),
    "nvidia-vgpu-device-manager": ("nvidia-vgpu-device-manager", "nvidia.com/gpu.deploy.vgpu-device-manager"),
    "nfd-worker": ("worker", None),
}


def container_status(name, ready=True, restarts=0, waiting=None, message=None, last=None, last_exit=None, running=True):
    st = {"name": name, "ready": ready, "restartCount": restarts, "image": "img/" + name, "state": {}}
    if waiting:
        st["state"]["waiting"] = {"reason": waiting}
        if message is not None:
            st["state"]["waiting"]["message"] = message
    elif running:
        st["state"]["running"] = {"startedAt": "2026-12-06T00:00:00Z"}
    if last or last_exit is not None:
        st["lastState"] = {"terminated": {k: v for k, v in (("reason", last), ("exitCode", last_exit)) if v is not None}}
    return st


def pod(app, name=None, node=NODE, phase="Running", ready=True, containers=None, init=None, runtime_class="nvidia",
        ns=NS, **extra_status):
    cname = APPS.get(app, ("main", None))[0]
    containers = containers if containers is not None else [container_status(cname, ready=ready)]
    spec = {"nodeName": node, "containers": [{"name": c["name"], "image": "nvcr.io/nvidia/" + c["name"] + ":v1"}
                                             for c in containers]}
    if init:
        spec["initContainers"] = [{"name": c["name"], "image": "nvcr.io/nvidia/" + c["name"] + ":v1"} for c in init]
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
              "containerStatuses": containers}
    if init:
        status["initContainerStatuses"] = init
    status.update(extra_status)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name or "%s-abcde" % app, "namespace": ns, "labels": {"app": app}},
            "spec": spec, "status": status}


def node(name=NODE, labels=None):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}}


def all_deploy_labels(value="true"):
    return {label: value for _c, label in APPS.values() if label}


def healthy_pods(node_name=NODE):
    return [pod(app, name="%s-%s" % (app, node_name[-3:]), node=node_name) for app in APPS]


def run(pods, nodes=(), node_name=NODE, **kw):
    """The filter as the role calls it; no Node by default (no missing check)."""
    return gpu_doctor_pods(pods, list(nodes), node_name, namespace=kw.pop("namespace", NS), **kw)


LABELLED = [node(labels=all_deploy_labels())]


def ids(out):
    return [(f["id"], f["severity"]) for f in out["findings"]]


def one(out, fid):
    found = [f for f in out["findings"] if f["id"] == fid]
    assert len(found) == 1, out["findings"]
    return found[0]


# --- registration and healthy node ----------------------------------------------------------------------

def test_the_filter_is_registered_under_its_name():
    assert FilterModule().filters() == {"gpu_doctor_pods": gpu_doctor_pods}


def test_a_healthy_node_has_no_findings_and_lists_its_component_pods():
    out = run(healthy_pods(), nodes=LABELLED)
    assert out["findings"] == []
    assert [p["component"] for p in out["pods"]] == sorted(APPS)  # names start with the app label: sorted by name
    assert all(p["phase"] == "Running" and p["ready"] is True and p["restarts"] == 0 and p["reasons"] == []
               for p in out["pods"])
    assert set(out["pods"][0]) == {"name", "component", "phase", "ready", "restarts", "reasons"}


def test_the_component_labels_are_those_the_roles_render():
    """The app labels and deploy labels read here are the roles' own (selector and nodeSelector of each DaemonSet)."""
    rendered = {}
    for role in sorted(os.listdir(os.path.join(REPO, "roles"))):
        tdir = os.path.join(REPO, "roles", role, "templates")
        for name in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []:
            with open(os.path.join(tdir, name)) as fh:
                text = fh.read()
            for doc in text.split("\n---"):
                app = re.search(r"selector: \{matchLabels: \{app: ([a-z0-9-]+)\}\}", doc)
                if app and re.search(r"^kind: (DaemonSet|Deployment)$", doc, re.M):
                    sel = re.search(r"nodeSelector: \{((?:nvidia\.com/[a-z.-]+: \"true\"(?:, )?)+)\}", doc)
                    labels = frozenset(re.findall(r"(nvidia\.com/[a-z.-]+): \"true\"", sel.group(1))) if sel else frozenset()
                    rendered[app.group(1)] = (role, labels)
    # each component's deploy label and the further labels its nodeSelector asks for (REQUIRES)
    assert {app: (role, frozenset(([label] if label else []) + list(dp.REQUIRES.get(app, ()))))
            for app, (role, label, _w, _k) in dp.COMPONENTS.items()} == rendered


# --- crash loops ----------------------------------------------------------------------------------------

def test_a_crash_looping_device_plugin_is_an_error_with_the_logs_command_and_the_nvml_hint():
    p = pod("nvidia-device-plugin-daemonset", name="nvidia-device-plugin-daemonset-x7k2p", ready=False,
            containers=[container_status("nvidia-device-plugin-ctr", ready=False, restarts=12, waiting="CrashLoopBackOff",
                                         message="back-off 5m0s restarting failed container", last="Error", last_exit=1)])
    out = run([p])
    assert ids(out) == [("component-pod-crashloop", "error")]
    f = out["findings"][0]
    assert f["summary"] == ("device plugin pod nvidia-device-plugin-daemonset-x7k2p on gpu-p02 is crash-looping: "
                            "container nvidia-device-plugin-ctr restarted 12 time(s), last exit: Error (exit code 1)")
    assert ("kubectl -n gpu-operator logs nvidia-device-plugin-daemonset-x7k2p -c nvidia-device-plugin-ctr --previous"
            in f["remediation"])
    for hint in ("NVML", "driver", "RuntimeClass nvidia", "container_toolkit", "failOnInitError: false",
                 "gpuops_device_plugin_configs"):
        assert hint in f["remediation"]
    assert f["detail"]["container"] == "nvidia-device-plugin-ctr" and f["detail"]["restarts"] == 12
    assert f["detail"]["last_exit_code"] == 1
    assert out["pods"] == [{"name": "nvidia-device-plugin-daemonset-x7k2p", "component": "nvidia-device-plugin-daemonset",
                            "phase": "Running", "ready": False, "restarts": 12, "reasons": ["CrashLoopBackOff"]}]


def test_a_crash_loop_read_between_two_restarts_is_still_a_crash_loop():
    """Seen on the cluster lane's real node: GFD read just after it exited, before the kubelet set CrashLoopBackOff."""
    st = container_status("gpu-feature-discovery", ready=False, restarts=2, running=False, last="Error", last_exit=1)
    st["state"] = {"terminated": {"reason": "Error", "exitCode": 1}}
    out = run([pod("gpu-feature-discovery", ready=False, containers=[st])])
    assert [f["id"] for f in out["findings"]] == ["component-pod-crashloop"]
    # a container that finished its work (exit 0) is not one
    st["state"] = {"terminated": {"reason": "Completed", "exitCode": 0}}
    assert [f["id"] for f in run([pod("gpu-feature-discovery", ready=False, containers=[st])])["findings"]] == [
        "component-pod-not-ready"]


@pytest.mark.parametrize("app,container,hints", [
    ("gpu-feature-discovery", "gpu-feature-discovery", ["NVML", "gfd_fail_on_init_error: false"]),
    ("nfd-worker", "worker", ["nfd_worker_config"]),
    ("nvidia-dcgm-exporter", "nvidia-dcgm-exporter", ["DCGM"]),
    ("nvidia-mig-manager", "nvidia-mig-manager", ["nvidia.com/mig.config"]),
])
def test_crash_loops_carry_the_components_own_hint(app, container, hints):
    p = pod(app, ready=False, containers=[container_status(container, ready=False, restarts=3, waiting="CrashLoopBackOff")])
    f = one(run([p]), "component-pod-crashloop")
    assert "restarted 3 time(s)" in f["summary"] and "last exit" not in f["summary"]  # no lastState: nothing made up
    assert "kubectl -n gpu-operator logs %s-abcde -c %s --previous" % (app, container) in f["remediation"]
    for hint in hints:
        assert hint in f["remediation"]
    if app != "nvidia-device-plugin-daemonset":
        assert "gpuops_device_plugin_configs" not in f["remediation"]


def test_a_crash_looping_init_container_is_found_and_a_start_error_points_to_the_runtime():
    init = [container_status("driver-validation", ready=False, restarts=4, waiting="CrashLoopBackOff",
                             last="StartError", last_exit=128)]
    main = [container_status("nvidia-operator-validator", ready=False, waiting="PodInitializing")]
    p = pod("nvidia-operator-validator", phase="Pending", ready=False, containers=main, init=init)
    out = run([p])
    assert ids(out) == [("component-pod-crashloop", "error")]
    f = out["findings"][0]
    assert "container driver-validation" in f["summary"] and "StartError (exit code 128)" in f["summary"]
    assert "-c driver-validation --previous" in f["remediation"]
    assert "runtime could not start the container" in f["remediation"] and "runtime_class" in f["remediation"]
    assert out["pods"][0]["reasons"] == ["CrashLoopBackOff", "PodInitializing"]


# --- images ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("reason", ["ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"])
def test_an_image_that_cannot_be_pulled_names_the_image_and_the_variables(reason):
    p = pod("nvidia-dcgm-exporter", phase="Pending", ready=False,
            containers=[container_status("nvidia-dcgm-exporter", ready=False, waiting=reason,
                                         message='Back-off pulling image "nvcr.io/nvidia/nvidia-dcgm-exporter:v1"')])
    out = run([p])
    assert ids(out) == [("component-pod-image", "error")]
    f = out["findings"][0]
    assert reason in f["summary"] and "Back-off pulling image" in f["summary"]
    assert "image nvcr.io/nvidia/nvidia-dcgm-exporter:v1" in f["remediation"]
    for var in ("gpuops_registry", "dcgm_exporter_image", "gpuops_image_pull_secrets"):
        assert var in f["remediation"]
    assert "kubectl -n gpu-operator describe pod nvidia-dcgm-exporter-abcde" in f["remediation"]
    assert f["detail"]["image"] == "nvcr.io/nvidia/nvidia-dcgm-exporter:v1"


# --- configuration and sandbox --------------------------------------------------------------------------

@pytest.mark.parametrize("reason", ["CreateContainerConfigError", "CreateContainerError", "RunContainerError"])
def test_a_container_that_cannot_be_created_points_to_describe_and_the_runtime_class(reason):
    p = pod("gpu-feature-discovery", phase="Pending", ready=False,
            containers=[container_status("gpu-feature-discovery", ready=False, waiting=reason,
                                         message='configmap "nvidia-device-plugin-configs" not found')])
    f = one(run([p]), "component-pod-config")
    assert f["severity"] == "error"
    assert reason in f["summary"] and 'configmap "nvidia-device-plugin-configs" not found' in f["summary"]
    assert "kubectl -n gpu-operator describe pod gpu-feature-discovery-abcde" in f["remediation"]
    assert "RuntimeClass nvidia" in f["remediation"] and "runtime_class role" in f["remediation"]
    assert "handler" in f["remediation"]


def test_a_sandbox_failure_in_the_pod_status_is_a_config_error():
    p = pod("nvidia-device-plugin-daemonset", phase="Pending", ready=False, runtime_class="nvidia-cdi",
            containers=[container_status("nvidia-device-plugin-ctr", ready=False, waiting="ContainerCreating")],
            reason="CreatePodSandboxError", message='no runtime for "nvidia-cdi" is configured')
    f = one(run([p]), "component-pod-config")
    assert "CreatePodSandboxError" in f["summary"] and 'no runtime for "nvidia-cdi"' in f["summary"]
    assert "RuntimeClass nvidia-cdi" in f["remediation"]


def test_a_condition_reason_of_an_admission_failure_is_a_config_error_too():
    p = pod("nvidia-mig-manager", phase="Failed", ready=False, containers=[],
            conditions=[{"type": "Ready", "status": "False", "reason": "UnexpectedAdmissionError"}])
    assert ids(run([p])) == [("component-pod-config", "error")]


# --- not ready, restarts --------------------------------------------------------------------------------

def test_a_pod_still_creating_is_not_ready_with_its_phase_and_reasons():
    p = pod("nvidia-dcgm-exporter", phase="Pending", ready=False,
            containers=[container_status("nvidia-dcgm-exporter", ready=False, waiting="ContainerCreating")])
    out = run([p])
    assert ids(out) == [("component-pod-not-ready", "warning")]
    f = out["findings"][0]
    assert f["summary"] == "DCGM exporter pod nvidia-dcgm-exporter-abcde on gpu-p02 is not ready: phase Pending (ContainerCreating)"
    assert "kubectl -n gpu-operator describe pod nvidia-dcgm-exporter-abcde" in f["remediation"]


def test_an_unscheduled_pod_without_container_statuses_is_not_ready():
    p = pod("nfd-worker", phase="Pending", ready=False, containers=[])
    p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    f = one(run([p]), "component-pod-not-ready")
    assert "phase Pending (Unschedulable)" in f["summary"]


def test_a_terminating_pod_is_not_ready_even_while_ready_and_points_to_the_kubelet():
    p = pod("gpu-feature-discovery")
    p["metadata"]["deletionTimestamp"] = "2026-12-06T00:00:00Z"
    out = run([p])
    f = one(out, "component-pod-not-ready")
    assert "Terminating" in f["summary"] and "kubelet" in f["remediation"]
    assert out["pods"][0]["reasons"] == ["Terminating"] and out["pods"][0]["ready"] is True


def test_a_running_pod_that_restarted_is_a_warning_with_the_last_reason():
    p = pod("nvidia-device-plugin-daemonset",
            containers=[container_status("nvidia-device-plugin-ctr", restarts=2, last="OOMKilled", last_exit=137),
                        container_status("config-manager", restarts=1, last="Error", last_exit=1)])
    out = run([p])
    assert ids(out) == [("component-pod-restarts", "warning")]
    f = out["findings"][0]
    assert ("restarted 3 time(s) (container nvidia-device-plugin-ctr: 2, last exit: OOMKilled (exit code 137))"
            in f["summary"])
    assert "logs nvidia-device-plugin-daemonset-abcde -c nvidia-device-plugin-ctr --previous" in f["remediation"]
    assert "device_plugin_resources" in f["remediation"]
    assert out["pods"][0]["restarts"] == 3 and out["pods"][0]["ready"] is True


# --- missing, other nodes, nfd-master --------------------------------------------------------------------

def test_a_component_the_node_labels_ask_for_without_a_pod_is_missing():
    pods = [p for p in healthy_pods() if p["metadata"]["labels"]["app"] != "nvidia-device-plugin-daemonset"]
    out = run(pods, nodes=LABELLED)
    assert ids(out) == [("component-pod-missing", "error")]
    f = out["findings"][0]
    assert f["summary"] == "node gpu-p02 has nvidia.com/gpu.deploy.device-plugin=true but no device plugin pod runs on it"
    for text in ("DaemonSet nvidia-device-plugin-daemonset", "kubectl -n gpu-operator get ds", "playbooks/cluster.yml",
                 "device_plugin in gpuops_cluster_components", "nodeSelector and tolerations", "taints",
                 "device_plugin_tolerations", "kubectl describe node gpu-p02"):
        assert text in f["remediation"]
    assert f["detail"]["deploy_label"] == "nvidia.com/gpu.deploy.device-plugin"


def test_missing_needs_the_label_true_and_the_node_in_the_list():
    assert run([], nodes=[node(labels=all_deploy_labels("false"))])["findings"] == []
    assert run([], nodes=[node(name="gpu-p03", labels=all_deploy_labels())])["findings"] == []
    assert run([], nodes=[])["findings"] == []
    everything = run([], nodes=[node(labels=all_deploy_labels())])
    assert sorted(f["detail"]["component"] for f in everything["findings"]) == sorted(a for a, (_c, label) in APPS.items() if label)
    assert {f["id"] for f in everything["findings"]} == {"component-pod-missing"}


def test_mps_daemon_missing_only_where_both_of_its_labels_ask_for_it():
    mps = {"nvidia.com/mps.capable": "true"}
    out = run(healthy_pods(), nodes=[node(labels=dict(all_deploy_labels(), **mps))])
    assert ids(out) == [("component-pod-missing", "error")]
    f = out["findings"][0]
    assert f["summary"] == "node gpu-p02 has nvidia.com/mps.capable=true but no MPS control daemon pod runs on it"
    assert "DaemonSet nvidia-device-plugin-mps-control-daemon" in f["remediation"]
    assert f["detail"]["component"] == "nvidia-device-plugin-mps-control-daemon"
    # its nodeSelector also asks for the device plugin's deploy label: without it, no pod is wanted there
    no_dp = dict(all_deploy_labels(), **mps)
    no_dp["nvidia.com/gpu.deploy.device-plugin"] = "false"
    assert run(healthy_pods(), nodes=[node(labels=no_dp)])["findings"] == []
    # with its pod there, nothing
    mps_pod = pod("nvidia-device-plugin-mps-control-daemon", name="mps-p02",
                  containers=[container_status("mps-control-daemon-ctr")])
    assert run(healthy_pods() + [mps_pod], nodes=[node(labels=dict(all_deploy_labels(), **mps))])["findings"] == []


def test_pods_on_other_nodes_are_ignored_and_do_not_count_for_this_one():
    sick = pod("nvidia-device-plugin-daemonset", name="dp-other", node="gpu-p03", ready=False,
               containers=[container_status("nvidia-device-plugin-ctr", ready=False, restarts=9, waiting="CrashLoopBackOff")])
    unplaced = pod("gpu-feature-discovery", name="gfd-pending", node=None, phase="Pending", ready=False, containers=[])
    del unplaced["spec"]["nodeName"]
    out = run([sick, unplaced], nodes=[node(labels={"nvidia.com/gpu.deploy.device-plugin": "true"}),
                                       node("gpu-p03", labels={"nvidia.com/gpu.deploy.device-plugin": "true"})])
    assert ids(out) == [("component-pod-missing", "error")] and out["pods"] == []
    assert run([sick], node_name="gpu-p03", nodes=[])["findings"][0]["id"] == "component-pod-crashloop"


def test_nfd_master_is_reported_only_where_it_runs_and_other_apps_not_at_all():
    master = pod("nfd-master", ready=False, containers=[container_status("master", ready=False, waiting="ImagePullBackOff")])
    assert ids(run([master], nodes=[])) == [("component-pod-image", "error")]
    assert run([master], node_name="gpu-p03", nodes=[])["findings"] == []
    stranger = pod("my-app", ready=False, containers=[container_status("x", ready=False, waiting="CrashLoopBackOff")])
    validation_job = pod("gpuops-validation", ready=False, containers=[container_status("x", ready=False, waiting="Error")])
    assert run([stranger, validation_job], nodes=[]) == {"findings": [], "pods": []}


def test_findings_come_errors_first_then_by_pod_name():
    pods = [pod("nvidia-dcgm-exporter", name="b-restarts", containers=[container_status("nvidia-dcgm-exporter", restarts=1)]),
            pod("gpu-feature-discovery", name="a-pending", phase="Pending", ready=False,
                containers=[container_status("gpu-feature-discovery", ready=False, waiting="ContainerCreating")]),
            pod("nvidia-device-plugin-daemonset", name="z-crash", ready=False,
                containers=[container_status("nvidia-device-plugin-ctr", ready=False, restarts=1, waiting="CrashLoopBackOff")]),
            pod("nvidia-mig-manager", name="c-image", ready=False,
                containers=[container_status("nvidia-mig-manager", ready=False, waiting="ErrImagePull")])]
    out = run(pods, nodes=[])
    assert [(f["id"], f["detail"]["pod"]) for f in out["findings"]] == [
        ("component-pod-image", "c-image"), ("component-pod-crashloop", "z-crash"),
        ("component-pod-not-ready", "a-pending"), ("component-pod-restarts", "b-restarts")]
    assert [p["name"] for p in out["pods"]] == ["a-pending", "b-restarts", "c-image", "z-crash"]


# --- the Pod list failed --------------------------------------------------------------------------------

def test_a_failed_pod_list_is_said_not_hidden():
    out = gpu_doctor_pods([], [], NODE, pods_error="Failed to get client due to HTTPSConnectionPool(host='10.0.0.1')")
    assert ids(out) == [("component-pods-unknown", "info")] and out["pods"] == []
    f = out["findings"][0]
    assert "HTTPSConnectionPool" in f["summary"] and "doctor_k8s_pods: false" in f["remediation"]
    assert gpu_doctor_pods(None, None, NODE, pods_error="x")["findings"][0]["id"] == "component-pods-unknown"
    assert gpu_doctor_pods([], [], NODE, pods_error=None) == {"findings": [], "pods": []}
    hostile = gpu_doctor_pods([], [], NODE, pods_error="boom\n[ERROR] fake: {{ lookup('pipe', 'id') }}" + "x" * 5000)
    s = hostile["findings"][0]["summary"]
    assert "\n" not in s and len(s) < 300 and "{{ lookup('pipe', 'id') }}" in s


# --- bad input --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,what", [
    (({"resources": []}, [], NODE), "pods_resources must be the resources list"),
    (("pods", [], NODE), "pods_resources must be the resources list"),
    ((None, [], NODE), "pods_resources must be the resources list"),
    (([], {"a": 1}, NODE), "nodes_resources must be the resources list"),
    (([], "nodes", NODE), "nodes_resources must be the resources list"),
    (([], [], None), "node_name must be the Node's name"),
    (([], [], ""), "node_name must be the Node's name"),
    (([], [], 7), "node_name must be the Node's name"),
    (([], [], ["gpu-p02"]), "node_name must be the Node's name"),
])
def test_arguments_of_the_wrong_shape_are_refused_by_name(args, what):
    with pytest.raises(AnsibleFilterError) as e:
        gpu_doctor_pods(*args)
    assert str(e.value).startswith("gpu_doctor_pods: ") and what in str(e.value)


def test_a_namespace_that_is_no_string_is_refused():
    with pytest.raises(AnsibleFilterError, match="namespace must be a string"):
        gpu_doctor_pods([], [], NODE, namespace=["gpu-operator"])


def test_malformed_entries_are_skipped_never_a_traceback():
    good = pod("nvidia-device-plugin-daemonset", ready=False,
               containers=[container_status("nvidia-device-plugin-ctr", ready=False, restarts=2, waiting="CrashLoopBackOff")])
    junk = [None, 7, "pod", [], {}, {"metadata": None, "spec": None, "status": None},
            {"metadata": {"labels": "app=nfd-worker"}, "spec": {"nodeName": NODE}},
            {"metadata": {"labels": {"app": ["nfd-worker"]}}, "spec": {"nodeName": NODE}},
            {"metadata": {"name": 12, "labels": {"app": "nfd-worker"}}, "spec": {"nodeName": NODE}},
            {"metadata": {"name": "n", "labels": {"app": "nfd-worker"}}, "spec": {"nodeName": [NODE]}},
            {"metadata": {"name": "n", "labels": {"app": "nfd-worker"}}, "spec": {"nodeName": NODE, "containers": "x"},
             "status": {"containerStatuses": "x", "initContainerStatuses": [None, 1, {"name": None}],
                        "conditions": "Ready", "phase": ["Running"]}}]
    weird = copy.deepcopy(good)
    weird["metadata"]["name"] = "weird"
    weird["status"]["containerStatuses"] = [
        {"name": "a", "restartCount": True, "state": {"waiting": {"reason": ["CrashLoopBackOff"]}}, "lastState": "x"},
        {"name": "b", "restartCount": "many", "state": "waiting", "lastState": {"terminated": {"exitCode": "1; rm -rf /"}}},
        {"name": "c", "restartCount": -4, "state": {"waiting": None, "terminated": {"reason": "Error", "exitCode": 2.5}}},
        {"name": "d", "restartCount": "3"}]
    nodes = [None, "node", {"metadata": None}, {"metadata": {"name": NODE, "labels": ["x"]}}]
    out = gpu_doctor_pods(junk + [good, weird], nodes, NODE)
    assert [f["detail"]["pod"] for f in out["findings"]] == ["nvidia-device-plugin-daemonset-abcde", "n", "weird"]
    by_name = {p["name"]: p for p in out["pods"]}
    assert by_name["n"] == {"name": "n", "component": "nfd-worker", "phase": "Unknown", "ready": False,
                            "restarts": 0, "reasons": []}
    assert by_name["weird"]["restarts"] == 3 and by_name["weird"]["reasons"] == ["Error"]
    assert all(isinstance(p["restarts"], int) and not isinstance(p["restarts"], bool) for p in out["pods"])


# --- hostile text ---------------------------------------------------------------------------------------

HOSTILE = "evil\n[ERROR] driver-not-loaded: fake\r\x1b[2J{{ lookup('pipe', 'id') }}\u2028\u202e{% raw %}"


def _lines_ok(f):
    for key in ("summary", "remediation"):
        value = f[key]
        assert not any(ch in value for ch in "\n\r\x1b\u2028\u2029\u202e\x00"), (key, value)
        assert len(value) < 2500


def test_hostile_names_and_reasons_stay_one_line_of_bounded_text():
    long_reason = "CrashLoop" + "A" * 10000
    p = pod("nvidia-device-plugin-daemonset", name=HOSTILE + "x" * 600, ready=False,
            containers=[container_status(HOSTILE, ready=False, restarts=5, waiting="CrashLoopBackOff",
                                         last=long_reason + "\n{{ 7 * 7 }}", last_exit=1)])
    p["metadata"]["namespace"] = "ns\n{{ x }}"
    q = pod("gpu-feature-discovery", name="gfd-1", ready=False,
            containers=[container_status("gpu-feature-discovery", ready=False, waiting="ErrImagePull",
                                         message="pull failed\n\n[ERROR] x " + "{{ 7 * 7 }}" * 1000)])
    q["spec"]["containers"][0]["image"] = "registry.example/gfd:v1\n{{ 7 * 7 }}" + "y" * 1000
    r = pod("nvidia-dcgm-exporter", name="dcgm-1", phase="Pending\n" + "P" * 300, ready=False,
            containers=[container_status("nvidia-dcgm-exporter", ready=False, waiting="Odd\n{{ 7 * 7 }}" + "R" * 500)])
    out = gpu_doctor_pods([p, q, r], [], NODE)
    assert [f["id"] for f in out["findings"]] == ["component-pod-crashloop", "component-pod-image", "component-pod-not-ready"]
    for f in out["findings"]:
        _lines_ok(f)
    crash, image, not_ready = out["findings"]
    name = crash["detail"]["pod"]
    # ESC, CR, LF, U+2028 and the bidi override are gone (a space each, collapsed): no line, no escape sequence
    assert name.startswith("evil [ERROR] driver-not-loaded: fake [2J{{ lookup('pipe', 'id') }} {% raw %}xxx")
    assert len(name) <= dp.NAME_MAX
    assert name.endswith("...")
    assert "\n" not in name and "{{ lookup('pipe', 'id') }}" in crash["summary"]  # shown as text, never run
    assert len(crash["detail"]["last_reason"]) <= dp.TEXT_MAX and crash["detail"]["last_reason"].endswith("...")
    # a name that is no Kubernetes name is one shell word in the suggested command
    assert "logs 'evil [ERROR]" in crash["remediation"] and "-n 'ns {{ x }}'" in crash["remediation"]
    assert "-c 'evil [ERROR]" in crash["remediation"]
    assert len(image["detail"]["message"]) <= dp.TEXT_MAX and len(image["detail"]["image"]) <= dp.TEXT_MAX
    assert "registry.example/gfd:v1 {{ 7 * 7 }}" in image["remediation"]
    assert len(not_ready["detail"]["phase"]) <= 32
    for p_ in out["pods"]:
        assert all("\n" not in r and len(r) <= dp.TEXT_MAX for r in p_["reasons"]) and "\n" not in p_["name"]


def test_text_is_one_bounded_line():
    assert dp.text("a\nb\tc\x00d\u2028e\u202ef  g") == "a b c d e f g"
    assert dp.text(None) == "" and dp.text(7) == "" and dp.text(["x"]) == ""
    assert dp.text("x" * 1000) == "x" * 197 + "..."
    assert len(dp.text("x" * 10 ** 7)) == dp.TEXT_MAX  # a huge string costs a bounded scan


def test_hostile_node_list_entries_are_data():
    n = node(labels={"nvidia.com/gpu.deploy.device-plugin": "true\n", "nvidia.com/gpu.deploy.gpu-feature-discovery": True})
    assert run([], nodes=[n])["findings"] == []  # only the string "true" asks for a component, as the nodeSelector does


# --- the role's task ------------------------------------------------------------------------------------

TASK = "Add what is wrong with this node's component pods to the findings"


@pytest.fixture(scope="module")
def role():
    from role_render import Role  # tests/unit/roles on the path (tests/unit/conftest.py)
    r = Role("doctor")
    if not os.path.exists(os.path.join(r.path, "tasks", "pods.yml")):
        pytest.skip("the installed collection has no roles/doctor/tasks/pods.yml: run make install")
    return r


def test_the_role_defaults_and_main_include(role):
    assert role.plain("defaults/main.yml")["doctor_k8s_pods"] == "{{ gpuops_doctor_k8s_pods | default(true) }}"
    assert role.plain("defaults/main.yml")["doctor_k8s_namespace"] == "{{ gpuops_k8s_namespace | default('gpu-operator') }}"
    main = role.plain("tasks/main.yml")
    names = [t.get("ansible.builtin.include_tasks") for t in main]
    assert names.index("pods.yml") == names.index("vmis.yml") + 1
    when = main[names.index("pods.yml")]["when"]
    assert when == ["doctor_k8s_pods | bool", "doctor_k8s_nodes_group in group_names", "doctor_k8s_api | bool"]
    tasks = role.plain("tasks/pods.yml")
    reads = [t["kubernetes.core.k8s_info"] for t in tasks if "kubernetes.core.k8s_info" in t]
    assert [r["kind"] for r in reads] == ["Pod", "Node", "ResourceSlice"]
    assert reads[0]["namespace"] == "{{ doctor_k8s_namespace }}" and reads[2]["api_version"] == "resource.k8s.io/v1"
    for t in tasks[:3]:
        assert t["run_once"] is True and t["failed_when"] is False and t["check_mode"] is False
        assert t["delegate_to"] == "{{ doctor_k8s_host }}"


def test_the_role_appends_the_findings_and_keeps_api_text_as_data(role):
    sick = pod("nvidia-device-plugin-daemonset", name="dp-1", ready=False,
               containers=[container_status("nvidia-device-plugin-ctr", ready=False, restarts=2, waiting="CrashLoopBackOff",
                                            last="{{ 7 * 7 }}", last_exit=1)])
    ok, out = role.set_fact("pods.yml", TASK, doctor_findings=[{"id": "driver-not-loaded", "severity": "error"}],
                            doctor_k8s_node_name=NODE,
                            _doctor_pods={"resources": [sick], "failed": False, "api_found": True},
                            _doctor_nodes={"resources": [node(labels={"nvidia.com/gpu.deploy.gpu-feature-discovery": "true"})],
                                           "failed": False})
    assert ok
    assert [f["id"] for f in out["doctor_findings"]] == ["driver-not-loaded", "component-pod-crashloop", "component-pod-missing"]
    assert "last exit: {{ 7 * 7 }} (exit code 1)" in out["doctor_findings"][1]["summary"]  # not 49
    assert "kubectl -n gpu-operator logs dp-1" in out["doctor_findings"][1]["remediation"]
    assert out["doctor_pods"] == [{"name": "dp-1", "component": "nvidia-device-plugin-daemonset", "phase": "Running",
                                   "ready": False, "restarts": 2, "reasons": ["CrashLoopBackOff"]}]


def test_the_role_says_when_the_pod_list_failed(role):
    # failed_when: false leaves failed false: a read without resources is a failed one
    for failed in ({"failed": False, "msg": "Failed to get client due to HTTPSConnectionPool"},
                   {"failed": True, "msg": "Failed to get client due to HTTPSConnectionPool"}):
        ok, out = role.set_fact("pods.yml", TASK, doctor_findings=[], doctor_k8s_node_name=NODE,
                                _doctor_pods=failed, _doctor_nodes=failed)
        assert [f["id"] for f in out["doctor_findings"]] == ["component-pods-unknown"]
        assert "HTTPSConnectionPool" in out["doctor_findings"][0]["summary"] and out["doctor_pods"] == []
    ok, out = role.set_fact("pods.yml", TASK, doctor_findings=[], doctor_k8s_node_name=NODE,
                            _doctor_pods={"resources": [], "failed": False}, _doctor_nodes={"failed": False, "msg": "x"})
    assert out["doctor_findings"] == [] and out["doctor_pods"] == []


# --- the node's workload label ----------------------------------------------------------------------------

WL = "nvidia.com/gpu.workload.config"


@pytest.mark.parametrize("workload", ["container", "vm-passthrough", "vm-vgpu"])
def test_a_workload_label_that_agrees_with_the_inventory_is_no_finding(workload):
    assert run(healthy_pods(), nodes=[node(labels=dict(all_deploy_labels(), **{WL: workload}))],
               workload=workload)["findings"] == []


@pytest.mark.parametrize("workload,severity", [("vm-passthrough", "error"), ("vm-vgpu", "error"), ("container", "warning")])
def test_a_missing_workload_label_is_an_error_for_vms_and_a_warning_for_containers(workload, severity):
    f = one(run(healthy_pods(), nodes=[node(labels=all_deploy_labels())], workload=workload), "node-workload-label")
    assert f["severity"] == severity
    assert f["detail"] == {"node": NODE, "label": WL, "have": None, "want": workload}
    assert "kubectl label node %s %s=%s --overwrite" % (NODE, WL, workload) in f["remediation"]
    assert "playbooks/cluster.yml" in f["remediation"]
    assert ("VMs on it see no GPU" in f["summary"]) == (workload != "container")


def test_a_workload_label_that_differs_is_an_error_that_offers_both_fixes():
    f = one(run([], nodes=[node(labels={WL: "container"})], workload="vm-passthrough"), "node-workload-label")
    assert f["severity"] == "error" and f["detail"]["have"] == "container"
    assert "labelled %s=container but the inventory's gpu_workload is vm-passthrough" % WL in f["summary"]
    assert "change its gpu_workload in the inventory instead" in f["remediation"]
    # errors first: the workload label before a missing component of the same severity
    out = run([], nodes=[node(labels={WL: "container", "nvidia.com/gpu.deploy.device-plugin": "true"})],
              workload="vm-passthrough")
    assert [i for i, _s in ids(out)] == ["node-workload-label", "component-pod-missing"]


def test_the_workload_check_needs_a_workload_and_the_node_in_the_list():
    assert run([], nodes=[node(labels={})])["findings"] == []
    assert run([], nodes=[node(labels={})], workload="")["findings"] == []
    assert run([], nodes=[node(name="gpu-p03", labels={})], workload="vm-vgpu")["findings"] == []
    assert run([], nodes=[], workload="vm-vgpu")["findings"] == []


@pytest.mark.parametrize("value", ["vm-passthrough\n; rm -rf /", "{{ lookup('pipe', 'id') }}", "$(id)", "x" * 5000])
def test_a_hostile_label_value_is_shown_as_one_quoted_bounded_line(value):
    f = one(run([], nodes=[node(labels={WL: value})], workload="container"), "node-workload-label")
    for part in (f["summary"], f["remediation"]):
        assert "\n" not in part and len(part) < 1200
    assert f["detail"]["have"] is not None and len(f["detail"]["have"]) <= 63
    if value.startswith(("{{", "$(")):
        assert shlex.quote(f["detail"]["have"]) in f["summary"]      # shell-quoted where a person would copy it


@pytest.mark.parametrize("bad", ["vm", "Container", ["container"], 3, "container\n"])
def test_a_workload_that_is_not_a_workload_kind_is_refused(bad):
    with pytest.raises(AnsibleFilterError, match="workload must be one of container, vm-passthrough, vm-vgpu"):
        run([], nodes=LABELLED, workload=bad)


def test_a_mig_manager_that_reported_failed_is_an_error_with_its_log_and_the_config():
    """The MIG manager's pod runs and is Ready; its report on the Node (nvidia.com/mig.config.state=failed) is the
    finding: the config the label names, the log of its pod on the node, the variable and playbook that change it."""
    labels = dict(all_deploy_labels(),
                  **{"nvidia.com/mig.config": "no-such-config", "nvidia.com/mig.config.state": "failed"})
    out = run(healthy_pods(), nodes=[node(labels=labels)])
    assert ids(out) == [("mig-config-failed", "error")]
    f = one(out, "mig-config-failed")
    assert f["summary"] == ("node gpu-p02: NVIDIA's MIG manager could not apply MIG config no-such-config "
                            "(nvidia.com/mig.config.state=failed)")
    mgr = [p["metadata"]["name"] for p in healthy_pods() if p["metadata"]["labels"]["app"] == "nvidia-mig-manager"]
    for text in ("kubectl -n gpu-operator logs %s" % mgr[0], "gpuops_mig_configs", "gpuops_mig_config",
                 "playbooks/cluster.yml", "mig_manager_with_reboot", "/run/dbus/system_bus_socket"):
        assert text in f["remediation"]
    # success, pending, a hostile config name: no finding / one quoted line
    for state in ("success", "pending", "rebooting"):
        assert run(healthy_pods(), nodes=[node(labels=dict(labels, **{"nvidia.com/mig.config.state": state}))])[
            "findings"] == []
    hostile = one(run([], nodes=[node(labels=dict(labels, **{"nvidia.com/mig.config": "$(id)\nx"}))]),
                  "mig-config-failed")
    assert "\n" not in hostile["summary"] and "'$(id) x'" in hostile["summary"]
    assert "-l app=nvidia-mig-manager" in hostile["remediation"]  # no pod of it on the node: how to find one


# -- DRA nodes (docs/dra.md) ----------------------------------------------------------------------------------

DRA = "nvidia-dra-driver-kubelet-plugin"
DRA_LABELS = {"nvidia.com/gpu.deploy.dra-driver": "true", "nvidia.com/gpu.deploy.gpu-feature-discovery": "true"}


def dra_pods(ready=True, node_name=NODE):
    return [pod(DRA, name="dra-" + node_name[-3:], node=node_name, ready=ready,
                containers=[container_status("gpus", ready=ready)]),
            pod("gpu-feature-discovery", name="gfd-" + node_name[-3:], node=node_name)]


def a_slice(node_name=NODE, devices=1, driver="gpu.nvidia.com"):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s-" + node_name},
            "spec": {"driver": driver, "nodeName": node_name, "pool": {"name": node_name},
                     "devices": [{"name": "gpu-%d" % i} for i in range(devices)]}}


def test_a_dra_node_whose_plugin_publishes_its_gpu_has_no_finding():
    assert run(dra_pods(), nodes=[node(labels=DRA_LABELS)], slices=[a_slice()])["findings"] == []


def test_a_dra_node_with_no_resourceslice_is_an_error_that_says_where_to_look():
    out = run(dra_pods(), nodes=[node(labels=DRA_LABELS)],
              slices=[a_slice("gpu-p03"), a_slice(driver="compute-domain.nvidia.com")])
    assert ids(out) == [("dra-no-resourceslice", "error")]
    f = one(out, "dra-no-resourceslice")
    assert f["summary"].startswith("node gpu-p02 allocates GPUs by DRA and its kubelet plugin is Ready, but no "
                                   "ResourceSlice of gpu.nvidia.com lists the node")
    for text in ("kubectl -n gpu-operator logs dra-p02 -c gpus", "dra_driver_driver_root",
                 "kubectl get resourceslices --field-selector spec.nodeName=gpu-p02,spec.driver=gpu.nvidia.com"):
        assert text in f["remediation"]


def test_slices_with_no_device_are_a_warning():
    out = run(dra_pods(), nodes=[node(labels=DRA_LABELS)], slices=[a_slice(devices=0)])
    assert ids(out) == [("dra-no-gpu-published", "warning")]


def test_a_running_plugin_that_is_not_ready_has_not_registered_with_the_kubelet():
    out = run(dra_pods(ready=False), nodes=[node(labels=DRA_LABELS)], slices=[])
    assert ids(out) == [("dra-plugin-not-registered", "error")]  # no slice finding beside it: the plugin comes first
    f = one(out, "dra-plugin-not-registered")
    for text in ("plugins_registry/gpu.nvidia.com-reg.sock", "dra_driver_kubelet_root", "journalctl -u kubelet",
                 "kubectl -n gpu-operator logs dra-p02 -c gpus"):
        assert text in f["remediation"]


def test_slices_not_read_or_a_device_plugin_node_give_no_slice_finding():
    assert run(dra_pods(), nodes=[node(labels=DRA_LABELS)])["findings"] == []  # slices=None: not read
    dp_node = {"nvidia.com/gpu.deploy.device-plugin": "true"}
    assert run([pod("nvidia-device-plugin-daemonset")], nodes=[node(labels=dp_node)], slices=[])["findings"] == []


def test_a_dra_node_without_its_plugin_pod_is_missing_it():
    out = run([p for p in dra_pods() if p["metadata"]["labels"]["app"] != DRA], nodes=[node(labels=DRA_LABELS)],
              slices=[])
    assert ids(out) == [("component-pod-missing", "error")]
    assert one(out, "component-pod-missing")["detail"]["deploy_label"] == "nvidia.com/gpu.deploy.dra-driver"


def test_slices_of_the_wrong_shape_are_refused():
    with pytest.raises(AnsibleFilterError, match="slices"):
        run(dra_pods(), nodes=[node(labels=DRA_LABELS)], slices="none")


def test_the_role_passes_the_slices_it_read_and_skips_them_when_the_api_has_none(role):
    base = dict(doctor_findings=[], doctor_k8s_node_name=NODE,
                _doctor_pods={"resources": dra_pods(), "failed": False, "api_found": True},
                _doctor_nodes={"resources": [node(labels=DRA_LABELS)], "failed": False})
    ok, out = role.set_fact("pods.yml", TASK, _doctor_slices={"resources": [], "failed": False, "api_found": True}, **base)
    assert ok and [f["id"] for f in out["doctor_findings"]] == ["dra-no-resourceslice"]
    for slices in ({"resources": [], "failed": False, "api_found": False}, {"skipped": True},
                   {"failed": True, "msg": "timed out"}):
        ok, out = role.set_fact("pods.yml", TASK, _doctor_slices=slices, **base)
        assert ok and out["doctor_findings"] == [], slices
