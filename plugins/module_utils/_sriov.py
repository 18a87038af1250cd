# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""SR-IOV virtual functions of PCI physical functions: planning, the in-use rule, enabling, persistence.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

Pure readers over a sysfs tree rooted at ``root`` (tests pass a fixture tree); the kernel's interface is
``/sys/bus/pci/devices/<PF>/sriov_totalvfs`` (the limit), ``sriov_numvfs`` (the count: changing a non-zero
count needs a write of 0 first, or the kernel answers EBUSY) and the ``virtfn<N>`` links to the VFs.

Two ways to change the count:

* ``sysfs``: write ``sriov_numvfs`` (through the PF's driver's ``sriov_configure``; NICs, NVMe ...).  Persisted
  by a udev rule that writes the count again whenever the PF's driver binds (at boot, after a driver reload).
* ``sriov-manage``: NVIDIA's ``/usr/lib/nvidia/sriov-manage -e|-d <PF>`` (shipped with the vGPU host driver).  The
  ``nvidia`` driver does not take a direct ``sriov_numvfs`` write; NVIDIA's tool enables all ``sriov_totalvfs`` VFs.
  Persisted by a systemd unit that runs the tool at boot, after the driver and the vGPU manager and before the
  hypervisor and the kubelet.

The in-use rule (:func:`usage`): a VF is in use when it is bound to a driver other than its PF's (vfio-pci,
pci-stub, a guest driver: the kernel's autoprobe puts new VFs on the PF's driver, or none), when it carries a vGPU
(NVIDIA's ``nvidia/current_vgpu_type`` is not 0, or a mediated device exists on it), or when a process holds one of
its VFIO devices open (``/dev/vfio/<group>`` of the VF or of its mdevs, ``/dev/vfio/devices/vfioN``).  The count
of a PF with a VF in use is never changed: removing a VF under a VM or a vGPU takes the device away from it.
"""
from __future__ import annotations

import errno
import os
import re
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import (
    NVIDIA_VENDOR,
    is_gpu_class,
    link_name,
    list_bdfs,
    read_attr,
    read_pci_device,
    resolve_device_items,
    sysfs_path,
    write_attr as _write,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import ApplyError, InputError

UDEV_RULES = "/etc/udev/rules.d/60-gpuops-sriov-vfs.rules"
SYSTEMD_UNIT = "/etc/systemd/system/gpuops-sriov-vfs.service"
UNIT_NAME = "gpuops-sriov-vfs.service"
SRIOV_MANAGE = "/usr/lib/nvidia/sriov-manage"
METHODS = ("auto", "sysfs", "sriov-manage")
MAX = "max"
HEADER = "# Managed by gpuops.nvidia.sriov_vfs -- do not edit.\n"
_BDF = r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
DRIVER_RE = re.compile(r"[A-Za-z0-9_.-]+")
#: one line of our udev rule (matched whole)
UDEV_RE = re.compile(r'ACTION=="add\|bind", SUBSYSTEM=="pci", KERNEL=="(%s)", DRIVER=="(%s)", '
                     r'ATTR\{sriov_numvfs\}="([0-9]+)"' % (_BDF, DRIVER_RE.pattern))
#: one ExecStart= line of our unit that runs the tool (matched whole): the tool as exec_word writes it -- a plain word,
#: or double-quoted with ``%`` doubled -- or as versions before the quoting wrote a plain path
UNIT_RE = re.compile(r'ExecStart=(?P<tool>"/(?:[^"\'\\%%$\x00-\x1f\x7f]|%%%%)*"|/[^\s"\'\\%%$]*) -e (?P<bdf>%s)' % _BDF)
#: seconds to wait for the kernel (or sriov-manage) to show the new count and its virtfn links
WAIT_TIMEOUT = 10.0
#: seconds the boot unit waits for a GPU's driver to bind before it gives up on that GPU
UNIT_DRIVER_WAIT = 90
#: units the boot unit runs after (the driver, the vGPU manager) and before (what uses the VFs)
UNIT_AFTER = ("systemd-modules-load.service", "systemd-udev-trigger.service", "nvidia-vgpud.service",
              "nvidia-vgpu-mgr.service")
UNIT_BEFORE = ("libvirtd.service", "virtqemud.service", "kubelet.service", "gpuops-vgpu-devices.service")


class SriovError(InputError):
    """Bad input, or a host state that makes the request unsafe; nothing was changed."""


class SriovApplyError(ApplyError):
    """A runtime change failed.  ``counts``: ``{pf: (count now, count before the run)}`` after the rollback."""

    def __init__(self, msg, counts):
        super().__init__(msg)
        self.counts = counts

    @property
    def changed(self):
        return any(now != was for now, was in self.counts.values())


# --- readers ------------------------------------------------------------------------------------------

def _int(value):
    """An integer from sysfs text or an option: ASCII digits only (Python's int() also takes '\u0661\u0662',
    and str.isdigit() says yes to '\u00b2', which int() refuses); None for anything else."""
    if isinstance(value, str):
        value = value.strip()
        return int(value) if re.fullmatch(r"-?[0-9]+", value) else None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def is_digits(text):
    """``text`` is one or more ASCII digits (and nothing else)."""
    return isinstance(text, str) and re.fullmatch(r"[0-9]+", text) is not None


def dev_path(root, bdf, *parts):
    return sysfs_path(root, "sys/bus/pci/devices", bdf, *parts)


def virtfns(root, pf):
    """The PF's VFs in VF-index order (``virtfn0``, ``virtfn1`` ...)."""
    base = dev_path(root, pf)
    try:
        names = os.listdir(base)
    except OSError:
        return []
    out = []
    for n in names:
        if n.startswith("virtfn") and is_digits(n[6:]):
            target = link_name(os.path.join(base, n))
            if target:
                out.append((int(n[6:]), target))
    return [b for _index, b in sorted(out)]


def read_pf(root, bdf):
    dev = read_pci_device(root, bdf)
    sriov = dev.get("sriov") or {}
    return {"bdf": bdf, "pci_id": dev["pci_id"], "vendor_id": dev["vendor_id"], "class_id": dev["class_id"],
            "driver": dev["driver"], "total_vfs": sriov.get("total_vfs"), "num_vfs": sriov.get("num_vfs"),
            "physfn": dev["physfn"], "vfs": virtfns(root, bdf)}


def vfio_holders(root):
    """``{'/dev/vfio/12': [(pid, comm)], ...}``: every VFIO device some process holds open (``/proc/*/fd``)."""
    proc = sysfs_path(root, "proc")
    out = {}
    try:
        pids = [p for p in os.listdir(proc) if is_digits(p)]
    except OSError:
        return out
    for pid in pids:
        fd_dir = os.path.join(proc, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:          # gone, or not ours to read
            continue
        comm = None
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.startswith("/dev/vfio/") and target != "/dev/vfio/vfio":
                if comm is None:
                    comm = read_attr(os.path.join(proc, pid, "comm")) or "?"
                holders = out.setdefault(target, [])
                if (int(pid), comm) not in holders:
                    holders.append((int(pid), comm))
    return out


def current_vgpu_type(root, bdf):
    """NVIDIA's vendor-specific VFIO interface (vGPU 17+): the VF's vGPU type ID, 0 for none, None without it."""
    return _int(read_attr(dev_path(root, bdf, "nvidia", "current_vgpu_type")))


def mdev_children(root, bdf):
    """Mediated devices created on a parent (a VF, or a GPU without SR-IOV): ``[{uuid, type_dir, group}]``."""
    base = dev_path(root, bdf)
    out = []
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return out
    for n in names:
        t = os.path.join(base, n, "mdev_type")
        if os.path.islink(t):
            out.append({"uuid": n, "type_dir": link_name(t), "iommu_group": link_name(os.path.join(base, n, "iommu_group"))})
    return out


def usage(root, vf, pf_driver, holders):
    """Why a VF is in use, by kind: ``{"driver": [...], "vgpu": [...], "open": [...]}`` (empty lists: idle).

    * driver: bound to a driver other than its PF's (the state the kernel's autoprobe gives a new VF is the PF's
      driver, or none when that driver leaves VFs alone);
    * vgpu: NVIDIA's ``nvidia/current_vgpu_type`` is not 0, or a mediated device exists on it;
    * open: a process holds ``/dev/vfio/<group>`` of the VF or of one of its mdevs, or ``/dev/vfio/devices/vfioN``.
    """
    driver = link_name(dev_path(root, vf, "driver"))
    group = link_name(dev_path(root, vf, "iommu_group"))
    why = {"driver": [], "vgpu": [], "open": []}
    if driver and driver != pf_driver:
        why["driver"].append("bound to %s" % driver)
    vtype = current_vgpu_type(root, vf)
    if vtype:
        why["vgpu"].append("has vGPU type %d (nvidia/current_vgpu_type)" % vtype)
    mdevs = mdev_children(root, vf)
    for m in mdevs:
        why["vgpu"].append("has mdev %s (%s)" % (m["uuid"], m["type_dir"]))
    nodes = []
    if group:
        nodes.append("/dev/vfio/%s" % group)
    try:
        nodes += ["/dev/vfio/devices/%s" % n for n in sorted(os.listdir(dev_path(root, vf, "vfio-dev")))]
    except OSError:
        pass
    nodes += ["/dev/vfio/%s" % m["iommu_group"] for m in mdevs if m["iommu_group"]]
    for node in nodes:
        for pid, comm in holders.get(node, []):
            why["open"].append("%s open by pid %d (%s)" % (node, pid, comm))
    return {"bdf": vf, "driver": driver, "iommu_group": group, "vgpu_type": vtype,
            "mdevs": [m["uuid"] for m in mdevs], "why": why}


def sriov_in_use(u):
    """The reasons that forbid changing the VF count (every kind)."""
    return u["why"]["driver"] + u["why"]["vgpu"] + u["why"]["open"]


# --- input ---------------------------------------------------------------------------------------------

def _describe(dev):
    return "%s (%s, driver %s)" % (dev["bdf"], dev.get("pci_id"), dev.get("driver") or "none")


def resolve_devices(root, devices):
    """The user's ``devices`` (PCI addresses, vendor:device IDs, ``all_nvidia``) as PF addresses.

    ``all_nvidia``: every NVIDIA GPU (display class) that is an SR-IOV physical function (none is fine: GPUs older
    than Ampere have no SR-IOV).  An address or ID naming a function without SR-IOV, or a VF, is refused.
    """
    by_bdf = {b: read_pci_device(root, b) for b in list_bdfs(root)}
    not_sriov, vfs = [], []

    def sriov_total(d):
        return (d.get("sriov") or {}).get("total_vfs") or 0

    def all_nvidia():
        return sorted(b for b, d in by_bdf.items() if d.get("vendor_id") == NVIDIA_VENDOR
                      and is_gpu_class(d.get("class_id")) and not d.get("physfn") and sriov_total(d) > 0)

    out = [b for _item, found in resolve_device_items(devices, by_bdf, all_nvidia, SriovError, "10de:2236",
                                                      keep=lambda d: not d.get("physfn"))
           for b in found]
    seen = []
    for b in out:
        if b in seen:
            continue
        d = by_bdf[b]
        if d.get("physfn"):
            vfs.append("%s is a virtual function of %s: name its physical function" % (b, d["physfn"]))
        elif sriov_total(d) <= 0:
            not_sriov.append(_describe(d))
        seen.append(b)
    if vfs:
        raise SriovError("; ".join(vfs))
    if not_sriov:
        raise SriovError("%s %s no SR-IOV (no sriov_totalvfs, or 0): only a physical function with SR-IOV has virtual "
                         "functions (NVIDIA GPUs from Ampere on; enable SR-IOV in the firmware)"
                         % (", ".join(not_sriov), "has" if len(not_sriov) == 1 else "have"))
    return seen


def parse_num_vfs(value, state):
    """``max`` (None: the PF's sriov_totalvfs) or an integer >= 1; raises SriovError."""
    if state == "absent":
        if value not in (None, 0, "0"):
            raise SriovError("num_vfs must not be set with state=absent (absent removes every VF), got %r" % (value,))
        return 0
    if value is None:
        raise SriovError("num_vfs is required with state=present: a count >= 1, or max (the PF's sriov_totalvfs)")
    if isinstance(value, bool):
        raise SriovError("num_vfs must be a count >= 1 or max, got %r" % (value,))
    if isinstance(value, str) and value.strip().lower() == MAX:
        return None
    n = _int(value.strip() if isinstance(value, str) else value)
    if n is None or (isinstance(value, float) and value != int(value)):
        raise SriovError("num_vfs must be a count >= 1 or max, got %r" % (value,))
    if n == 0:
        raise SriovError("num_vfs: 0 -- use state: absent to remove the VFs and their persistence")
    if n < 0:
        raise SriovError("num_vfs must be a count >= 1 or max, got %r" % (value,))
    return n


# --- persistence -----------------------------------------------------------------------------------------

def parse_udev(text):
    """``{pf: {"driver", "num_vfs"}}`` from our udev rule (whole lines this module wrote; anything else is ignored)."""
    out = {}
    for line in (text or "").splitlines():
        m = UDEV_RE.fullmatch(line)
        if m:
            out[m.group(1)] = {"driver": m.group(2), "num_vfs": int(m.group(3))}
    return out


# systemd unit files (systemd.syntax(7), systemd.service(5) "Command lines", systemd.unit(5) "Specifiers"): an
# ExecStart= line is split into words like a shell does (double quotes keep spaces), "%" starts a specifier everywhere
# ("%%" is a "%"), and "$VAR" / "${VAR}" in the arguments -- argv[0] included -- is replaced from the environment when
# the command runs ("$$" is a "$"), while the executable's path itself is taken as written: a "$" in the path cannot be
# written both ways at once.  systemd refuses an executable path holding a quote, a backslash or a control character
# ("Executable name contains special characters", whatever the escaping).  A Condition*= value is the rest of the
# line: no quotes, no escapes, "%" as above, trailing whitespace dropped.  So the tool is written double-quoted with
# "%" doubled, and a path holding any of the others is refused.

def tool_problem(tool, option="sriov_manage"):
    """Why the path ``tool`` cannot be written into our unit (ExecStart= and ConditionPathExists=), or None."""
    if not isinstance(tool, str) or not tool.startswith("/"):
        return "%s must be an absolute path, got %r" % (option, tool)
    if any(ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 or c in "\u2028\u2029" for c in tool):
        return ("%s must not hold a newline or another control character (%r): it is written into a systemd unit, "
                "where a newline starts a new directive" % (option, tool))
    if any(c in tool for c in "\"'\\"):
        return ("%s must not hold a quote or a backslash (%r): systemd refuses such an executable path in a unit"
                % (option, tool))
    if "$" in tool:
        return ("%s must not hold '$' (%r): systemd expands $VAR in a command's arguments (argv[0] included) but not "
                "in its path, so no spelling means this path to both" % (option, tool))
    if tool != tool.rstrip():
        return "%s must not end in whitespace (%r): systemd drops it from ConditionPathExists=" % (option, tool)
    return None


def exec_word(tool):
    """The path ``tool`` as the first word of an ExecStart= line: as it is when it holds only plain characters (units
    written before the quoting stay the same), else double-quoted with ``%`` doubled.  Raises SriovError for a path
    that cannot be written (see :func:`tool_problem`)."""
    problem = tool_problem(tool)
    if problem:
        raise SriovError(problem)
    if re.fullmatch(r"[A-Za-z0-9/_.+:@,=-]+", tool):
        return tool
    return '"%s"' % tool.replace("%", "%%")


def _unexec_word(word):
    """Inverse of :func:`exec_word` (also reads the bare word of earlier versions)."""
    if word.startswith('"'):
        return word[1:-1].replace("%%", "%")
    return word


def parse_unit(text):
    """``{pf: {"tool"}}`` from our systemd unit: its whole ``ExecStart=<tool> -e <PF>`` lines, the tool unquoted."""
    out = {}
    for line in (text or "").splitlines():
        m = UNIT_RE.fullmatch(line)
        if m:
            out[m.group("bdf")] = {"tool": _unexec_word(m.group("tool"))}
    return out


def render_udev(records):
    if not records:
        return None
    lines = [HEADER.rstrip("\n"),
             "# SR-IOV VF counts, written again whenever the PF's driver binds (at boot, after a driver reload);",
             "# the kernel takes the count it already has as a no-op."]
    for bdf, r in sorted(records.items()):
        if not DRIVER_RE.fullmatch(r["driver"] or ""):
            raise SriovError("%s: its driver's name %r cannot go into a udev rule" % (bdf, r["driver"]))
        lines.append('ACTION=="add|bind", SUBSYSTEM=="pci", KERNEL=="%s", DRIVER=="%s", ATTR{sriov_numvfs}="%d"'
                     % (bdf, r["driver"], r["num_vfs"]))
    return "\n".join(lines) + "\n"


def render_unit(records, tool=SRIOV_MANAGE):
    """The unit for ``records`` (``{pf: {"tool"}}``; a record without one runs ``tool``), or None for none.

    Each PF runs its own record's tool; the unit runs only when every tool it names exists (one
    ConditionPathExists= per tool: a host whose vGPU driver is gone skips the unit instead of failing it)."""
    if not records:
        return None
    tools = {bdf: (r.get("tool") or tool) for bdf, r in records.items()}
    words = {t: exec_word(t) for t in set(tools.values())}
    out = [HEADER.rstrip("\n"),
           "# SR-IOV VFs of NVIDIA GPUs, enabled at boot by NVIDIA's sriov-manage (the nvidia driver does not take a",
           "# direct sriov_numvfs write): after the driver and the vGPU manager, before the hypervisor and the kubelet.",
           "[Unit]",
           "Description=gpuops.nvidia: SR-IOV virtual functions of the vGPU host's GPUs",
           "After=%s" % " ".join(UNIT_AFTER),
           "Before=%s" % " ".join(UNIT_BEFORE)]
    out += ["ConditionPathExists=%s" % t.replace("%", "%%") for t in sorted(words)]
    out += ["",
            "[Service]",
            "Type=oneshot",
            "RemainAfterExit=yes"]
    for bdf in sorted(records):
        out.append("ExecStart=/usr/bin/timeout %d /bin/sh -c 'until [ -e /sys/bus/pci/devices/%s/driver ]; "
                   "do sleep 0.5; done'" % (UNIT_DRIVER_WAIT, bdf))
        out.append("ExecStart=%s -e %s" % (words[tools[bdf]], bdf))
    out += ["TimeoutStartSec=%d" % (UNIT_DRIVER_WAIT * (len(records) + 1)), "", "[Install]", "WantedBy=multi-user.target"]
    return "\n".join(out) + "\n"


# --- planning --------------------------------------------------------------------------------------------

def choose_method(method, pf):
    if method != "auto":
        return method
    return "sriov-manage" if pf["driver"] == "nvidia" else "sysfs"


def plan(root, devices, state, num_vfs, method="auto", persistent=True, udev_text=None, unit_text=None,
         tool=SRIOV_MANAGE, tool_present=None):
    """What must change, checked before anything does.

    Returns ``{"devices": [...], "actions": [{"bdf", "from", "to", "method"}], "files": {path: text-or-None},
    "notes": [...]}``; raises SriovError (every problem of every device in one message) on bad input, a count above
    ``sriov_totalvfs``, a PF without a driver, a missing sriov-manage, or a count change while a VF is in use.
    """
    if method not in METHODS:
        raise SriovError("method must be one of %s, got %r" % (", ".join(METHODS), method))
    if not devices:
        raise SriovError("devices must name at least one physical function (or all_nvidia)")
    want_n = parse_num_vfs(num_vfs, state)
    pfs = resolve_devices(root, devices)
    if tool_present is None:
        tool_present = os.path.exists(sysfs_path(root, tool))
    udev, unit = parse_udev(udev_text), parse_unit(unit_text)
    holders = None
    errors, actions, report, notes = [], [], [], []
    if not pfs:
        notes.append("no SR-IOV physical function matched %s (GPUs older than Ampere have no SR-IOV: their vGPUs are "
                     "mediated devices on the GPU itself)" % ", ".join(map(str, devices)))
    for bdf in pfs:
        pf = read_pf(root, bdf)
        where = _describe(pf)
        total = pf["total_vfs"] or 0
        have = pf["num_vfs"] or 0
        want = 0 if state == "absent" else (total if want_n is None else want_n)
        m = choose_method(method, pf)
        entry = {"bdf": bdf, "pci_id": pf["pci_id"], "driver": pf["driver"], "total_vfs": total, "num_vfs_before": have,
                 "num_vfs": want, "method": m, "vfs": []}
        report.append(entry)
        if want > total:
            errors.append("%s: %d VFs requested, but its sriov_totalvfs is %d" % (where, want, total))
            continue
        change = have != want
        if m == "sriov-manage":
            if (change or (state == "present" and persistent)) and not tool_present:
                errors.append("%s: NVIDIA's %s is not on this host; the nvidia driver does not take a direct "
                              "sriov_numvfs write, so its VFs are enabled by that tool, which ships with the NVIDIA vGPU "
                              "host driver (install it first, or choose method: sysfs for a driver that supports "
                              "sriov_numvfs)" % (where, tool))
                continue
            if state == "present" and want != total:
                errors.append("%s: sriov-manage enables all %d VFs of a GPU; %d asked for: set num_vfs: max"
                              % (where, total, want))
                continue
        elif change and not pf["driver"]:
            errors.append("%s has no driver bound: the kernel creates VFs through the PF's driver (sriov_numvfs); bind "
                          "its driver first" % where)
            continue
        elif state == "present" and persistent and not DRIVER_RE.fullmatch(pf["driver"] or ""):
            errors.append("%s: its driver's name cannot go into a udev rule (letters, digits, '_', '.' and '-' only)"
                          % where)
            continue
        if pf["vfs"]:
            if holders is None:
                holders = vfio_holders(root)
            for vf in pf["vfs"]:
                u = usage(root, vf, pf["driver"], holders)
                reasons = sriov_in_use(u)
                entry["vfs"].append({"bdf": vf, "driver": u["driver"], "iommu_group": u["iommu_group"],
                                     "in_use": bool(reasons), "in_use_why": reasons})
            busy = [v for v in entry["vfs"] if v["in_use"]]
            if change and busy:
                errors.append("%s: refusing to change the VF count %d -> %d while %s in use (%s). Give %s back first (stop "
                              "the VM; gpuops.nvidia.vgpu_devices state=absent for vGPUs; gpuops.nvidia.vfio_pci "
                              "state=absent for vfio-pci)"
                              % (where, have, want, "a VF is" if len(busy) == 1 else "%d VFs are" % len(busy),
                                 "; ".join("%s: %s" % (v["bdf"], ", ".join(v["in_use_why"])) for v in busy),
                                 "it" if len(busy) == 1 else "them"))
                continue
        if change:
            actions.append({"bdf": bdf, "from": have, "to": want, "method": m})
        udev.pop(bdf, None)
        unit.pop(bdf, None)
        if state == "present" and persistent:
            if m == "sysfs":
                udev[bdf] = {"driver": pf["driver"], "num_vfs": want}
            else:
                unit[bdf] = {"tool": tool}
    if state == "present" and persistent and any(r["tool"] == tool for r in unit.values()) and tool_problem(tool):
        errors.append(tool_problem(tool))
    if errors:
        raise SriovError("; ".join(errors) + "; nothing was changed")
    return {"devices": report, "actions": actions, "notes": notes,
            "files": {UDEV_RULES: render_udev(udev), SYSTEMD_UNIT: render_unit(unit, tool)}}


# --- runtime changes -------------------------------------------------------------------------------------

def _num_vfs(root, pf):
    return _int(read_attr(dev_path(root, pf, "sriov_numvfs"))) or 0


def _wait_count(root, pf, want, timeout):
    deadline = time.time() + timeout
    while True:
        have, links = _num_vfs(root, pf), len(virtfns(root, pf))
        if (have, links) == (want, want) or time.time() > deadline:
            return have, links
        time.sleep(0.1)


def _set_count(root, a, run_tool, count_from, count_to, timeout):
    pf = a["bdf"]
    if a["method"] == "sysfs":
        path = dev_path(root, pf, "sriov_numvfs")
        if count_from and count_to:
            _write(path, "0")      # the kernel changes a non-zero count only through 0
        _write(path, str(count_to))
    else:
        if count_from and count_to:
            run_tool(["-d", pf])
        run_tool(["-e" if count_to else "-d", pf])
    have, links = _wait_count(root, pf, count_to, timeout)
    if (have, links) != (count_to, count_to):
        raise OSError(errno.EIO, "%s has %d VFs (sriov_numvfs %d) after setting %d" % (pf, links, have, count_to))


def _why(exc):
    if isinstance(exc, OSError):
        text = exc.strerror or str(exc)
        return "%s: %s" % (text, exc.filename) if exc.filename else text
    return str(exc)


def apply(root, actions, run_tool, timeout=WAIT_TIMEOUT):
    """Change the counts in order.  All or nothing: when one fails, the PFs changed in this run (the failing one
    included) go back to the count they had (their VFs were idle, or the plan would have refused), and SriovApplyError
    says what failed and where each PF is now."""
    done = []
    for a in actions:
        try:
            _set_count(root, a, run_tool, a["from"], a["to"], timeout)
            done.append(a)
        except (OSError, RuntimeError) as exc:
            counts = {}
            for b in reversed(done + [a]):
                now = _num_vfs(root, b["bdf"])
                if now != b["from"]:
                    try:
                        _set_count(root, b, run_tool, now, b["from"], timeout)
                    except (OSError, RuntimeError):
                        pass
                counts[b["bdf"]] = (_num_vfs(root, b["bdf"]), b["from"])
            lost = {p: c for p, c in counts.items() if c[0] != c[1]}
            msg = "setting %d VFs on %s (%s) failed: %s" % (a["to"], a["bdf"], a["method"], _why(exc))
            back = sorted(p for p in counts if p not in lost)
            if back:
                msg += "; back to the count it had: %s" % ", ".join("%s (%d)" % (p, counts[p][1]) for p in back)
            if lost:
                msg += "; ROLLBACK FAILED: %s" % ", ".join("%s has %d VFs (had %d)" % (p, c[0], c[1])
                                                           for p, c in sorted(lost.items()))
            raise SriovApplyError(msg, counts)
