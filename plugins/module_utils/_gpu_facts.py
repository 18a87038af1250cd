# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Assemble ``ansible_facts.gpu`` from the sysfs/procfs readers and NVML.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.
"""
from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.module_utils import _host, _labels, _nvml, _pci, _pci_ids
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError

SUBSETS = ("pci", "iommu", "kernel", "driver", "runtime", "nvml")


class SubsetError(InputError):
    pass


def resolve_subsets(requested):
    """Expand ``all`` and validate; returns a sorted tuple of subset names."""
    requested = list(requested or ["all"])
    unknown = [s for s in requested if s not in SUBSETS + ("all",)]
    if unknown:
        raise SubsetError("unknown gather_subset %s; choose from %s" % (
            ", ".join(sorted(unknown)), ", ".join(SUBSETS + ("all",))))
    if "all" in requested:
        return SUBSETS
    return tuple(s for s in SUBSETS if s in requested)


def _slot(bdf):
    return bdf.rsplit(".", 1)[0]


def _annotate_groups(root, functions, groups, warnings):
    """Per NVIDIA function: companions, group members and passthrough viability."""
    by_bdf = dict((d["bdf"], d) for d in functions)
    cache = {}

    def member(bdf):
        if bdf not in by_bdf and bdf not in cache:
            cache[bdf] = _pci.read_pci_device(root, bdf, warnings)
        return by_bdf.get(bdf) or cache[bdf]

    for dev in functions:
        group = dev.get("iommu_group")
        if group is not None and group in groups:
            members = [b for b in groups[group] if b != dev["bdf"]]
            endpoints = [b for b in members if not _pci.is_bridge(member(b).get("class_id"))]
            dev["companions"] = sorted(b for b in endpoints if b in by_bdf)
            dev["iommu_group_members"] = sorted(endpoints)
            foreign = sorted(b for b in endpoints if b not in by_bdf)
            dev["iommu_group_foreign"] = foreign
            dev["passthrough_viable"] = not foreign
        else:
            # no IOMMU groups: best effort, other NVIDIA functions of the same slot
            dev["companions"] = sorted(b for b in by_bdf if b != dev["bdf"] and _slot(b) == _slot(dev["bdf"]))
            dev["iommu_group_members"] = []
            dev["iommu_group_foreign"] = []
            dev["passthrough_viable"] = False


def _enrich_products(gpus, nvml):
    """Product/memory/compute capability: NVML where it answered, else the built-in table."""
    by_bdf = dict((d["bdf"], d) for d in (nvml or {}).get("devices", []))
    for dev in gpus:
        nv = by_bdf.get(dev["bdf"])
        dev["mode"] = "compute" if (dev.get("class_id") or "").startswith("0302") else "graphics"
        if nv:
            dev.update({"product": nv["name"], "memory_mib": nv["memory_mib"], "uuid": nv["uuid"],
                        "compute_capability": nv["compute_capability"], "mig_capable": nv["mig_capable"],
                        "mig_enabled": bool(nv["mig_mode"] and nv["mig_mode"]["current"]),
                        "facts_source": "nvml"})
            continue
        info = _pci_ids.product_info(dev["device_id"])
        dev.update({"product": None, "memory_mib": None, "uuid": None, "compute_capability": None,
                    "mig_capable": False, "mig_enabled": False, "facts_source": None})
        if info:
            product, cc, mem, mig = info
            dev.update({"product": product, "memory_mib": mem, "compute_capability": "%d.%d" % cc,
                        "mig_capable": mig, "facts_source": "builtin"})


def gather(root="/", subsets=SUBSETS, nvml_lib=None, load_nvml=_nvml.load, gfd_config=None):
    """Return (facts, warnings); ``facts["warnings"]`` holds the same sentences (a node file that is not a
    regular file, or larger than its bound, is one of them: it is never read).
    ``nvml_lib``: a pynvml-like object, or None to import pynvml.
    ``gfd_config``: a device-plugin/GFD config (sharing, flags.migStrategy) the GFD labels are
    computed under (_labels.gfd_labels); None: GFD without a config file."""
    warnings = []
    notes = []
    facts = {"root": root, "gather_subset": list(subsets)}
    need_pci = "pci" in subsets or "iommu" in subsets

    kernel = _host.read_kernel(root, warnings)
    if "kernel" in subsets:
        facts["kernel"] = kernel
        facts["os"] = _host.read_os_release(root, warnings)

    nvidia = _pci.read_pci_devices(root, vendor=_pci.NVIDIA_VENDOR, warnings=warnings) if need_pci else []
    groups = _pci.read_iommu_groups(root) if need_pci else {}
    names, names_source = _pci_ids.load_names(root, warnings=warnings) if nvidia else ({}, None)
    for dev in nvidia:
        dev["name"] = _pci_ids.device_name(dev["device_id"], names)
        dev["kind"] = _pci.classify_nvidia(dev)
    if need_pci:
        _annotate_groups(root, nvidia, groups, warnings)

    driver = None
    if "driver" in subsets:
        driver = _host.read_driver(root, kernel, warnings)
        facts["driver"] = driver
        facts["secure_boot"] = _host.read_secure_boot(root, warnings)

    if "runtime" in subsets:
        facts["container_runtimes"] = _host.read_container_runtimes(root)

    nvml = None
    if "nvml" in subsets:
        lib, note = (nvml_lib, None) if nvml_lib is not None else load_nvml()
        if lib is None:
            notes.append(note)
        else:
            nvml = _nvml.collect(lib)
            if nvml.get("available"):
                facts["nvml"] = nvml
            else:
                notes.append("NVML did not answer: %s" % "; ".join(nvml.get("errors", [])))
                nvml = None

    gpus = [d for d in nvidia if d["kind"] == "gpu"]
    if need_pci:
        _enrich_products(gpus, nvml)
        facts["devices"] = gpus
        facts["nvswitches"] = [d for d in nvidia if d["kind"] == "nvswitch"]
        facts["others"] = [d for d in nvidia if d["kind"] not in ("gpu", "nvswitch")]
        facts["count"] = len(gpus)
        facts["pci_ids_source"] = names_source or "builtin"

    if "iommu" in subsets:
        facts["iommu"] = _host.read_iommu(root, kernel, groups, warnings)

    facts["machine"] = _host.read_machine(root, warnings)
    vgpu = None
    if gpus:
        # GFD looks at every NVIDIA function's PCI config space for a vGPU capability
        vgpu, vgpu_note = _labels.read_vgpu_devices(root, [d["bdf"] for d in nvidia])
        if vgpu_note:
            notes.append(vgpu_note)
    facts["labels"] = compute_labels(facts, kernel, driver, nvml, vgpu=vgpu, gfd_config=gfd_config)
    facts["notes"] = notes
    facts["warnings"] = list(warnings)
    return facts, warnings


def compute_labels(facts, kernel, driver, nvml, vgpu=None, gfd_config=None):
    labels = {}
    functions = facts.get("devices", []) + facts.get("others", []) + facts.get("nvswitches", [])
    labels.update(_labels.nfd_pci_labels(functions))
    if "os" in facts:
        labels.update(_labels.nfd_system_labels(kernel, facts["os"]))
    host_gpus = [d for d in facts.get("devices", []) if d.get("driver") not in _pci.VFIO_DRIVERS]
    driver_version = (nvml or {}).get("driver_version") or (driver or {}).get("version")
    cuda = (nvml or {}).get("cuda_driver_version")
    # GFD reads the DMI product name under the root; "unknown" when it cannot be read
    machine = _labels.machine_type(facts.get("machine"))
    labels.update(_labels.gfd_labels(host_gpus, driver_version, cuda, machine, config=gfd_config, vgpu=vgpu))
    if nvml:
        labels["nvidia.com/mig.capable"] = "true" if any(d["mig_capable"] for d in nvml["devices"]) else "false"
    return labels
