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
from awxkit.api.pages.credentials import Credential, CredentialType
from awxkit.api.pages.execution_environments import ExecutionEnvironment
from awxkit.api.pages.inventory import Inventory, InventorySource
from awxkit.api.pages.job_templates import JobTemplate
from awxkit.api.pages.notification_templates import NotificationTemplate
from awxkit.api.pages.projects import Project
from awxkit.api.pages.schedules import Schedule
from awxkit.api.pages.workflow_job_template_nodes import WorkflowJobTemplateNode
from awxkit.api.pages.workflow_job_templates import WorkflowJobTemplate

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFINITIONS = os.path.join(REPO, "awx", "gpuops-nvidia.yml")
# written by others, referenced by name (issue 12): checked once it exists
PENDING_PLAYBOOKS = {"playbooks/driver_upgrade.yml"}

PAGES = {"credential_types": CredentialType, "credentials": Credential, "notification_templates": NotificationTemplate,
         "execution_environments": ExecutionEnvironment, "projects": Project, "inventory": Inventory,
         "inventory_sources": InventorySource, "job_templates": JobTemplate,
         "workflow_job_templates": WorkflowJobTemplate}
TYPES = {"credential_types": "credential_type", "credentials": "credential", "notification_templates": "notification_template",
         "execution_environments": "execution_environment", "projects": "project", "inventory": "inventory",
         "inventory_sources": "inventory_source", "job_templates": "job_template",
         "workflow_job_templates": "workflow_job_template"}
# POST fields of AWX's API (awx/api/serializers.py, AWX 24) for what the file creates; `related`
# holds the relations awxkit imports (EXPORTABLE_RELATIONS / DEPENDENT_EXPORT)
COMMON = {"name", "description", "natural_key", "related"}
FIELDS = {
    "credential_types": COMMON | {"kind", "inputs", "injectors"},
    "credentials": COMMON | {"organization", "credential_type", "inputs", "user", "team"},
    "notification_templates": COMMON | {"organization", "notification_type", "notification_configuration", "messages"},
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
# a job template's schedules are created with it (awxkit DEPENDENT_EXPORT): POST fields of its schedules list
SCHEDULE_FIELDS = {"name", "description", "natural_key", "rrule", "enabled", "extra_data", "unified_job_template",
                   "inventory", "scm_branch", "job_type", "job_tags", "skip_tags", "limit", "diff_mode", "verbosity",
                   "execution_environment", "forks", "job_slice_count", "timeout"}
RELATED = {
    "credential_types": set(), "credentials": set(), "notification_templates": set(),
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


# --- issue 33 part 2: AWX as launched ---------------------------------------------------------------------------

LAUNCH_ANSWERS = os.path.join(REPO, "playbooks", "tasks", "launch_answers.yml")
# templates whose playbooks reach the API server: cluster.yml (site), the rolling upgrade, the doctor's API reads
CLUSTER_TEMPLATES = {"gpuops.nvidia site", "gpuops.nvidia site (check)", "gpuops.nvidia driver upgrade",
                     "gpuops.nvidia doctor"}
# AWX refuses these in a credential type's env injector (awx/main/fields.py, CredentialTypeInjectorField)
ENV_REFUSED = re.compile(r"^ANSIBLE_|^(PATH|PYTHONPATH|HOME|JOB_ID|INVENTORY_ID|INVENTORY_SOURCE_ID|INVENTORY_UPDATE_ID|"
                         r"AD_HOC_COMMAND_ID|REST_API_URL|REST_API_TOKEN|MAX_EVENT_RES|CALLBACK_QUEUE|"
                         r"CALLBACK_CONNECTION|CACHE|JOB_CALLBACK_DEBUG|INVENTORY_HOSTVARS|AWX_HOST|PROJECT_REVISION|"
                         r"SUPERVISOR_CONFIG_PATH)$")


def launch_table():
    """survey variable -> the variable it sets, from the comment table of playbooks/tasks/launch_answers.yml,
    checked against the set_fact task that does it."""
    with open(LAUNCH_ANSWERS) as fh:
        text = fh.read()
    table = dict(re.findall(r"^#   (gpuops_launch_\w+)\s+(\w+)", text, re.M))
    [block] = yaml.safe_load(text)
    [setter] = [t for t in block["block"] if "ansible.builtin.set_fact" in t]
    read = dict(block["vars"]["_launch_text"], **block["vars"]["_launch_choice"])
    for answer, target in table.items():
        assert answer in read[target] and target in setter["ansible.builtin.set_fact"][target] + answer, (answer, target)
    assert set(setter["ansible.builtin.set_fact"]) == set(table.values())
    return table


def test_survey_answers_never_override_the_inventory_unasked(data):
    """Every survey answer reaches the play as an extra var (above the inventory). So a question of the site and
    doctor templates names a gpuops_launch_* variable that launch_answers.yml maps only when given: free text
    is optional with an empty default, a choice offers `inventory` and starts there."""
    table = launch_table()
    books = {"playbooks/site.yml", "playbooks/doctor.yml"}
    seen = set()
    for t in data["job_templates"]:
        spec = (t["related"].get("survey_spec") or {}).get("spec") or []
        if t["playbook"] not in books:
            assert not any(q["variable"].startswith("gpuops_launch_") for q in spec), t["name"]
            continue
        with open(os.path.join(REPO, t["playbook"])) as fh:
            assert "import_tasks: tasks/launch_answers.yml" in fh.read(), t["playbook"]
        for q in spec:
            at = (t["name"], q["variable"])
            assert q["variable"] in table, at
            seen.add(q["variable"])
            if q["type"] in ("text", "textarea"):
                assert q["required"] is False and q["default"] == "", at
            else:
                assert q["type"] == "multiplechoice" and q["choices"][0] == "inventory" and q["default"] == "inventory", at
    assert seen == set(table), "launch answers no survey asks for (or the reverse): %s" % sorted(seen ^ set(table))


def test_driver_branch_and_version_are_asked_without_overriding(data):
    jts = {t["name"]: t for t in data["job_templates"]}
    for name, want in (("gpuops.nvidia site", {"gpuops_launch_driver_branch", "gpuops_launch_driver_version"}),
                       ("gpuops.nvidia driver upgrade", {"gpu_upgrade_driver_branch", "gpu_upgrade_driver_version"})):
        spec = {q["variable"]: q for q in jts[name]["related"]["survey_spec"]["spec"]}
        assert want <= set(spec), name
        for var in want:
            assert spec[var]["default"] == "" and not spec[var]["required"], (name, var)
        assert not {"driver_branch", "driver_version"} & set(spec), name


def cred_ref(cred):
    return {k: cred["natural_key"][k] for k in ("organization", "name", "credential_type", "type")}


def test_the_kubeconfig_credential_type_is_what_awx_accepts(data):
    [ctype] = data["credential_types"]
    assert ctype["kind"] in ("cloud", "net")  # the kinds AWX allows a custom type (and a job template takes)
    fields = {f["id"]: f for f in ctype["inputs"]["fields"]}
    assert set(fields) == {"kubeconfig"} and ctype["inputs"]["required"] == ["kubeconfig"]
    kube = fields["kubeconfig"]
    assert kube["secret"] is True and kube["multiline"] is True and kube["type"] == "string" and kube["label"]
    for f in fields.values():
        assert set(f) <= {"id", "type", "label", "help_text", "multiline", "secret", "choices", "format", "default",
                          "ask_at_runtime"}
    inj = ctype["injectors"]
    assert set(inj) <= {"file", "env", "extra_vars"} and set(inj["file"]) == {"template"}
    assert inj["env"] == {"K8S_AUTH_KUBECONFIG": "{{ tower.filename }}"}
    assert inj["extra_vars"] == {"gpuops_kubeconfig": "{{ tower.filename }}"}
    for name in inj["env"]:
        assert re.match(r"^[a-zA-Z_]+[a-zA-Z0-9_]*$", name) and not ENV_REFUSED.match(name), name
    # rendered as AWX renders them (a Jinja sandbox, every field defined, tower.filename only with a file injector)
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(undefined=StrictUndefined)
    kubeconfig = "apiVersion: v1\nkind: Config\nclusters: []\n"
    tower = type("Tower", (), {"filename": "/runner/env/tmpabc"})()
    assert env.from_string(inj["file"]["template"]).render(kubeconfig=kubeconfig, tower=tower) == kubeconfig
    assert env.from_string(inj["env"]["K8S_AUTH_KUBECONFIG"]).render(kubeconfig=kubeconfig, tower=tower) == tower.filename
    # the env name is one the collection's k8s modules fall back to (and kubernetes.core's: same names)
    with open(os.path.join(REPO, "plugins", "module_utils", "_k8s_client.py")) as fh:
        assert 'kubeconfig=env("K8S_AUTH_KUBECONFIG"' in fh.read()
    # every cluster play passes gpuops_kubeconfig as the modules' kubeconfig (omitted when unset: the env's then)
    for book in ("cluster.yml", "driver_upgrade.yml"):
        with open(os.path.join(REPO, "playbooks", book)) as fh:
            assert 'kubeconfig: "{{ gpuops_kubeconfig | default(omit) }}"' in fh.read(), book


def test_the_credential_is_attached_to_the_cluster_templates(data):
    [cred] = data["credentials"]
    assert cred["inputs"] == {}  # yours to fill in: no secret in the repository
    assert cred["credential_type"] == data["credential_types"][0]["natural_key"]
    for t in data["job_templates"]:
        attached = t["related"]["credentials"]
        if t["name"] in CLUSTER_TEMPLATES:
            assert attached == [cred_ref(cred)], t["name"]
        else:
            assert attached == [], t["name"]


def test_failures_notify_through_the_webhook_placeholder(data):
    [nt] = data["notification_templates"]
    conf = nt["notification_configuration"]
    assert nt["notification_type"] == "webhook"
    # the webhook backend's init_parameters (awx/main/notifications/webhook_backend.py): url and headers have no
    # default, http_method POST or PUT
    assert {"url", "headers"} <= set(conf) and isinstance(conf["headers"], dict)
    assert conf["http_method"] in ("POST", "PUT") and conf["disable_ssl_verification"] is False
    assert conf["url"].startswith("https://") and ".invalid/" in conf["url"]  # RFC 2606: never resolves
    ref = {"organization": nt["organization"], "name": nt["name"], "type": "notification_template"}
    assert nt["natural_key"] == ref
    for t in data["job_templates"] + data["workflow_job_templates"]:
        assert t["related"]["notification_templates_error"] == [ref], t["name"]


def rrule_problems(rrule):
    """The rules AWX's schedule serializer applies to an rrule (AWX 24, SchedulePreviewSerializer.validate_rrule),
    as sentences, then dateutil's own parse."""
    out = []
    starts = re.findall(r"DTSTART(?:;[^:]+)?:[0-9]+T[0-9]+Z?", rrule)
    if len(starts) != 1:
        out.append("exactly one DTSTART")
    if re.search(r"DTSTART:[0-9]+T[0-9]+ ", rrule):
        out.append("DTSTART without a time zone")
    rules = re.findall(r"RRULE:\S*", rrule)
    if not rules:
        out.append("no RRULE")
    if re.search(r"(?i)exdate:|rdate:", rrule):
        out.append("EXDATE/RDATE")
    for r in rules:
        if "INTERVAL" not in r.upper() or "SECONDLY" in r.upper():
            out.append("INTERVAL missing or SECONDLY: " + r)
        if re.search(r"BYDAY[:=][0-9]+", r) or ("COUNT" in r and "UNTIL" in r):
            out.append("numeric BYDAY or COUNT with UNTIL: " + r)
    from dateutil import rrule as du

    try:
        du.rrulestr(rrule.replace(" RRULE", "\nRRULE"), forceset=True)
    except (ValueError, TypeError) as exc:
        out.append("dateutil: %s" % exc)
    return out


def test_a_check_template_beside_the_site_run_with_a_daily_schedule(data):
    jts = {t["name"]: t for t in data["job_templates"]}
    run, check = jts["gpuops.nvidia site"], jts["gpuops.nvidia site (check)"]
    assert run["job_type"] == "run" and check["job_type"] == "check" and check["diff_mode"] is True
    assert check["playbook"] == run["playbook"] and check["inventory"] == run["inventory"]
    assert check["survey_enabled"] is False  # a drift check is against the inventory as it is
    [sched] = check["related"]["schedules"]
    assert set(sched) <= SCHEDULE_FIELDS and sched["enabled"] is True and sched["extra_data"] == {}
    assert sched["natural_key"] == natural_key(Schedule, dict(sched, unified_job_template=check["natural_key"]), "schedule")
    assert rrule_problems(sched["rrule"]) == []
    assert "FREQ=DAILY" in sched["rrule"]
    assert rrule_problems("DTSTART:20260105T050000 RRULE:FREQ=DAILY;INTERVAL=1") != []  # the rules bite
    for t in data["job_templates"]:
        if t is not check:
            assert t["related"]["schedules"] == [], t["name"]


def test_the_inventory_source_says_it_is_yours_to_replace(data):
    [src] = data["inventory_sources"]
    assert src["source_path"] == "inventories/example/hosts.yml"
    assert "replace" in src["description"].lower() and src["source_path"] in src["description"]
    with open(DEFINITIONS) as fh:
        head = fh.read().split("---", 1)[0]
    assert "inventory source" in head and "replace" in head
    with open(os.path.join(REPO, "docs", "awx.md")) as fh:
        doc = fh.read()
    for name in ("GPU fleet from the project", "gpuops.nvidia cluster kubeconfig", "gpuops.nvidia failures",
                 "OpenShift or Kubernetes API Bearer Token", "K8S_AUTH_KUBECONFIG", "K8S_AUTH_HOST", "K8S_AUTH_API_KEY",
                 "K8S_AUTH_VERIFY_SSL", "K8S_AUTH_SSL_CA_CERT", "gpuops.nvidia site (check)"):
        assert name in doc, name
