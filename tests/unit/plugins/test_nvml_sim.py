"""The NVML simulator is only worth what its likeness to pynvml is worth: its functions have
pynvml's own signatures, and it fails wrong orders of calls the way the library does."""
from __future__ import annotations

import ctypes
import inspect
import os
import sys

import pynvml
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import nvml_sim  # noqa: E402


def sim(**kw):
    return nvml_sim.NvmlSim([dict({"table": nvml_sim.load_table("h200-141gb")}, **kw)])


def test_every_simulated_function_has_pynvmls_signature():
    names = [n for n in vars(nvml_sim.NvmlSim) if n.startswith("nvml")]
    assert len(names) >= 20
    for name in names:
        ours = inspect.signature(getattr(nvml_sim.NvmlSim, name))
        params = list(ours.parameters.values())[1:]  # drop self
        theirs = inspect.signature(getattr(pynvml, name))
        assert [(p.name, p.default) for p in params] == [(p.name, p.default) for p in theirs.parameters.values()], name


def test_functions_it_does_not_model_are_refused_not_faked():
    with pytest.raises(AttributeError, match="does not model"):
        sim().nvmlDeviceGetPowerUsage  # noqa: B018
    assert sim().NVML_DEVICE_MIG_ENABLE == pynvml.NVML_DEVICE_MIG_ENABLE  # constants are pynvml's


def _code(exc_info):
    return exc_info.value.value


def test_calls_before_init_fail_uninitialized():
    s = sim()
    with pytest.raises(pynvml.NVMLError) as exc:
        s.nvmlDeviceGetCount()
    assert _code(exc) == pynvml.NVML_ERROR_UNINITIALIZED


def _profile(s, handle, index):
    return s.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)


def _placement(start, size):
    p = pynvml.c_nvmlGpuInstancePlacement_t()
    p.start, p.size = start, size
    return p


def test_wrong_orders_fail_like_the_library():
    s = sim()
    s.nvmlInit()
    h = s.nvmlDeviceGetHandleByIndex(0)
    one_g = _profile(s, h, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    # instances before MIG mode is on
    with pytest.raises(pynvml.NVMLError) as exc:
        s.nvmlDeviceCreateGpuInstanceWithPlacement(h, one_g.id, _placement(0, 1))
    assert _code(exc) == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert s.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_ENABLE) == pynvml.NVML_SUCCESS
    gi = s.nvmlDeviceCreateGpuInstanceWithPlacement(h, one_g.id, _placement(0, 1))
    assert isinstance(gi, pynvml.c_nvmlGpuInstance_t)
    # a placement the profile does not have, and an overlapping one
    with pytest.raises(pynvml.NVMLError) as exc:
        s.nvmlDeviceCreateGpuInstanceWithPlacement(h, one_g.id, _placement(7, 1))
    assert _code(exc) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    three_g = _profile(s, h, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    with pytest.raises(pynvml.NVMLError) as exc:
        s.nvmlDeviceCreateGpuInstanceWithPlacement(h, three_g.id, _placement(0, 4))
    assert _code(exc) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    ci_profile = s.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
                                                                pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
    ci = s.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile.id)
    with pytest.raises(pynvml.NVMLError) as exc:  # a second 1-slice CI in a 1-slice GI
        s.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile.id)
    assert _code(exc) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    # MIG mode off while instances exist; a GI destroyed before its CI
    with pytest.raises(pynvml.NVMLError) as exc:
        s.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_DISABLE)
    assert _code(exc) == pynvml.NVML_ERROR_IN_USE
    with pytest.raises(pynvml.NVMLError) as exc:
        s.nvmlGpuInstanceDestroy(gi)
    assert _code(exc) == pynvml.NVML_ERROR_IN_USE
    s.nvmlComputeInstanceDestroy(ci)
    s.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(pynvml.NVMLError) as exc:  # a stale handle
        s.nvmlGpuInstanceGetInfo(gi)
    assert _code(exc) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert s.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_DISABLE) == pynvml.NVML_SUCCESS
    assert [c[0] for c in s.writes()] == [  # attempts are recorded too, failed or not
        "nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlDeviceSetMigMode", "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlGpuInstanceCreateComputeInstance",
        "nvmlGpuInstanceCreateComputeInstance", "nvmlDeviceSetMigMode", "nvmlGpuInstanceDestroy",
        "nvmlComputeInstanceDestroy", "nvmlGpuInstanceDestroy", "nvmlDeviceSetMigMode"]


def test_pending_mode_until_a_reset_that_is_not_blocked():
    s = sim(needs_reset=True, reset_blocked=True)
    s.nvmlInit()
    h = s.nvmlDeviceGetHandleByIndex(0)
    assert s.nvmlDeviceSetMigMode(h, 1) == pynvml.NVML_ERROR_IN_USE  # activation status
    assert s.nvmlDeviceGetMigMode(h) == [0, 1]
    assert s.reset(0)[0] is False and s.nvmlDeviceGetMigMode(h) == [0, 1]
    s._gpus[0].reset_blocked = False
    assert s.reset(0)[0] is True and s.nvmlDeviceGetMigMode(h) == [1, 1]


def test_placements_are_the_captured_ones_with_pynvmls_two_call_shape():
    s = sim()
    s.nvmlInit()
    h = s.nvmlDeviceGetHandleByIndex(0)
    info = _profile(s, h, pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE)
    count = ctypes.c_uint(0)
    s.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, None, ctypes.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    s.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, array, ctypes.byref(count))
    # captured: GPU 0 Profile ID 14 Placements: {0,2,4}:2
    assert info.id == 14 and [(a.start, a.size) for a in array] == [(0, 2), (2, 2), (4, 2)]
    small = (pynvml.c_nvmlGpuInstancePlacement_t * 1)()
    count = ctypes.c_uint(1)
    with pytest.raises(pynvml.NVMLError) as exc:
        s.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, small, ctypes.byref(count))
    assert _code(exc) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE and count.value == 3


def test_non_mig_gpu_answers_not_supported():
    s = nvml_sim.NvmlSim([{"table": nvml_sim.load_table("l40s-48gb")}])
    s.nvmlInit()
    h = s.nvmlDeviceGetHandleByIndex(0)
    for call in (lambda: s.nvmlDeviceGetMigMode(h), lambda: s.nvmlDeviceSetMigMode(h, 1),
                 lambda: s.nvmlDeviceGetGpuInstanceProfileInfo(h, 0)):
        with pytest.raises(pynvml.NVMLError) as exc:
            call()
        assert _code(exc) == pynvml.NVML_ERROR_NOT_SUPPORTED
