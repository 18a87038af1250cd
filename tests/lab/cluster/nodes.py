#!/usr/bin/env python3
"""Simulated GPU nodes for the cluster lane: spec file -> KWOK Node objects + Ansible inventory.

Spec (YAML)::

    nodes:
      - name: h200-0                 # Kubernetes node name (= inventory hostname)
        gpu: {product: NVIDIA H200, count: 8, memory_mib: 143771,
              mig_capable: true, compute_capability: "9.0"}
        workload: container          # container | vm-passthrough | vm-vgpu (GPU nodes)
        root: h200-ubuntu2404-vm     # optional node root (dir name under --roots, or a path):
                                     # host facts then come from gpu_facts(root=...)
        vars: {...}                  # optional extra host vars (device plugin config, mig config)
      - name: cpu-0                  # no gpu: a CPU-only node
      - name: bench-{i}              # "count" expands {i} = 0..count-1
        count: 100
        gpu: {...}

Subcommands:
    sync      create/update the spec's nodes (annotation kwok.x-k8s.io/node=fake so KWOK
              keeps them Ready), delete lab nodes no longer in the spec, write the inventory
    inventory only write the inventory
"""
from __future__ import annotations

import argparse
import copy
import os
import sys

import yaml

LAB_LABEL = "gpuops.lab/simulated"
WORKLOADS = ("container", "vm-passthrough", "vm-vgpu")

LAB_USER_AGENT = "gpuops-lab-nodes"


def expand(spec):
    out = []
    for entry in spec.get("nodes") or []:
        count = entry.get("count")
        if count is None:
            out.append(entry)
            continue
        for i in range(int(count)):
            e = copy.deepcopy(entry)
            e.pop("count")
            e["name"] = entry["name"].replace("{i}", str(i))
            out.append(e)
    names = [n["name"] for n in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SystemExit("duplicate node names in spec: {}".format(", ".join(dupes)))
    return out


def resolve_root(root, roots_dir):
    if not root:
        return None
    if os.path.isabs(root):
        return root
    return os.path.join(roots_dir, root)


def inventory(nodes, kubeconfig, roots_dir):
    """Hosts named as their nodes; hosts whose variables are the same (a spec entry with ``count``)
    share them as a group's vars (lab_nodes_<k>), as a fleet's inventory keeps per-SKU variables in
    group_vars: 5,000 hosts each with their own copy made Ansible spend 14 s parsing the inventory,
    2 s this way."""
    hosts, gpu, cpu, shared = {}, {}, {}, {}
    for n in nodes:
        hv = {"ansible_connection": "local"}
        if n.get("gpu"):
            hv["gpuops_gpu_inventory"] = n["gpu"]
            # the workload kind is passed through as written (validation is the roles' job)
            if "workload" in n:
                hv["gpu_workload"] = n["workload"]
            gpu[n["name"]] = None
        else:
            cpu[n["name"]] = None
        root = resolve_root(n.get("root"), roots_dir)
        if root:
            hv["gpu_facts_root"] = root
        else:  # simulated node without a root tree: nothing to gather facts from
            hv["gpuops_gather_gpu_facts"] = False
        hv.update(n.get("vars") or {})
        hosts[n["name"]] = hv
        shared.setdefault(yaml.safe_dump(hv, sort_keys=True), []).append(n["name"])
    groups = {}
    for names in shared.values():
        if len(names) > 1:
            groups["lab_nodes_%d" % len(groups)] = {"vars": hosts[names[0]], "hosts": {name: None for name in names}}
            for name in names:
                hosts[name] = None
    return {
        "all": {
            "vars": {
                "gpuops_kubeconfig": kubeconfig,
                "ansible_python_interpreter": sys.executable,
            },
            "children": {
                "k8s_nodes": {
                    "hosts": hosts,
                    "children": dict(groups, k8s_gpu_nodes={"hosts": gpu}, k8s_cpu_nodes={"hosts": cpu}),
                },
                "k8s_control": {"hosts": {"localhost": {"ansible_connection": "local"}}},
            },
        }
    }


def root_gpu_count(root):
    """NVIDIA display/3D functions of a node root bound to the nvidia driver (what the device plugin
    would advertise: none on a nouveau node, none reserved for VMs)."""
    devices = os.path.join(root or "", "sys", "bus", "pci", "devices")
    count = 0
    for dev in sorted(os.listdir(devices)) if root and os.path.isdir(devices) else []:
        def read(name, dev=dev):
            try:
                with open(os.path.join(devices, dev, name)) as f:
                    return f.read().strip()
            except OSError:
                return ""
        driver = os.path.basename(os.path.realpath(os.path.join(devices, dev, "driver")))
        if read("vendor") == "0x10de" and read("class").startswith("0x03") and driver == "nvidia":
            count += 1
    return count


def node_status(n, roots_dir=None):
    """GPU nodes advertise nvidia.com/gpu = their GPU count (declared, or counted in the node root),
    as the device plugin would register it with a kubelet (KWOK has none); KWOK keeps a status
    that is already set and fills the rest."""
    count = int((n.get("gpu") or {}).get("count") or 0) or root_gpu_count(resolve_root(n.get("root"), roots_dir))
    if not count:
        return None
    res = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(count)}
    return {"capacity": dict(res), "allocatable": dict(res)}


def node_object(n, roots_dir=None):
    obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": n["name"],
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": n["name"],
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                LAB_LABEL: "true",
            },
        },
    }
    status = node_status(n, roots_dir)
    if status:
        obj["status"] = status  # Node status may be set on create
    return obj


def sync(api, nodes, roots_dir=None):
    from kubernetes.client.rest import ApiException

    want = {n["name"]: n for n in nodes}
    have = {o.metadata.name for o in api.list_node(label_selector=LAB_LABEL + "=true").items}
    created = deleted = 0
    for name, n in want.items():
        if name in have:  # a kept cluster: bring the advertised GPUs up to the spec
            status = node_status(n, roots_dir)
            if status:
                api.patch_node_status(name, {"status": status})
            continue
        try:
            api.create_node(node_object(n, roots_dir))
            created += 1
        except ApiException as e:  # created concurrently or pre-existing without our label
            if e.status != 409:
                raise
    for name in sorted(have - set(want)):
        api.delete_node(name)
        deleted += 1
    return created, deleted


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["sync", "inventory"])
    ap.add_argument("--spec", required=True)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--inventory", required=True)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--roots", default=os.environ.get(
        "GPUOPS_NODEROOTS", os.path.join(here, "..", "..", "..", ".lab", "roots")))
    args = ap.parse_args(argv)
    with open(args.spec) as f:
        nodes = expand(yaml.safe_load(f) or {})
    inv = inventory(nodes, os.path.abspath(args.kubeconfig), os.path.abspath(args.roots))
    with open(args.inventory, "w") as f:
        f.write(f"# generated by tests/lab/cluster/nodes.py from {os.path.abspath(args.spec)}\n")
        yaml.safe_dump(inv, f, sort_keys=False)
    if args.cmd == "sync":
        from kubernetes import client, config

        config.load_kube_config(args.kubeconfig)
        api_client = client.ApiClient()
        # its own name in the API server's audit log: benchmarks/cluster_deploy counts the playbook's
        # requests by user agent, and the lab's node creation must never be taken for the playbook's
        api_client.user_agent = LAB_USER_AGENT
        created, deleted = sync(client.CoreV1Api(api_client), nodes, args.roots)
        print(f"[cluster] nodes: {len(nodes)} in spec, {created} created, {deleted} deleted; "
              f"inventory {args.inventory}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
