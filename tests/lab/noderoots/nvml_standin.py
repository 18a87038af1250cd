"""A pynvml stand-in answering from a real capture (nvml.json + nvidia-smi mig -lgipp).

Lives under tests/: it is test equipment, never shipped in plugins/.  It implements
exactly the pynvml functions gpuops.nvidia's _nvml.collect() calls, with the same
argument and return shapes, so the collector runs unchanged against it.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
from types import SimpleNamespace


class c_nvmlGpuInstancePlacement_t(ctypes.Structure):  # noqa: N801 - pynvml's name
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class NVMLError(Exception):
    pass


class NVMLStandIn:
    c_nvmlGpuInstancePlacement_t = c_nvmlGpuInstancePlacement_t

    def __init__(self, capture_dir, fail_init=False):
        with open(os.path.join(capture_dir, "nvml.json")) as f:
            self.data = json.load(f)
        self.placements = {}
        lgipp = os.path.join(capture_dir, "nvidia-smi-mig-lgipp.txt")
        if os.path.exists(lgipp):
            with open(lgipp) as f:
                for line in f:
                    m = re.search(r"Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,]+)\}:(\d+)", line)
                    if m:
                        self.placements[int(m.group(1))] = [(int(s), int(m.group(3))) for s in m.group(2).split(",")]
        self.fail_init = fail_init
        self.inited = False

    # system
    def nvmlInit(self):
        if self.fail_init:
            raise NVMLError("NVML_ERROR_DRIVER_NOT_LOADED")
        self.inited = True

    def nvmlShutdown(self):
        self.inited = False

    def nvmlSystemGetDriverVersion(self):
        return self.data["driver"]

    def nvmlSystemGetNVMLVersion(self):
        return self.data["nvml"]

    def nvmlSystemGetCudaDriverVersion(self):
        return self.data["cuda_driver"]

    def nvmlDeviceGetCount(self):
        return self.data["count"]

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.data["devices"][index]

    # device
    def nvmlDeviceGetName(self, h):
        return h["name"]

    def nvmlDeviceGetUUID(self, h):
        return h["uuid"]

    def nvmlDeviceGetSerial(self, h):
        return h["serial"]

    def nvmlDeviceGetVbiosVersion(self, h):
        return h["vbios"]

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=h["mem_total"])

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return tuple(h["cc"])

    def nvmlDeviceGetArchitecture(self, h):
        return h["arch"]

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=h["pci"]["busId"])

    def nvmlDeviceGetPersistenceMode(self, h):
        return h["persistence"]

    def nvmlDeviceGetMigMode(self, h):
        return tuple(h["mig_mode"])

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h, profile):
        entry = h["gi_profiles"][profile]
        if "err" in entry:
            raise NVMLError(entry["err"])
        return SimpleNamespace(**entry)

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, h, profile_id, placementsRef, countRef):
        """pynvml's C-shaped call: NULL array -> count; sized array -> filled."""
        if profile_id not in self.placements:
            raise NVMLError("NVML_ERROR_NOT_SUPPORTED")
        places = self.placements[profile_id]
        count = countRef._obj
        if placementsRef is None:
            count.value = len(places)
            return 0
        if count.value < len(places):
            raise NVMLError("NVML_ERROR_INSUFFICIENT_SIZE")
        for i, (start, size) in enumerate(places):
            placementsRef[i].start = start
            placementsRef[i].size = size
        count.value = len(places)
        return 0
