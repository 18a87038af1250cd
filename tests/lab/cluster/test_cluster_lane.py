"""Cluster lane proofs, against the real control plane + KWOK nodes started by run-tests.sh.

Runs playbooks/cluster.yml (the installed collection) with the generated inventory of the
default node spec and checks, through the API server, what issue 6 asks for. Tests run in
file order and build on each other (bad input -> install -> rerun -> move -> helm -> uninstall).
"""
from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import time

import pytest
import yaml
from conftest import HERE, INVENTORY, KUBECONFIG, ROOT, VARS, ensure_crd, recap_changed
from conftest import cluster_playbook as playbook
from kubernetes import client, config

NS = "gpu-operator"
MANAGED = "app.kubernetes.io/managed-by=gpuops.nvidia"

CONTAINER_GPU = {"h200-0", "h100-0", "l40s-0", "ws-0"}
MIG_CAPABLE_CONTAINER = {"h200-0", "h100-0"}
PASSTHROUGH = {"pt-0", "pt-1"}
VGPU = {"vgpu-0"}
CPU = {"cpu-0", "cpu-1"}
ALL = CONTAINER_GPU | PASSTHROUGH | VGPU | CPU
CONTAINER_DEPLOY = {"driver", "gpu-feature-discovery", "container-toolkit", "device-plugin", "dcgm",
                    "dcgm-exporter", "node-status-exporter", "operator-validator", "client"}
PASSTHROUGH_DEPLOY = {"sandbox-device-plugin", "sandbox-validator", "vfio-manager", "kata-manager",
                      "cc-manager", "client"}
VGPU_DEPLOY = {"sandbox-device-plugin", "vgpu-manager", "vgpu-device-manager", "sandbox-validator",
               "cc-manager", "client"}
GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
DAEMONSETS = {
    "nvidia-device-plugin-daemonset": "container",
    "gpu-feature-discovery": "container",
    "nvidia-dcgm-exporter": "container",
    "nvidia-operator-validator": "container",
    "nvidia-mig-manager": "mig",
    "nvidia-sandbox-device-plugin-daemonset": "vm",
    "nvidia-vgpu-device-manager": "vgpu",
}

config.load_kube_config(KUBECONFIG)
core = client.CoreV1Api()
apps = client.AppsV1Api()
api = client.ApiClient()


def ours(labels):
    return {k: v for k, v in (labels or {}).items()
            if k.startswith(("nvidia.com/", "feature.node.kubernetes.io/"))}


def nodes():
    return {n.metadata.name: n for n in core.list_node(label_selector="gpuops.lab/simulated=true").items}


def pods_by_ds(ns=NS):
    out = {}
    for p in core.list_namespaced_pod(ns).items:
        refs = p.metadata.owner_references or []
        for r in refs:
            if r.kind == "DaemonSet" and p.metadata.deletion_timestamp is None:
                out.setdefault(r.name, set()).add(p.spec.node_name)
    return out


def validation_jobs(ns=NS):
    """{node: (job name, Complete?)} of the validator's per-node Jobs, and where their pods ran."""
    batch = client.BatchV1Api()
    out = {}
    for j in batch.list_namespaced_job(ns, label_selector="app=gpuops-validation").items:
        done = any(c.type == "Complete" and c.status == "True" for c in j.status.conditions or [])
        out[j.metadata.annotations["gpuops.nvidia/node"]] = (j.metadata.name, done)
    ran = {p.spec.node_name for p in core.list_namespaced_pod(ns, label_selector="app=gpuops-validation").items
           if p.status.phase == "Succeeded"}
    return out, ran


def inventory_variant(tmp_path, name, edit):
    with open(INVENTORY) as f:
        inv = yaml.safe_load(f)
    inv = copy.deepcopy(inv)
    edit(inv["all"]["children"]["k8s_nodes"]["hosts"])
    path = tmp_path / (f"{name}.yml")
    path.write_text(yaml.safe_dump(inv))
    return str(path)


def wait_placement(expect, timeout=120):
    """Wait until DaemonSet pods sit exactly on the expected nodes (DS controller + KWOK are async)."""
    deadline = time.time() + timeout
    while True:
        got = {ds: pods_by_ds().get(ds, set()) for ds in expect}
        if got == expect or time.time() > deadline:
            return got
        time.sleep(1)


@pytest.fixture(scope="module")
def baseline():
    """Node labels/taints before anything of ours is applied (uninstall must restore exactly this)."""
    return {name: (dict(n.metadata.labels), n.spec.taints) for name, n in nodes().items()}


@pytest.fixture(scope="module", autouse=True)
def servicemonitor_crd():
    """A Prometheus Operator ServiceMonitor CRD, so dcgm_exporter's 'auto' creates one."""
    body = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
        "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                 "names": {"kind": "ServiceMonitor", "plural": "servicemonitors", "singular": "servicemonitor",
                           "listKind": "ServiceMonitorList"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
    }
    ensure_crd(body)
    yield


def test_spec_nodes_are_ready(baseline):
    ns = nodes()
    assert set(ns) == ALL
    for n in ns.values():
        ready = [c for c in n.status.conditions or [] if c.type == "Ready"]
        assert ready and ready[0].status == "True", n.metadata.name
    assert all(not ours(labels) for labels, _ in baseline.values())


@pytest.mark.parametrize("case", ["unknown-kind", "two-kinds", "unknown-mig-strategy", "replicas-1", "same-node-twice",
                                  "vgpu-count-0"])
def test_bad_input_refused_before_anything_applied(case, tmp_path, baseline):
    extra, inv = [], INVENTORY
    if case == "unknown-kind":
        inv = inventory_variant(tmp_path, case, lambda h: h["l40s-0"].update(gpu_workload="vm-gpu"))
        expect = "l40s-0: unknown GPU workload kind 'vm-gpu'"
    elif case == "two-kinds":
        inv = inventory_variant(tmp_path, case,
                                lambda h: h["l40s-0"].update(gpu_workload=["container", "vm-passthrough"]))
        expect = "l40s-0: one GPU workload kind per node"
    elif case == "same-node-twice":
        def twice(h):
            # a second inventory host for the same Kubernetes node (the lab names hosts as their nodes)
            h["l40s-0-vm"] = dict(h["l40s-0"], gpu_workload="vm-vgpu", gpuops_k8s_node_name="l40s-0")
        inv = inventory_variant(tmp_path, case, twice)
        expect = "l40s-0: listed twice"
    elif case == "unknown-mig-strategy":
        extra = ["-e", "gpuops_mig_strategy=dual"]
        expect = "node_labels_mig_strategy must be one of: none, single, mixed, got: dual"
    elif case == "vgpu-count-0":
        cfg = tmp_path / "vgpu.yml"
        cfg.write_text(yaml.safe_dump({"gpuops_vgpu_device_manager_config": {"version": "v1", "vgpu-configs": {
            "default": [{"devices": "all", "vgpu-devices": {"A10-4Q": 0}}]}}}))
        extra = ["-e", f"@{cfg}"]
        expect = "vGPU config 'default'[0]: vgpu-devices['A10-4Q'] must be an integer >= 1, got 0"
    else:
        cfg = tmp_path / "dp.yml"
        cfg.write_text(yaml.safe_dump({"gpuops_device_plugin_configs": {"time-sliced-4": {"version": "v1", "sharing": {
            "timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}}}}}))
        extra = ["-e", f"@{cfg}"]
        expect = "replicas must be an integer >= 2, got 1"
    r = playbook(*extra, inventory=inv, check=False)
    assert r.returncode != 0
    assert expect in r.stdout, r.stdout[-4000:]
    # nothing reached the API server
    assert core.list_namespace(field_selector=f"metadata.name={NS}").items == []
    now = {name: (dict(n.metadata.labels), n.spec.taints) for name, n in nodes().items()}
    assert now == baseline


def expected_deploy(name):
    if name in CONTAINER_GPU:
        return CONTAINER_DEPLOY | ({"mig-manager"} if name in MIG_CAPABLE_CONTAINER else set())
    if name in PASSTHROUGH:
        return PASSTHROUGH_DEPLOY
    if name in VGPU:
        return VGPU_DEPLOY
    return set()


def check_cluster(container_gpu, passthrough, mig_capable):
    ns = nodes()
    for name, n in ns.items():
        labels = n.metadata.labels
        deploy = {k.split("nvidia.com/gpu.deploy.", 1)[1]: v for k, v in labels.items()
                  if k.startswith("nvidia.com/gpu.deploy.")}
        gpu = name not in CPU
        if name in container_gpu:
            want = CONTAINER_DEPLOY | ({"mig-manager"} if name in mig_capable else set())
            kind = "container"
        elif name in passthrough:
            want, kind = PASSTHROUGH_DEPLOY, "vm-passthrough"
        elif name in VGPU:
            want, kind = VGPU_DEPLOY, "vm-vgpu"
        else:
            want, kind = set(), None
        assert deploy == {c: "true" for c in want}, name
        assert labels.get("nvidia.com/gpu.workload.config") == kind, name
        assert labels.get("nvidia.com/gpu.present") == ("true" if gpu else None), name
        assert labels.get("feature.node.kubernetes.io/pci-10de.present") == ("true" if gpu else None), name
        taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in n.spec.taints or []]
        # VM-workload nodes are not tainted (KubeVirt's virt-launcher pods must run there: docs/kubevirt.md)
        assert taints == (GPU_TAINT if kind == "container" else []), name
        if not gpu:  # NFD system labels (kernel, OS) are fine; nothing NVIDIA
            assert not [k for k in ours(labels) if k.startswith("nvidia.com/") or "10de" in k], name
    where = {"container": set(container_gpu), "mig": set(mig_capable) & set(container_gpu),
             "vm": set(passthrough) | VGPU, "vgpu": set(VGPU)}
    expect = {ds: where[kind] for ds, kind in DAEMONSETS.items()}
    got = wait_placement(expect)
    assert got == expect
    # NFD worker: every node
    assert wait_placement({"nfd-worker": ALL})["nfd-worker"] == ALL
    return ns


def test_install_places_components_exactly():
    r = playbook()
    ns = check_cluster(CONTAINER_GPU, PASSTHROUGH, MIG_CAPABLE_CONTAINER)
    h200 = ns["h200-0"].metadata.labels
    assert h200["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert h200["nvidia.com/gpu.count"] == "1"  # from gpu_facts over the real H200 capture
    assert h200["nvidia.com/cuda.driver-version.full"] == "580.159.04"
    assert h200["nvidia.com/gpu.family"] == "hopper"
    assert h200["nvidia.com/mig.config"] == "all-1g.18gb"
    assert h200["nvidia.com/mig.strategy"] == "single"
    h100 = ns["h100-0"].metadata.labels
    assert h100["nvidia.com/device-plugin.config"] == "time-sliced-4"
    assert h100["nvidia.com/gpu.replicas"] == "4"
    assert h100["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert h100["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert h100["nvidia.com/gpu.machine"] == "DGX-H100"  # only gpu_facts(root=hgx-h100) knows this
    assert h100["nvidia.com/gpu.count"] == "8"
    assert ns["l40s-0"].metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-L40S"  # declared in the spec
    assert ns["ws-0"].metadata.labels["nvidia.com/gpu.workload.config"] == "container"  # default kind
    # every DaemonSet rolled out; images through the mirror, pull secret set
    for ds in list(DAEMONSETS) + ["nfd-worker"]:
        d = apps.read_namespaced_daemon_set(ds, NS)
        assert d.status.number_ready == d.status.desired_number_scheduled > 0, ds
        spec = d.spec.template.spec
        for c in (spec.containers or []) + (spec.init_containers or []):
            assert c.image.startswith("registry.lab.internal:5000/"), (ds, c.image)
        assert [s.name for s in spec.image_pull_secrets or []] == ["lab-mirror"], ds
        tolerations = [{"key": t.key, "operator": t.operator, "effect": t.effect} for t in spec.tolerations or []]
        gpu_tol = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        everything = {"key": None, "operator": "Exists", "effect": None}  # NFD worker: every node
        assert gpu_tol in tolerations or everything in tolerations, (ds, tolerations)
    dp = apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", NS).spec.template.spec
    assert dp.containers[0].image == "registry.lab.internal:5000/nvidia/k8s-device-plugin:v0.20.0"
    assert dp.runtime_class_name == "nvidia"
    sdp = apps.read_namespaced_daemon_set("nvidia-sandbox-device-plugin-daemonset", NS).spec.template.spec
    assert sdp.containers[0].image == "registry.lab.internal:5000/nvidia/kubevirt-gpu-device-plugin:v1.6.0"
    vgpu_cfg = yaml.safe_load(core.read_namespaced_config_map("vgpu-devices-config", NS).data["config.yaml"])
    assert vgpu_cfg["vgpu-configs"]["default"] == [{"devices": "all", "vgpu-devices": {"A10-4Q": 6}}]
    # device plugin configs rendered and valid
    cm = core.read_namespaced_config_map("nvidia-device-plugin-configs", NS).data
    assert sorted(cm) == ["default", "mps-2", "time-sliced-4"]
    assert json.loads(cm["time-sliced-4"])["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 4
    assert json.loads(cm["default"])["flags"]["migStrategy"] == "single"
    # dcgm exporter: service, metrics CSV, ServiceMonitor (CRD present); dashboard off by default
    svc = core.read_namespaced_service("nvidia-dcgm-exporter", NS)
    assert svc.spec.ports[0].port == 9400
    csv = core.read_namespaced_config_map("nvidia-dcgm-exporter-metrics", NS).data["dcgm-metrics.csv"]
    assert "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %)." in csv.splitlines()
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors." in csv.splitlines()
    assert core.list_namespaced_config_map(NS, field_selector="metadata.name=nvidia-dcgm-exporter-dashboard").items == []
    # the operator's RuntimeClass on the DCGM exporter and MIG manager pods
    for ds in ("nvidia-dcgm-exporter", "nvidia-mig-manager"):
        assert apps.read_namespaced_daemon_set(ds, NS).spec.template.spec.runtime_class_name == "nvidia", ds
    sm = client.CustomObjectsApi().get_namespaced_custom_object(
        "monitoring.coreos.com", "v1", NS, "servicemonitors", "nvidia-dcgm-exporter")
    assert sm["spec"]["endpoints"][0]["port"] == "gpu-metrics"
    # RuntimeClass, policies
    assert client.NodeV1Api().read_runtime_class("nvidia").handler == "nvidia"
    q = core.read_namespaced_resource_quota("nvidia-gpu-quota", "team-a")
    assert q.spec.hard == {"requests.nvidia.com/gpu": "8"}
    assert client.SchedulingV1Api().read_priority_class("nvidia-gpu-high").value == 100000
    # validator: one completed Job per container GPU node, its pod ran on that node
    jobs, ran = validation_jobs()
    assert set(jobs) == CONTAINER_GPU and all(done for _, done in jobs.values()), jobs
    assert ran == CONTAINER_GPU
    # validator: readiness label exactly on container GPU nodes
    validated = {n for n, o in nodes().items() if o.metadata.labels.get("nvidia.com/gpu.validated") == "true"}
    assert validated == CONTAINER_GPU
    print(f"install: {r.seconds:.1f}s")


def test_second_run_changes_nothing():
    before = {n: (o.metadata.labels, o.spec.taints) for n, o in nodes().items()}
    jobs_before, _ = validation_jobs()
    r = playbook()
    changed = recap_changed(r.stdout)
    assert changed and all(v == 0 for v in changed.values()), changed
    after = {n: (o.metadata.labels, o.spec.taints) for n, o in nodes().items()}
    assert before == after
    assert validation_jobs()[0] == jobs_before  # the same Jobs, not validated again
    print(f"no-op rerun: {r.seconds:.1f}s")


def test_the_queued_apply_finds_the_install_as_wanted():
    """vars.yml turns gpuops_k8s_validate on, which applies each component through kubernetes.core.k8s;
    without it (the cluster play's default) every component's objects are queued and applied in one
    k8s_bulk_apply run. Both are server-side applies of one field manager: the queued path must find
    what the other installed already as wanted, and send nothing."""
    ds_before = {d.metadata.name: d.metadata.resource_version
                 for d in apps.list_daemon_set_for_all_namespaces(label_selector=MANAGED).items}
    r = playbook("-e", "gpuops_k8s_validate=false", "-v")
    changed = recap_changed(r.stdout)
    assert changed and all(v == 0 for v in changed.values()), changed
    queued = r.stdout.split("Apply every queued component object at once")[1].split("TASK [")[0]
    # ansible.cfg prints results as YAML: "applied: 0" -- nothing sent at all, everything found in sync
    assert re.search(r"^\s*applied: 0$", queued, re.M) and not re.search(r"^\s*in_sync: 0$", queued, re.M), queued[-3000:]
    after = {d.metadata.name: d.metadata.resource_version
             for d in apps.list_daemon_set_for_all_namespaces(label_selector=MANAGED).items}
    assert after == ds_before


NODE_LABELS_PLAY = """
- hosts: k8s_nodes
  gather_facts: false
  tasks:
    - name: GPU facts of the nodes (from their node roots; the others declare theirs), as cluster.yml gathers them
      ansible.builtin.include_role: {name: gpuops.nvidia.discovery}
      when: gpuops_gather_gpu_facts | default(true) | bool

- hosts: localhost
  gather_facts: false
  tasks:
    - name: Node labels and taints (the role's one k8s_node_labels run)
      ansible.builtin.include_role: {name: gpuops.nvidia.node_labels}
    - name: Keep the module's result for the test
      ansible.builtin.copy: {dest: "%(out)s", content: "{{ _node_labels_applied | to_json }}", mode: "0600"}
      check_mode: false
"""


def node_labels_run(tmp_path, name, *extra):
    """The node_labels role alone (inventory and vars of the lane), and k8s_node_labels' result."""
    out, play = tmp_path / (name + ".json"), tmp_path / (name + ".yml")
    play.write_text(NODE_LABELS_PLAY % {"out": out})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.environ.get("ANSIBLE_COLLECTIONS_PATH", os.path.join(ROOT, ".collections")),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), K8S_AUTH_KUBECONFIG=KUBECONFIG)
    r = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", INVENTORY, "-e", "@" + VARS,
                        str(play)] + list(extra), env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    return json.loads(out.read_text())


def test_node_labels_module_writes_only_the_nodes_that_differ(tmp_path):
    """k8s_node_labels against the real API server, on the installed cluster: someone sets h100-0's
    nvidia.com/gpu.present to false (and adds a label of their own) and strips l40s-0's taints. (A deploy label
    set to false is not such a change: the operator, and we, honour it as the node's opt-out.) Check mode reads, plans and
    dry-runs: those two nodes, and only they, are reported with a diff, and nothing changes. The real run writes
    exactly them back (one LIST, two applies), keeps the other manager's label, and a run after it writes nothing."""
    core.patch_node("h100-0", {"metadata": {"labels": {"nvidia.com/gpu.present": "false", "example.com/keep": "yes"}}})
    core.patch_node("l40s-0", {"spec": {"taints": None}})
    try:
        checked = node_labels_run(tmp_path, "check", "--check", "--diff")
        assert checked["changed"] and checked["updated"] == ["Node/h100-0", "Node/l40s-0"], checked
        assert checked["requests"] == {"read": 1, "apply": 2} and checked["missing"] == []
        assert checked["in_sync"] == checked["planned"] - 2 == len(ALL) - 2
        diffs = {d["before_header"]: d for d in checked["diff"]}
        assert set(diffs) == {"Node/h100-0", "Node/l40s-0"}
        assert '"nvidia.com/gpu.present": "false"' in diffs["Node/h100-0"]["before"], diffs
        assert '"nvidia.com/gpu.present": "true"' in diffs["Node/h100-0"]["after"], diffs
        assert "nvidia.com/gpu" in diffs["Node/l40s-0"]["after"] and "taints" in diffs["Node/l40s-0"]["after"]
        assert checked["placement"]["dcgm-exporter"] == sorted(CONTAINER_GPU)
        n = nodes()
        assert n["h100-0"].metadata.labels["nvidia.com/gpu.present"] == "false"
        assert not n["l40s-0"].spec.taints

        applied = node_labels_run(tmp_path, "apply")
        assert applied["updated"] == ["Node/h100-0", "Node/l40s-0"] and applied["requests"] == {"read": 1, "apply": 2}
        n = nodes()
        assert n["h100-0"].metadata.labels["nvidia.com/gpu.present"] == "true"
        assert n["h100-0"].metadata.labels["example.com/keep"] == "yes"  # not ours: kept
        assert [{"key": t.key, "value": t.value, "effect": t.effect} for t in n["l40s-0"].spec.taints] == GPU_TAINT

        again = node_labels_run(tmp_path, "again")
        assert not again["changed"] and again["requests"] == {"read": 1, "apply": 0}, again
        assert again["in_sync"] == len(ALL) and again["placement"] == applied["placement"]
    finally:
        core.patch_node("h100-0", {"metadata": {"labels": {"example.com/keep": None}}})


BULK_INFO_PLAY = """
- hosts: localhost
  gather_facts: false
  # the kubeconfig only through module_defaults of the collection's group: the environment has none
  module_defaults:
    group/gpuops.nvidia.k8s: {kubeconfig: "%(kubeconfig)s"}
  tasks:
    - name: What kubernetes.core.k8s_info reads
      kubernetes.core.k8s_info: {api_version: apps/v1, kind: DaemonSet, label_selectors: ["%(managed)s"]}
      register: one
    - name: The same query and four others in one run
      gpuops.nvidia.k8s_bulk_info:
        queries:
          ds: {api_version: apps/v1, kind: DaemonSet, label_selectors: ["%(managed)s"]}
          absent: {kind: ConfigMap, namespace: %(ns)s, name: no-such-configmap}
          unserved: {api_version: example.invalid/v1, kind: NoSuchKind}
          pods: {kind: Pod, namespace: %(ns)s, label_selectors: [app=nvidia-operator-validator],
                 fields: [spec.nodeName]}
          nodes: {kind: Node, field_selectors: [metadata.name=h200-0], fields: [metadata.managedFields],
                  field_managers: [gpuops-nvidia]}
      register: many
    - name: Bad input is refused before any request
      gpuops.nvidia.k8s_bulk_info:
        queries: {bad: {kind: Node, name: h200-0, label_selectors: [a=b]}, worse: {kind: Pod, labels: [x]}}
      register: refused
      ignore_errors: true
    - name: Keep what was read for the test
      ansible.builtin.copy:
        dest: "%(out)s"
        content: "{{ {'one': one.resources, 'many': many.reads, 'requests': many.requests,
                      'refused': refused.msg | default('')} | to_json }}"
        mode: "0600"
"""


def test_bulk_info_reads_what_k8s_info_reads(tmp_path):
    """k8s_bulk_info against the real API server, beside kubernetes.core.k8s_info: the same objects for the
    same query, a named object not there is [], a kind not served is api_found false, fields and
    field_managers cut what comes back, bad queries are refused with every reason. The play gives the
    kubeconfig only as module_defaults for group/gpuops.nvidia.k8s (no K8S_AUTH_KUBECONFIG): make lab's
    way, which a group default for kubernetes.core.k8s alone never reached (a `make lab` failed so once)."""
    out = tmp_path / "reads.json"
    play = tmp_path / "play.yml"
    play.write_text(BULK_INFO_PLAY % {"kubeconfig": KUBECONFIG, "managed": MANAGED, "ns": NS, "out": out})
    env = {k: v for k, v in os.environ.items() if not k.startswith("K8S_AUTH_") and k != "KUBECONFIG"}
    env.update(ANSIBLE_COLLECTIONS_PATH=os.environ.get("ANSIBLE_COLLECTIONS_PATH", os.path.join(ROOT, ".collections")),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), HOME=str(tmp_path))  # no ~/.kube/config either
    r = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", "localhost,", "-c", "local",
                        "-e", "ansible_python_interpreter=" + os.path.join(ROOT, ".venv", "bin", "python"), str(play)],
                       env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    got = json.loads(out.read_text())
    many = got["many"]
    uids = sorted(o["metadata"]["uid"] for o in got["one"])
    assert len(uids) >= 4 and sorted(o["metadata"]["uid"] for o in many["ds"]["resources"]) == uids
    # each item names its kind as k8s_info's do (the rollout check tells Deployments from DaemonSets by it)
    assert {(o["apiVersion"], o["kind"]) for o in many["ds"]["resources"]} == {("apps/v1", "DaemonSet")}
    assert many["absent"] == {"resources": [], "api_found": True}
    assert many["unserved"] == {"resources": [], "api_found": False}
    pods = many["pods"]["resources"]
    assert pods and all(set(p) == {"apiVersion", "kind", "metadata", "spec"} and set(p["spec"]) == {"nodeName"}
                        and (p["apiVersion"], p["kind"]) == ("v1", "Pod")
                        and set(p["metadata"]) == {"name", "namespace"} for p in pods)
    assert {p["spec"]["nodeName"] for p in pods} == {n for n, o in nodes().items()
                                                      if (o.metadata.labels or {}).get(
                                                          "nvidia.com/gpu.deploy.operator-validator") == "true"}
    node = many["nodes"]["resources"]
    assert [n["metadata"]["name"] for n in node] == ["h200-0"]
    # metadata only asked: the server answered PartialObjectMetadata, the item still names its own kind
    assert (node[0]["apiVersion"], node[0]["kind"]) == ("v1", "Node") and set(node[0]) == {"apiVersion", "kind", "metadata"}
    assert [m["manager"] for m in node[0]["metadata"]["managedFields"]] == ["gpuops-nvidia"]
    assert got["requests"] == 4  # the unserved kind costs no request
    assert "name and selectors exclude each other" in got["refused"] and "unknown key(s) labels" in got["refused"]


PAGES_PLAY = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    gpuops.nvidia.k8s_node_labels: {list_page_size: 2}
  tasks:
    - name: Node labels and taints, the Nodes listed two a page
      ansible.builtin.include_role: {name: gpuops.nvidia.node_labels}
    - name: Nodes (whole, and metadata only) and the namespace's ConfigMaps, in pages of 3 and in one request
      gpuops.nvidia.k8s_bulk_info:
        queries:
          nodes: {kind: Node}
          meta: {kind: Node, fields: [metadata.name]}
          cms: {kind: ConfigMap, namespace: %(ns)s}
        list_page_size: "{{ item }}"
      loop: [3, 0]
      register: info
    - name: Two ConfigMaps applied in check mode (a dry run), the namespace's ConfigMaps read one a page
      gpuops.nvidia.k8s_bulk_apply:
        objects:
          - {apiVersion: v1, kind: ConfigMap, metadata: {name: gpuops-lab-pages-a, namespace: %(ns)s}, data: {a: "1"}}
          - {apiVersion: v1, kind: ConfigMap, metadata: {name: gpuops-lab-pages-b, namespace: %(ns)s}, data: {b: "2"}}
        field_manager: gpuops-lab-pages
        list_page_size: 1
      check_mode: true
      register: applied
    - name: Keep the results for the test
      ansible.builtin.copy:
        dest: "%(out)s"
        content: "{{ {'labels': _node_labels_applied, 'paged': info.results[0], 'whole': info.results[1],
                      'applied': applied} | to_json }}"
        mode: "0600"
      check_mode: false
"""


def test_lists_are_read_in_pages(tmp_path):
    """list_page_size against the real API server: k8s_node_labels with the Nodes listed two a page plans every
    inventory node and counts a read request a page; k8s_bulk_info reads
    the same objects in pages of 3 as in one request, whole and metadata only, and counts every page; k8s_bulk_apply
    (check mode) reads the namespace's ConfigMaps one a page and writes nothing."""
    out, play = tmp_path / "pages.json", tmp_path / "pages.yml"
    play.write_text(PAGES_PLAY % {"out": out, "ns": NS})
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.environ.get("ANSIBLE_COLLECTIONS_PATH", os.path.join(ROOT, ".collections")),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), K8S_AUTH_KUBECONFIG=KUBECONFIG)
    # check mode: the node labels and the apply are dry runs, the reads are reads
    r = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", INVENTORY, "-e", "@" + VARS,
                        "--check", str(play)], env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    got = json.loads(out.read_text())
    count = len(core.list_node().items)
    cms = len(core.list_namespaced_config_map(NS).items)
    assert count > 4 and cms > 3
    labels = got["labels"]
    assert labels["requests"]["read"] == -(-count // 2), labels
    assert labels["planned"] == len(ALL) and labels["missing"] == []
    paged, whole = got["paged"], got["whole"]
    for key in ("nodes", "meta", "cms"):
        assert [o["metadata"]["name"] for o in paged["reads"][key]["resources"]] == \
            [o["metadata"]["name"] for o in whole["reads"][key]["resources"]], key
    assert len(whole["reads"]["nodes"]["resources"]) == count
    assert whole["requests"] == 3
    assert paged["requests"] == 2 * -(-count // 3) + -(-cms // 3), (paged["requests"], count, cms)
    # k8s_bulk_apply: one LIST for the two ConfigMaps, a request per ConfigMap of the namespace; a dry run
    applied = got["applied"]
    assert applied["requests"] == {"read": cms, "apply": 2}, applied
    assert sorted(applied["created"]) == ["ConfigMap/gpu-operator/gpuops-lab-pages-a", "ConfigMap/gpu-operator/gpuops-lab-pages-b"]
    assert not any(c.metadata.name.startswith("gpuops-lab-pages-") for c in core.list_namespaced_config_map(NS).items)


def test_schema_validation_refuses_unknown_fields(tmp_path):
    """gpuops_k8s_validate (on in vars.yml): a manifest with a field its schema lacks is refused
    client-side, before the object reaches the API server."""
    ds_before = apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", NS)
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump({"device_plugin_resources": {"limitz": {"cpu": "1"}},
                                   "gpuops_cluster_components": ["device_plugin"]}))
    r = playbook("-e", f"@{bad}", check=False)
    assert r.returncode != 0
    assert "DaemonSet nvidia-device-plugin-daemonset: resource definition validation error" in r.stdout, r.stdout[-4000:]
    assert "limitz" in r.stdout
    ds_after = apps.read_namespaced_daemon_set("nvidia-device-plugin-daemonset", NS)
    assert ds_after.metadata.resource_version == ds_before.metadata.resource_version


GRAFANA_DASHBOARD_CRD = os.path.join(ROOT, "tests", "unit", "fixtures", "grafana-operator",
                                     "grafana.integreatly.org_grafanadashboards.yaml")


def test_dcgm_exporter_dashboard_modes(tmp_path):
    """Dashboard 12239 by reference: grafana-operator without its CRD is skipped with a message;
    with the real GrafanaDashboard CRD (grafana-operator v5.24.0 schema) a CR with spec.grafanaCom
    is applied; configmap with a supplied JSON replaces it; none removes what an earlier mode left."""
    custom = client.CustomObjectsApi()

    def run(name, **extra):
        f = tmp_path / f"{name}.yml"
        f.write_text(yaml.safe_dump(dict({"gpuops_cluster_components": ["dcgm_exporter"]}, **extra)))
        return playbook("-e", f"@{f}")

    def dashboard_cm():
        return core.list_namespaced_config_map(NS, field_selector="metadata.name=nvidia-dcgm-exporter-dashboard").items

    def dashboard_cr():
        try:
            return custom.get_namespaced_custom_object("grafana.integreatly.org", "v1beta1", NS, "grafanadashboards",
                                                       "nvidia-dcgm-exporter")
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise

    r = run("no-crd", dcgm_exporter_dashboard="grafana-operator")
    # the YAML callback folds long messages: compare with whitespace collapsed
    assert "(grafanadashboards.grafana.integreatly.org) is not installed" in " ".join(r.stdout.split()), r.stdout[-4000:]
    assert dashboard_cm() == []

    with open(GRAFANA_DASHBOARD_CRD) as f:
        body = yaml.safe_load(f)
    ensure_crd(body)

    run("operator", dcgm_exporter_dashboard="grafana-operator")
    cr = dashboard_cr()
    assert cr["spec"]["grafanaCom"] == {"id": 12239, "revision": 2}
    assert cr["spec"]["instanceSelector"] == {"matchLabels": {"dashboards": "grafana"}}
    assert cr["spec"]["datasources"] == [{"inputName": "DS_PROMETHEUS", "datasourceName": "Prometheus"}]
    assert cr["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuops.nvidia"

    dash = tmp_path / "12239.json"  # what an air-gapped site downloads from grafana.com beforehand
    dash.write_text(json.dumps({"uid": "Oxed_c6Wz", "gnetId": 12239, "title": "NVIDIA DCGM Exporter Dashboard",
                                "panels": [{"datasource": "${DS_PROMETHEUS}", "targets": [
                                    {"expr": "DCGM_FI_DEV_GPU_UTIL"}]}]}))
    run("configmap", dcgm_exporter_dashboard="configmap", dcgm_exporter_dashboard_json=str(dash))
    cm = dashboard_cm()
    assert len(cm) == 1 and cm[0].metadata.labels["grafana_dashboard"] == "1"
    model = json.loads(cm[0].data["dcgm-exporter-dashboard.json"])
    assert model["uid"] == "Oxed_c6Wz" and model["panels"][0]["datasource"] == "Prometheus"
    assert dashboard_cr() is None  # the other mode's object is gone

    run("by-id", dcgm_exporter_dashboard="configmap")
    assert dashboard_cm()[0].data == {
        "dcgm-exporter-dashboard.json.url": "https://grafana.com/api/dashboards/12239/revisions/2/download"}

    run("none", dcgm_exporter_dashboard="none")
    assert dashboard_cm() == [] and dashboard_cr() is None


def test_changing_workload_moves_components(tmp_path):
    def move(h):
        h["l40s-0"]["gpu_workload"] = "vm-passthrough"
        h["pt-1"]["gpu_workload"] = "container"
    inv = inventory_variant(tmp_path, "moved", move)
    playbook(inventory=inv)
    container_gpu = (CONTAINER_GPU - {"l40s-0"}) | {"pt-1"}
    passthrough = (PASSTHROUGH - {"pt-1"}) | {"l40s-0"}
    check_cluster(container_gpu, passthrough, MIG_CAPABLE_CONTAINER)
    validated = {n for n, o in nodes().items() if o.metadata.labels.get("nvidia.com/gpu.validated") == "true"}
    assert validated == container_gpu
    jobs, _ = validation_jobs()  # l40s-0's Job deleted, pt-1 validated
    assert set(jobs) == container_gpu and all(done for _, done in jobs.values()), jobs


def test_helm_path_with_local_chart():
    chart = os.path.join(HERE, "charts", "gpu-operator")
    extra = ["-e", "gpuops_cluster_mode=operator", "-e", "gpuops_k8s_namespace=gpu-operator-helm",
             "-e", f"gpu_operator_chart_ref={chart}"]
    r = playbook(*extra)
    cm = core.read_namespaced_config_map("gpu-operator-received-values", "gpu-operator-helm")
    values = json.loads(cm.data["values.json"])
    assert values["driver"]["enabled"] is False and values["toolkit"]["enabled"] is False
    assert values["sandboxWorkloads"]["enabled"] is True  # the spec has VM nodes
    assert values["mig"]["strategy"] == "single"
    assert values["devicePlugin"]["repository"] == "registry.lab.internal:5000/nvidia"
    assert values["operator"]["imagePullSecrets"] == ["lab-mirror"]
    assert sorted(values["devicePlugin"]["config"]["data"]) == ["default", "mps-2", "time-sliced-4"]
    assert apps.read_namespaced_deployment("gpu-operator", "gpu-operator-helm").status.ready_replicas == 1
    r = playbook(*extra)
    assert recap_changed(r.stdout).get("localhost") == 0, r.stdout[-3000:]
    playbook(*(extra + ["-e", "gpuops_cluster_state=absent", "-e", "gpuops_cluster_mode=operator"]))
    assert core.list_namespace(field_selector="metadata.name=gpu-operator-helm").items == []


def test_psa_labels_let_the_components_pods_into_a_namespace_held_to_baseline():
    """Pod Security Admission is on in the lane's API server: with the namespace held to baseline (an admin's
    label), a pod like the components' (privileged, host paths) is refused; gpuops_k8s_namespace_psa labels the
    namespace privileged as the GPU Operator's psa.enabled does, and the same pod is admitted."""
    psa = "pod-security.kubernetes.io/"
    core.patch_namespace(NS, {"metadata": {"labels": {psa + "enforce": "baseline"}}})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "psa-probe"},
           "spec": {"nodeName": "none", "containers": [{
               "name": "c", "image": "busybox", "securityContext": {"privileged": True},
               "volumeMounts": [{"name": "sys", "mountPath": "/sys"}]}],
               "volumes": [{"name": "sys", "hostPath": {"path": "/sys"}}]}}
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(NS, pod, dry_run="All")
    assert refused.value.status == 403 and "violates PodSecurity" in refused.value.body, refused.value.body
    playbook("-e", "gpuops_k8s_namespace_psa=true")
    labels = core.read_namespace(NS).metadata.labels
    assert {k: v for k, v in labels.items() if k.startswith(psa)} == {
        psa + "enforce": "privileged", psa + "audit": "privileged", psa + "warn": "privileged"}, labels
    core.create_namespaced_pod(NS, pod, dry_run="All")   # admitted: nothing raised


def test_uninstall_removes_everything(baseline):
    playbook("-e", "gpuops_cluster_state=absent")
    assert core.list_namespace(field_selector=f"metadata.name={NS}").items == []
    assert core.list_namespace(field_selector="metadata.name=team-a").items == []
    rbac = client.RbacAuthorizationV1Api()
    assert rbac.list_cluster_role(label_selector=MANAGED).items == []
    assert rbac.list_cluster_role_binding(label_selector=MANAGED).items == []
    assert client.NodeV1Api().list_runtime_class(label_selector=MANAGED).items == []
    assert client.SchedulingV1Api().list_priority_class(label_selector=MANAGED).items == []
    assert client.ApiextensionsV1Api().list_custom_resource_definition(label_selector=MANAGED).items == []
    assert apps.list_daemon_set_for_all_namespaces(label_selector=MANAGED).items == []
    assert core.list_pod_for_all_namespaces(label_selector=MANAGED).items == []
    now = {name: (dict(n.metadata.labels), n.spec.taints) for name, n in nodes().items()}
    assert now == baseline


def test_check_mode_on_an_empty_cluster_changes_nothing_and_shows_the_diff(baseline):
    """After the uninstall: --check --diff reports what an install would create (the queued components'
    objects, in a namespace that does not exist yet, are reported as created) and creates nothing."""
    r = playbook("--check", "--diff", "-e", "gpuops_k8s_validate=false")  # the queued path (see below)
    changed = recap_changed(r.stdout)
    assert changed.get("localhost", 0) > 0, changed
    assert "DaemonSet/%s/nvidia-device-plugin-daemonset" % NS in r.stdout  # the diff names the objects
    assert core.list_namespace(field_selector=f"metadata.name={NS}").items == []
    assert apps.list_daemon_set_for_all_namespaces(label_selector=MANAGED).items == []
    assert client.NodeV1Api().list_runtime_class(label_selector=MANAGED).items == []
    now = {name: (dict(n.metadata.labels), n.spec.taints) for name, n in nodes().items()}
    assert now == baseline
