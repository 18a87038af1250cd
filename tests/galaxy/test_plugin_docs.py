# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""ansible-doc shows the right documentation for every filter, module and role.

Filter files define several filters each; ansible-doc reads the docs of such a filter from
plugins/filter/<filter name>.yml (a DOCUMENTATION string in the .py would be shown for all of
them). The filter names come from the FilterModule classes themselves, imported through
Ansible's collection loader.
"""
from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import BIN, ansible_complaints, ansible_env, run

_LIST_FILTERS = r"""
import importlib, json, os, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
base = os.path.join(sys.argv[1], "ansible_collections", "gpuops", "nvidia", "plugins", "filter")
out = {}
for name in sorted(os.listdir(base)):
    if name.endswith(".py") and not name.startswith("_"):
        mod = importlib.import_module("ansible_collections.gpuops.nvidia.plugins.filter." + name[:-3])
        out[name] = sorted(mod.FilterModule().filters())
print(json.dumps(out))
"""


@pytest.fixture(scope="session")
def filters(collections_path, workdir):
    env = ansible_env(collections_path, workdir)
    res = run([sys.executable, "-c", _LIST_FILTERS, collections_path], env, workdir)
    assert res.returncode == 0, res.stderr
    by_file = json.loads(res.stdout)
    assert by_file, "no filter plugins found"
    return by_file


def _docs(kind, names, collections_path, workdir):
    """ansible-doc --json of every name; the text rendering (what a person reads) must work too."""
    env = ansible_env(collections_path, workdir)
    fqcns = ["gpuops.nvidia." + n for n in names]
    text = run([os.path.join(BIN, "ansible-doc"), "-t", kind] + fqcns, env, workdir)
    assert text.returncode == 0 and not ansible_complaints(text.stderr), "ansible-doc -t %s failed:\n%s" % (kind, text.stderr)
    res = run([os.path.join(BIN, "ansible-doc"), "-t", kind, "--json"] + fqcns, env, workdir)
    assert res.returncode == 0 and not ansible_complaints(res.stderr), "ansible-doc -t %s --json failed:\n%s%s" % (kind, res.stdout, res.stderr)
    return json.loads(res.stdout)


def test_every_filter_has_its_own_doc(filters, collections_path, collection_dir, workdir):
    names = [n for per_file in filters.values() for n in per_file]
    assert len(names) == len(set(names)), "a filter name is exported twice"
    docs = _docs("filter", names, collections_path, workdir)
    wrong = []
    for name in names:
        entry = docs.get("gpuops.nvidia." + name)
        if not entry or not entry.get("doc"):
            wrong.append("%s: no documentation" % name)
            continue
        doc = entry["doc"]
        if doc.get("name") != name:
            wrong.append("%s: ansible-doc shows the doc of %r (%s)" % (name, doc.get("name"), doc.get("filename")))
        if not doc.get("short_description"):
            wrong.append("%s: no short_description" % name)
        if not (entry.get("examples") or "").strip():
            wrong.append("%s: no EXAMPLES" % name)
        if "_value" not in (entry.get("return") or {}):
            wrong.append("%s: RETURN has no _value" % name)
    assert not wrong, "\n".join(wrong)
    shorts = {docs["gpuops.nvidia." + n]["doc"]["short_description"] for n in names}
    assert len(shorts) == len(names), "two filters share a short_description"


def test_multi_filter_files_carry_no_documentation_string(filters, collection_dir):
    """A DOCUMENTATION in a multi-filter .py would be shown for every filter of the file."""
    for fname, names in filters.items():
        if len(names) > 1:
            with open(os.path.join(collection_dir, "plugins", "filter", fname)) as fh:
                assert "\nDOCUMENTATION" not in fh.read(), fname
            for name in names:
                assert os.path.isfile(os.path.join(collection_dir, "plugins", "filter", name + ".yml")), name


def test_filter_doc_keys_are_strings(collection_dir):
    """YAML 1.1 reads unquoted off/on/yes/no keys as booleans; ansible-doc's text output then fails."""
    import yaml

    base = os.path.join(collection_dir, "plugins", "filter")
    for fname in sorted(os.listdir(base)):
        if fname.endswith(".yml"):
            with open(os.path.join(base, fname)) as fh:
                data = yaml.safe_load(fh)
            keys = list(data["DOCUMENTATION"].get("options") or {}) + list(data.get("RETURN") or {})
            assert all(isinstance(k, str) for k in keys), (fname, keys)


def _plugin_names(collection_dir, sub):
    base = os.path.join(collection_dir, "plugins", sub)
    return sorted(n[:-3] for n in os.listdir(base) if n.endswith(".py") and not n.startswith("_"))


def test_every_module_doc_renders(collections_path, collection_dir, workdir):
    names = _plugin_names(collection_dir, "modules")
    assert names
    docs = _docs("module", names, collections_path, workdir)
    for name in names:
        doc = docs["gpuops.nvidia." + name]["doc"]
        assert doc["module"] == name
        assert doc["filename"].startswith(collections_path), doc["filename"]
        assert doc.get("short_description") and doc.get("options") is not None


def test_every_role_doc_renders(collections_path, collection_dir, workdir):
    roles = sorted(os.listdir(os.path.join(collection_dir, "roles")))
    assert roles
    docs = _docs("role", roles, collections_path, workdir)
    for role in roles:
        entry = docs["gpuops.nvidia." + role]
        assert "main" in entry["entry_points"], role


def test_only_ansibles_own_complaints_count():
    # a library's Python warning on stderr (cryptography 51 on every ansible command) is not a doc problem;
    # a warning of Ansible's, with its continuation lines, is
    dsa = ("/v/site-packages/ansible/_internal/_ssh/_ssh_agent.py:18: CryptographyDeprecationWarning: DSA is deprecated\n"
           "  from cryptography.hazmat.primitives.asymmetric.dsa import (\n")
    assert ansible_complaints(dsa) == []
    warned = dsa + "[WARNING]: gpuops.nvidia.gpu_facts: option has no description\n  (continued)\nother\n"
    assert ansible_complaints(warned) == ["[WARNING]: gpuops.nvidia.gpu_facts: option has no description", "  (continued)"]
    assert ansible_complaints("[ERROR]: no such plugin\n") == ["[ERROR]: no such plugin"]
