# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Node labels as Node Feature Discovery and GPU Feature Discovery would set them.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

Only labels that can be known from gathered facts are produced.  GFD's rules are
those of NVIDIA k8s-device-plugin v0.17.x (internal/lm, internal/vgpu, api/config/v1);
a device-plugin config (sharing, MIG strategy) can be passed to gfd_labels() to get
the labels GFD would set under it.
"""
from __future__ import annotations

import os
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError
from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import read_node_file

NFD = "feature.node.kubernetes.io/"
#: NFD worker's pci deviceClassWhitelist in the GPU Operator's NFD values
NFD_PCI_CLASSES = ("02", "0200", "0207", "0300", "0302")
_SANITISE_RE = re.compile(r"[^A-Za-z0-9_. -]")
_LABEL_VALUE_RE = re.compile(r"[^A-Za-z0-9_.-]")


def sanitise(value):
    """GFD's sanitise (internal/lm/resource.go:316-324): drop every character but
    A-Z a-z 0-9 ``-`` ``_`` ``.`` and space, then join the space-separated words with ``-``
    (runs of spaces collapse to one dash, leading and trailing spaces go)."""
    return "-".join(w for w in _SANITISE_RE.sub("", value or "").split(" ") if w)


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


#: GFD v0.17.x writes this when the machine type file cannot be read
#: (internal/lm/machine-type.go:27-36)
MACHINE_TYPE_UNKNOWN = "unknown"
#: GFD (privileged) reads at least this much PCI config space (internal/vgpu/pciutil.go:116)
PCI_CONFIG_MIN = 256
_PCI_STATUS = 0x06
_PCI_STATUS_CAP_LIST = 0x10
_PCI_CAP_PTR = 0x34
_PCI_CAP_VENDOR_SPECIFIC = 0x09
_MIG_STRATEGIES = ("none", "single", "mixed")
GPU_RESOURCE = "nvidia.com/gpu"
RESOURCE_PREFIX = "nvidia.com/"


class GFDConfigError(InputError):
    """A sharing/MIG config GFD would refuse, or a case GFD fails on (it then writes no labels)."""


def machine_type(product_name):
    """GFD's machine type (machine-type.go:44-53): the content of its --machine-type-file
    (default /sys/class/dmi/id/product_name, cmd/gpu-feature-discovery/main.go:89-94; gpu_facts
    reads it under its root), space-trimmed, or ``unknown`` when it could not be read
    (``product_name`` None)."""
    if product_name is None:
        return MACHINE_TYPE_UNKNOWN
    return product_name.strip()


# --- sharing config, as GFD sees it after parsing ------------------------------------------

def _replicated_resources(spec, key):
    """One ``sharing.timeSlicing`` / ``sharing.mps`` section as GFD parses it
    (api/config/v1/replicas.go:164-268) and then rewrites it with DisableResourceNamingInConfig
    (config.go:90-102, replicas.go:35-65): ``rename`` ends up empty, or ``<name>.shared`` when
    ``renameByDefault`` is true.  A name without a ``nvidia.com/`` prefix gets it, as the plugin's
    ResourceName does (so ``gpu`` labels ``nvidia.com/gpu``)."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise GFDConfigError("sharing.%s must be a mapping" % key)
    for flag in ("renameByDefault", "failRequestsGreaterThanOne"):
        # a JSON bool in GFD's struct: anything but a bool or null fails the config's unmarshalling
        # (GFD then writes no labels at all); null leaves the default
        if spec.get(flag) is not None and not isinstance(spec[flag], bool):
            raise GFDConfigError("sharing.%s.%s must be true or false, got %r" % (key, flag, spec[flag]))
    rename_by_default = spec.get("renameByDefault") is True
    resources = spec.get("resources")
    if not resources:
        raise GFDConfigError("sharing.%s: no resources specified" % key)
    if not isinstance(resources, list):
        raise GFDConfigError("sharing.%s.resources must be a list, got %r" % (key, resources))
    out = []
    for res in resources:
        if not isinstance(res, dict) or not res.get("name"):
            raise GFDConfigError("sharing.%s: no resource name specified" % key)
        if "replicas" not in res:
            raise GFDConfigError("sharing.%s: no replicas specified" % key)
        replicas = res["replicas"]
        if isinstance(replicas, bool) or not isinstance(replicas, int):
            raise GFDConfigError("sharing.%s: replicas must be an integer, got %r" % (key, replicas))
        if replicas < 2:
            raise GFDConfigError("sharing.%s: number of replicas must be >= 2" % key)
        devices = res.get("devices", "all")
        if not (devices == "all" or isinstance(devices, list)
                or (isinstance(devices, int) and not isinstance(devices, bool) and devices > 0)):
            raise GFDConfigError("sharing.%s: unrecognized devices spec %r" % (key, devices))
        name = res["name"]
        if not isinstance(name, str):
            raise GFDConfigError("sharing.%s: resource name must be a string, got %r" % (key, name))
        if not name.startswith(RESOURCE_PREFIX):
            name = RESOURCE_PREFIX + name  # NewResourceName (resources.go): a bare "gpu" is nvidia.com/gpu
        out.append({"name": name, "replicas": replicas,
                    "rename": name + ".shared" if rename_by_default else ""})
    return {"rename_by_default": rename_by_default, "resources": out}


def parse_config(config):
    """A device-plugin/GFD config (a dict as loaded from its YAML: ``version``, ``flags``,
    ``sharing``), or only its ``sharing`` section, or None (GFD without a config file).

    Returns ``{"mig_strategy", "time_slicing", "mps"}``; ``mps`` None when absent (GFD's
    ``Sharing.MPS`` is a pointer), ``time_slicing`` None when absent (an empty value in GFD).
    """
    config = config or {}
    if not isinstance(config, dict):
        raise GFDConfigError("config must be a mapping")
    if "sharing" in config or "flags" in config or "version" in config:
        sharing = config.get("sharing") or {}
        flags = config.get("flags") or {}
    else:
        sharing, flags = config, {}
    for name, value in (("sharing", sharing), ("flags", flags)):
        if not isinstance(value, dict):
            raise GFDConfigError("%s must be a mapping, got %r" % (name, value))
    strategy = flags.get("migStrategy") or "none"
    if not isinstance(strategy, str):
        raise GFDConfigError("flags.migStrategy must be none, single or mixed, got %r" % (strategy,))
    if strategy not in _MIG_STRATEGIES:
        raise GFDConfigError("unknown strategy: %s" % strategy)
    return {"mig_strategy": strategy,
            "time_slicing": _replicated_resources(sharing.get("timeSlicing"), "timeSlicing"),
            "mps": _replicated_resources(sharing.get("mps"), "mps")}


def _is_replicated(rr):
    return bool(rr) and any(r["replicas"] > 1 for r in rr["resources"])


def sharing_strategy(cfg):
    """Sharing.SharingStrategy() (sharing.go:35-45): MPS wins over time-slicing."""
    if _is_replicated(cfg["mps"]):
        return "mps"
    if _is_replicated(cfg["time_slicing"]):
        return "time-slicing"
    return "none"


def replication_info(cfg, resource=GPU_RESOURCE):
    """resourceLabeler.replicationInfo (resource.go:240-250): the first entry for ``resource``
    in Sharing.ReplicatedResources() (sharing.go:48-53: MPS's when an mps section exists)."""
    rr = cfg["mps"] if cfg["mps"] is not None else cfg["time_slicing"]
    for res in (rr or {}).get("resources", []):
        if res["name"] == resource:
            return res
    return None


# --- vGPU detection, as internal/vgpu does it -------------------------------------------------

def vendor_capability(config):
    """The first PCI vendor-specific capability of a config space (internal/vgpu/pciutil.go:115-149),
    or None.  Raises ValueError for less than 256 bytes (GFD's error for an unprivileged read)."""
    if len(config) < PCI_CONFIG_MIN:
        raise ValueError("entire PCI configuration is not read (%d bytes)" % len(config))
    if config[_PCI_STATUS] & _PCI_STATUS_CAP_LIST == 0:
        return None
    visited = set()
    pos = config[_PCI_CAP_PTR]
    while pos != 0:
        cap_id, nxt, length = config[pos], config[(pos + 1) & 0xFF], config[(pos + 2) & 0xFF]
        if pos in visited or cap_id == 0xFF:  # chain looped / broken
            break
        if cap_id == _PCI_CAP_VENDOR_SPECIFIC:
            return bytes(config[pos:pos + length])
        visited.add(pos)
        pos = nxt
    return None


def is_vgpu_capability(capability):
    """Lib.IsVGPUDevice (internal/vgpu/vgpu.go:92-105): the record is signed "VF" at bytes 3-4."""
    return capability is not None and len(capability) >= 5 and capability[3] == 0x56 and capability[4] == 0x46


def vgpu_host_driver(capability):
    """Device.GetInfo (internal/vgpu/vgpu.go:107-153): (host driver version, branch) from the
    record with id 0 of a vGPU capability, or None when there is none."""
    if not capability or len(capability) <= 5:
        return None
    pos, seen = 5, set()
    record = capability[pos]
    while record != 0 and pos < len(capability):
        if pos in seen or pos + 1 >= len(capability):
            return None
        seen.add(pos)
        pos = (pos + capability[pos + 1]) & 0xFF
        if pos >= len(capability):
            return None
        record = capability[pos]
    if record != 0 or pos + 22 > len(capability):
        return None

    def text(raw):
        return "".join(chr(b) for b in raw).strip("\x00")

    return text(capability[pos + 2:pos + 12]), text(capability[pos + 12:pos + 22])


def read_vgpu_devices(root, bdfs):
    """vGPU devices among the node's NVIDIA PCI functions (``bdfs``: every vendor-0x10de function,
    as GFD's NvidiaPCILib lists them, pciutil.go:70-112), read from ``<root>/sys/bus/pci/devices``.

    Returns ``(devices, note)``.  ``devices``: a list of ``{"bdf", "host_driver_version",
    "host_driver_branch"}`` (empty: no vGPU), or None when GFD could not tell either (a config
    space shorter than 256 bytes or unreadable: GFD then logs an error and writes no vgpu
    labels, internal/lm/vgpu.go:41-45).  A function whose ``config`` file does not exist at all
    (a captured tree that did not record config space; never the case on a live sysfs) is
    taken as carrying no vGPU capability, and ``note`` says so.
    """
    devices, missing = [], []
    for bdf in sorted(bdfs):
        path = os.path.join(root or "/", "sys/bus/pci/devices", bdf, "config")
        try:
            config = read_node_file(path)   # a FIFO or device is refused, never read; at most 64 KiB
        except OSError as exc:
            return None, "nvidia.com/vgpu.present left out: %s" % exc
        if config is None:
            missing.append(bdf)
            continue
        try:
            capability = vendor_capability(config)
        except ValueError:
            return None, ("nvidia.com/vgpu.present left out: only %d bytes of PCI config space readable "
                          "for %s (GFD reads it privileged; gather as root)" % (len(config), bdf))
        if is_vgpu_capability(capability):
            info = vgpu_host_driver(capability)
            devices.append({"bdf": bdf, "host_driver_version": info[0] if info else None,
                            "host_driver_branch": info[1] if info else None})
    note = None
    if missing:
        note = ("nvidia.com/vgpu.present: no PCI config space under %s for %s; taken as no vGPU capability"
                % (root, ", ".join(missing)))
    return devices, note


# --- GFD labels ---------------------------------------------------------------------------------

def _gpu_mode(gpus):
    """newGPUModeLabeler (internal/lm/nvml.go:215-262): graphics for PCI class 0x030000, compute
    for 0x030200, unknown for any other class or when the GPUs' classes differ."""
    seen = set()
    for g in gpus:
        cls = (g.get("class_id") or "").lower()
        if cls:
            seen.add({"030000": "graphics", "030200": "compute"}.get(cls, "class:" + cls))
        else:
            seen.add(g.get("mode") or "unknown")
    mode = seen.pop() if len(seen) == 1 else "unknown"
    return mode if mode in ("graphics", "compute") else "unknown"


def gfd_labels(gpus, driver_version=None, cuda_version=None, machine=None, config=None, vgpu=None):
    """GFD (v0.17.x) labels for the host's (non-VFIO) GPUs.

    ``gpus``: list of dicts with ``product``, ``memory_mib``, ``compute_capability`` ("9.0"),
    ``mig_capable``, ``mig_enabled``, ``class_id`` (or ``mode``: compute/graphics).
    ``machine``: GFD's machine type (see machine_type(): the DMI product name or ``unknown``);
    None leaves ``nvidia.com/gpu.machine`` out (not known to the caller).
    ``config``: the device-plugin/GFD config (see parse_config()); None is GFD without a config
    file: no sharing, ``migStrategy: none``.
    ``vgpu``: read_vgpu_devices()'s list; None leaves the ``nvidia.com/vgpu.*`` labels out.
    Heterogeneous nodes get one product's resource labels (GFD picks one; we take the first
    GPU with MIG disabled, else the first GPU).  Not modelled: MIG resource labels under
    ``migStrategy`` single/mixed with MIG enabled (GFDConfigError), ``nvidia.com/gpu.clique``
    (needs NVML fabric info) and ``nvidia.com/gfd.timestamp``.
    """
    if not gpus:
        return {}
    cfg = parse_config(config)
    mig_enabled = any(g.get("mig_enabled") for g in gpus)
    if cfg["mig_strategy"] != "none" and mig_enabled:
        raise GFDConfigError("MIG resource labels for migStrategy=%s with MIG enabled are not modelled"
                             % cfg["mig_strategy"])
    full = [g for g in gpus if not g.get("mig_enabled")]
    # mig-strategy.go:155-177: full GPUs get the sharing-aware labeler and override
    # MIG-enabled GPUs of the same name, which are labelled without sharing (resource.go:33-36)
    first = full[0] if full else gpus[0]
    shared_cfg = bool(full)
    count = sum(1 for g in gpus if g.get("product") == first.get("product"))
    info = replication_info(cfg) if shared_cfg else None
    if not shared_cfg:
        replicas = 0  # resource.go:208-215, sharing disabled
    else:
        replicas = info["replicas"] if info and info["replicas"] > 0 else 1
    strategy = sharing_strategy(cfg) if shared_cfg and replicas > 1 else "none"
    labels = {
        "nvidia.com/gpu.present": "true",  # not GFD's: the GPU Operator's (from NFD's pci-10de.present)
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/gpu.sharing-strategy": strategy,
        "nvidia.com/mig.capable": "true" if any(g.get("mig_capable") for g in gpus) else "false",
        "nvidia.com/gpu.mode": _gpu_mode(gpus),
    }
    if sharing_strategy(cfg) == "mps":
        # nvml.go:176-211: with MPS configured, GFD fails outright when a GPU has MIG enabled
        if mig_enabled:
            raise GFDConfigError("MPS sharing is not supported for mig devices")
        labels["nvidia.com/mps.capable"] = "true"
    else:
        labels["nvidia.com/mps.capable"] = "false"
    if cfg["mig_strategy"] != "none":
        labels["nvidia.com/mig.strategy"] = cfg["mig_strategy"]  # strategy.go:20-28
    if first.get("product"):
        product = sanitise(first["product"])
        if info and info["replicas"] > 1 and not info["rename"]:
            product += "-SHARED"  # resource.go:189-206
        labels["nvidia.com/gpu.product"] = label_value(product)
    if first.get("memory_mib"):
        labels["nvidia.com/gpu.memory"] = str(first["memory_mib"])
    cc = first.get("compute_capability")
    if cc:
        major, _sep, minor = cc.partition(".")
        if int(major) != 0:  # resource.go:263-282
            labels["nvidia.com/gpu.compute.major"] = major
            labels["nvidia.com/gpu.compute.minor"] = minor or "0"
            labels["nvidia.com/gpu.family"] = family(int(major), int(minor or 0))
    if machine is not None:
        labels["nvidia.com/gpu.machine"] = label_value(sanitise(machine))
    if vgpu is not None:
        labels["nvidia.com/vgpu.present"] = "true" if vgpu else "false"
        for dev in vgpu:  # vgpu.go:40-57: the last device's record wins
            if dev.get("host_driver_version") is not None:
                labels["nvidia.com/vgpu.host-driver-version"] = dev["host_driver_version"]
                labels["nvidia.com/vgpu.host-driver-branch"] = dev["host_driver_branch"]
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
