"""roles/dcgm_exporter rendered as Ansible renders it: runtimeClassName, the metrics CSV against
the mission's monitoring fields and dashboard 12239's queries, the dashboard objects of every
mode (schema-valid), the decisions in tasks/prepare.yml, and the argument spec."""
from __future__ import annotations

import json
import os

import pytest
from role_render import Role, by_kind, cr_errors, k8s_strict_errors

ROLE = Role("dcgm_exporter")
BASE = {"_dcgm_exporter_sm": True}
GD_CRD = ("grafana-operator/grafana.integreatly.org_grafanadashboards.yaml", "v1beta1")
DEFAULT_METRICS = ROLE.plain("defaults/main.yml")["dcgm_exporter_metrics"]
SEED = ROLE.plain("vars/monitoring_seed_metrics.yml")["_dcgm_exporter_seed_metrics"]
DASHBOARD = ROLE.plain("vars/dashboard_12239_metrics.yml")["_dcgm_exporter_dashboard_12239"]
REQUIRED = sorted(set(SEED["metrics"]) | set(DASHBOARD["metrics"]))


def render(**overrides):
    return ROLE.render("dcgm_exporter.yaml.j2", **dict(BASE, **overrides))


def render_dashboard(modes, **overrides):
    return ROLE.render("dcgm_exporter_dashboard.yaml.j2", _dcgm_exporter_dashboard_modes=modes, **overrides)


def pod_spec(objs):
    return by_kind(objs, "DaemonSet", "nvidia-dcgm-exporter")["spec"]["template"]["spec"]


def enabled_fields(objs):
    """DCGM fields of the rendered CSV, parsed the way dcgm-exporter reads its collectors file:
    '#' lines are comments, fields are comma separated, the first is the DCGM field."""
    csv = by_kind(objs, "ConfigMap", "nvidia-dcgm-exporter-metrics")["data"]["dcgm-metrics.csv"]
    rows = [[c.strip() for c in line.split(",", 2)] for line in csv.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
    return rows


def missing(objs, required):
    enabled = {r[0] for r in enabled_fields(objs)}
    return sorted(set(required) - enabled)


# --- runtimeClassName -------------------------------------------------------------------------

def test_pods_run_with_the_nvidia_runtime_class():
    assert pod_spec(render())["runtimeClassName"] == "nvidia"


def test_runtime_class_follows_the_collection_name():
    assert pod_spec(render(gpuops_runtime_class="nvidia-cdi"))["runtimeClassName"] == "nvidia-cdi"


def test_runtime_class_off_where_nvidia_is_the_default_runtime():
    assert "runtimeClassName" not in pod_spec(render(dcgm_exporter_runtime_class=""))


# --- metrics CSV ------------------------------------------------------------------------------

def test_csv_covers_the_monitoring_fields_and_dashboard_12239():
    objs = render()
    assert missing(objs, SEED["metrics"]) == []
    assert missing(objs, DASHBOARD["metrics"]) == []


def test_csv_rows_are_well_formed():
    rows = enabled_fields(render())
    assert [r[0] for r in rows] == [m[0] for m in DEFAULT_METRICS]
    assert len({r[0] for r in rows}) == len(rows)
    for name, kind, help_ in rows:
        assert name.startswith("DCGM_FI_") and kind in ("gauge", "counter", "label") and help_, name
    ecc = {r[0]: r[1] for r in rows if "_ECC_" in r[0]}
    assert ecc == {f"DCGM_FI_DEV_ECC_{b}_{s}_TOTAL": "counter" for b in ("SBE", "DBE") for s in ("VOL", "AGG")}


@pytest.mark.parametrize("metric", REQUIRED)
def test_dropping_a_required_metric_is_caught(metric):
    """The coverage check fails when any required metric leaves the CSV, and the role's own
    warning (tasks/prepare.yml) names it."""
    reduced = [row for row in DEFAULT_METRICS if row[0] != metric]
    objs = render(dcgm_exporter_metrics=reduced)
    assert missing(objs, REQUIRED) == [metric]
    task = ROLE.task("prepare.yml", "Warn about required metrics missing from dcgm_exporter_metrics")
    templar = ROLE.templar(dcgm_exporter_metrics=reduced, **task["vars"])
    assert all(templar.evaluate_conditional(c) for c in task["when"])
    assert metric in templar.template(task["ansible.builtin.debug"]["msg"])


def test_no_warning_with_the_default_metrics():
    task = ROLE.task("prepare.yml", "Warn about required metrics missing from dcgm_exporter_metrics")
    templar = ROLE.templar(**task["vars"])
    assert not all(templar.evaluate_conditional(c) for c in task["when"])


def test_metric_lists_are_consistent_with_their_sources():
    # dashboard 12239: the fields its panel targets and template variables query, nothing else
    queried = {m for ms in list(DASHBOARD["panels"].values()) + list(DASHBOARD["variables"].values()) for m in ms}
    assert set(DASHBOARD["metrics"]) == queried
    assert len(DASHBOARD["panels"]) == 8 and DASHBOARD["source"]["path"] == "grafana/dcgm-exporter-dashboard.json"
    # the mission's monitoring fields: utilisation, memory, temperature, power, ECC
    assert set(SEED["fields"]) == {"gpu_utilisation", "memory", "temperature", "power", "ecc_errors"}
    assert set(SEED["metrics"]) == {m for ms in SEED["fields"].values() for m in ms}
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_TEMP",
            "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"} <= set(SEED["metrics"])


def test_exporter_reads_the_csv_it_is_given():
    objs = render()
    c = pod_spec(objs)["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    mount = [m for m in c["volumeMounts"] if m["name"] == "metrics-config"][0]
    assert env["DCGM_EXPORTER_COLLECTORS"] == mount["mountPath"] == "/etc/dcgm-exporter/dcgm-metrics.csv"
    assert mount["subPath"] == "dcgm-metrics.csv"


# --- schema -----------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides", [{}, {"dcgm_exporter_runtime_class": ""},
                                       {"dcgm_exporter_image_pull_secrets": ["mirror"]}])
def test_builtin_manifests_are_schema_valid(overrides):
    for obj in render(**overrides):
        if obj["kind"] == "ServiceMonitor":
            continue  # a custom resource: no bundled schema
        assert k8s_strict_errors(obj) == [], obj["kind"]


# --- dashboard objects ------------------------------------------------------------------------

def test_no_modes_no_objects():
    assert render_dashboard([]) == []


def test_no_reauthored_dashboard_is_shipped():
    shipped = [os.path.join(d, f) for d, _dirs, fs in os.walk(ROLE.path) for f in fs if f.endswith(".json")]
    assert shipped == []


def test_configmap_by_id_for_the_grafana_sidecar():
    cm = by_kind(render_dashboard(["configmap"]), "ConfigMap", "nvidia-dcgm-exporter-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "gpu-operator"
    assert cm["data"] == {"dcgm-exporter-dashboard.json.url":
                          "https://grafana.com/api/dashboards/12239/revisions/2/download"}
    assert k8s_strict_errors(cm) == []
    latest = by_kind(render_dashboard(["configmap"], dcgm_exporter_dashboard_revision=0), "ConfigMap")
    assert latest["data"]["dcgm-exporter-dashboard.json.url"].endswith("/12239/revisions/latest/download")


def test_configmap_with_supplied_json_for_air_gapped_sites():
    text = json.dumps({"uid": "Oxed_c6Wz", "gnetId": 12239, "panels": []})
    cm = by_kind(render_dashboard(["configmap"], _dcgm_exporter_dashboard_json_text=text,
                                  dcgm_exporter_dashboard_namespace="monitoring",
                                  dcgm_exporter_dashboard_labels={"grafana_dashboard": "yes"}), "ConfigMap")
    assert cm["data"] == {"dcgm-exporter-dashboard.json": text}
    assert cm["metadata"]["namespace"] == "monitoring" and cm["metadata"]["labels"]["grafana_dashboard"] == "yes"
    assert k8s_strict_errors(cm) == []


def test_grafana_operator_dashboard_by_grafana_com_id():
    gd = by_kind(render_dashboard(["grafana-operator"]), "GrafanaDashboard", "nvidia-dcgm-exporter")
    assert gd["apiVersion"] == "grafana.integreatly.org/v1beta1"
    assert gd["spec"]["grafanaCom"] == {"id": 12239, "revision": 2}
    assert gd["spec"]["instanceSelector"] == {"matchLabels": {"dashboards": "grafana"}}
    assert gd["spec"]["datasources"] == [{"inputName": "DS_PROMETHEUS", "datasourceName": "Prometheus"}]
    assert gd["spec"]["allowCrossNamespaceImport"] is True
    assert "json" not in gd["spec"] and "folder" not in gd["spec"]
    assert cr_errors(gd, *GD_CRD) == []


@pytest.mark.parametrize("overrides", [
    {"dcgm_exporter_dashboard_revision": 0},
    {"dcgm_exporter_dashboard_folder": "GPU", "dcgm_exporter_dashboard_datasource": "",
     "dcgm_exporter_dashboard_allow_cross_namespace": False},
    {"_dcgm_exporter_dashboard_json_text": json.dumps({"uid": "Oxed_c6Wz", "panels": []})},
    {"dcgm_exporter_dashboard_instance_selector": {"matchExpressions": [
        {"key": "app", "operator": "In", "values": ["grafana"]}]}},
])
def test_grafana_operator_variants_are_schema_valid(overrides):
    gd = by_kind(render_dashboard(["grafana-operator"], **overrides), "GrafanaDashboard")
    assert cr_errors(gd, *GD_CRD) == []
    spec = gd["spec"]
    if "_dcgm_exporter_dashboard_json_text" in overrides:  # exactly one content source
        assert "grafanaCom" not in spec and json.loads(spec["json"])["uid"] == "Oxed_c6Wz"
    elif overrides.get("dcgm_exporter_dashboard_revision") == 0:
        assert spec["grafanaCom"] == {"id": 12239}  # grafana-operator looks up the latest
    if "dcgm_exporter_dashboard_folder" in overrides:
        assert spec["folder"] == "GPU" and "datasources" not in spec and spec["allowCrossNamespaceImport"] is False


def test_schema_check_catches_a_bad_dashboard():
    """The CRD check is not vacuous: an unknown field and a missing instanceSelector are refused."""
    gd = by_kind(render_dashboard(["grafana-operator"]), "GrafanaDashboard")
    gd["spec"]["grafanaCom"]["rev"] = 2
    del gd["spec"]["instanceSelector"]
    errors = cr_errors(gd, *GD_CRD)
    assert any("instanceSelector" in e for e in errors) and any("grafanaCom.rev" in e for e in errors), errors


# --- decisions in tasks/prepare.yml -----------------------------------------------------------

DECIDE = "Decide on the dashboard objects (applied, and those of other modes that are there removed)"


def found(crd, there=("configmap", "grafana-operator")):
    """k8s_bulk_info's reads: the GrafanaDashboard CRD, and the dashboard objects of each mode there."""
    reads = {"gd_crd": {"resources": [{}] if crd else [], "api_found": True},
             "configmap": {"resources": [{}] if "configmap" in there else [], "api_found": True},
             "grafana-operator": {"resources": [{}] if crd and "grafana-operator" in there else [], "api_found": crd}}
    return {"reads": reads, "requests": 3}


@pytest.mark.parametrize("state,mode,crd,apply,remove", [
    ("present", "none", False, [], ["configmap"]),
    ("present", "none", True, [], ["configmap", "grafana-operator"]),
    ("present", "configmap", False, ["configmap"], []),
    ("present", "configmap", True, ["configmap"], ["grafana-operator"]),
    ("present", "grafana-operator", False, [], ["configmap"]),  # skipped: no CRD
    ("present", "grafana-operator", True, ["grafana-operator"], ["configmap"]),
    ("absent", "configmap", True, [], ["configmap", "grafana-operator"]),
    ("absent", "grafana-operator", False, [], ["configmap"]),
])
def test_dashboard_decisions(state, mode, crd, apply, remove):
    _ok, facts = ROLE.set_fact("prepare.yml", DECIDE, dcgm_exporter_state=state, dcgm_exporter_dashboard=mode,
                               _dcgm_exporter_found=found(crd))
    assert facts == {"_dcgm_exporter_dashboard_apply": apply, "_dcgm_exporter_dashboard_remove": remove}


@pytest.mark.parametrize("state,mode,there,remove", [
    ("present", "none", (), []),  # nothing there: no removal run at all (a rerun's common case)
    ("present", "none", ("grafana-operator",), ["grafana-operator"]),
    ("present", "grafana-operator", ("grafana-operator",), []),
    ("absent", "configmap", ("configmap",), ["configmap"]),
])
def test_only_dashboard_objects_found_are_removed(state, mode, there, remove):
    _ok, facts = ROLE.set_fact("prepare.yml", DECIDE, dcgm_exporter_state=state, dcgm_exporter_dashboard=mode,
                               _dcgm_exporter_found=found(True, there))
    assert facts["_dcgm_exporter_dashboard_remove"] == remove


def test_one_read_asks_for_the_crds_and_both_dashboard_objects():
    t = ROLE.task("prepare.yml", "Look for the ServiceMonitor and GrafanaDashboard CRDs and the dashboard objects "
                                 "already there (one run)")
    queries = ROLE.templar(dcgm_exporter_dashboard_namespace="monitoring", dcgm_exporter_service_monitor="auto"
                           ).template(t["vars"]["_dcgm_exporter_queries"])
    assert queries["configmap"] == {"kind": "ConfigMap", "namespace": "monitoring", "name": "nvidia-dcgm-exporter-dashboard"}
    assert queries["grafana-operator"]["kind"] == "GrafanaDashboard" and queries["grafana-operator"]["namespace"] == "monitoring"
    assert queries["sm_crd"]["name"] == "servicemonitors.monitoring.coreos.com"
    queries = ROLE.templar(dcgm_exporter_dashboard_namespace="monitoring", dcgm_exporter_service_monitor=True
                           ).template(t["vars"]["_dcgm_exporter_queries"])
    assert "sm_crd" not in queries


def test_skip_message_without_the_crd():
    t = ROLE.task("prepare.yml", "GrafanaDashboard CRD not installed, dashboard skipped")
    templar = ROLE.templar(dcgm_exporter_dashboard="grafana-operator", _dcgm_exporter_found=found(False))
    assert all(templar.evaluate_conditional(c) for c in t["when"])
    assert "CRD (grafanadashboards.grafana.integreatly.org) is not installed" in templar.template(
        t["ansible.builtin.debug"]["msg"])
    templar = ROLE.templar(dcgm_exporter_dashboard="grafana-operator", _dcgm_exporter_found=found(True))
    assert not all(templar.evaluate_conditional(c) for c in t["when"])


DASH = {"uid": "Oxed_c6Wz", "gnetId": 12239, "panels": [{"datasource": "${DS_PROMETHEUS}"}]}


@pytest.mark.parametrize("form", ["text", "mapping", "path"])
def test_dashboard_json_given_as_text_mapping_or_path(form, tmp_path):
    path = tmp_path / "12239.json"
    path.write_text(json.dumps(DASH, indent=2))
    given = {"text": "\n " + json.dumps(DASH), "mapping": DASH, "path": str(path)}[form]
    ok, facts = ROLE.set_fact("prepare.yml", "Is a dashboard JSON given (air-gapped sites)",
                              dcgm_exporter_dashboard="configmap", dcgm_exporter_dashboard_json=given)
    assert facts["_dcgm_exporter_dashboard_json_given"] is True
    _ok, model = ROLE.set_fact("prepare.yml", "Load and parse the dashboard JSON", dcgm_exporter_json_unused=0,
                               dcgm_exporter_dashboard_json=given)
    assert model["_dcgm_exporter_dashboard_model"] == DASH


@pytest.mark.parametrize("mode,datasource,expect", [
    ("configmap", "Prometheus", "Prometheus"),        # ConfigMap: resolved, as Grafana's import does
    ("configmap", "", "${DS_PROMETHEUS}"),
    ("grafana-operator", "Prometheus", "${DS_PROMETHEUS}"),  # the operator resolves spec.datasources
])
def test_ds_prometheus_resolution(mode, datasource, expect):
    _ok, facts = ROLE.set_fact("prepare.yml", "Dashboard JSON text (${DS_PROMETHEUS} resolved for the ConfigMap, "
                               "as Grafana's import does)", dcgm_exporter_dashboard=mode,
                               dcgm_exporter_dashboard_datasource=datasource, _dcgm_exporter_dashboard_model=DASH,
                               _dcgm_exporter_dashboard_json_given=True)
    assert json.loads(facts["_dcgm_exporter_dashboard_json_text"])["panels"][0]["datasource"] == expect


@pytest.mark.parametrize("mode,given,expect", [
    ("none", "/x.json", False), ("configmap", "", False), ("configmap", "   ", False),
    ("grafana-operator", "{}", True),
])
def test_json_given_only_when_it_matters(mode, given, expect):
    _ok, facts = ROLE.set_fact("prepare.yml", "Is a dashboard JSON given (air-gapped sites)",
                               dcgm_exporter_dashboard=mode, dcgm_exporter_dashboard_json=given)
    assert facts["_dcgm_exporter_dashboard_json_given"] is expect


# --- argument spec ----------------------------------------------------------------------------

def test_defaults_match_argument_specs():
    defaults = ROLE.plain("defaults/main.yml")
    options = ROLE.plain("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options)
    templar = ROLE.templar()
    for name, value in defaults.items():
        assert name.startswith("dcgm_exporter_"), name
        if isinstance(value, str) and "{{" in value:  # computed at run time: the spec gives the plain result
            value = templar.template(ROLE.variables()[name])
            if "default" not in options[name]:
                continue
        assert options[name]["default"] == value, name
    assert options["dcgm_exporter_dashboard"]["choices"] == ["none", "configmap", "grafana-operator"]
