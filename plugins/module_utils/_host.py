# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Kernel, driver, IOMMU and firmware readers over a filesystem rooted at ``root``.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

Every file is read through ``_pci.read_node_file``/``read_attr`` (regular files only, never blocking, bounded);
a file that is not read becomes a sentence in ``warnings``.
"""
from __future__ import annotations

import os
import re
import stat

from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import (
    ATTR_LIMIT,
    NodeFileError,
    read_attr,
    read_iommu_groups,
    read_node_file,
    read_node_text,
    sysfs_path,
)

SECURE_BOOT_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
NVIDIA_MODULES = ("nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia_peermem", "nvidia_fs", "nvidia_vgpu_vfio")
VFIO_MODULES = ("vfio", "vfio_pci", "vfio_pci_core", "vfio_iommu_type1", "vfio_virqfd", "iommufd", "nvgrace_gpu_vfio_pci")
IOMMU_ARG_KEYS = (
    "intel_iommu", "amd_iommu", "iommu", "iommu.passthrough", "iommu.strict", "vfio-pci.ids",
    "vfio_pci.ids", "vfio_iommu_type1.allow_unsafe_interrupts", "pcie_acs_override",
    "modprobe.blacklist", "rd.driver.blacklist", "nouveau.modeset", "rd.driver.pre",
)
DRIVER_VERSION_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+([0-9]+\.[0-9]+(?:\.[0-9]+)?)")
#: bytes read at most from /proc/modules: one line of ~60-100 bytes per loaded module, so room for ten thousand
#: modules where hosts load a few hundred
MODULES_LIMIT = 1024 * 1024
#: bytes read from the start of /proc/cpuinfo: only the first processor's flags are needed, and one processor's
#: block is a few KiB (x86's flags line is the longest part); the file grows with the CPU count, so a prefix
CPUINFO_PREFIX = 256 * 1024


def _resolve(root, path):
    """Follow a symlink whose absolute target must be read under ``root``."""
    try:
        target = os.readlink(path)
    except OSError:
        return path
    if os.path.isabs(target):
        return sysfs_path(root, target)
    return os.path.join(os.path.dirname(path), target)


def parse_cmdline(text):
    """Split a kernel command line into an ordered list of (key, value-or-None)."""
    out = []
    for tok in (text or "").split():
        key, sep, val = tok.partition("=")
        out.append((key, val if sep else None))
    return out


def parse_modules(text):
    """Module names from /proc/modules text."""
    return [line.split()[0] for line in (text or "").splitlines() if line.strip()]


def read_kernel(root="/", warnings=None):
    release = read_attr(sysfs_path(root, "proc/sys/kernel/osrelease"), warnings)
    cmdline = read_attr(sysfs_path(root, "proc/cmdline"), warnings) or ""
    modules = parse_modules(read_attr(sysfs_path(root, "proc/modules"), warnings, MODULES_LIMIT))
    loaded = set(modules)
    headers = None
    if release:
        build = _resolve(root, sysfs_path(root, "lib/modules", release, "build"))
        headers = os.path.isfile(os.path.join(build, "Makefile"))
    return {
        "release": release,
        "cmdline": cmdline,
        "args": dict((k, v) for k, v in parse_cmdline(cmdline)),
        "nouveau_loaded": "nouveau" in loaded,
        "nova_core_loaded": "nova_core" in loaded,
        "nvidia_modules": [m for m in NVIDIA_MODULES if m in loaded],
        "vfio_modules": [m for m in VFIO_MODULES if m in loaded],
        "headers_present": headers,
    }


def parse_driver_version(text):
    """(version, kernel_module_type) from /proc/driver/nvidia/version text."""
    if not text:
        return None, None
    first = text.splitlines()[0]
    m = DRIVER_VERSION_RE.search(first)
    version = m.group(1) if m else None
    kind = "open" if "Open Kernel Module" in first else ("proprietary" if version else None)
    return version, kind


def _pid_alive(root, pidfile, warnings=None):
    pid = read_attr(sysfs_path(root, pidfile), warnings)
    return bool(pid and pid.isdigit() and os.path.isdir(sysfs_path(root, "proc", pid)))


def read_driver(root="/", kernel=None, warnings=None):
    kernel = kernel if kernel is not None else read_kernel(root, warnings)
    text = read_attr(sysfs_path(root, "proc/driver/nvidia/version"), warnings)
    version, kind = parse_driver_version(text)
    sys_version = read_attr(sysfs_path(root, "sys/module/nvidia/version"), warnings)
    loaded = "nvidia" in kernel["nvidia_modules"] or sys_version is not None or text is not None
    gpus = []
    gdir = sysfs_path(root, "proc/driver/nvidia/gpus")
    if os.path.isdir(gdir):
        for bdf in sorted(os.listdir(gdir)):
            info = read_attr(os.path.join(gdir, bdf, "information"), warnings) or ""
            fields = dict((k.strip(), v.strip()) for k, _sep, v in (ln.partition(":") for ln in info.splitlines()) if v)
            gpus.append({"bdf": bdf.lower(), "model": fields.get("Model"), "uuid": fields.get("GPU UUID"),
                         "minor": fields.get("Device Minor"), "excluded": fields.get("GPU Excluded") == "Yes"})
    return {
        "loaded": bool(loaded),
        "version": version or sys_version,
        "kernel_module_type": kind,
        "gpus": gpus,
        "persistenced_running": _pid_alive(root, "var/run/nvidia-persistenced/nvidia-persistenced.pid", warnings)
        or _pid_alive(root, "run/nvidia-persistenced/nvidia-persistenced.pid", warnings),
        "fabricmanager_running": _pid_alive(root, "var/run/nvidia-fabricmanager/nv-fabricmanager.pid", warnings),
        "device_nodes": sorted(n for n in _listdir(sysfs_path(root, "dev")) if n.startswith("nvidia")),
    }


def _listdir(path):
    try:
        return os.listdir(path)
    except OSError:
        return []


def iommu_vendor(units):
    for unit in units:
        if unit.startswith("dmar"):
            return "intel"
        if unit.startswith("ivhd") or unit.startswith("amd"):
            return "amd"
        if "smmu" in unit:
            return "arm"
        if unit.startswith("virtio"):
            return "virtio"
    return None


def read_cpu_virt(root="/", warnings=None):
    text = read_node_text(sysfs_path(root, "proc/cpuinfo"), warnings, CPUINFO_PREFIX, prefix=True) or ""
    for line in text.splitlines():
        if line.startswith("flags") or line.startswith("Features"):
            flags = set(line.partition(":")[2].split())
            return sorted(flags & {"vmx", "svm"})
    return []


def read_iommu(root="/", kernel=None, groups=None, warnings=None):
    kernel = kernel if kernel is not None else read_kernel(root, warnings)
    units = sorted(_listdir(sysfs_path(root, "sys/class/iommu")))
    groups = groups if groups is not None else read_iommu_groups(root)
    args = kernel.get("args", {})
    return {
        "enabled": bool(units) and bool(groups),
        "vendor": iommu_vendor(units),
        "units": units,
        "groups": len(groups),
        "kernel_args": dict((k, args[k]) for k in IOMMU_ARG_KEYS if k in args),
        "cpu_virtualization": read_cpu_virt(root, warnings),
    }


def read_secure_boot(root="/", warnings=None):
    """True/False on UEFI boots, None when the host did not boot through UEFI (False, with a warning, when the
    variable is there but not read)."""
    if not os.path.isdir(sysfs_path(root, "sys/firmware/efi")):
        return None
    try:
        data = read_node_file(sysfs_path(root, SECURE_BOOT_VAR), ATTR_LIMIT) or b""
    except NodeFileError as exc:
        if warnings is not None:
            warnings.append(str(exc))
        return False
    return len(data) >= 5 and data[4] == 1


# Container runtimes as the report and the doctor name them: (name, daemon binaries, API sockets), paths under root.
CONTAINER_RUNTIMES = (
    ("containerd", ("usr/bin/containerd", "usr/local/bin/containerd"), ("run/containerd/containerd.sock",)),
    ("crio", ("usr/bin/crio", "usr/local/bin/crio"), ("run/crio/crio.sock", "var/run/crio/crio.sock")),
    ("docker", ("usr/bin/dockerd", "usr/local/bin/dockerd"), ("run/docker.sock", "var/run/docker.sock")),
)


def _socket_at(path):
    """True when ``path`` is a Unix socket (lstat: a link or any other file is not one; nothing is opened)."""
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def read_container_runtimes(root="/"):
    """The container runtimes found on the host, as found, not as configured: for each of containerd, CRI-O and
    Docker whose daemon binary or API socket is there, ``{name, binary, socket, running}`` (``binary``/``socket``
    the host path found or None; ``running``: its socket is a live Unix socket). Only file types are looked at;
    nothing is opened or run."""
    out = []
    for name, binaries, sockets in CONTAINER_RUNTIMES:
        binary = next(("/" + b for b in binaries if os.path.isfile(sysfs_path(root, b))), None)
        sock = next(("/" + s for s in sockets if _socket_at(sysfs_path(root, s))), None)
        if binary or sock:
            out.append({"name": name, "binary": binary, "socket": sock, "running": sock is not None})
    return out


def read_os_release(root="/", warnings=None):
    text = read_attr(sysfs_path(root, "etc/os-release"), warnings) \
        or read_attr(sysfs_path(root, "usr/lib/os-release"), warnings) or ""
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip().strip('"')
    return {"id": out.get("ID"), "version_id": out.get("VERSION_ID"), "id_like": out.get("ID_LIKE"),
            "pretty_name": out.get("PRETTY_NAME")}


def read_machine(root="/", warnings=None):
    return read_attr(sysfs_path(root, "sys/class/dmi/id/product_name"), warnings)
