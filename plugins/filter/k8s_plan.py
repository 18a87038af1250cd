# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller-side filters that turn inventory into the cluster plan.

Why filters and not a module: the plan is a pure function of inventory data and of what
the API server returned (``k8s_info``); it touches no host, so it belongs on the
controller, evaluated once for the whole fleet (a module would cost an AnsiballZ round
trip and a Python start per call). Every filter raises AnsibleFilterError listing *all*
problems, so a play fails before it applies anything.
"""
from __future__ import annotations

DOCUMENTATION = r"""
name: k8s_node_plan
short_description: Labels and taints per Kubernetes node, as the GPU Operator sets them
version_added: 0.1.0
description:
  - Validates every node's workload kind, MIG and device plugin config names, then returns
    the NFD/GFD labels, C(nvidia.com/gpu.workload.config), C(nvidia.com/gpu.deploy.*) labels
    and taints that the C(node_labels) role applies with server-side apply.
  - Companion filters in the same file are C(k8s_node_inputs), C(k8s_node_current),
    C(k8s_node_objects), C(k8s_placement), C(k8s_device_plugin_data), C(k8s_mig_config_names),
    C(k8s_deploy_components), C(k8s_vgpu_config_names), C(k8s_image), C(k8s_name_refs), C(k8s_node_label_objects),
    C(k8s_ready_pod_nodes), C(k8s_validation_jobs), C(k8s_job_outcomes), C(k8s_gpu_allocatable_split) and
    C(k8s_named_objects).
positional: current, options
options:
  _input:
    description: Node inputs (see C(k8s_node_inputs)).
    type: list
    elements: dict
    required: true
  current:
    description: Current node labels and taints by node name (see C(k8s_node_current)); null skips the existence check.
    type: dict
  options:
    description: default_workload, sandbox_mode, taint_gpu_nodes, taint, mig_strategy, device_plugin_configs, state.
    type: dict
"""

EXAMPLES = r"""
- name: Plan labels for every node of the inventory
  ansible.builtin.set_fact:
    plan: "{{ groups['k8s_nodes'] | gpuops.nvidia.k8s_node_inputs(hostvars) | gpuops.nvidia.k8s_node_plan(current, {}) }}"
"""

RETURN = r"""
_value:
  description: C(nodes) (name, labels, taints, workload, gpu, components) and C(missing) (inventory nodes the cluster lacks).
  type: dict
"""

from ansible.errors import AnsibleFilterError, AnsibleUndefinedVariable
from ansible_collections.gpuops.nvidia.plugins.module_utils import (
    _k8s_device_plugin as dp,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils import _k8s_jobs as kj
from ansible_collections.gpuops.nvidia.plugins.module_utils import _k8s_labels as kl


def _get(hv, key, default=None):
    try:
        value = hv.get(key, default)
    except AnsibleUndefinedVariable:  # a host var that templates to something undefined
        return default
    return default if value is None else value


def k8s_node_inputs(hosts, hostvars):
    """Inventory hosts -> node plan inputs (reads only the keys the plan needs)."""
    out = []
    for host in hosts or []:
        hv = hostvars[host]
        facts = _get(hv, "ansible_facts", {}) or {}
        gpu_facts = facts.get("gpu") or {}
        labels = dict(gpu_facts.get("labels") or _get(hv, "gpuops_gpu_node_labels", {}) or {})
        out.append({
            "name": _get(hv, "gpuops_k8s_node_name", host),
            "workload": _get(hv, "gpu_workload"),
            "labels": labels,
            "gpu": _get(hv, "gpuops_gpu_inventory"),
            "device_plugin_config": _get(hv, "gpuops_device_plugin_config"),
            "mig_config": _get(hv, "gpuops_mig_config"),
            "extra_labels": _get(hv, "gpuops_k8s_node_labels", {}),
        })
    return out


def k8s_node_current(resources, field_manager=None):
    """k8s_info Node resources -> {name: {labels, taints}} (+ owned_labels of ``field_manager``)."""
    out = {}
    for r in resources or []:
        cur = {"labels": r["metadata"].get("labels") or {}, "taints": (r.get("spec") or {}).get("taints") or []}
        if field_manager:
            cur["owned_labels"] = kl.owned_labels(r["metadata"].get("managedFields"), field_manager)
        out[r["metadata"]["name"]] = cur
    return out


def k8s_node_plan(nodes, current=None, options=None):
    options = dict(options or {})
    missing = []
    if current is not None:
        missing = sorted(n.get("name") for n in nodes if n.get("name") not in current)
        nodes = [n for n in nodes if n.get("name") in current]
    try:
        plan = kl.node_plan(nodes, current or {}, options)
    except kl.PlanError as e:
        raise AnsibleFilterError("invalid GPU node inventory:\n  - " + "\n  - ".join(e.errors))
    plan["missing"] = missing
    return plan


def k8s_node_objects(plan, current=None):
    """Plan -> Node manifests to apply; with ``current`` (k8s_node_current with the field manager)
    only the nodes that would change."""
    return kl.node_objects(plan, current=current)


def k8s_placement(plan):
    return kl.placement(plan)


def k8s_deploy_components(workload, mig_capable=False, vgpu_host=False, sandbox_mode="kubevirt"):
    try:
        return kl.deploy_components(workload, mig_capable, vgpu_host, sandbox_mode)
    except kl.PlanError as e:
        raise AnsibleFilterError(str(e))


def k8s_device_plugin_data(configs, default_name="default", mig_strategy="single"):
    try:
        data, warnings = dp.render(configs, default_name, mig_strategy)
    except dp.ConfigError as e:
        raise AnsibleFilterError("invalid device plugin config:\n  - " + "\n  - ".join(e.errors))
    return {"data": data, "warnings": warnings}


def k8s_mig_config_names(doc):
    try:
        return dp.validate_mig_configs(doc)
    except dp.ConfigError as e:
        raise AnsibleFilterError("invalid MIG manager config:\n  - " + "\n  - ".join(e.errors))


def k8s_vgpu_config_names(doc, default_name="default"):
    try:
        return dp.validate_vgpu_configs(doc, default_name)
    except dp.ConfigError as e:
        raise AnsibleFilterError("invalid vGPU device manager config:\n  - " + "\n  - ".join(e.errors))


def k8s_image(spec, registry=None):
    """{repository, image, version} (+ registry override) -> image reference; sha256 versions use @."""
    repo = spec.get("repository") or ""
    if registry:
        # replace the registry host, keep the path (nvcr.io/nvidia/k8s -> mirror:5000/nvidia/k8s)
        parts = repo.split("/", 1)
        repo = registry.rstrip("/") + ("/" + parts[1] if len(parts) > 1 else "")
    version = str(spec.get("version") or "")
    sep = "@" if version.startswith("sha256:") else ":"
    ref = "{}/{}".format(repo, spec["image"]) if repo else spec["image"]
    return ref + (sep + version if version else "")


def k8s_name_refs(names):
    """['a', 'b'] -> [{'name': 'a'}, {'name': 'b'}] (imagePullSecrets, LocalObjectReference lists)."""
    return [{"name": n} for n in names or [] if n]


def k8s_node_label_objects(on, off=None, labels=None):
    """Partial Node manifests: nodes in ``on`` get ``labels``, nodes only in ``off`` get none
    (applied with a dedicated field manager, that removes exactly what it had set)."""
    on = list(on or [])
    objs = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": dict(labels or {})}} for n in on]
    objs += [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {}}}
             for n in sorted(set(off or []) - set(on))]
    return objs


def k8s_ready_pod_nodes(pods):
    """k8s_info Pod resources -> sorted node names whose pod has condition Ready=True."""
    out = set()
    for p in pods or []:
        conds = (p.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
            node = (p.get("spec") or {}).get("nodeName")
            if node and not (p.get("metadata") or {}).get("deletionTimestamp"):
                out.add(node)
    return sorted(out)


def k8s_validation_jobs(nodes, prefix, key):
    """Node names -> [{name, node, node_label}] of the per-node validation Jobs (see _k8s_jobs)."""
    try:
        return kj.jobs(nodes, prefix, key)
    except ValueError as e:
        raise AnsibleFilterError(str(e))


def k8s_gpu_allocatable_split(nodes):
    """k8s_info Node resources -> {gpu: [names advertising nvidia.com/gpu or MIG resources], no_gpu: [...]}."""
    with_gpus, without = kj.split_by_gpu_allocatable(nodes)
    return {"gpu": with_gpus, "no_gpu": without}


def k8s_named_objects(names, api_version, kind, namespace=None):
    """['a'] -> [{apiVersion, kind, metadata: {name: 'a', namespace}}] (deletions by name, in one call)."""
    meta = {"namespace": namespace} if namespace else {}
    return [{"apiVersion": api_version, "kind": kind, "metadata": dict(meta, name=n)} for n in names or []]


def k8s_job_outcomes(resources, wanted):
    """k8s_info Job resources + wanted Job names -> {complete, failed, running, missing, stale}."""
    return kj.outcomes(resources, wanted)


class FilterModule:
    def filters(self):
        return {
            "k8s_node_inputs": k8s_node_inputs,
            "k8s_node_current": k8s_node_current,
            "k8s_node_plan": k8s_node_plan,
            "k8s_node_objects": k8s_node_objects,
            "k8s_placement": k8s_placement,
            "k8s_deploy_components": k8s_deploy_components,
            "k8s_device_plugin_data": k8s_device_plugin_data,
            "k8s_mig_config_names": k8s_mig_config_names,
            "k8s_vgpu_config_names": k8s_vgpu_config_names,
            "k8s_image": k8s_image,
            "k8s_name_refs": k8s_name_refs,
            "k8s_node_label_objects": k8s_node_label_objects,
            "k8s_ready_pod_nodes": k8s_ready_pod_nodes,
            "k8s_validation_jobs": k8s_validation_jobs,
            "k8s_job_outcomes": k8s_job_outcomes,
            "k8s_named_objects": k8s_named_objects,
            "k8s_gpu_allocatable_split": k8s_gpu_allocatable_split,
        }
