# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The built Galaxy tarball: galaxy-importer accepts it with no error and no warning, it holds no
caches or test output, and a play runs from the collection installed out of it.

Runs under `make test-galaxy` (GPUOPS_GALAXY_TARBALL); skipped otherwise.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import sys
import tarfile

import yaml
from conftest import BIN, REPO, ansible_env, run, summary

IMPORTER_CONFIG = os.path.join(os.path.dirname(__file__), "galaxy-importer.cfg")
# Nothing of these may be in the tarball (caches, test output, lab and development tooling).
FORBIDDEN = [
    "*/__pycache__/*", "__pycache__/*", "*.pyc", ".pytest_cache*", ".ruff_cache*", "tests/output*", ".lab*",
    "build/*", ".gpu-bundle*", "gpu-lane-results*", ".venv*", ".collections*", ".git/*", ".ci*", "*.tar.gz",
    "tests/lab*", "benchmarks*", "molecule*", "mk/*", "Makefile", "importer_result.json",
]
# What may sit at the top of the tarball; anything else is a stray file of the work tree (a test
# that wrote into the repository, an editor file) that build_ignore would have let through.
TOP_LEVEL = {"CHANGELOG.rst", "FILES.json", "LICENSE", "MANIFEST.json", "README.md", "changelogs", "docs",
             "inventories", "meta", "playbooks", "plugins", "roles", "tests"}
REQUIRED = ["LICENSE", "README.md", "CHANGELOG.rst", "changelogs/changelog.yaml", "meta/runtime.yml",
            "MANIFEST.json", "FILES.json"]


def test_tarball_contents(tarball):
    with tarfile.open(tarball) as tf:
        names = [m.name.lstrip("./") for m in tf.getmembers()]
    bad = sorted(n for n in names if any(fnmatch.fnmatch(n, p) for p in FORBIDDEN))
    assert not bad, "caches or test output in the tarball:\n" + "\n".join(bad)
    stray = sorted({n.split("/")[0] for n in names} - TOP_LEVEL)
    assert not stray, "unexpected top-level entries in the tarball (stray files in the work tree?): %s" % stray
    missing = [n for n in REQUIRED if n not in names]
    assert not missing, missing
    roles = {n.split("/")[1] for n in names if n.startswith("roles/") and n.count("/") >= 2}
    assert roles and all("roles/%s/README.md" % r in names for r in roles)
    size = os.path.getsize(tarball)
    summary("tarball %s: %d bytes (%.1f KiB), %d entries" % (os.path.basename(tarball), size, size / 1024.0, len(names)))
    assert size < 2 * 1024 * 1024, "the tarball grew past 2 MiB: look for data that should be in build_ignore"


def test_galaxy_importer_clean(tarball, workdir):
    """galaxy-importer (Galaxy's own upload checks: ansible-doc, ansible-lint, README/LICENSE/changelog
    presence, sanity ignore files) on the tarball: 0 errors, 0 warnings."""
    cwd = os.path.join(workdir, "importer")
    os.makedirs(cwd, exist_ok=True)
    env = ansible_env(os.path.join(workdir, "importer-empty"), cwd)
    env["GALAXY_IMPORTER_CONFIG"] = IMPORTER_CONFIG
    env["GALAXY_IMPORTER_TMP_ROOT_DIR"] = cwd
    res = run([sys.executable, "-m", "galaxy_importer.main", os.path.abspath(tarball)], env, cwd, timeout=600)
    out = res.stdout + res.stderr
    errors = [ln for ln in out.splitlines() if re.match(r"^(ERROR|CRITICAL)\b", ln)]
    warnings = [ln for ln in out.splitlines() if re.match(r"^WARNING\b", ln)]
    version = re.search(r"Importing with galaxy-importer (\S+)", out)
    summary("galaxy-importer %s: %d error(s), %d warning(s), rc %d%s" % (
        version.group(1) if version else "?", len(errors), len(warnings), res.returncode,
        "".join("\n  " + ln for ln in errors + warnings)))
    assert res.returncode == 0 and "Importer processing completed successfully" in out, out
    assert not errors and not warnings, "galaxy-importer reported:\n" + "\n".join(errors + warnings)
    with open(os.path.join(cwd, "importer_result.json")) as fh:
        result = json.load(fh)
    contents = {(c["content_type"], c["name"]) for c in result["contents"]}
    assert ("role", "discovery") in contents and ("module", "gpu_facts") in contents
    assert ("filter", "k8s_image") in contents


def test_installed_version(installed, tarball):
    with open(os.path.join(installed, "ansible_collections", "gpuops", "nvidia", "MANIFEST.json")) as fh:
        info = json.load(fh)["collection_info"]
    with open(os.path.join(REPO, "galaxy.yml")) as fh:
        assert info["version"] == yaml.safe_load(fh)["version"]
    assert os.path.basename(tarball) == "gpuops-nvidia-%s.tar.gz" % info["version"]


def test_play_from_installed_collection(installed, workdir):
    """The collection's discovery playbook and its filters, from the installed copy only."""
    sys.path.insert(0, os.path.join(REPO, "tests", "fixtures", "noderoots"))
    import noderoots

    roots = os.path.join(workdir, "roots")
    for name in ("h200", "no-gpu"):
        noderoots.build(name, os.path.join(roots, name))
    inventory = os.path.join(workdir, "hosts.yml")
    with open(inventory, "w") as fh:
        yaml.safe_dump({"all": {
            "hosts": {
                "h200": {"gpu_facts_root": os.path.join(roots, "h200"), "gpu_workload": "container", "smoke_expected_gpus": 1},
                "cpu": {"gpu_facts_root": os.path.join(roots, "no-gpu"), "smoke_expected_gpus": 0},
            },
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        }}, fh)
    env = ansible_env(installed, workdir)
    res = run([os.path.join(BIN, "ansible-doc"), "-t", "module", "--json", "gpuops.nvidia.gpu_facts"], env, workdir)
    assert res.returncode == 0, res.stderr
    filename = json.loads(res.stdout)["gpuops.nvidia.gpu_facts"]["doc"]["filename"]
    assert filename.startswith(installed), "gpu_facts resolved outside the installed copy: " + filename
    play = os.path.join(os.path.dirname(__file__), "smoke.yml")
    res = run([os.path.join(BIN, "ansible-playbook"), "-i", inventory, play], env, workdir)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
    recap = res.stdout[res.stdout.rfind("PLAY RECAP"):]
    assert re.search(r"h200\s+: ok=\d+ .*failed=0", recap) and re.search(r"cpu\s+: ok=\d+ .*failed=0", recap), recap
    summary("play from the installed collection: gpuops.nvidia.discovery + filters, rc 0\n  " +
            "\n  ".join(ln.strip() for ln in recap.splitlines()[1:] if ln.strip()))

