# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""MIG layouts through NVML: mig-parted v1 configs checked against each GPU's own profile
table, planned per GPU, and applied per GPU.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

Standard library only, and it imports nothing from the collection: the same file serves the
``mig_config`` module and, copied to the host by the ``mig_layout`` role, the boot-time re-apply
(``python3 mig_apply.py --config FILE --name NAME``; MIG instances do not survive a reboot).

The input is mig-parted's config format, unchanged (``version: v1``, ``mig-configs``, entries with
``devices``, ``mig-enabled``, ``mig-devices`` and an optional ``device-filter``), so files users
already have work as they are.  ``validate_config`` checks the shape (the cluster's MIG manager
role uses it too); ``run`` reads every GPU through NVML, refuses a layout the GPU cannot hold
(unknown profile, a count that is not a positive integer, more instances or slices than the GPU
has, no valid placement, MIG on a GPU without MIG) before any NVML write, keeps the instances that
already match, destroys only what differs, creates the rest in placements found by search, and
checks the result.  A MIG mode change that needs a reset resets that GPU only (``reset``
callback), or reports it pending -- never all GPUs.

``lib`` is anything with pynvml's function names (``pynvml`` itself on a host; the stateful
simulator under ``tests/`` in unit tests), so the call shapes are pynvml's.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import re
import stat
import sys

try:
    from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError, VerifyError
    from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import read_node_file
except ImportError:  # the boot-time copy (mig_layout's mig_apply.py) runs alone: plain stand-ins for the family
    InputError, VerifyError = ValueError, RuntimeError

    def read_node_file(path, limit):
        """The boot-time copy's stand-in for ``_pci.read_node_file`` (same rules, same words): a regular file only,
        never opened otherwise, read without blocking, at most ``limit`` bytes; None when it does not exist."""
        kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                 (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))

        def check(mode):
            if not stat.S_ISREG(mode):
                kind = next((name for test, name in kinds if test(mode)), "not a regular file")
                raise OSError("%s is %s, not a regular file; not read" % (path, kind))

        try:
            check(os.stat(path).st_mode)
        except FileNotFoundError:
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            check(os.fstat(fd).st_mode)
            data = b""
            while len(data) <= limit:
                chunk = os.read(fd, limit + 1 - len(data))
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(fd)
        if len(data) > limit:
            raise OSError("%s holds more than %d bytes, the most read from such a file; not read" % (path, limit))
        return data

# NVML GPU-instance profile index -> suffix of the profile name (nvml.h NVML_GPU_INSTANCE_PROFILE_*)
SUFFIX_BY_INDEX = {7: "+me", 8: "+me", 13: "-me", 14: "-me", 15: "+me.all", 16: "+me.all",
                   10: "+gfx", 11: "+gfx", 12: "+gfx", 17: "+gfx"}
MAX_GI_PROFILES = 18  # NVML_GPU_INSTANCE_PROFILE_COUNT (0x12)
# compute-instance slices -> NVML_COMPUTE_INSTANCE_PROFILE_* index
CI_INDEX_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
CI_ENGINE_SHARED = 0
CONFIG_KEYS = ("version", "mig-configs")
SPEC_KEYS = ("devices", "mig-enabled", "mig-devices", "device-filter")
# patterns are matched whole (fullmatch): a "$" would also match before a final newline
PROFILE_RE = re.compile(r"(?:(?P<ci>[1-9]\d*)c\.)?(?P<gi>(?P<g>[1-9]\d*)g\.(?P<mem>[1-9]\d*)gb(?:\+me\.all|\+me|-me|\+gfx)?)")
FILTER_RE = re.compile(r"0x[0-9a-fA-F]{8}(?::0x[0-9a-fA-F]{8})?")
# a config name becomes the nvidia.com/mig.config label value and a systemd Environment value
NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")

NVML_ERROR_NOT_SUPPORTED = 3
#: bytes read at most from the boot-time apply's config (mig-parted's v1 format as JSON: a few KiB)
CONFIG_LIMIT = 16 * 1024 * 1024


class MigError(InputError):
    """A layout or config refused; ``errors`` lists every problem found."""

    def __init__(self, errors):
        self.errors = list(errors)
        super().__init__("; ".join(self.errors))


class MigVerifyError(MigError, VerifyError):
    """Applied, but reading the GPU back does not show the planned layout."""


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


# ---------------------------------------------------------------------------------------------
# the config file: shape only (no GPU needed)

def _check_spec(at, spec, errors):
    if not isinstance(spec, dict):
        errors.append(f"{at}: must be a mapping, got {spec!r}")
        return
    unknown = sorted(set(spec) - set(SPEC_KEYS), key=str)
    if unknown:
        errors.append("{}: unknown keys {} (allowed: {})".format(at, ", ".join(map(str, unknown)), ", ".join(SPEC_KEYS)))
    devices = spec.get("devices")
    if "devices" not in spec:
        errors.append(f"{at}: devices is required ('all' or a list of GPU indexes)")
    elif devices != "all":
        if not isinstance(devices, list) or not devices or not all(_is_int(d) and d >= 0 for d in devices):
            errors.append(f"{at}: devices must be 'all' or a non-empty list of GPU indexes, got {devices!r}")
        elif len(set(devices)) != len(devices):
            errors.append(f"{at}: devices lists a GPU twice: {devices!r}")
    enabled = spec.get("mig-enabled")
    if not isinstance(enabled, bool):
        errors.append(f"{at}: mig-enabled is required and must be true or false, got {enabled!r}")
    flt = spec.get("device-filter")
    if flt is not None:
        flts = flt if isinstance(flt, list) else [flt]
        bad = [f for f in flts if not isinstance(f, str) or not FILTER_RE.fullmatch(f)]
        if bad or not flts:
            errors.append(f"{at}: device-filter must be 0x<DEVICE><VENDOR> (e.g. 0x233510DE), optionally "
                          f":0x<SUBDEVICE><SUBVENDOR>, or a list of them; got {flt!r}")
    devs = spec.get("mig-devices")
    if enabled is True and "mig-devices" not in spec:
        errors.append(f"{at}: mig-devices is required when mig-enabled is true ({{}} for MIG mode only)")
    if enabled is False and devs:
        errors.append(f"{at}: mig-devices must be empty when mig-enabled is false, got {devs!r}")
    if devs is None:
        return
    if not isinstance(devs, dict):
        errors.append(f"{at}: mig-devices must map profile names to counts, got {devs!r}")
        return
    for profile, count in devs.items():
        if not isinstance(profile, str) or not PROFILE_RE.fullmatch(profile):
            errors.append(f"{at}: {profile!r} is not a MIG profile name (like 1g.10gb, 1g.10gb+me, 1c.2g.20gb)")
        if not _is_int(count) or count <= 0:
            errors.append(f"{at}: profile {profile!r}: count must be a positive integer, got {count!r}")


def validate_config(doc):
    """Check a mig-parted v1 config's shape; returns the sorted config names, raises MigError."""
    if not isinstance(doc, dict):
        raise MigError([f"MIG config must be a mapping with version: v1 and mig-configs, got {type(doc).__name__}"])
    errors = []
    unknown = sorted(set(doc) - set(CONFIG_KEYS), key=str)
    if unknown:
        errors.append("MIG config: unknown keys {} (allowed: version, mig-configs)".format(", ".join(map(str, unknown))))
    if doc.get("version") != "v1":
        errors.append(f"MIG config: version must be v1, got {doc.get('version')!r}")
    configs = doc.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        raise MigError(errors + [f"MIG config: mig-configs must map config names to entry lists, got {configs!r}"])
    for name, specs in configs.items():
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            errors.append(f"MIG config {name!r}: a name is 1-63 letters, digits, '.', '_' or '-' "
                          "(it becomes the nvidia.com/mig.config label value)")
        if not isinstance(specs, list) or not specs:
            errors.append(f"MIG config {name!r}: must be a list of at least one entry, got {specs!r}")
            continue
        for i, spec in enumerate(specs):
            _check_spec(f"MIG config {name!r}[{i}]", spec, errors)
    if errors:
        raise MigError(errors)
    return sorted(configs)


# ---------------------------------------------------------------------------------------------
# the GPU's own profile table

def profile_name(slices, memory_mib, memory_total_bytes, profile_index=0):
    """mig-parted's profile name from NVML's numbers: memory as a fraction of the whole GPU rounded
    up to eighths, times the GPU's memory in whole GB (rounded up), rounded half away from zero."""
    fraction = math.ceil(memory_mib * 1024 * 1024 / memory_total_bytes * 8) / 8
    total_gb = -(-memory_total_bytes // (1024 ** 3))
    gb = int(math.floor(fraction * total_gb + 0.5))
    return "%dg.%dgb%s" % (slices, gb, SUFFIX_BY_INDEX.get(profile_index, ""))


def _profiles(lib, handle, memory_total):
    """GPU-instance profiles the GPU supports: index, id, name, slices, instances, placements."""
    out = []
    for index in range(MAX_GI_PROFILES):
        try:
            info = lib.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
        except lib.NVMLError:
            continue  # not supported on this GPU
        raw = _text(getattr(info, "name", b"") or b"")
        computed = profile_name(info.sliceCount, info.memorySizeMB, memory_total, index)
        name = raw[4:] if raw.startswith("MIG ") else raw
        if not PROFILE_RE.fullmatch(name or ""):
            name = computed
        count = ctypes.c_uint(0)
        lib.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, None, ctypes.byref(count))
        array = (lib.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
        lib.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, array, ctypes.byref(count))
        out.append({
            "index": index, "id": info.id, "name": name, "name_nvml": raw, "name_computed": computed,
            "slices": info.sliceCount,
            "instances": info.instanceCount, "memory_mib": info.memorySizeMB,
            "placements": [(array[i].start, array[i].size) for i in range(count.value)],
        })
    return out


def read_gpu(lib, index):
    """One GPU as planning needs it (no instances yet)."""
    handle = lib.nvmlDeviceGetHandleByIndex(index)
    pci = lib.nvmlDeviceGetPciInfo(handle)
    bus = _text(pci.busId)
    mem = lib.nvmlDeviceGetMemoryInfo(handle).total
    gpu = {
        "index": index,
        "name": _text(lib.nvmlDeviceGetName(handle)),
        "uuid": _text(lib.nvmlDeviceGetUUID(handle)),
        "bdf": (bus[4:] if len(bus) == 16 else bus).lower(),
        "device_id": "0x%08X" % (pci.pciDeviceId & 0xFFFFFFFF),
        "subsystem_id": "0x%08X" % (pci.pciSubSystemId & 0xFFFFFFFF),
        "memory_total": mem,
        "mig": None, "profiles": [],
    }
    try:
        current, pending = lib.nvmlDeviceGetMigMode(handle)
    except lib.NVMLError as exc:
        if getattr(exc, "value", None) != NVML_ERROR_NOT_SUPPORTED:
            raise
        return gpu
    gpu["mig"] = {"current": bool(current), "pending": bool(pending)}
    gpu["profiles"] = _profiles(lib, handle, mem)
    return gpu


def _max_slices(gpu):
    return max((p["slices"] for p in gpu["profiles"]), default=0)


def _label(gpu):
    return "GPU %d (%s %s)" % (gpu["index"], gpu["name"], gpu["uuid"])


# ---------------------------------------------------------------------------------------------
# which entry applies to which GPU, and what it asks of it

def _filter_matches(flt, gpu):
    if flt is None:
        return True
    for f in flt if isinstance(flt, list) else [flt]:
        dev, _sep, sub = f.upper().partition(":")
        if dev == gpu["device_id"].upper() and (not sub or sub == gpu["subsystem_id"].upper()):
            return True
    return False


def select(doc, name, gpus):
    """{gpu index: entry} for the chosen config; MigError when it names GPUs the host lacks,
    matches a GPU twice or enables MIG on a GPU without MIG."""
    validate_config(doc)
    configs = doc["mig-configs"]
    if name not in configs:
        raise MigError([f"MIG config {name!r} is not in the file (it has: {', '.join(sorted(configs))})"])
    errors, chosen, notes = [], {}, []
    by_index = {g["index"]: g for g in gpus}
    for i, spec in enumerate(configs[name]):
        at = f"MIG config {name!r}[{i}]"
        if spec["devices"] != "all":
            missing = [d for d in spec["devices"] if d not in by_index]
            if missing:
                errors.append(f"{at}: names GPU {', '.join(map(str, missing))}; this host has GPU "
                              f"{', '.join(map(str, sorted(by_index))) or 'none'}")
        for gpu in gpus:
            if spec["devices"] != "all" and gpu["index"] not in spec["devices"]:
                continue
            if not _filter_matches(spec.get("device-filter"), gpu):
                continue
            if gpu["mig"] is None:
                if spec["mig-enabled"] and spec["devices"] != "all":
                    errors.append(f"{at}: {_label(gpu)} is not MIG-capable; this entry enables MIG on it")
                elif spec["mig-enabled"]:
                    notes.append(f"{_label(gpu)} is not MIG-capable: left alone")
                continue
            if gpu["index"] in chosen:
                errors.append(f"{at}: {_label(gpu)} is already matched by entry {chosen[gpu['index']][0]}")
                continue
            chosen[gpu["index"]] = (i, spec)
    if errors:
        raise MigError(errors)
    return {k: v[1] for k, v in chosen.items()}, notes


def _find_profile(gpu, gi_name):
    for p in gpu["profiles"]:
        if p["name"] == gi_name:
            return p
    return None


def _overlaps(a, b):
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def place(profiles, occupied=()):
    """Placements for ``profiles`` (list of profile dicts, one per wanted instance) that do not
    overlap each other or ``occupied``; None when no assignment exists.  Depth-first search, the
    biggest instances first; the tables are small (at most 8 memory slices)."""
    order = sorted(range(len(profiles)), key=lambda i: (-profiles[i]["slices"], profiles[i]["id"]))
    chosen = [None] * len(profiles)
    taken = list(occupied)

    def step(k):
        if k == len(order):
            return True
        i = order[k]
        for pl in profiles[i]["placements"]:
            if any(_overlaps(pl, t) for t in taken):
                continue
            # identical instances in increasing placement order: no permutation explored twice
            if k and profiles[order[k - 1]] is profiles[i] and chosen[order[k - 1]] is not None \
                    and pl[0] < chosen[order[k - 1]][0]:
                continue
            chosen[i] = pl
            taken.append(pl)
            if step(k + 1):
                return True
            taken.pop()
            chosen[i] = None
        return False

    return list(chosen) if step(0) else None


def resolve(gpu, spec, where="MIG config"):
    """The MIG devices an entry asks of this GPU: [{gi profile, ci_slices, key}]; MigError naming
    the GPU and the profile when the GPU cannot hold them."""
    errors, wanted = [], []
    label = _label(gpu)
    known = ", ".join(p["name"] for p in sorted(gpu["profiles"], key=lambda p: (p["slices"], p["memory_mib"], p["index"])))
    for key, count in sorted((spec.get("mig-devices") or {}).items()):
        m = PROFILE_RE.fullmatch(key)
        prof = _find_profile(gpu, m.group("gi")) if m else None
        if prof is None:
            errors.append(f"{where}: {label} has no MIG profile {key!r} (it has: {known})")
            continue
        ci = int(m.group("ci") or prof["slices"])
        if ci > prof["slices"] or ci not in CI_INDEX_BY_SLICES:
            errors.append(f"{where}: {label}: profile {key!r}: a {ci}-slice compute instance does not fit a "
                          f"{prof['slices']}-slice GPU instance")
            continue
        if count > prof["instances"]:
            errors.append(f"{where}: {label}: profile {key!r}: {count} asked, the GPU holds at most {prof['instances']}")
            continue
        wanted += [{"profile": prof, "ci_slices": ci, "key": key}] * count
    if errors:
        raise MigError(errors)
    by_gi = {}
    for w in wanted:
        by_gi[w["profile"]["name"]] = by_gi.get(w["profile"]["name"], 0) + 1
    over = [(n, c, p["instances"]) for n, c in by_gi.items() for p in gpu["profiles"] if p["name"] == n and c > p["instances"]]
    if over:
        raise MigError([f"{where}: {label}: GPU-instance profile {n!r}: {c} asked, the GPU holds at most {m}" for n, c, m in over])
    slices = sum(w["profile"]["slices"] for w in wanted)
    if slices > _max_slices(gpu):
        raise MigError([f"{where}: {label}: the layout needs {slices} compute slices "
                        f"({', '.join('%s x%d' % kv for kv in sorted(spec['mig-devices'].items()))}); "
                        f"the GPU has {_max_slices(gpu)}"])
    if wanted and place([w["profile"] for w in wanted]) is None:
        raise MigError([f"{where}: {label}: no valid placement holds "
                        f"{', '.join('%s x%d' % kv for kv in sorted(spec['mig-devices'].items()))} "
                        "(the slices add up, but the profiles' fixed start positions collide)"])
    return wanted


# ---------------------------------------------------------------------------------------------
# what is there now

def _gi_handles(lib, handle, profile):
    count = ctypes.c_uint(0)
    array = (lib.c_nvmlGpuInstance_t * max(profile["instances"], 1))()
    lib.nvmlDeviceGetGpuInstances(handle, profile["id"], array, ctypes.byref(count))
    return [array[i] for i in range(count.value)]


def _ci_profile_ids(lib, gi, max_slices):
    """{compute-instance profile id: slices} this GPU instance supports."""
    out = {}
    for slices, index in CI_INDEX_BY_SLICES.items():
        if slices > max_slices:
            continue
        try:
            info = lib.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, index, CI_ENGINE_SHARED)
        except lib.NVMLError:
            continue
        out[info.id] = info.sliceCount
    return out


def read_instances(lib, handle, gpu):
    """GPU instances with their compute instances (empty unless MIG mode is on)."""
    if not gpu["mig"] or not gpu["mig"]["current"]:
        return []
    out = []
    for prof in gpu["profiles"]:
        for gi in _gi_handles(lib, handle, prof):
            info = lib.nvmlGpuInstanceGetInfo(gi)
            ci_ids = _ci_profile_ids(lib, gi, prof["slices"])
            cis = []
            for ci_id, slices in ci_ids.items():
                count = ctypes.c_uint(0)
                array = (lib.c_nvmlComputeInstance_t * max(prof["slices"], 1))()
                lib.nvmlGpuInstanceGetComputeInstances(gi, ci_id, array, ctypes.byref(count))
                for j in range(count.value):
                    ci_info = lib.nvmlComputeInstanceGetInfo(array[j])
                    cis.append({"id": ci_info.id, "profile_id": ci_id, "slices": slices, "handle": array[j]})
            out.append({"id": info.id, "profile": prof, "placement": (info.placement.start, info.placement.size),
                        "cis": sorted(cis, key=lambda c: c["id"]), "handle": gi})
    return sorted(out, key=lambda g: g["placement"])


def _instance_key(gi):
    """What a MIG device is, for matching: GI profile name and the CI's slices (one full CI per GI
    is the plain profile; anything else never matches and is rebuilt)."""
    if len(gi["cis"]) != 1:
        return None
    return (gi["profile"]["name"], gi["cis"][0]["slices"])


def describe(gpu, instances=None, mode=None):
    mode = gpu["mig"] if mode is None else mode
    if gpu["mig"] is None:
        return "%s: not MIG-capable" % _label(gpu)
    state = "enabled" if mode["current"] else "disabled"
    if mode["pending"] != mode["current"]:
        state += " (%s pending a reset)" % ("enabled" if mode["pending"] else "disabled")
    line = "%s: MIG %s" % (_label(gpu), state)
    if instances:
        parts = []
        for gi in instances:
            cis = gi.get("cis")
            ci_slices = cis[0]["slices"] if cis and len(cis) == 1 else None
            name = gi["profile"]["name"] if ci_slices in (None, gi["profile"]["slices"]) else \
                "%dc.%s" % (ci_slices, gi["profile"]["name"])
            if cis is not None and len(cis) != 1:
                name += "[%d CIs]" % len(cis)
            parts.append("%s@%d" % (name, gi["placement"][0]))
        line += ": " + ", ".join(parts)
    return line


# ---------------------------------------------------------------------------------------------
# the plan, per GPU

def plan_gpu(gpu, spec, instances, where="MIG config"):
    """What to do on one GPU: mode to set, instances to destroy, to keep and to create."""
    want_on = bool(spec["mig-enabled"])
    plan = {"index": gpu["index"], "uuid": gpu["uuid"], "name": gpu["name"], "mig_enabled": want_on,
            "set_mode": None, "destroy": [], "keep": [], "create": []}
    mode = gpu["mig"]
    if mode["current"] != want_on or mode["pending"] != want_on:
        plan["set_mode"] = want_on
    if not want_on:
        plan["destroy"] = list(instances)
        return plan
    wanted = resolve(gpu, spec, where)
    pool = list(instances)
    remaining = []
    for w in wanted:
        key = (w["profile"]["name"], w["ci_slices"])
        match = next((gi for gi in pool if _instance_key(gi) == key), None)
        if match is not None:
            pool.remove(match)
            plan["keep"].append(match)
        else:
            remaining.append(w)
    places = place([w["profile"] for w in remaining], [gi["placement"] for gi in plan["keep"]])
    if places is None:  # the kept ones are in the way: rebuild the whole GPU
        pool, plan["keep"], remaining = list(instances), [], list(wanted)
        places = place([w["profile"] for w in remaining])
    plan["destroy"] = pool
    plan["create"] = [{"profile": w["profile"], "ci_slices": w["ci_slices"], "key": w["key"], "placement": pl}
                      for w, pl in sorted(zip(remaining, places), key=lambda x: x[1])]
    return plan


def plan_changes(plan):
    return bool(plan["set_mode"] is not None or plan["destroy"] or plan["create"])


def _after(gpu, plan):
    mode = dict(gpu["mig"])
    if plan["set_mode"] is not None:
        mode = {"current": plan["set_mode"], "pending": plan["set_mode"]}
    instances = [dict(gi) for gi in plan["keep"]] + [
        {"profile": c["profile"], "placement": c["placement"], "cis": [{"slices": c["ci_slices"]}]} for c in plan["create"]]
    return mode, sorted(instances, key=lambda g: g["placement"])


# ---------------------------------------------------------------------------------------------
# applying

def _destroy(lib, gi):
    for ci in gi["cis"]:
        lib.nvmlComputeInstanceDestroy(ci["handle"])
    lib.nvmlGpuInstanceDestroy(gi["handle"])


def _create(lib, handle, item):
    placement = lib.c_nvmlGpuInstancePlacement_t()
    placement.start, placement.size = item["placement"]
    gi = lib.nvmlDeviceCreateGpuInstanceWithPlacement(handle, item["profile"]["id"], placement)
    ci_info = lib.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, CI_INDEX_BY_SLICES[item["ci_slices"]], CI_ENGINE_SHARED)
    lib.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)


def _read_mode(lib, handle):
    current, pending = lib.nvmlDeviceGetMigMode(handle)
    return {"current": bool(current), "pending": bool(pending)}


def apply_gpu(lib, gpu, plan, reset=None):
    """Carry out one GPU's plan.  Returns {"reset_pending": bool, "reset_output": str}."""
    out = {"reset_pending": False, "reset_output": ""}
    handle = lib.nvmlDeviceGetHandleByIndex(gpu["index"])
    for gi in plan["destroy"]:
        _destroy(lib, gi)
    if plan["set_mode"] is not None:
        lib.nvmlDeviceSetMigMode(handle, 1 if plan["set_mode"] else 0)
        mode = _read_mode(lib, handle)
        if mode["current"] != plan["set_mode"] and reset is not None:
            out["reset_output"] = reset(gpu) or ""
            handle = lib.nvmlDeviceGetHandleByIndex(gpu["index"])
            mode = _read_mode(lib, handle)
        if mode["current"] != plan["set_mode"]:
            out["reset_pending"] = True
            return out
    for item in plan["create"]:
        _create(lib, handle, item)
    return out


def run(lib, doc, name, check_mode=False, reset=None):
    """Plan (and unless ``check_mode`` apply) config ``name`` on every GPU the host has.

    Every GPU is read and every layout checked before the first NVML write: a bad layout on any
    GPU changes none.  Returns a result dict (changed, gpus, reset_pending, notes, diff)."""
    validate_config(doc)
    lib.nvmlInit()
    try:
        gpus = [read_gpu(lib, i) for i in range(lib.nvmlDeviceGetCount())]
        chosen, notes = select(doc, name, gpus)
        plans, errors, before, after = {}, [], [], []
        current = {}
        for gpu in gpus:
            handle = lib.nvmlDeviceGetHandleByIndex(gpu["index"])
            current[gpu["index"]] = read_instances(lib, handle, gpu) if gpu["mig"] else []
            before.append(describe(gpu, current[gpu["index"]]))
            if gpu["index"] not in chosen:
                after.append(before[-1])
                continue
            try:
                plans[gpu["index"]] = plan_gpu(gpu, chosen[gpu["index"]], current[gpu["index"]], f"MIG config {name!r}")
            except MigError as exc:
                errors.extend(exc.errors)
                continue
            mode, instances = _after(gpu, plans[gpu["index"]])
            after.append(describe(gpu, instances, mode))
        if errors:
            raise MigError(errors)
        result = {"changed": any(plan_changes(p) for p in plans.values()), "config": name, "gpus": [],
                  "reset_pending": [], "notes": notes,
                  "diff": {"before": "\n".join(before) + "\n", "after": "\n".join(after) + "\n"}}
        for gpu in gpus:
            plan = plans.get(gpu["index"])
            entry = {"index": gpu["index"], "uuid": gpu["uuid"], "name": gpu["name"], "bdf": gpu["bdf"],
                     "mig_capable": gpu["mig"] is not None, "managed": plan is not None,
                     "mig_mode_before": gpu["mig"], "changed": bool(plan and plan_changes(plan)),
                     "destroy": [describe_instance(gi) for gi in (plan or {}).get("destroy", [])],
                     "create": [describe_instance(c) for c in (plan or {}).get("create", [])],
                     "keep": [describe_instance(gi) for gi in (plan or {}).get("keep", [])],
                     "set_mig_mode": (plan or {}).get("set_mode"),
                     "profiles": [_profile_entry(p) for p in gpu["profiles"]]}
            if plan and plan_changes(plan) and not check_mode:
                done = apply_gpu(lib, gpu, plan, reset)
                entry.update(done)
                if done["reset_pending"]:
                    result["reset_pending"].append(gpu["index"])
                    entry["mig_mode_after"] = _read_mode(lib, lib.nvmlDeviceGetHandleByIndex(gpu["index"]))
                else:
                    entry.update(_verify(lib, gpu, plan))
            result["gpus"].append(entry)
        problems = [e for e in result["gpus"] if e.get("verified") is False]
        if problems:
            raise MigVerifyError(["%s: after applying, the GPU holds %s, not %s" % (
                _label(next(g for g in gpus if g["index"] == e["index"])), e["found"], e["expected"]) for e in problems])
        return result
    finally:
        try:
            lib.nvmlShutdown()
        except Exception:  # pylint: disable=broad-except
            pass


def _profile_entry(p):
    out = dict((k, p[k]) for k in ("name", "id", "slices", "instances", "memory_mib", "name_nvml", "name_computed"))
    out["placements"] = [list(x) for x in p["placements"]]
    return out


def describe_instance(item):
    cis = item.get("cis")
    ci_slices = item.get("ci_slices", cis[0]["slices"] if cis and len(cis) == 1 else None)
    name = item["profile"]["name"]
    if ci_slices not in (None, item["profile"]["slices"]):
        name = "%dc.%s" % (ci_slices, name)
    return "%s@%d" % (name, item["placement"][0])


def _verify(lib, gpu, plan):
    """Read the GPU back: the instances must be exactly the planned ones."""
    handle = lib.nvmlDeviceGetHandleByIndex(gpu["index"])
    mode = _read_mode(lib, handle)
    now = dict(gpu, mig=mode)
    found = sorted(describe_instance(gi) for gi in read_instances(lib, handle, now))
    instances = _after(gpu, plan)[1]
    expected = sorted(describe_instance(gi) for gi in instances) if plan["mig_enabled"] else []
    return {"mig_mode_after": mode, "verified": found == expected and mode["current"] == plan["mig_enabled"],
            "found": found, "expected": expected}


# ---------------------------------------------------------------------------------------------
# pynvml on the host: NVIDIA's nvidia-ml-py, for the module's Python and the boot-time apply's

#: the PyPI distribution that provides ``import pynvml`` (NVIDIA's; the ``pynvml`` distribution is another project's)
NVML_DISTRIBUTION = "nvidia-ml-py"
#: the MIG calls ``run`` needs beyond device enumeration: bindings older than NVML's MIG API lack them (Ubuntu
#: 22.04's python3-pynvml 7.352 does)
NVML_MIG_CALLS = ("nvmlDeviceGetMigMode", "nvmlDeviceSetMigMode", "nvmlDeviceGetGpuInstanceProfileInfo",
                  "nvmlDeviceGetGpuInstancePossiblePlacements", "nvmlDeviceCreateGpuInstanceWithPlacement",
                  "nvmlDeviceGetGpuInstances", "nvmlGpuInstanceCreateComputeInstance", "nvmlGpuInstanceDestroy")


def load_pynvml():
    """(pynvml, None), or (None, why) when it cannot be imported."""
    try:
        import pynvml  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        return None, "%s: %s" % (type(exc).__name__, exc)
    return pynvml, None


def nvml_missing_calls(lib):
    """The MIG calls of ``NVML_MIG_CALLS`` that ``lib`` does not have (bindings too old for MIG)."""
    return [name for name in NVML_MIG_CALLS if not callable(getattr(lib, name, None))]


def nvml_install_hint(python):
    """How to give ``python`` a pynvml that can do MIG: the same words for the module, the role and the boot unit."""
    return ("install NVIDIA's %(dist)s for %(py)s: `%(py)s -m pip install %(dist)s` (a Python the distribution "
            "manages, Debian 12+/Ubuntu 23.04+, also needs --break-system-packages), or the distribution's "
            "python3-pynvml (Debian 12+ contrib, Ubuntu 24.04+ multiverse; Ubuntu 22.04's 7.352 is too old for MIG; "
            "RHEL has none); the gpuops.nvidia.mig_layout role does either with mig_layout_nvml_install=pip or "
            "package" % {"dist": NVML_DISTRIBUTION, "py": python})


def nvml_problem(lib, why, python):
    """Why MIG layouts cannot be applied with ``lib`` (pynvml, or None and ``why``) in ``python``, or None."""
    if lib is None:
        return "pynvml is not importable by %s (%s): %s" % (python, why, nvml_install_hint(python))
    missing = nvml_missing_calls(lib)
    if missing:
        version = getattr(lib, "__version__", None) or "of unknown version"
        return ("the pynvml of %s (%s, %s) is too old for MIG, it has no %s: %s"
                % (python, getattr(lib, "__file__", "?"), version, ", ".join(missing), nvml_install_hint(python)))
    return None


def nvml_check():
    """``mig_apply.py --nvml-check``: one JSON line, whether this Python can apply MIG layouts (the mig_layout role
    runs it with ``mig_layout_python`` before any change)."""
    lib, why = load_pynvml()
    problem = nvml_problem(lib, why, sys.executable)
    return {"ok": problem is None, "msg": problem or "pynvml usable", "python": sys.executable,
            "pynvml": getattr(lib, "__file__", None) if lib is not None else None}


# ---------------------------------------------------------------------------------------------
# boot-time re-apply: python3 mig_apply.py --config /etc/gpuops/mig/config.json --name NAME

def _reset_with_nvidia_smi(gpu):  # pragma: no cover - needs a real GPU
    import subprocess  # pylint: disable=import-outside-toplevel
    proc = subprocess.run(["nvidia-smi", "--gpu-reset", "-i", gpu["bdf"]], capture_output=True, text=True, check=False)
    return (proc.stdout + proc.stderr).strip()


def main(argv=None, lib=None):
    parser = argparse.ArgumentParser(description="Apply a mig-parted v1 MIG config through NVML (gpuops.nvidia).")
    parser.add_argument("--config", help="the config file, JSON (mig-parted's v1 format)")
    parser.add_argument("--name", help="the config to apply (a key of mig-configs)")
    parser.add_argument("--check", action="store_true", help="plan only, change nothing")
    parser.add_argument("--no-reset", action="store_true", help="never reset a GPU; report a pending mode change")
    parser.add_argument("--nvml-check", action="store_true",
                        help="only say (JSON) whether this Python has a pynvml that can apply MIG layouts")
    args = parser.parse_args(argv)
    if args.nvml_check:
        sys.stdout.write(json.dumps(nvml_check(), sort_keys=True) + "\n")
        return 0
    if not args.config or not args.name:
        parser.error("--config and --name are required")
    try:
        data = read_node_file(args.config, CONFIG_LIMIT)    # a FIFO there never blocks the boot
        if data is None:
            raise FileNotFoundError("%s does not exist" % args.config)
        doc = json.loads(data.decode("utf-8"))
        if lib is None:
            lib, why = load_pynvml()
            problem = nvml_problem(lib, why, sys.executable)
            if problem:
                raise MigError([problem + "; nothing was changed"])
        result = run(lib, doc, args.name, check_mode=args.check,
                     reset=None if args.no_reset else _reset_with_nvidia_smi)
    except Exception as exc:  # pylint: disable=broad-except  # NVMLError, OSError, bad JSON: one line for the journal
        errors = exc.errors if isinstance(exc, MigError) else ["%s: %s" % (type(exc).__name__, exc)]
        sys.stdout.write(json.dumps({"failed": True, "msg": "; ".join(errors)}) + "\n")
        return 1
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 3 if result["reset_pending"] else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
