# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The cluster components' images live in one data file (plugins/plugin_utils/_components.py, issue 17): the
ClusterPolicy import reads it, docs/render_data.py writes the docs table and each role's <role>_image default
(defaults/main.yml and meta/argument_specs.yml) from it, and this test fails when any of them drifts."""
from __future__ import annotations

import ast
import importlib.util
import os
import shutil

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SPEC = importlib.util.spec_from_file_location("render_data_components", os.path.join(REPO, "docs", "render_data.py"))
render = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(render)
DATA = render.components()


def test_the_data_file_is_data_only():
    tree = ast.parse(open(os.path.join(REPO, render.COMPONENTS_DATA)).read())
    assert all(isinstance(n, (ast.Assign, ast.Expr)) for n in tree.body)
    assert all(set(c) == {"clusterpolicy", "repository", "image", "version"} for c in DATA.IMAGES.values())


def test_every_component_role_default_is_the_data():
    for role, c in DATA.IMAGES.items():
        want = {f: c[f] for f in ("repository", "image", "version")}
        with open(os.path.join(REPO, "roles", role, "defaults", "main.yml")) as fh:
            assert yaml.safe_load(fh)[role + "_image"] == want, role
        with open(os.path.join(REPO, "roles", role, "meta", "argument_specs.yml")) as fh:
            spec = yaml.safe_load(fh)["argument_specs"]["main"]["options"][role + "_image"]
        assert spec["default"] == want, role


def test_the_clusterpolicy_import_reads_the_data():
    from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _clusterpolicy as cp

    assert {role for role, _img in cp.IMAGE_COMPONENTS.values()} == {r for r, c in DATA.IMAGES.items() if c["clusterpolicy"]}
    for key, (role, img) in cp.IMAGE_COMPONENTS.items():
        assert DATA.IMAGES[role]["clusterpolicy"] == key and img["version"] == DATA.IMAGES[role]["version"]


def test_a_version_bump_is_one_edit(tmp_path):
    """Change the data file in a copy of the tree: --write's rewrite moves the role default, its argument spec
    and the docs table, and nothing else in those files."""
    for rel in [render.COMPONENTS_DATA, "docs/cluster-lane.md"] + [
            os.path.join("roles", r, f) for r in DATA.IMAGES for f in ("defaults/main.yml", "meta/argument_specs.yml")]:
        os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
        shutil.copy(os.path.join(REPO, rel), tmp_path / rel)
    data = tmp_path / render.COMPONENTS_DATA
    data.write_text(data.read_text().replace('"version": "v0.15.0"', '"version": "v0.99.1"'))
    only = {k: v for k, v in render.BLOCKS.items() if k[0] == "docs/cluster-lane.md"}
    assert render.stale(str(tmp_path), only) == ["docs/cluster-lane.md", "roles/mig_manager/defaults/main.yml",
                                                 "roles/mig_manager/meta/argument_specs.yml"]
    for doc, (cur, new) in render.rendered(str(tmp_path), only).items():
        if cur != new:
            assert "v0.99.1" in new and "v0.15.0" not in new.replace("v0.15.0-", ""), doc
            assert len(cur.splitlines()) == len(new.splitlines()), doc


def test_docs_and_roles_are_generated_from_the_data():
    assert render.stale() == [], "run: python docs/render_data.py --write"


def test_every_pin_can_be_asked_for():
    """The GPU lanes ask `render_data.py --get components.<role>` for the version to build and name an image by:
    every role of the data file answers (the DRA step once got '' for dra_driver and built an image without a tag)."""
    for role, image in render.components().IMAGES.items():
        assert render.GETTERS["components." + role]() == image["version"], role
