# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The ansible-core the collection claims is the one it is tested on (issue 16, part 2).

meta/runtime.yml ``requires_ansible``, every role's ``min_ansible_version``, the execution
environment's ansible-core and the README all name the ansible-core series pinned in
requirements-dev.txt (the one ``make test-sanity`` runs ansible-test from), and
tests/sanity/ignore-<version>.txt exists for that series and for no series below the floor.
"""
from __future__ import annotations

import glob
import os
import re

import pytest
import yaml

from conftest import needs

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# the pin and the sanity ignore files are the repository's, not in the Galaxy tarball
pytestmark = needs("requirements-dev.txt")


def _read(*parts):
    with open(os.path.join(REPO, *parts)) as fh:
        return fh.read()


def _series(version):
    return tuple(int(x) for x in version.split(".")[:2])


@pytest.fixture(scope="module")
def tested():
    """major.minor of the ansible-core pinned in requirements-dev.txt."""
    pins = re.findall(r"^ansible-core==([0-9]+\.[0-9]+)\.[0-9]+\s*$", _read("requirements-dev.txt"), re.M)
    assert len(pins) == 1, "requirements-dev.txt must pin ansible-core exactly once (ansible-core==X.Y.Z)"
    return _series(pins[0])


def test_requires_ansible_is_the_tested_series(tested):
    req = yaml.safe_load(_read("meta", "runtime.yml"))["requires_ansible"]
    m = re.fullmatch(r">=\s*([0-9]+\.[0-9]+)\.0(,\s*<\s*[0-9.]+)?", req)
    assert m, "requires_ansible must be '>=X.Y.0' (got %r)" % req
    assert _series(m.group(1)) == tested, (
        "requires_ansible %s claims a floor that is not the tested ansible-core %d.%d" % (req, *tested))


ROLES = sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
               for p in glob.glob(os.path.join(REPO, "roles", "*", "meta", "main.yml")))


@pytest.mark.parametrize("role", ROLES)
def test_role_min_ansible_version_is_the_floor(role, tested):
    info = yaml.safe_load(_read("roles", role, "meta", "main.yml"))["galaxy_info"]
    assert _series(str(info["min_ansible_version"])) == tested, (
        "roles/%s/meta/main.yml min_ansible_version %s != tested ansible-core %d.%d"
        % (role, info["min_ansible_version"], *tested))
    readme = _read("roles", role, "README.md")
    assert "ansible-core %d.%d or later" % tested in readme, "roles/%s/README.md: run python tests/galaxy/role_readmes.py" % role


def test_sanity_ignore_files_match_the_tested_series(tested):
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "tests", "sanity", "ignore-*.txt")))
    assert "ignore-%d.%d.txt" % tested in names, "ansible-test %d.%d reads tests/sanity/ignore-%d.%d.txt" % (tested * 2)
    below = [n for n in names if _series(n[len("ignore-"):-len(".txt")]) < tested]
    assert not below, "ignore files for ansible-core below the floor: %s" % ", ".join(below)


def test_execution_environment_and_readme_name_the_floor(tested):
    ee = yaml.safe_load(_read("meta", "execution-environment.yml"))
    core = ee["dependencies"]["ansible_core"]["package_pip"]
    m = re.search(r">=\s*([0-9]+\.[0-9]+)", core)
    assert m and _series(m.group(1)) == tested, "meta/execution-environment.yml ansible_core %r" % core
    assert "ansible-core %d.%d" % tested in _read("README.md")
