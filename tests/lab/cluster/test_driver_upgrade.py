# SPDX-License-Identifier: Apache-2.0
"""Rolling driver upgrade (playbooks/driver_upgrade.yml, issue 12 part 3) on the cluster lane.

Own KWOK nodes (upg-0..upg-4, label gpuops.lab/upgrade=true; the lane's other nodes are left alone),
workloads on them (a DaemonSet, one pinned Deployment per node, a Deployment under a
PodDisruptionBudget), and the lab's stand-ins for the driver and validation steps
(tests/lab/cluster/upgrade/*.yml, connection local). Every ordering and concurrency fact is read from
the API server's own audit log ($CLUSTER_DIR/logs/audit.log, policy CLUSTER_AUDIT=lane in up.sh):
cordon/uncordon are the Node patches that set spec.unschedulable, evictions are pods/eviction creates,
the driver step is the Node patch with the gpuops.lab/driver-step annotation.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import time
import uuid

import pytest
import yaml
from kubernetes import client, config

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
CLUSTER_DIR = os.environ["CLUSTER_DIR"]
KUBECONFIG = os.path.join(CLUSTER_DIR, "kubeconfig")
AUDIT_LOG = os.path.join(CLUSTER_DIR, "logs", "audit.log")
PLAYBOOK = os.path.join(ROOT, "playbooks", "driver_upgrade.yml")
DRIVER_TASKS = os.path.join(HERE, "upgrade", "driver.yml")
VALIDATE_TASKS = os.path.join(HERE, "upgrade", "validate.yml")
VMI_CRD = os.path.join(HERE, "upgrade", "kubevirt-vmi-crd.yml")
NS = "upgrade-lab"
LABEL = "gpuops.lab/upgrade"
STATE = "nvidia.com/gpu-driver-upgrade-state"
FAILURE = "gpuops.nvidia/driver-upgrade-failure"
NODES = [f"upg-{i}" for i in range(5)]
VM_NODE = "upg-4"

config.load_kube_config(KUBECONFIG)
core = client.CoreV1Api()
apps = client.AppsV1Api()
policy = client.PolicyV1Api()
custom = client.CustomObjectsApi()


# -- the API server's records ------------------------------------------------------------------------

def _ts(text):
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def audit(since):
    """Audit events (ResponseComplete) received at or after `since` (aware datetime), in arrival order."""
    out = []
    with open(AUDIT_LOG) as f:
        for line in f:
            ev = json.loads(line)
            if ev.get("stage") != "ResponseComplete":
                continue
            ev["_t"] = _ts(ev["requestReceivedTimestamp"])
            if ev["_t"] >= since:
                out.append(ev)
    out.sort(key=lambda e: e["_t"])
    return out


def ok(ev):
    return 200 <= ((ev.get("responseStatus") or {}).get("code") or 0) < 300


def node_patches(events, node=None):
    return [e for e in events if (e.get("objectRef") or {}).get("resource") == "nodes"
            and not (e.get("objectRef") or {}).get("subresource") and e["verb"] in ("patch", "update")
            and (node is None or e["objectRef"].get("name") == node)]


def unschedulable(ev):
    """True/False when this Node write sets spec.unschedulable, else None."""
    spec = (ev.get("requestObject") or {}).get("spec") or {}
    return spec.get("unschedulable") if "unschedulable" in spec else None


def cordon_timeline(events):
    """[(time, node, True=cordon/False=uncordon)] of successful writes of spec.unschedulable."""
    return [(e["_t"], e["objectRef"]["name"], unschedulable(e)) for e in node_patches(events)
            if unschedulable(e) is not None and ok(e)]


def max_cordoned(events, initially=()):
    cordoned, peak = set(initially), len(initially)
    for _, node, on in cordon_timeline(events):
        (cordoned.add if on else cordoned.discard)(node)
        peak = max(peak, len(cordoned))
    return peak


def evictions(events):
    return [e for e in events if (e.get("objectRef") or {}).get("subresource") == "eviction" and e["verb"] == "create"]


def driver_steps(events, node):
    return [e for e in node_patches(events, node) if "gpuops.lab/driver-step" in
            (((e.get("requestObject") or {}).get("metadata") or {}).get("annotations") or {})]


def events_of(events, node, pods_on_node):
    """Per node: the times of its cordon, its pods' evictions, its driver step and its uncordon."""
    tl = [(t, on) for t, n, on in cordon_timeline(events) if n == node]
    return {
        "cordon": [t for t, on in tl if on],
        "uncordon": [t for t, on in tl if not on],
        "evict": [e["_t"] for e in evictions(events) if e["objectRef"]["name"] in pods_on_node and ok(e)],
        "driver": [e["_t"] for e in driver_steps(events, node) if ok(e)],
    }


# -- the lab -------------------------------------------------------------------------------------------

def node_object(name):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "type": "kwok", LABEL: "true"}},
            "status": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                       "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}}}


def pod_template(app, node_selector):
    return {"metadata": {"labels": {"app": app}},
            "spec": {"nodeSelector": node_selector, "terminationGracePeriodSeconds": 0,
                     "tolerations": [{"operator": "Exists", "effect": "NoExecute", "key": "node.kubernetes.io/unreachable"}],
                     "containers": [{"name": "c", "image": "registry.lab.internal:5000/pause:3.10"}]}}


def wait(what, fn, timeout=60, interval=0.5):
    deadline = time.time() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(interval)


def pods(selector=None):
    return [p for p in core.list_namespaced_pod(NS, label_selector=selector).items if p.metadata.deletion_timestamp is None]


def pods_by_node():
    out = {}
    for p in pods():
        if p.spec.node_name:
            out.setdefault(p.spec.node_name, set()).add(p.metadata.name)
    return out


def running(p):
    return p.status.phase == "Running" and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])


def settle():
    """Every workload pod scheduled and Ready (KWOK) and the PDB's status current."""
    def done():
        ps = pods()
        if not ps or not all(p.spec.node_name and running(p) for p in ps):
            return False
        ds = apps.read_namespaced_daemon_set("lab-ds", NS).status
        pdb = policy.read_namespaced_pod_disruption_budget("pdb-app", NS).status
        return ds.number_ready == ds.desired_number_scheduled == len(NODES) and pdb.current_healthy == 2 \
            and pdb.disruptions_allowed == 1
    wait("workload pods Ready", done, timeout=90)


def reset_nodes():
    """Uncordoned, no upgrade label or annotation: each test starts from the same nodes."""
    for n in NODES:
        core.patch_node(n, {"spec": {"unschedulable": None},
                            "metadata": {"labels": {STATE: None}, "annotations": {FAILURE: None, "gpuops.lab/driver-step": None}}})


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    ext = client.ApiextensionsV1Api()
    with open(VMI_CRD) as f:
        crd = yaml.safe_load(f)
    try:
        ext.create_custom_resource_definition(crd)
    except client.ApiException as e:
        if e.status != 409:
            raise
    for n in NODES:
        try:
            core.create_node(node_object(n))
        except client.ApiException as e:
            if e.status != 409:
                raise
    wait(f"namespace {NS} of an earlier run gone",  # a kept cluster: the last teardown may still be running
         lambda: not core.list_namespace(field_selector=f"metadata.name={NS}").items, timeout=120)
    try:
        core.create_namespace({"metadata": {"name": NS}})
    except client.ApiException as e:
        if e.status != 409:
            raise
    sel = {LABEL: "true"}
    # an emptyDir, as NVIDIA's device plugin and GFD pods have (config-manager's config directory): a DaemonSet pod
    # stays on a drained node whatever its volumes
    ds_template = pod_template("lab-ds", sel)
    ds_template["spec"]["volumes"] = [{"name": "config", "emptyDir": {}}]
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "lab-ds"},
          "spec": {"selector": {"matchLabels": {"app": "lab-ds"}}, "template": ds_template}}
    apps.create_namespaced_daemon_set(NS, ds)
    for n in NODES[:4]:  # one pinned pod per node: evicted, it waits (Pending) until its node is back
        dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"app-{n}"},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": f"app-{n}"}},
                        "template": pod_template(f"app-{n}", {"kubernetes.io/hostname": n})}}
        apps.create_namespaced_deployment(NS, dep)
    pdb_dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "pdb-app"},
               "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "pdb-app"}},
                        "template": pod_template("pdb-app", {LABEL: "true", "gpuops.lab/vm-host": "false"})}}
    for n in NODES:
        core.patch_node(n, {"metadata": {"labels": {"gpuops.lab/vm-host": str(n == VM_NODE).lower()}}})
    apps.create_namespaced_deployment(NS, pdb_dep)
    policy.create_namespaced_pod_disruption_budget(NS, {
        "metadata": {"name": "pdb-app"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "pdb-app"}}}})
    wait("KWOK nodes Ready", lambda: all(
        any(c.type == "Ready" and c.status == "True" for c in (core.read_node(n).status.conditions or []))
        for n in NODES), timeout=60)
    settle()

    d = tmp_path_factory.mktemp("upgrade")
    # driver_branch as an inventory sets it: what a launch that leaves the branch empty must keep
    hosts = {n: {"ansible_connection": "local", "driver_branch": "580"} for n in NODES}
    inv = {"all": {"vars": {"gpuops_kubeconfig": KUBECONFIG, "ansible_python_interpreter": os.path.join(ROOT, ".venv", "bin", "python")},
                   "children": {"k8s_gpu_nodes": {"hosts": hosts},
                                "k8s_control": {"hosts": {"localhost": {"ansible_connection": "local"}}}}}}
    (d / "inventory.yml").write_text(yaml.safe_dump(inv))
    yield {"inventory": str(d / "inventory.yml"), "dir": d}
    core.delete_namespace(NS)
    for n in NODES:
        core.delete_node(n)
    ext.delete_custom_resource_definition(crd["metadata"]["name"])


def upgrade(lab, *extra, hosts=NODES[:4], **vars_):
    """Run the playbook; returns (result, audit window start)."""
    base = {"gpu_upgrade_hosts": ",".join(hosts), "gpu_upgrade_driver_tasks": DRIVER_TASKS,
            "gpu_upgrade_validate_tasks": VALIDATE_TASKS, "gpu_upgrade_become": False,
            "gpu_upgrade_drain_retry_delay": 1, "gpu_upgrade_drain_timeout": 30,
            "gpu_upgrade_test_run": uuid.uuid4().hex[:8]}
    base.update(vars_)
    vf = lab["dir"] / f"vars-{base['gpu_upgrade_test_run']}.yml"
    vf.write_text(yaml.safe_dump(base))
    cmd = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", lab["inventory"], PLAYBOOK,
           "-e", f"@{vf}"] + list(extra)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.environ.get(
                   "ANSIBLE_COLLECTIONS_PATH", os.path.join(ROOT, ".collections")),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    since = dt.datetime.now(dt.timezone.utc) - dt.timedelta(milliseconds=5)
    t0 = time.time()
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    r.seconds = time.time() - t0
    print(f"driver_upgrade.yml on {','.join(hosts)}: rc={r.returncode} in {r.seconds:.1f}s")
    return r, since


def out(r):
    return " ".join((r.stdout + r.stderr).split())


def label(node):
    return (core.read_node(node).metadata.labels or {}).get(STATE)


# -- proofs ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value,why", [(0, "0 or fewer"), (-1, "0 or fewer"), ("150%", "more than 100%"),
                                       ("abc", "not a number")])
def test_bad_max_unavailable_refused_before_any_change(lab, value, why):
    r, since = upgrade(lab, "-e", json.dumps({"gpu_upgrade_max_unavailable": value}))
    assert r.returncode != 0
    text = out(r)
    assert "gpu_upgrade_max_unavailable must be a count >= 1 or a percent in 1%..100%" in text, text[-3000:]
    assert why in text
    assert node_patches(audit(since)) == [] and evictions(audit(since)) == []
    assert all(not core.read_node(n).spec.unschedulable and label(n) is None for n in NODES)


@pytest.mark.parametrize("answer,batch", [("", 2), ("  ", 2), ("3", 3)])
def test_batch_size_is_the_inventorys_unless_the_launch_answers(lab, answer, batch):
    """AWX's survey sets gpu_upgrade_launch_max_unavailable: a blank answer keeps the inventory's
    gpu_upgrade_max_unavailable (2 here, as the ClusterPolicy import writes it into group_vars/all), an answer
    replaces it for this rollout; the plan's batches and the rollout play's serial both follow it."""
    extra = lab["dir"] / "max-unavailable.yml"
    extra.write_text(yaml.safe_dump({"all": {"vars": {"gpu_upgrade_max_unavailable": 2}}}))
    r, since = upgrade(lab, "-i", str(extra), gpu_upgrade_plan_only=True, gpu_upgrade_launch_max_unavailable=answer)
    assert r.returncode == 0, out(r)[-3000:]
    text = out(r)
    assert re.search(r"max_unavailable['\"]?: ['\"]?%d\b" % batch, text), text[-3000:]
    assert node_patches(audit(since)) == [] and evictions(audit(since)) == []


@pytest.mark.parametrize("value", ["app=x", {"app": "x"}, ["app=x", 3]])
def test_pod_selectors_not_a_list_of_selectors_refused_before_any_change(lab, value):
    r, since = upgrade(lab, "-e", json.dumps({"gpu_upgrade_drain_pod_selectors": value}))
    assert r.returncode != 0
    assert "gpu_upgrade_drain_pod_selectors a list of label selectors" in out(r), out(r)[-3000:]
    assert node_patches(audit(since)) == [] and evictions(audit(since)) == []


def test_rolling_upgrade_two_at_a_time_in_order(lab):
    """4 nodes, max_unavailable 50%: per node cordon -> evictions -> driver step -> uncordon; never more
    than 2 nodes cordoned at once (and 2 at some point: batches really ran in parallel); DaemonSet pods
    never evicted; the PDB-covered pods left through the eviction API only; every node upgrade-done."""
    reset_nodes()
    settle()
    before = pods_by_node()
    ds_pods = {p.metadata.name for p in pods("app=lab-ds")}
    pdb_pods = {p.metadata.name: p.spec.node_name for p in pods("app=pdb-app")}
    # AWX passes an empty survey answer as '': the inventory's driver_branch (580) reaches the driver step
    r, since = upgrade(lab, gpu_upgrade_max_unavailable="50%", gpu_upgrade_driver_branch="",
                       gpu_upgrade_driver_version="")
    assert r.returncode == 0, r.stdout[-6000:]
    for n in NODES[:4]:
        ann = core.read_node(n).metadata.annotations
        assert (ann["gpuops.lab/driver-branch"], ann["gpuops.lab/driver-version"]) == ("580", ""), (n, ann)
    ev = audit(since)
    for n in NODES[:4]:
        e = events_of(ev, n, before.get(n, set()))
        assert len(e["cordon"]) == 1 and len(e["uncordon"]) == 1 and len(e["driver"]) == 1, (n, e)
        assert len(e["evict"]) >= 1, (n, before.get(n))
        assert e["cordon"][0] < min(e["evict"]) <= max(e["evict"]) < e["driver"][0] < e["uncordon"][0], (n, e)
        node = core.read_node(n)
        assert not node.spec.unschedulable and node.metadata.labels[STATE] == "upgrade-done"
    assert max_cordoned(ev) == 2
    # the VM node was not in this rollout: not written at all
    assert node_patches(ev, VM_NODE) == []
    # label states, in the operator's order, from the Node patches
    states = [((e.get("requestObject") or {}).get("metadata") or {}).get("labels", {}).get(STATE)
              for e in node_patches(ev, "upg-0")]
    assert [s for s in states if s] == ["cordon-required", "drain-required", "pod-restart-required",
                                        "validation-required", "uncordon-required", "upgrade-done"]
    evicted = {e["objectRef"]["name"] for e in evictions(ev)}
    assert not evicted & ds_pods
    on_upgraded = {p for p, n in pdb_pods.items() if n in NODES[:4]}
    assert on_upgraded and on_upgraded <= evicted
    client_deletes = [e for e in ev if e["verb"] == "delete" and (e.get("objectRef") or {}).get("resource") == "pods"
                      and "kwok" not in e.get("userAgent", "") and "kube-controller-manager" not in e.get("userAgent", "")]
    assert client_deletes == []  # pods left through evictions only, never a direct delete
    print(f"rollout of 4 nodes, 2 at a time: {r.seconds:.1f}s")


def test_validation_failure_on_second_node_stops_the_rollout(lab):
    reset_nodes()
    settle()
    hosts = ["upg-0", "upg-1", "upg-2"]
    # a launch that names the branch and version: they replace the inventory's for this rollout
    r, since = upgrade(lab, hosts=hosts, gpu_upgrade_max_unavailable=1, gpu_upgrade_test_fail_validate=["upg-1"],
                       gpu_upgrade_driver_branch="590", gpu_upgrade_driver_version="590.48.01")
    assert r.returncode != 0
    ann = core.read_node("upg-0").metadata.annotations
    assert (ann["gpuops.lab/driver-branch"], ann["gpuops.lab/driver-version"]) == ("590", "590.48.01"), ann
    text = out(r)
    assert 'driver upgrade stopped: node upg-1 failed at step "validate"' in text, text[-4000:]
    assert "lab validation failed on purpose on upg-1" in text
    assert "not reached (untouched): upg-2" in text and "upgraded: upg-0" in text
    ev = audit(since)
    assert node_patches(ev, "upg-2") == []  # never cordoned, never labelled
    assert [on for _, n, on in cordon_timeline(ev) if n == "upg-1"] == [True]  # cordoned, never uncordoned
    assert max_cordoned(ev) == 1
    n1 = core.read_node("upg-1")
    assert n1.spec.unschedulable and n1.metadata.labels[STATE] == "upgrade-failed"
    assert n1.metadata.annotations[FAILURE].startswith("validate: lab validation failed on purpose on upg-1")
    assert label("upg-0") == "upgrade-done" and not core.read_node("upg-0").spec.unschedulable
    assert label("upg-2") is None and not core.read_node("upg-2").spec.unschedulable


def test_pdb_that_allows_no_disruption_fails_the_drain(lab):
    """A PodDisruptionBudget with disruptionsAllowed 0: every eviction is refused (429), the drain retries
    until gpu_upgrade_drain_timeout, then the node fails at step drain, cordoned, the pod still running."""
    reset_nodes()
    settle()
    solo = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "solo"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "solo"}},
                     "template": pod_template("solo", {"kubernetes.io/hostname": "upg-3"})}}
    apps.create_namespaced_deployment(NS, solo)
    policy.create_namespaced_pod_disruption_budget(NS, {
        "metadata": {"name": "solo"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "solo"}}}})
    wait("solo pod Ready and its PDB current", lambda: [p for p in pods("app=solo") if running(p)] and
         policy.read_namespaced_pod_disruption_budget("solo", NS).status.current_healthy == 1)
    solo_pod = pods("app=solo")[0].metadata.name
    try:
        r, since = upgrade(lab, hosts=["upg-3"], gpu_upgrade_drain_timeout=4)
        assert r.returncode != 0
        text = out(r)
        assert 'node upg-3 failed at step "drain"' in text, text[-4000:]
        assert "disruption budget" in text
        refused = [e for e in evictions(audit(since)) if e["objectRef"]["name"] == solo_pod]
        assert len(refused) >= 2 and all(e["responseStatus"]["code"] == 429 for e in refused)
        assert [p.metadata.name for p in pods("app=solo")] == [solo_pod]
        n3 = core.read_node("upg-3")
        assert n3.spec.unschedulable and n3.metadata.labels[STATE] == "upgrade-failed"
        assert driver_steps(audit(since), "upg-3") == []  # never reached the driver step
    finally:
        policy.delete_namespaced_pod_disruption_budget("solo", NS)
        apps.delete_namespaced_deployment("solo", NS)


def test_vm_with_host_devices_blocks_eviction_unless_evict_vms(lab):
    vmi = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
           "metadata": {"name": "gpu-vm", "namespace": NS, "labels": {"kubevirt.io/nodeName": VM_NODE}},
           "spec": {"domain": {"devices": {"hostDevices": [{"name": "gpu0", "deviceName": "nvidia.com/GA102GL_A10"}]}}},
           "status": {"phase": "Running", "nodeName": VM_NODE}}
    migratable = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                  "metadata": {"name": "plain-vm", "namespace": NS},
                  "spec": {"domain": {"devices": {"disks": [{"name": "root"}]}}},
                  "status": {"phase": "Running", "nodeName": VM_NODE}}
    reset_nodes()
    created = custom.create_namespaced_custom_object("kubevirt.io", "v1", NS, "virtualmachineinstances", vmi)
    custom.create_namespaced_custom_object("kubevirt.io", "v1", NS, "virtualmachineinstances", migratable)
    launcher = {"metadata": {"name": "virt-launcher-gpu-vm", "labels": {"kubevirt.io": "virt-launcher"},
                             "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                                  "name": "gpu-vm", "uid": created["metadata"]["uid"], "controller": True}]},
                "spec": {"nodeName": VM_NODE, "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "compute", "image": "registry.lab.internal:5000/virt-launcher:v1"}]}}
    core.create_namespaced_pod(NS, launcher)
    wait("virt-launcher Running", lambda: [p for p in pods("kubevirt.io=virt-launcher") if running(p)])
    settle()

    r, since = upgrade(lab, hosts=[VM_NODE])
    assert r.returncode != 0
    text = out(r)
    assert f"{VM_NODE}: not upgraded: 1 VM(s) with host devices or GPUs cannot live-migrate ({NS}/gpu-vm)" in text, \
        text[-4000:]
    assert "plain-vm" not in text.split("not upgraded:", 1)[1]
    ev = audit(since)
    assert node_patches(ev, VM_NODE) == [] and evictions(ev) == []  # untouched
    assert [p.metadata.name for p in pods("kubevirt.io=virt-launcher")] == ["virt-launcher-gpu-vm"]

    r, since = upgrade(lab, hosts=[VM_NODE], gpu_upgrade_evict_vms=True)
    assert r.returncode == 0, r.stdout[-6000:]
    ev = audit(since)
    assert "virt-launcher-gpu-vm" in {e["objectRef"]["name"] for e in evictions(ev) if ok(e)}
    e = events_of(ev, VM_NODE, {"virt-launcher-gpu-vm"})
    assert e["cordon"][0] < e["evict"][0] < e["driver"][0] < e["uncordon"][0]
    assert label(VM_NODE) == "upgrade-done"
