# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Whole-IOMMU-group vfio-pci planning and binding.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

The planner is pure (sysfs snapshot in, plan out) so unit tests drive it over
synthetic trees; :func:`apply_binding` performs the sysfs writes for one function.
Persistence is per BDF: a udev rule sets ``driver_override=vfio-pci`` on the
function's ``add`` event (before ``80-drivers.rules`` loads any native driver) and
re-probes it, so only the chosen functions are claimed -- unlike ``vfio-pci.ids``,
which takes every device with the same ID.

Variant drivers: when the kernel ships a vfio-pci variant for the device (``alias vfio_pci:...`` in
``/lib/modules/<release>/modules.alias``, e.g. ``nvgrace_gpu_vfio_pci`` for Grace Hopper and Grace
Blackwell superchip GPUs), the function is bound to that driver instead, as the GPU Operator's VFIO
manager does: the alias matching the device's ``modalias`` with the fewest wildcards wins.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import (
    ALL_NVIDIA,
    ATTR_LIMIT,
    NVIDIA_VENDOR,
    is_bridge,
    read_iommu_groups,
    read_node_text,
    read_pci_devices,
    resolve_device_items,
    sysfs_path,
    write_attr as _write,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import ApplyError, InputError

VFIO_DRIVER = "vfio-pci"

STATE_FILE = "/etc/gpuops/vfio-pci.json"
UDEV_RULES = "/etc/udev/rules.d/40-gpuops-vfio-pci.rules"
MODULES_LOAD = "/etc/modules-load.d/gpuops-vfio-pci.conf"
MODPROBE_CONF = "/etc/modprobe.d/gpuops-vfio-pci.conf"
#: present while an initramfs regeneration is due: written before the modprobe ordering (or, by the
#: vfio role, the blacklist) changes, removed only after the regeneration succeeded
INITRAMFS_PENDING = "/var/lib/gpuops/vfio-initramfs.pending"
#: seconds to wait for the kernel to (re)bind a function after a sysfs write
WAIT_TIMEOUT = 5.0
BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
RULE_BDF_RE = re.compile(r'^ACTION=="add", SUBSYSTEM=="pci", KERNEL=="([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])", '
                         r'ATTR\{driver_override\}="(?:vfio-pci|[A-Za-z0-9_-]+[-_]vfio[-_]pci)"', re.M)
VARIANT_RE = re.compile(r"^[A-Za-z0-9_-]+\Z")
#: a kernel release names the directory under /lib/modules: one path component (matched whole)
RELEASE_RE = re.compile(r"[A-Za-z0-9._+~-]{1,200}")
HEADER = "# Managed by gpuops.nvidia.vfio_pci -- do not edit.\n"
#: native drivers that must never win the race against vfio-pci on boot
SOFTDEP_DRIVERS = ("nvidia", "nouveau", "nvidiafb", "snd_hda_intel", "xhci_pci", "i2c_nvidia_gpu")


def is_vfio_driver(name):
    """vfio-pci or one of its variant drivers (nvgrace_gpu_vfio_pci, mlx5_vfio_pci, ...)."""
    return bool(name) and (name == VFIO_DRIVER or re.search(r"[-_]vfio[-_]pci\Z", name) is not None)


#: bytes read at most from ``modules.alias``: a few hundred KiB on distribution kernels, a few MiB on kernels built
#: with every module; the node's other files read here are sysfs/procfs attributes (``_pci.ATTR_LIMIT``)
MODULES_ALIAS_LIMIT = 32 * 1024 * 1024


def _node_text(path, limit=ATTR_LIMIT):
    """The text of a node file the choice of driver depends on; None when it does not exist.  One that cannot be
    read (not a regular file, larger than ``limit``, failing: ``_pci.read_node_file``) is refused before anything
    changes: vfio-pci is never guessed for a function whose variant driver could not be looked up."""
    warnings = []
    text = read_node_text(path, warnings, limit)
    if warnings:
        raise VfioError("%s: the driver a function gets (vfio-pci or a variant of it, e.g. nvgrace_gpu_vfio_pci) "
                        "depends on this file; fix it, then rerun (nothing was changed)" % warnings[0])
    return text


def kernel_release(root):
    """The running kernel's release (``/proc/sys/kernel/osrelease``); None when absent.  VfioError when it cannot be
    read."""
    path = sysfs_path(root, "proc/sys/kernel/osrelease")
    release = (_node_text(path) or "").strip() or None
    if release is not None and (release in (".", "..") or not RELEASE_RE.fullmatch(release)):
        raise VfioError("%s holds %r, not a kernel release: the variant drivers of the kernel cannot be looked up "
                        "(nothing was changed)" % (path, release[:100]))
    return release


def vfio_variant(root, modalias, release):
    """The kernel module of the vfio-pci variant driver for a device, or None.

    ``modules.alias`` lines ``alias vfio_pci:v000010DEd00002342sv*sd*bc*sc*i* nvgrace_gpu_vfio_pci`` are
    matched against the device's ``modalias`` (``pci:v000010DEd00002342sv...``); the match with the fewest
    wildcards wins (the most specific alias), ties go to the first listed.  No ``modules.alias``: None; one that
    cannot be read: VfioError.
    """
    if not modalias or not release:
        return None
    text = _node_text(sysfs_path(root, "lib/modules", release, "modules.alias"), MODULES_ALIAS_LIMIT)
    best = None
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) != 3 or parts[0] != "alias" or not parts[1].startswith("vfio_pci:"):
            continue
        if not VARIANT_RE.match(parts[2]) or parts[2] in ("vfio_pci", "vfio-pci"):
            continue
        pattern = "pci:" + parts[1][len("vfio_pci:"):]
        if fnmatch.fnmatchcase(modalias, pattern):
            score = pattern.count("*") + pattern.count("?")
            if best is None or score < best[0]:
                best = (score, parts[2])
    return best[1] if best else None


def _read_modalias(root, bdf):
    return ((_node_text(sysfs_path(root, "sys/bus/pci/devices", bdf, "modalias")) or "").strip()) or None


def variant_driver_name(root, module):
    """The name a variant module's driver has under /sys/bus/pci/drivers (the module name, or with '-')."""
    for name in (module, module.replace("_", "-")):
        if os.path.isdir(sysfs_path(root, "sys/bus/pci/drivers", name)):
            return name
    return module  # KBUILD_MODNAME: what the driver registers as once the module is loaded


def target_driver(root, bdf, release):
    """(driver, module) a function is bound to: a variant when the kernel has one for it, else vfio-pci."""
    module = vfio_variant(root, _read_modalias(root, bdf), release)
    if module:
        return variant_driver_name(root, module), module
    return VFIO_DRIVER, VFIO_DRIVER


class VfioError(InputError):
    """Bad input or a host state that makes the request unsafe; nothing was changed."""


class BindError(ApplyError):
    """A runtime driver change failed; what was done in this run has been rolled back as far as possible.

    ``bdf``: the function whose change failed; ``error``: why; ``restored``: ``{bdf: (driver now, driver
    before)}`` for every function touched in this run, after the rollback.
    """

    def __init__(self, bdf, to, error, restored):
        self.bdf, self.to, self.error, self.restored = bdf, to, error, restored
        if to != VFIO_DRIVER:
            now = restored.get(bdf, (None, None))[0]
            super().__init__("giving %s back to %s failed: %s; it now has %s" % (
                bdf, to or "the driver the kernel picks", error, ("driver " + now) if now else "no driver"))
            return
        lost = {b: was for b, (now, was) in restored.items() if now != was}
        back = sorted(b for b, (now, was) in restored.items() if now == was)
        msg = "binding %s to %s failed: %s" % (bdf, to, error)
        if back:
            msg += "; rolled back: %s" % ", ".join("%s is back on %s" % (b, restored[b][1] or "no driver (as before)")
                                                   for b in back)
        if lost:
            msg += ("; ROLLBACK FAILED: %s; rebind by hand (echo BDF > /sys/bus/pci/drivers/DRIVER/bind) or reboot"
                    % ", ".join("%s has %s (was %s)" % (b, ("driver " + restored[b][0]) if restored[b][0] else "no driver",
                                                        was or "no driver") for b, was in sorted(lost.items())))
        super().__init__(msg)

    @property
    def changed(self):
        """True when a function is left on another driver than before the run."""
        return any(now != was for now, was in self.restored.values())


def iommu_active(root, groups=None):
    """True when the running kernel has IOMMU groups (IOMMU on and a driver bound)."""
    if groups is None:
        groups = read_iommu_groups(root)
    return bool(groups)


def resolve_requested(devices, by_bdf):
    """Turn the user's ``devices`` list into BDFs.  Raises VfioError on bad input.

    PCI bridges (class 0x06xx but 0x0680, which NVSwitches use) are refused: a bridge is never bound to
    vfio-pci (its group's endpoints are), and naming one used to move the GPU behind it instead.
    """
    def all_nvidia():
        found = [b for b, d in by_bdf.items()
                 if d.get("vendor_id") == NVIDIA_VENDOR and (d.get("class_id") or "").startswith("03")]
        if not found:
            raise VfioError("devices: all_nvidia requested but this host has no NVIDIA GPU (class 0x03xx, vendor 10de)")
        return sorted(found)

    items = resolve_device_items(devices, by_bdf, all_nvidia, VfioError, "10de:2335")
    out = [b for _item, found in items for b in found]
    bridges = [b for item, found in items if item != ALL_NVIDIA for b in found if is_bridge(by_bdf[b].get("class_id"))]
    if bridges:
        raise VfioError("%s %s a PCI bridge (class 0x%s): bridges are never bound to vfio-pci, and nothing was "
                        "changed. Name the GPU functions behind it instead (lspci -Dnn -s <bus>:00.0)"
                        % (", ".join(_describe(by_bdf[b]) for b in sorted(set(bridges))),
                           "is" if len(set(bridges)) == 1 else "are",
                           "/0x".join(sorted(set(by_bdf[b]["class_id"][:4] for b in bridges)))))
    seen = []
    for b in out:
        if b not in seen:
            seen.append(b)
    return seen


def _describe(dev):
    return "%s [%s class %s, driver %s]" % (dev["bdf"], dev.get("pci_id"), dev.get("class_id"), dev.get("driver") or "none")


def is_nvidia_companion(dev):
    """An NVIDIA function that travels with its GPU (HDMI audio, USB-C, UCSI, ...)."""
    return dev.get("vendor_id") == NVIDIA_VENDOR


def expand_groups(requested, by_bdf, groups, include_group_members):
    """Every endpoint function in the requested functions' IOMMU groups.

    Returns ``(selected_bdfs, {group: [bdfs]})``.  Raises VfioError when the IOMMU
    is off, when a group holds a foreign function that was not requested (unless
    ``include_group_members``), or when a selected function is the boot VGA device.
    """
    if not groups:
        raise VfioError("IOMMU is not active on this host (/sys/kernel/iommu_groups is empty): enable VT-d/AMD-Vi "
                        "in firmware and add intel_iommu=on (or amd_iommu=on) iommu=pt to the kernel command line "
                        "(gpuops.nvidia.kernel_cmdline), reboot, then bind")
    selected, by_group = [], {}
    for bdf in requested:
        group = by_bdf[bdf].get("iommu_group")
        if group is None:
            raise VfioError("%s is in no IOMMU group although the IOMMU is active; it cannot be passed through" % bdf)
        members = [m for m in groups.get(group, []) if m in by_bdf and not is_bridge(by_bdf[m].get("class_id"))]
        foreign = [m for m in members if m not in requested and not is_nvidia_companion(by_bdf[m])]
        if foreign and not include_group_members:
            raise VfioError(
                "IOMMU group %s of %s also holds %s, which was not requested and is not an NVIDIA function; a VM "
                "can only own a whole group. Request it too, or set include_group_members: true to move it with "
                "the GPU" % (group, bdf, ", ".join(_describe(by_bdf[m]) for m in foreign)))
        by_group.setdefault(group, [])
        for m in members:
            if m not in selected:
                selected.append(m)
            if m not in by_group[group]:
                by_group[group].append(m)
    vga = [b for b in selected if by_bdf[b].get("boot_vga")]
    if vga:
        raise VfioError("%s is the boot VGA device (it drives the host console); refusing to hand it to vfio-pci. "
                        "Pass through another GPU, or move the console to another adapter in firmware first" % ", ".join(vga))
    return sorted(selected), by_group


def persisted_bdfs(udev_text):
    """BDFs our udev rule claims for vfio-pci at boot (lines this module wrote; anything else is ignored)."""
    return sorted(set(RULE_BDF_RE.findall(udev_text or "")))


def load_state(text, path=STATE_FILE, udev_text=None):
    """Parse the module's state file (``{"devices": {bdf: {...}}}``); None (no file) is an empty state.

    Raises VfioError for anything else (not JSON, another shape, an empty file): the file is the record of
    the functions bound earlier and of their original drivers, and planning over a state read as "nothing
    bound" would drop their persistence.  Nothing is guessed; the message says how to recover.
    """
    if text is None:
        return {"devices": {}}
    why = None
    try:
        data = json.loads(text)
    except ValueError as exc:
        why = "not JSON (%s)" % exc
    else:
        if not isinstance(data, dict) or not isinstance(data.get("devices"), dict):
            why = 'not {"devices": {BDF: {...}}}'
        else:
            bad = [b for b, d in data["devices"].items() if not BDF_RE.match(str(b)) or not isinstance(d, dict)]
            if bad:
                why = "entries that are not BDF: {...}: %s" % ", ".join(repr(b) for b in sorted(bad, key=str))
            else:
                odd = ["%s: original_driver %r is not a driver name" % (b, d.get("original_driver"))
                       for b, d in sorted(data["devices"].items())
                       if d.get("original_driver") is not None and not _driver_name(d.get("original_driver"))]
                odd += ["%s: persistent %r is not true/false" % (b, d.get("persistent"))
                        for b, d in sorted(data["devices"].items())
                        if "persistent" in d and not isinstance(d["persistent"], bool)]
                if odd:
                    why = "entries with bad values (%s)" % "; ".join(odd)
    if why is None:
        return data
    persisted = persisted_bdfs(udev_text)
    raise VfioError(
        "%s is corrupt: %s. It records the functions bound to vfio-pci earlier and their original drivers, so "
        "nothing was changed. %s To fix it, restore the file from a backup, or remove it and rerun with devices listing "
        "every function that must stay on vfio-pci (their original drivers are then unknown: state=absent "
        "gives them to the driver the kernel picks)"
        % (path, why, ("%s still persists %s." % (UDEV_RULES, ", ".join(persisted))) if persisted
           else "%s persists no function." % UDEV_RULES))


def _driver_name(value):
    """A kernel driver name as sysfs lists it under /sys/bus/pci/drivers (no path separators)."""
    return isinstance(value, str) and value not in (".", "..") and re.fullmatch(r"[A-Za-z0-9_.-]+", value) is not None


def dump_state(state):
    return json.dumps(state, indent=2, sort_keys=True) + "\n"


def render_udev_rules(persistent_bdfs, targets=None):
    """``targets``: {bdf: (driver, module)} for functions bound to a vfio-pci variant driver."""
    if not persistent_bdfs:
        return None
    targets = targets or {}
    lines = [HEADER.rstrip("\n"),
             "# Per-function vfio-pci claim at boot: set driver_override before 80-drivers.rules",
             "# loads a native driver, load vfio-pci, and (re)probe the function."]
    for bdf in sorted(persistent_bdfs):
        driver, module = targets.get(bdf, (VFIO_DRIVER, VFIO_DRIVER))
        lines.append('ACTION=="add", SUBSYSTEM=="pci", KERNEL=="%s", ATTR{driver_override}="%s", '
                     'RUN{builtin}+="kmod load %s", '
                     'RUN+="/bin/sh -c \'echo %%k > /sys/bus/pci/drivers_probe\'"' % (bdf, driver, module))
    return "\n".join(lines) + "\n"


def render_modules_load(persistent_bdfs, targets=None):
    if not persistent_bdfs:
        return None
    variants = sorted({m for b, (_d, m) in (targets or {}).items() if b in persistent_bdfs and m != VFIO_DRIVER})
    return HEADER + "vfio\nvfio_iommu_type1\nvfio_pci\n" + "".join("%s\n" % m for m in variants)


def render_modprobe(persistent_bdfs):
    if not persistent_bdfs:
        return None
    return HEADER + "".join("softdep %s pre: vfio-pci\n" % d for d in SOFTDEP_DRIVERS)


def plan(root, devices, state, include_group_members=False, persistent=True, current_state_text=None,
         allow_iommu_off=False, current_udev_text=None, state_path=STATE_FILE):
    """Compute what must move and which files must hold what.

    Returns a dict::

        {"selected": [bdf...], "groups": {g: [bdf...]},
         "actions": [{"bdf", "from", "to", "group"}...],   # runtime driver changes
         "state": <new state-file dict>,
         "files": {path: content-or-None}}                # None = file must be absent

    ``current_state_text``: the state file (None when absent); a corrupt one raises VfioError naming
    ``state_path`` and what ``current_udev_text`` (our udev rule) still persists.
    """
    by_bdf = {d["bdf"]: d for d in read_pci_devices(root)}
    groups = read_iommu_groups(root)
    requested = resolve_requested(devices, by_bdf)
    old = load_state(current_state_text, state_path, current_udev_text)
    new = {"devices": dict(old["devices"])}
    actions = []
    if state == "present" and allow_iommu_off and not groups:
        # validation only (before the kernel arguments take effect): what can be checked without groups
        vga = [b for b in requested if by_bdf[b].get("boot_vga")]
        if vga:
            raise VfioError("%s is the boot VGA device (it drives the host console); refusing to hand it to "
                            "vfio-pci" % ", ".join(vga))
        return {"selected": requested, "groups": {}, "actions": [], "state": old, "files": {}, "deferred": True}
    if state == "present":
        selected, by_group = expand_groups(requested, by_bdf, groups, include_group_members)
        release = kernel_release(root) if selected else None
        for bdf in selected:
            dev = by_bdf[bdf]
            prev = old["devices"].get(bdf, {})
            original = prev.get("original_driver") if prev else (None if is_vfio_driver(dev.get("driver")) else dev.get("driver"))
            new["devices"][bdf] = {"original_driver": original, "persistent": bool(persistent),
                                   "iommu_group": dev.get("iommu_group"), "pci_id": dev.get("pci_id")}
            driver, module = target_driver(root, bdf, release)
            if module != VFIO_DRIVER:
                new["devices"][bdf].update({"vfio_driver": driver, "vfio_module": module})
            if dev.get("driver") != driver or dev.get("driver_override") != driver:
                action = {"bdf": bdf, "group": dev.get("iommu_group"), "from": dev.get("driver"), "to": driver}
                if module != VFIO_DRIVER:
                    action["module"] = module
                actions.append(action)
    else:
        # absent: no IOMMU needed; move back every function of the groups we hold (or the requested ones).
        selected, by_group = [], {}
        for bdf in requested:
            group = by_bdf[bdf].get("iommu_group")
            members = [m for m in groups.get(group, []) if m in by_bdf and not is_bridge(by_bdf[m].get("class_id"))] if group else []
            for m in members or [bdf]:
                if m not in selected and (m == bdf or m in old["devices"] or is_vfio_driver(by_bdf[m].get("driver"))):
                    selected.append(m)
                    by_group.setdefault(group, []).append(m)
        selected.sort()
        for bdf in selected:
            dev = by_bdf[bdf]
            prev = new["devices"].pop(bdf, None) or {}
            if is_vfio_driver(dev.get("driver")) or is_vfio_driver(dev.get("driver_override")):
                actions.append({"bdf": bdf, "group": dev.get("iommu_group"), "from": dev.get("driver"),
                                "to": prev.get("original_driver")})
    persistent_bdfs = [b for b, d in new["devices"].items() if d.get("persistent")]
    targets = {b: (d["vfio_driver"], d["vfio_module"]) for b, d in new["devices"].items()
               if d.get("vfio_driver") and d.get("vfio_module")}
    files = {
        STATE_FILE: dump_state(new) if new["devices"] else None,
        UDEV_RULES: render_udev_rules(persistent_bdfs, targets),
        MODULES_LOAD: render_modules_load(persistent_bdfs, targets),
        MODPROBE_CONF: render_modprobe(persistent_bdfs),
    }
    return {"selected": selected, "groups": by_group, "actions": actions, "state": new, "files": files, "deferred": False}


# --- runtime binding (sysfs writes) ----------------------------------------------

def _driver_of(root, bdf):
    try:
        return os.path.basename(os.readlink(sysfs_path(root, "sys/bus/pci/devices", bdf, "driver")))
    except OSError:
        return None


def _override_of(root, bdf):
    """A function's driver_override (None: none), to put back on a rollback.  Best effort: one that cannot be read
    (``_pci.read_node_file``), or that is not a driver name, counts as none, so the rollback clears it."""
    value = (read_node_text(sysfs_path(root, "sys/bus/pci/devices", bdf, "driver_override")) or "").strip()
    return None if value in ("", "(null)") or not _driver_name(value) else value


def bind_vfio(root, bdf, ensure_module, driver=VFIO_DRIVER, module=VFIO_DRIVER):
    """driver_override=<driver> (vfio-pci or its variant), unbind the current driver, probe; verify."""
    dev = sysfs_path(root, "sys/bus/pci/devices", bdf)
    if not os.path.isdir(sysfs_path(root, "sys/bus/pci/drivers", driver)):
        ensure_module(module)
    _write(os.path.join(dev, "driver_override"), driver)
    current = _driver_of(root, bdf)
    if current and current != driver:
        _write(os.path.join(dev, "driver", "unbind"), bdf)
    if _driver_of(root, bdf) != driver:
        _write(sysfs_path(root, "sys/bus/pci/drivers_probe"), bdf)
    return _wait_driver(root, bdf, driver)


def restore_driver(root, bdf, driver, override):
    """Put a function back on ``driver`` (None: no driver) with ``override`` as its driver_override.

    Best effort, every step tried: returns the driver the function has afterwards.
    """
    dev = sysfs_path(root, "sys/bus/pci/devices", bdf)
    try:
        _write(os.path.join(dev, "driver_override"), override or "\n")
    except OSError:
        pass
    current = _driver_of(root, bdf)
    if current == driver:
        return current
    if current:
        try:
            _write(os.path.join(dev, "driver", "unbind"), bdf)
        except OSError:
            return _driver_of(root, bdf)
    if driver:
        try:
            _write(sysfs_path(root, "sys/bus/pci/drivers", driver, "bind"), bdf)
        except OSError:
            try:
                _write(sysfs_path(root, "sys/bus/pci/drivers_probe"), bdf)
            except OSError:
                pass
    return _wait_driver(root, bdf, driver, strict=False)


def apply_actions(root, actions, ensure_module):
    """Perform the plan's runtime driver changes in order.

    Binding to vfio-pci is all or nothing: when one change fails, every function changed in this run
    (the failing one included) goes back to the driver and driver_override it had, and BindError says
    what failed and where each function is now.  Giving functions back (state=absent) is not undone; a
    failure there raises BindError for that function.
    """
    done = []
    for a in actions:
        before = (a["bdf"], _driver_of(root, a["bdf"]), _override_of(root, a["bdf"]))
        try:
            if is_vfio_driver(a["to"]):
                done.append(before)
                bind_vfio(root, a["bdf"], ensure_module, a["to"], a.get("module", VFIO_DRIVER))
            else:
                unbind_vfio(root, a["bdf"], a["to"])
        except (VfioError, OSError) as exc:
            error = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            if isinstance(exc, OSError) and exc.filename:
                error = "%s: %s" % (error, exc.filename)
            restored = {}
            if is_vfio_driver(a["to"]):
                for bdf, driver, override in reversed(done):
                    restored[bdf] = (restore_driver(root, bdf, driver, override), driver)
            else:
                restored[a["bdf"]] = (_driver_of(root, a["bdf"]), before[1])
            raise BindError(a["bdf"], a["to"], error, restored)


def unbind_vfio(root, bdf, original_driver):
    """Clear driver_override, leave vfio-pci, give the function back to its old driver (or the default)."""
    dev = sysfs_path(root, "sys/bus/pci/devices", bdf)
    _write(os.path.join(dev, "driver_override"), "\n")
    if is_vfio_driver(_driver_of(root, bdf)):
        _write(os.path.join(dev, "driver", "unbind"), bdf)
    if original_driver and os.path.isdir(sysfs_path(root, "sys/bus/pci/drivers", original_driver)):
        try:
            _write(sysfs_path(root, "sys/bus/pci/drivers", original_driver, "bind"), bdf)
        except OSError:
            _write(sysfs_path(root, "sys/bus/pci/drivers_probe"), bdf)
    else:
        try:
            _write(sysfs_path(root, "sys/bus/pci/drivers_probe"), bdf)
        except OSError:
            pass  # no driver wants it: "no driver" is the default state
    return _wait_driver(root, bdf, original_driver, strict=False)


def _wait_driver(root, bdf, wanted, strict=True, timeout=None):
    deadline = time.time() + (WAIT_TIMEOUT if timeout is None else timeout)
    while True:
        got = _driver_of(root, bdf)
        if got == wanted or time.time() > deadline:
            break
        time.sleep(0.1)
    if strict and got != wanted:
        raise VfioError("%s: expected driver %s after binding, found %s" % (bdf, wanted, got or "none"))
    return got


def vfio_dev_nodes(root, groups):
    """``{group: path}`` of /dev/vfio/<group> for the given groups that exist."""
    return {g: sysfs_path(root, "dev/vfio", str(g)) for g in groups if os.path.exists(sysfs_path(root, "dev/vfio", str(g)))}
