# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Every role has a README.md that lists every option of its argument specs, with an example
play that parses (Galaxy refuses a collection with a role that has no README)."""
from __future__ import annotations

import os
import re
import sys

import pytest
import yaml
from conftest import BIN, REPO, ansible_env, run

ROLES = sorted(r for r in os.listdir(os.path.join(REPO, "roles")) if os.path.isdir(os.path.join(REPO, "roles", r)))


def _specs(role):
    path = os.path.join(REPO, "roles", role, "meta", "argument_specs.yml")
    with open(path) as fh:
        return (yaml.safe_load(fh) or {}).get("argument_specs") or {}


def _readme(role):
    path = os.path.join(REPO, "roles", role, "README.md")
    assert os.path.isfile(path), "%s has no README.md (run python tests/galaxy/role_readmes.py)" % role
    with open(path) as fh:
        return fh.read()


def _table_names(text):
    return set(re.findall(r"^\| `([^`]+)` \|", text, re.M))


@pytest.mark.parametrize("role", ROLES)
def test_readme_lists_every_option(role):
    specs = _specs(role)
    assert "main" in specs, "%s: meta/argument_specs.yml has no main entry point" % role
    listed = _table_names(_readme(role))
    missing = ["%s: %s" % (ep, name) for ep, spec in specs.items() for name in ((spec or {}).get("options") or {})
               if name not in listed]
    assert not missing, ("roles/%s/README.md does not list %s (run python tests/galaxy/role_readmes.py)"
                         % (role, ", ".join(missing)))


@pytest.mark.parametrize("role", ROLES)
def test_readme_sections(role):
    text = _readme(role)
    assert text.startswith("# gpuops.nvidia.%s\n" % role)
    for section in ("## Requirements", "## Role variables", "## Example playbook", "## License"):
        assert section in text, "%s: no %r section" % (role, section)
    assert "Apache-2.0" in text.split("## License", 1)[1]


def test_example_plays_parse(tmp_path, collections_path):
    """All README example plays, in one playbook, pass ansible-playbook --syntax-check."""
    plays = []
    for role in ROLES:
        blocks = re.findall(r"^```yaml\n(.*?)^```", _readme(role), re.M | re.S)
        assert blocks, "%s: no yaml example" % role
        for block in blocks:
            doc = yaml.safe_load(block)
            assert isinstance(doc, list) and doc, "%s: the example is not a list of plays" % role
            assert "gpuops.nvidia.%s" % role in block, "%s: the example does not use the role" % role
            plays += doc
    book = tmp_path / "readme-examples.yml"
    book.write_text(yaml.safe_dump(plays, sort_keys=False))
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  children:\n" + "".join("    %s:\n      hosts: {}\n" % g for g in
                   ("gpu_nodes", "vm_passthrough", "k8s_nodes")))
    env = ansible_env(collections_path, str(tmp_path))
    res = run([os.path.join(BIN, "ansible-playbook"), "--syntax-check", "-i", str(inv), str(book)], env, str(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr


def test_generator_is_importable():
    """The generator the READMEs came from still runs (its --check mode lists stale READMEs)."""
    sys.path.insert(0, os.path.dirname(__file__))
    import role_readmes

    assert role_readmes.roles() == [r for r in ROLES if os.path.isfile(os.path.join(REPO, "roles", r, "meta", "argument_specs.yml"))]
