# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""AWX as launched (issue 33, part 2): what a job of awx/gpuops-nvidia.yml hands the plays.

* Survey answers arrive as extra vars (above the inventory), written by AWX as ``!unsafe`` YAML. The site and
  doctor surveys set ``gpuops_launch_*`` variables, and ``playbooks/tasks/launch_answers.yml`` sets the
  inventory's variables from them only when an answer was given: run here under ansible-playbook with an
  inventory that sets every one of them, per group and per host.
* ``'false'`` is false where a survey boolean is read: every decision that reads one goes through ``| bool``
  (checked over the playbooks and roles), and cluster.yml itself stops on ``gpuops_k8s_api: 'false'``.
* The cluster credentials' environment (``K8S_AUTH_KUBECONFIG``; the built-in bearer token type's
  ``K8S_AUTH_HOST``/``K8S_AUTH_API_KEY``/``K8S_AUTH_VERIFY_SSL``) reaches the collection's k8s modules and
  kubernetes.core's, under ansible-runner as AWX runs a job, with the module_defaults the cluster plays use:
  a stand-in API server records which token arrives."""
from __future__ import annotations

import glob
import http.server
import json
import os
import re
import subprocess
import sys
import threading

import ansible_runner
import pytest
import yaml
from conftest import REPO, VENV_BIN

SITE_PACKAGES = [p for p in sys.path if p.endswith("site-packages")][0]
LAUNCH = os.path.join(REPO, "playbooks", "tasks", "launch_answers.yml")
TARGETS = ["driver_branch", "driver_version", "gpu_reboot_allowed", "gpuops_cluster_state", "gpuops_k8s_api",
           "doctor_cuda_version", "doctor_fail_on_error"]
INVENTORY = {"all": {
    "vars": {"driver_branch": "550", "gpu_reboot_allowed": True, "gpuops_k8s_api": False,
             "gpuops_cluster_state": "absent", "doctor_cuda_version": "12.4", "doctor_fail_on_error": True},
    "children": {"gpu_container": {"hosts": {
        "node-a": {"ansible_connection": "local"},
        "node-b": {"ansible_connection": "local", "driver_version": "550.90.07", "gpu_reboot_allowed": False}}}},
    "hosts": {"localhost": {"ansible_connection": "local"}}}}
# what the inventory gives each host (node-b's host vars over the group's)
AS_INVENTORY = {
    "node-a": {"driver_branch": "550", "driver_version": None, "gpu_reboot_allowed": True, "gpuops_cluster_state": "absent",
               "gpuops_k8s_api": False, "doctor_cuda_version": "12.4", "doctor_fail_on_error": True},
    "node-b": {"driver_branch": "550", "driver_version": "550.90.07", "gpu_reboot_allowed": False,
               "gpuops_cluster_state": "absent", "gpuops_k8s_api": False, "doctor_cuda_version": "12.4",
               "doctor_fail_on_error": True},
}
AS_INVENTORY["localhost"] = AS_INVENTORY["node-a"]
# the surveys' defaults, as AWX sends them when nobody touches a question
UNTOUCHED = {"gpuops_launch_driver_branch": "", "gpuops_launch_driver_version": "", "gpuops_launch_reboot_allowed": "inventory",
             "gpuops_launch_cluster_state": "inventory", "gpuops_launch_k8s_api": "inventory",
             "gpuops_launch_doctor_cuda_version": "", "gpuops_launch_doctor_fail_on_error": "inventory"}


def awx_extravars(path, answers):
    """An extra-vars file as AWX writes one: every value tagged !unsafe."""
    path.write_text("".join("%s: !unsafe %s\n" % (k, json.dumps(v)) for k, v in answers.items()))
    return path


def env_for(tmp_path):
    return dict(os.environ, ANSIBLE_COLLECTIONS_PATH="%s:%s" % (collections_tree(tmp_path), SITE_PACKAGES),
                ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
                ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0", ANSIBLE_STDOUT_CALLBACK="default",
                PATH=VENV_BIN + ":" + os.environ["PATH"])


def collections_tree(tmp_path):
    """<tmp>/collections/ansible_collections/gpuops/nvidia -> this checkout (what is being edited)."""
    base = tmp_path / "collections"
    link = base / "ansible_collections" / "gpuops" / "nvidia"
    if not link.exists():
        link.parent.mkdir(parents=True)
        link.symlink_to(REPO)
    return str(base)


def launch(tmp_path, answers, *args):
    """launch_answers.yml as site.yml's first play imports it, then every host's variables -> (result, values)."""
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump(INVENTORY))
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    show = {v: "{{ %s | default(None) }}" % v for v in TARGETS}
    show["reads"] = {"reboot": "{{ gpu_reboot_allowed | default(false) | bool }}",
                     "k8s_api": "{{ gpuops_k8s_api | default(true) | bool }}",
                     "fail_on_error": "{{ doctor_fail_on_error | default(false) | bool }}"}
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump([
        {"name": "Launch answers", "hosts": "all:localhost", "gather_facts": False,
         "tasks": [{"ansible.builtin.import_tasks": LAUNCH}]},
        {"name": "Show", "hosts": "all", "gather_facts": False,
         "tasks": [{"ansible.builtin.copy": {"content": "{{ _show | to_json }}",
                                             "dest": str(out) + "/{{ inventory_hostname }}.json"},
                    "vars": {"_show": show, "ansible_python_interpreter": sys.executable}}]}]))
    evars = awx_extravars(tmp_path / "extravars", answers)
    res = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", str(inv), str(book), "-e", "@%s" % evars] + list(args),
                         env=env_for(tmp_path), capture_output=True, text=True, cwd=str(tmp_path), timeout=300, check=False)
    values = {os.path.basename(p)[:-5]: json.loads(open(p).read()) for p in glob.glob(str(out / "*.json"))}
    return res, values


def test_untouched_surveys_keep_every_inventory_value(tmp_path):
    res, values = launch(tmp_path, UNTOUCHED)
    assert res.returncode == 0, res.stdout[-3000:]
    assert set(values) == set(AS_INVENTORY)
    for host, want in AS_INVENTORY.items():
        got = {k: values[host][k] for k in TARGETS}
        assert got == want, host
    setter = res.stdout.split("Set the answers given at launch ()", 1)[1].split("PLAY [", 1)[0]
    assert "skipping: [" in setter and "ok: [" not in setter, setter  # nothing set at all


def test_a_launch_with_a_limit_gets_the_answers_too(tmp_path):
    """AWX's "limit" at launch: the preflight play (localhost) does not run then, the launch answers still do."""
    res, values = launch(tmp_path, {"gpuops_launch_driver_branch": "580", "gpuops_launch_k8s_api": "true"},
                         "--limit", "node-b")
    assert res.returncode == 0, res.stdout[-3000:]
    assert set(values) == {"node-b"}
    assert values["node-b"]["driver_branch"] == "580" and values["node-b"]["gpuops_k8s_api"] is True
    assert values["node-b"]["driver_version"] == "550.90.07"


def test_blank_answers_keep_them_too(tmp_path):
    res, values = launch(tmp_path, {"gpuops_launch_driver_branch": "   ", "gpuops_launch_reboot_allowed": "",
                                    "gpuops_launch_doctor_cuda_version": ""})
    assert res.returncode == 0, res.stdout[-3000:]
    assert {k: values["node-b"][k] for k in TARGETS} == AS_INVENTORY["node-b"]


def test_given_answers_replace_them_for_this_run(tmp_path):
    res, values = launch(tmp_path, {"gpuops_launch_driver_branch": "580", "gpuops_launch_driver_version": "580.95.05",
                                    "gpuops_launch_reboot_allowed": "true", "gpuops_launch_cluster_state": "present",
                                    "gpuops_launch_k8s_api": "true", "gpuops_launch_doctor_cuda_version": "12.8",
                                    "gpuops_launch_doctor_fail_on_error": "true"})
    assert res.returncode == 0, res.stdout[-3000:]
    for host in AS_INVENTORY:
        got = {k: values[host][k] for k in TARGETS}
        assert got == {"driver_branch": "580", "driver_version": "580.95.05", "gpu_reboot_allowed": True,
                       "gpuops_cluster_state": "present", "gpuops_k8s_api": True, "doctor_cuda_version": "12.8",
                       "doctor_fail_on_error": True}, host


def test_false_is_false(tmp_path):
    """'false' as AWX writes it (and as -e key=value gives it) over an inventory that says true."""
    res, values = launch(tmp_path, {"gpuops_launch_reboot_allowed": "false", "gpuops_launch_doctor_fail_on_error": "False",
                                    "gpuops_launch_k8s_api": "false"})
    assert res.returncode == 0, res.stdout[-3000:]
    for host in AS_INVENTORY:
        assert values[host]["gpu_reboot_allowed"] is False and values[host]["doctor_fail_on_error"] is False, host
        assert values[host]["reads"] == {"reboot": False, "k8s_api": False, "fail_on_error": False}, host
        assert values[host]["driver_branch"] == "550", host  # the rest as the inventory has it


def test_a_template_in_an_answer_stays_text(tmp_path):
    marker = tmp_path / "rendered"
    answer = "{{ lookup('pipe', 'touch %s') }}" % marker
    res, values = launch(tmp_path, {"gpuops_launch_driver_branch": answer, "gpuops_launch_doctor_cuda_version": answer})
    assert res.returncode == 0, res.stdout[-3000:]
    assert values["node-a"]["driver_branch"] == answer and values["node-a"]["doctor_cuda_version"] == answer
    assert not marker.exists(), "a launch answer was rendered as a template"
    # (the driver role's preflight and the doctor then refuse it: tests/unit/security/test_survey.py)


@pytest.mark.parametrize("var, value", [("gpuops_launch_k8s_api", "maybe"), ("gpuops_launch_cluster_state", "true"),
                                        ("gpuops_launch_reboot_allowed", "yes please")])
def test_a_choice_outside_its_list_stops_the_run(tmp_path, var, value):
    res, values = launch(tmp_path, {var: value})
    assert res.returncode != 0 and values == {}
    assert "nothing was changed" in res.stdout and "PLAY [Show]" not in res.stdout


def test_cluster_play_stops_on_the_string_false(tmp_path):
    """The real cluster.yml, gpuops_k8s_api given as AWX gives a survey answer: the string 'false'."""
    inv = tmp_path / "cluster-inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"k8s_nodes": {"hosts": {
        "node-a": {"ansible_connection": "local", "gpuops_gather_gpu_facts": False}}}},
        "hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    evars = awx_extravars(tmp_path / "extravars", {"gpuops_k8s_api": "false"})
    assert "!unsafe \"false\"" in evars.read_text()
    res = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", str(inv),
                          os.path.join(REPO, "playbooks", "cluster.yml"), "-e", "@%s" % evars],
                         env=env_for(tmp_path), capture_output=True, text=True, cwd=str(tmp_path), timeout=300, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "Cluster components NOT applied: gpuops_k8s_api is false" in res.stdout


def test_site_and_doctor_import_the_launch_answers_first():
    with open(os.path.join(REPO, "playbooks", "site.yml")) as fh:
        first, preflight = yaml.safe_load(fh)[:2]
    assert first["hosts"] == "all:localhost" and first["tags"] == ["always"] and not first["gather_facts"]
    assert first["tasks"] == [{"name": "Launch answers", "ansible.builtin.import_tasks": "tasks/launch_answers.yml"}]
    assert preflight["hosts"] == "localhost" and "preflight" in preflight["tags"]
    with open(os.path.join(REPO, "playbooks", "doctor.yml")) as fh:
        [doctor] = yaml.safe_load(fh)
    assert doctor["pre_tasks"][0]["ansible.builtin.import_tasks"] == "tasks/launch_answers.yml"


# --- every survey boolean is read with | bool --------------------------------------------------------------------

# the booleans a survey can set (the launch answers' targets, the driver upgrade's own) -> where they are read
SURVEY_BOOLEANS = ["gpu_reboot_allowed", "gpuops_k8s_api", "doctor_fail_on_error", "gpu_upgrade_evict_vms"]
CONDITION_KEYS = ("when", "that", "failed_when", "changed_when", "until")


def _files():
    for pattern in ("playbooks/*.yml", "playbooks/tasks/*.yml", "roles/*/tasks/*.yml", "roles/*/handlers/*.yml",
                    "roles/*/defaults/*.yml", "roles/*/vars/*.yml", "roles/*/templates/*.j2"):
        yield from sorted(glob.glob(os.path.join(REPO, pattern)))


def _expressions(path):
    """(expression, kind): conditions ('cond') and the insides of {{ }} / {% %} ('jinja') of a file."""
    with open(path) as fh:
        text = fh.read()
    for m in re.finditer(r"\{\{(.*?)\}\}|\{%(.*?)%\}", text, re.S):
        yield (m.group(1) or m.group(2)), "jinja"
    if path.endswith(".yml"):
        def walk(node):
            if isinstance(node, dict):
                for k, v in node.items():
                    if k in CONDITION_KEYS:
                        for c in (v if isinstance(v, list) else [v]):
                            if isinstance(c, str):
                                yield c, "cond"
                    else:
                        yield from walk(v)
            elif isinstance(node, list):
                for v in node:
                    yield from walk(v)
        yield from walk(yaml.safe_load(text))


def _reads(var, expr):
    """Each read of ``var`` in ``expr`` (string literals left out): the text after it."""
    expr = re.sub(r"'[^']*'|\"[^\"]*\"", "''", expr)
    for m in re.finditer(r"(?<![\w.'\"])%s\b(?!\s*[:=](?!=))" % re.escape(var), expr):
        yield expr[m.end():]


BOOL_READ = re.compile(r"^\s*(\|\s*default\([^()]*\)\s*)?\|\s*bool\b")
# a check that the value is a boolean at all (driver_upgrade.yml's option check)
MEMBERSHIP = re.compile(r"^\s*(\|\s*default\([^()]*\)\s*)?\|\s*string\s*\|\s*lower\s*\)\s*in\s*\[")
# the whole expression is the value, with its default: an alias (a role default such as reboot_allowed) or a message
WHOLE = re.compile(r"^\s*(\|\s*default\([^()]*\)\s*)?$")


def test_every_survey_boolean_is_read_with_bool():
    todo, seen, bad = list(SURVEY_BOOLEANS), set(), []
    while todo:
        var = todo.pop()
        if var in seen:
            continue
        seen.add(var)
        for path in _files():
            rel = os.path.relpath(path, REPO)
            if rel == "playbooks/tasks/launch_answers.yml":
                continue  # sets them (from the gpuops_launch_* answers, compared as text): no read
            with open(path) as fh:
                lines = fh.read().splitlines()
            for expr, kind in _expressions(path):
                for rest in _reads(var, expr):
                    if BOOL_READ.match(rest) or MEMBERSHIP.match(rest):
                        continue
                    if kind == "jinja" and WHOLE.match(rest) and expr.strip().startswith(var):
                        # `alias: "{{ var | default(x) }}"` makes alias a read of var: follow it
                        for ln in lines:
                            m = re.match(r"^\s*([a-z_][a-z0-9_]*):\s*[\"']?\{\{\s*%s\b" % re.escape(var), ln)
                            if m:
                                todo.append(m.group(1))
                        continue
                    bad.append((rel, var, expr.strip()[:120]))
    assert {"reboot_allowed", "preflight_k8s_api", "doctor_k8s_api"} <= seen, sorted(seen)
    assert bad == [], "a survey boolean read without | bool ('false' would be true): %s" % bad


# --- the cluster credentials reach the k8s modules -----------------------------------------------------------------

class StandIn(http.server.BaseHTTPRequestHandler):
    """An API server that answers 401 to everything and remembers the Authorization header of each request."""

    seen: list = []

    def do_GET(self):  # noqa: N802 -- http.server's name
        self.seen.append((self.path, self.headers.get("Authorization")))
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Unauthorized",
                           "message": "stand-in", "code": 401}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def api_server():
    StandIn.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def run_cluster_reads(tmp_path, envvars, extravars):
    """The cluster plays' module_defaults, a read by the collection's module and one by kubernetes.core's, under
    ansible-runner (how AWX runs a job: the credential's env in envvars, its extra vars in extravars)."""
    pdd = tmp_path / "runner"
    (pdd / "project").mkdir(parents=True)
    (pdd / "project" / "reads.yml").write_text(yaml.safe_dump([{
        "name": "Cluster reads", "hosts": "localhost", "gather_facts": False,
        "module_defaults": {"group/gpuops.nvidia.k8s": {"kubeconfig": "{{ gpuops_kubeconfig | default(omit) }}"}},
        "tasks": [
            {"name": "The collection's module", "gpuops.nvidia.k8s_bulk_info": {
                "queries": {"nodes": {"kind": "Node"}}, "connect_timeout": 5, "request_timeout": 5},
             "ignore_errors": True, "register": "ours"},
            {"name": "kubernetes.core's module", "kubernetes.core.k8s_info": {"kind": "Node"}, "ignore_errors": True},
        ]}]))
    inv = tmp_path / "localhost.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    env = {"ANSIBLE_COLLECTIONS_PATH": "%s:%s" % (collections_tree(tmp_path), SITE_PACKAGES), "HOME": str(tmp_path),
           "PATH": VENV_BIN + ":" + os.environ["PATH"], "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg")}
    env.update(envvars)
    return ansible_runner.run(private_data_dir=str(pdd), playbook="reads.yml", inventory=str(inv), envvars=env,
                              extravars=extravars, quiet=True, timeout=300)


def kubeconfig(server, token):
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                           "clusters": [{"name": "k", "cluster": {"server": server}}],
                           "users": [{"name": "u", "user": {"token": token}}],
                           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]})


def tokens():
    return {auth for _path, auth in StandIn.seen}


def test_the_kubeconfig_credential_reaches_the_modules(tmp_path, api_server):
    """gpuops.nvidia kubeconfig: AWX writes the file and sets K8S_AUTH_KUBECONFIG (no gpuops_kubeconfig given)."""
    path = tmp_path / "env" / "tmpkubeconfig"
    path.parent.mkdir()
    path.write_text(kubeconfig(api_server, "from-the-credential"))
    r = run_cluster_reads(tmp_path, {"K8S_AUTH_KUBECONFIG": str(path)}, {})
    assert r.status == "successful", r.stdout.read()
    assert len(StandIn.seen) >= 2 and tokens() == {"Bearer from-the-credential"}, StandIn.seen
    failed = [e for e in r.events if e["event"] == "runner_on_failed"]
    assert len(failed) == 2 and all(e["event_data"]["ignore_errors"] for e in failed)


def test_the_credentials_extra_var_outranks_an_inventory_kubeconfig(tmp_path, api_server):
    """The same credential's extra var gpuops_kubeconfig (the file's path) is what the plays pass as kubeconfig."""
    path = tmp_path / "tmpkubeconfig"
    path.write_text(kubeconfig(api_server, "from-the-extra-var"))
    wrong = tmp_path / "inventory-kubeconfig"
    wrong.write_text(kubeconfig(api_server, "from-the-inventory"))
    r = run_cluster_reads(tmp_path, {"K8S_AUTH_KUBECONFIG": str(wrong)}, {"gpuops_kubeconfig": str(path)})
    assert r.status == "successful", r.stdout.read()
    ours = [p for p, auth in StandIn.seen if auth == "Bearer from-the-extra-var"]
    assert ours, StandIn.seen  # the collection's module took the extra var; kubernetes.core's k8s_info the env
    assert tokens() <= {"Bearer from-the-extra-var", "Bearer from-the-inventory"}


def test_the_builtin_bearer_token_credential_reaches_the_modules(tmp_path, api_server):
    """AWX's "OpenShift or Kubernetes API Bearer Token": K8S_AUTH_HOST, K8S_AUTH_API_KEY, K8S_AUTH_VERIFY_SSL
    (False without a CA; with one, K8S_AUTH_SSL_CA_CERT, a file)."""
    r = run_cluster_reads(tmp_path, {"K8S_AUTH_HOST": api_server, "K8S_AUTH_API_KEY": "bearer-from-awx",
                                     "K8S_AUTH_VERIFY_SSL": "False"}, {})
    assert r.status == "successful", r.stdout.read()
    assert len(StandIn.seen) >= 2 and tokens() == {"Bearer bearer-from-awx"}, StandIn.seen


def test_kubernetes_core_helm_reads_the_same_environment():
    """kubernetes.core.helm (roles/gpu_operator) falls back to the same K8S_AUTH_* names."""
    with open(os.path.join(SITE_PACKAGES, "ansible_collections", "kubernetes", "core", "plugins", "module_utils",
                           "helm_args_common.py")) as fh:
        text = fh.read()
    for name in ("K8S_AUTH_KUBECONFIG", "K8S_AUTH_HOST", "K8S_AUTH_API_KEY", "K8S_AUTH_VERIFY_SSL", "K8S_AUTH_SSL_CA_CERT"):
        assert '"%s"' % name in text, name
    with open(os.path.join(REPO, "plugins", "module_utils", "_k8s_client.py")) as fh:
        ours = fh.read()
    for name in ("K8S_AUTH_KUBECONFIG", "K8S_AUTH_HOST", "K8S_AUTH_API_KEY", "K8S_AUTH_VERIFY_SSL", "K8S_AUTH_SSL_CA_CERT"):
        assert 'env("%s"' % name in ours, name
