"""roles/doctor: every default is documented in meta/argument_specs.yml, and back; the runtime/CDI
defaults agree with _doctor.RUNTIME_DEFAULTS (what gpu_diagnose assumes when a key is absent)."""
from __future__ import annotations

import os
import re

import yaml

from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _doctor

ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "doctor")


def load(rel):
    with open(os.path.join(ROLE, rel)) as f:
        return yaml.safe_load(f)


def plain(value):
    """A templated default's fallback (`{{ x | default('auto') }}` -> 'auto'); other values as they are."""
    if isinstance(value, str) and "{{" in value:
        m = re.search(r"default\(('([^']*)'|true|false)\)", value)
        return {"true": True, "false": False}.get(m.group(1), m.group(2)) if m else value
    return value


def test_defaults_match_argument_specs():
    defaults = load("defaults/main.yml")
    options = load("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options)
    for name, value in defaults.items():
        assert options[name].get("default", value) == plain(value), name
    assert options["doctor_container_runtime"]["choices"] == ["auto", "containerd", "crio", "docker", "none"]


def test_runtime_defaults_agree_with_the_filter():
    defaults = load("defaults/main.yml")
    for key in ("containerd_config", "crio_config", "crio_config_dir", "docker_config", "cdi_dirs", "runtime_name"):
        assert plain(defaults["doctor_" + key]) == _doctor.RUNTIME_DEFAULTS[key], key
    assert plain(defaults["doctor_container_runtime"]) == _doctor.RUNTIME_DEFAULTS["runtime"]
