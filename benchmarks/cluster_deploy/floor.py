"""The API server's floor for the cluster deploy: the same objects, sent without Ansible.

``capture`` reads back, after the playbook's first run, every object the playbook wrote (the audit
log's PATCH/CREATE requests of the Python client) and keeps, per object, exactly the fields our field
managers own (server-side apply's own record, ``managedFields``), in the order the playbook sends them:

    phase 1  node labels and taints + every component object (RuntimeClass ... validator DaemonSet)
    wait     every DaemonSet and Deployment rolled out
    phase 2  the per-node validation Jobs; wait until they complete
    phase 3  the nvidia.com/gpu.validated node label

``kubectl_run`` sends each phase with ``kubectl apply --server-side`` (one process per phase, as a
person would); ``python_run`` with a bare ``kubernetes`` client loop, ``concurrency`` PATCHes at a time
(the same as the playbook's). Waits poll every second. Both run on a fresh cluster of the same spec.
"""
from __future__ import annotations

import calendar
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.gpuops.nvidia.plugins.module_utils import _k8s_bulk as kb  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.module_utils import _k8s_wait as kw  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _k8s_jobs as kj  # noqa: E402

MANAGERS = ("gpuops-nvidia", "gpuops-nvidia-validator")


def received_at(ev):
    """An audit event's requestReceivedTimestamp (2026-12-02T12:00:00.123456Z) in epoch seconds."""
    ts = ev.get("requestReceivedTimestamp", "")
    return calendar.timegm(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + ts[19:].rstrip("Z"))


def _written(audit, since, client_of):
    """Objects our client patched or created after ``since``, in first-write order."""
    seen, out = set(), []
    with open(audit) as f:
        for line in f:
            ev = json.loads(line)
            if ev.get("stage") != "ResponseComplete" or ev.get("verb") not in ("patch", "create"):
                continue
            if not client_of(ev.get("userAgent")).startswith("ansible"):
                continue
            ref = ev.get("objectRef") or {}
            if received_at(ev) < since or ref.get("subresource") or not ref.get("name"):
                continue
            key = (ref.get("apiGroup", ""), ref.get("apiVersion"), ref["resource"], ref.get("namespace"), ref["name"])
            if key not in seen and int((ev.get("responseStatus") or {}).get("code", 200)) < 300:
                seen.add(key)
                out.append(key)
    return out


def capture(kubeconfig, audit, since, client_of, out_path):
    """-> {phase1, jobs, validated}: manifests holding only the fields our managers own."""
    from kubernetes import client, config, dynamic

    config.load_kube_config(kubeconfig)
    api_client = client.ApiClient()
    api_client.user_agent = "gpuops-bench"
    dyn = dynamic.DynamicClient(api_client)
    phases = {"phase1": [], "jobs": [], "validated": []}
    for group, version, resource, ns, name in _written(audit, since, client_of):
        api_version = "%s/%s" % (group, version) if group else version
        res = next(r for r in dyn.resources.search(api_version=api_version) if r.name == resource)
        ns = ns if res.namespaced else None  # a Namespace's own audit record names it as its namespace
        try:
            live = dyn.request("get", res.path(name=name, namespace=ns), serialize=False)
        except Exception:  # noqa: BLE001 - deleted since (a replaced Job)
            continue
        live = json.loads(live.data)
        owners = [m for m in MANAGERS if any(e.get("manager") == m and e.get("operation") == "Apply"
                                             for e in live["metadata"].get("managedFields") or [])]
        # an apply that sets no field (a bare Namespace) leaves no managedFields entry: the object alone
        for manager in owners or MANAGERS[:1]:
            obj = kb.view(live, kb.owned_paths(live, manager))
            obj.update(apiVersion=live["apiVersion"], kind=live["kind"])
            obj.setdefault("metadata", {})["name"] = name
            if ns:
                obj["metadata"]["namespace"] = ns
            phase = "validated" if manager.endswith("validator") and live["kind"] == "Node" else \
                "jobs" if live["kind"] == "Job" else "phase1"
            phases[phase].append(obj)
    with open(out_path, "w") as f:
        json.dump(phases, f)
    return phases


def _clients(kubeconfig, pool=32):
    from kubernetes import client, config, dynamic

    cfg = client.Configuration()
    config.load_kube_config(kubeconfig, client_configuration=cfg)
    cfg.connection_pool_maxsize = pool
    api = client.ApiClient(configuration=cfg)
    api.user_agent = "gpuops-floor-python"
    return api, dynamic.DynamicClient(api)


def has_workloads(phases):
    """Did the playbook apply DaemonSets or Deployments (not with --components none: node labels only)?"""
    return any(o["kind"] in ("DaemonSet", "Deployment") for o in phases["phase1"])


def wait_rollouts(kubeconfig, timeout=5400):
    from kubernetes import client

    api, _ = _clients(kubeconfig)
    apps = client.AppsV1Api(api)
    deadline = time.time() + timeout
    while time.time() < deadline:
        items = []
        for kind, lister in (("DaemonSet", apps.list_daemon_set_for_all_namespaces),
                             ("Deployment", apps.list_deployment_for_all_namespaces)):
            for w in api.sanitize_for_serialization(lister(label_selector="app.kubernetes.io/managed-by=gpuops.nvidia"))["items"]:
                w["kind"] = kind
                items.append(w)
        if items and not kw.rollouts_pending(items):
            return
        time.sleep(1)
    raise SystemExit("floor: rollouts not done in %ds" % timeout)


def wait_jobs(kubeconfig, names, namespace="gpu-operator", timeout=5400):
    from kubernetes import client

    api, _ = _clients(kubeconfig)
    batch = client.BatchV1Api(api)
    deadline = time.time() + timeout
    while time.time() < deadline:
        jobs = api.sanitize_for_serialization(batch.list_namespaced_job(namespace, label_selector="app=gpuops-validation"))
        if not (lambda o: o["running"] + o["missing"])(kj.outcomes(jobs["items"], names)):
            return
        time.sleep(1)
    raise SystemExit("floor: jobs not done in %ds" % timeout)


def kubectl_run(kubeconfig, phases, work, kubectl):
    """kubectl apply --server-side per phase, with the waits between; -> seconds."""
    def apply(objs, manager, name):
        if not objs:
            return
        path = os.path.join(work, name + ".json")
        with open(path, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "List", "items": objs}, f)
        subprocess.run([kubectl, "--kubeconfig", kubeconfig, "apply", "--server-side", "--force-conflicts",
                        "--field-manager", manager, "-f", path], check=True, stdout=subprocess.DEVNULL)

    t0 = time.time()
    apply(phases["phase1"], "floor", "phase1")
    if has_workloads(phases):
        wait_rollouts(kubeconfig)
    apply(phases["jobs"], "floor", "jobs")
    wait_jobs(kubeconfig, [j["metadata"]["name"] for j in phases["jobs"]])
    apply(phases["validated"], "floor-validator", "validated")
    return time.time() - t0


def python_run(kubeconfig, phases, concurrency):
    """A bare client loop: one SSA PATCH per object, ``concurrency`` at a time; -> seconds."""
    api, dyn = _clients(kubeconfig, pool=concurrency)
    resources = {}

    def res(obj):
        key = (obj["apiVersion"], obj["kind"])
        if key not in resources:
            resources[key] = dyn.resources.get(api_version=key[0], kind=key[1])
        return resources[key]

    def apply(objs, manager):
        for o in objs:
            res(o)

        def one(o):
            r = res(o)
            dyn.server_side_apply(r, body=o, name=o["metadata"]["name"],
                                  namespace=o["metadata"].get("namespace") if r.namespaced else None,
                                  force_conflicts=True, field_manager=manager, serialize=False)
        # cluster-scoped and namespaces first (a namespaced object needs its namespace)
        first = [o for o in objs if o["kind"] in ("Namespace", "CustomResourceDefinition", "PriorityClass")]
        for batch in (first, [o for o in objs if o not in first]):
            with ThreadPoolExecutor(max_workers=concurrency) as pool:
                list(pool.map(one, batch))

    t0 = time.time()
    apply(phases["phase1"], "floor-py")
    if has_workloads(phases):
        wait_rollouts(kubeconfig)
    apply(phases["jobs"], "floor-py")
    wait_jobs(kubeconfig, [j["metadata"]["name"] for j in phases["jobs"]])
    apply(phases["validated"], "floor-py-validator")
    return time.time() - t0
