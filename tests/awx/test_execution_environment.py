# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""meta/execution-environment.yml: `ansible-builder create` makes a build context from it (no container
build here), and ansible-builder's introspection finds the collection's Python and system needs."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import REPO, VENV_BIN

META = os.path.join(REPO, "meta")


def lines(path):
    with open(path) as fh:
        return [ln.split("#")[0].strip() for ln in fh if ln.split("#")[0].strip()]


def test_builder_create_makes_the_build_context(tmp_path):
    ee = ee_definition()
    assert ee["version"] == 3
    deps = ee["dependencies"]
    # paths relative to the collection root (as introspection reads them): lay the files out so
    os.makedirs(tmp_path / "meta")
    shutil.copy(os.path.join(META, "execution-environment.yml"), tmp_path / "execution-environment.yml")
    for key in ("python", "system", "galaxy"):
        shutil.copy(os.path.join(REPO, deps[key]), tmp_path / deps[key])
    # as make ee-context runs it: ansible-builder's default file name (execution-environment.yml) and output
    res = subprocess.run([os.path.join(VENV_BIN, "ansible-builder"), "create", "-c", "context"],
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
    assert "helm version --short" in containerfile and HELM_URL in containerfile


HELM_URL = "https://get.helm.sh/helm-${HELM_VERSION}-linux-${arch}.tar.gz"


def ee_definition():
    with open(os.path.join(META, "execution-environment.yml")) as fh:
        return yaml.safe_load(fh)


def helm_step():
    """The helm step of additional_build_steps: {ARG name: value}, the RUN command."""
    steps = ee_definition()["additional_build_steps"]["append_final"]
    args = dict(s[len("ARG "):].split("=", 1) for s in steps if s.startswith("ARG "))
    [run] = [s for s in steps if s.startswith("RUN ")]
    return args, run[len("RUN "):]


def test_the_ee_carries_what_the_roles_call():
    """helm for kubernetes.core.helm (roles/gpu_operator), the kubernetes library for kubernetes.core and the
    collection's own k8s modules, nvidia-ml-py for pynvml (gpu_facts on the host the EE runs on)."""
    reqs = {re.split(r"[<>=!~ \[]", ln, maxsplit=1)[0].lower() for ln in lines(os.path.join(META, "ee-requirements.txt"))}
    assert {"kubernetes", "kubernetes-validate", "nvidia-ml-py", "pyyaml"} <= reqs
    with open(os.path.join(REPO, "roles", "gpu_operator", "tasks", "main.yml")) as fh:
        assert "kubernetes.core.helm" in fh.read()
    args, run = helm_step()
    assert re.fullmatch(r"v3\.\d+\.\d+", args["HELM_VERSION"])
    for arch in ("AMD64", "ARM64"):
        assert re.fullmatch(r"[0-9a-f]{64}", args["HELM_SHA256_" + arch]), arch
    # the version the cluster lane runs kubernetes.core.helm with
    with open(os.path.join(REPO, "tests", "lab", "cluster", "build.sh")) as fh:
        assert "HELM_VERSION=${HELM_VERSION:-%s}" % args["HELM_VERSION"] in fh.read()
    assert "--connect-timeout" in run and "--max-time" in run  # every download has a timeout
    assert run.index("sha256sum -c") < run.index("tar -xzf") < run.index("install -m 0755")
    bindep = " ".join(lines(os.path.join(META, "bindep.txt")))
    for tool in ("curl", "tar", "gzip"):
        assert re.search(r"\b%s\b" % tool, bindep), tool


def _fake_helm_archive(tmp_path, arch):
    """A stand-in release archive (linux-<arch>/helm, a script) and a curl that serves it from disk."""
    import tarfile

    src = tmp_path / ("linux-%s" % arch)
    src.mkdir()
    (src / "helm").write_text("#!/bin/sh\necho v3.0.0+stand-in\n")
    (src / "helm").chmod(0o755)
    archive = tmp_path / "release.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname=src.name)
    shutil.rmtree(src)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "curl").write_text('#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done\ncp %s "$2"\n' % archive)
    (bindir / "curl").chmod(0o755)
    return archive, bindir


def _run_helm_step(tmp_path, args, run, bindir):
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    (root / "tmp").mkdir()
    script = (run.replace("/usr/local/bin/helm", "@HELM@").replace("/tmp", str(root / "tmp"))
              .replace("@HELM@", str(root / "bin" / "helm")))
    env = dict(os.environ, PATH="%s:%s:%s" % (bindir, root / "bin", os.environ["PATH"]), **args)
    res = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False)
    return res, root / "bin" / "helm"


def test_the_helm_step_installs_only_the_archive_it_was_pinned_to(tmp_path):
    args, run = helm_step()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine)
    if arch is None:
        pytest.skip("no pinned helm for %s" % os.uname().machine)
    archive, bindir = _fake_helm_archive(tmp_path, arch)
    good = hashlib.sha256(archive.read_bytes()).hexdigest()

    wrong, installed = _run_helm_step(tmp_path / "a", args, run, bindir)   # the pinned sum: the stand-in is not it
    assert wrong.returncode != 0 and not installed.exists(), wrong.stdout + wrong.stderr
    right, installed = _run_helm_step(tmp_path / "b", dict(args, **{"HELM_SHA256_" + arch.upper(): good}), run, bindir)
    assert right.returncode == 0 and installed.exists(), right.stdout + right.stderr
    assert "v3.0.0+stand-in" in right.stdout


def test_image_tag_and_file_name_agree_with_awx_docs_and_make():
    """ansible-builder names the image from options.tags and reads execution-environment.yml by default: the tag
    is the collection's version, the image AWX's import file runs, the one docs/awx.md names."""
    tags = ee_definition()["options"]["tags"]
    with open(os.path.join(REPO, "galaxy.yml")) as fh:
        version = yaml.safe_load(fh)["version"]
    assert tags == ["quay.io/gpuops/gpuops-nvidia-ee:%s" % version], (
        "options.tags %s: the EE is tagged with galaxy.yml's version (%s); change it here, in awx/gpuops-nvidia.yml "
        "and in docs/awx.md" % (tags, version))
    with open(os.path.join(REPO, "awx", "gpuops-nvidia.yml")) as fh:
        [ee] = yaml.safe_load(fh)["execution_environments"]
    assert ee["image"] == tags[0]
    with open(os.path.join(REPO, "docs", "awx.md")) as fh:
        doc = fh.read()
    assert "`%s`" % tags[0] in doc and "ansible-builder build" in doc and "execution-environment.yml" in doc
    with open(os.path.join(REPO, "mk", "awx.mk")) as fh:
        mk = fh.read()
    assert "cp meta/execution-environment.yml build/ee/\n" in mk  # the default name, at the context's root
    assert "ansible-builder create -c context\n" in mk and "ansible-builder build -c context" in mk
    assert " -t " not in mk and " -f " not in mk  # the tag and file name are ansible-builder's own


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
