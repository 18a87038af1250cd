# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Controller-side filters that turn inventory into the cluster plan.

The plan is a pure function of inventory data and of what the API server returned; it touches
no host. The filters evaluate it on the controller, once for the whole fleet (the preflight
checks every node with them before anything is applied); the ``k8s_node_labels`` module runs
the same plan (module_utils/_k8s_labels.py) beside its own read of the Nodes, so that a fleet's
read never travels through the controller. Every filter raises AnsibleFilterError listing *all*
problems, so a play fails before it applies anything.
"""
from __future__ import annotations

# Documentation: one file per filter (k8s_*.yml beside this file), as ansible-doc reads a
# multi-filter file's docs from <filter name>.yml beside it.

import re
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.plugin_utils._filters import hostvar, refusing
from ansible_collections.gpuops.nvidia.plugins.module_utils import (
    _k8s_device_plugin as dp,
)
from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _k8s_jobs as kj
from ansible_collections.gpuops.nvidia.plugins.module_utils import _k8s_labels as kl
from ansible_collections.gpuops.nvidia.plugins.module_utils import _mig
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError
from ansible_collections.gpuops.nvidia.plugins.module_utils._k8s_wait import rollouts_pending


# -- input checks: wrong types end in AnsibleFilterError naming the filter and the value ----------------

class _Refused(InputError):
    """A filter argument of the wrong shape."""


_refusing = refusing()


def _kind(value):
    return "null" if value is None else type(value).__name__


def _short(value, limit=120):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _mapping(value, what, optional=True):
    if value is None and optional:
        return {}
    if not isinstance(value, Mapping):
        raise _Refused("%s must be a mapping, got %s %s" % (what, _kind(value), _short(value)))
    return value


def _seq(value, what, optional=True):
    """A list from any iterable (Jinja's map/select give generators), never from a string or a mapping."""
    if value is None and optional:
        return []
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise _Refused("%s must be a list, got %s %s" % (what, _kind(value), _short(value)))
    return list(value)


def _names(value, what, optional=True):
    out = _seq(value, what, optional)
    bad = [v for v in out if not isinstance(v, str) or not v]
    if bad:
        raise _Refused("%s must be a list of names (non-empty strings), got %r" % (what, bad))
    return out


def _records(value, what, optional=True):
    out = _seq(value, what, optional)
    for i, r in enumerate(out):
        if not isinstance(r, Mapping):
            raise _Refused("%s[%d] must be a mapping, got %s %s" % (what, i, _kind(r), _short(r)))
    return out


def _k8s_resources(value, what, need_name=True):
    """k8s_info resources: a list of mappings (with metadata.name when ``need_name``)."""
    out = _records(value, what)
    for i, r in enumerate(out):
        meta = r.get("metadata")
        if need_name and (not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str)):
            raise _Refused("%s[%d] has no metadata.name (is it k8s_info's resources?)" % (what, i))
        if meta is not None and not isinstance(meta, Mapping):
            raise _Refused("%s[%d]: metadata must be a mapping, got %r" % (what, i, meta))
        for key in ("spec", "status"):
            if r.get(key) is not None and not isinstance(r[key], Mapping):
                raise _Refused("%s[%d]: %s must be a mapping, got %r" % (what, i, key, r[key]))
    return out


def _plan(plan):
    """A k8s_node_plan result: {nodes: [{name, labels, taints, components}]}."""
    plan = _mapping(plan, "the plan (k8s_node_plan's result)", optional=False)
    for i, n in enumerate(_records(plan.get("nodes"), "plan.nodes", optional=False)):
        if not isinstance(n.get("name"), str) or not isinstance(n.get("labels"), Mapping) \
                or not isinstance(n.get("taints", []), list) or not isinstance(n.get("components", []), list):
            raise _Refused("plan.nodes[%d] must have name, labels, taints and components as k8s_node_plan "
                           "returns them, got %s" % (i, _short(n)))
    return plan


_IMAGE_PART = re.compile(r"^[^\s\x00-\x1f\x7f]+\Z")


@_refusing
def k8s_node_inputs(hosts, hostvars):
    """Inventory hosts -> node plan inputs (reads only the keys the plan needs)."""
    hosts = _names(hosts, "hosts (a group's host names)")
    hostvars = _mapping(hostvars, "hostvars", optional=False)
    out = []
    for host in hosts:
        if host not in hostvars:
            raise _Refused("host %s is not in hostvars" % host)
        hv = _mapping(hostvars[host], "hostvars[%r]" % host, optional=False)
        facts = _mapping(hostvar(hv, "ansible_facts", {}), "hostvars[%r].ansible_facts" % host)
        gpu_facts = _mapping(facts.get("gpu"), "hostvars[%r].ansible_facts.gpu" % host)
        labels = dict(gpu_facts.get("labels") or hostvar(hv, "gpuops_gpu_node_labels", {}) or {})
        out.append({
            "name": hostvar(hv, "gpuops_k8s_node_name", host),
            "workload": hostvar(hv, "gpu_workload"),
            "labels": labels,
            "gpu": hostvar(hv, "gpuops_gpu_inventory"),
            "device_plugin_config": hostvar(hv, "gpuops_device_plugin_config"),
            "mig_config": hostvar(hv, "gpuops_mig_config"),
            "allocation": hostvar(hv, "gpuops_gpu_allocation"),
            "extra_labels": hostvar(hv, "gpuops_k8s_node_labels", {}),
        })
    return out


@_refusing
def k8s_node_current(resources, field_manager=None):
    """k8s_info Node resources -> {name: {labels, taints}} (+ owned_labels of ``field_manager``)."""
    if field_manager is not None and not isinstance(field_manager, str):
        raise _Refused("field_manager must be a string, got %r" % (field_manager,))
    return kl.node_current(_k8s_resources(resources, "Node resources"), field_manager)


@_refusing
def k8s_node_plan(nodes, current=None, options=None):
    nodes = _records(nodes, "nodes (k8s_node_inputs' result)", optional=False)
    options = dict(_mapping(options, "options"))
    if current is not None:
        current = dict(_mapping(current, "current (k8s_node_current's result)"))
    missing = []
    if current is not None:
        missing = sorted(n.get("name") for n in nodes if n.get("name") not in current)
        nodes = [n for n in nodes if n.get("name") in current]
    try:
        plan = kl.node_plan(nodes, current or {}, options)
    except kl.LabelPlanError as e:
        raise AnsibleFilterError("invalid GPU node inventory:\n  - " + "\n  - ".join(e.errors))
    plan["missing"] = missing
    if current is not None:
        # what k8s_node_objects(plan, current) gives, computed here once: the role applies exactly this
        plan["changes"] = kl.node_objects(plan, current=current)
    return plan


@_refusing
def k8s_node_objects(plan, current=None):
    """Plan -> Node manifests to apply; with ``current`` (k8s_node_current with the field manager)
    only the nodes that would change."""
    if current is not None:
        current = _mapping(current, "current (k8s_node_current's result)")
    return kl.node_objects(_plan(plan), current=current)


@_refusing
def k8s_placement(plan):
    return kl.placement(_plan(plan))


@_refusing
def k8s_deploy_components(workload, mig_capable=False, vgpu_host=False, sandbox_mode="kubevirt"):
    if sandbox_mode not in kl.SANDBOX_MODES:
        raise _Refused("sandbox mode %r is not one of %s" % (sandbox_mode, ", ".join(kl.SANDBOX_MODES)))
    try:
        return kl.deploy_components(workload, mig_capable, vgpu_host, sandbox_mode)
    except kl.LabelPlanError as e:
        raise AnsibleFilterError(str(e))


@_refusing
def k8s_device_plugin_data(configs, default_name="default", mig_strategy="single"):
    try:
        data, warnings = dp.render(configs, default_name, mig_strategy)
    except dp.ConfigError as e:
        raise AnsibleFilterError("invalid device plugin config:\n  - " + "\n  - ".join(e.errors))
    return {"data": data, "warnings": warnings}


@_refusing
def k8s_mig_config_names(doc):
    # the same validator as the mig_config module's (one validator, two users)
    try:
        return _mig.validate_config(doc)
    except _mig.MigError as e:
        raise AnsibleFilterError("invalid MIG manager config:\n  - " + "\n  - ".join(e.errors))


@_refusing
def k8s_vgpu_config_names(doc, default_name="default"):
    try:
        return dp.validate_vgpu_configs(doc, default_name)
    except dp.ConfigError as e:
        raise AnsibleFilterError("invalid vGPU device manager config:\n  - " + "\n  - ".join(e.errors))


@_refusing
def k8s_image(spec, registry=None):
    """{repository, image, version} (+ registry override) -> image reference; sha256 versions use @."""
    spec = _mapping(spec, "the image (repository, image, version)", optional=False)
    for key, value in (("image", spec.get("image")), ("repository", spec.get("repository")),
                       ("version", spec.get("version")), ("registry", registry)):
        if key == "image" and not value:
            raise _Refused("image must name the image (the repository's last part), got %r" % (value,))
        if value in (None, "") or (key == "version" and isinstance(value, (int, float)) and not isinstance(value, bool)):
            continue
        if not isinstance(value, str) or not _IMAGE_PART.match(value):
            raise _Refused("%s must be a string without spaces, got %r" % (key, value))
    repo = spec.get("repository") or ""
    if registry:
        # replace the registry host, keep the path (nvcr.io/nvidia/k8s -> mirror:5000/nvidia/k8s)
        parts = repo.split("/", 1)
        repo = registry.rstrip("/") + ("/" + parts[1] if len(parts) > 1 else "")
    version = str(spec.get("version") or "")
    sep = "@" if version.startswith("sha256:") else ":"
    ref = "{}/{}".format(repo, spec["image"]) if repo else spec["image"]
    return ref + (sep + version if version else "")


@_refusing
def k8s_name_refs(names):
    """['a', 'b'] -> [{'name': 'a'}, {'name': 'b'}] (imagePullSecrets, LocalObjectReference lists)."""
    names = _seq(names, "names (a list of secret names)")
    bad = [n for n in names if n and not isinstance(n, str)]
    if bad:
        raise _Refused("names must be a list of names (strings), got %r" % (bad,))
    return [{"name": n} for n in names if n]


@_refusing
def k8s_node_label_objects(on, off=None, labels=None):
    """Partial Node manifests: nodes in ``on`` get ``labels``, nodes only in ``off`` get none
    (applied with a dedicated field manager, that removes exactly what it had set)."""
    on = _names(on, "on (node names)")
    off = _names(off, "off (node names)")
    labels = dict(_mapping(labels, "labels"))
    objs = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": dict(labels or {})}} for n in on]
    objs += [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {}}}
             for n in sorted(set(off or []) - set(on))]
    return objs


@_refusing
def k8s_labels_left_by(nodes, managers, keys):
    """k8s_info Node resources -> partial Node manifests with the labels among ``keys`` (a key, or a prefix ending
    in "." or "/") that only the field ``managers`` set."""
    managers = _names(managers, "managers (field manager names)", optional=False)
    keys = _names(keys, "keys (label keys or prefixes)", optional=False)
    return kl.labels_left_by(_k8s_resources(nodes, "Node resources"), managers, keys)


@_refusing
def k8s_ready_pod_nodes(pods):
    """k8s_info Pod resources -> sorted node names whose pod has condition Ready=True."""
    out = set()
    for i, p in enumerate(_k8s_resources(pods, "Pod resources", need_name=False)):
        conds = _records((p.get("status") or {}).get("conditions"), "Pod resources[%d].status.conditions" % i)
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
            node = (p.get("spec") or {}).get("nodeName")
            if node and not (p.get("metadata") or {}).get("deletionTimestamp"):
                out.add(node)
    return sorted(out)


_DS_COUNTS = ("desiredNumberScheduled", "currentNumberScheduled", "updatedNumberScheduled", "numberReady")


@_refusing
def k8s_daemonset_ready_nodes(daemonsets, nodes):
    """A DaemonSet (k8s_info resources: a list of one, or none) and the Nodes its node selector selects ->
    their sorted names when its status proves a Ready pod of the current template on every one of them,
    else None (the pods must be read to know which)."""
    daemonsets = _k8s_resources(daemonsets, "DaemonSet resources")
    names = sorted({r["metadata"]["name"] for r in _k8s_resources(nodes, "Node resources")})
    if len(daemonsets) != 1:
        return None
    ds = daemonsets[0]
    status, generation = ds.get("status") or {}, ds["metadata"].get("generation")
    counts = [status.get(k) for k in _DS_COUNTS]
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
        return None
    if not isinstance(generation, int) or (status.get("observedGeneration") or 0) < generation:
        return None  # the controller has not counted the current template yet
    # the DaemonSet runs one pod per selected node: as many Ready pods of this template as the nodes selected,
    # and none on nodes it should not be on, is a Ready pod on each (a node it cannot schedule on - a taint it
    # does not tolerate - makes the counts differ and the pods are read instead)
    if status.get("numberMisscheduled") or any(c != len(names) for c in counts):
        return None
    return names


@_refusing
def k8s_validation_jobs(nodes, prefix, key):
    """Node names -> [{name, node, node_label}] of the per-node validation Jobs (see _k8s_jobs)."""
    try:
        return kj.jobs(nodes, prefix, key)
    except ValueError as e:
        raise AnsibleFilterError(str(e))


@_refusing
def k8s_gpu_allocatable_split(nodes):
    """k8s_info Node resources -> {gpu: [names advertising nvidia.com/gpu or MIG resources], no_gpu: [...]}."""
    with_gpus, without = kj.split_by_gpu_allocatable(_k8s_resources(nodes, "Node resources"))
    return {"gpu": with_gpus, "no_gpu": without}


@_refusing
def k8s_named_objects(names, api_version, kind, namespace=None):
    """['a'] -> [{apiVersion, kind, metadata: {name: 'a', namespace}}] (deletions by name, in one call)."""
    names = _names(names, "names")
    for what, value in (("api_version", api_version), ("kind", kind)):
        if not isinstance(value, str) or not value:
            raise _Refused("%s must be a non-empty string, got %r" % (what, value))
    if namespace not in (None, "") and not isinstance(namespace, str):
        raise _Refused("namespace must be a string, got %r" % (namespace,))
    meta = {"namespace": namespace} if namespace else {}
    return [{"apiVersion": api_version, "kind": kind, "metadata": dict(meta, name=n)} for n in names]


@_refusing
def k8s_job_outcomes(resources, wanted):
    """k8s_info Job resources + wanted Job names -> {complete, failed, running, missing, stale}."""
    return kj.outcomes(_k8s_resources(resources, "Job resources"), _names(wanted, "wanted Job names"))


@_refusing
def k8s_rollouts_pending(workloads):
    """k8s_info DaemonSet/Deployment resources -> ['Kind/ns/name: why'] of those not rolled out yet."""
    return rollouts_pending(_k8s_resources(workloads, "DaemonSet/Deployment resources"))


@_refusing
def k8s_queue(queue, field_manager, objects):
    """{manager: [objects]} + objects under ``field_manager`` -> a new queue (empty YAML documents dropped)."""
    queue = _mapping(queue, "the queue (field manager -> objects)")
    if not isinstance(field_manager, str) or not field_manager:
        raise _Refused("field_manager must be a non-empty string, got %s %s" % (_kind(field_manager), _short(field_manager)))
    objects = _records([o for o in _seq(objects, "objects") if o is not None and o != {}], "objects")
    out = dict(queue)
    out[field_manager] = _seq(queue.get(field_manager), "the queue's %s" % field_manager) + objects
    return out


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
            "k8s_labels_left_by": k8s_labels_left_by,
            "k8s_ready_pod_nodes": k8s_ready_pod_nodes,
            "k8s_daemonset_ready_nodes": k8s_daemonset_ready_nodes,
            "k8s_validation_jobs": k8s_validation_jobs,
            "k8s_job_outcomes": k8s_job_outcomes,
            "k8s_named_objects": k8s_named_objects,
            "k8s_gpu_allocatable_split": k8s_gpu_allocatable_split,
            "k8s_rollouts_pending": k8s_rollouts_pending,
            "k8s_queue": k8s_queue,
        }
