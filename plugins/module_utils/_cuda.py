# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""A real CUDA check through the driver API: vectorAdd from hand-written PTX.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

Standard library only (ctypes over ``libcuda.so.1``), Python 3.8+, and it
imports nothing from the collection: the same file is copied into a container
image and run inside pods as ``python3 _cuda.py [--elements N] [--device all|0] [--hold S]``.

Per device: retain the primary context, JIT-load a PTX ``vectorAdd`` kernel
(``.target sm_50``, so the driver compiles it for any newer GPU), copy two
float32 vectors to the device, launch ``C[i] = A[i] + B[i]``, copy C back and
compare on the host, then free everything.  This is what the GPU Operator's
CUDA validator workload proves, without a CUDA toolkit, an image or a pod.
``--hold S`` keeps the context and the buffers for S seconds after a good (or
wrong) result, so that a client stays visible, e.g. to an MPS control daemon.

``check(lib=...)`` takes any object with libcuda's function names, so unit
tests drive the exact call sequence with a Python stand-in.
"""
from __future__ import annotations

import array
import ctypes
import json
import sys
import time

try:
    from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import HostError
except ImportError:  # run alone (python3 _cuda.py, as tests/lab/h200/mps.sh does): a plain stand-in for the family
    HostError = RuntimeError

KERNEL_NAME = "vectorAdd"
BLOCK = 256
DEFAULT_ELEMENTS = 50000

# extern "C" __global__ void vectorAdd(const float *A, const float *B, float *C, int n)
# { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) C[i] = A[i] + B[i]; }
PTX = r"""//
// gpuops.nvidia vectorAdd: C[i] = A[i] + B[i] (float32), hand-written PTX
//
.version 7.0
.target sm_50
.address_size 64

.visible .entry vectorAdd(
    .param .u64 vectorAdd_param_0,
    .param .u64 vectorAdd_param_1,
    .param .u64 vectorAdd_param_2,
    .param .u32 vectorAdd_param_3
)
{
    .reg .pred  %p<2>;
    .reg .f32  %f<4>;
    .reg .b32  %r<6>;
    .reg .b64  %rd<11>;

    ld.param.u64  %rd1, [vectorAdd_param_0];
    ld.param.u64  %rd2, [vectorAdd_param_1];
    ld.param.u64  %rd3, [vectorAdd_param_2];
    ld.param.u32  %r2, [vectorAdd_param_3];
    mov.u32  %r3, %ctaid.x;
    mov.u32  %r4, %ntid.x;
    mov.u32  %r5, %tid.x;
    mad.lo.s32  %r1, %r3, %r4, %r5;
    setp.ge.s32  %p1, %r1, %r2;
    @%p1 bra  $L__BB0_2;

    cvta.to.global.u64  %rd4, %rd1;
    mul.wide.s32  %rd5, %r1, 4;
    add.s64  %rd6, %rd4, %rd5;
    cvta.to.global.u64  %rd7, %rd2;
    add.s64  %rd8, %rd7, %rd5;
    ld.global.f32  %f1, [%rd8];
    ld.global.f32  %f2, [%rd6];
    add.f32  %f3, %f2, %f1;
    cvta.to.global.u64  %rd9, %rd3;
    add.s64  %rd10, %rd9, %rd5;
    st.global.f32  [%rd10], %f3;

$L__BB0_2:
    ret;
}
"""

LIBRARY_CANDIDATES = (
    "libcuda.so.1",
    "/usr/local/nvidia/lib64/libcuda.so.1",
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "/usr/lib/aarch64-linux-gnu/libcuda.so.1",
    "/usr/lib64/libcuda.so.1",
    "/usr/lib/wsl/lib/libcuda.so.1",
)

# CUresult names for when cuGetErrorName itself is unavailable (cuda.h)
ERROR_NAMES = {
    0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED", 4: "CUDA_ERROR_DEINITIALIZED", 34: "CUDA_ERROR_STUB_LIBRARY",
    46: "CUDA_ERROR_DEVICE_UNAVAILABLE", 100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
    102: "CUDA_ERROR_DEVICE_NOT_LICENSED", 200: "CUDA_ERROR_INVALID_IMAGE", 201: "CUDA_ERROR_INVALID_CONTEXT",
    209: "CUDA_ERROR_NO_BINARY_FOR_GPU", 214: "CUDA_ERROR_ECC_UNCORRECTABLE", 218: "CUDA_ERROR_INVALID_PTX",
    221: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", 222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
    300: "CUDA_ERROR_INVALID_SOURCE", 304: "CUDA_ERROR_OPERATING_SYSTEM", 400: "CUDA_ERROR_INVALID_HANDLE",
    500: "CUDA_ERROR_NOT_FOUND", 700: "CUDA_ERROR_ILLEGAL_ADDRESS", 701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    702: "CUDA_ERROR_LAUNCH_TIMEOUT", 719: "CUDA_ERROR_LAUNCH_FAILED", 800: "CUDA_ERROR_NOT_PERMITTED",
    801: "CUDA_ERROR_NOT_SUPPORTED", 802: "CUDA_ERROR_SYSTEM_NOT_READY", 803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", 999: "CUDA_ERROR_UNKNOWN",
}

# what an operator should look at, by CUresult name
HINTS = {
    "CUDA_ERROR_NO_DEVICE": "no CUDA-capable GPU visible (CUDA_VISIBLE_DEVICES, device nodes, driver loaded?)",
    "CUDA_ERROR_SYSTEM_NOT_READY": "NVSwitch system: start nvidia-fabricmanager (same version as the driver)",
    "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH": "libcuda and the kernel module differ in version: reload the driver or reboot",
    "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE": "a CUDA forward-compat libcuda is first in the library path on a GPU without compat support",
    "CUDA_ERROR_STUB_LIBRARY": "the CUDA toolkit's stub libcuda.so was loaded instead of the driver's",
    "CUDA_ERROR_DEVICE_UNAVAILABLE": "the GPU is in exclusive-process compute mode and busy, or unavailable",
    "CUDA_ERROR_OUT_OF_MEMORY": "GPU memory is exhausted by other processes",
    "CUDA_ERROR_ECC_UNCORRECTABLE": "uncorrectable ECC error: check nvidia-smi -q -d ECC and reset the GPU",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "the driver is older than CUDA 11.0 (PTX ISA 7.0)",
    "CUDA_ERROR_OPERATING_SYSTEM": "the driver could not open the device nodes (permissions, cgroup device rules)",
}

_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
_CU_JIT_ERROR_LOG_BUFFER = 5
_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6

_P = ctypes.c_void_p
_I = ctypes.c_int
_U = ctypes.c_uint
# argument types of the real libcuda entry points (CUdeviceptr is 64-bit on 64-bit hosts)
SIGNATURES = {
    "cuInit": (_U,),
    "cuDriverGetVersion": (_P,),
    "cuDeviceGetCount": (_P,),
    "cuDeviceGet": (_P, _I),
    "cuDeviceGetName": (_P, _I, _I),
    "cuDeviceGetAttribute": (_P, _I, _I),
    "cuDevicePrimaryCtxRetain": (_P, _I),
    "cuDevicePrimaryCtxRelease_v2": (_I,),
    "cuDevicePrimaryCtxRelease": (_I,),
    "cuCtxSetCurrent": (_P,),
    "cuCtxSynchronize": (),
    "cuModuleLoadData": (_P, _P),
    "cuModuleLoadDataEx": (_P, _P, _U, _P, _P),
    "cuModuleGetFunction": (_P, _P, ctypes.c_char_p),
    "cuModuleUnload": (_P,),
    "cuMemAlloc_v2": (_P, ctypes.c_size_t),
    "cuMemFree_v2": (ctypes.c_uint64,),
    "cuMemcpyHtoD_v2": (ctypes.c_uint64, _P, ctypes.c_size_t),
    "cuMemcpyDtoH_v2": (_P, ctypes.c_uint64, ctypes.c_size_t),
    "cuLaunchKernel": (_P, _U, _U, _U, _U, _U, _U, _U, _P, _P, _P),
    "cuGetErrorName": (_I, _P),
}


class CudaError(HostError):
    """A driver API call returned something other than CUDA_SUCCESS."""

    def __init__(self, call, code, name, log=None):
        super().__init__("%s failed: %s (%d)" % (call, name, code))
        self.call = call
        self.code = code
        self.name = name
        self.log = log


def load_library(candidates=LIBRARY_CANDIDATES):
    """(lib, path, error): libcuda.so.1 through the loader (ldconfig), then well-known paths."""
    errors = []
    for candidate in candidates:
        try:
            return ctypes.CDLL(candidate), candidate, None
        except OSError as exc:
            errors.append(str(exc))
    return None, None, "libcuda.so.1 cannot be loaded: %s" % "; ".join(errors[:2])


class Driver(object):
    """Typed access to the driver API entry points of ``lib`` (a ctypes CDLL or a stand-in)."""

    def __init__(self, lib):
        self.lib = lib
        self._fns = {}

    def has(self, name):
        return self._fn(name) is not None

    def _fn(self, name):
        if name not in self._fns:
            try:
                fn = getattr(self.lib, name)
            except AttributeError:
                fn = None
            if fn is not None and hasattr(fn, "argtypes") and name in SIGNATURES:
                fn.argtypes = list(SIGNATURES[name])
                fn.restype = ctypes.c_int
            self._fns[name] = fn
        return self._fns[name]

    def error_name(self, code):
        fn = self._fn("cuGetErrorName")
        if fn is not None:
            text = ctypes.c_char_p()
            try:
                if fn(int(code), ctypes.pointer(text)) == 0 and text.value:
                    return text.value.decode("ascii", "replace")
            except Exception:  # a broken library must not hide the original error
                pass
        return ERROR_NAMES.get(int(code), "CUresult %d" % int(code))

    def call(self, name, *args):
        fn = self._fn(name)
        if fn is None:
            raise CudaError(name, -1, "symbol %s not found in libcuda" % name)
        rc = fn(*args)
        if rc != 0:
            raise CudaError(name, int(rc), self.error_name(rc))

    def call_any(self, names, *args):
        """The first entry point of ``names`` that exists (``_v2`` first, the original name as fallback)."""
        for name in names:
            if self.has(name):
                return self.call(name, *args)
        raise CudaError(names[0], -1, "symbol %s not found in libcuda" % names[0])


def host_vectors(n):
    """A, B as float32 arrays with exactly representable values (their sums are exact too)."""
    a = array.array("f", [float(i % 4096) * 0.5 for i in range(n)])
    b = array.array("f", [float(i % 1000) * 0.25 for i in range(n)])
    return a, b


def _as_ctypes(arr):
    return (ctypes.c_float * len(arr)).from_buffer(arr)


def _load_module(drv, ptx):
    """cuModuleLoadData; on failure, load once more through cuModuleLoadDataEx to get the JIT log."""
    module = ctypes.c_void_p()
    image = ctypes.create_string_buffer(ptx.encode("ascii"))
    try:
        drv.call("cuModuleLoadData", ctypes.pointer(module), image)
        return module.value
    except CudaError as exc:
        if drv.has("cuModuleLoadDataEx"):
            size = 8192
            log = ctypes.create_string_buffer(size)
            opts = (ctypes.c_int * 2)(_CU_JIT_ERROR_LOG_BUFFER, _CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
            vals = (ctypes.c_void_p * 2)(ctypes.cast(log, ctypes.c_void_p).value, size)
            try:
                drv.call("cuModuleLoadDataEx", ctypes.pointer(ctypes.c_void_p()), image, 2, opts, vals)
            except CudaError:
                pass
            exc.log = log.value.decode("utf-8", "replace").strip() or None
        raise


def _device_name(drv, dev):
    buf = ctypes.create_string_buffer(256)
    drv.call("cuDeviceGetName", buf, 256, dev)
    return buf.value.decode("utf-8", "replace")


def _compute_capability(drv, dev):
    if not drv.has("cuDeviceGetAttribute"):
        return None
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    try:
        drv.call("cuDeviceGetAttribute", ctypes.pointer(major), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        drv.call("cuDeviceGetAttribute", ctypes.pointer(minor), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    except CudaError:
        return None
    return "%d.%d" % (major.value, minor.value)


def vector_add_device(drv, ordinal, elements=DEFAULT_ELEMENTS, ptx=PTX, hold=0.0, on_hold=None):
    """Run vectorAdd on one device; a dict, never raises for CUDA errors.

    ``hold``: seconds to keep the context and the device buffers once the result is checked (not
    after a CUDA error), before anything is freed; ``on_hold(res)`` is called first."""
    start = time.monotonic()
    res = {"index": ordinal, "name": None, "compute_capability": None, "elements": elements,
           "mismatches": None, "error": None, "call": None, "seconds": None}
    nbytes = 4 * elements
    ctx_dev = None
    module = None
    dptrs = []
    try:
        dev = ctypes.c_int(0)
        drv.call("cuDeviceGet", ctypes.pointer(dev), ordinal)
        dev = dev.value
        res["name"] = _device_name(drv, dev)
        res["compute_capability"] = _compute_capability(drv, dev)
        ctx = ctypes.c_void_p()
        drv.call("cuDevicePrimaryCtxRetain", ctypes.pointer(ctx), dev)
        ctx_dev = dev
        drv.call("cuCtxSetCurrent", ctx.value)
        module = _load_module(drv, ptx)
        func = ctypes.c_void_p()
        drv.call("cuModuleGetFunction", ctypes.pointer(func), module, KERNEL_NAME.encode("ascii"))
        for _buffer in range(3):
            ptr = ctypes.c_uint64(0)
            drv.call("cuMemAlloc_v2", ctypes.pointer(ptr), nbytes)
            dptrs.append(ptr.value)
        a, b = host_vectors(elements)
        c = array.array("f", bytes(nbytes))
        drv.call("cuMemcpyHtoD_v2", dptrs[0], _as_ctypes(a), nbytes)
        drv.call("cuMemcpyHtoD_v2", dptrs[1], _as_ctypes(b), nbytes)
        args = [ctypes.c_uint64(dptrs[0]), ctypes.c_uint64(dptrs[1]), ctypes.c_uint64(dptrs[2]),
                ctypes.c_int32(elements)]
        params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(arg) for arg in args])
        grid = (elements + BLOCK - 1) // BLOCK
        drv.call("cuLaunchKernel", func.value, grid, 1, 1, BLOCK, 1, 1, 0, None, params, None)
        drv.call("cuCtxSynchronize")
        drv.call("cuMemcpyDtoH_v2", _as_ctypes(c), dptrs[2], nbytes)
        # the host's own float32 sums: exact for these inputs, so any difference is a wrong result
        expected = array.array("f", [x + y for x, y in zip(a, b)])
        res["mismatches"] = sum(1 for got, want in zip(c, expected) if got != want)
        if res["mismatches"]:
            first = next(i for i in range(elements) if c[i] != expected[i])
            res["first_mismatch"] = {"index": first, "got": c[first], "expected": expected[first]}
        if hold > 0:
            if on_hold is not None:
                on_hold(res)
            time.sleep(hold)
            res["held_seconds"] = hold
    except CudaError as exc:
        res["error"] = exc.name
        res["code"] = exc.code
        res["call"] = exc.call
        if exc.log:
            res["jit_log"] = exc.log
        if exc.name in HINTS:
            res["hint"] = HINTS[exc.name]
    finally:
        cleanup = []
        for ptr in dptrs:
            cleanup.append(("cuMemFree_v2", (ptr,)))
        if module is not None:
            cleanup.append(("cuModuleUnload", (module,)))
        for name, args in cleanup:
            try:
                drv.call(name, *args)
            except CudaError as exc:
                res.setdefault("cleanup_errors", []).append("%s: %s" % (name, exc.name))
        if ctx_dev is not None:
            try:
                drv.call_any(("cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"), ctx_dev)
            except CudaError as exc:
                res.setdefault("cleanup_errors", []).append("cuDevicePrimaryCtxRelease: %s" % exc.name)
        res["seconds"] = round(time.monotonic() - start, 4)
    return res


def device_ok(res):
    return res["error"] is None and res["mismatches"] == 0


def check(elements=DEFAULT_ELEMENTS, device="all", lib=None, ptx=PTX, hold=0.0, on_hold=None):
    """vectorAdd on every (or one) CUDA device (``hold``/``on_hold``: see vector_add_device).

    Returns ``{ok, library, driver_version, device_count, devices: [per device], error, call, seconds}``;
    a per-device dict has ``index, name, compute_capability, elements, mismatches, error, call, seconds``
    (``error`` is the CUresult name from cuGetErrorName).  ``lib``: a ctypes CDLL or stand-in; loaded when None.
    """
    start = time.monotonic()
    out = {"ok": False, "library": None, "driver_version": None, "device_count": None, "devices": [],
           "elements": elements, "error": None, "call": None, "seconds": None}
    try:
        if elements < 1:
            raise ValueError("elements must be at least 1")
        if hold < 0:
            raise ValueError("hold must not be negative")
        if lib is None:
            lib, out["library"], err = load_library()
            if lib is None:
                out["error"] = err
                return out
        drv = Driver(lib)
        try:
            drv.call("cuInit", 0)
            if drv.has("cuDriverGetVersion"):
                ver = ctypes.c_int(0)
                drv.call("cuDriverGetVersion", ctypes.pointer(ver))
                out["driver_version"] = "%d.%d" % (ver.value // 1000, (ver.value % 1000) // 10)
            count = ctypes.c_int(0)
            drv.call("cuDeviceGetCount", ctypes.pointer(count))
            out["device_count"] = count.value
        except CudaError as exc:
            out["error"], out["call"] = exc.name, exc.call
            if exc.name in HINTS:
                out["hint"] = HINTS[exc.name]
            return out
        if out["device_count"] == 0:
            out["error"] = "CUDA_ERROR_NO_DEVICE"
            out["call"] = "cuDeviceGetCount"
            out["hint"] = HINTS["CUDA_ERROR_NO_DEVICE"]
            return out
        if device in (None, "all"):
            ordinals = list(range(out["device_count"]))
        else:
            ordinal = int(device)
            if not 0 <= ordinal < out["device_count"]:
                out["error"] = "device %s requested, %s present" % (ordinal, out["device_count"])
                return out
            ordinals = [ordinal]
        out["devices"] = [vector_add_device(drv, i, elements, ptx, hold, on_hold) for i in ordinals]
        out["ok"] = all(device_ok(d) for d in out["devices"])
        return out
    finally:
        out["seconds"] = round(time.monotonic() - start, 4)


def describe(res):
    """One line per device, e.g. ``vectorAdd device 0 (NVIDIA H200): 50000 elements, 0 mismatches``."""
    head = "vectorAdd device %s (%s)" % (res["index"], res["name"] or "?")
    if res["error"]:
        return "%s: FAILED %s in %s" % (head, res["error"], res["call"])
    return "%s: %d elements, %d mismatches" % (head, res["elements"], res["mismatches"])


def main(argv=None):
    import argparse  # pylint: disable=import-outside-toplevel

    parser = argparse.ArgumentParser(description="CUDA vectorAdd check through the driver API (libcuda.so.1)")
    parser.add_argument("--elements", type=int, default=DEFAULT_ELEMENTS, help="vector length (default %(default)s)")
    parser.add_argument("--device", default="all", help="'all' or a CUDA device ordinal (default %(default)s)")
    parser.add_argument("--hold", type=float, default=0.0, metavar="SECONDS",
                        help="keep each device's context for SECONDS after its result is checked, so the process "
                             "stays visible as a client (e.g. of MPS); a line on stderr says when (default 0)")
    args = parser.parse_args(argv)
    if args.device != "all" and not (args.device.isascii() and args.device.isdigit()):
        parser.error("--device must be 'all' or a device ordinal")
    if not 0 <= args.hold <= 86400:
        parser.error("--hold must be between 0 and 86400 seconds")

    def holding(dev):
        sys.stderr.write("%s; holding the context for %g s\n" % (describe(dev), args.hold))
        sys.stderr.flush()

    res = check(elements=args.elements, device=args.device, hold=args.hold, on_hold=holding)
    lines = [describe(dev) for dev in res["devices"]]
    if not res["devices"]:
        lines.append("vectorAdd: FAILED %s%s" % (res["error"], " in %s" % res["call"] if res["call"] else ""))
    lines.append(json.dumps(res, sort_keys=True))
    # a module_utils file: no print()/sys.exit() (ansible-test's pylint forbids them there)
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
