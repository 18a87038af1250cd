"""The CUDA driver-API vectorAdd check: PTX shape, call sequence, results and errors against a fake libcuda."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils import _cuda
from fake_libcuda import FakeCuda, FakeCudaNoErrorName

CUDA_PY = _cuda.__file__


# -- the PTX ------------------------------------------------------------------------------------

def _body(ptx):
    return ptx[ptx.index("{") + 1:ptx.rindex("}")]


def test_ptx_header_targets_any_gpu_through_jit():
    lines = [ln.strip() for ln in _cuda.PTX.splitlines() if ln.strip() and not ln.strip().startswith("//")]
    assert lines[:3] == [".version 7.0", ".target sm_50", ".address_size 64"]


def test_ptx_entry_and_params():
    m = re.search(r"\.visible\s+\.entry\s+(\w+)\s*\(([^)]*)\)", _cuda.PTX)
    assert m and m.group(1) == _cuda.KERNEL_NAME == "vectorAdd"
    params = [p.strip() for p in m.group(2).split(",")]
    assert params == [".param .u64 vectorAdd_param_0", ".param .u64 vectorAdd_param_1",
                      ".param .u64 vectorAdd_param_2", ".param .u32 vectorAdd_param_3"]
    assert _cuda.PTX.count(".entry") == 1


def test_ptx_braces_and_parens_balance():
    for open_, close in ("{}", "()", "[]"):
        depth = 0
        for ch in _cuda.PTX:
            depth += (ch == open_) - (ch == close)
            assert depth >= 0
        assert depth == 0, open_ + close
    assert _cuda.PTX.count("{") == 1


def test_ptx_instructions_and_registers():
    body = _body(_cuda.PTX)
    statements = [ln.strip() for ln in body.splitlines() if ln.strip()]
    decls = {}
    for st in statements:
        m = re.match(r"\.reg\s+\.(\w+)\s+%(\w+)<(\d+)>;$", st)
        if m:
            decls[m.group(2)] = int(m.group(3))
    assert decls == {"p": 2, "f": 4, "r": 6, "rd": 11}
    labels = [st[:-1] for st in statements if st.endswith(":")]
    assert labels == ["$L__BB0_2"]
    for st in statements:
        if st.endswith(":"):
            continue
        assert st.endswith(";"), st
        for reg, num in re.findall(r"%(p|f|rd|r)(\d+)\b", st):
            assert int(num) < decls[reg], st  # every register used is declared
    ops = [re.split(r"[\s;]+", re.sub(r"^@%p\d+\s+", "", st))[0]
           for st in statements if not st.startswith(".reg") and not st.endswith(":")]
    for needed in ("ld.param.u64", "ld.param.u32", "mov.u32", "mad.lo.s32", "setp.ge.s32", "bra", "cvta.to.global.u64",
                   "mul.wide.s32", "add.s64", "ld.global.f32", "add.f32", "st.global.f32", "ret"):
        assert needed in ops, needed
    assert re.search(r"mov\.u32\s+%r3, %ctaid\.x;", body) and "%ntid.x" in body and "%tid.x" in body
    assert re.search(r"mad\.lo\.s32\s+%r1, %r3, %r4, %r5;", body)
    assert re.search(r"setp\.ge\.s32\s+%p1, %r1, %r2;", body)
    assert re.search(r"@%p1 bra\s+\$L__BB0_2;", body)
    assert re.search(r"mul\.wide\.s32\s+%rd5, %r1, 4;", body)
    # each parameter loaded exactly once, in order
    assert re.findall(r"\[vectorAdd_param_(\d)\]", body) == ["0", "1", "2", "3"]


# -- the call sequence ----------------------------------------------------------------------------

def test_vector_add_runs_the_driver_api_in_order_and_frees_everything():
    fake = FakeCuda()
    res = _cuda.check(elements=1000, lib=fake)
    assert res["ok"] is True and res["error"] is None
    assert res["driver_version"] == "13.0" and res["device_count"] == 1
    dev = res["devices"][0]
    assert dev["index"] == 0 and dev["name"] == "NVIDIA H200" and dev["compute_capability"] == "9.0"
    assert dev["elements"] == 1000 and dev["mismatches"] == 0 and dev["error"] is None and dev["seconds"] >= 0
    calls = [c for c in fake.calls if c not in ("cuDeviceGetAttribute", "cuDriverGetVersion")]
    assert calls == [
        "cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent",
        "cuModuleLoadData", "cuModuleGetFunction", "cuMemAlloc_v2", "cuMemAlloc_v2", "cuMemAlloc_v2",
        "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2", "cuLaunchKernel", "cuCtxSynchronize", "cuMemcpyDtoH_v2",
        "cuMemFree_v2", "cuMemFree_v2", "cuMemFree_v2", "cuModuleUnload", "cuDevicePrimaryCtxRelease_v2"]
    # a grid that covers n with 256-thread blocks; the bound check handles the ragged last block
    assert fake.launches[0]["grid"] == (4, 1, 1) and fake.launches[0]["block"] == (256, 1, 1)
    assert fake.launches[0]["args"][3] == 1000
    assert fake.mem == {} and fake.modules == {} and fake.retained == {0: 0}


def test_every_called_entry_point_is_typed_for_the_real_library():
    fake = FakeCuda()
    _cuda.check(elements=10, lib=fake)
    assert set(fake.calls) <= set(_cuda.SIGNATURES)
    assert all(name in _cuda.SIGNATURES for name in ("cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoD_v2",
                                                     "cuMemcpyDtoH_v2", "cuDevicePrimaryCtxRelease_v2"))
    assert _cuda.SIGNATURES["cuMemFree_v2"][0] is __import__("ctypes").c_uint64


def test_result_is_really_computed_by_the_kernel():
    """The fake adds what was copied to the device: skip the launch and every element is wrong."""
    fake = FakeCuda()
    fake.register("vectorAdd", ("u64", "u64", "u64", "s32"), lambda *a: None)
    dev = _cuda.check(elements=300, lib=fake)["devices"][0]
    a, b = _cuda.host_vectors(300)
    expected_nonzero = sum(1 for x, y in zip(a, b) if x + y != 0)
    assert dev["mismatches"] == expected_nonzero and dev["error"] is None


def test_all_devices_and_one_device():
    fake = FakeCuda(names=("NVIDIA H200", "NVIDIA H200", "NVIDIA H100 80GB HBM3"))
    res = _cuda.check(elements=512, lib=fake)
    assert res["ok"] and [d["index"] for d in res["devices"]] == [0, 1, 2]
    assert res["devices"][2]["name"] == "NVIDIA H100 80GB HBM3"
    fake = FakeCuda(names=("A", "B"))
    res = _cuda.check(elements=1, device="1", lib=fake)
    assert res["ok"] and [d["index"] for d in res["devices"]] == [1] and res["devices"][0]["name"] == "B"
    res = _cuda.check(elements=1, device="2", lib=FakeCuda(names=("A", "B")))
    assert res["ok"] is False and res["error"] == "device 2 requested, 2 present"


def test_mismatch_detection():
    fake = FakeCuda(corrupt={7: 123.5, 999: -1.0})
    res = _cuda.check(elements=1000, lib=fake)
    dev = res["devices"][0]
    assert res["ok"] is False and dev["error"] is None and dev["mismatches"] == 2
    assert dev["first_mismatch"] == {"index": 7, "got": 123.5, "expected": 7 * 0.5 + 7 * 0.25}
    assert _cuda.describe(dev) == "vectorAdd device 0 (NVIDIA H200): 1000 elements, 2 mismatches"
    assert fake.mem == {}


def test_error_name_from_cugeterrorname_and_cleanup_after_failure():
    fake = FakeCuda(fail={"cuLaunchKernel": 719})
    res = _cuda.check(elements=100, lib=fake)
    dev = res["devices"][0]
    assert res["ok"] is False
    assert dev["error"] == "CUDA_ERROR_LAUNCH_FAILED" and dev["call"] == "cuLaunchKernel" and dev["code"] == 719
    assert "cuGetErrorName" in fake.calls
    assert fake.mem == {} and fake.modules == {} and fake.retained == {0: 0}
    assert _cuda.describe(dev) == "vectorAdd device 0 (NVIDIA H200): FAILED CUDA_ERROR_LAUNCH_FAILED in cuLaunchKernel"


def test_error_name_without_cugeterrorname_uses_the_table():
    res = _cuda.check(elements=10, lib=FakeCudaNoErrorName(fail={"cuDevicePrimaryCtxRetain": 802}))
    dev = res["devices"][0]
    assert dev["error"] == "CUDA_ERROR_SYSTEM_NOT_READY" and "fabricmanager" in dev["hint"]
    res = _cuda.check(elements=10, lib=FakeCudaNoErrorName(fail={"cuMemAlloc_v2": 12345}))
    assert res["devices"][0]["error"] == "CUresult 12345"


def test_ptx_rejected_reports_the_jit_log_and_releases_the_context():
    fake = FakeCuda()
    res = _cuda.check(elements=10, lib=fake, ptx=".version 7.0\n.target sm_50\nbogus\n")
    dev = res["devices"][0]
    assert dev["error"] == "CUDA_ERROR_INVALID_PTX" and dev["call"] == "cuModuleLoadData"
    assert "Parsing error" in dev["jit_log"]
    assert fake.retained == {0: 0} and "cuModuleUnload" not in fake.calls and "cuMemAlloc_v2" not in fake.calls


def test_init_failure_and_no_device():
    res = _cuda.check(lib=FakeCuda(fail={"cuInit": 100}))
    assert res["ok"] is False and res["devices"] == [] and res["error"] == "CUDA_ERROR_NO_DEVICE"
    assert res["call"] == "cuInit" and res["hint"]
    res = _cuda.check(lib=FakeCuda(names=()))
    assert res["ok"] is False and res["error"] == "CUDA_ERROR_NO_DEVICE" and res["call"] == "cuDeviceGetCount"


# -- --hold: the client stays alive (and visible to MPS) with its context and buffers ------------------

def test_hold_keeps_context_and_buffers_until_it_ends(monkeypatch):
    fake = FakeCuda(names=("A", "B"))
    seen = []

    def sleep(seconds):  # what is live while the process holds
        seen.append(("sleep", seconds, list(fake.calls), dict(fake.retained), len(fake.mem)))

    monkeypatch.setattr(_cuda.time, "sleep", sleep)
    held = []
    res = _cuda.check(elements=100, lib=fake, hold=2.5, on_hold=lambda dev: held.append((dev["index"], dev["mismatches"])))
    assert res["ok"] and [d["held_seconds"] for d in res["devices"]] == [2.5, 2.5]
    assert held == [(0, 0), (1, 0)]            # told after the result is known, once per device
    assert len(seen) == 2
    for _tag, seconds, calls, retained, live in seen:
        last_launch = len(calls) - 1 - calls[::-1].index("cuLaunchKernel")
        assert seconds == 2.5 and calls[-1] == "cuMemcpyDtoH_v2" and "cuMemFree_v2" not in calls[last_launch:]
        assert live == 3 and 1 in retained.values()   # three buffers and the primary context still held
    assert fake.mem == {} and fake.modules == {} and fake.retained == {0: 0, 1: 0}   # then freed as before


def test_no_hold_by_default_and_none_after_a_cuda_error(monkeypatch):
    slept = []
    monkeypatch.setattr(_cuda.time, "sleep", slept.append)
    res = _cuda.check(elements=10, lib=FakeCuda())
    assert res["ok"] and slept == [] and "held_seconds" not in res["devices"][0]
    res = _cuda.check(elements=10, lib=FakeCuda(fail={"cuLaunchKernel": 719}), hold=5, on_hold=slept.append)
    assert res["ok"] is False and slept == [] and "held_seconds" not in res["devices"][0]
    with pytest.raises(ValueError, match="hold must not be negative"):
        _cuda.check(elements=10, lib=FakeCuda(), hold=-1)


def test_main_hold_says_so_on_stderr_and_keeps_stdout(monkeypatch, capsys):
    slept = []
    monkeypatch.setattr(_cuda.time, "sleep", slept.append)
    monkeypatch.setattr(_cuda, "load_library", lambda: (FakeCuda(), "libcuda.so.1", None))
    assert _cuda.main(["--elements", "64", "--hold", "1.5"]) == 0
    out, err = capsys.readouterr()
    assert slept == [1.5]
    assert err == "vectorAdd device 0 (NVIDIA H200): 64 elements, 0 mismatches; holding the context for 1.5 s\n"
    assert out.splitlines()[0] == "vectorAdd device 0 (NVIDIA H200): 64 elements, 0 mismatches"
    assert json.loads(out.splitlines()[1])["devices"][0]["held_seconds"] == 1.5
    for bad in ("-1", "90000", "nan"):
        with pytest.raises(SystemExit):
            _cuda.main(["--hold", bad])
        assert "--hold must be between 0 and 86400 seconds" in capsys.readouterr().err


# -- as a script ------------------------------------------------------------------------------

def test_main_prints_one_line_per_device_and_json(monkeypatch, capsys):
    fake = FakeCuda(names=("NVIDIA H200", "NVIDIA H200"))
    monkeypatch.setattr(_cuda, "load_library", lambda: (fake, "libcuda.so.1", None))
    assert _cuda.main(["--elements", "50000"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "vectorAdd device 0 (NVIDIA H200): 50000 elements, 0 mismatches"
    assert out[1] == "vectorAdd device 1 (NVIDIA H200): 50000 elements, 0 mismatches"
    data = json.loads(out[2])
    assert data["ok"] is True and len(data["devices"]) == 2 and data["library"] == "libcuda.so.1"
    monkeypatch.setattr(_cuda, "load_library", lambda: (FakeCuda(corrupt={0: 9.0}), "x", None))
    assert _cuda.main(["--device", "0", "--elements", "10"]) == 1
    assert capsys.readouterr().out.splitlines()[0] == "vectorAdd device 0 (NVIDIA H200): 10 elements, 1 mismatches"


def test_file_is_standalone_stdlib_only():
    """It is copied into an image and run in pods: stdlib only, except the collection's error family, imported
    under a guard that falls back to a plain class when the file runs alone."""
    tree = ast.parse(open(CUDA_PY).read())
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in node.handlers):
            guarded.update(id(n) for n in ast.walk(node))
    mods, optional = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        (optional if id(node) in guarded else mods).update(names)
    assert {m.split(".")[0] for m in mods} <= {"__future__", "array", "ctypes", "json", "sys", "time", "argparse"}
    assert optional == {"ansible_collections.gpuops.nvidia.plugins.module_utils._errors"}


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="a GPU host: the script would really run")
def test_script_runs_outside_the_collection_and_fails_cleanly_without_libcuda(tmp_path):
    copy = tmp_path / "_cuda.py"
    copy.write_text(open(CUDA_PY).read())
    proc = subprocess.run([sys.executable, "-I", str(copy), "--elements", "16"], cwd=str(tmp_path),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, check=False)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("vectorAdd: FAILED ")
    data = json.loads(lines[-1])
    assert data["ok"] is False and data["devices"] == []
    assert data["error"].startswith("libcuda.so.1 cannot be loaded") or data["error"].startswith("CUDA_ERROR")


# -- across a real C ABI (argtypes, 64-bit device pointers, void** kernelParams) ----------------------

@pytest.fixture(scope="module")
def c_libcuda(tmp_path_factory):
    import ctypes
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "cuda", "fake_libcuda.c")
    out = str(tmp_path_factory.mktemp("cuda") / "libcuda.so.1")
    subprocess.check_call([cc, "-shared", "-fPIC", "-O1", "-o", out, src])
    return out, ctypes


def test_through_a_c_library(c_libcuda):
    path, ctypes = c_libcuda
    lib = ctypes.CDLL(path)
    res = _cuda.check(elements=100003, lib=lib)
    assert res["ok"] is True, res
    dev = res["devices"][0]
    assert dev["name"] == "Fake C GPU" and dev["compute_capability"] == "9.0" and dev["mismatches"] == 0
    assert lib.fake_live_allocations() == 0 and lib.fake_live_modules() == 0 and lib.fake_retained() == 0
    lib.fake_set_corrupt(100002)
    dev = _cuda.check(elements=100003, lib=lib)["devices"][0]
    assert dev["mismatches"] == 1 and dev["first_mismatch"]["index"] == 100002
    dev = _cuda.check(elements=10, lib=lib, ptx=_cuda.PTX.replace("vectorAdd(", "vectorSub("))["devices"][0]
    assert dev["error"] == "CUDA_ERROR_INVALID_PTX" and dev["call"] == "cuModuleLoadData"
    assert lib.fake_live_allocations() == 0 and lib.fake_retained() == 0


def test_script_loads_the_c_library_by_path(c_libcuda, monkeypatch, capsys):
    path, _ctypes = c_libcuda
    monkeypatch.setattr(_cuda, "LIBRARY_CANDIDATES", ("libcuda-not-here.so.1", path))
    monkeypatch.setattr(_cuda.load_library, "__defaults__", (("libcuda-not-here.so.1", path),))
    assert _cuda.main(["--elements", "777"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "vectorAdd device 0 (Fake C GPU): 777 elements, 0 mismatches"
    assert json.loads(out[1])["library"] == path
