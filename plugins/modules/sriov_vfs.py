#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sriov_vfs
short_description: Enable SR-IOV virtual functions on PCI physical functions, persistently
version_added: 0.3.0
description:
  - Sets the number of SR-IOV virtual functions (VFs) of physical functions (PFs), the first step of a vGPU host on
    GPUs from Ampere on, whose vGPUs live on VFs; the job of NVIDIA's C(sriov-manage) in the GPU Operator's vGPU
    manager.
  - "Two methods. C(sysfs): the kernel's C(sriov_numvfs) (a non-zero count is changed through 0, as the kernel
    requires); persisted by a udev rule (C(/etc/udev/rules.d/60-gpuops-sriov-vfs.rules)) that writes the count again
    whenever the PF's driver binds, at boot or after a driver reload, before anything can use the VFs.
    C(sriov-manage): NVIDIA's C(/usr/lib/nvidia/sriov-manage) (shipped with the vGPU host driver; the C(nvidia)
    driver does not take a direct C(sriov_numvfs) write and the tool enables all C(sriov_totalvfs) VFs); persisted by
    the systemd unit C(gpuops-sriov-vfs.service), which runs the tool at boot after the driver and the vGPU manager
    and before libvirt, the kubelet and C(gpuops-vgpu-devices.service)."
  - "A VF is B(in use) when it is bound to a driver other than its PF's (vfio-pci, pci-stub, a guest driver; the
    kernel's autoprobe puts a new VF on its PF's driver, or on none), when it carries a vGPU (NVIDIA's
    C(nvidia/current_vgpu_type) is not 0, or a mediated device exists on it), or when a process holds one of its VFIO
    devices open (C(/dev/vfio/<group>) of the VF or of its mdevs, C(/dev/vfio/devices/vfioN)). The count of a PF with
    a VF in use is never changed; the message names each such VF and why."
  - Refuses, before changing anything, malformed or absent devices, a VF or a function without SR-IOV, a count
    above the PF's C(sriov_totalvfs) (the message names the device and the limit), a PF without a driver, a count other
    than all VFs with C(sriov-manage), a missing C(sriov-manage), and a count change while a VF is in use.
  - A failed change puts every PF changed in the run back to the count it had, writes no persistence file, and fails
    naming the PF and the error.
  - The udev rule and the unit are this module's own files, written whole. A symbolic link at either path, or a file
    there that does not start with the module's C(# Managed by gpuops.nvidia.sriov_vfs) header, is refused before
    anything changes (never written through, never removed).
author:
  - gpuops.nvidia contributors (@gpuops)
options:
  devices:
    description:
      - Physical functions. PCI addresses (V(0000:41:00.0) or V(41:00.0)), C(vendor:device) IDs (every PF that
        matches) or V(all_nvidia) (every NVIDIA GPU that is an SR-IOV PF; none matching is not an error, GPUs older
        than Ampere have no SR-IOV).
    type: list
    elements: str
    required: true
  num_vfs:
    description:
      - The number of VFs with O(state=present), an integer >= 1, or V(max) for the PF's C(sriov_totalvfs).
      - Must not be set with O(state=absent).
    type: raw
  state:
    description:
      - V(present) sets the count and (with O(persistent)) keeps it across reboots; V(absent) removes every VF of the
        devices and their persistence.
    type: str
    choices: [present, absent]
    default: present
  method:
    description:
      - How the count is changed. V(auto) is V(sriov-manage) for a PF bound to C(nvidia), else V(sysfs).
    type: str
    choices: [auto, sysfs, sriov-manage]
    default: auto
  persistent:
    description: Keep the count across reboots (udev rule or systemd unit, see the description).
    type: bool
    default: true
  sriov_manage:
    description:
      - Path of NVIDIA's C(sriov-manage) on the target.
      - The boot unit runs it as one word, quoted by systemd's rules (double quotes around a path with spaces,
        C(%) doubled); each PF's record keeps the tool it was enabled with.
      - A path that systemd cannot take as a command is refused before anything changes, with a message (one with
        a newline or another control character, a quote, a backslash, C($), or trailing whitespace).
    type: path
    default: /usr/lib/nvidia/sriov-manage
  root:
    description: Filesystem root where sysfs and the persistence files are read and written. For tests only.
    type: path
    default: /
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Plans every count change and file, refusals included, and writes nothing.
  diff_mode:
    support: full
    details: Shows each PF's count before and after and the content of the persistence files.
  idempotent:
    support: full
    details: PFs that already have the count, with identical persistence files, report no change.
notes:
  - Requires root on the target. Python standard library only.
  - VF counts of NVIDIA GPUs need the NVIDIA vGPU host driver (C(nvidia) bound to the GPU, C(sriov-manage) present).
seealso:
  - module: gpuops.nvidia.vgpu_devices
  - module: gpuops.nvidia.vfio_pci
"""

EXAMPLES = r"""
- name: All VFs on every SR-IOV NVIDIA GPU (vGPU host), enabled again at every boot
  gpuops.nvidia.sriov_vfs:
    devices: [all_nvidia]
    num_vfs: max

- name: Four VFs on a NIC or NVMe controller, through sriov_numvfs
  gpuops.nvidia.sriov_vfs:
    devices: ["0000:3b:00.0"]
    num_vfs: 4

- name: Remove the VFs and their persistence (refused while a VF is in use)
  gpuops.nvidia.sriov_vfs:
    devices: ["0000:3b:00.0"]
    state: absent
"""

RETURN = r"""
devices:
  description: Each physical function, with its count before and after and its VFs (before the change).
  returned: always
  type: list
  elements: dict
  sample:
    - bdf: "0000:41:00.0"
      pci_id: "10de:2236"
      driver: nvidia
      method: sriov-manage
      total_vfs: 32
      num_vfs_before: 0
      num_vfs: 32
      vfs: []
    - bdf: "0000:00:07.0"
      pci_id: "1b36:0010"
      driver: nvme
      method: sysfs
      total_vfs: 4
      num_vfs_before: 2
      num_vfs: 2
      vfs: [{bdf: "0000:00:07.1", driver: vfio-pci, iommu_group: "9", in_use: true,
             in_use_why: ["bound to vfio-pci", "/dev/vfio/9 open by pid 4242 (qemu-system-x86)"]}]
actions:
  description: Count changes made (or, in check mode, that would be made).
  returned: always
  type: list
  elements: dict
  sample: [{"bdf": "0000:41:00.0", "from": 0, "to": 32, "method": "sriov-manage"}]
files:
  description: Persistence files and whether each one changed.
  returned: always
  type: dict
  sample: {"/etc/udev/rules.d/60-gpuops-sriov-vfs.rules": true, "/etc/systemd/system/gpuops-sriov-vfs.service": false}
notes:
  description: Things worth knowing that are not failures (no SR-IOV GPU matched all_nvidia, the unit not enabled).
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils import _diff
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError, fail
from ansible_collections.gpuops.nvidia.plugins.module_utils._files import (
    check_paths,
    on_host,
    read_text,
    require_root,
    run_locks,
    target_problem,
    write_planned_files,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import host_path
from ansible_collections.gpuops.nvidia.plugins.module_utils._sriov import (
    HEADER,
    SRIOV_MANAGE,
    SYSTEMD_UNIT,
    UDEV_RULES,
    UNIT_NAME,
    SriovApplyError,
    apply,
    plan,
)


def argument_spec():
    return dict(
        devices=dict(type="list", elements="str", required=True),
        num_vfs=dict(type="raw"),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        method=dict(type="str", choices=["auto", "sysfs", "sriov-manage"], default="auto"),
        persistent=dict(type="bool", default=True),
        sriov_manage=dict(type="path", default=SRIOV_MANAGE),
        root=dict(type="path", default="/"),
    )


def _plan(module):
    p = module.params
    root = p["root"]
    try:
        udev_text = read_text(host_path(root, UDEV_RULES))
        unit_text = read_text(host_path(root, SYSTEMD_UNIT))
    except (OSError, UnicodeDecodeError) as exc:
        module.fail_json(msg="cannot read %s or %s: %s; nothing was changed" % (UDEV_RULES, SYSTEMD_UNIT, exc))
    try:
        return plan(root, p["devices"], p["state"], p["num_vfs"], p["method"], p["persistent"], udev_text, unit_text,
                    tool=p["sriov_manage"])
    except GpuopsError as exc:
        fail(module, exc)


def _systemctl(module, *args):
    tool = module.get_bin_path("systemctl")
    if not tool:
        return "systemctl not found"
    rc, out, err = module.run_command([tool] + list(args))
    return None if rc == 0 else "systemctl %s failed (rc=%d): %s" % (" ".join(args), rc, (err or out).strip())


def run(module):
    root = module.params["root"]
    check_paths(module, "sriov_manage")
    pl = _plan(module)
    targets = [host_path(root, path) for path in sorted(pl["files"])]
    # both files are ours whole: never written through a link, never over a file of someone else's
    problems = [x for x in (target_problem(host_path(root, path), owned=HEADER, content=pl["files"][path])
                            for path in sorted(pl["files"])) if x]
    if problems:
        module.fail_json(msg="%s; nothing was changed" % "; ".join(problems))

    with run_locks(module, targets):
        if not module.check_mode:
            pl = _plan(module)       # again under the locks: runs at once lose nothing
        return _run_locked(module, root, pl)


def _run_locked(module, root, pl):
    p = module.params
    diffs = []
    if module._diff and pl["actions"]:
        diffs.append({"before": "".join("%s: sriov_numvfs %d\n" % (a["bdf"], a["from"]) for a in pl["actions"]),
                      "after": "".join("%s: sriov_numvfs %d\n" % (a["bdf"], a["to"]) for a in pl["actions"]),
                      "before_header": "VF counts", "after_header": "VF counts"})
    if not module.check_mode and pl["actions"]:
        def run_tool(args):
            tool = host_path(root, p["sriov_manage"])
            rc, out, err = module.run_command([tool] + list(args), environ_update={"LC_ALL": "C"})
            if rc != 0:
                raise RuntimeError("%s %s failed (rc=%d): %s"
                                   % (p["sriov_manage"], " ".join(args), rc, (err or out).strip()))
        try:
            apply(root, pl["actions"], run_tool)
        except SriovApplyError as exc:
            fail(module, exc, msg=str(exc) + "; no persistence file was written", changed=exc.changed,
                 actions=pl["actions"], devices=pl["devices"],
                 counts={b: {"num_vfs": now, "num_vfs_before": was} for b, (now, was) in exc.counts.items()})

    files = write_planned_files(module, root, dict(sorted(pl["files"].items())), {}, diffs, pl["actions"], "the VF counts",
                                owned=HEADER)

    notes = list(pl["notes"])
    if files.get(SYSTEMD_UNIT) and not module.check_mode and on_host(root):
        # the unit is enabled for the next boot (the counts are already set, above); a removed unit's wants link goes
        if pl["files"][SYSTEMD_UNIT] is None:
            link = "/etc/systemd/system/multi-user.target.wants/%s" % UNIT_NAME
            if os.path.islink(link):
                os.unlink(link)
            steps = [["daemon-reload"]]
        else:
            steps = [["daemon-reload"], ["enable", UNIT_NAME]]
        for args in steps:
            err = _systemctl(module, *args)
            if err:
                notes.append(err)
    result = dict(changed=bool(pl["actions"]) or any(files.values()), devices=pl["devices"], actions=pl["actions"],
                  files=files, notes=notes)
    _diff.exit_json(module, result, diffs)


def main():
    run(require_root(AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True), "sriov_vfs"))


if __name__ == "__main__":
    main()
