"""roles/driver: every default is documented in meta/argument_specs.yml with the same default, and back."""
from __future__ import annotations

import os

import yaml

ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "roles", "driver")


def load(rel):
    with open(os.path.join(ROLE, rel)) as f:
        return yaml.safe_load(f)


def test_defaults_match_argument_specs():
    defaults = load("defaults/main.yml")
    specs = load("meta/argument_specs.yml")["argument_specs"]
    main = specs["main"]["options"]
    assert sorted(defaults) == sorted(main)
    for name, value in defaults.items():
        assert main[name]["default"] == value, name
        assert all(n.startswith("driver_") for n in main)
    for name, spec in specs["plan"]["options"].items():
        assert spec["default"] == defaults[name], name
