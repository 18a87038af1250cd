# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Diagnose a GPU node from its gathered facts (the guide's troubleshooting cases).

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

``diagnose(facts, expect)`` is pure: ``facts`` is ``ansible_facts.gpu`` (plus a few
host probes the role adds), ``expect`` what the inventory asks of the node.  Each
finding has an ``id``, a ``severity`` (error/warning/info), what was seen and what to do.
"""
from __future__ import annotations

# CUDA version each driver branch supports at most (driver >= branch minimum).
BRANCH_CUDA = (
    (580, "13.0"), (575, "12.9"), (570, "12.8"), (565, "12.7"), (560, "12.6"), (555, "12.5"),
    (550, "12.4"), (545, "12.3"), (535, "12.2"), (530, "12.1"), (525, "12.0"), (520, "11.8"),
    (515, "11.7"), (510, "11.6"), (470, "11.4"),
)
VFIO_DRIVERS = ("vfio-pci", "nvgrace_gpu_vfio_pci")


def _version_tuple(text):
    out = []
    for part in str(text).split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def driver_cuda(facts):
    """The CUDA version the installed driver supports, from NVML or the branch table."""
    nvml = facts.get("nvml") or {}
    if nvml.get("cuda_driver_version"):
        return nvml["cuda_driver_version"]
    version = (facts.get("driver") or {}).get("version")
    if not version:
        return None
    branch = _version_tuple(version)[0]
    for floor, cuda in BRANCH_CUDA:
        if branch >= floor:
            return cuda
    return None


def _f(fid, severity, summary, remediation, **detail):
    return {"id": fid, "severity": severity, "summary": summary, "remediation": remediation, "detail": detail}


def diagnose(facts, expect=None):
    expect = expect or {}
    workload = expect.get("workload") or ""
    gpus = facts.get("devices") or []
    kernel = facts.get("kernel") or {}
    driver = facts.get("driver") or {}
    probes = facts.get("probes") or {}
    findings = []
    if not gpus:
        if workload:
            findings.append(_f("gpu-not-detected", "error", "no NVIDIA GPU function on the PCI bus",
                               "check the card is seated/passed through (lspci -d 10de:) and that the host's PCI "
                               "view is complete; a VM needs the GPU assigned by its hypervisor", workload=workload))
        return findings

    host_gpus = [g for g in gpus if g.get("driver") not in VFIO_DRIVERS]
    if workload in ("", "container"):
        findings.extend(_container_checks(facts, expect, host_gpus, kernel, driver, probes))
    if workload == "vm-passthrough":
        findings.extend(_passthrough_checks(facts, gpus))
    if workload == "vm-vgpu":
        if not driver.get("loaded"):
            findings.append(_f("vgpu-manager-missing", "error", "vm-vgpu node without the NVIDIA vGPU manager driver loaded",
                               "install the vGPU manager package (licensed, from the NVIDIA portal) and reboot"))
        if not probes.get("mdev_types"):
            findings.append(_f("vgpu-no-mdev-types", "error", "no mdev/SR-IOV vGPU types exposed",
                               "enable SR-IOV VFs (sriov-manage -e ALL) or load the vGPU manager; check nvidia-vgpu-mgr"))
    findings.extend(_mig_checks(facts))
    if facts.get("iommu") and workload.startswith("vm-") and not facts["iommu"]["enabled"]:
        findings.append(_f("iommu-off", "error", "IOMMU is not enabled in the kernel",
                           "enable VT-d/AMD-Vi in firmware and add intel_iommu=on iommu=pt (or amd_iommu=on) with "
                           "gpuops.nvidia.kernel_cmdline, then reboot", cmdline=kernel.get("cmdline")))
    return findings


def _container_checks(facts, expect, host_gpus, kernel, driver, probes):
    out = []
    if kernel.get("nouveau_loaded") or kernel.get("nova_core_loaded"):
        out.append(_f("nouveau-conflict", "error", "nouveau/nova_core is loaded and holds the GPU",
                      "blacklist nouveau and nova_core (gpuops.nvidia.driver does), regenerate the initramfs, reboot",
                      holders=[g["bdf"] for g in host_gpus if g.get("driver") in ("nouveau", "nova_core")]))
    if not driver.get("loaded"):
        out.append(_f("driver-not-loaded", "error", "the NVIDIA kernel module is not loaded",
                      "run the driver role; then `modprobe nvidia` and read `dmesg | grep -i nvrm` for the reason"))
        if kernel.get("headers_present") is False:
            out.append(_f("kernel-headers-missing", "error",
                          "no kernel headers for the running kernel %s: DKMS cannot build the module" % kernel.get("release"),
                          "install the headers for exactly this kernel (linux-headers-$(uname -r) / kernel-devel-$(uname -r)) "
                          "or use precompiled modules"))
        if facts.get("secure_boot"):
            out.append(_f("secure-boot-unsigned", "warning", "Secure Boot is on: an unsigned module will not load",
                          "use signed precompiled modules, or sign the DKMS build with an enrolled MOK key"))
    unbound = [g["bdf"] for g in host_gpus if g.get("driver") is None]
    if driver.get("loaded") and unbound:
        out.append(_f("gpu-not-bound", "error", "GPUs not bound to the nvidia driver: %s" % ", ".join(unbound),
                      "check `dmesg` for RmInitAdapter/NVRM errors; an unsupported GPU for this branch or a fallen-off-the-bus GPU shows there"))
    if driver.get("loaded") and probes.get("nvidia_smi") is False:
        out.append(_f("nvidia-smi-not-found", "error", "the driver is loaded but nvidia-smi is not installed or not on PATH",
                      "install the driver's utilities package (nvidia-utils-<branch> / nvidia-driver-cuda)"))
    if probes.get("toolkit") is False and expect.get("toolkit", True):
        out.append(_f("toolkit-missing", "error", "nvidia-container-runtime/nvidia-ctk not found: containers will not see the GPU",
                      "run the container_toolkit role; check `containerd config dump | grep -A5 nvidia`"))
    want = expect.get("cuda_version")
    have = driver_cuda(facts)
    if want and have and _version_tuple(have) < _version_tuple(want):
        out.append(_f("cuda-version-mismatch", "error",
                      "the driver supports CUDA %s but the workload needs CUDA %s" % (have, want),
                      "upgrade the driver branch (driver_branch) to one whose CUDA version is >= %s, or use "
                      "a CUDA forward-compatibility package on data-centre GPUs" % want, driver=driver.get("version")))
    return out


def _passthrough_checks(facts, gpus):
    out = []
    not_vfio = [g["bdf"] for g in gpus if g.get("driver") not in VFIO_DRIVERS]
    if not_vfio:
        out.append(_f("vfio-not-bound", "error", "vm-passthrough node with GPUs not on vfio-pci: %s" % ", ".join(not_vfio),
                      "run the vfio role (binds whole IOMMU groups, persists across reboot)"))
    for g in gpus:
        companions = g.get("companions") or []
        if g.get("iommu_group_foreign"):
            out.append(_f("iommu-group-shared", "error",
                          "GPU %s shares IOMMU group %s with non-NVIDIA devices %s" % (g["bdf"], g.get("iommu_group"), ", ".join(g["iommu_group_foreign"])),
                          "move the card to a slot with ACS isolation, or pass the whole group through (vfio_include_group_members)"))
        for c in companions:
            comp = next((d for d in (facts.get("others") or []) + gpus if d["bdf"] == c), None)
            if comp and comp.get("driver") not in VFIO_DRIVERS and g.get("driver") in VFIO_DRIVERS:
                out.append(_f("vfio-companion-not-bound", "error",
                              "companion %s of GPU %s is on %s, not vfio-pci: KubeVirt refuses the group" % (c, g["bdf"], comp.get("driver")),
                              "bind the whole IOMMU group (gpuops.nvidia.vfio_pci does)"))
    return out


def _mig_checks(facts):
    out = []
    for dev in (facts.get("nvml") or {}).get("devices", []):
        mode = dev.get("mig_mode")
        if mode and mode["current"] != mode["pending"]:
            out.append(_f("mig-mode-pending", "warning",
                          "GPU %s MIG mode change pending (current %s, pending %s)" % (dev["index"], mode["current"], mode["pending"]),
                          "stop GPU clients (nvidia-persistenced, nvidia_drm users, dcgm, fabric manager) and reset the GPU, or reboot"))
    return out


def readiness(facts, workload=None, reboot_reasons=None, validated=None):
    """Is the node ready for its workload? -> {"ready": bool, "reasons": [str]}.

    Ready means: no error-severity finding for the node's workload kind, no reboot pending, and,
    when the cluster validated it (``validated`` is True/False; None = not a validated node),
    its validation passed. A node without GPUs and without a GPU workload is ready (CPU node).
    """
    facts = facts or {}
    reasons = []
    if facts.get("count", len(facts.get("devices") or [])) or workload:
        expect = {"workload": workload or ""}
        reasons += [f["id"] for f in diagnose(facts, expect) if f["severity"] == "error"]
    if reboot_reasons:
        reasons.append("reboot-pending")
    if validated is False:
        reasons.append("not-validated")
    return {"ready": not reasons, "reasons": reasons}
