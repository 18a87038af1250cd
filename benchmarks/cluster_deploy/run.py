#!/usr/bin/env python3
"""Cluster deploy benchmark: playbooks/cluster.yml against N KWOK GPU nodes.

For each N: a fresh control plane (audit log on), N container GPU nodes (8x H100, MIG-capable),
then the playbook (first run, then a no-op rerun). The playbook itself waits for every
DaemonSet to roll out, so its wall time is "start -> every DaemonSet rolled out and every node
labelled"; the script double-checks both through the API afterwards. API requests are counted
from the apiserver audit log, split by client (our playbook vs the controllers it sets off).

    .venv/bin/python benchmarks/cluster_deploy/run.py --nodes 10 100 1000 --out results.json
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import re
import subprocess
import sys
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import floor  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LAB = os.path.join(ROOT, "tests", "lab", "cluster")
CACHE = os.environ.get("GPUOPS_CACHE", os.path.expanduser("~/.cache/gpuops"))
DIR = os.environ.get("CLUSTER_BENCH_DIR", os.path.join(CACHE, "cluster", "bench"))
PORT_BASE = os.environ.get("CLUSTER_BENCH_PORT_BASE", "26643")
WAIT_TIMEOUT = int(os.environ.get("BENCH_WAIT_TIMEOUT", "5400"))
DAEMONSETS = ["nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-dcgm-exporter",
              "nvidia-mig-manager", "nvidia-operator-validator", "nfd-worker"]


def sh(cmd, env=None, **kw):
    return subprocess.run(cmd, env=env, check=True, **kw)


def client_of(user_agent):
    ua = (user_agent or "").lower()
    for key in ("kube-controller-manager", "kube-scheduler", "kwok", "kube-apiserver"):
        if key in ua:
            return key
    if "gpuops-lab" in ua or "gpuops-bench" in ua:  # the lab's node creation, this script's own reads
        return "lab"
    if "gpuops-floor-python" in ua:
        return "floor (python client)"
    if ua.startswith("kubectl"):
        return "floor (kubectl)"
    if "openapi-generator" in ua or "python" in ua:
        return "ansible (playbook)"
    return "other"


WRITES = ("create", "update", "patch", "delete", "deletecollection")


def count_audit(path, since):
    """Requests (ResponseComplete stage) after ``since`` (epoch seconds): by client, by verb of the
    clients we measure (the playbook, the floors), and their write requests."""
    by_client, by_verb, writes = collections.Counter(), collections.Counter(), collections.Counter()
    if not os.path.exists(path):
        return {}, {}, {}, {}
    by_resource = collections.Counter()
    with open(path) as f:
        for line in f:
            ev = json.loads(line)
            if ev.get("stage") != "ResponseComplete":
                continue
            if floor.received_at(ev) < since:  # to the microsecond: a request before the run is not its
                continue
            who = client_of(ev.get("userAgent"))
            by_client[who] += 1
            if who.startswith(("ansible", "floor")):
                by_verb[ev.get("verb")] += 1
                if ev.get("verb") in WRITES:
                    writes[who] += 1
                    if who.startswith("ansible"):
                        by_resource[(ev.get("objectRef") or {}).get("resource")] += 1
    return dict(by_client), dict(by_verb), dict(writes), dict(by_resource)


LOGS = os.path.join(CACHE, "cluster", "bench-logs")


def changed_tasks(stdout):
    """Names of the tasks that reported 'changed' (the TASK header above each 'changed:' line)."""
    out, task = [], None
    for line in stdout.splitlines():
        m = re.match(r"^TASK \[(.*)\]", line)
        if m:
            task = m.group(1)
        elif line.startswith("changed:") and task and task not in out:
            out.append(task)
    return out


COMPONENTS = {
    "all": "['runtime_class','nfd','gfd','device_plugin','dcgm_exporter','mig_manager','validator']",
    # node labels and taints only: what grows with the fleet on our side, without the simulated rollout of
    # six DaemonSet pods per node (KWOK marks ~11 pods a second Ready at 5,000 nodes on two cores)
    "none": "[]",
}


def run_playbook(env, inventory, log_name, concurrency=16, components="all"):
    cmd = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", inventory,
           os.path.join(ROOT, "playbooks", "cluster.yml"),
           "-e", "gpuops_cluster_components=" + COMPONENTS[components]]
    # rollouts of thousands of pods on 2 cores outlast the roles' 600 s default waits
    cmd += ["-e", "gpuops_cluster_wait_timeout=%d" % WAIT_TIMEOUT, "-e", "gpuops_k8s_concurrency=%d" % concurrency]
    for role in ("nfd", "gfd", "device_plugin", "dcgm_exporter", "mig_manager", "validator"):
        cmd += ["-e", "%s_wait_timeout=%d" % (role, WAIT_TIMEOUT)]
    t0 = time.time()
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    dt = time.time() - t0
    os.makedirs(LOGS, exist_ok=True)
    with open(os.path.join(LOGS, log_name), "w") as f:
        f.write(r.stdout + r.stderr)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-6000:] + r.stderr[-2000:])
        raise SystemExit("playbook failed")
    changed = sum(int(m) for m in re.findall(r"changed=(\d+)", r.stdout.split("PLAY RECAP")[-1]))
    return dt, changed, changed_tasks(r.stdout)


# --mix mixed: products and workload kinds interleaved, 20 nodes a cycle (every kind among the first 10):
# 10 x 8xH100 and 4 x 8xH200 container nodes (MIG-capable), 2 x 4xL40S container nodes (no MIG), 2 A100
# vm-passthrough hosts, 1 4xA10 vm-vgpu host, 1 CPU-only node
MIX_KINDS = {
    "h100": {"gpu": {"product": "NVIDIA H100 80GB HBM3", "count": 8, "memory_mib": 81559, "mig_capable": True,
                     "compute_capability": "9.0"}, "workload": "container"},
    "h200": {"gpu": {"product": "NVIDIA H200", "count": 8, "memory_mib": 143771, "mig_capable": True,
                     "compute_capability": "9.0"}, "workload": "container"},
    "l40s": {"gpu": {"product": "NVIDIA L40S", "count": 4, "memory_mib": 46068, "mig_capable": False,
                     "compute_capability": "8.9"}, "workload": "container"},
    "a100pt": {"gpu": {"product": "NVIDIA A100 80GB PCIe", "count": 1, "memory_mib": 81920, "mig_capable": True,
                       "compute_capability": "8.0"}, "workload": "vm-passthrough"},
    "a10vgpu": {"gpu": {"product": "NVIDIA A10", "count": 4, "memory_mib": 23028, "mig_capable": False,
                        "compute_capability": "8.6"}, "workload": "vm-vgpu"},
    "cpu": {},
}
MIX_CYCLE = ["h100", "h200", "l40s", "a100pt", "h100", "h200", "a10vgpu", "h100", "cpu", "h100",
             "h100", "h200", "l40s", "a100pt", "h100", "h200", "h100", "h100", "h100", "h100"]


def mix_counts(n, mix):
    """{kind: nodes} of a spec of n nodes."""
    if mix == "uniform":
        return {"h100": n}
    counts = collections.Counter(MIX_CYCLE[i % len(MIX_CYCLE)] for i in range(n))
    return {k: counts[k] for k in MIX_KINDS if counts[k]}


def container_gpu_nodes(n, mix, mig_capable=None):
    """Container GPU nodes of the spec (only the MIG-capable ones with ``mig_capable``)."""
    return sum(c for k, c in mix_counts(n, mix).items() if MIX_KINDS[k].get("workload") == "container"
               and (mig_capable is None or MIX_KINDS[k]["gpu"]["mig_capable"] == mig_capable))


def verify(kubeconfig, n, components="all", mix="uniform"):
    from kubernetes import client, config

    config.load_kube_config(kubeconfig)
    api_client = client.ApiClient()
    api_client.user_agent = "gpuops-bench"  # this script's reads are not the playbook's (client_of)
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    gpu = container_gpu_nodes(n, mix)
    labelled = core.list_node(label_selector="nvidia.com/gpu.deploy.device-plugin=true").items
    assert len(labelled) == gpu, (len(labelled), gpu)
    if components == "none":
        return
    for ds in DAEMONSETS:
        d = apps.read_namespaced_daemon_set(ds, "gpu-operator")
        # NFD's worker runs on every node, the GPU components on the container GPU nodes (the MIG manager on
        # the MIG-capable ones)
        want = n if ds == "nfd-worker" else container_gpu_nodes(n, mix, True) if ds == "nvidia-mig-manager" else gpu
        assert d.status.desired_number_scheduled == want == d.status.number_ready, (ds, want, d.status)
    validated = core.list_node(label_selector="nvidia.com/gpu.validated=true").items
    assert len(validated) == gpu, (len(validated), gpu)  # every container GPU node's validation Job completed


def fresh_cluster(n, env, mix="uniform"):
    """A new control plane with N KWOK GPU nodes, all Ready; -> (up seconds, ready seconds, core API)."""
    sh([os.path.join(LAB, "down.sh"), "--purge"], env=env)
    os.makedirs(DIR, exist_ok=True)
    spec = os.path.join(DIR, "..", "bench-spec-%d-%s.yml" % (n, mix))
    nodes = [dict(MIX_KINDS[kind], name="%s-{i}" % kind, count=count) for kind, count in mix_counts(n, mix).items()]
    with open(spec, "w") as f:
        yaml.safe_dump({"nodes": nodes}, f)
    t0 = time.time()
    sh([os.path.join(LAB, "up.sh"), spec], env=env)
    up_s = time.time() - t0
    from kubernetes import client, config

    config.load_kube_config(os.path.join(DIR, "kubeconfig"))
    api_client = client.ApiClient()
    api_client.user_agent = "gpuops-bench"
    core = client.CoreV1Api(api_client)
    deadline = time.time() + 600
    while time.time() < deadline:
        ready = sum(1 for x in core.list_node().items
                    if any(c.type == "Ready" and c.status == "True" for c in x.status.conditions or []))
        if ready >= n:
            break
        time.sleep(1)
    return up_s, time.time() - t0, core


def requests_since(audit, since, n):
    time.sleep(3)  # audit batch flush
    by_client, by_verb, writes, by_resource = count_audit(audit, since)
    return {"by_client": by_client, "by_verb": by_verb, "writes": writes, "playbook_writes_by_resource": by_resource,
            "per_node": {k: round(v / n, 2) for k, v in by_client.items() if k.startswith(("ansible", "floor"))}}


def one(n, keep, floors, concurrency, components="all", mix="uniform", floor_only=False):
    env = dict(os.environ, GPUOPS_CACHE=CACHE, CLUSTER_DIR=DIR, CLUSTER_PORT_BASE=PORT_BASE, CLUSTER_AUDIT="1",
               PYTHON=os.path.join(ROOT, ".venv", "bin", "python"))
    kubeconfig = os.path.join(DIR, "kubeconfig")
    inventory = os.path.join(DIR, "inventory.yml")
    audit = os.path.join(DIR, "logs", "audit.log")
    penv = dict(env, ANSIBLE_COLLECTIONS_PATH=os.environ.get("ANSIBLE_COLLECTIONS_PATH", os.path.join(ROOT, ".collections")),
                ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), K8S_AUTH_KUBECONFIG=kubeconfig,
                PATH=os.path.join(CACHE, "cluster", "bin") + os.pathsep + os.environ["PATH"])
    tag = "%d-%s%s" % (n, mix, "" if components == "all" else "-" + components)
    objects = os.path.join(os.path.dirname(DIR), "floor-objects-%s.json" % tag)
    if floor_only:
        # the floors alone, from the objects an earlier run of the same spec wrote (a run on a machine that
        # allows 10 minutes a command measures the playbook and the floors of a large fleet in separate calls)
        if not os.path.exists(objects):
            raise SystemExit("--floor-only: no %s (run the playbook at this size and mix first)" % objects)
        with open(objects) as f:
            phases = json.load(f)
        result = {"nodes": n, "components": components, "mix": mix_counts(n, mix), "floor_only": True,
                  "objects": {k: len(v) for k, v in phases.items()}}
        return floor_runs(result, n, env, kubeconfig, audit, phases, floors, concurrency, components, mix, keep)
    up_s, nodes_ready_s, core = fresh_cluster(n, env, mix)
    start = time.time()
    first_s, first_changed, _ = run_playbook(penv, inventory, "first-%s.log" % tag, concurrency, components)
    verify(kubeconfig, n, components, mix)
    first_req = requests_since(audit, start, n)
    phases = floor.capture(kubeconfig, audit, start, client_of, objects)
    start2 = time.time()
    second_s, second_changed, second_tasks = run_playbook(penv, inventory, "rerun-%s.log" % tag, concurrency, components)
    not_ready = [x.metadata.name for x in core.list_node().items
                 if not any(c.type == "Ready" and c.status == "True" for c in x.status.conditions or [])]
    second_req = requests_since(audit, start2, n)
    result = {
        "nodes": n, "components": components, "mix": mix_counts(n, mix), "cluster_up_s": round(up_s, 1), "nodes_ready_s": round(nodes_ready_s, 1),
        "objects": {k: len(v) for k, v in phases.items()},
        "first_run_s": round(first_s, 1), "first_run_changed_tasks": first_changed,
        "first_run_requests": first_req,
        "rerun_s": round(second_s, 1), "rerun_changed_tasks": second_changed,
        "rerun_changed_task_names": second_tasks, "nodes_not_ready_after_rerun": len(not_ready),
        "rerun_requests": second_req,
    }
    print("partial: " + json.dumps(result), file=sys.stderr, flush=True)  # a 5,000-node run takes an hour
    return floor_runs(result, n, env, kubeconfig, audit, phases, floors, concurrency, components, mix, keep)


def floor_runs(result, n, env, kubeconfig, audit, phases, floors, concurrency, components, mix, keep):
    """Each floor on a fresh cluster of the same spec: first run and rerun, their requests, the ratios."""
    kubectl = os.path.join(CACHE, "cluster", "bin", "kubectl")
    for name in floors:
        fresh_cluster(n, env, mix)
        work = os.path.join(DIR, "..", "floor-work")
        os.makedirs(work, exist_ok=True)
        runs = []
        for _ in ("first", "rerun"):
            t = time.time()
            secs = floor.kubectl_run(kubeconfig, phases, work, kubectl) if name == "kubectl" else \
                floor.python_run(kubeconfig, phases, concurrency)
            runs.append((round(secs, 1), requests_since(audit, t, n)))
        verify(kubeconfig, n, components, mix)
        result["floor_" + name] = {"first_run_s": runs[0][0], "first_run_requests": runs[0][1],
                                   "rerun_s": runs[1][0], "rerun_requests": runs[1][1]}
        if "first_run_s" in result:
            result["ratio_first_over_" + name] = round(result["first_run_s"] / runs[0][0], 2)
            result["ratio_rerun_over_" + name] = round(result["rerun_s"] / runs[1][0], 2)
        print("partial: " + json.dumps(result), file=sys.stderr, flush=True)
    if not keep:
        sh([os.path.join(LAB, "down.sh"), "--purge"], env=env)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results.json"))
    ap.add_argument("--keep", action="store_true", help="leave the last cluster running")
    ap.add_argument("--floor", nargs="*", default=["kubectl", "python"], choices=["kubectl", "python"],
                    help="floors measured on a fresh cluster of the same spec (default: both)")
    ap.add_argument("--concurrency", type=int, default=16, help="writes in flight (playbook and python floor)")
    ap.add_argument("--components", choices=sorted(COMPONENTS), default="all",
                    help="all: every component rolled out (default); none: node labels and taints only")
    ap.add_argument("--mix", choices=["mixed", "uniform"], default="mixed",
                    help="mixed (default): products and workload kinds as MIX_CYCLE; uniform: 8xH100 container nodes")
    ap.add_argument("--floor-only", action="store_true",
                    help="only the floors, from the objects an earlier run of the same spec captured "
                         "($GPUOPS_CACHE/cluster/floor-objects-<nodes>-<mix>.json)")
    args = ap.parse_args()
    results = []
    for i, n in enumerate(args.nodes):
        r = one(n, args.keep and i == len(args.nodes) - 1, args.floor, args.concurrency, args.components, args.mix,
                args.floor_only)
        print(json.dumps(r), flush=True)
        results.append(r)
    doc = {
        "command": ".venv/bin/python benchmarks/cluster_deploy/run.py " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "loadavg_at_end": os.getloadavg()},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": results,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
