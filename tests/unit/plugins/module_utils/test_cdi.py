# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""CDI spec generation over a synthetic tree made from the real H200 capture."""
from __future__ import annotations

import os
import re

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils._cdi import (
    CdiError,
    build_spec,
    gpus_from_proc,
    minimum_version,
    render,
)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
CAPTURES = [os.path.join(REPO, "tests", "fixtures", "nodes", "h200-ubuntu2404-vm"),
            os.path.join(os.environ.get("GPUOPS_SHARED", os.path.join(REPO, "..", "shared")), "fixtures", "nodes", "h200-ubuntu2404-vm")]
VER = "580.159.04"
UUID = "GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8"


def _section(text, name):
    m = re.search(r"^## %s\n(.*?)(?=^## |\Z)" % re.escape(name), text, re.S | re.M)
    return m.group(1) if m else ""


def _touch(path, content=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(content)


@pytest.fixture
def h200(tmp_path):
    """/dev, /proc/driver/nvidia and /usr/local/nvidia of the real H200 node, as plain files."""
    node = next(open(os.path.join(c, "node.txt")).read() for c in CAPTURES if os.path.exists(os.path.join(c, "node.txt")))
    root = str(tmp_path / "root")
    for m in re.finditer(r"^c\S+\s.*\s(/dev/\S+)$", _section(node, "dev"), re.M):
        _touch(root + m.group(1))
    for m in re.finditer(r"^c\S+\s.*\s(nvidia-cap\d+)$", _section(node, "dev"), re.M):
        _touch(root + "/dev/nvidia-caps/" + m.group(1))
    proc = _section(node, "proc driver")
    _touch(root + "/proc/driver/nvidia/version", proc.split("# /proc")[0].split("\n/proc/driver/nvidia/suspend_depth\n")[-1])
    info = proc.split("# /proc/driver/nvidia/gpus/0000:00:06.0/information\n")[1]
    _touch(root + "/proc/driver/nvidia/gpus/0000:00:06.0/information", info)
    for line in _section(node, "usr local nvidia").splitlines():
        path = line.strip()
        base = os.path.basename(path)
        if "/lib64/" in path:
            if base.endswith(".so." + VER):
                _touch(root + path, "ELF")
            else:
                stem = base.split(".so")[0] + ".so"
                os.makedirs(os.path.dirname(root + path), exist_ok=True)
                os.symlink(stem + "." + VER, root + path)
        elif "/bin/" in path:
            _touch(root + path, "ELF")
        elif path.endswith("/firmware/nvidia/" + VER):
            _touch(root + path + "/gsp_ga10x.bin")
    return root


def test_proc_discovery_matches_capture(h200):
    gpus = gpus_from_proc(h200)
    assert gpus == [{"minor": 0, "uuid": UUID, "bus": "0000:00:06.0", "model": "NVIDIA H200", "mig": [], "index": 0}]


def test_h200_spec(h200):
    spec, info = build_spec(root=h200, library_dirs=["/usr/lib/x86_64-linux-gnu", "/usr/local/nvidia/lib64"],
                            bin_dirs=["/usr/bin", "/usr/local/nvidia/bin"])
    assert spec["kind"] == "nvidia.com/gpu"
    assert spec["cdiVersion"] == "0.5.0"          # device "0" starts with a digit
    assert info["device_names"] == ["0", UUID, "all"]
    for d in spec["devices"]:
        assert d["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia0"}]
    common = spec["containerEdits"]
    assert common["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert [n["path"] for n in common["deviceNodes"]] == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    mounts = {m["containerPath"]: m for m in common["mounts"]}
    lib = "/usr/local/nvidia/lib64/libcuda.so." + VER
    assert mounts[lib]["hostPath"] == lib and mounts[lib]["options"] == ["ro", "nosuid", "nodev", "rbind", "rprivate"]
    assert "/usr/local/nvidia/lib64/libnvidia-ml.so." + VER in mounts
    assert "/usr/local/nvidia/bin/nvidia-smi" in mounts
    # no hook binary on that node: SONAME links are mounted, no hooks
    assert "hooks" not in common
    assert mounts["/usr/local/nvidia/lib64/libcuda.so.1"]["hostPath"] == lib
    assert any("no nvidia-cdi-hook" in w for w in info["warnings"])
    assert all(not p.startswith(h200) for m in common["mounts"] for p in (m["hostPath"], m["containerPath"]))


def test_hooks_when_hook_binary_present(h200):
    _touch(h200 + "/usr/bin/nvidia-cdi-hook")
    spec, info = build_spec(root=h200, library_dirs=["/usr/local/nvidia/lib64"])
    hooks = spec["containerEdits"]["hooks"]
    names = [h["args"][1] for h in hooks]
    assert names == ["create-symlinks", "enable-cuda-compat", "update-ldcache", "disable-device-node-modification"]
    assert hooks[0]["path"] == "/usr/bin/nvidia-cdi-hook" and hooks[0]["hookName"] == "createContainer"
    assert "libcuda.so.%s::/usr/local/nvidia/lib64/libcuda.so.1" % VER in hooks[0]["args"]
    assert hooks[2]["args"] == ["nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/local/nvidia/lib64"]
    assert not any(m["containerPath"].endswith(".so.1") for m in spec["containerEdits"]["mounts"])


def test_mig_devices_from_proc(h200):
    base = h200 + "/proc/driver/nvidia/capabilities/gpu0/mig"
    _touch(base + "/gi1/access", "DeviceFileMinor: 12\nDeviceFileMode: 292\n")
    _touch(base + "/gi1/ci0/access", "DeviceFileMinor: 13\n")
    _touch(base + "/gi2/access", "DeviceFileMinor: 21\n")
    _touch(base + "/gi2/ci0/access", "DeviceFileMinor: 22\n")
    spec, info = build_spec(root=h200, library_dirs=["/usr/local/nvidia/lib64"])
    assert info["device_names"] == ["0:0", "0:1", "all"]    # proc has no MIG UUIDs
    nodes = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert nodes == ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"]


def test_mig_uuids_from_nvml_shape(h200):
    gpus = [{"index": 0, "minor": 0, "uuid": UUID, "bus": "0000:00:06.0",
             "mig": [{"gi": 1, "ci": 0, "uuid": "MIG-aaaa", "gi_cap": 12, "ci_cap": 13}]}]
    spec, info = build_spec(root=h200, gpus=gpus, library_dirs=["/usr/local/nvidia/lib64"], naming=("uuid",))
    assert info["device_names"] == ["MIG-aaaa", "all"]
    assert spec["cdiVersion"] == "0.3.0"


def test_yaml_and_json_render_parse_back(h200):
    spec, _ignored = build_spec(root=h200, library_dirs=["/usr/local/nvidia/lib64"])
    assert yaml.safe_load(render(spec, "/etc/cdi/nvidia.yaml")) == spec
    import json
    assert json.loads(render(spec, "/etc/cdi/nvidia.json")) == spec


def test_no_driver(tmp_path):
    with pytest.raises(CdiError, match="no NVIDIA driver"):
        build_spec(root=str(tmp_path))


@pytest.mark.parametrize("spec,version", [
    ({"kind": "nvidia.com/gpu", "devices": [{"name": "gpu0", "containerEdits": {}}]}, "0.3.0"),
    ({"kind": "nvidia.com/gpu", "devices": [{"name": "0", "containerEdits": {}}]}, "0.5.0"),
    ({"kind": "nvidia.com/gpu", "devices": [{"name": "a", "containerEdits": {"mounts": [{"type": "bind"}]}}]}, "0.4.0"),
    ({"kind": "nvidia.com/gpu.x", "devices": [{"name": "a", "containerEdits": {}}]}, "0.6.0"),
    ({"kind": "nvidia.com/gpu", "devices": [{"name": "a", "containerEdits": {"additionalGids": [5]}}]}, "0.7.0"),
])
def test_minimum_version(spec, version):
    spec.setdefault("containerEdits", {})
    assert minimum_version(spec) == version


class FakeNVML(object):
    """The pynvml calls gpus_from_nvml makes, answering like the captured H200 (nvml.json) in MIG mode."""

    class NVMLError(Exception):
        pass

    def __init__(self, mig):
        self.mig = mig
        self.calls = []

    def nvmlInit(self):
        self.calls.append("init")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def nvmlDeviceGetMinorNumber(self, h):
        return 0

    def nvmlDeviceGetUUID(self, h):
        return UUID if h[0] == "gpu" else "MIG-%d-%d" % h[1:]

    def nvmlDeviceGetPciInfo(self, h):
        return type("Pci", (), {"busId": b"00000000:00:06.0"})()

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200"

    def nvmlDeviceGetMigMode(self, h):
        return [1, 1] if self.mig else [0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, j):
        if j >= len(self.mig):
            raise self.NVMLError("not found")
        return ("mig",) + self.mig[j]

    def nvmlDeviceGetGpuInstanceId(self, mh):
        return mh[1]

    def nvmlDeviceGetComputeInstanceId(self, mh):
        return mh[2]


def test_nvml_enumeration_with_mig(h200):
    from ansible_collections.gpuops.nvidia.plugins.module_utils._cdi import gpus_from_nvml
    base = h200 + "/proc/driver/nvidia/capabilities/gpu0/mig"
    _touch(base + "/gi3/access", "DeviceFileMinor: 30\n")
    _touch(base + "/gi3/ci0/access", "DeviceFileMinor: 31\n")
    nvml = FakeNVML(mig=[(3, 0)])
    gpus = gpus_from_nvml(nvml, h200)
    assert nvml.calls == ["init", "shutdown"]
    assert gpus[0]["bus"] == "0000:00:06.0" and gpus[0]["model"] == "NVIDIA H200"
    assert gpus[0]["mig"] == [{"gi": 3, "ci": 0, "uuid": "MIG-3-0", "gi_cap": 30, "ci_cap": 31}]
    spec, info = build_spec(root=h200, gpus=gpus, library_dirs=["/usr/local/nvidia/lib64"])
    assert info["device_names"] == ["0:0", "MIG-3-0", "all"]
    assert gpus_from_nvml(FakeNVML(mig=[]), h200)[0]["mig"] == []


def test_wrapper_script_is_not_mounted_as_the_binary(h200):
    """Seen on a lent H200: /usr/bin/nvidia-smi is a shell wrapper exec'ing /usr/local/nvidia/bin/nvidia-smi;
    mounting the wrapper gave containers an nvidia-smi that cannot run ("exec: ... not found")."""
    _touch(h200 + "/usr/bin/nvidia-smi", "#!/bin/sh\n# wrapper\nexec /usr/local/nvidia/bin/nvidia-smi \"$@\"\n")
    spec, _info = build_spec(root=h200, library_dirs=["/usr/local/nvidia/lib64"])
    paths = [m["hostPath"] for m in spec["containerEdits"]["mounts"]]
    assert "/usr/bin/nvidia-smi" not in paths
    assert "/usr/local/nvidia/bin/nvidia-smi" in paths


# -- CDI's name rules (container-device-interface pkg/parser: ValidateDeviceName, ValidateVendorName/ClassName) ----

@pytest.mark.parametrize("name", ["0", "a", "all", "0:1", "GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8",
                                  "MIG-4a3bfc0e-8e0c-5d4e-9a46-1bc1a7cbf0c2", "a_b.c:d-e", "Z9"])
def test_cdi_device_names_accepted(name):
    from ansible_collections.gpuops.nvidia.plugins.module_utils._cdi import device_name_problem
    assert device_name_problem(name) is None


@pytest.mark.parametrize("name", ["", "-a", "a-", ":0", "0:", "_a", "a.", "a b", "a/b", "a=b", "a\n", "\u00e4",
                                  "GPU-\u0661", "MIG-GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8/1/0", "a,b", 7])
def test_cdi_device_names_refused(name):
    from ansible_collections.gpuops.nvidia.plugins.module_utils._cdi import device_name_problem
    assert device_name_problem(name)


@pytest.mark.parametrize("kind", ["nvidia.com/gpu\n", "nvidia.com/", "/gpu", "1nvidia.com/gpu", "nvidia.com/gpu-",
                                  "nvidia com/gpu", "nvidia.com/gpu/x"])
def test_a_kind_cdi_refuses_is_refused_before_anything(h200, kind):
    with pytest.raises(CdiError, match="kind"):
        build_spec(root=h200, kind=kind, library_dirs=["/usr/local/nvidia/lib64"])


class OldMigUUIDs(FakeNVML):
    """Drivers before R470 named MIG devices MIG-GPU-<uuid>/<gi>/<ci>: the '/' is no CDI device name."""

    def nvmlDeviceGetUUID(self, h):
        return UUID if h[0] == "gpu" else "MIG-%s/%d/%d" % (UUID, h[1], h[2])


def test_an_nvml_mig_uuid_cdi_cannot_name_is_left_out_with_a_warning(h200):
    from ansible_collections.gpuops.nvidia.plugins.module_utils._cdi import gpus_from_nvml
    base = h200 + "/proc/driver/nvidia/capabilities/gpu0/mig"
    _touch(base + "/gi3/access", "DeviceFileMinor: 30\n")
    _touch(base + "/gi3/ci0/access", "DeviceFileMinor: 31\n")
    gpus = gpus_from_nvml(OldMigUUIDs(mig=[(3, 0)]), h200)
    spec, info = build_spec(root=h200, gpus=gpus, library_dirs=["/usr/local/nvidia/lib64"])
    assert info["device_names"] == ["0:0", "all"]
    assert any("MIG-%s/3/0" % UUID in w and "device name" in w for w in info["warnings"]), info["warnings"]


def test_a_repeated_uuid_is_left_out_with_a_warning(h200):
    gpus = [{"index": 0, "minor": 0, "uuid": UUID, "bus": "0000:00:06.0", "mig": []},
            {"index": 1, "minor": 0, "uuid": UUID, "bus": "0000:00:07.0", "mig": []}]
    spec, info = build_spec(root=h200, gpus=gpus, library_dirs=["/usr/local/nvidia/lib64"])
    assert info["device_names"] == ["0", UUID, "1", "all"]
    assert any(repr(UUID) in w and "0000:00:07.0" in w for w in info["warnings"]), info["warnings"]


def test_mig_directories_sort_by_number(h200):
    base = h200 + "/proc/driver/nvidia/capabilities/gpu0/mig"
    for gi in (10, 2, 1):
        _touch(base + "/gi%d/access" % gi, "DeviceFileMinor: %d\n" % (gi * 10))
        _touch(base + "/gi%d/ci0/access" % gi, "DeviceFileMinor: %d\n" % (gi * 10 + 1))
    gpus = gpus_from_proc(h200)
    assert [(m["gi"], m["gi_cap"], m["ci_cap"]) for m in gpus[0]["mig"]] == [(1, 10, 11), (2, 20, 21), (10, 100, 101)]


@pytest.mark.parametrize("version", ["580.1/../../../../etc", "580.*", "\u0665\u0668\u0660.1", "580.95.05\nx", "580"])
def test_a_driver_version_that_is_no_version_is_not_used(tmp_path, version):
    """The version names library files, firmware directories and a hook argument: only digits and dots."""
    root = str(tmp_path)
    _touch(root + "/sys/module/nvidia/version", version + "\n")
    with pytest.raises(CdiError, match="no NVIDIA driver found") as exc:
        build_spec(root=root)
    assert repr(version) in str(exc.value)
