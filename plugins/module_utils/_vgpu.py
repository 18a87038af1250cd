# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""vGPU devices on a vGPU host's GPUs, from a config in the vGPU device manager's format.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

The config is NVIDIA vgpu-device-manager's (``version: v1``, ``vgpu-configs: {name: [{devices: all | [GPU index],
device-filter: ..., vgpu-devices: {TYPE: count per GPU}}]}``); GPU indexes count the NVIDIA GPUs that are not VFs in
PCI address order, as the device manager does.  Which interface a GPU has is read from sysfs, never guessed from its
architecture:

* **vendor-specific VFIO** (vGPU 17 and later on Ada, Hopper and newer): each SR-IOV VF of the GPU, bound to
  ``nvidia``, has ``nvidia/creatable_vgpu_types`` (a header, then ``<type id> : <name>`` lines: the types creatable
  on that VF *now*) and ``nvidia/current_vgpu_type`` (the VF's type ID, 0 for none; writing an ID gives the VF that
  vGPU, 0 takes it away).  One vGPU per VF.  Type IDs are only unique per GPU.  Names are matched by their last word
  (``NVIDIA L40S-4Q`` -> ``L40S-4Q``), as vgpu-device-manager does, or whole.
* **mdev** (Ampere: on the VFs; older GPUs: on the GPU itself): ``mdev_supported_types/<dir>/{name,
  available_instances,create}``; a vGPU is a mediated device made by writing a UUID to ``create`` and removed through
  ``<parent>/<uuid>/remove``.  Names are matched without their first word (``GRID T4-1Q`` -> ``T4-1Q``), as
  go-nvlib does, or whole.

Idempotent: vGPUs of a wanted type are kept (up to the count, the ones in use first); a vGPU of a type the config
does not want, or beyond its count, is taken away only when it is not in use (its VF or mdev is not held open by a
process and the VF is not on another driver: :func:`_sriov.usage`); new ones go on free VFs / parents that list the
type as creatable.  Everything is checked against what the GPU says before the first write; writes that the GPU
refuses anyway (its creatable lists shrink as vGPUs are made) undo what the run did on that GPU.
"""
from __future__ import annotations

import errno
import json
import os
import re
import uuid as uuidlib

from ansible_collections.gpuops.nvidia.plugins.module_utils import _sriov
from ansible_collections.gpuops.nvidia.plugins.module_utils._k8s_device_plugin import (
    ConfigError,
    validate_vgpu_configs,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import (
    NVIDIA_VENDOR,
    list_bdfs,
    read_attr,
    read_node_file,
    read_node_text,
    read_pci_device,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import ApplyError, InputError

NAME_CACHE = "/var/lib/gpuops/vgpu-types.json"
#: bytes read at most from the boot-time apply's config and the name cache (both a few KiB: a type ID and a name
#: per vGPU type of each GPU); a larger file is not read (the module reads the cache through _files, bounded alike)
FILE_LIMIT = 16 * 1024 * 1024
FILTER_RE = re.compile(r"0x[0-9A-Fa-f]{8}(:0x[0-9A-Fa-f]{8})?")     # matched whole
BDF_RE = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
GPU_CLASSES = ("0300", "0302")
VENDOR_VFIO = "vendor-vfio"
MDEV = "mdev"


class VgpuError(InputError):
    """The config or the host state makes the request wrong or unsafe; nothing was changed."""

    def __init__(self, errors):
        self.errors = list(errors)
        super().__init__("; ".join(self.errors))


class VgpuApplyError(ApplyError):
    """A write failed; what the run did on that GPU was undone as far as possible (``changed``: something stayed)."""

    def __init__(self, msg, changed):
        super().__init__(msg)
        self.changed = changed


# --- readers ----------------------------------------------------------------------------------------------

def parse_creatable(text):
    """``[(type id, name)]`` of a ``creatable_vgpu_types`` file; the header and anything not ``<id> : <name>`` skipped."""
    out = []
    for line in (text or "").splitlines():
        m = re.fullmatch(r"\s*([0-9]+)\s*:\s*(.+?)\s*", line)
        if m:
            out.append((int(m.group(1)), m.group(2)))
    return out


def short_vfio(name):
    words = name.split()
    return words[-1] if words else name


def short_mdev(name):
    words = name.split(None, 1)
    return words[1] if len(words) == 2 else name


def read_gpus(root):
    """NVIDIA GPUs that are not VFs, in PCI address order (the vGPU device manager's GPU indexes)."""
    out = []
    for bdf in list_bdfs(root):
        d = read_pci_device(root, bdf)
        if d["vendor_id"] != NVIDIA_VENDOR or (d["class_id"] or "")[:4] not in GPU_CLASSES or d["physfn"]:
            continue
        sub = ("0x%s%s" % (d["subsystem_device_id"].upper(), d["subsystem_vendor_id"].upper())
               if d["subsystem_device_id"] and d["subsystem_vendor_id"] else None)
        out.append({"index": len(out), "bdf": bdf, "pci_id": d["pci_id"], "driver": d["driver"],
                    "device_id": "0x%s%s" % (d["device_id"].upper(), d["vendor_id"].upper()), "subsystem_id": sub,
                    "total_vfs": (d["sriov"] or {}).get("total_vfs") or 0, "vfs": _sriov.virtfns(root, bdf)})
    return out


def label(gpu):
    return "GPU %d (%s, %s)" % (gpu["index"], gpu["bdf"], gpu["pci_id"])


def _mdev_types(root, parent):
    base = _sriov.dev_path(root, parent, "mdev_supported_types")
    try:
        dirs = sorted(os.listdir(base))
    except OSError:
        return None
    out = {}
    for d in dirs:
        name = read_attr(os.path.join(base, d, "name"))
        if name:
            avail = read_attr(os.path.join(base, d, "available_instances"))
            out[d] = {"name": name, "available": int(avail) if _sriov.is_digits(avail) else 0}
    return out


def interface(root, gpu):
    """``vendor-vfio``, ``mdev`` (parents: the VFs or the GPU), or None; plus why not, for the message."""
    vfs = gpu["vfs"]
    if any(os.path.isdir(_sriov.dev_path(root, vf, "nvidia")) for vf in vfs):
        return VENDOR_VFIO, None
    if any(_mdev_types(root, vf) is not None for vf in vfs) or _mdev_types(root, gpu["bdf"]) is not None:
        return MDEV, None
    if gpu["total_vfs"] and not vfs:
        return None, ("it has SR-IOV but no VF is enabled: enable its VFs first (gpuops.nvidia.sriov_vfs, num_vfs: max; "
                      "the vgpu_host role does it)")
    return None, ("it shows no vGPU interface (no nvidia/creatable_vgpu_types on its VFs, no mdev_supported_types): is "
                  "the NVIDIA vGPU host driver loaded (not the regular driver)?")


# --- the config ---------------------------------------------------------------------------------------------

def _filter_matches(flt, gpu):
    if flt is None:
        return True
    for f in flt if isinstance(flt, list) else [flt]:
        dev, _sep, sub = f.upper().partition(":")
        if dev == gpu["device_id"].upper() and (not sub or sub == (gpu["subsystem_id"] or "").upper()):
            return True
    return False


def select(doc, name, gpus):
    """``{gpu index: {type: count}}`` of the chosen config, and the GPUs it leaves alone (notes)."""
    try:
        validate_vgpu_configs(doc, name)
    except ConfigError as exc:
        raise VgpuError(exc.errors)
    errors, chosen, notes = [], {}, []
    by_index = {g["index"]: g for g in gpus}
    for i, spec in enumerate(doc["vgpu-configs"][name]):
        at = "vGPU config %r[%d]" % (name, i)
        flt = spec.get("device-filter")
        if flt is not None:
            flts = flt if isinstance(flt, list) else [flt]
            if not flts or any(not isinstance(f, str) or not FILTER_RE.fullmatch(f) for f in flts):
                errors.append("%s: device-filter must be 0x<DEVICE><VENDOR> (e.g. 0x223610DE), optionally "
                              ":0x<SUBDEVICE><SUBVENDOR>, or a list of them; got %r" % (at, flt))
                continue
        if spec["devices"] != "all":
            missing = [d for d in spec["devices"] if d not in by_index]
            if missing:
                errors.append("%s: names GPU %s; this host has GPU %s" % (
                    at, ", ".join(map(str, missing)), ", ".join(map(str, sorted(by_index))) or "none"))
        for gpu in gpus:
            if spec["devices"] != "all" and gpu["index"] not in spec["devices"]:
                continue
            if not _filter_matches(flt, gpu):
                continue
            if gpu["index"] in chosen:
                errors.append("%s: %s is already matched by entry %d" % (at, label(gpu), chosen[gpu["index"]][0]))
                continue
            chosen[gpu["index"]] = (i, dict(spec["vgpu-devices"]))
    if errors:
        raise VgpuError(errors)
    notes += ["%s: not matched by vGPU config %r, left alone" % (label(g), name) for g in gpus if g["index"] not in chosen]
    return {k: v[1] for k, v in chosen.items()}, notes


# --- the name cache (type IDs seen in the GPU's catalogs, for when its VFs list only what is creatable now) ------------

def parse_cache(text):
    """``({pf: {type id: name}}, problem)`` from the cache file's text (None: no file).  ``problem`` is None for a cache
    this module wrote, else what is wrong with it (not JSON, not the shape dump_cache writes, a type ID that is not
    ASCII digits, a name that is not a string): what could be read is kept, and the caller rebuilds the file."""
    if text is None:
        return {}, None
    try:
        data = json.loads(text)
    except ValueError as exc:
        return {}, "is not JSON (%s)" % exc
    if not isinstance(data, dict):
        return {}, "is not a JSON object"
    cache, bad = {}, []
    for pf, ids in data.items():
        if not BDF_RE.fullmatch(pf) or not isinstance(ids, dict):
            bad.append(pf)
            continue
        cache[pf] = {}
        for k, v in ids.items():
            if _sriov.is_digits(k) and isinstance(v, str):
                cache[pf][int(k)] = v
            else:
                bad.append("%s/%s" % (pf, k))
    return cache, ("holds entries that are not PCI addresses with type IDs and names: %s" % ", ".join(
        repr(b) for b in bad[:5]) + (" ..." if len(bad) > 5 else "")) if bad else None


def load_cache(text):
    """The cache from its text; what cannot be read is left out (see parse_cache)."""
    return parse_cache(text)[0]


def dump_cache(cache):
    return json.dumps({pf: {str(k): v for k, v in sorted(ids.items())} for pf, ids in sorted(cache.items()) if ids},
                      indent=2, sort_keys=True) + "\n"


# --- planning -------------------------------------------------------------------------------------------------

def _read(path, notes):
    """The text of the cache file for the boot-time apply; None when it is missing, or when it cannot be read (not a
    regular file, larger than FILE_LIMIT, failing: ``_pci.read_node_file``; a note in ``notes`` says why): the
    apply goes on with the types the VFs list now, and the module rebuilds the cache on its next run."""
    problems = []
    text = read_node_text(path, problems, FILE_LIMIT)
    notes.extend("the vGPU type cache is not used: %s" % p for p in problems)
    return text


def _vfio_state(root, gpu, holders, cache):
    slots, registry = [], dict(cache.get(gpu["bdf"], {}))
    for tid, name in parse_creatable(read_attr(_sriov.dev_path(root, gpu["bdf"], "nvidia", "creatable_vgpu_types"))):
        registry.setdefault(tid, name)
    for i, vf in enumerate(gpu["vfs"]):
        u = _sriov.usage(root, vf, gpu["driver"], holders)
        creatable = parse_creatable(read_attr(_sriov.dev_path(root, vf, "nvidia", "creatable_vgpu_types")))
        for tid, name in creatable:
            registry.setdefault(tid, name)
        slots.append({"bdf": vf, "index": i, "driver": u["driver"], "current": u["vgpu_type"],
                      "creatable": [t for t, _name in creatable], "busy": u["why"]["driver"] + u["why"]["open"]})
    return slots, registry


def _resolve(wanted, names, where, what):
    """{type key: id-or-dir} for the config's keys; errors for unknown keys and two keys naming one type."""
    errors, out, by = [], {}, {}
    for key in sorted(wanted):
        got = names.get(key)
        if got is None:
            errors.append("%s: vGPU type %r is unknown here: %s" % (where, key, what))
            continue
        if got in by:
            errors.append("%s: vGPU types %r and %r are the same type" % (where, by[got], key))
            continue
        by[got] = key
        out[key] = got
    return out, errors


def _keep_and_drop(have, want_ids, wanted, resolved, busy_first):
    """Split the existing vGPUs ``have`` ([(slot-ish, id)]) into kept and dropped."""
    keep, drop = [], []
    for key, tid in resolved.items():
        mine = sorted([h for h in have if h[1] == tid], key=busy_first)
        keep += mine[:wanted[key]]
        drop += mine[wanted[key]:]
    drop += [h for h in have if h[1] not in want_ids]
    return keep, drop


def plan_vfio(root, gpu, wanted, holders, cache, name):
    where = label(gpu)
    slots, registry = _vfio_state(root, gpu, holders, cache)
    names = {}
    for tid, full in sorted(registry.items()):
        names.setdefault(full, tid)
        names.setdefault(short_vfio(full), tid)
    known = ", ".join("%s (%d)" % (short_vfio(n), t) for t, n in sorted(registry.items())) or "none"
    carrying = sum(1 for s in slots if s["current"])
    what = "the types its VFs list in nvidia/creatable_vgpu_types are %s" % known
    if carrying:
        what += (" (a VF lists only what it can create now: %d of its %d VFs have a vGPU; a type may show up once "
                 "they are cleared)" % (carrying, len(slots)))
    resolved, errors = _resolve(wanted, names, where, what)
    if errors:
        return None, errors
    usable = [s for s in slots if s["current"] is not None]
    have = [(s, s["current"]) for s in usable if s["current"]]
    keep, drop = _keep_and_drop(have, set(resolved.values()), wanted, resolved,
                                lambda h: (not h[0]["busy"], h[0]["index"]))
    for s, tid in drop:
        if s["busy"]:
            errors.append("%s: VF %s has %s (type %d), which vGPU config %r does not want (or not that many), and it "
                          "is in use: %s" % (where, s["bdf"], short_vfio(registry.get(tid, "type %d" % tid)), tid, name,
                                             ", ".join(s["busy"])))
    kept = {}
    for _s, tid in keep:
        kept[tid] = kept.get(tid, 0) + 1
    missing = {key: wanted[key] - kept.get(tid, 0) for key, tid in resolved.items()}
    dropped = [s for s, _tid in drop]
    free = [s for s in usable if not s["current"] and not s["busy"]] + dropped
    need = sum(missing.values())
    if need > len(free):
        errors.append("%s: vGPU config %r asks for %d more vGPU%s (%s) but only %d of its %d VFs are free (a VF holds one "
                      "vGPU; VFs on another driver or held open are not free)%s"
                      % (where, name, need, "" if need == 1 else "s",
                         ", ".join("%s: %d" % (k, v) for k, v in sorted(missing.items()) if v), len(free), len(slots),
                         ": enable all its VFs (sriov_vfs num_vfs: max)" if len(slots) < gpu["total_vfs"] else ""))
    for key, n in sorted(missing.items()):
        if n <= 0:
            continue
        tid = resolved[key]
        can = [s for s in free if s in dropped or tid in s["creatable"]]
        if len(can) < n:
            errors.append("%s: %d more %s asked for, but only %d of its free VFs can create it now (nvidia/"
                          "creatable_vgpu_types lists it on %s): the GPU has no room for more" % (
                              where, n, key, len(can), ", ".join(s["bdf"] for s in can) or "none"))
    if errors:
        return None, errors
    actions = [{"vf": s["bdf"], "from": tid, "from_name": short_vfio(registry.get(tid, str(tid))), "to": 0,
                "to_name": None} for s, tid in drop]
    before = {}
    for _slot, tid in have:
        n = short_vfio(registry.get(tid, "type %d" % tid))
        before[n] = before.get(n, 0) + 1
    return {"interface": VENDOR_VFIO, "registry": registry, "resolved": resolved, "missing": missing,
            "drop": actions, "before": before, "slots": slots}, []


def _mdev_state(root, gpu, holders):
    parents = [vf for vf in gpu["vfs"] if _mdev_types(root, vf) is not None]
    if not parents and _mdev_types(root, gpu["bdf"]) is not None:
        parents = [gpu["bdf"]]
    out = []
    for i, p in enumerate(parents):
        types = _mdev_types(root, p) or {}
        busy, children = [], _sriov.mdev_children(root, p)
        if p != gpu["bdf"]:     # a VF parent on another driver, or held open itself (not through its mdevs)
            u = _sriov.usage(root, p, gpu["driver"], holders)
            own = ["/dev/vfio/%s " % m["iommu_group"] for m in children if m["iommu_group"]]
            busy = u["why"]["driver"] + [w for w in u["why"]["open"] if not any(w.startswith(o) for o in own)]
        mdevs = []
        for m in children:
            node = "/dev/vfio/%s" % m["iommu_group"] if m["iommu_group"] else None
            held = ["%s open by pid %d (%s)" % (node, pid, comm) for pid, comm in holders.get(node, [])] if node else []
            mdevs.append({"uuid": m["uuid"], "type_dir": m["type_dir"], "busy": held, "parent": p})
        out.append({"bdf": p, "index": i, "types": types, "mdevs": mdevs, "busy": busy})
    return out


def plan_mdev(root, gpu, wanted, holders, name):
    where = label(gpu)
    parents = _mdev_state(root, gpu, holders)
    registry = {}
    for p in parents:
        for d, t in p["types"].items():
            registry.setdefault(d, t["name"])
    names = {}
    for d, full in sorted(registry.items()):
        names.setdefault(full, d)
        names.setdefault(short_mdev(full), d)
    known = ", ".join("%s (%s)" % (short_mdev(n), d) for d, n in sorted(registry.items())) or "none"
    resolved, errors = _resolve(wanted, names, where, "its mdev_supported_types are %s" % known)
    if errors:
        return None, errors
    have = [(m, m["type_dir"]) for p in parents for m in p["mdevs"]]
    keep, drop = _keep_and_drop(have, set(resolved.values()), wanted, resolved, lambda h: (not h[0]["busy"], h[0]["uuid"]))
    for m, d in drop:
        if m["busy"]:
            errors.append("%s: mdev %s on %s is %s, which vGPU config %r does not want (or not that many), and it is in "
                          "use: %s" % (where, m["uuid"], m["parent"], short_mdev(registry.get(d, d)), name,
                                       ", ".join(m["busy"])))
    kept = {}
    for _m, d in keep:
        kept[d] = kept.get(d, 0) + 1
    missing = {key: wanted[key] - kept.get(d, 0) for key, d in resolved.items()}
    if not drop:   # what is available now is what can be made (removals would free room the GPU does not show yet)
        for key, n in sorted(missing.items()):
            if n <= 0:
                continue
            d = resolved[key]
            usable = [p for p in parents if not p["busy"]]
            avail = sum(p["types"].get(d, {}).get("available", 0) for p in usable)
            if avail < n:
                errors.append("%s: %d more %s asked for, but the GPU says %d can be created (available_instances of "
                              "%s on %s)" % (where, n, key, avail, d, "its VFs" if parents[0]["bdf"] != gpu["bdf"]
                                             else gpu["bdf"]))
    if errors:
        return None, errors
    actions = [{"mdev": m["uuid"], "parent": m["parent"], "from": short_mdev(registry.get(d, d)), "type_dir": d}
               for m, d in drop]
    before = {}
    for _m, d in have:
        n = short_mdev(registry.get(d, d))
        before[n] = before.get(n, 0) + 1
    return {"interface": MDEV, "registry": registry, "resolved": resolved, "missing": missing, "drop": actions,
            "before": before, "parents": parents}, []


def plan(root, doc, name, state="present", cache=None):
    """Per GPU: what stays, what goes, what is made; VgpuError (every problem of every GPU) before any write."""
    cache = cache or {}
    gpus = read_gpus(root)
    if state == "absent":
        wanted, notes = {g["index"]: {} for g in gpus}, []
    else:
        wanted, notes = select(doc, name, gpus)
    holders = _sriov.vfio_holders(root)
    errors, out = [], []
    for gpu in gpus:
        if gpu["index"] not in wanted:
            continue
        kind, why = interface(root, gpu)
        if kind is None:
            if state == "present":
                errors.append("%s: vGPU config %r asks for %s, but %s" % (
                    label(gpu), name, ", ".join("%s: %d" % kv for kv in sorted(wanted[gpu["index"]].items())), why))
            continue
        if kind == VENDOR_VFIO:
            p, errs = plan_vfio(root, gpu, wanted[gpu["index"]], holders, cache, name)
        else:
            p, errs = plan_mdev(root, gpu, wanted[gpu["index"]], holders, name)
        errors += errs
        if p:
            p.update(gpu=gpu, wanted=dict(wanted[gpu["index"]]))
            out.append(p)
    if errors:
        raise VgpuError(errors + ["nothing was changed"])
    return {"gpus": out, "notes": notes}


def changes(gp):
    return bool(gp["drop"]) or any(n > 0 for n in gp["missing"].values())


# --- applying ---------------------------------------------------------------------------------------------------

def _current(root, vf):
    return _sriov.current_vgpu_type(root, vf)


def _set_type(root, vf, tid):
    path = _sriov.dev_path(root, vf, "nvidia", "current_vgpu_type")
    _sriov._write(path, str(tid))
    got = _current(root, vf)
    if got != tid:
        raise OSError(5, "%s reads %s after writing %d" % (path, got, tid))


def apply_vfio(root, gp):
    """Clear the dropped VFs, then give free VFs the missing types, re-reading each VF's creatable list before its
    write (the lists shrink as vGPUs are made).  All or nothing per GPU."""
    done = []         # (vf, type before, type written)
    idle = set(s["bdf"] for s in gp["slots"] if not s["busy"])
    try:
        for a in gp["drop"]:
            _set_type(root, a["vf"], 0)
            done.append((a["vf"], a["from"], 0))
        for key, n in sorted(gp["missing"].items()):
            tid = gp["resolved"][key]
            for made in range(max(n, 0)):
                slot = None
                for vf in gp["gpu"]["vfs"]:
                    if vf in idle and _current(root, vf) == 0 and tid in [t for t, _name in parse_creatable(
                            read_attr(_sriov.dev_path(root, vf, "nvidia", "creatable_vgpu_types")))]:
                        slot = vf
                        break
                if slot is None:
                    raise OSError(errno.ENOSPC, "%d of %d more %s made, then no free VF listed it in nvidia/"
                                                "creatable_vgpu_types: the GPU has no room for more" % (made, n, key))
                _set_type(root, slot, tid)
                done.append((slot, 0, tid))
    except OSError as exc:
        _undo(gp, exc, [(lambda vf=vf, b=b: _restore_type(root, vf, b), vf) for vf, b, _a in reversed(done)])
    return [{"vf": vf, "from": b, "to": a} for vf, b, a in done]


def _restore_type(root, vf, before):
    if _current(root, vf) != before:
        if _current(root, vf):
            _set_type(root, vf, 0)
        if before:
            _set_type(root, vf, before)


def _undo(gp, exc, steps):
    failed = []
    for step, what in steps:
        try:
            step()
        except OSError:
            failed.append(what)
    raise VgpuApplyError("%s: %s%s" % (label(gp["gpu"]), _sriov._why(exc), (
        "; undone: the GPU's vGPUs are as they were before the run" if not failed else
        "; UNDO FAILED on %s: check them by hand" % ", ".join(failed))), bool(failed))


def _mdev_dir(root, parent, uuid):
    return _sriov.dev_path(root, parent, uuid)


def _create_mdev(root, parent, type_dir, uuid):
    _sriov._write(_sriov.dev_path(root, parent, "mdev_supported_types", type_dir, "create"), uuid)
    if not os.path.islink(os.path.join(_mdev_dir(root, parent, uuid), "mdev_type")):
        raise OSError(errno.EIO, "mdev %s did not appear on %s after the create" % (uuid, parent))


def _remove_mdev(root, parent, uuid):
    _sriov._write(os.path.join(_mdev_dir(root, parent, uuid), "remove"), "1")
    if os.path.exists(_mdev_dir(root, parent, uuid)):
        raise OSError(errno.EIO, "mdev %s is still on %s after the remove" % (uuid, parent))


def apply_mdev(root, gp, new_uuid=None):
    """Remove the dropped mdevs, then create the missing ones on parents whose available_instances allow it, read
    again before each create.  All or nothing per GPU (a removed mdev comes back with its UUID)."""
    new_uuid = new_uuid or (lambda: str(uuidlib.uuid4()))
    done = []          # ("remove"|"create", parent, uuid, type_dir)
    idle = [p["bdf"] for p in gp["parents"] if not p["busy"]]
    try:
        for a in gp["drop"]:
            _remove_mdev(root, a["parent"], a["mdev"])
            done.append(("remove", a["parent"], a["mdev"], a["type_dir"]))
        for key, n in sorted(gp["missing"].items()):
            d = gp["resolved"][key]
            for made in range(max(n, 0)):
                parent = None
                for p in idle:
                    avail = read_attr(_sriov.dev_path(root, p, "mdev_supported_types", d, "available_instances"))
                    if _sriov.is_digits(avail) and int(avail) > 0:
                        parent = p
                        break
                if parent is None:
                    raise OSError(errno.ENOSPC, "%d of %d more %s made, then available_instances of %s was 0 on every "
                                                "parent: the GPU has no room for more" % (made, n, key, d))
                u = new_uuid()
                _create_mdev(root, parent, d, u)
                done.append(("create", parent, u, d))
    except OSError as exc:
        steps = []
        for kind, parent, u, d in reversed(done):
            if kind == "create":
                steps.append((lambda parent=parent, u=u: _remove_mdev(root, parent, u), u))
            else:
                steps.append((lambda parent=parent, u=u, d=d: _create_mdev(root, parent, d, u), u))
        _undo(gp, exc, steps)
    return [{"action": k, "parent": p, "mdev": u, "type": short_mdev(gp["registry"].get(d, d))} for k, p, u, d in done]


def after(root, gp, holders=None):
    """{type: count} on the GPU now."""
    out = {}
    if gp["interface"] == VENDOR_VFIO:
        for vf in gp["gpu"]["vfs"]:
            tid = _current(root, vf)
            if tid:
                n = short_vfio(gp["registry"].get(tid, "type %d" % tid))
                out[n] = out.get(n, 0) + 1
    else:
        for p in gp["parents"]:
            for m in _sriov.mdev_children(root, p["bdf"]):
                n = short_mdev(gp["registry"].get(m["type_dir"], m["type_dir"]))
                out[n] = out.get(n, 0) + 1
    return out


def update_cache(cache, gps):
    """The cache with every type ID seen in this run's catalogs; (new cache, changed)."""
    new = {pf: dict(ids) for pf, ids in cache.items()}
    for gp in gps:
        if gp["interface"] == VENDOR_VFIO:
            new.setdefault(gp["gpu"]["bdf"], {}).update(gp["registry"])
    return new, new != cache


# --- boot-time re-apply ----------------------------------------------------------------------------------------------
# vGPUs do not survive a reboot.  The vgpu_host role copies this file and the module_utils it imports under
# /usr/local/lib/gpuops/python and runs, from gpuops-vgpu-devices.service (after the VFs are back):
#   python3 /usr/local/lib/gpuops/vgpu_apply.py --config /etc/gpuops/vgpu/config.json --name NAME

def main(argv=None, root="/"):
    import argparse  # pylint: disable=import-outside-toplevel

    parser = argparse.ArgumentParser(description="Create a vGPU host's vGPUs from a vGPU device manager config "
                                                 "(gpuops.nvidia).")
    parser.add_argument("--config", required=True, help="the config file, JSON (vgpu-device-manager's v1 format)")
    parser.add_argument("--name", required=True, help="the config to apply (a key of vgpu-configs)")
    parser.add_argument("--cache", default=NAME_CACHE, help="the type-ID cache the module keeps")
    parser.add_argument("--check", action="store_true", help="plan only, change nothing")
    parser.add_argument("--root", default=root, help=argparse.SUPPRESS)   # tests: a sysfs tree
    args = parser.parse_args(argv)
    root = args.root
    result = {"changed": False, "gpus": []}
    try:
        data = read_node_file(args.config, FILE_LIMIT)    # a FIFO there never blocks the boot
        if data is None:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), args.config)
        doc = json.loads(data.decode("utf-8"))
        cache_notes = []
        pl = plan(root, doc, args.name, "present", load_cache(_read(args.cache, cache_notes)))
        for gp in pl["gpus"]:
            entry = {"gpu": label(gp["gpu"]), "before": gp["before"], "wanted": gp["wanted"]}
            if changes(gp) and not args.check:
                entry["actions"] = apply_vfio(root, gp) if gp["interface"] == VENDOR_VFIO else apply_mdev(root, gp)
                result["changed"] = True
            entry["after"] = after(root, gp)
            result["gpus"].append(entry)
        result["notes"] = cache_notes + pl["notes"]
    except (VgpuError, VgpuApplyError, OSError, ValueError) as exc:   # one line for the journal
        result.update(failed=True, msg=str(exc))
        _out(result)
        return 1
    _out(result)
    return 0


def _out(result):
    import sys  # pylint: disable=import-outside-toplevel

    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
