# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""meta/execution-environment.yml: `ansible-builder create` makes a build context from it (no container
build here), and ansible-builder's introspection finds the collection's Python and system needs."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import yaml
from conftest import REPO, VENV_BIN

META = os.path.join(REPO, "meta")


def lines(path):
    with open(path) as fh:
        return [ln.split("#")[0].strip() for ln in fh if ln.split("#")[0].strip()]


def test_builder_create_makes_the_build_context(tmp_path):
    with open(os.path.join(META, "execution-environment.yml")) as fh:
        ee = yaml.safe_load(fh)
    assert ee["version"] == 3
    deps = ee["dependencies"]
    # paths relative to the collection root (as introspection reads them): lay the files out so
    os.makedirs(tmp_path / "meta")
    shutil.copy(os.path.join(META, "execution-environment.yml"), tmp_path / "execution-environment.yml")
    for key in ("python", "system", "galaxy"):
        shutil.copy(os.path.join(REPO, deps[key]), tmp_path / deps[key])
    res = subprocess.run([os.path.join(VENV_BIN, "ansible-builder"), "create", "-f", "execution-environment.yml",
                          "-c", "context", "--output-filename", "Containerfile"],
                         cwd=str(tmp_path), capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    ctx = tmp_path / "context"
    containerfile = (ctx / "Containerfile").read_text()
    assert 'EE_BASE_IMAGE="%s"' % ee["images"]["base_image"]["name"] in containerfile
    assert "ansible-galaxy collection install" in containerfile or "check_galaxy" in containerfile
    assert lines(ctx / "_build" / "requirements.txt") == lines(os.path.join(REPO, deps["python"]))
    assert lines(ctx / "_build" / "bindep.txt") == lines(os.path.join(REPO, deps["system"]))
    galaxy = yaml.safe_load((ctx / "_build" / "requirements.yml").read_text())
    assert {c["name"] for c in galaxy["collections"]} == {"gpuops.nvidia", "kubernetes.core"}
    assert {"kubernetes>=24.2.0", "kubernetes-validate>=1.28.0"} <= set(lines(os.path.join(REPO, deps["python"])))


def test_introspection_finds_the_collections_needs():
    """What ansible-builder reads when gpuops.nvidia is one collection of a larger EE."""
    collections = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
    import ansible_builder

    script = os.path.join(os.path.dirname(ansible_builder.__file__), "_target_scripts", "introspect.py")
    res = subprocess.run([sys.executable, script, "introspect", "--sanitize", collections],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    found = yaml.safe_load(res.stdout)
    assert any(p.startswith("kubernetes>=24.2.0") and "gpuops.nvidia" in p for p in found["python"]), found
    assert any(s.startswith("openssh-client") and "gpuops.nvidia" in s for s in found["system"]), found
