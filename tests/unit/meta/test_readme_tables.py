# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The README's table of what the collection holds names every module, filter, test, lookup, role and
playbook of the tree, and nothing the tree does not have."""
from __future__ import annotations

import os
import re

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
README = os.path.join(REPO, "README.md")
ROW = re.compile(r"^\| (modules?|filters?|tests?|lookups?|roles?|playbooks?) \| (.*?) \|", re.M)

if not os.path.exists(README):  # the Galaxy tarball's tests run without the repository's README
    pytest.skip("no README.md here", allow_module_level=True)


def listed():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    out = {}
    for kind, names in ROW.findall(text):
        for name in re.findall(r"`([^`]+)`", names):
            out.setdefault(kind.rstrip("s"), []).append(name[:-4] if name.endswith(".yml") else name)
    return out


def files(folder, ext):
    path = os.path.join(REPO, folder)
    return {f[: -len(ext)] for f in os.listdir(path) if f.endswith(ext) and not f.startswith("_")}


def tree():
    return {
        "module": files("plugins/modules", ".py"),
        # one documentation file per filter and test plugin (several filters may share one .py)
        "filter": files("plugins/filter", ".yml"),
        "test": files("plugins/test", ".yml"),
        "lookup": files("plugins/lookup", ".py"),
        "role": {d for d in os.listdir(os.path.join(REPO, "roles")) if os.path.isdir(os.path.join(REPO, "roles", d))},
        "playbook": files("playbooks", ".yml"),
    }


@pytest.mark.parametrize("kind", ["module", "filter", "test", "lookup", "role", "playbook"])
def test_the_readme_lists_every_plugin_role_and_playbook_once(kind):
    names = listed().get(kind, [])
    assert sorted(set(names)) == sorted(names), "listed twice: %s" % sorted({n for n in names if names.count(n) > 1})
    have = tree()[kind]
    assert not have - set(names), "%ss not in README.md's table: %s" % (kind, sorted(have - set(names)))
    assert not set(names) - have, "README.md lists %ss the tree does not have: %s" % (kind, sorted(set(names) - have))
