# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""A stateful NVML for MIG work, shaped like pynvml and driven by real profile tables.

Nothing real can change MIG mode or create MIG instances on this machine (and the lent H200
must never have its MIG mode changed), so the MIG code is tested against this stand-in.  It is
built from captured data: the H200's profile table and placements come from the capture in
``tests/fixtures/nodes/`` (``tests/unit/fixtures/mig/h200-141gb.json`` is generated from it), the
A100/H100 tables from NVIDIA's published profile lists (same directory, with their sources).

What it models, so that wrong orders of calls fail the way the real library fails:
- ``nvmlInit`` first (NVML_ERROR_UNINITIALIZED otherwise); handles are real ctypes pointers of
  pynvml's handle types; a handle of a destroyed instance is NVML_ERROR_INVALID_ARGUMENT.
- MIG mode with a pending state: a GPU whose mode change needs a reset keeps the new mode pending
  while the reset is blocked (``reset_blocked``: persistenced, nvidia_drm, fabric manager); an
  external per-GPU reset (``reset(index)``, what ``nvidia-smi --gpu-reset -i`` does) activates it
  and wipes the instances; MIG mode cannot be disabled while GPU instances exist (IN_USE).
- GPU instances only in MIG mode, only at the profile's published placements, never overlapping,
  at most the profile's instance count; compute instances within their GPU instance's slices;
  a GPU instance with compute instances cannot be destroyed (IN_USE).
- Instance IDs are handed out lowest-free (real NVML derives them from the placement); callers
  must read them back, never assume them.
- Every call is recorded (``calls``); ``writes()`` lists the calls that change the GPU.

The function signatures are pynvml's own (checked by tests/unit/plugins/test_nvml_sim.py against
the installed nvidia-ml-py); constants, structures and the NVMLError family are pynvml's.
"""
from __future__ import annotations

import ctypes
import json
import os

import pynvml

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "mig")
WRITE_CALLS = frozenset({
    "nvmlDeviceSetMigMode", "nvmlDeviceCreateGpuInstance", "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlGpuInstanceDestroy", "nvmlGpuInstanceCreateComputeInstance",
    "nvmlGpuInstanceCreateComputeInstanceWithPlacement", "nvmlComputeInstanceDestroy",
})
CI_SLICES_BY_INDEX = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6}

E = pynvml  # error codes: E.NVML_ERROR_*


def load_table(name):
    """A profile table from tests/unit/fixtures/mig/<name>.json."""
    name = name if name.endswith(".json") else name + ".json"
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as fh:
        table = json.load(fh)
    table["_file"] = name
    return table


def _fail(code):
    raise pynvml.NVMLError(code)


class _Gpu:
    def __init__(self, table, index, uuid=None, mig_mode=False, needs_reset=None, reset_blocked=False,
                 profile_names=False):
        self.table = table
        self.index = index
        self.uuid = uuid or "GPU-%08x-0000-0000-0000-%012d" % (0x5105 + index, index)
        self.capable = bool(table.get("mig_capable", bool(table.get("gi_profiles"))))
        self.current = self.pending = bool(mig_mode) and self.capable
        # Ampere needs a reset to activate a mode change; Hopper and newer do not (table default)
        self.needs_reset = table.get("mode_change_needs_reset", False) if needs_reset is None else needs_reset
        self.reset_blocked = reset_blocked
        self.profile_names = profile_names
        self.by_index = {p["profile_index"]: p for p in table.get("gi_profiles", [])}
        self.by_id = {p["id"]: p for p in table.get("gi_profiles", [])}
        self.gis = {}       # gi id -> {"profile", "placement", "cis": {ci id: slices}}
        self.struct = pynvml.struct_c_nvmlDevice_t()

    def wipe(self):
        self.gis = {}


class NvmlSim:
    """pynvml's MIG calls over simulated GPUs (see the module docstring)."""

    def __init__(self, gpus):
        """``gpus``: list of dicts {table, mig_mode, needs_reset, reset_blocked, uuid, profile_names}."""
        self._gpus = [_Gpu(index=i, **g) for i, g in enumerate(gpus)]
        self._init = 0
        self.calls = []
        self._handles = {}   # address of a handle's struct -> ("gpu", gpu) | ("gi", gpu, id) | ("ci", gpu, gi, id)
        self._structs = []   # keep the structs alive
        for gpu in self._gpus:
            self._handles[ctypes.addressof(gpu.struct)] = ("gpu", gpu)

    # -- pynvml's constants, structures and errors ------------------------------------------
    def __getattr__(self, name):
        if name.startswith("nvml"):
            raise AttributeError("the NVML simulator does not model %s" % name)
        return getattr(pynvml, name)

    # -- bookkeeping ---------------------------------------------------------------------------
    def _call(self, name, *args):
        self.calls.append((name,) + args)
        if not self._init and name not in ("nvmlInit",):
            _fail(E.NVML_ERROR_UNINITIALIZED)

    def writes(self):
        return [c for c in self.calls if c[0] in WRITE_CALLS]

    def _new_handle(self, kind, entry):
        struct = (pynvml.struct_c_nvmlGpuInstance_t if kind == "gi" else pynvml.struct_c_nvmlComputeInstance_t)()
        self._structs.append(struct)
        self._handles[ctypes.addressof(struct)] = entry
        return ctypes.pointer(struct)

    def _lookup(self, handle, kind):
        try:
            entry = self._handles.get(ctypes.addressof(handle.contents))
        except (AttributeError, ValueError, TypeError):
            entry = None
        if entry is None or entry[0] != kind:
            _fail(E.NVML_ERROR_INVALID_ARGUMENT)
        if kind == "gi" and entry[2] not in entry[1].gis:
            _fail(E.NVML_ERROR_INVALID_ARGUMENT)  # destroyed
        if kind == "ci" and (entry[2] not in entry[1].gis or entry[3] not in entry[1].gis[entry[2]]["cis"]):
            _fail(E.NVML_ERROR_INVALID_ARGUMENT)
        return entry

    def _gpu(self, handle):
        return self._lookup(handle, "gpu")[1]

    def _handle_of(self, gpu):
        return ctypes.pointer(gpu.struct)

    @staticmethod
    def _set(ref, value):
        ref._obj.value = value  # a ctypes.byref() argument

    # -- outside NVML: what nvidia-smi --gpu-reset and a reboot do ---------------------------
    def reset(self, index):
        """Per-GPU reset.  Returns (ok, message) like the command would report."""
        gpu = self._gpus[index]
        self.calls.append(("reset", index))
        if gpu.reset_blocked:
            return False, "GPU %s is in use by another client (nvidia-persistenced)" % gpu.uuid
        gpu.current = gpu.pending
        gpu.wipe()
        return True, "GPU %s was successfully reset." % gpu.uuid

    def reboot(self):
        for gpu in self._gpus:
            gpu.current = gpu.pending
            gpu.wipe()

    # -- across processes: a module run by ansible-playbook is a process of its own ----------
    def dump(self):
        """The GPUs' state as JSON-able data (tables by name); ``from_dump`` rebuilds it."""
        out = []
        for gpu in self._gpus:
            out.append({"table": gpu.table["_file"], "uuid": gpu.uuid, "current": gpu.current, "pending": gpu.pending,
                        "needs_reset": gpu.needs_reset, "reset_blocked": gpu.reset_blocked,
                        "gis": [[gi_id, g["profile"]["id"], list(g["placement"]), sorted(g["cis"].items())]
                                for gi_id, g in sorted(gpu.gis.items())]})
        return out

    @classmethod
    def from_dump(cls, data):
        sim = cls([{"table": load_table(g["table"]), "uuid": g["uuid"], "needs_reset": g["needs_reset"],
                    "reset_blocked": g["reset_blocked"]} for g in data])
        for gpu, g in zip(sim._gpus, data):
            gpu.current, gpu.pending = g["current"], g["pending"]
            for gi_id, profile_id, placement, cis in g["gis"]:
                gpu.gis[gi_id] = {"profile": gpu.by_id[profile_id], "placement": tuple(placement),
                                  "cis": {int(k): v for k, v in cis}}
        return sim

    def state(self, index):
        """(current, pending, sorted [(profile name, placement start, [ci slices])])."""
        gpu = self._gpus[index]
        return gpu.current, gpu.pending, sorted(
            (g["profile"]["name"], g["placement"][0], sorted(g["cis"].values())) for g in gpu.gis.values())

    # -- library -------------------------------------------------------------------------------
    def nvmlInit(self):
        self._call("nvmlInit")
        self._init += 1

    def nvmlShutdown(self):
        self._call("nvmlShutdown")
        self._init -= 1

    def nvmlDeviceGetCount(self):
        self._call("nvmlDeviceGetCount")
        return len(self._gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._call("nvmlDeviceGetHandleByIndex", index)
        if not 0 <= index < len(self._gpus):
            _fail(E.NVML_ERROR_INVALID_ARGUMENT)
        return self._handle_of(self._gpus[index])

    def nvmlDeviceGetName(self, handle):
        self._call("nvmlDeviceGetName")
        return self._gpu(handle).table["product"]

    def nvmlDeviceGetUUID(self, handle):
        self._call("nvmlDeviceGetUUID")
        return self._gpu(handle).uuid

    def nvmlDeviceGetPciInfo(self, handle):
        self._call("nvmlDeviceGetPciInfo")
        gpu = self._gpu(handle)
        info = pynvml.nvmlPciInfo_t()
        info.busId = b"00000000:%02x:00.0" % (0x17 + gpu.index)
        info.pciDeviceId = int(gpu.table["pci_device_id"], 16)
        info.pciSubSystemId = int(gpu.table.get("pci_subsystem_id", "0x00000000"), 16)
        return info

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        self._call("nvmlDeviceGetMemoryInfo")
        mem = pynvml.c_nvmlMemory_t()
        mem.total = self._gpu(handle).table["memory_total_bytes"]
        return mem

    def nvmlDeviceGetMigMode(self, device):
        self._call("nvmlDeviceGetMigMode")
        gpu = self._gpu(device)
        if not gpu.capable:
            _fail(E.NVML_ERROR_NOT_SUPPORTED)
        return [int(gpu.current), int(gpu.pending)]

    def nvmlDeviceSetMigMode(self, device, mode):
        self._call("nvmlDeviceSetMigMode", mode)
        gpu = self._gpu(device)
        if not gpu.capable:
            _fail(E.NVML_ERROR_NOT_SUPPORTED)
        if mode not in (pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE):
            _fail(E.NVML_ERROR_INVALID_ARGUMENT)
        if gpu.gis:
            _fail(E.NVML_ERROR_IN_USE)  # instances exist: destroy them first
        gpu.pending = bool(mode)
        if gpu.current == gpu.pending:
            return pynvml.NVML_SUCCESS
        if gpu.needs_reset:
            if gpu.reset_blocked:
                return E.NVML_ERROR_IN_USE  # activation status: stays pending
            gpu.current = gpu.pending
            return pynvml.NVML_SUCCESS
        gpu.current = gpu.pending
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceProfileInfo(self, device, profile, version=2):
        self._call("nvmlDeviceGetGpuInstanceProfileInfo", profile)
        gpu = self._gpu(device)
        if not gpu.capable or profile not in gpu.by_index:
            _fail(E.NVML_ERROR_NOT_SUPPORTED)
        p = gpu.by_index[profile]
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t() if version == 2 else pynvml.c_nvmlGpuInstanceProfileInfo_t()
        info.id, info.sliceCount, info.instanceCount = p["id"], p["slices"], p["instances"]
        info.memorySizeMB, info.multiprocessorCount = p["memory_mib"], p["multiprocessors"]
        info.copyEngineCount, info.decoderCount, info.encoderCount = p["copy_engines"], p["decoders"], p["encoders"]
        info.jpegCount, info.ofaCount = p["jpegs"], p["ofas"]
        if version == 2 and gpu.profile_names:
            info.name = ("MIG " + p["name"]).encode()
        return info

    def _placements(self, gpu, profile_id):
        if not gpu.capable or profile_id not in gpu.by_id:
            _fail(E.NVML_ERROR_INVALID_ARGUMENT)
        return [(pl["start"], pl["size"]) for pl in gpu.by_id[profile_id]["placements"]]

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, device, profileId, placementsRef, countRef):
        self._call("nvmlDeviceGetGpuInstancePossiblePlacements", profileId)
        places = self._placements(self._gpu(device), profileId)
        if placementsRef is None:
            self._set(countRef, len(places))
            return pynvml.NVML_SUCCESS
        if countRef._obj.value < len(places) or len(placementsRef) < len(places):
            self._set(countRef, len(places))
            _fail(E.NVML_ERROR_INSUFFICIENT_SIZE)
        for i, (start, size) in enumerate(places):
            placementsRef[i].start, placementsRef[i].size = start, size
        self._set(countRef, len(places))
        return pynvml.NVML_SUCCESS

    @staticmethod
    def _overlaps(a, b):
        return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]

    def _free(self, gpu, profile, placement):
        if sum(1 for g in gpu.gis.values() if g["profile"] is profile) >= profile["instances"]:
            return False
        return not any(self._overlaps(placement, g["placement"]) for g in gpu.gis.values())

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, device, profileId):
        self._call("nvmlDeviceGetGpuInstanceRemainingCapacity", profileId)
        gpu = self._gpu(device)
        if not gpu.current:
            _fail(E.NVML_ERROR_NOT_SUPPORTED)
        places = self._placements(gpu, profileId)
        profile = gpu.by_id[profileId]
        taken = [g["placement"] for g in gpu.gis.values()]
        free = [p for p in places if not any(self._overlaps(p, t) for t in taken)]
        left = profile["instances"] - sum(1 for g in gpu.gis.values() if g["profile"] is profile)
        # greedy count of disjoint free placements
        count, used = 0, []
        for p in free:
            if count < left and not any(self._overlaps(p, u) for u in used):
                used.append(p)
                count += 1
        return count

    def _create_gi(self, gpu, profile, placement):
        gi_id = next(i for i in range(1, 64) if i not in gpu.gis)
        gpu.gis[gi_id] = {"profile": profile, "placement": placement, "cis": {}}
        return self._new_handle("gi", ("gi", gpu, gi_id))

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, device, profileId, placement):
        self._call("nvmlDeviceCreateGpuInstanceWithPlacement", profileId, (placement.start, placement.size))
        gpu = self._gpu(device)
        if not gpu.current:
            _fail(E.NVML_ERROR_NOT_SUPPORTED)
        places = self._placements(gpu, profileId)
        wanted = (placement.start, placement.size)
        if wanted not in places:
            _fail(E.NVML_ERROR_INVALID_ARGUMENT)
        profile = gpu.by_id[profileId]
        if not self._free(gpu, profile, wanted):
            _fail(E.NVML_ERROR_INSUFFICIENT_RESOURCES)
        return self._create_gi(gpu, profile, wanted)

    def nvmlDeviceCreateGpuInstance(self, device, profileId):
        self._call("nvmlDeviceCreateGpuInstance", profileId)
        gpu = self._gpu(device)
        if not gpu.current:
            _fail(E.NVML_ERROR_NOT_SUPPORTED)
        profile = gpu.by_id.get(profileId)
        for place in self._placements(gpu, profileId):
            if self._free(gpu, profile, place):
                return self._create_gi(gpu, profile, place)
        return _fail(E.NVML_ERROR_INSUFFICIENT_RESOURCES)

    def nvmlDeviceGetGpuInstances(self, device, profileId, gpuInstancesRef, countRef):
        self._call("nvmlDeviceGetGpuInstances", profileId)
        gpu = self._gpu(device)
        if not gpu.current:
            _fail(E.NVML_ERROR_NOT_SUPPORTED)
        if profileId not in gpu.by_id:
            _fail(E.NVML_ERROR_INVALID_ARGUMENT)
        found = sorted(i for i, g in gpu.gis.items() if g["profile"]["id"] == profileId)
        if len(gpuInstancesRef) < len(found):
            self._set(countRef, len(found))
            _fail(E.NVML_ERROR_INSUFFICIENT_SIZE)
        for j, gi_id in enumerate(found):
            gpuInstancesRef[j] = self._new_handle("gi", ("gi", gpu, gi_id))
        self._set(countRef, len(found))
        return pynvml.NVML_SUCCESS

    def nvmlGpuInstanceGetInfo(self, gpuInstance):
        self._call("nvmlGpuInstanceGetInfo")
        _kind, gpu, gi_id = self._lookup(gpuInstance, "gi")
        gi = gpu.gis[gi_id]
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.device = self._handle_of(gpu)
        info.id, info.profileId = gi_id, gi["profile"]["id"]
        info.placement.start, info.placement.size = gi["placement"]
        return info

    def nvmlGpuInstanceDestroy(self, gpuInstance):
        self._call("nvmlGpuInstanceDestroy")
        _kind, gpu, gi_id = self._lookup(gpuInstance, "gi")
        if gpu.gis[gi_id]["cis"]:
            _fail(E.NVML_ERROR_IN_USE)
        del gpu.gis[gi_id]
        return pynvml.NVML_SUCCESS

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, device, profile, engProfile, version=2):
        self._call("nvmlGpuInstanceGetComputeInstanceProfileInfo", profile, engProfile)
        _kind, gpu, gi_id = self._lookup(device, "gi")
        gi_slices = gpu.gis[gi_id]["profile"]["slices"]
        slices = CI_SLICES_BY_INDEX.get(profile)
        if engProfile != pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
            _fail(E.NVML_ERROR_INVALID_ARGUMENT)
        if slices is None or slices > gi_slices or (slices == 8 and gi_slices != 8):
            _fail(E.NVML_ERROR_NOT_SUPPORTED)
        info = pynvml.c_nvmlComputeInstanceProfileInfo_v2_t() if version == 2 else pynvml.c_nvmlComputeInstanceProfileInfo_t()
        info.id, info.sliceCount, info.instanceCount = profile, slices, gi_slices // slices
        return info

    def nvmlGpuInstanceCreateComputeInstance(self, gpuInstance, profileId):
        self._call("nvmlGpuInstanceCreateComputeInstance", profileId)
        _kind, gpu, gi_id = self._lookup(gpuInstance, "gi")
        gi = gpu.gis[gi_id]
        slices = CI_SLICES_BY_INDEX.get(profileId)
        if slices is None or slices > gi["profile"]["slices"]:
            _fail(E.NVML_ERROR_INVALID_ARGUMENT)
        if sum(gi["cis"].values()) + slices > gi["profile"]["slices"]:
            _fail(E.NVML_ERROR_INSUFFICIENT_RESOURCES)
        ci_id = next(i for i in range(0, 16) if i not in gi["cis"])
        gi["cis"][ci_id] = slices
        return self._new_handle("ci", ("ci", gpu, gi_id, ci_id))

    def nvmlGpuInstanceGetComputeInstances(self, gpuInstance, profileId, computeInstancesRef, countRef):
        self._call("nvmlGpuInstanceGetComputeInstances", profileId)
        _kind, gpu, gi_id = self._lookup(gpuInstance, "gi")
        slices = CI_SLICES_BY_INDEX.get(profileId)
        found = sorted(i for i, s in gpu.gis[gi_id]["cis"].items() if s == slices)
        if len(computeInstancesRef) < len(found):
            self._set(countRef, len(found))
            _fail(E.NVML_ERROR_INSUFFICIENT_SIZE)
        for j, ci_id in enumerate(found):
            computeInstancesRef[j] = self._new_handle("ci", ("ci", gpu, gi_id, ci_id))
        self._set(countRef, len(found))
        return pynvml.NVML_SUCCESS

    def nvmlComputeInstanceGetInfo(self, computeInstance):
        self._call("nvmlComputeInstanceGetInfo")
        _kind, gpu, gi_id, ci_id = self._lookup(computeInstance, "ci")
        info = pynvml.c_nvmlComputeInstanceInfo_t()
        info.device = self._handle_of(gpu)
        info.id = ci_id
        info.profileId = {v: k for k, v in CI_SLICES_BY_INDEX.items()}[gpu.gis[gi_id]["cis"][ci_id]]
        return info

    def nvmlComputeInstanceDestroy(self, computeInstance):
        self._call("nvmlComputeInstanceDestroy")
        _kind, gpu, gi_id, ci_id = self._lookup(computeInstance, "ci")
        del gpu.gis[gi_id]["cis"][ci_id]
        return pynvml.NVML_SUCCESS
