# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Node plan for the cluster side: labels and taints per node, as the GPU Operator sets them.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

Pure functions, no Ansible import. Input is what the inventory knows about each node
(workload kind, GPU facts or a declared GPU inventory, per-node config names) and what
the cluster currently has (labels, taints); output is the exact label set and taint list
our field manager applies. Everything is validated for *all* nodes before a plan is
returned, so bad input is refused before anything reaches the API server.
"""
from __future__ import annotations

import re

from ansible_collections.gpuops.nvidia.plugins.module_utils import _labels
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError

WORKLOADS = ("container", "vm-passthrough", "vm-vgpu")
SANDBOX_MODES = ("kubevirt", "kata")
#: how a container node's GPUs reach pods: NVIDIA's device plugin (nvidia.com/gpu) or its DRA driver (ResourceClaims)
ALLOCATIONS = ("device-plugin", "dra")
DEPLOY = "nvidia.com/gpu.deploy."
WORKLOAD_LABEL = "nvidia.com/gpu.workload.config"
PRESENT_LABEL = "nvidia.com/gpu.present"
DP_CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
NFD_PRESENT = (
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)
#: product substrings the operator treats as MIG-capable when no mig.capable label exists
MIG_PRODUCTS = ("A100", "A30", "H100", "H200", "H800", "H20", "GH200", "B200", "B300", "GB200", "GB300")
DEFAULT_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


class LabelPlanError(InputError):
    """Invalid inventory input; ``errors`` lists every problem found, one per line."""

    def __init__(self, errors):
        self.errors = list(errors)
        super().__init__("; ".join(self.errors))


def deploy_components(workload, mig_capable=False, vgpu_host=False, sandbox_mode="kubevirt", allocation="device-plugin"):
    """Components the operator labels ``nvidia.com/gpu.deploy.<x>=true`` for a workload kind.

    A container node that allocates by DRA gets the DRA driver's kubelet plugin (``dra-driver``, its label in GPU
    Operator v26.7) instead of the device plugin, and no operator-validator: the validator's CUDA check asks for
    ``nvidia.com/gpu``, which such a node does not advertise.
    """
    if workload == "container":
        comps = ["driver", "gpu-feature-discovery", "container-toolkit", "dcgm", "dcgm-exporter",
                 "node-status-exporter", "client"]
        comps += ["dra-driver"] if allocation == "dra" else ["device-plugin", "operator-validator"]
        if mig_capable and not vgpu_host:
            comps.append("mig-manager")
    elif workload == "vm-passthrough":
        plugin = "kata-sandbox-device-plugin" if sandbox_mode == "kata" else "sandbox-device-plugin"
        comps = [plugin, "sandbox-validator", "vfio-manager", "kata-manager", "cc-manager", "client"]
    elif workload == "vm-vgpu":
        comps = ["sandbox-device-plugin", "vgpu-manager", "vgpu-device-manager", "sandbox-validator",
                 "cc-manager", "client"]
    else:
        raise LabelPlanError(["unknown workload kind {!r} (expected one of {})".format(workload, ", ".join(WORKLOADS))])
    return sorted(comps)


def is_gpu_node(labels):
    return any(labels.get(k) == "true" for k in NFD_PRESENT) or labels.get(PRESENT_LABEL) == "true"


def is_mig_capable(labels):
    if "nvidia.com/mig.capable" in labels:
        return labels["nvidia.com/mig.capable"] == "true"
    product = labels.get("nvidia.com/gpu.product", "")
    return any(p in product for p in MIG_PRODUCTS)


def labels_from_inventory(gpu):
    """NFD + GFD labels from a declared GPU inventory (product/count/memory_mib/mig_capable/cc).

    Used for nodes without a node root to read facts from; the label math is the same
    one ``gpu_facts`` uses (module_utils/_labels.py).
    """
    if not gpu:
        return {}
    if not isinstance(gpu, dict):
        raise LabelPlanError(["gpu must be a mapping (product, count, memory_mib, ...), got {!r}".format(gpu)])
    raw = gpu.get("count", 1)
    try:
        if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
            raise ValueError(raw)
        count = int(raw) if isinstance(raw, float) else int(str(raw).strip())
    except ValueError:
        raise LabelPlanError(["gpu.count must be a whole number >= 1, got {!r}".format(raw)])
    if count < 1:
        raise LabelPlanError(["gpu.count must be >= 1, got {!r}".format(gpu.get("count"))])
    cc = gpu.get("compute_capability")
    if cc is not None and not re.match(r"^[0-9]+(\.[0-9]+)?\Z", str(cc)):
        raise LabelPlanError(["gpu.compute_capability must be major.minor like 9.0, got {!r}".format(cc)])
    for key in ("product", "driver_version", "cuda_version", "machine"):
        if gpu.get(key) is not None and not isinstance(gpu.get(key), str):
            raise LabelPlanError(["gpu.{} must be a string, got {!r}".format(key, gpu.get(key))])
    one = {
        "product": gpu.get("product"),
        "memory_mib": gpu.get("memory_mib"),
        "compute_capability": gpu.get("compute_capability"),
        "mig_capable": bool(gpu.get("mig_capable")),
        "mode": gpu.get("mode", "compute"),
    }
    labels = {_labels.NFD + "pci-10de.present": "true"}
    labels.update(_labels.gfd_labels([one] * count, driver_version=gpu.get("driver_version"),
                                     cuda_version=gpu.get("cuda_version"), machine=gpu.get("machine")))
    return labels


def _workload_of(name, node, default_workload, errors):
    wl = node.get("workload")
    if wl is None or wl == "":
        return default_workload
    if isinstance(wl, (list, tuple)):
        kinds = sorted(set(wl))
        if len(kinds) > 1:
            errors.append("{}: one GPU workload kind per node, got {}".format(name, ", ".join(kinds)))
            return None
        wl = kinds[0] if kinds else default_workload
    if isinstance(wl, str) and "," in wl:
        errors.append(f"{name}: one GPU workload kind per node, got {wl!r}")
        return None
    if wl not in WORKLOADS:
        errors.append("{}: unknown GPU workload kind {!r} (expected one of {})".format(name, wl, ", ".join(WORKLOADS)))
        return None
    return wl


def _allocation_of(name, node, default_allocation, errors):
    """The node's one allocation model (``allocation``: a string, a one-item list, or unset for the default)."""
    al = node.get("allocation")
    if al is None or al == "":
        return default_allocation
    if isinstance(al, (list, tuple)):
        kinds = sorted(set(map(str, al)))
        if len(kinds) > 1:
            errors.append("{}: one GPU allocation model per node -- the device plugin and the DRA driver would both "
                          "hand out the same GPUs -- got {}".format(name, ", ".join(kinds)))
            return None
        al = kinds[0] if kinds else default_allocation
    if al not in ALLOCATIONS:
        errors.append("{}: unknown GPU allocation model {!r} (expected one of {})".format(
            name, str(al)[:80], ", ".join(ALLOCATIONS)))
        return None
    return al


def _merge_taints(current, ours, managed_keys):
    """Others' taints kept in order, ours appended; our keys are replaced, never duplicated."""
    kept = [t for t in (current or []) if t.get("key") not in managed_keys]
    return kept + [dict(t) for t in ours]


def node_plan(nodes, current=None, options=None):
    """Desired labels and taints per node.

    ``nodes``: list of dicts ``name``, ``workload`` (str, list, or None), ``labels`` (NFD/GFD
    labels from gpu_facts), ``gpu`` (declared inventory, used when ``labels`` is empty),
    ``device_plugin_config``, ``mig_config``, ``extra_labels``.
    ``current``: ``{name: {"labels": {...}, "taints": [...]}}`` as the cluster has them.
    ``options``: ``default_workload`` (container), ``sandbox_mode`` (kubevirt),
    ``taint_gpu_nodes`` (True), ``taint`` (DEFAULT_TAINT), ``taint_vm_nodes`` (False: vm-passthrough and
    vm-vgpu nodes are not tainted, so KubeVirt's virt-launcher pods, which tolerate nothing of ours unless the
    VM says so, can run there; a taint of ours already on such a node is removed), ``mig_strategy`` (single),
    ``device_plugin_configs`` (name -> config, to label sharing), ``state`` (present|absent),
    ``mig_default_config`` ("": none; the MIG manager's default config, labelled ``nvidia.com/mig.config`` on a
    MIG-capable container node that names none and has no such label from anyone else, as the operator labels
    ``all-disabled`` -- without a label the MIG manager waits and reports nothing), ``default_allocation``
    (device-plugin: a node's ``allocation`` when it gives none; ``dra`` nodes get the DRA driver, never the device
    plugin).

    Returns ``{"nodes": [{name, labels, taints, workload, components}], "errors": []}``;
    raises LabelPlanError listing every invalid node.
    """
    if not isinstance(nodes, (list, tuple)):
        raise LabelPlanError(["nodes must be a list of node inputs (see k8s_node_inputs), got {!r}".format(nodes)])
    if options is not None and not isinstance(options, dict):
        raise LabelPlanError(["options must be a mapping, got {!r}".format(options)])
    if current is not None and (not isinstance(current, dict)
                                or not all(isinstance(v, dict) or v is None for v in current.values())):
        raise LabelPlanError(["current must map node names to {{labels, taints}} (see k8s_node_current), got {!r}"
                              .format(current)])
    opts = dict(options or {})
    current = current or {}
    shape = []
    if opts.get("taint") is not None and not (isinstance(opts["taint"], dict) and isinstance(opts["taint"].get("key"), str)):
        shape.append("options.taint must be a taint mapping (key, value, effect), got {!r}".format(opts["taint"]))
    if opts.get("device_plugin_configs") is not None and not isinstance(opts["device_plugin_configs"], dict):
        shape.append("options.device_plugin_configs must map config names to configs, got {!r}"
                     .format(opts["device_plugin_configs"]))
    for key in ("default_workload", "sandbox_mode", "mig_strategy", "state", "mig_default_config", "default_allocation"):
        if opts.get(key) is not None and not isinstance(opts[key], str):
            shape.append("options.{} must be a string, got {!r}".format(key, opts[key]))
    if shape:
        raise LabelPlanError(shape)
    state = opts.get("state", "present")
    default_workload = opts.get("default_workload") or "container"
    sandbox_mode = opts.get("sandbox_mode") or "kubevirt"
    taint = dict(opts.get("taint") or DEFAULT_TAINT)
    taint_on = opts.get("taint_gpu_nodes", True)
    taint_vm = opts.get("taint_vm_nodes", False)
    strategy = opts.get("mig_strategy", "single")
    dp_configs = opts.get("device_plugin_configs") or {}
    mig_default = opts.get("mig_default_config") or ""
    default_allocation = opts.get("default_allocation") or "device-plugin"
    errors = []
    if default_allocation not in ALLOCATIONS:
        errors.append("default GPU allocation model {!r} is not one of {}".format(
            default_allocation[:80], ", ".join(ALLOCATIONS)))
    if default_workload not in WORKLOADS:
        errors.append("default workload kind {!r} is not one of {}".format(default_workload, ", ".join(WORKLOADS)))
    if sandbox_mode not in SANDBOX_MODES:
        errors.append("sandbox mode {!r} is not one of {}".format(sandbox_mode, ", ".join(SANDBOX_MODES)))
    # a label value, matched whole (a name with a newline or a space never reaches the API server as one)
    if mig_default and not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", mig_default):
        errors.append("MIG default config {!r} is not a label value (letters, digits, -_., at most 63)".format(
            mig_default[:80]))
    if strategy not in ("none", "single", "mixed"):
        errors.append(f"unknown MIG strategy {strategy!r} (expected none, single or mixed)")
    seen = set()
    plan = []
    for i, node in enumerate(nodes):
        if not isinstance(node, dict):
            errors.append("nodes[{}] must be a mapping (name, workload, labels, gpu, ...), got {!r}".format(i, node))
            continue
        name = node.get("name")
        if not name:
            errors.append("a node has no name")
            continue
        if not isinstance(name, str):
            errors.append("nodes[{}]: name must be a string, got {!r}".format(i, name))
            continue
        bad = ["{} must be a mapping, got {!r}".format(k, node[k]) for k in ("labels", "extra_labels")
               if node.get(k) is not None and not isinstance(node[k], dict)]
        bad += ["{} must be a config name (a string), got {!r}".format(k, node[k])
                for k in ("device_plugin_config", "mig_config") if node.get(k) is not None and not isinstance(node[k], str)]
        if bad:
            errors.extend("{}: {}".format(name, b) for b in bad)
            continue
        if name in seen:
            errors.append(f"{name}: listed twice")
            continue
        seen.add(name)
        have = current.get(name) or {}
        have_labels = have.get("labels") or {}
        facts = dict(node.get("labels") or {})
        if not facts and node.get("gpu"):
            try:
                facts = labels_from_inventory(node["gpu"])
            except LabelPlanError as e:
                errors.extend(f"{name}: {m}" for m in e.errors)
                continue
        gpu = is_gpu_node(facts)
        workload = _workload_of(name, node, default_workload, errors) if gpu else None
        if gpu and workload is None:
            continue
        if not gpu and node.get("workload"):
            errors.append("{}: GPU workload {!r} set on a node without NVIDIA GPUs".format(name, node["workload"]))
            continue
        allocation = _allocation_of(name, node, default_allocation, errors) if gpu else None
        if gpu and allocation is None:
            continue
        if allocation == "dra" and workload != "container":
            if node.get("allocation"):
                errors.append("{}: DRA allocation applies to container nodes, not {}".format(name, workload))
                continue
            allocation = "device-plugin"   # the fleet's default does not reach VM nodes: they have no allocation
        if allocation == "dra":
            if node.get("device_plugin_config"):
                errors.append("{}: device plugin config {!r} on a node that allocates by DRA, where the device plugin "
                              "does not run (share a GPU through a claim's GpuConfig instead)".format(
                                  name, str(node["device_plugin_config"])[:80]))
                continue
            # someone else's deploy label would put the device plugin beside the DRA driver
            if (have_labels.get(DEPLOY + "device-plugin") == "true" and "owned_labels" in have
                    and DEPLOY + "device-plugin" not in have["owned_labels"]):
                errors.append("{}: allocates by DRA but {}device-plugin=true was set by another field manager: the "
                              "device plugin and the DRA driver would both hand out its GPUs (remove that label or "
                              "allocate this node with the device plugin)".format(name, DEPLOY))
                continue
        labels = {}
        comps = []
        if state == "present":
            labels.update(facts)
            labels.update(node.get("extra_labels") or {})
        if state == "present" and gpu:
            labels[PRESENT_LABEL] = "true"
            labels[WORKLOAD_LABEL] = workload
            mig_capable = is_mig_capable(facts)
            vgpu_host = "nvidia.com/vgpu.host-driver-version" in facts
            comps = deploy_components(workload, mig_capable, vgpu_host, sandbox_mode,
                                      allocation if workload == "container" else "device-plugin")
            if have_labels.get(DEPLOY + "operands") == "false":
                comps = []
            for c in comps:
                # the operator honours an existing non-empty value (=false, paused-for-...)
                labels[DEPLOY + c] = have_labels.get(DEPLOY + c) or "true"
            if workload == "container":
                if strategy != "none" and mig_capable:
                    labels[MIG_STRATEGY_LABEL] = strategy
                dpc = node.get("device_plugin_config")
                if dpc:
                    if dp_configs and dpc not in dp_configs:
                        errors.append("{}: device plugin config {!r} is not defined (have: {})".format(name, dpc, ", ".join(sorted(dp_configs))))
                        continue
                    labels[DP_CONFIG_LABEL] = dpc
                    labels.update(_sharing_labels(labels, dp_configs.get(dpc)))
                mig = node.get("mig_config")
                if mig:
                    if not mig_capable:
                        errors.append(f"{name}: MIG config {mig!r} on a node without MIG-capable GPUs")
                        continue
                    labels[MIG_CONFIG_LABEL] = mig
                elif mig_default and mig_capable and (MIG_CONFIG_LABEL not in have_labels
                                                      or MIG_CONFIG_LABEL in (have.get("owned_labels") or ())):
                    labels[MIG_CONFIG_LABEL] = mig_default
            elif node.get("device_plugin_config") or node.get("mig_config"):
                errors.append(f"{name}: device plugin / MIG configs apply to container nodes, not {workload}")
                continue
        ours = [taint] if (state == "present" and gpu and taint_on and (workload == "container" or taint_vm)) else []
        taints = _merge_taints(have.get("taints"), ours, {taint["key"]})
        plan.append({"name": name, "labels": labels, "taints": taints, "workload": workload,
                     "gpu": gpu, "components": comps,
                     "allocation": allocation if gpu and workload == "container" else None})
    if errors:
        raise LabelPlanError(errors)
    return {"nodes": plan}


def _sharing_labels(labels, config):
    """GFD's view of a node's device plugin config, with the host-side GFD code (_labels): replicas,
    sharing strategy (MPS wins over time-slicing, as in GFD), nvidia.com/mps.capable, -SHARED suffix."""
    if not config:
        return {}
    try:
        cfg = _labels.parse_config(config)
    except _labels.GFDConfigError:
        return {}  # the device plugin config validation refuses it with the reason
    strategy = _labels.sharing_strategy(cfg)
    info = _labels.replication_info(cfg)
    replicas = info["replicas"] if info and info["replicas"] > 0 else 1
    out = {"nvidia.com/gpu.replicas": str(replicas),
           "nvidia.com/gpu.sharing-strategy": strategy if replicas > 1 else "none",
           "nvidia.com/mps.capable": "true" if strategy == "mps" else "false"}
    product = labels.get("nvidia.com/gpu.product")
    if product and info and info["replicas"] > 1 and not info["rename"] and not product.endswith("-SHARED"):
        out["nvidia.com/gpu.product"] = product + "-SHARED"
    return out


def owned_labels(managed_fields, manager):
    """A Node's managedFields -> the label keys ``manager`` last applied."""
    keys = set()
    for entry in managed_fields or []:
        if entry.get("manager") != manager or entry.get("operation") != "Apply":
            continue
        fields = entry.get("fieldsV1") or {}
        keys.update(k[2:] for k in ((fields.get("f:metadata") or {}).get("f:labels") or {}) if k.startswith("f:"))
    return keys


def labels_left_by(nodes, managers, keys):
    """Node objects (with managedFields) -> partial Node manifests ``{apiVersion, kind, metadata: {name,
    labels}}`` holding the labels among ``keys`` that only ``managers`` set, with their values: what a removed
    component wrote on the nodes and nobody else claims.  A key ending in ``.`` or ``/`` is a prefix.  A label
    with no managedFields entry at all is nobody's to take (left alone)."""
    managers = set(managers)
    exact = {k for k in keys if not k.endswith((".", "/"))}
    prefixes = tuple(k for k in keys if k.endswith((".", "/")))
    out = []
    for node in nodes:
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        owners = {}
        for entry in meta.get("managedFields") or []:
            fields = ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:labels") or {}
            for f in fields:
                if f.startswith("f:"):
                    owners.setdefault(f[2:], set()).add(entry.get("manager"))
        left = {k: v for k, v in labels.items()
                if (k in exact or k.startswith(prefixes)) and owners.get(k) and owners[k] <= managers}
        if left:
            out.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": meta["name"], "labels": left}})
    return out


def node_current(nodes, field_manager=None):
    """Node objects as the API server returns them -> ``{name: {labels, taints}}``, with ``owned_labels``
    (the label keys ``field_manager`` last applied) when a field manager is given: what ``node_plan`` and
    ``in_sync`` compare with."""
    out = {}
    for node in nodes:
        meta = node["metadata"]
        cur = {"labels": meta.get("labels") or {}, "taints": (node.get("spec") or {}).get("taints") or []}
        if field_manager:
            cur["owned_labels"] = owned_labels(meta.get("managedFields"), field_manager)
        out[meta["name"]] = cur
    return out


def in_sync(node, have):
    """Does applying ``node`` (a plan entry) change nothing?

    ``have``: current labels and taints, and the label keys our field manager owns
    (``owned_labels``; absent = unknown, so not in sync). In sync: our labels are exactly the
    ones we own, with the values we want, and the taints are as planned. Skipping such nodes
    saves a GET and a PATCH per node on a no-op rerun, and a change reported only because a
    node's status moved between that GET and PATCH (seen at 1,000 KWOK nodes).
    """
    if "owned_labels" not in have:
        return False
    labels = have.get("labels") or {}
    if set(have["owned_labels"]) != set(node["labels"]):
        return False
    if any(labels.get(k) != v for k, v in node["labels"].items()):
        return False
    return node["taints"] == (have.get("taints") or [])


def node_objects(plan, field_manager_labels_only=False, current=None):
    """Partial Node manifests for server-side apply (labels + taints only); with ``current``
    (see ``in_sync``), only the nodes whose labels or taints would change."""
    out = []
    for n in plan["nodes"]:
        if current is not None and in_sync(n, current.get(n["name"]) or {}):
            continue
        obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n["name"], "labels": n["labels"]}}
        if not field_manager_labels_only:
            obj["spec"] = {"taints": n["taints"]}
        out.append(obj)
    return out


def placement(plan):
    """{component: sorted node names} — where each deploy label says a component goes."""
    out = {}
    for n in plan["nodes"]:
        for c in n["components"]:
            if n["labels"].get(DEPLOY + c) == "true":
                out.setdefault(c, []).append(n["name"])
    return {k: sorted(v) for k, v in sorted(out.items())}
