# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""NVML access behind one small interface.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

``load()`` imports ``pynvml`` (from the nvidia-ml-py package) when it is present;
``collect(lib)`` takes any object with pynvml's function names, so tests feed a
stand-in built from captured answers.  Errors are recorded inside the result,
never raised.
"""
from __future__ import annotations

import ctypes

ARCH_NAMES = {
    2: "kepler", 3: "maxwell", 4: "pascal", 5: "volta", 6: "turing", 7: "ampere",
    8: "ada", 9: "hopper", 10: "blackwell", 11: "orin", 12: "blackwell",
}
MAX_GI_PROFILES = 16


def load():
    """(lib, note): the pynvml module, or (None, reason) when it cannot be imported."""
    try:
        import pynvml  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        return None, "pynvml is not importable on this host (%s); NVML facts skipped" % exc
    return pynvml, None


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _try(errors, what, fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # NVMLError and friends: record, carry on
        errors.append("%s: %s" % (what, exc))
        return None


def _placements(lib, get_place, handle, profile_id):
    """Possible placements of a GPU-instance profile.

    pynvml exposes the C call as is: (device, profileId, placementsRef, countRef).
    A NULL array first asks for the count, then a sized array is filled.
    """
    count = ctypes.c_uint(0)
    get_place(handle, profile_id, None, ctypes.byref(count))
    array = (lib.c_nvmlGpuInstancePlacement_t * count.value)()
    get_place(handle, profile_id, array, ctypes.byref(count))
    return [{"start": array[i].start, "size": array[i].size} for i in range(count.value)]


def _gi_profiles(lib, handle, errors):
    profiles = []
    get_info = getattr(lib, "nvmlDeviceGetGpuInstanceProfileInfo", None)
    get_place = getattr(lib, "nvmlDeviceGetGpuInstancePossiblePlacements", None)
    if get_info is None:
        return profiles
    for index in range(MAX_GI_PROFILES):
        try:
            info = get_info(handle, index)
        except Exception:  # profile not supported on this GPU
            continue
        entry = {
            "profile_index": index,
            "id": info.id,
            "slices": info.sliceCount,
            "instances": info.instanceCount,
            "memory_mib": info.memorySizeMB,
            "multiprocessors": info.multiprocessorCount,
            "copy_engines": info.copyEngineCount,
            "decoders": info.decoderCount,
            "encoders": info.encoderCount,
            "jpegs": info.jpegCount,
            "ofas": info.ofaCount,
            "placements": None,
        }
        if get_place is not None:
            places = _try(errors, "placements of profile %d" % index, _placements, lib, get_place, handle, info.id)
            if places is not None:
                entry["placements"] = places
        profiles.append(entry)
    return profiles


def collect(lib):
    """NVML facts: driver/CUDA versions and one dict per GPU.  Never raises."""
    errors = []
    try:
        lib.nvmlInit()
    except Exception as exc:
        return {"available": False, "errors": ["nvmlInit: %s" % exc], "devices": []}
    try:
        cuda = _try(errors, "cuda driver version", lib.nvmlSystemGetCudaDriverVersion)
        result = {
            "available": True,
            "driver_version": _text(_try(errors, "driver version", lib.nvmlSystemGetDriverVersion)),
            "nvml_version": _text(_try(errors, "nvml version", lib.nvmlSystemGetNVMLVersion)),
            "cuda_driver_version": "%d.%d" % (cuda // 1000, (cuda % 1000) // 10) if cuda else None,
            "devices": [],
            "errors": errors,
        }
        count = _try(errors, "device count", lib.nvmlDeviceGetCount) or 0
        for index in range(count):
            handle = _try(errors, "handle %d" % index, lib.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                continue
            result["devices"].append(_device(lib, handle, index, errors))
        return result
    finally:
        try:
            lib.nvmlShutdown()
        except Exception:
            pass


def _device(lib, handle, index, errors):
    def q(what, name, *args):
        fn = getattr(lib, name, None)
        if fn is None:
            return None
        return _try(errors, "gpu %d %s" % (index, what), fn, handle, *args)

    mem = q("memory", "nvmlDeviceGetMemoryInfo")
    cc = q("compute capability", "nvmlDeviceGetCudaComputeCapability")
    arch = q("architecture", "nvmlDeviceGetArchitecture")
    pci = q("pci info", "nvmlDeviceGetPciInfo")
    mig = None
    fn = getattr(lib, "nvmlDeviceGetMigMode", None)
    if fn is not None:
        try:
            cur, pend = fn(handle)
            mig = {"current": bool(cur), "pending": bool(pend)}
        except Exception:
            mig = None  # NotSupported: not MIG-capable
    bus = _text(pci.busId) if pci is not None else None
    return {
        "index": index,
        "name": _text(q("name", "nvmlDeviceGetName")),
        "uuid": _text(q("uuid", "nvmlDeviceGetUUID")),
        "serial": _text(q("serial", "nvmlDeviceGetSerial")),
        "bdf": bus[4:].lower() if bus and len(bus) == 16 else (bus.lower() if bus else None),
        "memory_mib": mem.total // (1024 * 1024) if mem is not None else None,
        "compute_capability": "%d.%d" % tuple(cc) if cc else None,
        "architecture": ARCH_NAMES.get(arch, "unknown") if arch is not None else None,
        "vbios": _text(q("vbios", "nvmlDeviceGetVbiosVersion")),
        "persistence_mode": q("persistence mode", "nvmlDeviceGetPersistenceMode") == 1,
        "mig_capable": mig is not None,
        "mig_mode": mig,
        "gi_profiles": _gi_profiles(lib, handle, errors) if mig is not None else [],
    }
