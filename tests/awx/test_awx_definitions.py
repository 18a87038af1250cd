# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""awx/gpuops-nvidia.yml against the AWX CLI import format, offline (issue 16, part 3).

`awx import` (awxkit ApiV2.import_assets) reads the file with awxkit's YAML loader, walks
EXPORTABLE_RESOURCES, matches every object by its natural_key (the NATURAL_KEY of its awxkit page
class) and posts only the fields the server's OPTIONS lists, silently dropping the rest -- so a
misspelt field would be lost without a word. Checked here: the loader, the resource names, natural
keys built as awxkit builds them, fields against the POST fields of AWX's API (below), every
reference resolving to an object of the file (or the Default organization), playbooks that exist
in the project, survey specs as AWX validates them, and the workflow graph."""
from __future__ import annotations

import os
import re

import pytest
import yaml
from awxkit import yaml_file
from awxkit.api.pages import api as awx_api
from awxkit.api.pages.execution_environments import ExecutionEnvironment
from awxkit.api.pages.inventory import Inventory, InventorySource
from awxkit.api.pages.job_templates import JobTemplate
from awxkit.api.pages.projects import Project
from awxkit.api.pages.workflow_job_template_nodes import WorkflowJobTemplateNode
from awxkit.api.pages.workflow_job_templates import WorkflowJobTemplate

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFINITIONS = os.path.join(REPO, "awx", "gpuops-nvidia.yml")
# written by others, referenced by name (issue 12): checked once it exists
PENDING_PLAYBOOKS = {"playbooks/driver_upgrade.yml"}

PAGES = {"execution_environments": ExecutionEnvironment, "projects": Project, "inventory": Inventory,
         "inventory_sources": InventorySource, "job_templates": JobTemplate,
         "workflow_job_templates": WorkflowJobTemplate}
TYPES = {"execution_environments": "execution_environment", "projects": "project", "inventory": "inventory",
         "inventory_sources": "inventory_source", "job_templates": "job_template",
         "workflow_job_templates": "workflow_job_template"}
# POST fields of AWX's API (awx/api/serializers.py, AWX 24) for what the file creates; `related`
# holds the relations awxkit imports (EXPORTABLE_RELATIONS / DEPENDENT_EXPORT)
COMMON = {"name", "description", "natural_key", "related"}
FIELDS = {
    "execution_environments": COMMON | {"image", "pull", "organization", "credential"},
    "projects": COMMON | {"organization", "scm_type", "scm_url", "scm_branch", "scm_refspec", "scm_clean",
                          "scm_track_submodules", "scm_delete_on_update", "scm_update_on_launch",
                          "scm_update_cache_timeout", "allow_override", "timeout", "default_environment",
                          "credential", "local_path", "signature_validation_credential"},
    "inventory": COMMON | {"organization", "kind", "host_filter", "variables", "prevent_instance_group_fallback"},
    "inventory_sources": COMMON | {"source", "source_path", "source_project", "source_vars", "overwrite",
                                   "overwrite_vars", "update_on_launch", "update_cache_timeout", "timeout",
                                   "verbosity", "execution_environment", "inventory", "credential", "enabled_var",
                                   "enabled_value", "host_filter", "limit", "scm_branch"},
    "job_templates": COMMON | {"job_type", "inventory", "project", "playbook", "scm_branch", "forks", "limit",
                               "verbosity", "extra_vars", "job_tags", "skip_tags", "timeout", "use_fact_cache",
                               "execution_environment", "become_enabled", "diff_mode", "allow_simultaneous",
                               "job_slice_count", "host_config_key", "start_at_task", "force_handlers",
                               "survey_enabled", "webhook_service", "webhook_credential",
                               "prevent_instance_group_fallback"}
                     | {"ask_%s_on_launch" % k for k in ("scm_branch", "diff_mode", "variables", "limit", "tags",
                                                         "skip_tags", "job_type", "verbosity", "inventory",
                                                         "credential", "execution_environment", "labels", "forks",
                                                         "job_slice_count", "timeout", "instance_groups")},
    "workflow_job_templates": COMMON | {"organization", "inventory", "extra_vars", "allow_simultaneous", "limit",
                                        "scm_branch", "survey_enabled", "webhook_service", "webhook_credential",
                                        "ask_inventory_on_launch", "ask_limit_on_launch", "ask_variables_on_launch",
                                        "ask_scm_branch_on_launch", "ask_labels_on_launch", "ask_tags_on_launch",
                                        "ask_skip_tags_on_launch"},
}
NODE_FIELDS = {"identifier", "unified_job_template", "all_parents_must_converge", "extra_data", "natural_key",
               "related", "inventory", "scm_branch", "job_type", "job_tags", "skip_tags", "limit", "diff_mode",
               "verbosity", "execution_environment", "forks", "job_slice_count", "timeout"}
RELATED = {
    "execution_environments": set(), "projects": {"credentials", "labels", "schedules"},
    "inventory": {"labels", "hosts", "groups"}, "inventory_sources": {"schedules", "credentials"},
    "job_templates": {"credentials", "labels", "schedules", "survey_spec", "notification_templates_error",
                      "notification_templates_started", "notification_templates_success"},
    "workflow_job_templates": {"labels", "schedules", "survey_spec", "workflow_nodes", "notification_templates_approvals",
                               "notification_templates_error", "notification_templates_started",
                               "notification_templates_success"},
}
SURVEY_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}


@pytest.fixture(scope="module")
def data():
    with open(DEFINITIONS) as fh:  # the loader `awx import --conf.format yaml` uses
        return yaml.load(fh, Loader=yaml_file.Loader)


def natural_key(page_cls, obj, type_):
    """The natural key awxkit's Page.get_natural_key builds: NATURAL_KEY fields (related objects by their
    own natural key) and the type. A job template's organization is its project's (read-only in AWX)."""
    key = {k: obj[k] for k in page_cls.NATURAL_KEY if k in obj}
    if "organization" in page_cls.NATURAL_KEY and "organization" not in obj and "project" in obj:
        key["organization"] = obj["project"]["organization"]
    return dict(key, type=type_)


def index(data):
    out = {}
    for res, objs in data.items():
        for o in objs:
            out[yaml.safe_dump(o["natural_key"], sort_keys=True)] = (res, o)
    return out


def test_resources_are_awx_import_resources(data):
    assert set(data) <= set(awx_api.EXPORTABLE_RESOURCES)
    assert set(data) == set(PAGES)


def test_natural_keys_and_fields(data):
    for res, objs in data.items():
        names = [o["name"] for o in objs]
        assert len(names) == len(set(names)), res
        for o in objs:
            assert o["natural_key"] == natural_key(PAGES[res], o, TYPES[res]), (res, o["name"])
            unknown = set(o) - FIELDS[res]
            assert not unknown, "%s %s: fields AWX would drop silently: %s" % (res, o["name"], sorted(unknown))
            assert set(o.get("related", {})) <= RELATED[res], (res, o["name"], sorted(o.get("related", {})))


def refs(obj):
    """Every natural-key reference (a dict with a type) below obj, but not obj's own natural_key."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "natural_key":
                continue
            if isinstance(v, dict) and "type" in v:
                yield v
            yield from refs(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from refs(v)


def test_every_reference_resolves(data):
    known = index(data)
    for objs in data.values():
        for o in objs:
            for node in o.get("related", {}).get("workflow_nodes", []):
                known[yaml.safe_dump(node["natural_key"], sort_keys=True)] = ("workflow_nodes", node)
    for res, objs in data.items():
        for o in objs:
            for ref in refs(o):
                if ref == {"name": "Default", "type": "organization"}:
                    continue  # every AWX has it
                assert yaml.safe_dump(ref, sort_keys=True) in known, (res, o["name"], ref)


def test_playbooks_exist_in_the_project(data):
    for t in data["job_templates"]:
        path = os.path.join(REPO, t["playbook"])
        if t["playbook"] in PENDING_PLAYBOOKS and not os.path.exists(path):
            continue
        with open(path) as fh:
            plays = yaml.safe_load(fh)
        assert isinstance(plays, list) and plays, t["playbook"]
    src = data["inventory_sources"][0]
    assert os.path.isfile(os.path.join(REPO, src["source_path"]))


def test_surveys_are_valid(data):
    for t in data["job_templates"] + data["workflow_job_templates"]:
        survey = t.get("related", {}).get("survey_spec")
        assert bool(survey) == t["survey_enabled"], t["name"]
        if not survey:
            continue
        assert set(survey) == {"name", "description", "spec"} and survey["spec"], t["name"]
        seen = set()
        for qn in survey["spec"]:
            at = (t["name"], qn.get("variable"))
            assert {"question_name", "variable", "type", "required"} <= set(qn), at
            assert re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", qn["variable"]) and qn["variable"] not in seen, at
            seen.add(qn["variable"])
            assert qn["type"] in SURVEY_TYPES and isinstance(qn["required"], bool), at
            if qn["type"] in ("multiplechoice", "multiselect"):
                choices = qn["choices"] if isinstance(qn["choices"], list) else qn["choices"].split("\n")
                assert choices and (qn.get("default") in choices or qn.get("default") in ("", None)), at
            if qn["type"] == "integer" and qn.get("default") not in ("", None):
                assert isinstance(qn["default"], int), at


def test_extra_vars_are_yaml_mappings(data):
    for t in data["job_templates"] + data["workflow_job_templates"]:
        assert isinstance(yaml.safe_load(t["extra_vars"] or "{}"), dict), t["name"]


def test_site_is_sliced_and_the_workflow_joins_the_report(data):
    jts = {t["name"]: t for t in data["job_templates"]}
    site = jts["gpuops.nvidia site"]
    assert site["job_slice_count"] > 1 and site["playbook"] == "playbooks/site.yml"
    wf = data["workflow_job_templates"][0]
    nodes = {n["identifier"]: n for n in wf["related"]["workflow_nodes"]}
    assert len(nodes) == len(wf["related"]["workflow_nodes"])
    for n in nodes.values():
        assert set(n) <= NODE_FIELDS, n["identifier"]
        assert n["natural_key"] == natural_key(WorkflowJobTemplateNode, dict(n, workflow_job_template=wf["natural_key"]),
                                               "workflow_job_template_node")
        assert n["unified_job_template"]["name"] in jts
    edges = {(a, kind, b["identifier"]) for a, n in nodes.items() for kind in ("success_nodes", "failure_nodes", "always_nodes")
             for b in n["related"][kind]}
    assert edges == {("discovery", "success_nodes", "site"), ("site", "success_nodes", "report"),
                     ("site", "failure_nodes", "doctor")}
    assert jts[nodes["report"]["unified_job_template"]["name"]]["playbook"] == "playbooks/report_merge.yml"
    driver = [t for t in jts.values() if t["playbook"] == "playbooks/driver_upgrade.yml"]
    if os.path.exists(os.path.join(REPO, "playbooks", "driver_upgrade.yml")):
        with open(os.path.join(REPO, "playbooks", "driver_upgrade.yml")) as fh:
            text = fh.read()
        with open(os.path.join(REPO, "roles", "driver", "meta", "argument_specs.yml")) as fh:
            driver_options = yaml.safe_load(fh)["argument_specs"]["main"]["options"]
        for qn in driver[0]["related"]["survey_spec"]["spec"]:  # variables the playbook or its driver role reads
            assert qn["variable"] in text or qn["variable"] in driver_options, qn["variable"]
    doctor = [t for t in jts.values() if t["playbook"] == "playbooks/doctor.yml"]
    assert driver and doctor
