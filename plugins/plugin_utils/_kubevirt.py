# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""KubeVirt's permitted host devices from GPU facts (controller side only).

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

* Resource names exactly as NVIDIA's kubevirt-gpu-device-plugin (the sandbox device plugin, v1.6.0
  in GPU Operator v26.7.0) registers them with the kubelet; the plugin has no naming option, so
  this is a replica of its rule, kept in one place for the sandbox device plugin role, the KubeVirt
  CR and the docs:

  - passthrough (GPUs on vfio-pci): ``nvidia.com/`` + the pci.ids device name, upper-cased, ``/``
    and ``.`` and runs of whitespace to ``_``, anything outside ``[A-Za-z0-9_.]`` removed
    (``GH100 [H100 PCIe]`` -> ``nvidia.com/GH100_H100_PCIE``); a device ID its pci.ids does not
    know falls back to the ID as sysfs shows it (lower-case hex, ``nvidia.com/2bb5``);
  - vGPU (mdev): ``nvidia.com/`` + the mdev type's ``name`` with runs of whitespace to ``_``, case
    kept (``GRID T4-1Q`` -> ``nvidia.com/GRID_T4-1Q``).

* ``host_devices``: the ``pciHostDevices`` / ``mediatedDevices`` entries of the KubeVirt CR's
  ``spec.configuration.permittedHostDevices`` for the vm-passthrough and vm-vgpu nodes.
* ``merge``: those entries merged into the cluster's KubeVirt CR. Both lists are
  ``x-kubernetes-list-type: atomic`` in KubeVirt's CRD, so a server-side apply of our entries
  alone would replace the user's: the CR is read, the entries recorded in our annotation
  (``ANNOTATION``) are ours, every other entry is kept as it is, and the whole merged list is
  applied (docs/kubevirt.md).

No Ansible import: plain data in, plain data out; bad input raises ``KubeVirtInputError``.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping

from ansible_collections.gpuops.nvidia.plugins.module_utils import _pci_ids
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError

NVIDIA_VENDOR = "10de"
RESOURCE_DOMAIN = "nvidia.com"
ANNOTATION = "gpuops.nvidia/permitted-host-devices"
API_VERSION = "kubevirt.io/v1"
KIND = "KubeVirt"
VM_WORKLOADS = ("vm-passthrough", "vm-vgpu")
LISTS = ("pciHostDevices", "mediatedDevices")
SELECTOR = {"pciHostDevices": "pciVendorSelector", "mediatedDevices": "mdevNameSelector"}
VGPU_CONFIG_LABEL = "nvidia.com/vgpu.config"

# Go's regexp \s is ASCII whitespace only ([\t\n\f\r ]); Python's \s would also take \v and Unicode spaces
_GO_SPACES = re.compile(r"[\t\n\f\r ]+")
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_.]+")
_HEX_ID = re.compile(r"^[0-9a-fA-F]{4}\Z")
# vGPU type names as the vGPU device manager's config takes them (its own syntax check):
# time-sliced <board>-<GB><series>, MIG-backed <board>-<G>-<GB><series>[ME]
_VGPU_TYPE = re.compile(r"^(?P<board>[A-Z0-9]+)-(?:[1-9]-)?(?:0|[1-9][0-9]*)[ABCQ](?:ME)?\Z")


class KubeVirtInputError(InputError):
    """Input the KubeVirt planning refuses; the message says what and why."""


def _go_upper(text):
    """Go's strings.ToUpper maps rune to rune; Python's str.upper may expand one (ß -> SS)."""
    return "".join(c.upper() if len(c.upper()) == 1 else c for c in text)


def device_plugin_pci_name(pci_name, device_id):
    """The resource name's part after ``nvidia.com/`` for a passthrough GPU, as the plugin makes it:
    ``getDeviceName`` (pci.ids name, trimmed, upper-cased, ``/`` and ``.`` to ``_``, whitespace runs
    to ``_``, then everything outside ``[a-zA-Z0-9_.]`` removed), else the device ID."""
    if not isinstance(device_id, str) or not _HEX_ID.match(device_id):
        raise KubeVirtInputError("a PCI device ID is 4 hex digits (like 20b5), got %r" % (device_id,))
    if pci_name is not None and not isinstance(pci_name, str):
        raise KubeVirtInputError("a pci.ids device name must be a string, got %r" % (pci_name,))
    name = (pci_name or "").strip()
    if not name or name.lower() == "%s:%s" % (NVIDIA_VENDOR, device_id.lower()):
        # gpu_facts' name for an ID neither pci.ids nor the built-in table knows: the plugin's fallback
        return device_id.lower()
    name = _go_upper(name).replace("/", "_").replace(".", "_")
    name = _GO_SPACES.sub("_", name)
    name = _NOT_NAME.sub("", name)
    return name or device_id.lower()


def pci_resource_name(device_id, pci_name):
    return "%s/%s" % (RESOURCE_DOMAIN, device_plugin_pci_name(pci_name, device_id))


def pci_vendor_selector(device_id, vendor=NVIDIA_VENDOR):
    """``VENDOR:DEVICE`` upper-case hex, as KubeVirt's permittedHostDevices examples write it."""
    if not isinstance(device_id, str) or not _HEX_ID.match(device_id):
        raise KubeVirtInputError("a PCI device ID is 4 hex digits (like 20b5), got %r" % (device_id,))
    return "%s:%s" % (vendor.upper(), device_id.upper())


def mdev_resource_name(mdev_name):
    """The plugin's vGPU resource: the mdev type's name, whitespace runs to ``_``, case kept."""
    if not isinstance(mdev_name, str) or not mdev_name.strip():
        raise KubeVirtInputError("an mdev type name is a non-empty string like 'GRID T4-1Q', got %r" % (mdev_name,))
    return "%s/%s" % (RESOURCE_DOMAIN, _GO_SPACES.sub("_", mdev_name.strip("\n")))


def _cc_major(cc):
    try:
        return int(str(cc).split(".", 1)[0])
    except (TypeError, ValueError):
        return None


def mdev_type_name(vgpu_type, compute_capability=None):
    """The name an mdev type reports (``mdev_supported_types/*/name``) for a vGPU type of the vGPU
    device manager's config: NVIDIA's vGPU manager prefixes ``GRID`` on Maxwell..Turing GPUs
    (``GRID T4-1Q``) and ``NVIDIA`` from Ampere on (``NVIDIA A10-4Q``); the vGPU device manager
    itself names types by the last word only. The GPU's compute capability decides (>= 8: Ampere or
    newer); without it, boards named M*, P*, V*, T* are taken as pre-Ampere."""
    if not isinstance(vgpu_type, str):
        raise KubeVirtInputError("a vGPU type is a string like A10-4Q, got %r" % (vgpu_type,))
    m = _VGPU_TYPE.match(vgpu_type)
    if not m:
        raise KubeVirtInputError("%r is not a vGPU type name (<board>-<GB><series> like A10-4Q, or "
                                 "<board>-<G>-<GB><series> like A100-1-5C)" % (vgpu_type,))
    major = _cc_major(compute_capability) if compute_capability is not None else None
    if major is None:
        grid = m.group("board")[0] in "MPVT"
    else:
        grid = major < 8
    return ("GRID " if grid else "NVIDIA ") + vgpu_type


def resource_name(item):
    """One entry point for the docs and the roles: a gpu_facts device (``device_id``, ``name``) ->
    its passthrough resource; an mdev type name (string) -> its vGPU resource."""
    if isinstance(item, Mapping):
        return pci_resource_name(item.get("device_id"), item.get("name"))
    return mdev_resource_name(item)


# -- nodes -> permitted host devices ------------------------------------------------------------------

def _product_device_ids():
    out = {}
    for dev_id, entry in _pci_ids.BUILTIN.items():
        if entry[1]:
            out.setdefault(entry[1].lower(), dev_id)
    return out


def _declared_gpus(name, gpu, warnings):
    """A declared GPU inventory (gpuops_gpu_inventory) -> [{device_id, name, compute_capability}]."""
    if not gpu:
        return []
    if not isinstance(gpu, Mapping):
        raise KubeVirtInputError("%s: gpuops_gpu_inventory must be a mapping (product, count, ...), got %r" % (name, gpu))
    dev_id = gpu.get("device_id")
    pci_name = gpu.get("pci_name")
    if dev_id is not None:
        if not isinstance(dev_id, str) or not _HEX_ID.match(dev_id.split(":")[-1]):
            raise KubeVirtInputError("%s: gpuops_gpu_inventory.device_id must be 4 hex digits (like 20b5), got %r"
                                     % (name, dev_id))
        dev_id = dev_id.split(":")[-1].lower()
    elif isinstance(gpu.get("product"), str):
        dev_id = _product_device_ids().get(gpu["product"].lower())
    if dev_id is None:
        warnings.append("%s: the PCI device ID of the declared GPU %r is unknown (not in the built-in table); "
                        "give gpuops_gpu_inventory.device_id (and pci_name) or gather gpu facts"
                        % (name, gpu.get("product")))
        return [{"device_id": None, "name": None, "compute_capability": gpu.get("compute_capability")}]
    if pci_name is None:
        entry = _pci_ids.BUILTIN.get(dev_id)
        pci_name = entry[0] if entry else None
        if pci_name is None:
            warnings.append("%s: no pci.ids name known for device %s: its resource name falls back to the ID "
                            "(give gpuops_gpu_inventory.pci_name as the plugin's pci.ids has it)" % (name, dev_id))
    elif not isinstance(pci_name, str):
        raise KubeVirtInputError("%s: gpuops_gpu_inventory.pci_name must be a string, got %r" % (name, pci_name))
    return [{"device_id": dev_id, "name": pci_name, "compute_capability": gpu.get("compute_capability")}]


def _fact_gpus(name, devices):
    if not isinstance(devices, (list, tuple)):
        raise KubeVirtInputError("%s: gpu facts' devices must be a list, got %r" % (name, devices))
    out = []
    for i, d in enumerate(devices):
        if not isinstance(d, Mapping) or not isinstance(d.get("device_id"), str):
            raise KubeVirtInputError("%s: gpu facts' devices[%d] has no device_id (is it gpu_facts' output?)" % (name, i))
        if (d.get("vendor_id") or NVIDIA_VENDOR) != NVIDIA_VENDOR:
            continue
        out.append({"device_id": d["device_id"].lower(), "name": d.get("name"),
                    "compute_capability": d.get("compute_capability")})
    return out


def _vgpu_types(name, node, vgpu_config, default_config, warnings):
    """The vGPU types the vGPU device manager creates on a node: its config (label
    nvidia.com/vgpu.config, else the default config), every entry's vgpu-devices."""
    cfg = node.get("vgpu_config") if node.get("vgpu_config") is not None else vgpu_config
    default = node.get("vgpu_default_config") or default_config or "default"
    if not cfg:
        warnings.append("%s: vm-vgpu node without a vGPU device manager config: no mediated devices" % name)
        return []
    if not isinstance(cfg, Mapping) or not isinstance(cfg.get("vgpu-configs"), Mapping):
        raise KubeVirtInputError("%s: the vGPU device manager config must have vgpu-configs (name -> entries), got %r"
                                 % (name, cfg))
    labels = node.get("extra_labels") or {}
    if not isinstance(labels, Mapping):
        raise KubeVirtInputError("%s: gpuops_k8s_node_labels must be a mapping, got %r" % (name, labels))
    chosen = labels.get(VGPU_CONFIG_LABEL) or default
    entries = cfg["vgpu-configs"].get(chosen)
    if entries is None:
        warnings.append("%s: vGPU config %r is not defined in the vGPU device manager config: no mediated devices"
                        % (name, chosen))
        return []
    if not isinstance(entries, (list, tuple)):
        raise KubeVirtInputError("%s: vGPU config %r must be a list of entries, got %r" % (name, chosen, entries))
    types = []
    for e in entries:
        devs = e.get("vgpu-devices") if isinstance(e, Mapping) else None
        if not isinstance(devs, Mapping):
            raise KubeVirtInputError("%s: vGPU config %r: every entry needs vgpu-devices (type -> count), got %r"
                                     % (name, chosen, e))
        types.extend(t for t in devs if t not in types)
    return types


def host_devices(nodes, vgpu_config=None, default_config="default"):
    """Permitted host devices for the vm-passthrough / vm-vgpu nodes.

    ``nodes``: ``[{name, workload, devices (gpu_facts' devices, or None), gpu (declared inventory),
    extra_labels, vgpu_config, vgpu_default_config}]``; ``vgpu_config``: the vGPU device manager
    config for nodes that carry none themselves.

    Returns ``{pciHostDevices, mediatedDevices, resource_names, nodes: {name: [resource names]},
    warnings}``; lists sorted, so the result is the same whatever the inventory order.
    """
    if not isinstance(nodes, (list, tuple)):
        raise KubeVirtInputError("nodes must be a list, got %r" % (nodes,))
    warnings = []
    pci = {}
    mdev = {}
    per_node = {}
    for i, node in enumerate(nodes):
        if not isinstance(node, Mapping) or not isinstance(node.get("name"), str) or not node.get("name"):
            raise KubeVirtInputError("nodes[%d] must be a mapping with a name, got %r" % (i, node))
        name = node["name"]
        workload = node.get("workload")
        if workload not in VM_WORKLOADS:
            continue
        if node.get("devices") is not None:
            gpus = _fact_gpus(name, node["devices"])
        else:
            gpus = _declared_gpus(name, node.get("gpu"), warnings)
        if not gpus:
            warnings.append("%s: %s node without GPU facts or a declared GPU inventory: nothing to permit"
                            % (name, workload))
        names = []
        if workload == "vm-passthrough":
            for g in gpus:
                if g["device_id"] is None:
                    continue
                res = pci_resource_name(g["device_id"], g["name"])
                key = (pci_vendor_selector(g["device_id"]), res)
                pci[key] = {"pciVendorSelector": key[0], "resourceName": res, "externalResourceProvider": True}
                names.append(res)
        else:
            ccs = sorted({str(g["compute_capability"]) for g in gpus if g.get("compute_capability") is not None})
            if len({_cc_major(c) is not None and _cc_major(c) >= 8 for c in ccs}) > 1:
                warnings.append("%s: GPUs before and after Ampere on one vGPU node; mdev names taken from %s"
                                % (name, ccs[-1]))
            cc = ccs[-1] if ccs else None
            for t in _vgpu_types(name, node, vgpu_config, default_config, warnings):
                mname = mdev_type_name(t, cc)
                res = mdev_resource_name(mname)
                mdev[mname] = {"mdevNameSelector": mname, "resourceName": res, "externalResourceProvider": True}
                names.append(res)
        per_node[name] = sorted(set(names))
    selectors = {}
    for sel, res in pci:
        selectors.setdefault(sel, []).append(res)
    for sel, names in sorted(selectors.items()):
        if len(names) > 1:
            warnings.append("%s has two names on different nodes (%s): their pci.ids differ; the device plugin "
                            "advertises the name of the pci.ids in its image" % (sel, ", ".join(sorted(names))))
    pci_list = [pci[k] for k in sorted(pci)]
    mdev_list = [mdev[k] for k in sorted(mdev)]
    return {
        "pciHostDevices": pci_list,
        "mediatedDevices": mdev_list,
        "resource_names": sorted({e["resourceName"] for e in pci_list + mdev_list}),
        "nodes": per_node,
        "warnings": warnings,
    }


# -- merge into the KubeVirt CR ------------------------------------------------------------------------

def _key(kind, entry):
    sel = entry.get(SELECTOR[kind])
    if kind == "pciHostDevices" and isinstance(sel, str):
        sel = sel.upper()
    return (sel, entry.get("resourceName"))


def _recorded(annotations, warnings):
    raw = (annotations or {}).get(ANNOTATION)
    if raw is None:
        return {k: set() for k in LISTS}
    try:
        data = json.loads(raw)
        out = {}
        for k in LISTS:
            out[k] = {(sel.upper() if k == "pciHostDevices" else sel, res) for sel, res in data.get(k, [])}
        return out
    except (TypeError, ValueError, AttributeError):
        warnings.append("annotation %s is not what this collection writes (%r): no entry is taken as ours"
                        % (ANNOTATION, raw[:200] if isinstance(raw, str) else raw))
        return {k: set() for k in LISTS}


def _desired(desired):
    if not isinstance(desired, Mapping):
        raise KubeVirtInputError("desired must be host_devices' result (pciHostDevices, mediatedDevices), got %r"
                                 % (desired,))
    out = {}
    for kind in LISTS:
        entries = desired.get(kind) or []
        if not isinstance(entries, (list, tuple)):
            raise KubeVirtInputError("desired %s must be a list, got %r" % (kind, entries))
        for e in entries:
            if not isinstance(e, Mapping) or not isinstance(e.get(SELECTOR[kind]), str) \
                    or not isinstance(e.get("resourceName"), str):
                raise KubeVirtInputError("desired %s entries need %s and resourceName, got %r" % (kind, SELECTOR[kind], e))
        out[kind] = [dict(e) for e in entries]
    return out


def merge(kubevirt, desired, state="present"):
    """Our entries merged into a KubeVirt CR (a k8s_info resource).

    Entries named in our annotation are ours; all others are the user's and are kept as they are,
    in their order; ours follow, sorted. A desired entry the user already has (same selector and
    resource name) stays the user's. ``state: absent`` removes ours only.

    Returns ``{name, namespace, changed, apply, added, removed, kept, ours, conflicts, warnings}``;
    ``apply`` is the whole manifest to server-side apply (the merged lists and the annotation, or
    neither where nothing is left), meaningful when ``changed``.
    """
    if state not in ("present", "absent"):
        raise KubeVirtInputError("state must be present or absent, got %r" % (state,))
    if not isinstance(kubevirt, Mapping) or not isinstance(kubevirt.get("metadata"), Mapping) \
            or not isinstance(kubevirt["metadata"].get("name"), str):
        raise KubeVirtInputError("kubevirt must be a KubeVirt resource as k8s_info returns it, got %r"
                                 % (str(kubevirt)[:200],))
    want = _desired(desired) if state == "present" else {k: [] for k in LISTS}
    meta = kubevirt["metadata"]
    annotations = meta.get("annotations") or {}
    warnings = []
    recorded = _recorded(annotations, warnings)
    spec = kubevirt.get("spec") or {}
    phd = ((spec.get("configuration") or {}).get("permittedHostDevices")) or {}
    result = {"name": meta["name"], "namespace": meta.get("namespace"), "added": [], "removed": [], "kept": [],
              "ours": [], "conflicts": [], "warnings": warnings}
    merged = {}
    record = {}
    changed = False
    for kind in LISTS:
        current = phd.get(kind) or []
        if not isinstance(current, list) or not all(isinstance(e, Mapping) for e in current):
            raise KubeVirtInputError("the KubeVirt CR's permittedHostDevices.%s is not a list of entries: %r"
                                     % (kind, current))
        others = [dict(e) for e in current if _key(kind, e) not in recorded[kind]]
        other_keys = {_key(kind, e) for e in others}
        other_sel = {}
        for e in others:
            other_sel.setdefault(_key(kind, e)[0], set()).add(e.get("resourceName"))
        mine = [e for e in want[kind] if _key(kind, e) not in other_keys]
        for e in want[kind]:
            sel, res = _key(kind, e)
            if sel in other_sel and res not in other_sel[sel]:
                result["conflicts"].append("%s %s: the CR also permits it as %s (not ours, kept)"
                                           % (kind, sel, ", ".join(sorted(str(r) for r in other_sel[sel]))))
        merged[kind] = others + mine
        record[kind] = [list(_key(kind, e)) for e in mine]
        cur_keys = {_key(kind, e) for e in current}
        result["added"] += ["%s %s" % (kind, "=".join(_key(kind, e))) for e in mine if _key(kind, e) not in cur_keys]
        new_keys = {_key(kind, e) for e in merged[kind]}
        result["removed"] += ["%s %s" % (kind, "=".join(str(x) for x in _key(kind, e)))
                              for e in current if _key(kind, e) not in new_keys]
        result["kept"] += ["%s %s" % (kind, "=".join(str(x) for x in _key(kind, e))) for e in others]
        result["ours"] += ["%s %s" % (kind, "=".join(_key(kind, e))) for e in mine]
        if merged[kind] != [dict(e) for e in current]:
            changed = True
    note = json.dumps({k: record[k] for k in LISTS if record[k]}, sort_keys=True, separators=(",", ":"))
    has_record = any(record[k] for k in LISTS)
    if annotations.get(ANNOTATION) != (note if has_record else None):
        changed = True
    manifest = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": meta["name"]}}
    if meta.get("namespace"):
        manifest["metadata"]["namespace"] = meta["namespace"]
    if has_record:
        manifest["metadata"]["annotations"] = {ANNOTATION: note}
    lists = {k: merged[k] for k in LISTS if merged[k]}
    if lists:
        manifest["spec"] = {"configuration": {"permittedHostDevices": lists}}
    result["changed"] = changed
    result["apply"] = manifest
    return result
