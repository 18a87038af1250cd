# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""containerd versions live in one data file (issue 17): plugins/module_utils/_containerd_releases.py.

The code takes its CRI plugin table from it, the build scripts read the lanes' version from it
(docs/render_data.py --get), docs/runtime.md's tables are generated from it, and no other tracked file
names a lane's exact version (measured results excepted: they record what ran)."""
from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys

import pytest
import yaml

from conftest import needs

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SPEC = importlib.util.spec_from_file_location("render_data", os.path.join(REPO, "docs", "render_data.py"))
render = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(render)
DATA = render.containerd()
DATA_FILE = render.CONTAINERD_DATA


def _versions(numbers):
    numbers = sorted(numbers)
    return "%s or %s" % (", ".join(str(n) for n in numbers[:-1]), numbers[-1])


def test_the_data_file_is_data_only():
    """module_utils runs on targets; the build scripts exec it with a bare python3: no imports, no code."""
    with open(os.path.join(REPO, DATA_FILE)) as fh:
        tree = ast.parse(fh.read())
    kinds = {type(node).__name__ for node in tree.body}
    assert kinds <= {"Expr", "Assign"}, kinds
    for node in tree.body:
        if isinstance(node, ast.Assign):
            ast.literal_eval(node.value)


def test_the_data_hangs_together():
    versions = [c["version"] for c in DATA.CONFIG_VERSIONS]
    assert versions == sorted(set(versions))
    releases = [tuple(int(x) for x in r["release"].split(".")) for r in DATA.RELEASES]
    assert releases == sorted(set(releases)), "RELEASES: one row per release line, oldest first"
    written = [r["config_version"] for r in DATA.RELEASES]
    assert written == sorted(written) and set(written) <= set(versions)
    for r in DATA.RELEASES:
        assert r["imports"] in ("replace", "merge") and r["cdi"] in ("none", "enable_cdi", "default"), r
        if r["lane"]:
            assert set(r["lane"]) == {"name", "version", "source"}, r
            assert r["lane"]["version"].lstrip("v").startswith(r["release"] + "."), r
    assert sorted(render.lane_versions(DATA)) == ["debian", "go"]
    assert re.match(r"^v\d+\.\d+\.\d+$", render.lane("go", DATA)["lane"]["version"]), "a Go module version: vX.Y.Z"


def test_the_module_reads_its_table_from_the_data():
    """The values the module had before the data file (and the fixtures' captured daemons) still hold."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils import _container_runtime as cr
    assert cr.CRI_PLUGIN == {
        1: ("plugins", "cri"),
        2: ("plugins", "io.containerd.grpc.v1.cri"),
        3: ("plugins", "io.containerd.cri.v1.runtime"),
        4: ("plugins", "io.containerd.cri.v1.runtime"),
    }
    assert cr._EXPECTED_VERSIONS == "1, 2, 3 or 4"
    assert cr._DROP_IN_VERSIONS == {2, 3, 4} and cr._ENABLE_CDI_VERSIONS == {1, 2}
    # the captured default configs: 1.6 writes 2, 2.4 writes 4
    by_release = {r["release"]: r["config_version"] for r in DATA.RELEASES}
    assert by_release["1.6"] == 2 and by_release["2.4"] == 4


def test_the_module_documentation_names_every_config_version():
    with open(os.path.join(REPO, "plugins", "modules", "container_runtime.py")) as fh:
        tree = ast.parse(fh.read())
    strings = {t.id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
               for t in n.targets if isinstance(t, ast.Name) and t.id in ("DOCUMENTATION", "RETURN")}
    doc, ret = yaml.safe_load(strings["DOCUMENTATION"]), yaml.safe_load(strings["RETURN"])
    every = _versions(c["version"] for c in DATA.CONFIG_VERSIONS)
    drop_in = _versions(c["version"] for c in DATA.CONFIG_VERSIONS if c["drop_in"])
    assert "(%s)" % every in ret["config_version"]["description"]
    assert any("Needs config version %s" % drop_in in line for line in doc["options"]["drop_in_path"]["description"])


def test_docs_tables_are_generated_from_the_data():
    assert render.stale() == [], "run: python docs/render_data.py --write"


def test_a_stale_table_is_caught(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "runtime.md").write_text("x\n<!-- containerd-releases:begin -->\nSTALE TABLE\n<!-- containerd-releases:end -->\ny\n")
    (tmp_path / os.path.dirname(DATA_FILE)).mkdir(parents=True)
    (tmp_path / DATA_FILE).write_text(open(os.path.join(REPO, DATA_FILE)).read())
    only = {k: v for k, v in render.BLOCKS.items() if k[0] == "docs/runtime.md"}
    assert render.stale(str(tmp_path), only, roles=False) == ["docs/runtime.md"]
    cur, new = render.rendered(str(tmp_path), only, roles=False)["docs/runtime.md"]
    assert new.startswith("x\n<!-- containerd-releases:begin -->\n") and new.endswith("<!-- containerd-releases:end -->\ny\n")
    assert render.lane("go", DATA)["lane"]["version"] in new and "STALE TABLE" not in new


def test_get_prints_the_lane_version_for_the_build_scripts():
    out = subprocess.run([sys.executable, os.path.join(REPO, "docs", "render_data.py"), "--get", "containerd.lane"],
                         check=True, capture_output=True, text=True).stdout
    assert out == render.lane("go", DATA)["lane"]["version"] + "\n"


def lane_pattern(versions):
    """An exact lane version, with or without the Go module's ``v``; not a longer version that starts with it."""
    return re.compile(r"(?<![\w.])v?(%s)(?![\w.]*\d)" % "|".join(re.escape(v.lstrip("v")) for v in versions))


def _measured(path):
    """Records of what ran (lab results, committed benchmark runs): they keep the version they ran."""
    return "/results/" in "/" + path or os.path.basename(path).startswith("results")


def _without_generated_blocks(text):
    return re.sub(r"<!-- ([a-z0-9-]+):begin -->\n.*?<!-- \1:end -->", "", text, flags=re.S)


@needs(".git")
def test_no_other_file_names_a_lane_version():
    """Bumping a lane = one edit in the data file: the Makefiles, build.sh and the prose must not repeat it."""
    # tracked files and new ones not yet added (not the ignored: caches, bundles, venvs)
    files = subprocess.run(["git", "-C", REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           check=True, capture_output=True).stdout.decode().split("\0")
    pattern = lane_pattern(render.lane_versions(DATA).values())
    found = []
    for rel in files:
        if not rel or rel == DATA_FILE or _measured(rel) or not os.path.isfile(os.path.join(REPO, rel)):
            continue
        with open(os.path.join(REPO, rel), "rb") as fh:
            raw = fh.read()
        if b"\0" in raw:
            continue
        text = _without_generated_blocks(raw.decode("utf-8", "replace"))
        found += ["%s:%d: %s" % (rel, text.count("\n", 0, m.start()) + 1, m.group(0)) for m in pattern.finditer(text)]
    assert found == [], "name the lane's containerd through %s (docs/render_data.py --get), not literally" % DATA_FILE


@pytest.mark.parametrize("text,hit", [
    ("CONTAINERD2_VERSION ?= v9.8.7\n", True), ("containerd 9.8.7 daemons", True), ("containerd 5.4.30.", True),
    ("go install .../cmd/ctr@v9.8.7", True), ("v9.8.70", False), ("19.8.7", False), ("9.8.7.1", False), ("containerd 9.8", False),
])
def test_the_lane_version_pattern(text, hit):
    assert bool(lane_pattern(["v9.8.7", "5.4.30"]).search(text)) is hit
