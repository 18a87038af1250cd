# Copyright: gpuops.nvidia contributors
# Apache License 2.0
# SPDX-License-Identifier: Apache-2.0
"""Every role's defaults and argument specs agree (issue 17): each public default is a documented option with
the same default, and each option the spec gives a default has that default in defaults/main.yml (Ansible's
role argument validation checks types but does not set defaults, so a default only the spec names is a
variable the role never gets).  The README lists every option (tests/galaxy/test_role_readmes.py)."""
from __future__ import annotations

import ast
import os
import re

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLES = sorted(r for r in os.listdir(os.path.join(REPO, "roles")) if os.path.isdir(os.path.join(REPO, "roles", r)))


def _load(role, *parts):
    path = os.path.join(REPO, "roles", role, *parts)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


def _options(role):
    specs = (_load(role, "meta", "argument_specs.yml") or {}).get("argument_specs") or {}
    out = {}
    for entry in specs.values():
        out.update((entry or {}).get("options") or {})
    return specs, out


#: "{{ other_var | default('x') }}": a default that follows an inventory-wide variable; its literal fallback is what
#: the spec documents as the default
_FALLBACK = re.compile(r"^\{\{.*\|\s*default\((.+)\)\s*\}\}$", re.S)


def _same(default, spec_default):
    if default == spec_default:
        return True
    m = _FALLBACK.match(default) if isinstance(default, str) else None
    if m:
        try:
            return ast.literal_eval(m.group(1).replace("true", "True").replace("false", "False")) == spec_default
        except (ValueError, SyntaxError):
            return False
    return False


def problems(role):
    specs, options = _options(role)
    if "main" not in specs:
        return ["no meta/argument_specs.yml with a main entry point"]
    defaults = _load(role, "defaults", "main.yml") or {}
    out = []
    for name, value in sorted(defaults.items()):
        if name.startswith("_"):
            continue
        if name not in options:
            out.append("default %s is not an option of the argument specs" % name)
        elif "default" in options[name] and not _same(value, options[name]["default"]):
            out.append("default %s: defaults/main.yml %r, argument spec %r" % (name, value, options[name]["default"]))
    for name, opt in sorted(options.items()):
        if "default" in (opt or {}) and name not in defaults:
            out.append("option %s: the spec's default %r is not in defaults/main.yml" % (name, opt["default"]))
    return out


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_agree(role):
    assert problems(role) == []


#: the knobs the shared component base (roles/common/tasks/main.yml) reads by a component's prefix
COMMON_KNOBS = {"state": "str", "namespace": "str", "field_manager": "str", "wait_timeout": "int", "image": "dict",
                "registry": "str", "image_pull_policy": "str", "image_pull_secrets": "list", "tolerations": "list",
                "priority_class": "str"}
COMPONENTS = [r for r in ROLES if r != "common"
              and "gpuops.nvidia.common" in open(os.path.join(REPO, "roles", r, "tasks", "main.yml")).read()]


def knob_problems(role):
    """A component role declares every knob the base reads, with the same type; its manifest template is where
    the base looks for it; and the knobs the base publishes replace the role's own copies."""
    options = _options(role)[1]
    defaults = _load(role, "defaults", "main.yml") or {}
    out = []
    for knob, typ in COMMON_KNOBS.items():
        name = "%s_%s" % (role, knob)
        if name not in defaults:
            out.append("%s: no default" % name)
        if (options.get(name) or {}).get("type") != typ:
            out.append("%s: argument spec type %r, the base wants %r" % (name, (options.get(name) or {}).get("type"), typ))
    if not os.path.isfile(os.path.join(REPO, "roles", role, "templates", role + ".yaml.j2")):
        out.append("no templates/%s.yaml.j2" % role)
    for root, _dirs, files in os.walk(os.path.join(REPO, "roles", role)):
        for f in files:
            text = open(os.path.join(root, f)).read()
            for own in ("_%s_image_ref" % role, "Ensure the namespace", "{% set labels = {"):
                if own in text:
                    out.append("%s: %r is the base's job" % (os.path.relpath(os.path.join(root, f), REPO), own))
    return out


def test_the_component_roles_use_the_base():
    assert len(COMPONENTS) >= 8, COMPONENTS


@pytest.mark.parametrize("role", COMPONENTS)
def test_component_declares_what_the_base_reads(role):
    assert knob_problems(role) == []


def test_the_check_catches_a_drifted_default(tmp_path):
    role = tmp_path / "roles" / "r"
    (role / "meta").mkdir(parents=True)
    (role / "defaults").mkdir()
    (role / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    options:\n      r_a: {type: int, default: 1}\n      r_b: {type: str, default: x}\n")
    (role / "defaults" / "main.yml").write_text("r_a: 2\nr_c: true\n_r_private: 1\n")
    global REPO
    saved, REPO = REPO, str(tmp_path)
    try:
        assert problems("r") == ["default r_a: defaults/main.yml 2, argument spec 1",
                                 "default r_c is not an option of the argument specs",
                                 "option r_b: the spec's default 'x' is not in defaults/main.yml"]
    finally:
        REPO = saved
