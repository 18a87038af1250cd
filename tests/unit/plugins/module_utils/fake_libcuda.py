"""A libcuda stand-in for unit tests: the driver API entry points _cuda.py calls, emulated in Python.

Test equipment only (never shipped in plugins/).  Device memory is a bytearray per allocation;
kernels are Python functions registered by entry name with their parameter types, and
cuLaunchKernel really runs them: it reads each argument through the kernelParams pointer array
(as the driver does), then executes every thread of the grid, so the result in device memory is
whatever the copied host buffers add up to.  Nothing of the PTX is interpreted beyond finding
the ``.entry`` names the module defines.
"""
from __future__ import annotations

import array
import ctypes
import re

CUDA_SUCCESS = 0
NAMES = {
    0: b"CUDA_SUCCESS", 1: b"CUDA_ERROR_INVALID_VALUE", 2: b"CUDA_ERROR_OUT_OF_MEMORY",
    3: b"CUDA_ERROR_NOT_INITIALIZED", 100: b"CUDA_ERROR_NO_DEVICE", 101: b"CUDA_ERROR_INVALID_DEVICE",
    201: b"CUDA_ERROR_INVALID_CONTEXT", 218: b"CUDA_ERROR_INVALID_PTX", 400: b"CUDA_ERROR_INVALID_HANDLE",
    500: b"CUDA_ERROR_NOT_FOUND", 719: b"CUDA_ERROR_LAUNCH_FAILED", 802: b"CUDA_ERROR_SYSTEM_NOT_READY",
}
_CTYPE = {"u64": ctypes.c_uint64, "u32": ctypes.c_uint32, "s32": ctypes.c_int32}


def vector_add_kernel(cuda, grid, block, a_ptr, b_ptr, c_ptr, n):
    """What the PTX vectorAdd does, thread by thread: i = ctaid.x * ntid.x + tid.x; if i < n: C[i] = A[i] + B[i]."""
    a = array.array("f", bytes(cuda.view(a_ptr, 4 * n)))
    b = array.array("f", bytes(cuda.view(b_ptr, 4 * n)))
    c = array.array("f", bytes(cuda.view(c_ptr, 4 * n)))
    for ctaid in range(grid[0]):
        for tid in range(block[0]):
            i = ctaid * block[0] + tid
            if i >= n:  # setp.ge.s32 / @%p1 bra
                continue
            c[i] = a[i] + b[i]  # stored as float32, like add.f32
    cuda.view(c_ptr, 4 * n)[:] = c.tobytes()


class FakeCuda(object):
    def __init__(self, names=("NVIDIA H200",), corrupt=None, fail=None, cc=(9, 0)):
        self.names = list(names)
        self.corrupt = corrupt          # {index: value} written into C after the kernel ran
        self.fail = dict(fail or {})    # {entry point: CUresult} returned instead of running it
        self.cc = cc
        self.calls = []
        self.mem = {}
        self.next_addr = 0x7F0000000000
        self.kernels = {}
        self.modules = {}
        self.functions = {}
        self.retained = {}
        self.current = None
        self.inited = False
        self.launches = []
        self.register("vectorAdd", ("u64", "u64", "u64", "s32"), vector_add_kernel)

    def register(self, name, params, fn):
        self.kernels[name] = (params, fn)

    # -- helpers
    def _enter(self, name):
        self.calls.append(name)
        return self.fail.get(name, CUDA_SUCCESS)

    def view(self, ptr, nbytes):
        for base, buf in self.mem.items():
            if base <= ptr and ptr + nbytes <= base + len(buf):
                return memoryview(buf)[ptr - base:ptr - base + nbytes]
        raise AssertionError("device access outside any allocation: 0x%x+%d" % (ptr, nbytes))

    def _need_ctx(self):
        return CUDA_SUCCESS if self.current is not None else 201

    # -- driver API
    def cuInit(self, flags):
        rc = self._enter("cuInit")
        if rc == 0:
            assert flags == 0
            self.inited = True
        return rc

    def cuDriverGetVersion(self, p):
        rc = self._enter("cuDriverGetVersion")
        if rc == 0:
            p[0] = 13000
        return rc

    def cuDeviceGetCount(self, p):
        rc = self._enter("cuDeviceGetCount")
        if rc == 0:
            if not self.inited:
                return 3
            p[0] = len(self.names)
        return rc

    def cuDeviceGet(self, p, ordinal):
        rc = self._enter("cuDeviceGet")
        if rc == 0:
            if not 0 <= ordinal < len(self.names):
                return 101
            p[0] = ordinal
        return rc

    def cuDeviceGetName(self, buf, length, dev):
        rc = self._enter("cuDeviceGetName")
        if rc == 0:
            buf.value = self.names[dev].encode()[:length - 1]
        return rc

    def cuDeviceGetAttribute(self, p, attrib, dev):
        rc = self._enter("cuDeviceGetAttribute")
        if rc == 0:
            p[0] = {75: self.cc[0], 76: self.cc[1]}[attrib]
        return rc

    def cuDevicePrimaryCtxRetain(self, p, dev):
        rc = self._enter("cuDevicePrimaryCtxRetain")
        if rc == 0:
            self.retained[dev] = self.retained.get(dev, 0) + 1
            p[0] = 0x1000 + dev
        return rc

    def cuDevicePrimaryCtxRelease_v2(self, dev):
        rc = self._enter("cuDevicePrimaryCtxRelease_v2")
        if rc == 0:
            assert self.retained.get(dev, 0) > 0, "release without retain"
            self.retained[dev] -= 1
            if self.current == 0x1000 + dev and not self.retained[dev]:
                self.current = None
        return rc

    def cuCtxSetCurrent(self, ctx):
        rc = self._enter("cuCtxSetCurrent")
        if rc == 0:
            self.current = ctx
        return rc

    def cuModuleLoadData(self, p, image):
        rc = self._enter("cuModuleLoadData") or self._need_ctx()
        if rc == 0:
            text = image.value.decode("ascii")
            entries = re.findall(r"\.entry\s+(\w+)\s*\(", text)
            if not entries:
                return 218
            handle = 0x2000 + len(self.modules)
            self.modules[handle] = {"ptx": text, "entries": entries}
            p[0] = handle
        return rc

    def cuModuleLoadDataEx(self, p, image, nopts, opts, vals):
        self.calls.append("cuModuleLoadDataEx")
        options = dict((opts[i], vals[i]) for i in range(nopts))
        if 5 in options:
            log = b"ptxas application ptx input, line 7; fatal   : Parsing error near 'bogus'"
            ctypes.memmove(options[5], log + b"\0", min(len(log) + 1, options[6]))
        return 218

    def cuModuleGetFunction(self, p, module, name):
        rc = self._enter("cuModuleGetFunction")
        if rc == 0:
            name = name.decode()
            if module not in self.modules:
                return 400
            if name not in self.modules[module]["entries"] or name not in self.kernels:
                return 500
            handle = 0x3000 + len(self.functions)
            self.functions[handle] = name
            p[0] = handle
        return rc

    def cuModuleUnload(self, module):
        rc = self._enter("cuModuleUnload")
        if rc == 0:
            if module not in self.modules:
                return 400
            del self.modules[module]
        return rc

    def cuMemAlloc_v2(self, p, size):
        rc = self._enter("cuMemAlloc_v2") or self._need_ctx()
        if rc == 0:
            addr = self.next_addr
            self.next_addr += (size + 0xFFF) & ~0xFFF
            self.mem[addr] = bytearray(size)
            p[0] = addr
        return rc

    def cuMemFree_v2(self, ptr):
        rc = self._enter("cuMemFree_v2")
        if rc == 0:
            if ptr not in self.mem:
                return 1
            del self.mem[ptr]
        return rc

    def cuMemcpyHtoD_v2(self, dst, src, nbytes):
        rc = self._enter("cuMemcpyHtoD_v2")
        if rc == 0:
            self.view(dst, nbytes)[:] = ctypes.string_at(ctypes.addressof(src), nbytes)
        return rc

    def cuMemcpyDtoH_v2(self, dst, src, nbytes):
        rc = self._enter("cuMemcpyDtoH_v2")
        if rc == 0:
            ctypes.memmove(dst, bytes(self.view(src, nbytes)), nbytes)
        return rc

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        rc = self._enter("cuLaunchKernel") or self._need_ctx()
        if rc:
            return rc
        if f not in self.functions:
            return 400
        types, fn = self.kernels[self.functions[f]]
        # the driver reads each argument through the kernelParams array of pointers
        args = [_CTYPE[t].from_address(params[i]).value for i, t in enumerate(types)]
        self.launches.append({"grid": (gx, gy, gz), "block": (bx, by, bz), "args": args})
        fn(self, (gx, gy, gz), (bx, by, bz), *args)
        if self.corrupt:
            c_ptr, n = args[2], args[3]
            c = array.array("f", bytes(self.view(c_ptr, 4 * n)))
            for i, v in self.corrupt.items():
                c[i] = v
            self.view(c_ptr, 4 * n)[:] = c.tobytes()
        return CUDA_SUCCESS

    def cuCtxSynchronize(self):
        return self._enter("cuCtxSynchronize") or self._need_ctx()

    def cuGetErrorName(self, code, p):
        self.calls.append("cuGetErrorName")
        if code not in NAMES:
            return 1
        p[0] = NAMES[code]
        return CUDA_SUCCESS


class FakeCudaNoErrorName(FakeCuda):
    """An old or odd libcuda without cuGetErrorName: names come from _cuda's own table."""

    def __getattribute__(self, name):
        if name == "cuGetErrorName":
            raise AttributeError(name)
        return object.__getattribute__(self, name)
