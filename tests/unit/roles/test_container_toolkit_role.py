# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""container_toolkit's CDI switches (issue 33): container_toolkit_runtime_cdi_enabled turns CDI on in the container
runtime (container_runtime's enable_cdi), container_toolkit_cdi_enabled writes the spec.  The old name of the first,
container_toolkit_enable_cdi, is still read with a deprecation message naming the new one; both set to different
values are refused before anything is done.  Ansible's own Templar over the role's files, and the role run for real
by ansible-playbook (connection local; nothing to install, no runtime to configure)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from ansible.template import trust_as_template

from conftest import ansible_command
from role_render import Role

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
PLAYBOOK = ansible_command("ansible-playbook")
NEW, OLD, SPEC = "container_toolkit_runtime_cdi_enabled", "container_toolkit_enable_cdi", "container_toolkit_cdi_enabled"
PREFLIGHT = "Refuse container_toolkit_enable_cdi and container_toolkit_runtime_cdi_enabled set to different values"
DEPRECATED = "Deprecated variable container_toolkit_enable_cdi"


def enable_cdi(tasks_file, task, **overrides):
    """What the role passes as container_runtime's enable_cdi, rendered as Ansible does."""
    role = Role("container_toolkit")
    t = role.task(tasks_file, task) if tasks_file else next(
        h for h in role.load("handlers/main.yml") if h["name"] == task)
    return role.templar(**overrides).template(trust_as_template(t["gpuops.nvidia.container_runtime"]["enable_cdi"]))


CHECK = ("runtime.yml", "Check the runtime configuration of {{ _container_toolkit_runtime }}")
APPLY = (None, "Apply NVIDIA runtime configuration and restart the runtime")


@pytest.mark.parametrize("where", [CHECK, APPLY], ids=["check-task", "handler"])
@pytest.mark.parametrize("overrides,expected", [
    ({}, True),                                   # the default
    ({NEW: False}, False),
    ({OLD: False}, False),                        # the old name alone: its value
    ({OLD: True, NEW: True}, True),
    ({SPEC: False}, True),                        # the spec switch is another setting
    ({SPEC: True, NEW: False}, False),
])
def test_the_runtime_gets_the_new_variable_or_the_old_ones_value(where, overrides, expected):
    assert enable_cdi(*where, **overrides) is expected


@pytest.mark.parametrize("overrides,holds", [
    ({}, True), ({NEW: False}, True), ({OLD: False}, True), ({OLD: "no", NEW: False}, True),
    ({OLD: False, NEW: True}, False), ({OLD: True, NEW: False}, False),
])
def test_both_names_with_different_values_are_refused(overrides, holds):
    ok, msg = Role("container_toolkit").assert_holds("preflight.yml", PREFLIGHT, **overrides)
    assert ok is holds
    if not holds:
        assert "set only container_toolkit_runtime_cdi_enabled" in msg and "Nothing was changed" in msg


def test_the_deprecation_task_runs_only_for_the_old_name():
    role = Role("container_toolkit")
    task = role.task("preflight.yml", DEPRECATED)
    for overrides, shown in (({}, False), ({NEW: False}, False), ({OLD: True}, True)):
        assert role.templar(**overrides).evaluate_conditional(task["when"]) is shown
    msg = role.templar(**{OLD: False}).template(task["ansible.builtin.debug"]["msg"])
    assert "container_toolkit_enable_cdi is deprecated" in msg and "set container_toolkit_runtime_cdi_enabled" in msg
    assert "now, false" in msg


# -- the role run for real: argument validation, the refusal, the deprecation message -----------------------------

def play(tmp_path, **extra):
    book = tmp_path / "play.yml"
    book.write_text("- hosts: localhost\n  connection: local\n  gather_facts: false\n"
                    "  roles:\n    - role: gpuops.nvidia.container_toolkit\n")
    args = {"container_toolkit_install": False, "container_toolkit_cdi_enabled": False,
            "container_toolkit_runtime_mode": "", "container_toolkit_runtime": "none",
            "container_toolkit_state_dir": str(tmp_path / "state"), "ansible_python_interpreter": sys.executable}
    args.update(extra)
    (tmp_path / "vars.json").write_text(json.dumps(args))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    res = subprocess.run([PLAYBOOK, "-i", "localhost,", str(book), "-e", "@" + str(tmp_path / "vars.json")],
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    m = re.search(r"localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", res.stdout)
    assert m, res.stdout + res.stderr
    return res.stdout, int(m.group(2)), int(m.group(4))


def test_role_run_old_name_warns_conflict_refused_bad_value_refused(tmp_path):
    out, changed, failed = play(tmp_path)
    assert (changed, failed) == (0, 0) and "[DEPRECATED]" not in out, out

    out, changed, failed = play(tmp_path, **{OLD: False})
    assert (changed, failed) == (0, 0), out
    assert "[DEPRECATED] container_toolkit_enable_cdi is deprecated" in out
    assert "set container_toolkit_runtime_cdi_enabled instead" in out

    out, changed, failed = play(tmp_path, **{OLD: False, NEW: True})
    assert failed == 1 and changed == 0
    assert "container_toolkit_enable_cdi (deprecated) is false and container_toolkit_runtime_cdi_enabled is true" in out
    assert "Look for installed container runtimes" not in out        # refused before the role's first read

    out, changed, failed = play(tmp_path, **{OLD: "maybe"})
    assert failed == 1 and "Validation of arguments failed" in out and "container_toolkit_enable_cdi" in out
    assert not os.path.exists(str(tmp_path / "state"))
