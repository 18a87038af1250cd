# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Hostile-input corpus: AWX survey answers (who controls them: whoever may launch the job template).

AWX hands survey answers to the play as extra variables, tagged ``!unsafe`` (its default
``ALLOW_JINJA_IN_EXTRA_VARS = template``), so Ansible never renders them; what remains is that every answer a
launcher may type is checked, whole, by the first thing that uses it.  The text questions of
awx/gpuops-nvidia.yml are exactly the keys of ``CHECKS``: a new free-text question fails this file until its
check is named here.  Each check is run as the play runs it (the role's own assert through Ansible's Templar, the
filter's own function), and one real ansible-playbook run takes the answers from an AWX-shaped extra-vars file."""
from __future__ import annotations

import os

import pytest
import yaml
from test_initramfs_retry import play
from conftest import needs
from test_validation import role_task

from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _doctor, _upgrade

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
AWX = os.path.join(REPO, "awx", "gpuops-nvidia.yml")

# what a launcher may type: a newline after a good answer, shell and template syntax, other digits, a flood
HOSTILE = ["580\n", "580\r", "580 ", "580;id", "$(id)", "`id`", "580|id", "{{ lookup('pipe', 'id') }}", "{% raw %}",
           "\u0665\u0668\u0660", "５８０", "580\u2028", "../../etc", "9" * 5000, "-e", "1e3", "0x10"]


def _preflight(var, value):
    """The answer as the driver role goes on with it, or None when its preflight refuses it."""
    context = {"driver_version": ""} if var == "driver_branch" else {}
    return None if role_task("driver", "preflight.yml", "Check the role's inputs", "that", **dict(context, **{var: value})) else value


def _max_unavailable(value):
    try:
        return _upgrade.parse_max_unavailable(value)
    except _upgrade.UpgradeInputError:
        return None


def _launch_max_unavailable(value):
    """driver_upgrade.yml: a blank answer keeps the inventory's count (1 here, the default); else the answer, trimmed,
    through the same check as the inventory's value."""
    text = str(value).strip()
    return 1 if text == "" else _max_unavailable(text)


def _cuda(value):
    try:
        return _doctor.check_expect({"cuda_version": value})["cuda_version"]
    except _doctor.DoctorInputError:
        return None


# survey variable -> (good answers, what the play goes on with: the answer as used, None when refused)
CHECKS = {
    # driver_upgrade.yml sets driver_branch / driver_version from these, as given (an empty answer keeps the
    # inventory's); the driver role's preflight then checks them whole
    "gpu_upgrade_driver_branch": (["580", "535"], lambda v: _preflight("driver_branch", v)),
    "gpu_upgrade_driver_version": (["", "580.95.05", "535.247"], lambda v: _preflight("driver_version", v)),
    # and gpu_upgrade_max_unavailable from this one when answered (blank: the inventory's)
    "gpu_upgrade_launch_max_unavailable": (["", "1", "3", "25%", "100%"], _launch_max_unavailable),
    # the site and doctor surveys: playbooks/tasks/launch_answers.yml sets driver_branch, driver_version and
    # doctor_cuda_version from these, as given (a blank answer keeps the inventory's); the driver role's preflight
    # and the doctor's check_expect then check them whole
    "gpuops_launch_driver_branch": (["580", "535"], lambda v: _preflight("driver_branch", v)),
    "gpuops_launch_driver_version": (["", "580.95.05", "535.247"], lambda v: _preflight("driver_version", v)),
    "gpuops_launch_doctor_cuda_version": (["", "12.4", "13", "12.8.1"], _cuda),
}


def _text_questions():
    with open(AWX, encoding="utf-8") as fh:
        definitions = yaml.safe_load(fh)
    templates = (definitions.get("job_templates") or []) + (definitions.get("workflow_job_templates") or [])
    return [q["variable"] for jt in templates for q in ((jt.get("related") or {}).get("survey_spec") or {}).get("spec") or []
            if q.get("type") in ("text", "textarea", "password")]


@needs("awx/gpuops-nvidia.yml")  # the AWX definitions are the repository's, not in the Galaxy tarball
def test_every_free_text_question_has_its_check_here():
    found = _text_questions()
    assert found, "no text questions found in awx/gpuops-nvidia.yml: the survey layout changed, read it anew"
    assert sorted(set(found)) == sorted(CHECKS), "a free-text survey question without a hostile-input check here"


@pytest.mark.parametrize("var", sorted(CHECKS))
def test_good_answers_pass(var):
    good, used = CHECKS[var]
    assert [g for g in good if used(g) is None] == []


@pytest.mark.parametrize("value", HOSTILE, ids=[repr(v)[:24] for v in HOSTILE])
@pytest.mark.parametrize("var", sorted(CHECKS))
def test_hostile_answers_are_refused(var, value):
    # refused, or (a count of nodes with blanks around it) turned into a number: never text that goes on as typed
    used = CHECKS[var][1](value)
    assert used is None or (isinstance(used, int) and not isinstance(used, bool)), "%s=%r was accepted as %r" % (var, value, used)


def test_doctor_versions_compare_in_ascii_digits_only():
    # '²'.isdigit() is True and int('²') raises: a version read from a node must never crash the doctor
    assert _doctor._version_tuple("12.\u00b2") == (12, 0)


def test_an_awx_launch_with_hostile_answers_is_refused_before_anything(tmp_path, roots):
    """The driver preflight run for real, its answers from an extra-vars file shaped as AWX writes it (!unsafe)."""
    marker = tmp_path / "rendered"
    answers = {"driver_branch": "580\nrm -rf /", "driver_version": "{{ lookup('pipe', 'touch %s') }}" % marker}
    evars = tmp_path / "awx-extravars.yml"
    evars.write_text("".join("%s: !unsafe %s\n" % (k, yaml.safe_dump(v, default_style='"').strip())
                             for k, v in answers.items()))
    assert yaml.load(evars.read_text(), Loader=_unsafe_loader()) == answers
    res = play(tmp_path, "driver", ["preflight"], {"gpu_workload": "container", "driver_root": roots["h200"]},
               extra_files=[evars])
    assert res.returncode != 0 and "Plan the driver" not in res.stdout, res.stdout[-3000:]
    assert "driver_version" in res.stdout or "driver_branch" in res.stdout, res.stdout[-3000:]
    assert not marker.exists(), "a survey answer was rendered as a template"


def _unsafe_loader():
    class Loader(yaml.SafeLoader):
        pass
    Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))
    return Loader


def test_a_site_launch_with_hostile_answers_is_refused_before_anything(tmp_path, roots):
    """The site survey's answers through playbooks/tasks/launch_answers.yml (as site.yml's first play imports it),
    then the driver preflight, run for real; the answers from an extra-vars file shaped as AWX writes it."""
    import json
    import os
    import subprocess
    import sys

    from conftest import ansible_command

    collections = os.environ["GPUOPS_COLLECTIONS"]
    launch = os.path.join(collections, "ansible_collections", "gpuops", "nvidia", "playbooks", "tasks", "launch_answers.yml")
    marker = tmp_path / "rendered"
    answers = {"gpuops_launch_driver_branch": "580\nrm -rf /",
               "gpuops_launch_driver_version": "{{ lookup('pipe', 'touch %s') }}" % marker}
    evars = tmp_path / "awx-extravars.yml"
    evars.write_text("".join("%s: !unsafe %s\n" % (k, yaml.safe_dump(v, default_style='"').strip()) for k, v in answers.items()))
    book = tmp_path / "site-like.yml"
    book.write_text(yaml.safe_dump([
        {"hosts": "localhost", "connection": "local", "gather_facts": False, "pre_tasks": [{"ansible.builtin.import_tasks": launch}]},
        {"hosts": "localhost", "connection": "local", "gather_facts": False,
         "tasks": [{"ansible.builtin.include_role": {"name": "gpuops.nvidia.driver", "tasks_from": "preflight"}}]}]))
    common = tmp_path / "common.json"
    common.write_text(json.dumps({"ansible_python_interpreter": sys.executable, "gpu_workload": "container",
                                  "driver_root": roots["h200"]}))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0")
    res = subprocess.run([ansible_command("ansible-playbook"), "-i", "localhost,", str(book), "-e", "@%s" % common,
                          "-e", "@%s" % evars], env=env, capture_output=True, text=True, cwd=str(tmp_path), timeout=300,
                         check=False)
    assert res.returncode != 0 and "Plan the driver" not in res.stdout, res.stdout[-3000:]
    assert "Set the answers given at launch (driver_branch, driver_version)" in res.stdout, res.stdout[-3000:]
    assert "driver_version" in res.stdout or "driver_branch" in res.stdout, res.stdout[-3000:]
    assert not marker.exists(), "a survey answer was rendered as a template"
