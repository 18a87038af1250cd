# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Node labels as Node Feature Discovery and GPU Feature Discovery would set them.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

Only labels that can be known from gathered facts are produced; anything that
needs a running device plugin configuration (sharing, MIG strategy) is left to
the cluster roles.
"""
from __future__ import annotations

import re

NFD = "feature.node.kubernetes.io/"
#: NFD worker's pci deviceClassWhitelist in the GPU Operator's NFD values
NFD_PCI_CLASSES = ("02", "0200", "0207", "0300", "0302")
_SANITISE_RE = re.compile(r"[^A-Za-z0-9_. -]")
_LABEL_VALUE_RE = re.compile(r"[^A-Za-z0-9_.-]")


def sanitise(value):
    """GFD's product-name sanitising: drop odd characters, spaces become dashes."""
    return _SANITISE_RE.sub("", value or "").replace(" ", "-")


def label_value(value):
    """A valid Kubernetes label value (<= 63 chars, alnum at both ends)."""
    value = _LABEL_VALUE_RE.sub("-", str(value))[:63]
    return value.strip("-_.")


def family(major, minor):
    """GFD architecture family from the compute capability."""
    if major is None:
        return None
    table = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper",
             10: "blackwell", 12: "blackwell", 13: "rubin"}
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    return table.get(major, "undefined")


def nfd_pci_labels(nvidia_functions):
    """``feature.node.kubernetes.io/pci-10de.*`` from whitelisted NVIDIA functions."""
    labels = {}
    for dev in nvidia_functions:
        cls = dev.get("class_id") or ""
        if not any(cls.startswith(c) for c in NFD_PCI_CLASSES):
            continue
        labels[NFD + "pci-10de.present"] = "true"
        if dev.get("sriov"):
            labels[NFD + "pci-10de.sriov.capable"] = "true"
    return labels


def nfd_system_labels(kernel, os_release):
    labels = {}
    release = (kernel or {}).get("release")
    if release:
        labels[NFD + "kernel-version.full"] = label_value(release)
        m = re.match(r"(\d+)\.(\d+)\.(\d+)", release)
        if m:
            labels[NFD + "kernel-version.major"] = m.group(1)
            labels[NFD + "kernel-version.minor"] = m.group(2)
            labels[NFD + "kernel-version.revision"] = m.group(3)
    if os_release and os_release.get("id"):
        labels[NFD + "system-os_release.ID"] = label_value(os_release["id"])
        if os_release.get("version_id"):
            labels[NFD + "system-os_release.VERSION_ID"] = label_value(os_release["version_id"])
            major = os_release["version_id"].split(".")[0]
            labels[NFD + "system-os_release.VERSION_ID.major"] = label_value(major)
    return labels


def gfd_labels(gpus, driver_version=None, cuda_version=None, machine=None):
    """GFD labels for the host's (non-VFIO) GPUs.

    ``gpus``: list of dicts with ``product``, ``memory_mib``, ``compute_capability``
    ("9.0"), ``mig_capable``, ``mig_enabled``, ``mode`` (compute/graphics).
    Heterogeneous nodes get the first GPU's product, as GFD does.
    """
    if not gpus:
        return {}
    first = gpus[0]
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(len(gpus)),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true" if any(g.get("mig_capable") for g in gpus) else "false",
    }
    if first.get("product"):
        labels["nvidia.com/gpu.product"] = label_value(sanitise(first["product"]))
    if first.get("memory_mib"):
        labels["nvidia.com/gpu.memory"] = str(first["memory_mib"])
    if first.get("mode"):
        labels["nvidia.com/gpu.mode"] = first["mode"]
    cc = first.get("compute_capability")
    if cc:
        major, _sep, minor = cc.partition(".")
        labels["nvidia.com/gpu.compute.major"] = major
        labels["nvidia.com/gpu.compute.minor"] = minor or "0"
        fam = family(int(major), int(minor or 0))
        if fam:
            labels["nvidia.com/gpu.family"] = fam
    if machine:
        labels["nvidia.com/gpu.machine"] = label_value(sanitise(machine))
    if driver_version:
        parts = driver_version.split(".")
        major, minor, rev = (parts + ["", "", ""])[:3]
        labels["nvidia.com/cuda.driver-version.major"] = major
        labels["nvidia.com/cuda.driver-version.minor"] = minor
        labels["nvidia.com/cuda.driver-version.revision"] = rev
        labels["nvidia.com/cuda.driver-version.full"] = driver_version
        labels["nvidia.com/cuda.driver.major"] = major
        labels["nvidia.com/cuda.driver.minor"] = minor
        labels["nvidia.com/cuda.driver.rev"] = rev
    if cuda_version:
        cmaj, _sep, cmin = cuda_version.partition(".")
        labels["nvidia.com/cuda.runtime-version.major"] = cmaj
        labels["nvidia.com/cuda.runtime-version.minor"] = cmin or "0"
        labels["nvidia.com/cuda.runtime-version.full"] = "%s.%s" % (cmaj, cmin or "0")
        labels["nvidia.com/cuda.runtime.major"] = cmaj
        labels["nvidia.com/cuda.runtime.minor"] = cmin or "0"
    return labels
