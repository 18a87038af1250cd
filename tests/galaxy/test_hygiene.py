# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Collection hygiene Galaxy users rely on: license, SPDX headers, a released version with its
changelog, build_ignore."""
from __future__ import annotations

import glob
import os
import re
import sys

import yaml
from conftest import REPO

SPDX = "# SPDX-License-Identifier: Apache-2.0"


def _galaxy():
    with open(os.path.join(REPO, "galaxy.yml")) as fh:
        return yaml.safe_load(fh)


def test_license_file_is_apache_2():
    assert _galaxy()["license"] == ["Apache-2.0"]
    with open(os.path.join(REPO, "LICENSE")) as fh:
        text = fh.read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text


def test_spdx_header_in_every_plugin():
    files = sorted(glob.glob(os.path.join(REPO, "plugins", "**", "*.py"), recursive=True))
    assert files
    missing = []
    for path in files:
        with open(path) as fh:
            head = [next(fh, "") for _ in range(10)]
        if SPDX + "\n" not in head:
            missing.append(os.path.relpath(path, REPO))
    assert not missing, "no %r in the first lines of:\n%s" % (SPDX, "\n".join(missing))


def test_version_is_released_or_the_next_release():
    """galaxy.yml's version is a released one with its CHANGELOG.rst section and no fragment waiting, or the next
    release the waiting fragments go into (tools/release.py's rules, also `make release`'s first check)."""
    version = _galaxy()["version"]
    assert re.match(r"^\d+\.\d+\.\d+$", version), version
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import release  # pylint: disable=import-outside-toplevel

    released, fragments = release.released_versions(REPO), release.pending_fragments(REPO)
    assert not release.tree_problems(version, released, fragments)
    if version in released:
        with open(os.path.join(REPO, "changelogs", "changelog.yaml")) as fh:
            assert ((yaml.safe_load(fh) or {}).get("releases") or {})[version].get("release_date")
        with open(os.path.join(REPO, "CHANGELOG.rst")) as fh:
            assert "\nv%s\n" % version in fh.read()
    else:
        assert fragments, "galaxy.yml's version %s is not released and no fragment waits for it" % version


def test_build_ignore_keeps_caches_and_test_output_out():
    ignore = set(_galaxy()["build_ignore"])
    for entry in (".gpu-bundle", "gpu-lane-results", "tests/output", ".pytest_cache", "__pycache__", "*.pyc",
                  ".lab", "build", ".venv", ".collections", "tests/lab", "tests/galaxy", "*.tar.gz"):
        assert entry in ignore, entry
