# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The ClusterPolicy import against hostile input (whoever may edit a ClusterPolicy or a ConfigMap it
names): imported values stay data where the written group_vars are used -- from a file
(playbooks/import_clusterpolicy.yml) and from the shape kubernetes.core.k8s_info returns --, comment text
cannot add variables, only the importer's own variable names are written, and alias bombs, deep
nesting and oversized input are refused quickly, with a message, before objects are built.

Every template below would create a file under the test's ``marks`` directory if Ansible ever rendered
it; the tests assert that the directory stays empty."""
from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
import unicodedata

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import is_trusted_as_template
from ansible_collections.gpuops.nvidia.plugins.filter import clusterpolicy as f
from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _clusterpolicy as cp

from conftest import ansible_command, needs

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
BOOK = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "nvidia", "playbooks", "import_clusterpolicy.yml")
PLAYBOOK = ansible_command("ansible-playbook")

# line breaks YAML knows (a comment ends at any of them) and other characters a comment must not carry raw
SEPARATORS = ["\n", "\r", "\r\n", "\x85", "\u2028", "\u2029", "\x0b", "\x0c", "\x1b", "\x00", "\ufeff", "\u202e"]


def pipe(marks, what):
    return "{{ lookup('ansible.builtin.pipe', 'touch %s/%s') }}" % (marks, what)


def hostile_docs(marks, sep="\n"):
    """A ClusterPolicy and the ConfigMaps it names, with a template in every kind of place a value goes
    (a variable's value, a nested key, a list item, a ConfigMap's config text) and line breaks in every
    kind of text that ends in a comment (the policy's name, env names, unmapped values, unknown fields)."""
    def inject(name):
        return "x%sinjected_by_%s: \"%s\"%s# " % (sep, name, pipe(marks, "injected_" + name), sep)
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": inject("name")}, "spec": {
        "operator": {"runtimeClass": "nvidia", "labels": {"team": inject("unmapped_value")}},
        "daemonsets": {"tolerations": [{"key": pipe(marks, "toleration"), "operator": "Exists"}]},
        "devicePlugin": {
            "repository": "registry.example.com/" + pipe(marks, "repository"), "version": "v0.20.0",
            "resources": {"limits": {pipe(marks, "resources_key"): pipe(marks, "resources_value")}},
            "config": {"name": "dp-config", "default": "any"},
            "env": [{"name": inject("env_name"), "value": pipe(marks, "env_value")}]},
        "gfd": {"env": [{"name": "GFD_SLEEP_INTERVAL", "value": pipe(marks, "gfd_sleep")}]},
        "dcgmExporter": {"serviceMonitor": {"enabled": True, "interval": "30s",
                                            "additionalLabels": {pipe(marks, "label_key"): pipe(marks, "label_value")}}},
        "migManager": {"config": {"name": "mig-config", "default": "all-disabled"}},
        "driver": {"version": "580"},
        "futureComponent": {inject("unknown_key"): True},
    }}
    dp = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dp-config"}, "data": {
        "any": "version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - name: \"%s\"\n        replicas: 2\n"
               % pipe(marks, "configmap_text")}}
    mig = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mig-config"}, "data": {
        "config.yaml": "version: v1\nmig-configs:\n  all-disabled:\n    - devices: all\n      mig-enabled: false\n"
                       "  \"%s\":\n    - devices: all\n      mig-enabled: false\n" % pipe(marks, "configmap_key")}}
    return [policy, dp, mig]


def ansible_env(tmp_path):
    return dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0",
                ANSIBLE_STDOUT_CALLBACK="default", PWD=str(tmp_path))


def _limit_memory():
    limit = 3 * 1024 ** 3  # the old import grew by GBs on a 600-byte alias bomb; a bounded one needs a fraction
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_import(tmp_path, *args, timeout=300):
    cmd = [PLAYBOOK, "-i", "localhost,", BOOK, "-e", "ansible_python_interpreter=%s" % sys.executable] + list(args)
    return subprocess.run(cmd, env=ansible_env(tmp_path), capture_output=True, text=True, cwd=str(tmp_path),
                          timeout=timeout, check=False, preexec_fn=_limit_memory)


USE_PLAY = """\
- name: Use every imported variable, as the roles do
  hosts: all
  gather_facts: false
  tasks:
    - name: No variable came from comment text
      ansible.builtin.assert:
        that: query('ansible.builtin.varnames', '^injected') | length == 0
    - name: Template every imported variable
      ansible.builtin.copy:
        content: "{{ dict(names | zip(query('ansible.builtin.vars', *names))) | to_json }}"
        dest: "{{ used_out }}"
        mode: "0644"
    - name: Show them
      ansible.builtin.debug:
        var: item
      loop: "{{ query('ansible.builtin.vars', *names) }}"
"""


def use_imported(tmp_path, group_vars_text, names):
    """ansible-playbook over an inventory whose group_vars are ``group_vars_text``: every variable templated
    (written out as JSON, shown with debug); returns the variables as the play saw them."""
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (inv / "group_vars" / "all" / "gpu_operator.yml").write_text(group_vars_text)
    (inv / "hosts").write_text("node-1 ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable)
    (tmp_path / "use.yml").write_text(USE_PLAY)
    out = tmp_path / "used.json"
    (tmp_path / "names.json").write_text(json.dumps({"names": names, "used_out": str(out)}))
    res = subprocess.run([PLAYBOOK, "-i", str(inv / "hosts"), str(tmp_path / "use.yml"), "-e", "@names.json"],
                         env=ansible_env(tmp_path), capture_output=True, text=True, cwd=str(tmp_path), timeout=300,
                         check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(out.read_text())


def load_as_group_vars(text, tmp_path):
    """The file as Ansible's vars loader reads group_vars (trusted as templates, unless tagged)."""
    path = tmp_path / "loaded.yml"
    path.write_text(text)
    return DataLoader().load_from_file(str(path), trusted_as_template=True)


def strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from strings(k)
            yield from strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from strings(v)


def plain(obj):
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain(v) for v in obj]
    return obj


def check_written(text, result, tmp_path, marks):
    """The written group_vars: exactly the importer's variables, every string in them data, values unchanged
    (types included) -- then used by a play, which templates each one."""
    loaded = load_as_group_vars(text, tmp_path)
    assert list(loaded) == list(result["vars"])  # nothing added by comment text, nothing lost
    assert plain(loaded) == result["vars"]
    trusted = [s for s in strings(loaded) if is_trusted_as_template(s)]
    assert not trusted  # every string, nested keys and list items included, is data
    assert all(type(plain(loaded)[k]) is type(v) for k, v in result["vars"].items())
    used = use_imported(tmp_path, text, list(result["vars"]))
    assert used == result["vars"]  # what the roles get: the values as they were, templates not run
    assert sorted(os.listdir(marks)) == []


def test_file_import_never_runs_imported_data(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    docs = hostile_docs(marks)
    (tmp_path / "cp.yaml").write_text(yaml.safe_dump_all(docs))
    res = run_import(tmp_path, "-e", "clusterpolicy_file=cp.yaml", "-e", "clusterpolicy_output=out.yml")
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(os.listdir(marks)) == []  # the import itself ran nothing
    result = f.clusterpolicy_to_vars(docs)
    text = (tmp_path / "out.yml").read_text()
    assert text == f.clusterpolicy_group_vars(result, str(tmp_path / "cp.yaml"))
    assert pipe(marks, "configmap_key") in result["vars"]["gpuops_mig_configs"]["mig-configs"]
    check_written(text, result, tmp_path, marks)


def test_live_import_never_runs_imported_data(tmp_path):
    """The live path: kubernetes.core.k8s_info results (the ClusterPolicy, then one per ConfigMap it names),
    as the playbook hands them to the filter."""
    marks = tmp_path / "marks"
    marks.mkdir()
    policy, dp, mig = hostile_docs(marks, sep="\u2028")
    live = {"changed": False, "api_found": True, "failed": False, "resources": [policy]}
    needed = f.clusterpolicy_to_vars(live)["configmaps_needed"]
    assert needed == ["mig-config", "dp-config"]
    cms = [{"changed": False, "api_found": True, "resources": [cm], "item": cm["metadata"]["name"]} for cm in (dp, mig)]
    result = f.clusterpolicy_to_vars(live["resources"] + [r for c in cms for r in c["resources"]])
    assert result == f.clusterpolicy_to_vars(live, {"resources": [dp, mig]})
    check_written(f.clusterpolicy_group_vars(result, "cluster"), result, tmp_path, marks)


@pytest.mark.parametrize("sep", SEPARATORS, ids=[ascii(s) for s in SEPARATORS])
def test_comment_text_cannot_add_variables(sep, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    result = f.clusterpolicy_to_vars(hostile_docs(marks, sep))
    unmapped = [u["path"] for u in result["unmapped"]]
    assert "operator.labels" in unmapped and [p for p in unmapped if p.startswith("futureComponent.")]
    text = f.clusterpolicy_group_vars(result, "cp%s.yaml" % sep)
    loaded = load_as_group_vars(text, tmp_path)
    assert list(loaded) == list(result["vars"])
    for line in text.split("\n"):
        if line.startswith("#"):
            assert not [c for c in line if unicodedata.category(c)[0] in "CZ" and c != " "], repr(line)
    assert "\\" in text and "injected_by_name" in text  # the text is still shown, escaped


def test_every_string_of_every_variable_is_data(tmp_path):
    """Nested mappings and lists too; types are kept (a quoted '580' stays a string, false a boolean)."""
    result = f.clusterpolicy_to_vars(hostile_docs(tmp_path / "marks"))
    text = f.clusterpolicy_group_vars(result)
    assert text.startswith("--- !unsafe\n")
    loaded = load_as_group_vars(text, tmp_path)
    assert loaded["driver_branch"] == "580" and isinstance(loaded["driver_branch"], str)
    assert loaded["dcgm_exporter_service_monitor"] == "true" and isinstance(loaded["dcgm_exporter_service_monitor"], str)
    assert loaded["gpuops_mig_configs"]["mig-configs"]["all-disabled"][0]["mig-enabled"] is False
    assert not [s for s in strings(loaded) if is_trusted_as_template(s)]


@pytest.mark.parametrize("result, match", [
    ({"name": "p", "vars": {"injected": "x"}, "sources": {"injected": ["spec"]}}, "'injected' is not a variable"),
    ({"name": "p", "vars": {"driver_branch\ninjected": "1"}, "sources": {}}, "is not a variable"),
    ({"name": "p", "vars": {"ansible_python_interpreter": "/bin/sh"}, "sources": {}}, "is not a variable"),
    ({"name": "p", "vars": {}, "unmapped": [{"path": "a"}]}, "unmapped"),
    ({"name": ["p"], "vars": {}}, "name"),
])
def test_group_vars_writes_only_the_importers_variables(result, match):
    with pytest.raises(AnsibleFilterError, match="clusterpolicy_group_vars: .*" + match):
        f.clusterpolicy_group_vars(result)


NOT_NAMES = ["a\nb", "time-slicing\n", "../secrets/x", "Upper", "a" * 254, "{{ lookup('pipe', 'id') }}", "x y", ".leading",
             "x\u2028y", ""]


@pytest.mark.parametrize("name", NOT_NAMES[:-1])
@pytest.mark.parametrize("path", ["devicePlugin.config.name", "migManager.config.name", "migManager.gpuClientsConfig.name",
                                  "dcgmExporter.config.name", "vgpuDeviceManager.config.name"])
def test_configmap_names_are_kubernetes_names(path, name):
    """A ConfigMap name is read from the API server (the live import's k8s_info requests): a name, nothing else."""
    spec = {"sandboxWorkloads": {"enabled": True}}
    node = spec
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = name
    with pytest.raises(AnsibleFilterError, match="%s must be a ConfigMap name" % re.escape(path)):
        f.clusterpolicy_to_vars({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
                                 "spec": spec})


@pytest.mark.parametrize("name", NOT_NAMES[:-1] + [["regcred"], {"name": ["x"]}])
@pytest.mark.parametrize("spec, path, what", [
    ({"devicePlugin": {"imagePullSecrets": ["NAME"]}}, "devicePlugin.imagePullSecrets[0]", "a Secret name"),
    ({"validator": {"imagePullSecrets": [{"name": "NAME"}]}}, "validator.imagePullSecrets[0]", "a Secret name"),
    ({"daemonsets": {"priorityClassName": "NAME"}}, "daemonsets.priorityClassName", "a PriorityClass name"),
    ({"operator": {"runtimeClass": "NAME"}}, "operator.runtimeClass", "a RuntimeClass name"),
    ({"toolkit": {"env": [{"name": "CONTAINERD_RUNTIME_CLASS", "value": "NAME"}]}}, "toolkit.env[CONTAINERD_RUNTIME_CLASS]",
     "a runtime handler name"),
])
def test_other_names_are_kubernetes_names(spec, path, what, name):
    spec = json.loads(json.dumps(spec).replace('"NAME"', json.dumps(name)))
    with pytest.raises(AnsibleFilterError, match="%s(.value must be a string| must be %s)" % (re.escape(path), what)):
        f.clusterpolicy_to_vars({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
                                 "spec": spec})


@pytest.mark.parametrize("value", ["etc/containerd/config.toml", "/etc/containerd/config.toml\n", "/etc/a b.toml",
                                   "/etc/containerd/../shadow", "/x{{ lookup('pipe', 'id') }}", "/x\u2028y", "//x"])
@pytest.mark.parametrize("spec, path", [
    ({"toolkit": {"env": [{"name": "CONTAINERD_CONFIG", "value": "VALUE"}]}}, "toolkit.env[CONTAINERD_CONFIG]"),
    ({"toolkit": {"env": [{"name": "RUNTIME_DROP_IN_CONFIG_HOST_PATH", "value": "VALUE"}]}},
     "toolkit.env[RUNTIME_DROP_IN_CONFIG_HOST_PATH]"),
    ({"toolkit": {"env": [{"name": "CONTAINERD_SOCKET", "value": "VALUE"}]}}, "toolkit.env[CONTAINERD_SOCKET]"),
    ({"hostPaths": {"kubeletRootDir": "VALUE"}}, "hostPaths.kubeletRootDir"),
    ({"hostPaths": {"driverInstallDir": "VALUE"}}, "hostPaths.driverInstallDir"),
])
def test_host_paths_are_plain_absolute_paths(spec, path, value):
    """Paths the roles then edit or mount on every GPU host: absolute, no '..', no spaces, quotes or line breaks."""
    spec = json.loads(json.dumps(spec).replace('"VALUE"', json.dumps(value)))
    with pytest.raises(AnsibleFilterError, match="%s must be an absolute path" % re.escape(path)):
        f.clusterpolicy_to_vars({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
                                 "spec": spec})


def test_status_namespace_is_a_kubernetes_name():
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
              "spec": {}, "status": {"namespace": "gpu-operator"}}
    assert f.clusterpolicy_to_vars({"resources": [policy]})["namespace"] == "gpu-operator"
    policy["status"]["namespace"] = "gpu-operator/../../kube-system"
    with pytest.raises(AnsibleFilterError, match="status.namespace must be a namespace name"):
        f.clusterpolicy_to_vars({"resources": [policy]})


# -- alias bombs, deep nesting, oversized input --------------------------------------------------------------

def alias_bomb(levels=9, width=9):
    """'Billion laughs': each anchor a list of ``width`` aliases of the one before (width**levels leaves)."""
    lines = ["apiVersion: nvidia.com/v1", "kind: ClusterPolicy", "metadata: {name: bomb}",
             "l0: &a0 [%s]" % ", ".join(["lol"] * width)]
    for i in range(1, levels):
        lines.append("l%d: &a%d [%s]" % (i, i, ", ".join(["*a%d" % (i - 1)] * width)))
    lines.append("spec: {futureComponent: *a%d}" % (levels - 1))
    return "\n".join(lines) + "\n"


class Timeout(Exception):
    pass


@pytest.fixture
def deadline():
    """Fail (not hang) when the code under test runs past the given seconds."""
    def arm(seconds):
        def ring(_sig, _frame):
            raise Timeout("still running after %d s" % seconds)
        signal.signal(signal.SIGALRM, ring)
        signal.alarm(seconds)
    yield arm
    signal.alarm(0)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)


def test_alias_bomb_text_is_refused_before_it_is_built(deadline):
    text = alias_bomb()
    assert len(text) < 700
    deadline(10)
    with pytest.raises(AnsibleFilterError, match="clusterpolicy_to_vars: the ClusterPolicy input: YAML aliases stand "
                                                 "for more than 10000 nodes"):
        f.clusterpolicy_to_vars(text)


def test_alias_bomb_objects_are_refused_fast():
    """The same bomb already parsed by someone else (shared references, as yaml.safe_load or Ansible's
    from_yaml leave them): walking it is refused at the node limit. In a child process with a time and a
    memory limit, so that a walk of all 387 million leaves fails the test instead of the machine."""
    code = ("import sys, yaml; sys.path[:0] = %r; import conftest\n"
            "from ansible_collections.gpuops.nvidia.plugins.filter import clusterpolicy as f\n"
            "from ansible.errors import AnsibleFilterError\n"
            "try:\n    f.clusterpolicy_to_vars(yaml.safe_load(%r))\n"
            "except AnsibleFilterError as e:\n    print('REFUSED', e)\n") % (
        [os.path.join(REPO, "tests", "unit")], alias_bomb())
    start = time.monotonic()
    try:
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False,
                             preexec_fn=_limit_memory, cwd=os.path.join(REPO, "tests", "unit"))
    except subprocess.TimeoutExpired:
        pytest.fail("walking the alias bomb did not end in 30 s")
    assert "REFUSED clusterpolicy_to_vars: the ClusterPolicy input has more than 250000 nodes" in res.stdout, \
        res.stdout + res.stderr
    assert time.monotonic() - start < 30


def test_alias_bomb_file_is_refused_by_the_playbook(tmp_path):
    """ansible-playbook with the bomb as clusterpolicy_file: refused in seconds, nothing written (the old
    playbook read it with lookup('file') | from_yaml_all and grew for minutes)."""
    (tmp_path / "bomb.yaml").write_text(alias_bomb())
    start = time.monotonic()
    try:
        res = run_import(tmp_path, "-e", "clusterpolicy_file=bomb.yaml", "-e", "clusterpolicy_output=out.yml", timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the import of a 600-byte alias bomb did not end in 60 s")
    assert res.returncode != 0
    assert "YAML aliases stand for more than 10000 nodes" in res.stdout, res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert not (tmp_path / "out.yml").exists()
    assert time.monotonic() - start < 60


@pytest.mark.parametrize("text, match", [
    # merge keys expand like aliases
    ("a: &a {x: 1, y: 2}\nb: &b {<<: [*a, *a, *a, *a]}\nc: &c {<<: [*b, *b, *b, *b]}\n" +
     "".join("d%d: &d%d {<<: [%s]}\n" % (i, i, ", ".join(["*" + ("c" if i == 0 else "d%d" % (i - 1))] * 8)) for i in range(8)),
     "YAML aliases stand for more than 10000 nodes"),
    ("spec: &s {x: *s}\n", "recursive YAML alias"),
    ("spec: " + "[" * 500 + "]" * 500 + "\n", "nested deeper than 64 levels"),
    ("spec:\n" + "".join("%s- \n" % ("  " * i) for i in range(200)), "nested deeper than 64 levels"),
    ("spec: {x: " + "1" * 5000 + "}\n", "the ClusterPolicy input: .*line 1"),
    ("a: b: c\n", "the ClusterPolicy input is not valid YAML"),
    ("x: " + "y" * (8 * 1024 * 1024 + 1), "the ClusterPolicy input is larger than 8 MiB"),
])
def test_hostile_yaml_text_is_refused_with_a_message(text, match, deadline):
    deadline(20)
    with pytest.raises(AnsibleFilterError, match="clusterpolicy_to_vars: .*" + match):
        f.clusterpolicy_to_vars(text)


def test_deep_objects_are_refused_with_a_message(deadline):
    """Objects nested past the limit (a k8s_info result, or a value built in a play) end in a message, not
    in a RecursionError."""
    deep = {}
    node = deep
    for _level in range(5000):
        node["x"] = {}
        node = node["x"]
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
              "spec": {"futureComponent": deep}}
    deadline(20)
    with pytest.raises(AnsibleFilterError, match="nested deeper than 64 levels"):
        f.clusterpolicy_to_vars({"resources": [policy]})
    loop = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {}}
    loop["spec"]["self"] = loop
    with pytest.raises(AnsibleFilterError, match="nested deeper than 64 levels"):
        f.clusterpolicy_to_vars(loop)


def test_alias_bomb_in_a_configmap_is_refused(deadline):
    """A ConfigMap's config text is YAML too: parsed with the same limits, the message names it."""
    docs = [{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
             "spec": {"migManager": {"config": {"name": "mig-config"}}}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mig-config"},
             "data": {"config.yaml": alias_bomb().replace("spec:", "mig-configs:")}}]
    deadline(10)
    with pytest.raises(AnsibleFilterError, match="ConfigMap mig-config key config.yaml: YAML aliases stand for more "
                                                 "than 10000 nodes"):
        f.clusterpolicy_to_vars(docs)


@needs("docs/clusterpolicy-import.md")
def test_limits_are_the_documented_ones():
    with open(os.path.join(REPO, "docs", "clusterpolicy-import.md")) as fh:
        doc = fh.read()
    assert (cp.MAX_TEXT, cp.MAX_DEPTH, cp.MAX_NODES, cp.MAX_ALIAS_NODES) == (8 * 2 ** 20, 64, 250000, 10000)
    for row in ("| 8 MiB |", "| 64 levels |", "| 250,000 |", "| 10,000 |"):
        assert row in doc


def test_a_few_aliases_are_fine():
    text = ("apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata: {name: p}\nspec:\n"
            "  devicePlugin: {imagePullSecrets: &s [regcred]}\n  gfd: {imagePullSecrets: *s}\n")
    r = f.clusterpolicy_to_vars(text)
    assert r["vars"]["device_plugin_image_pull_secrets"] == r["vars"]["gfd_image_pull_secrets"] == ["regcred"]
    text = f.clusterpolicy_group_vars(r)
    assert "&" not in text and "*" not in text  # written out in full: no aliases in group_vars


def test_live_import_from_a_silent_api_server_ends_at_its_read_timeout(tmp_path):
    """kubernetes.core's k8s_info has no request timeout: the play's own task timeout bounds each live read."""
    sys.path.insert(0, os.path.join(REPO, "tests", "unit", "plugins", "module_utils"))
    import k8s_api_server  # pylint: disable=import-outside-toplevel
    with k8s_api_server.silent_listener() as url:
        kubeconfig = k8s_api_server.write_kubeconfig(tmp_path, url)
        start = time.monotonic()
        res = run_import(tmp_path, "-e", "clusterpolicy_output=%s" % (tmp_path / "out.yml"), "-e", "gpuops_kubeconfig=%s" % kubeconfig,
                         "-e", "clusterpolicy_read_timeout=3", timeout=120)
        took = time.monotonic() - start
    assert res.returncode != 0 and "Read the ClusterPolicy from the cluster" in res.stdout, res.stdout[-3000:]
    assert "timed out" in res.stdout.lower(), res.stdout[-3000:]
    assert took < 60, "the read took %.0f s" % took
    assert not (tmp_path / "out.yml").exists()
