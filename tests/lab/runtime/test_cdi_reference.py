# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""cdi_spec output loaded by the reference CDI Go library (what containerd / CRI-O / podman use)."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import CACHE

VALIDATOR = os.path.join(CACHE, "runtime", "cdivalidate", "cdivalidate")


def h200_like_root(root, mig=False, hook=False):
    base = root / "proc/driver/nvidia"
    (base / "gpus/0000:00:06.0").mkdir(parents=True)
    (base / "version").write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n")
    (base / "gpus/0000:00:06.0/information").write_text(
        "Model: \t NVIDIA H200\nGPU UUID: \t GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8\nBus Location: \t 0000:00:06.0\nDevice Minor: \t 0\n")
    (root / "dev/nvidia-caps").mkdir(parents=True)
    for n in ("nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap2"):
        (root / "dev" / n).write_text("")
    lib = root / "usr/local/nvidia/lib64"
    lib.mkdir(parents=True)
    for name in ("libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler"):
        (lib / ("%s.so.580.159.04" % name)).write_text("ELF")
        os.symlink("%s.so.580.159.04" % name, str(lib / ("%s.so.1" % name)))
    (root / "usr/local/nvidia/bin").mkdir(parents=True)
    (root / "usr/local/nvidia/bin/nvidia-smi").write_text("ELF")
    if mig:
        for gi, ci, a, b in ((1, 0, 12, 13), (2, 0, 21, 22)):
            d = base / ("capabilities/gpu0/mig/gi%d" % gi)
            (d / ("ci%d" % ci)).mkdir(parents=True)
            (d / "access").write_text("DeviceFileMinor: %d\n" % a)
            (d / ("ci%d" % ci) / "access").write_text("DeviceFileMinor: %d\n" % b)
    if hook:
        (root / "usr/bin").mkdir(parents=True)
        (root / "usr/bin/nvidia-cdi-hook").write_text("ELF")
    return str(root)


@pytest.mark.parametrize("case", ["plain.yaml", "mig-hooks.yaml", "uuid-only.json"])
def test_reference_library_loads_the_spec(ansible, tmp_path, case):
    if not os.path.exists(VALIDATOR):
        pytest.fail("no %s: run `make runtime-cdivalidate`" % VALIDATOR)
    root = h200_like_root(tmp_path / "root", mig="mig" in case, hook="hooks" in case)
    name = "nvidia." + case.split(".")[1]
    path = os.path.join(root, "etc", "cdi", name)       # cdi_spec writes path under root (0.3.0)
    args = {"path": "/etc/cdi/" + name, "root": root, "library_dirs": ["/usr/local/nvidia/lib64"]}
    if "uuid-only" in case:
        args["device_name_strategy"] = ["uuid"]
    res = ansible.module("gpuops.nvidia.cdi_spec", args)
    assert res["changed"] and not res.get("failed"), res
    proc = subprocess.run([VALIDATOR, path], capture_output=True, text=True)
    out = json.loads(proc.stdout)
    assert proc.returncode == 0 and "error" not in out, out
    assert out["minimumVersion"] == res["cdi_version"] == out["cdiVersion"]
    assert out["devices"] == ["nvidia.com/gpu=" + n for n in res["devices"]]
    if "mig" in case:
        assert out["devices"][:2] == ["nvidia.com/gpu=0:0", "nvidia.com/gpu=0:1"]
    if "uuid-only" in case:
        assert res["cdi_version"] == "0.3.0"
