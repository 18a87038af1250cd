# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""The container_toolkit role: handler restarts the runtime once, a second run changes nothing."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

HERE = os.path.dirname(__file__)


def play(ansible, daemon):
    cmd = [os.path.join(HERE, "..", "..", "..", ".venv", "bin", "ansible-playbook"), "-i", "localhost,",
           os.path.join(HERE, "role.yml"), "-e", json.dumps({"lab_dir": daemon.dir, "lab_binary": daemon.binary,
                                                              "lab_ctr": daemon.ctr})]
    proc = subprocess.run(cmd, env=ansible.env, capture_output=True, text=True)
    data = json.loads(proc.stdout[proc.stdout.find("{"):])
    assert proc.returncode == 0, proc.stdout[-4000:]
    return data["stats"]["localhost"], data


def test_role_restarts_once(ansible, containerd):
    if containerd.label != "containerd-1.6":
        pytest.skip("one containerd is enough for the role")
    containerd.write_config(containerd.default_config())
    containerd.start()
    stats, _ = play(ansible, containerd)
    assert stats["changed"] == 2, stats           # the check + the handler
    assert containerd.restarts() == 1 and containerd.cri_ok()
    rt = containerd.dump()["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert rt["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    stats, _ = play(ansible, containerd)
    assert stats["changed"] == 0, stats
    assert containerd.restarts() == 1
