# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Releases (issue 33): galaxy.yml never names a released version while changelog fragments wait (they would ship
in a tarball that says they are not in it), and `make release` (mk/galaxy.mk, tools/release.py) refuses before
anything changes when it would, then writes the changelog and builds the tarball of the version."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile

import pytest
import yaml

from conftest import needs, tree_bytes

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# galaxy.yml, tools/ and mk/ are the repository's, not in the Galaxy tarball
pytestmark = needs("galaxy.yml", "tools/release.py", "mk/galaxy.mk", "Makefile")
sys.path.insert(0, os.path.join(REPO, "tools"))
import release  # noqa: E402

BIN = os.path.dirname(sys.executable)


def test_galaxy_version_is_not_released_while_fragments_wait():
    """The rule on the work tree itself: bump galaxy.yml in the change that adds the first fragment after a release."""
    version = release.read_version(REPO)
    problems = release.tree_problems(version, release.released_versions(REPO), release.pending_fragments(REPO))
    assert problems == []


def test_make_reads_the_version_yaml_reads():
    """The Makefile's VERSION (sed over galaxy.yml, names the tarball) is the version YAML gives."""
    # run from inside `make test-unit` too: no "Entering/Leaving directory" lines from the outer make's flags
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    out = subprocess.run(["make", "-s", "--no-print-directory", "-C", REPO, "--eval",
                          "print-version: ; @echo VERSION=$(VERSION)", "print-version"],
                         capture_output=True, text=True, timeout=120, check=False, env=env)
    assert out.returncode == 0, out.stderr
    assert [ln for ln in out.stdout.splitlines() if ln.startswith("VERSION=")] == ["VERSION=" + release.read_version(REPO)]


FRAG_MINOR = {"a.yml": ["minor_changes"]}
FRAG_BUG = {"b.yml": ["bugfixes"], "t.yml": ["trivial"]}
FRAG_BREAKING = {"c.yml": ["breaking_changes", "minor_changes"]}
RELEASED = {"0.1.0": {}, "0.2.0": {}}


@pytest.mark.parametrize("version,released,fragments,expected", [
    # the trap: a released version while fragments wait
    ("0.2.0", RELEASED, FRAG_MINOR, "0.2.0 is already released"),
    ("0.1.0", RELEASED, FRAG_BUG, "0.1.0 is already released"),
    # older than the newest release
    ("0.1.5", RELEASED, FRAG_BUG, "older than the newest release 0.2.0"),
    # too small a step for what the fragments say
    ("0.2.1", RELEASED, FRAG_MINOR, "a patch step from 0.2.0, but fragments (a.yml) need a minor step: use 0.3.0"),
    ("0.2.1", RELEASED, FRAG_BREAKING, "need a minor step: use 0.3.0"),
    ("1.0.1", {"1.0.0": {}}, FRAG_BREAKING, "need a major step: use 2.0.0"),
    ("1.1.0", {"1.0.0": {}}, FRAG_BREAKING, "a minor step from 1.0.0, but fragments (c.yml) need a major step"),
    # not a version
    ("0.3", RELEASED, FRAG_MINOR, "is not a semantic version"),
    ("v0.3.0", RELEASED, FRAG_MINOR, "is not a semantic version"),
    ("0.3.0\n", RELEASED, FRAG_MINOR, "is not a semantic version"),
])
def test_tree_problems_refused(version, released, fragments, expected):
    problems = release.tree_problems(version, released, fragments)
    assert len(problems) == 1 and expected in problems[0], problems
    assert release.release_problems(version, released, fragments) == problems


@pytest.mark.parametrize("version,released,fragments", [
    ("0.3.0", RELEASED, FRAG_MINOR),
    ("0.3.0", RELEASED, FRAG_BREAKING),       # 0.x: a breaking change is a minor step (semver item 4)
    ("0.2.1", RELEASED, FRAG_BUG),
    ("1.0.0", RELEASED, FRAG_BREAKING),
    ("0.3.0-rc1", RELEASED, FRAG_MINOR),
    ("0.1.0", {}, FRAG_MINOR),                # the first release
])
def test_releasable(version, released, fragments):
    assert release.tree_problems(version, released, fragments) == []
    assert release.release_problems(version, released, fragments) == []


def test_a_released_version_without_fragments_is_a_clean_tree_but_nothing_to_release():
    assert release.tree_problems("0.2.0", RELEASED, {}) == []
    assert release.release_problems("0.2.0", RELEASED, {}) == [
        "nothing to release: 0.2.0 is released and changelogs/fragments holds no fragment"]
    assert "holds no fragment for 0.3.0" in release.release_problems("0.3.0", RELEASED, {})[0]


def test_prerelease_sorts_before_its_release():
    assert "older than the newest release 0.3.0" in release.tree_problems("0.3.0-rc1", {"0.3.0": {}}, FRAG_BUG)[0]


def test_verify_problems():
    good = {"0.3.0": {"release_date": "2026-12-07"}}
    text = "Topics\n\nv0.3.0\n======\n"
    assert release.verify_problems("0.3.0", good, {}, text) == []
    assert release.verify_problems("0.3.0", {}, {}, text) == ["changelogs/changelog.yaml has no release 0.3.0"]
    assert release.verify_problems("0.3.0", {"0.3.0": {}}, {}, text) == [
        "release 0.3.0 in changelogs/changelog.yaml has no release_date"]
    assert release.verify_problems("0.3.0", good, {}, "v0.2.0\n") == ["CHANGELOG.rst has no section v0.3.0"]
    assert "fragments left" in release.verify_problems("0.3.0", good, FRAG_BUG, text)[0]


# -- a small collection tree, as the checks and `make release` see it ---------------------------------------------

def _tree(tmp_path, version, released=("0.2.0",), fragments=None):
    root = tmp_path / "coll"
    (root / "changelogs" / "fragments").mkdir(parents=True)
    (root / "mk").mkdir()
    (root / "tools").mkdir()
    (root / "meta").mkdir()
    for rel in ("Makefile", "mk/galaxy.mk", "tools/release.py", "changelogs/config.yaml", "LICENSE"):
        shutil.copy(os.path.join(REPO, rel), str(root / rel))
    with open(os.path.join(REPO, "galaxy.yml")) as fh:
        galaxy = yaml.safe_load(fh)
    galaxy.update(version=version, dependencies={})
    (root / "galaxy.yml").write_text(yaml.safe_dump(galaxy, sort_keys=False))
    (root / "README.md").write_text("# gpuops.nvidia\n")
    (root / "meta" / "runtime.yml").write_text("---\nrequires_ansible: '>=2.19.0'\n")
    releases = {v: {"changes": {"release_summary": "Release %s." % v}, "release_date": "2026-12-03"} for v in released}
    changes = {"ancestor": None, "releases": releases}
    (root / "changelogs" / "changelog.yaml").write_text(yaml.safe_dump(changes))
    (root / "CHANGELOG.rst").write_text("gpuops.nvidia Release Notes\n\n" +
                                        "".join("v%s\n======\n\n" % v for v in released))
    for name, text in (fragments or {}).items():
        (root / "changelogs" / "fragments" / name).write_text(text)
    return root


FRAGMENT = "---\nminor_changes:\n  - gpu_facts - a new fact.\n"


def _make_release(root, *extra):
    venv = os.path.dirname(BIN)
    # -o: the venv's stamp is never remade from this tree (it has no requirements-dev.lock)
    return subprocess.run(["make", "-C", str(root), "release", "VENV=" + venv, "-o", os.path.join(venv, ".stamp"),
                           "RELEASE_DATE=2026-12-07"] + list(extra),
                          capture_output=True, text=True, timeout=300, check=False,
                          env=dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(root / ".none")))


def test_check_command(tmp_path, capsys):
    root = _tree(tmp_path, "0.2.0", fragments={"x.yml": FRAGMENT})
    assert release.main(["check"], repo=str(root)) == 1
    err = capsys.readouterr().err
    assert "0.2.0 is already released" in err and "x.yml" in err and "nothing was changed" in err
    root = _tree(tmp_path / "2", "0.3.0", fragments={"x.yml": FRAGMENT})
    assert release.main(["check", "--version", "0.3.0"], repo=str(root)) == 0
    assert capsys.readouterr().out == "0.3.0\n"
    assert release.main(["check", "--version", "0.3.0 # next"], repo=str(root)) == 1
    assert "make read version '0.3.0 # next' from galaxy.yml" in capsys.readouterr().err


def test_make_release_refuses_a_released_version_and_changes_nothing(tmp_path):
    root = _tree(tmp_path, "0.2.0", fragments={"x.yml": FRAGMENT})
    before = tree_bytes(root)
    res = _make_release(root)
    assert res.returncode != 0
    assert "galaxy.yml's version 0.2.0 is already released" in res.stderr, res.stdout + res.stderr
    assert "antsibull-changelog release" not in res.stdout      # refused before the first step that writes
    assert tree_bytes(root) == before


def test_make_release_writes_the_changelog_and_builds_the_tarball(tmp_path):
    root = _tree(tmp_path, "0.3.0", fragments={"x.yml": FRAGMENT})
    res = _make_release(root)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    text = (root / "CHANGELOG.rst").read_text()
    assert "\nv0.3.0\n" in text and "gpu_facts - a new fact." in text
    assert text.index("v0.3.0") < text.index("v0.2.0")
    changes = yaml.safe_load((root / "changelogs" / "changelog.yaml").read_text())["releases"]
    assert changes["0.3.0"]["release_date"] == "2026-12-07"
    assert changes["0.3.0"]["changes"]["minor_changes"] == ["gpu_facts - a new fact."]
    assert os.listdir(str(root / "changelogs" / "fragments")) == []
    tarball = root / "build" / "release" / "gpuops-nvidia-0.3.0.tar.gz"
    assert tarball.exists(), res.stdout
    with tarfile.open(str(tarball)) as tf:
        names = tf.getnames()
        manifest = tf.extractfile("MANIFEST.json").read().decode()
    assert '"version": "0.3.0"' in manifest
    assert "CHANGELOG.rst" in names and not [n for n in names if n.startswith(("tools", "mk", "Makefile"))]
    # and a second `make release` has nothing to release
    res = _make_release(root)
    assert res.returncode != 0 and "nothing to release: 0.3.0 is released" in res.stderr
