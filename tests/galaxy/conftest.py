# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Galaxy checks: the collection as Galaxy and its users see it.

Without GPUOPS_GALAXY_TARBALL the documentation tests read the work tree (through a temporary
ansible_collections/gpuops/nvidia link; GPUOPS_GALAXY_SOURCE names another tree) and the tarball
tests are skipped.
`make test-galaxy` builds the tarball, sets GPUOPS_GALAXY_TARBALL, and every test then reads the
collection installed from it with `ansible-galaxy collection install` into an empty directory.

Every ansible command runs with an empty ansible.cfg and ANSIBLE_COLLECTIONS_PATH set to that one
directory, so nothing is picked up from the repository's ansible.cfg, .collections or
~/.ansible (kubernetes.core, a dependency, comes from the `ansible` package in the venv).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.dirname(sys.executable)
TARBALL = os.environ.get("GPUOPS_GALAXY_TARBALL", "")
_SUMMARY = []


def summary(line):
    """A line for the end of the run (shown whatever pytest captures)."""
    _SUMMARY.append(line)


def pytest_terminal_summary(terminalreporter):
    if _SUMMARY:
        terminalreporter.section("galaxy")
        for line in _SUMMARY:
            terminalreporter.write_line(line)


def ansible_complaints(stderr):
    """The lines of an Ansible command's stderr that are Ansible's own word ([WARNING], [ERROR], [DEPRECATION
    WARNING], each with its continuation lines). A library's Python warning there (cryptography's deprecation of
    DSA, printed by every ansible command with cryptography 51) says nothing about the collection: it must not
    decide a test that is not about it."""
    out, inside = [], False
    for line in stderr.splitlines():
        if line.startswith("["):
            inside = bool(re.match(r"\[(WARNING|ERROR|DEPRECATION WARNING)\]", line))
        elif line and not line.startswith(" "):
            inside = False
        if inside:
            out.append(line)
    return out


def ansible_env(collections_path, tmp):
    cfg = os.path.join(tmp, "ansible.cfg")
    if not os.path.exists(cfg):
        with open(cfg, "w") as fh:
            fh.write("[defaults]\n")
    env = dict(os.environ)
    for key in list(env):
        if key.startswith("ANSIBLE_"):
            del env[key]
    env.update({
        "ANSIBLE_CONFIG": cfg,
        "ANSIBLE_COLLECTIONS_PATH": collections_path,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_LOCAL_TEMP": os.path.join(tmp, "ansible-tmp"),
        "ANSIBLE_HOME": os.path.join(tmp, "ansible-home"),
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PATH": BIN + os.pathsep + env.get("PATH", ""),
    })
    return env


def run(cmd, env, cwd, timeout=300):
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def tarball():
    if not TARBALL:
        pytest.skip("GPUOPS_GALAXY_TARBALL not set (make test-galaxy sets it)")
    assert os.path.isfile(TARBALL), TARBALL
    return TARBALL


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("galaxy"))


@pytest.fixture(scope="session")
def installed(tarball, workdir):
    """ansible-galaxy collection install of the tarball into an empty directory -> that directory."""
    path = os.path.join(workdir, "collections")
    os.makedirs(path)
    assert not os.listdir(path)
    env = ansible_env(path, workdir)
    # --no-deps: no Galaxy server to reach here; kubernetes.core comes from the ansible package
    res = run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--no-deps", "-p", path, tarball],
              env, workdir)
    assert res.returncode == 0, res.stdout + res.stderr
    coll = os.path.join(path, "ansible_collections", "gpuops", "nvidia")
    assert os.path.isfile(os.path.join(coll, "MANIFEST.json")), res.stdout + res.stderr
    summary("installed %s into %s" % (os.path.basename(tarball), path))
    return path


@pytest.fixture(scope="session")
def collections_path(request, workdir):
    """Where the collection under test is: installed from the tarball, or the work tree."""
    if TARBALL:
        return request.getfixturevalue("installed")
    path = os.path.join(workdir, "worktree")
    link = os.path.join(path, "ansible_collections", "gpuops", "nvidia")
    if not os.path.islink(link):
        os.makedirs(os.path.dirname(link))
        os.symlink(os.environ.get("GPUOPS_GALAXY_SOURCE", REPO), link)
    return path


@pytest.fixture(scope="session")
def collection_dir(collections_path):
    return os.path.join(collections_path, "ansible_collections", "gpuops", "nvidia")
