# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""Docker daemon.json, CRI-O drop-in and CDI spec through real Ansible runs.

These cases are judged by parsing the files the module wrote; the same files are
read back by real daemons in test_dockerd.py (dockerd) and test_crio.py (a running CRI-O, built
by `make runtime-crio`).
"""
from __future__ import annotations

import json
import os
import tomllib

import yaml

BIN = "/usr/bin/nvidia-container-runtime"


def run(ansible, args, **kw):
    return ansible.module("gpuops.nvidia.container_runtime", args, **kw)


def test_docker_daemon_json_merge(ansible, tmp_path):
    path = str(tmp_path / "daemon.json")
    site = {"log-driver": "journald", "registry-mirrors": ["https://mirror.example"],
            "runtimes": {"runsc": {"path": "/usr/bin/runsc"}}, "features": {"buildkit": True}}
    with open(path, "w") as f:
        json.dump(site, f, indent=2)
    args = {"runtime": "docker", "config_path": path, "restart_mode": "none", "set_as_default": True,
            "enable_cdi": True, "backup": True}
    res = run(ansible, args, diff=True)
    assert res["changed"] and not res.get("failed"), res
    assert os.path.exists(res["backup_files"][path])
    data = json.load(open(path))
    assert data["runtimes"] == {"runsc": {"path": "/usr/bin/runsc"}, "nvidia": {"path": BIN, "args": []}}
    assert data["default-runtime"] == "nvidia" and data["features"] == {"buildkit": True, "cdi": True}
    assert data["log-driver"] == "journald" and data["registry-mirrors"] == ["https://mirror.example"]
    assert open(path).read().startswith('{\n  "')  # the file's 2-space indent is kept
    assert not run(ansible, args)["changed"]


def test_docker_missing_file_and_check_mode(ansible, tmp_path):
    path = str(tmp_path / "etc" / "docker" / "daemon.json")
    args = {"runtime": "docker", "config_path": path, "restart_mode": "none"}
    res = run(ansible, args, check=True)
    assert res["changed"] and not os.path.exists(path)
    res = run(ansible, args)
    assert res["changed"] and json.load(open(path)) == {"runtimes": {"nvidia": {"path": BIN, "args": []}}}


def test_docker_bad_json_fails_before_writing(ansible, tmp_path):
    path = str(tmp_path / "daemon.json")
    with open(path, "w") as f:
        f.write('{"log-driver": "journald",}')
    res = run(ansible, {"runtime": "docker", "config_path": path, "restart_mode": "none"})
    assert res.get("failed") and "not valid JSON" in res["msg"], res
    assert open(path).read() == '{"log-driver": "journald",}'


def test_crio_drop_in(ansible, tmp_path):
    path = str(tmp_path / "crio.conf.d" / "99-nvidia.toml")
    args = {"runtime": "crio", "config_path": path, "restart_mode": "none", "set_as_default": True}
    res = run(ansible, args)
    assert res["changed"], res
    data = tomllib.loads(open(path).read())
    assert data == {"crio": {"runtime": {"default_runtime": "nvidia",
                                         "runtimes": {"nvidia": {"runtime_path": BIN, "runtime_type": "oci"}}}}}
    assert not run(ansible, args)["changed"]


def test_cdi_spec_on_synthetic_root(ansible, tmp_path):
    root = tmp_path / "root"
    (root / "proc/driver/nvidia/gpus/0000:00:06.0").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n")
    (root / "proc/driver/nvidia/gpus/0000:00:06.0/information").write_text(
        "Model: \t NVIDIA H200\nGPU UUID: \t GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8\nBus Location: \t 0000:00:06.0\nDevice Minor: \t 0\n")
    for n in ("nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        (root / "dev").mkdir(exist_ok=True)
        (root / "dev" / n).write_text("")
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.580.159.04").write_text("ELF")
    os.symlink("libcuda.so.580.159.04", str(lib / "libcuda.so.1"))
    path = str(root / "etc" / "cdi" / "nvidia.yaml")     # cdi_spec writes path under root (0.3.0)
    args = {"path": "/etc/cdi/nvidia.yaml", "root": str(root)}
    res = ansible.module("gpuops.nvidia.cdi_spec", args)
    assert res["changed"] and res["source"] == "proc" and res["cdi_version"] == "0.5.0" and res["path"] == path, res
    spec = yaml.safe_load(open(path))
    assert [d["name"] for d in spec["devices"]] == ["0", "GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8", "all"]
    assert not ansible.module("gpuops.nvidia.cdi_spec", args)["changed"]
    (tmp_path / "empty").mkdir()
    res = ansible.module("gpuops.nvidia.cdi_spec", {"path": "/etc/cdi/nvidia.yaml", "root": str(tmp_path / "empty")})
    assert res.get("failed") and "no NVIDIA driver" in res["msg"]
    res = ansible.module("gpuops.nvidia.cdi_spec", {"path": "/etc/cdi/nvidia.yaml", "root": str(tmp_path / "missing")})
    assert res.get("failed") and "not a directory" in res["msg"]
    assert ansible.module("gpuops.nvidia.cdi_spec", dict(args, state="absent"))["changed"]
    assert not os.path.exists(path)
