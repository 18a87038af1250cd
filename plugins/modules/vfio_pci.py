#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vfio_pci
short_description: Bind whole IOMMU groups of PCI functions to vfio-pci, persistently
version_added: 0.1.0
description:
  - Hands PCI functions (typically NVIDIA GPUs) to C(vfio-pci) for VM passthrough, the job of the
    GPU Operator's vfio-manager, with whole-IOMMU-group semantics.
  - Every endpoint function in the IOMMU group of a requested device moves with it. A group member that was
    not requested and is not an NVIDIA function (a GPU's HDMI audio or USB-C functions are) makes the module
    fail unless O(include_group_members=true).
  - Binding uses C(driver_override), unbind and C(drivers_probe) in sysfs; nothing is reloaded.
  - When the running kernel ships a vfio-pci variant driver for a function (an C(alias vfio_pci:...) line in
    C(/lib/modules/<release>/modules.alias) matching the function's C(modalias), for example
    C(nvgrace_gpu_vfio_pci) for Grace Hopper and Grace Blackwell superchip GPUs), the function is bound to that
    driver instead, as the GPU Operator's VFIO manager does (the most specific alias wins); persistence loads
    that module and sets its name as C(driver_override). When C(modules.alias), the function's C(modalias) or
    the kernel release cannot be read as a bounded regular file, the module refuses before any change and
    names the file (guessing plain vfio-pci would be wrong on those superchips).
  - With O(persistent=true) the binding survives reboot per PCI address (a udev rule that sets
    C(driver_override) before any native driver loads), so only some of several identical GPUs can be passed
    through, which C(vfio-pci.ids) cannot do. vfio modules are loaded at boot, C(vfio-pci) is ordered before
    C(nvidia)/C(nouveau) with C(softdep), and the initramfs is updated when that ordering changes.
  - Refuses, before changing anything, malformed or absent devices, the boot VGA device, foreign group members,
    hosts whose IOMMU is off, and a corrupt state file (C(/etc/gpuops/vfio-pci.json), which records the functions
    bound earlier and their original drivers). The state is not rebuilt from the udev rule, which does not hold
    the original drivers; the message names the file, the functions the udev rule still persists, and how to
    recover (restore the file, or remove it and rerun listing every function that must stay on vfio-pci).
  - Binding a group is all or nothing. When a sysfs write or the probe fails, every function moved in the run goes
    back to the driver and C(driver_override) it had, no persistence file is written, and the module fails with
    a message naming the function and the error. If even the original driver refuses a function, the message
    says which one has no driver, and the result has C(changed=true).
  - The state file, the udev rule (C(/etc/udev/rules.d/40-gpuops-vfio-pci.rules)), C(/etc/modules-load.d/gpuops-vfio-pci.conf)
    and C(/etc/modprobe.d/gpuops-vfio-pci.conf) are this module's own, written whole. A symbolic link at one of
    those paths, or a rule or C(.conf) file there without the module's C(# Managed by gpuops.nvidia.vfio_pci)
    header (unless it already holds exactly what the module would write), is refused before anything changes
    (never written through, never removed).
author:
  - gpuops.nvidia contributors (@gpuops)
options:
  devices:
    description:
      - PCI addresses (V(0000:41:00.0) or V(41:00.0)), C(vendor:device) IDs (V(10de:2335), every match) or
        V(all_nvidia) (every NVIDIA display-class function).
      - PCI bridges (class 0x06xx other than 0x0680) are refused before anything changes; name the functions
        behind the bridge instead.
    type: list
    elements: str
    required: true
  state:
    description:
      - V(present) binds the devices' groups to vfio-pci; V(absent) gives them back to the driver they had
        before (recorded by this module) or to whatever driver the kernel picks, and removes persistence.
    type: str
    choices: [present, absent]
    default: present
  persistent:
    description: Make the binding survive reboot (udev rule, modules-load.d, modprobe.d softdep).
    type: bool
    default: true
  include_group_members:
    description: Also move group members that were not requested and are not NVIDIA functions.
    type: bool
    default: false
  allow_iommu_off:
    description:
      - When the IOMMU is not active yet, only validate the request (format, presence, boot VGA) and report
        RV(deferred=true) instead of failing. Used by the C(gpuops.nvidia.vfio) role before the kernel
        arguments take effect; group checks need the IOMMU and happen on the next run.
    type: bool
    default: false
  update_initramfs:
    description:
      - Run C(update-initramfs -u) (or C(dracut -f)) when the modprobe ordering file changed.
      - A regeneration that fails is retried on every later run, reporting a change, until it succeeds, also when
        the ordering file already matches (see O(initramfs_marker)).
    type: bool
    default: true
  initramfs_marker:
    description:
      - Marker file that records a pending initramfs regeneration. It is written before the modprobe ordering
        file changes and removed only after a regeneration succeeded, here or, with O(update_initramfs=false), by
        the caller (the C(gpuops.nvidia.vfio) role regenerates once for its blacklist and this ordering).
    type: path
    default: /var/lib/gpuops/vfio-initramfs.pending
  root:
    description: Filesystem root where sysfs is read. For tests only.
    type: path
    default: /
extends_documentation_fragment:
  - gpuops.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Plans and reports every binding and file change without touching sysfs or files.
  diff_mode:
    support: full
    details: Shows the driver of every moved function and the content of every persistence file.
  idempotent:
    support: full
    details: Functions already on vfio-pci with identical persistence files report no change.
notes:
  - Requires root on the target. Python standard library only.
  - The IOMMU must be on (see M(gpuops.nvidia.kernel_cmdline)) for O(state=present).
seealso:
  - module: gpuops.nvidia.kernel_cmdline
"""

EXAMPLES = r"""
- name: Pass through one GPU (and its audio function) to VMs, persistently
  gpuops.nvidia.vfio_pci:
    devices: ["0000:41:00.0"]

- name: Pass through every NVIDIA GPU
  gpuops.nvidia.vfio_pci:
    devices: [all_nvidia]

- name: Give the GPU back to the host
  gpuops.nvidia.vfio_pci:
    devices: ["0000:41:00.0"]
    state: absent
"""

RETURN = r"""
devices:
  description:
    - Every function the request covers after group expansion, with its driver after the run.
    - C(vfio) is true when that driver is C(vfio-pci) or one of its variant drivers.
  returned: always
  type: list
  elements: dict
  sample: [{"bdf": "0000:41:00.0", "iommu_group": "17", "driver": "vfio-pci", "pci_id": "10de:2335", "vfio": true}]
groups:
  description: IOMMU groups touched, with their functions.
  returned: always
  type: dict
  sample: {"17": ["0000:41:00.0", "0000:41:00.1"]}
actions:
  description: Runtime driver changes made (or, in check mode, that would be made).
  returned: always
  type: list
  elements: dict
  sample: [{"bdf": "0000:41:00.0", "from": "nvidia", "to": "vfio-pci", "group": "17"}]
vfio_devices:
  description: The C(/dev/vfio/<group>) nodes present for the touched groups after the run.
  returned: always
  type: dict
  sample: {"17": "/dev/vfio/17"}
files:
  description: Persistence files and whether each one changed.
  returned: always
  type: dict
  sample: {"/etc/udev/rules.d/40-gpuops-vfio-pci.rules": true}
initramfs_updated:
  description: Whether the initramfs was regenerated.
  returned: always
  type: bool
initramfs_pending:
  description: Whether an initramfs regeneration is still due after the run (O(initramfs_marker) exists; in check
    mode, also when the ordering file would change).
  returned: always
  type: bool
deferred:
  description: True when O(allow_iommu_off=true) and the IOMMU is off, so nothing was planned beyond validation.
  returned: always
  type: bool
iommu_active:
  description: Whether the running kernel has IOMMU groups.
  returned: always
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.nvidia.plugins.module_utils import _diff
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError, fail
from ansible_collections.gpuops.nvidia.plugins.module_utils._files import (
    check_paths,
    clear_pending,
    ensure_file,
    mark_pending,
    on_host,
    read_text,
    remove_file,
    require_root,
    run_locks,
    target_problem,
    write_planned_files,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import host_path, read_pci_devices
from ansible_collections.gpuops.nvidia.plugins.module_utils._vfio import (
    HEADER,
    INITRAMFS_PENDING,
    MODPROBE_CONF,
    MODULES_LOAD,
    STATE_FILE,
    UDEV_RULES,
    BindError,
    VfioError,
    apply_actions,
    iommu_active,
    is_vfio_driver,
    plan,
    vfio_dev_nodes,
)


#: the files this module writes whole, and what makes an existing one its own (see _files.ownership_problem): the
#: header of the udev rule, modules-load.d and modprobe.d files; the state file is JSON that load_state checks
OWNED = {UDEV_RULES: HEADER, MODULES_LOAD: HEADER, MODPROBE_CONF: HEADER, STATE_FILE: True}


def argument_spec():
    return dict(
        devices=dict(type="list", elements="str", required=True),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        persistent=dict(type="bool", default=True),
        include_group_members=dict(type="bool", default=False),
        allow_iommu_off=dict(type="bool", default=False),
        update_initramfs=dict(type="bool", default=True),
        initramfs_marker=dict(type="path", default=INITRAMFS_PENDING),
        root=dict(type="path", default="/"),
    )


def _update_initramfs(module):
    tool = module.get_bin_path("update-initramfs")
    if tool:
        cmd = [tool, "-u"]
    else:
        tool = module.get_bin_path("dracut")
        if not tool:
            module.warn("neither update-initramfs nor dracut found; initramfs not regenerated")
            return False
        cmd = [tool, "-f"]
    rc, out, err = module.run_command(cmd, environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg="%s failed (rc=%d): %s; the initramfs is stale: the regeneration is retried on the "
                             "next run (pending while %s exists)"
                             % (" ".join(cmd), rc, (err or out).strip(), module.params["initramfs_marker"]))
    return True


def _plan(module, root, state_path):
    p = module.params
    try:
        state_text = read_text(state_path)
        udev_text = read_text(host_path(root, UDEV_RULES))
    except (OSError, UnicodeDecodeError) as exc:
        module.fail_json(msg="cannot read %s or %s: %s; nothing was changed" % (state_path, UDEV_RULES, exc))
    try:
        pl = plan(root, p["devices"], p["state"], p["include_group_members"], p["persistent"], state_text,
                  allow_iommu_off=p["allow_iommu_off"], current_udev_text=udev_text, state_path=state_path)
    except GpuopsError as exc:
        fail(module, exc)
    return pl, state_text


def _modprobe_changes(root, pl):
    return MODPROBE_CONF in pl["files"] and read_text(host_path(root, MODPROBE_CONF)) != pl["files"][MODPROBE_CONF]


def run(module):
    p = module.params
    root = p["root"]
    if not p["devices"]:
        module.fail_json(msg="devices must name at least one device")
    check_paths(module, "initramfs_marker")
    state_path = host_path(root, STATE_FILE)
    # the files are this module's own, written whole: a link at one of their paths is refused before anything is
    # read through it
    problems = [x for x in (target_problem(host_path(root, path), owned=True) for path in sorted(OWNED)) if x]
    if problems:
        module.fail_json(msg="%s; nothing was changed" % "; ".join(problems))
    pl, state_text = _plan(module, root, state_path)

    # every file this run may replace (and the initramfs marker) must be replaceable before a driver moves, and be
    # the module's own (or hold what it would write)
    problems = [x for x in (target_problem(host_path(root, path), owned=OWNED.get(path), content=pl["files"][path])
                            for path in sorted(pl["files"])) if x]
    problems += [x for x in [target_problem(host_path(root, p["initramfs_marker"]))] if x]
    if problems:
        module.fail_json(msg="%s; nothing was changed" % "; ".join(problems))

    # the initramfs marker goes down before the modprobe ordering file changes, and stays until a
    # regeneration succeeded (here, or in the vfio role when update_initramfs=false).  A first look without
    # the locks: runs at once never wait on each other to write it (it is checked again under the locks).
    marker = host_path(root, p["initramfs_marker"])
    marked = []      # whether this run put the marker down (not there before): taken back when nothing changed

    def unmark():
        if marked:
            try:
                clear_pending(marker)
            except OSError:
                pass

    def mark(pl, during):
        try:
            mark_pending(marker, "%s changed\n" % MODPROBE_CONF)
        except OSError as exc:
            if during:
                module.fail_json(msg="cannot mark the initramfs stale in %s: %s; the drivers are as reported in "
                                     "actions, the persistence files were not written: fix it and rerun"
                                     % (marker, exc), changed=bool(pl["actions"]), actions=pl["actions"])
            module.fail_json(msg="cannot mark the initramfs stale in %s: %s; nothing was changed" % (marker, exc))
    try:
        if not module.check_mode and _modprobe_changes(root, pl) and not os.path.exists(marker):
            mark(pl, False)
            marked.append(True)
    except OSError as exc:
        module.fail_json(msg="cannot read %s: %s; nothing was changed" % (MODPROBE_CONF, exc))

    # read, plan, bind and write under the locks of every file: runs at once lose nothing
    with run_locks(module, [host_path(root, path) for path in sorted(pl["files"])], "the files of %s" % STATE_FILE):
        if not module.check_mode and pl["files"]:
            pl, state_text = _plan(module, root, state_path)
        return _run_locked(module, root, pl, state_path, state_text, marker, mark, unmark)


def _run_locked(module, root, pl, state_path, state_text, marker, mark, unmark):
    p = module.params
    diffs = []
    if module._diff and pl["actions"]:
        before = "".join("%s: %s\n" % (a["bdf"], a["from"] or "(no driver)") for a in pl["actions"])
        after = "".join("%s: %s\n" % (a["bdf"], a["to"] or "(default driver)") for a in pl["actions"])
        diffs.append({"before": before, "after": after, "before_header": "drivers", "after_header": "drivers"})

    files = {}
    # the state file (with each function's original driver) is written BEFORE a function moves to vfio-pci:
    # a run stopped after the bind still finds the original driver in it, so state=absent can give it back
    early = pl["files"].get(STATE_FILE)
    if (not module.check_mode and p["state"] == "present" and early is not None and early != state_text
            and any(is_vfio_driver(a["to"]) for a in pl["actions"])):
        try:
            r = ensure_file(module, state_path, early, mode=0o644, owned=True)
        except OSError as exc:
            unmark()
            module.fail_json(msg="cannot write %s: %s; nothing was changed" % (state_path, exc))
        files[STATE_FILE] = r["changed"]
        if r.get("diff"):
            diffs.append(r["diff"])

    # runtime next: a failed bind gives every function moved in this run back to the driver it had
    # (apply_actions) and the state file back to what it was; the failure is reported, never swallowed.
    if not module.check_mode:
        def ensure_module(name):
            rc, out, err = module.run_command([module.get_bin_path("modprobe", required=True), name])
            if rc != 0:
                raise VfioError("modprobe %s failed: %s" % (name, err or out))
        try:
            apply_actions(root, pl["actions"], ensure_module)
        except BindError as exc:
            extra = ""
            if files.get(STATE_FILE):
                try:
                    if state_text is None:
                        remove_file(module, state_path, owned=True)
                    else:
                        ensure_file(module, state_path, state_text, mode=0o644, owned=True)
                except OSError as e2:
                    extra = "; %s could not be put back: %s" % (state_path, e2)
            unmark()
            fail(module, exc, msg=str(exc) + extra, changed=exc.changed or bool(extra), actions=pl["actions"],
                 devices=[{"bdf": b, "driver": now, "driver_before": was}
                          for b, (now, was) in sorted(exc.restored.items())])

    try:
        if not module.check_mode and _modprobe_changes(root, pl) and not os.path.exists(marker):
            mark(pl, True)
    except OSError as exc:
        module.fail_json(msg="cannot read %s: %s; the drivers are as reported in actions, the persistence files "
                             "were not all written: fix it and rerun" % (MODPROBE_CONF, exc),
                         changed=bool(pl["actions"]) or any(files.values()), actions=pl["actions"], files=files)

    write_planned_files(module, root, pl["files"], files, diffs, pl["actions"], "the drivers", owned=OWNED)
    # the ordering file (never written early, above) changed in this run
    modprobe_changed = bool(files.get(MODPROBE_CONF))

    pending = os.path.exists(marker) or (module.check_mode and modprobe_changed)
    initramfs = False
    if pending and p["update_initramfs"] and on_host(root):
        if not module.check_mode:
            initramfs = _update_initramfs(module)
            if initramfs:
                clear_pending(marker)
                pending = False

    after = {d["bdf"]: d for d in read_pci_devices(root)}
    devices = [{"bdf": b, "iommu_group": after[b]["iommu_group"], "driver": after[b]["driver"],
                "driver_override": after[b]["driver_override"], "pci_id": after[b]["pci_id"],
                "vfio": is_vfio_driver(after[b]["driver"])}
               for b in pl["selected"] if b in after]
    changed = bool(pl["actions"]) or any(files.values()) or initramfs or (
        module.check_mode and pending and p["update_initramfs"] and on_host(root))
    result = dict(changed=changed, devices=devices, groups=pl["groups"], actions=pl["actions"], files=files,
                  vfio_devices=vfio_dev_nodes(root, pl["groups"]) if p["state"] == "present" else {},
                  initramfs_updated=initramfs, initramfs_pending=pending, deferred=pl["deferred"],
                  iommu_active=iommu_active(root))
    _diff.exit_json(module, result, diffs)


def main():
    run(require_root(AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True), "vfio_pci"))


if __name__ == "__main__":
    main()
