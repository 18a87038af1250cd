# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""The CRI-O drop-in read back by a real `crio config` (CRI-O built from Go modules), when it built."""
from __future__ import annotations

import glob
import os
import subprocess
import tomllib

import pytest

from conftest import CACHE

CRIO = sorted(glob.glob(os.path.join(CACHE, "runtime", "crio-v*", "bin", "crio")))


@pytest.mark.skipif(not CRIO, reason="CRI-O did not build here; judged by parsing (test_files.py)")
def test_crio_config_sees_the_runtime(ansible, tmp_path):
    confd = tmp_path / "crio.conf.d"
    confd.mkdir()
    (confd / "10-site.toml").write_text("[crio.runtime]\nlog_level = \"debug\"\n")
    drop = str(confd / "99-nvidia.toml")
    runc = "/usr/sbin/runc" if os.path.exists("/usr/sbin/runc") else "/usr/bin/runc"
    res = ansible.module("gpuops.nvidia.container_runtime", {
        "runtime": "crio", "config_path": drop, "runtime_path": runc, "set_as_default": True, "restart_mode": "none"})
    assert res["changed"] and not res.get("failed"), res
    proc = subprocess.run([CRIO[-1], "--config", "", "--config-dir", str(confd), "--root", str(tmp_path / "root"),
                           "--runroot", str(tmp_path / "run"), "config"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout[proc.stdout.find("["):] if not proc.stdout.lstrip().startswith(("[", "#")) else proc.stdout
    data = tomllib.loads(text)
    rt = data["crio"]["runtime"]
    assert rt["default_runtime"] == "nvidia"
    assert rt["runtimes"]["nvidia"]["runtime_path"] == runc
    assert rt["runtimes"]["nvidia"]["runtime_type"] == "oci"
    assert rt["log_level"] == "debug"          # the other drop-in still applies
