"""Host-side node validation: driver, CUDA, toolkit (CDI, containerd) and device plugin checks, and the module."""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import socket
import sys
import tempfile

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils import _validate as v
from ansible_collections.gpuops.nvidia.plugins.modules import gpu_validate
from conftest import H200_CAPTURE, REPO, needs, run_module
from fake_libcuda import FakeCuda
from nvml_standin import NVMLError, NVMLStandIn

RESULTS = os.path.join(REPO, "tests", "lab", "h200", "results")
CTK_SPEC = os.path.join(RESULTS, "cdi-nvidia-ctk.yaml")      # written by nvidia-ctk on the real H200
OUR_SPEC = os.path.join(RESULTS, "cdi-gpuops.yaml")          # written by cdi_spec on the same node
CTK_UUID = "GPU-4829e23d-d471-b36d-954c-d5d0b7e8fc33"        # the GPU in those specs
real_specs = needs(os.path.relpath(CTK_SPEC, REPO), os.path.relpath(OUR_SPEC, REPO))  # the H200 lane's results
CONTAINERD_24 = os.path.join(REPO, "tests", "unit", "fixtures", "runtime", "containerd", "v4-default-2.4.toml")


class OneGPU(object):
    """pynvml-shaped stand-in for the GPU the CDI captures describe."""

    def __init__(self, uuid=CTK_UUID, version="580.159.04", count=1):
        self.uuid, self.version, self.count = uuid, version, count

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return self.version

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return self.uuid if h == 0 else "GPU-%08d-0000-0000-0000-000000000000" % h

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H200"


def ctx(nvml=None, cuda=None, **options):
    return v.Context(options, nvml_loader=lambda: [(nvml or OneGPU(), "pynvml")], cuda_lib=cuda)


def _detail(result, name):
    return next(c for c in result["checks"] if c["name"] == name)


# -- driver ----------------------------------------------------------------------------------------

def test_driver_on_the_h200_capture(roots, h200_nvml):
    c = ctx(h200_nvml, proc_version=os.path.join(roots["h200"], "proc", "driver", "nvidia", "version"))
    r = v.run_check("driver", c)
    assert r["ok"] is True and r["error"] is None, r
    d = r["detail"]
    assert d["driver_version"] == d["kernel_module_version"] == "580.159.04" and d["kernel_module_type"] == "open"
    assert d["uuids"] == ["GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8"] and d["gpus"][0]["name"] == "NVIDIA H200"
    assert r["summary"] == "580.159.04, 1 GPU" and c.gpus == d["gpus"]


def test_driver_failures(roots, tmp_path):
    proc = os.path.join(roots["h200"], "proc", "driver", "nvidia", "version")
    r = v.run_check("driver", ctx(NVMLStandIn(H200_CAPTURE, fail_init=True), proc_version=str(tmp_path / "none")))
    assert r["ok"] is False
    assert "not readable" in r["error"] and "NVML: pynvml: NVML_ERROR_DRIVER_NOT_LOADED" in r["error"]
    r = v.run_check("driver", ctx(OneGPU(version="580.95.05"), proc_version=proc))
    assert r["ok"] is False and "kernel module 580.159.04 but user-space driver (NVML) 580.95.05" in r["error"]
    r = v.run_check("driver", ctx(OneGPU(count=0), proc_version=proc))
    assert r["ok"] is False and r["error"] == "NVML lists no GPU"


def test_driver_falls_back_to_the_next_nvml_when_pynvml_cannot_initialise(roots):
    broken = NVMLStandIn(H200_CAPTURE, fail_init=True)
    c = v.Context({"proc_version": os.path.join(roots["h200"], "proc", "driver", "nvidia", "version")},
                  nvml_loader=lambda: [(broken, "pynvml"), (NVMLStandIn(H200_CAPTURE), "libnvidia-ml.so.1")])
    r = v.run_check("driver", c)
    assert r["ok"] is True and r["detail"]["nvml"] == "libnvidia-ml.so.1"


class FakeNVMLLib(object):
    """libnvidia-ml.so.1's C entry points (the _v2 ones CtypesNVML calls), writing through pointers."""

    def __init__(self, fail_init=0):
        self.fail_init = fail_init

    def nvmlInit_v2(self):
        return self.fail_init

    def nvmlShutdown(self):
        return 0

    def nvmlDeviceGetCount_v2(self, p):
        p[0] = 2
        return 0

    def nvmlSystemGetDriverVersion(self, buf, n):
        buf.value = b"580.159.04"
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, i, p):
        p[0] = 0x100 + i
        return 0

    def nvmlDeviceGetUUID(self, h, buf, n):
        buf.value = b"GPU-%d" % (h - 0x100)
        return 0

    def nvmlDeviceGetName(self, h, buf, n):
        buf.value = b"NVIDIA H200"
        return 0

    def nvmlErrorString(self, rc):
        return b"Driver Not Loaded" if rc == 9 else b"Unknown Error"


def test_ctypes_nvml_wrapper():
    gpus, version, source = v.nvml_gpus(lambda: [(v.CtypesNVML(FakeNVMLLib()), "libnvidia-ml.so.1")])
    assert version == "580.159.04" and source == "libnvidia-ml.so.1"
    assert gpus == [{"index": 0, "uuid": "GPU-0", "name": "NVIDIA H200"}, {"index": 1, "uuid": "GPU-1", "name": "NVIDIA H200"}]
    with pytest.raises(v.NvmlCallError, match=r"nvmlInit_v2: Driver Not Loaded \(NVML return 9\)"):
        v.nvml_gpus(lambda: [(v.CtypesNVML(FakeNVMLLib(fail_init=9)), "libnvidia-ml.so.1")])


# -- cuda ------------------------------------------------------------------------------------------

def test_cuda_check_in_process():
    r = v.run_check("cuda", ctx(cuda=FakeCuda(names=("NVIDIA H200",) * 2), cuda_elements=4096))
    assert r["ok"] is True and r["summary"] == "vectorAdd on 2 devices, 4096 elements, 0 mismatches"
    assert [d["mismatches"] for d in r["detail"]["devices"]] == [0, 0]
    r = v.run_check("cuda", ctx(cuda=FakeCuda(fail={"cuDevicePrimaryCtxRetain": 802})))
    assert r["ok"] is False
    assert r["error"].startswith("vectorAdd device 0 (NVIDIA H200): FAILED CUDA_ERROR_SYSTEM_NOT_READY in "
                                 "cuDevicePrimaryCtxRetain (NVSwitch system: start nvidia-fabricmanager")
    r = v.run_check("cuda", ctx(cuda=FakeCuda(corrupt={3: 0.0}), cuda_device="0"))
    assert r["ok"] is False and r["error"].endswith("1 mismatches: wrong results from the GPU")
    r = v.run_check("cuda", ctx(cuda=FakeCuda(fail={"cuInit": 100})))
    assert r["ok"] is False and r["error"].startswith("CUDA_ERROR_NO_DEVICE in cuInit (")


# -- toolkit: CDI specs (the real captures), binaries, containerd ------------------------------------

@real_specs
def test_yaml_reader_matches_pyyaml_on_the_real_specs():
    for path in (CTK_SPEC, OUR_SPEC):
        text = open(path).read()
        assert v.yaml_load(text) == yaml.safe_load(text), path


def test_yaml_reader_edge_cases():
    text = """---
# comment
kind: 'nvidia.com/gpu'   # trailing comment
cdiVersion: "0.5.0"
devices:
- name: "0"
  containerEdits:
    env: []
    deviceNodes:
    - path: /dev/nvidia0
      fileMode: 438
    hooks:
      - hookName: createContainer
        args:
          - nvidia-cdi-hook
          - --link
          - ::/usr/lib/x.so
          - ""
          - 'it''s'
- name: all
annotations: {}
flow: [a, "b"]
"""
    assert v.yaml_load(text) == yaml.safe_load(text)


def _exe(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + text + "\n")
    os.chmod(path, 0o755)


def host_from_spec(tmp_path, spec_path=CTK_SPEC, skip=()):
    """The real spec with every host path moved under tmp_path, and those paths created (but ``skip``)."""
    text = open(spec_path).read()
    data = yaml.safe_load(text)
    root = str(tmp_path / "host")
    nodes, mounts, hooks = v.spec_paths(data)
    for p in nodes + mounts:
        if p in skip:
            continue
        os.makedirs(os.path.dirname(root + p), exist_ok=True)
        open(root + p, "w").close()
    for p in hooks:
        if p not in skip:
            _exe(root + p, 'echo "NVIDIA CDI Hook version 1.18.0"')
    text = re.sub(r"((?:path|hostPath): )(/\S+)", lambda m: m.group(1) + root + m.group(2), text)
    cdi = tmp_path / "etc" / "cdi"
    cdi.mkdir(parents=True)
    (cdi / "nvidia.yaml").write_text(text)
    runtime = root + "/usr/bin/nvidia-container-runtime"
    _exe(runtime, 'echo "NVIDIA Container Runtime version 1.18.0"\necho "commit: abc"')
    return root, {"cdi_spec_dirs": [str(cdi), str(tmp_path / "run" / "cdi")], "runtime_path": runtime}


@pytest.fixture(params=["pyyaml", "builtin-yaml"])
def yaml_impl(request, monkeypatch):
    if request.param == "builtin-yaml":
        monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` raises ImportError
    return request.param


@real_specs
def test_toolkit_ok_on_the_real_nvidia_ctk_spec(tmp_path, yaml_impl):
    root, opts = host_from_spec(tmp_path)
    r = v.run_check("toolkit", ctx(**opts))
    assert r["ok"] is True, r["error"]
    d = r["detail"]
    assert d["runtime"]["version"] == "NVIDIA Container Runtime version 1.18.0"
    assert d["hook"] == {"path": root + "/usr/bin/nvidia-cdi-hook", "version": "NVIDIA CDI Hook version 1.18.0"}
    assert d["cdi"]["devices"] == ["0", CTK_UUID, "all"] and d["cdi"]["gpus_covered"] == {CTK_UUID: CTK_UUID}
    assert root + "/dev/nvidia0" in d["cdi"]["device_nodes"] and d["cdi"]["mounts"] > 20
    assert r["summary"] == "CDI 3 device(s) in 1 spec(s)"


@real_specs
def test_toolkit_gpu_named_only_by_index_is_covered(tmp_path):
    _root, opts = host_from_spec(tmp_path)
    r = v.run_check("toolkit", ctx(OneGPU(uuid="GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8"), **opts))
    assert r["ok"] is True and r["detail"]["cdi"]["gpus_covered"] == {"GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8": "0"}


@real_specs
def test_toolkit_reports_each_problem(tmp_path):
    root, opts = host_from_spec(tmp_path, skip=("/dev/nvidia-uvm", "/usr/local/nvidia/lib64/libcuda.so.580.159.04"))
    r = v.run_check("toolkit", ctx(OneGPU(count=2), **opts))
    assert r["ok"] is False
    assert "CDI spec has no device for GPU GPU-00000001-0000-0000-0000-000000000000" in r["error"]
    assert "CDI device nodes missing on the host: %s/dev/nvidia-uvm" % root in r["error"]
    assert "mounts 1 host path(s) that do not exist" in r["error"] and root + "/usr/local/nvidia/lib64/libcuda.so.580.159.04" in r["error"]


@real_specs
def test_toolkit_runtime_and_hook_must_execute(tmp_path):
    root, opts = host_from_spec(tmp_path)
    _exe(opts["runtime_path"], "echo boom >&2; exit 3")
    os.chmod(root + "/usr/bin/nvidia-cdi-hook", 0o644)
    r = v.run_check("toolkit", ctx(**opts))
    assert "`%s --version` exited 3: boom" % opts["runtime_path"] in r["error"]
    assert "CDI hook %s/usr/bin/nvidia-cdi-hook is not executable" % root in r["error"]
    missing = dict(opts)
    missing["runtime_path"] = str(tmp_path / "missing")
    r = v.run_check("toolkit", ctx(**missing))
    assert "runtime %s does not exist" % (tmp_path / "missing") in r["error"]


def test_toolkit_without_any_spec(tmp_path):
    _exe(str(tmp_path / "rt"), "echo NVIDIA Container Runtime version 1.18.0")
    _exe(str(tmp_path / "hook"), "echo NVIDIA CDI Hook version 1.18.0")
    (tmp_path / "cdi").mkdir()
    (tmp_path / "cdi" / "other.json").write_text(json.dumps({"cdiVersion": "0.6.0", "kind": "vendor.com/x", "devices": []}))
    (tmp_path / "cdi" / "broken.yaml").write_text("kind: [\n  - x: : :\n")
    r = v.run_check("toolkit", ctx(runtime_path=str(tmp_path / "rt"), hook_path=str(tmp_path / "hook"),
                                   cdi_spec_dirs=[str(tmp_path / "cdi")]))
    assert r["ok"] is False and "no CDI spec of kind nvidia.com/gpu in %s" % (tmp_path / "cdi") in r["error"]
    assert "broken.yaml: cannot parse" in r["error"]
    assert r["detail"]["cdi"]["other_specs"] == [str(tmp_path / "cdi" / "other.json")]


NVIDIA_RUNTIME = """
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]
          runtime_type = 'io.containerd.runc.v2'

          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
            BinaryName = '%s'
            SystemdCgroup = false
"""


@real_specs
def test_toolkit_containerd_config_dump(tmp_path):
    _root, opts = host_from_spec(tmp_path)
    base = open(CONTAINERD_24).read()
    dump = tmp_path / "dump.toml"
    dump.write_text(base + NVIDIA_RUNTIME % opts["runtime_path"])
    r = v.run_check("toolkit", ctx(containerd_config_dump_cmd=["cat", str(dump)], **opts))
    assert r["ok"] is True, r["error"]
    c = r["detail"]["containerd"]
    assert c["found"] is True and c["runtimes"] == ["nvidia", "runc"] and c["binary_name"] == opts["runtime_path"]
    assert c["runtime_type"] == "io.containerd.runc.v2" and r["summary"].endswith(", containerd runtime nvidia")
    # containerd 2.4's default config: no nvidia runtime
    r = v.run_check("toolkit", ctx(containerd_config_dump_cmd=["cat", CONTAINERD_24], **opts))
    assert r["ok"] is False and "containerd has no CRI runtime 'nvidia' (it has: runc)" in r["error"]
    dump.write_text(base + NVIDIA_RUNTIME % "/opt/none/nvidia-container-runtime")
    r = v.run_check("toolkit", ctx(containerd_config_dump_cmd=["cat", str(dump)], **opts))
    assert "uses BinaryName /opt/none/nvidia-container-runtime, which does not exist" in r["error"]
    r = v.run_check("toolkit", ctx(containerd_config_dump_cmd=["cat", str(tmp_path / "nope")], **opts))
    assert "`cat %s` exited 1" % (tmp_path / "nope") in r["error"]
    r = v.run_check("toolkit", ctx(containerd_config_dump_cmd=[str(tmp_path / "no-containerd"), "config", "dump"], **opts))
    assert "exited 127" in r["error"]


# -- device plugin: kubelet's checkpoint and sockets ------------------------------------------------

def checkpoint(registered, entries=None):
    """kubelet v1.37 pkg/kubelet/cm/devicemanager/checkpoint: Data{PodDeviceEntries, RegisteredDevices}, Checksum, BootID."""
    return {"Data": {"PodDeviceEntries": entries, "RegisteredDevices": registered},
            "Checksum": 2817367163, "BootID": "4f0c2c5e-54b1-4d8c-9a1e-7f6c1f0e9a11"}


@pytest.fixture
def kubelet_dir():
    # unix socket paths are limited to 107 bytes: keep it short
    d = tempfile.mkdtemp(prefix="kl", dir="/tmp")
    os.mkdir(os.path.join(d, "device-plugins"))
    socks = []

    def listen(name):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(os.path.join(d, "device-plugins", name))
        s.listen(1)
        socks.append(s)
        return s

    def write(data):
        with open(os.path.join(d, "device-plugins", "kubelet_internal_checkpoint"), "w") as f:
            json.dump(data, f)

    yield d, listen, write
    for s in socks:
        s.close()
    shutil.rmtree(d)


UUID = "GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8"


def test_device_plugin_time_slicing_replicas(kubelet_dir):
    d, listen, write = kubelet_dir
    write(checkpoint({"nvidia.com/gpu": ["%s::%d" % (UUID, i) for i in range(4)]},
                     [{"PodUID": "b0b5", "ContainerName": "cuda", "ResourceName": "nvidia.com/gpu",
                       "DeviceIDs": {"0": [UUID + "::2"]}, "AllocResp": "CiQKFk5WSURJQV9WSVNJQkxFX0RFVklDRVM="}]))
    listen("kubelet.sock")
    listen("nvidia-gpu.sock")
    r = v.run_check("device_plugin", ctx(kubelet_dir=d))
    assert r["ok"] is True, r["error"]
    assert r["detail"]["devices"] == 4 and r["detail"]["allocated"] == 1 and r["summary"] == "4 nvidia.com/gpu"
    assert r["detail"]["plugin_sockets"] == [{"path": os.path.join(d, "device-plugins", "nvidia-gpu.sock"),
                                              "listening": True, "error": None}]


def test_device_plugin_failures(kubelet_dir):
    d, listen, write = kubelet_dir
    r = v.run_check("device_plugin", ctx(kubelet_dir=d))
    assert r["ok"] is False and "cannot read kubelet's device manager checkpoint" in r["error"]
    assert "has no kubelet.sock: kubelet is not running" in r["error"]
    write(checkpoint({"example.com/fpga": ["a"]}, None))
    listen("kubelet.sock")
    stale = listen("nvidia-gpu.sock")
    stale.close()  # the socket file stays, nothing accepts: a dead plugin
    r = v.run_check("device_plugin", ctx(kubelet_dir=d))
    assert "kubelet has no healthy nvidia.com/gpu device registered (registered: example.com/fpga=1)" in r["error"]
    assert "no device plugin socket accepts connections: %s/device-plugins/nvidia-gpu.sock (Connection refused)" % d \
        in r["error"]
    r = v.run_check("device_plugin", ctx(kubelet_dir=os.path.join(d, "nope")))
    assert "cannot list" in r["error"]


def test_checkpoint_parser_is_tolerant():
    assert v.parse_checkpoint(checkpoint({"nvidia.com/gpu": ["a", "b"]})) == ({"nvidia.com/gpu": ["a", "b"]}, [])
    # pre-1.20 entries carried a flat DeviceIDs list; lower-case keys; no Data wrapper
    reg, entries = v.parse_checkpoint({"registeredDevices": {"nvidia.com/gpu": ["a"]},
                                       "podDeviceEntries": [{"ResourceName": "nvidia.com/gpu", "DeviceIDs": ["a"]}]})
    assert reg == {"nvidia.com/gpu": ["a"]} and v._entry_ids(entries[0]) == ["a"]
    assert v.parse_checkpoint({"Data": {"RegisteredDevices": None}}) == ({}, [])
    assert v.parse_checkpoint([]) == ({}, [])


# -- all together, and the module -------------------------------------------------------------------

def test_validate_orders_checks_and_names_failures():
    c = v.Context({"kubelet_dir": "/nonexistent"}, nvml_loader=lambda: [(OneGPU(), "pynvml")], cuda_lib=FakeCuda())
    res = v.validate(["device_plugin", "cuda"], c)
    assert [x["name"] for x in res["checks"]] == ["cuda", "device_plugin"]
    assert res["ok"] is False and res["failed_checks"] == ["device_plugin"] and res["wall_seconds"] >= 0
    assert res["summary"].startswith("GPU node validation FAILED in ")
    assert "cuda ok (vectorAdd on 1 device, 50000 elements, 0 mismatches); device_plugin FAILED (0 nvidia.com/gpu)" \
        in res["summary"]
    assert res["msg"].startswith("GPU node validation failed: device_plugin: cannot read kubelet's device manager")
    assert "Fix: run the NVIDIA device plugin" in res["msg"]
    with pytest.raises(ValueError, match="unknown check"):
        v.validate(["nvlink"], c)


def test_a_crashing_check_is_reported_not_raised():
    class Broken(OneGPU):
        def nvmlDeviceGetCount(self):
            return "many"

    r = v.run_check("driver", ctx(Broken(), proc_version="/nonexistent"))
    assert r["ok"] is False and "NVML: pynvml:" in r["error"]


def run(capsys, args):
    return run_module(capsys, gpu_validate.main, args)


def test_module_fails_naming_the_checks_and_the_fix(capsys, tmp_path):
    rc, out = run(capsys, {"checks": ["device_plugin"], "kubelet_dir": str(tmp_path), "_ansible_check_mode": True})
    assert rc == 1 and out["failed"] is True and out["changed"] is False
    assert out["failed_checks"] == ["device_plugin"] and out["ok"] is False
    assert out["msg"].startswith("GPU node validation failed: device_plugin: cannot read kubelet's device manager "
                                 "checkpoint %s/device-plugins/kubelet_internal_checkpoint" % tmp_path)
    assert "Fix: run the NVIDIA device plugin on this node" in out["msg"]
    assert out["checks"][0]["detail"]["resource_name"] == "nvidia.com/gpu"


def test_module_reports_without_failing(capsys, tmp_path):
    rc, out = run(capsys, {"checks": ["device_plugin", "toolkit"], "kubelet_dir": str(tmp_path),
                           "runtime_path": str(tmp_path / "nvidia-container-runtime"),
                           "cdi_spec_dirs": [str(tmp_path)], "fail_on_error": False})
    assert rc == 0 and out["changed"] is False and out["ok"] is False
    assert out["failed_checks"] == ["toolkit", "device_plugin"]
    assert "toolkit: runtime %s/nvidia-container-runtime does not exist" % tmp_path in out["msg"]


def test_module_passes(capsys, kubelet_dir):
    d, listen, write = kubelet_dir
    write(checkpoint({"nvidia.com/gpu": [UUID]}))
    listen("kubelet.sock")
    listen("nvidia-gpu.sock")
    rc, out = run(capsys, {"checks": ["device_plugin"], "kubelet_dir": d})
    assert rc == 0 and out["ok"] is True and out["failed_checks"] == [] and out["changed"] is False
    assert re.match(r"GPU node validation passed in \d+\.\d\d s: device_plugin ok \(1 nvidia.com/gpu\)$", out["summary"])


def test_module_rejects_bad_options(capsys):
    rc, out = run(capsys, {"cuda_device": "first"})
    assert rc == 1 and "cuda_device must be 'all' or a CUDA device ordinal" in out["msg"]
    rc, out = run(capsys, {"checks": ["nvlink"]})
    assert rc == 1 and "nvlink" in out["msg"]


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="a GPU host: the checks would pass")
def test_module_on_a_machine_without_gpu_fails_every_check(capsys, tmp_path):
    rc, out = run(capsys, {"kubelet_dir": str(tmp_path), "cdi_spec_dirs": [str(tmp_path)],
                           "runtime_path": str(tmp_path / "rt")})
    assert rc == 1 and out["failed_checks"] == ["driver", "cuda", "toolkit", "device_plugin"]
    assert [c["name"] for c in out["checks"]] == ["driver", "cuda", "toolkit", "device_plugin"]
    assert all(c["error"] for c in out["checks"]) and out["wall_seconds"] < 30


def test_ctypes_array_is_what_the_fake_receives():
    """Guard for the fakes: pointer() outputs are writable by index, as the real library writes through them."""
    p = ctypes.pointer(ctypes.c_void_p())
    p[0] = 0x1234
    assert p.contents.value == 0x1234
    with pytest.raises(NVMLError):
        NVMLStandIn(H200_CAPTURE, fail_init=True).nvmlInit()


# -- roles/validator, entry point "node" -------------------------------------------------------------

def _role(rel):
    with open(os.path.join(REPO, "roles", "validator", rel)) as f:
        return yaml.safe_load(f)


def test_role_node_entry_point_documents_its_defaults_and_passes_every_module_option():
    defaults = _role("defaults/main.yml")
    node = _role("meta/argument_specs.yml")["argument_specs"]["node"]["options"]
    ours = dict((k, val) for k, val in defaults.items() if k.startswith("validator_node_"))
    assert sorted(ours) == sorted(node)
    for name, value in ours.items():
        assert node[name]["default"] == value, name
    task = _role("tasks/node.yml")[0]["gpuops.nvidia.gpu_validate"]
    module_opts = set(gpu_validate.argument_spec())
    assert set(task) == module_opts
    for opt in module_opts - {"fail_on_error"}:
        assert "validator_node_" + opt in task[opt], opt
    assert node["validator_node_checks"]["choices"] == list(v.CHECKS)


def test_ctypes_nvml_through_a_c_library(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src = os.path.join(REPO, "tests", "unit", "fixtures", "cuda", "fake_libnvidia_ml.c")
    out = str(tmp_path / "libnvidia-ml.so.1")
    import subprocess

    subprocess.check_call([cc, "-shared", "-fPIC", "-o", out, src])
    lib = ctypes.CDLL(out)
    gpus, version, _source = v.nvml_gpus(lambda: [(v.CtypesNVML(lib), out)])
    assert version == "580.159.04"
    assert [g["uuid"] for g in gpus] == ["GPU-00000000-65a0-0fb7-6602-4823e36b7ca8", "GPU-00000001-65a0-0fb7-6602-4823e36b7ca8"]
    lib.fake_fail_init(1)
    with pytest.raises(v.NvmlCallError, match=r"nvmlInit_v2: Driver Not Loaded \(NVML return 9\)"):
        v.nvml_gpus(lambda: [(v.CtypesNVML(ctypes.CDLL(out)), out)])
