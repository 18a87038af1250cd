# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""gpu_facts' runtime subset: the container runtimes found on a host (daemon binary, live API socket), by file type
only -- a FIFO, a regular file or a link where the socket should be is not a running runtime, and nothing is opened."""
from __future__ import annotations

import os
import socket
import tempfile

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils import _gpu_facts, _host


@pytest.fixture
def root():
    # a short path: a Unix socket's path is limited to 107 bytes
    with tempfile.TemporaryDirectory(prefix="rt", dir="/tmp") as path:
        yield path


def touch(root, rel, mode=0o755):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8"):
        pass
    os.chmod(path, mode)
    return path


def listen(root, rel):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(1)
    return sock


def test_nothing_found_on_a_bare_root(root):
    assert _host.read_container_runtimes(root) == []


def test_running_installed_and_impostors(root):
    touch(root, "usr/bin/containerd")
    live = listen(root, "run/containerd/containerd.sock")
    touch(root, "usr/local/bin/crio")                    # installed, not running
    os.makedirs(os.path.join(root, "var/run"), exist_ok=True)
    os.mkfifo(os.path.join(root, "var/run/docker.sock"))  # a FIFO where docker's socket goes: not a socket, not read
    os.makedirs(os.path.join(root, "run/crio"))
    os.symlink("/run/containerd/containerd.sock", os.path.join(root, "run/crio/crio.sock"))  # a link is not one either
    try:
        found = _host.read_container_runtimes(root)
    finally:
        live.close()
    assert found == [
        {"name": "containerd", "binary": "/usr/bin/containerd", "socket": "/run/containerd/containerd.sock", "running": True},
        {"name": "crio", "binary": "/usr/local/bin/crio", "socket": None, "running": False},
    ]


def test_the_runtime_subset_is_gathered_and_only_on_request(root):
    touch(root, "usr/bin/dockerd")
    facts, _warnings = _gpu_facts.gather(root, ("runtime",))
    assert facts["container_runtimes"] == [{"name": "docker", "binary": "/usr/bin/dockerd", "socket": None, "running": False}]
    facts, _warnings = _gpu_facts.gather(root, ("kernel",))
    assert "container_runtimes" not in facts
    assert "runtime" in _gpu_facts.SUBSETS
