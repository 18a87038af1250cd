"""The doctor's "nvidia-smi not found in the container" case: CDI spec and NVIDIA runtime registration.

Node files are dicts {path: text}; ``role_reads`` does what roles/doctor/tasks/runtime.yml and
containerd_imports.yml do on a node (stat/find/slurp, two levels of containerd imports) with the same
filters, so the plumbing is tested together with the findings.
"""
from __future__ import annotations

import base64
import copy
import fnmatch
import os
import posixpath

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils import _gpu_facts
from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _doctor

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "runtime")

SPEC_YAML = """---
cdiVersion: 0.5.0
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: "0"
kind: nvidia.com/gpu
"""
SPEC_JSON = '{"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": [{"name": "all", "containerEdits": {}}]}'

V3_MAIN = """# containerd 2.x, site config
version = 3
imports = ["conf.d/*.toml"]

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
"""
V3_NVIDIA_DROPIN = """version = 3
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]
    BinaryName = "/usr/bin/nvidia-container-runtime"
"""
V2_NVIDIA = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "/usr/bin/nvidia-container-runtime"
"""
CRIO_NVIDIA = """[crio.runtime.runtimes.nvidia]
runtime_path = "/usr/bin/nvidia-container-runtime"
runtime_type = "oci"
"""


def fixture(*parts):
    with open(os.path.join(FIXTURES, *parts)) as f:
        return f.read()


def _slurp(tree, path):
    if path in tree:
        return {"item": path, "failed": False, "encoding": "base64",
                "content": base64.b64encode(tree[path].encode()).decode(), "source": path}
    return {"item": path, "failed": False, "failed_when_result": False, "msg": "file not found: %s" % path}


def _isdir(tree, d):
    return any(p.startswith(d.rstrip("/") + "/") for p in tree)


def role_reads(tree, **cfg):
    """roles/doctor/tasks/runtime.yml over an in-memory node: the state handed to gpu_diagnose."""
    state = dict(cfg)
    st = _doctor.runtime_state(state)
    crio = st["runtime"] in ("auto", "crio")
    listed = []
    for d in st["cdi_dirs"]:
        listed += [p for p in sorted(tree) if posixpath.dirname(p) == d and p.endswith((".json", ".yaml", ".yml"))]
    if crio:
        listed += [p for p in sorted(tree) if p.startswith(st["crio_config_dir"] + "/")]
    configs = {"none": [], "auto": [st["containerd_config"], st["crio_config"], st["docker_config"]],
               "containerd": [st["containerd_config"]], "crio": [st["crio_config"]],
               "docker": [st["docker_config"]]}[st["runtime"]]
    paths = list(dict.fromkeys(configs + listed))
    state = _doctor.runtime_read(state, [_slurp(tree, p) for p in paths])
    if st["runtime"] in ("auto", "containerd"):
        for _level in range(2):
            pending = _doctor.runtime_pending(state)
            found = []
            for g in pending["globs"]:
                if not _isdir(tree, g["dir"]):
                    continue
                base = g["dir"].rstrip("/") + "/"
                for p in sorted(tree):
                    rel = p[len(base):] if p.startswith(base) else None
                    if rel and rel.count("/") < g["depth"] and fnmatch.fnmatch(posixpath.basename(p), g["name"]):
                        found.append(p)
            paths = list(dict.fromkeys(pending["read"] + found))
            state = _doctor.runtime_read(state, [_slurp(tree, p) for p in paths], [g["pattern"] for g in pending["globs"]])
    return state


@pytest.fixture
def h200(roots, h200_nvml):
    facts, _warnings = _gpu_facts.gather(roots["h200"], _gpu_facts.SUBSETS, nvml_lib=h200_nvml,
                                         load_nvml=lambda: (None, "no pynvml in unit tests"))
    facts["probes"] = {"nvidia_smi": True, "toolkit": True}
    return facts


def diagnose(facts, tree, workload="container", expect=None, **cfg):
    facts = copy.deepcopy(facts)
    facts["container_runtime"] = role_reads(tree, **cfg)
    return _doctor.diagnose(facts, dict({"workload": workload}, **(expect or {})))


def ids(findings):
    return sorted(f["id"] for f in findings)


def only(findings, fid):
    got = [f for f in findings if f["id"] == fid]
    assert len(got) == 1, findings
    return got[0]


GOOD_V3 = {
    "/etc/containerd/config.toml": V3_MAIN,
    "/etc/containerd/conf.d/99-nvidia.toml": V3_NVIDIA_DROPIN,
    "/etc/cdi/nvidia.yaml": SPEC_YAML,
}


# -- all right: nothing to report -------------------------------------------------------------------

def test_good_containerd_v3_with_imported_dropin_and_cdi_spec(h200):
    assert diagnose(h200, GOOD_V3) == []
    state = role_reads(GOOD_V3)
    assert state["globbed"] == ["/etc/containerd/conf.d/*.toml"]  # relative glob resolved against the main file's dir
    assert [p for p, _d in _doctor.containerd_chain(state)["order"]] == [
        "/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"]


def test_unset_workload_is_a_container_node_too(h200):
    assert diagnose(h200, GOOD_V3, workload="") == []
    assert ids(diagnose(h200, {"/etc/cdi/nvidia.yaml": SPEC_YAML}, workload="")) == ["container-runtime-config-missing"]


def test_containerd_2_4_default_config_with_nvidia_dropin(h200):
    tree = {"/etc/containerd/config.toml": fixture("containerd", "v4-default-2.4.toml"),
            "/etc/containerd/conf.d/99-nvidia.toml": V3_NVIDIA_DROPIN,
            "/var/run/cdi/nvidia.com-gpu.json": SPEC_JSON}
    assert diagnose(h200, tree) == []


def test_v2_config_with_runtime_in_main_file(h200):
    tree = {"/etc/containerd/config.toml": fixture("containerd", "v2-custom.toml") + "\n" + V2_NVIDIA.split("\n", 1)[1],
            "/etc/cdi/nvidia.yaml": SPEC_YAML}
    assert diagnose(h200, tree) == []


def test_literal_relative_and_nested_imports_are_followed(h200):
    tree = {"/etc/containerd/config.toml": 'version = 2\nimports = ["extra/site.toml"]\n',
            "/etc/containerd/extra/site.toml": 'version = 2\nimports = ["/opt/gpu/*.toml"]\n',
            "/opt/gpu/nvidia.toml": V2_NVIDIA,
            "/etc/cdi/nvidia.yaml": SPEC_YAML}
    assert diagnose(h200, tree) == []


# -- (a) CDI spec missing ---------------------------------------------------------------------------

def test_cdi_spec_missing(h200):
    tree = {k: v for k, v in GOOD_V3.items() if not k.startswith("/etc/cdi")}
    findings = diagnose(h200, tree)
    assert ids(findings) == ["cdi-spec-missing"]
    f = findings[0]
    assert f["severity"] == "error"
    assert "nvidia.com/gpu" in f["summary"] and "/etc/cdi or /var/run/cdi" in f["summary"]
    assert "nvidia-smi: not found" in f["summary"]
    assert f["remediation"] == ("run playbooks/container_toolkit.yml "
                                "(or `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`)")


@pytest.mark.parametrize("path,text", [
    ("/etc/cdi/nvidia.yaml", "---\ncdiVersion: 0.5.0\nkind: example.com/fpga\ndevices: []\n"),  # another vendor's spec
    ("/etc/cdi/sub/nvidia.yaml", SPEC_YAML),                                                   # CDI does not descend
    ("/etc/cdi/nvidia.yaml", "---\ncontainerEdits:\n  kind: nvidia.com/gpu\n"),                 # not the top-level kind
    ("/var/run/cdi/nvidia.json", "{not json"),
])
def test_specs_that_do_not_count(h200, path, text):
    tree = dict(GOOD_V3)
    del tree["/etc/cdi/nvidia.yaml"]
    tree[path] = text
    assert ids(diagnose(h200, tree)) == ["cdi-spec-missing"]


def test_spec_with_yml_extension_is_named(h200):
    tree = dict(GOOD_V3)
    tree["/etc/cdi/nvidia.yml"] = tree.pop("/etc/cdi/nvidia.yaml")
    f = only(diagnose(h200, tree), "cdi-spec-missing")
    assert "/etc/cdi/nvidia.yml declares it but CDI reads only .yaml and .json" in f["summary"]
    assert f["remediation"].startswith("rename /etc/cdi/nvidia.yml to .yaml")


@pytest.mark.parametrize("text", [SPEC_JSON, "kind: 'nvidia.com/gpu'  # quoted\n", '"kind": "nvidia.com/gpu"\n'])
def test_cdi_kind_forms(text):
    assert _doctor.cdi_kind(text) == "nvidia.com/gpu"


def test_cdi_check_follows_doctor_expect_cdi(h200):
    tree = {k: v for k, v in GOOD_V3.items() if not k.startswith("/etc/cdi")}
    assert diagnose(h200, tree, cdi_dirs=[]) == []
    assert diagnose(h200, dict(tree, **{"/srv/cdi/gpu.yaml": SPEC_YAML}), cdi_dirs=["/srv/cdi/"]) == []


# -- (b) NVIDIA runtime missing -----------------------------------------------------------------------

def test_containerd_v3_runtime_missing(h200):
    tree = {k: v for k, v in GOOD_V3.items() if "conf.d" not in k}
    findings = diagnose(h200, tree)
    assert ids(findings) == ["nvidia-runtime-missing"]
    f = findings[0]
    assert f["severity"] == "error"
    assert 'plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia' in f["summary"]
    assert "/etc/containerd/config.toml" in f["summary"] and "nvidia-smi: not found" in f["summary"]
    assert f["remediation"].startswith("run playbooks/container_toolkit.yml to register the nvidia runtime "
                                       "(containerd: config_path /etc/containerd/config.toml")
    assert "nvidia-ctk runtime configure --runtime=containerd --config=/etc/containerd/config.toml" in f["remediation"]
    assert f["detail"]["runtime"] == "containerd" and f["detail"]["declared_in"] == []


def test_containerd_dropin_without_nvidia_names_the_imports(h200):
    tree = dict(GOOD_V3, **{"/etc/containerd/conf.d/99-nvidia.toml": "version = 3\n",
                            "/etc/containerd/conf.d/10-mirrors.toml": "version = 3\n"})
    f = only(diagnose(h200, tree), "nvidia-runtime-missing")
    assert "its imports (/etc/containerd/conf.d/10-mirrors.toml, /etc/containerd/conf.d/99-nvidia.toml)" in f["summary"]


def test_containerd_v2_runtime_missing(h200):
    tree = {"/etc/containerd/config.toml": fixture("containerd", "v2-custom.toml"), "/etc/cdi/nvidia.yaml": SPEC_YAML}
    f = only(diagnose(h200, tree), "nvidia-runtime-missing")
    assert 'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia' in f["summary"]


def test_containerd_runtime_under_the_wrong_plugin_for_the_version(h200):
    # a v2-layout runtime pasted into a version 3 file: containerd 2.x ignores it
    tree = {"/etc/containerd/config.toml": "version = 3\n" + V2_NVIDIA.split("\n", 1)[1], "/etc/cdi/nvidia.yaml": SPEC_YAML}
    f = only(diagnose(h200, tree), "nvidia-runtime-missing")
    assert "wrong plugin for the file's config version" in f["summary"]


def test_non_default_containerd_config_is_named_in_the_fix(h200):
    path = "/etc/k8s/containerd.toml"
    tree = {path: "version = 2\n", "/etc/cdi/nvidia.yaml": SPEC_YAML}
    f = only(diagnose(h200, tree, containerd_config=path), "nvidia-runtime-missing")
    assert "(containerd: config_path %s; -e 'container_toolkit_runtime=containerd " \
           "container_toolkit_runtime_config_path=%s')" % (path, path) in f["remediation"]


def test_later_import_shadows_the_runtime_on_old_containerd(h200):
    tree = {"/etc/containerd/config.toml": 'imports = ["/etc/containerd/conf.d/*.toml"]\n' + V2_NVIDIA,
            "/etc/containerd/conf.d/50-mirrors.toml":
                'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/etc/containerd/certs.d"\n',
            "/etc/cdi/nvidia.yaml": SPEC_YAML}
    f = only(diagnose(h200, tree), "nvidia-runtime-shadowed")
    assert f["severity"] == "warning" and f["detail"]["shadowed_by"] == "/etc/containerd/conf.d/50-mirrors.toml"
    assert _doctor.readiness(dict(h200, container_runtime=role_reads(tree)), "container")["ready"] is True


def test_crio_runtime_present_in_a_dropin(h200):
    tree = {"/etc/crio/crio.conf": '[crio.runtime]\ndefault_runtime = "crun"\n',
            "/etc/crio/crio.conf.d/99-nvidia.toml": CRIO_NVIDIA,   # CRI-O reads every file, whatever its name
            "/etc/cdi/nvidia.yaml": SPEC_YAML}
    assert diagnose(h200, tree) == []


def test_crio_runtime_missing(h200):
    tree = {"/etc/crio/crio.conf.d/00-default.conf": '[crio.runtime]\ndefault_runtime = "crun"\n',
            "/etc/cdi/nvidia.yaml": SPEC_YAML}
    f = only(diagnose(h200, tree), "nvidia-runtime-missing")
    assert f["summary"].startswith("CRI-O has no nvidia runtime: [crio.runtime.runtimes.nvidia]")
    assert "(CRI-O: config_path /etc/crio/crio.conf.d/99-nvidia.toml; -e 'container_toolkit_runtime=crio')" in f["remediation"]


def test_docker_runtime_present_and_missing(h200):
    daemon = fixture("docker", "daemon.json")
    tree = {"/etc/docker/daemon.json": daemon, "/etc/cdi/nvidia.yaml": SPEC_YAML}
    f = only(diagnose(h200, tree), "nvidia-runtime-missing")
    assert f["summary"].startswith("Docker has no nvidia runtime: runtimes.nvidia is missing from /etc/docker/daemon.json")
    assert "(Docker: config_path /etc/docker/daemon.json; -e 'container_toolkit_runtime=docker')" in f["remediation"]
    tree["/etc/docker/daemon.json"] = daemon.replace(
        '"runsc": {"path": "/usr/bin/runsc"}', '"runsc": {"path": "/usr/bin/runsc"}, "nvidia": {"path": "nvidia-container-runtime", "args": []}')
    assert diagnose(h200, tree) == []


def test_docker_host_whose_containerd_has_cri_disabled(h200):
    # containerd.io (Docker's package) ships config.toml with the CRI plugin disabled: only Docker counts
    tree = {"/etc/containerd/config.toml": 'disabled_plugins = ["cri"]\n',
            "/etc/docker/daemon.json": '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}',
            "/etc/cdi/nvidia.yaml": SPEC_YAML}
    assert diagnose(h200, tree) == []
    del tree["/etc/docker/daemon.json"]
    f = only(diagnose(h200, tree), "container-runtime-config-missing")
    assert "disables containerd's CRI plugin" in f["summary"]


def test_every_existing_runtime_config_is_checked(h200):
    tree = dict(GOOD_V3, **{"/etc/docker/daemon.json": "{}"})
    f = only(diagnose(h200, tree), "nvidia-runtime-missing")
    assert f["detail"]["runtime"] == "docker"
    assert diagnose(h200, tree, runtime="containerd") == []   # container_toolkit_runtime: containerd


# -- no runtime config, broken or unreadable config, gating ------------------------------------------

def test_no_runtime_config_at_all(h200):
    findings = diagnose(h200, {"/etc/cdi/nvidia.yaml": SPEC_YAML})
    f = only(findings, "container-runtime-config-missing")
    assert f["severity"] == "error"
    assert "/etc/containerd/config.toml, /etc/crio/crio.conf, /etc/crio/crio.conf.d/, /etc/docker/daemon.json" in f["summary"]
    assert "playbooks/container_toolkit.yml" in f["remediation"]


def test_named_runtime_without_its_config(h200):
    f = only(diagnose(h200, GOOD_V3, runtime="crio"), "container-runtime-config-missing")
    assert f["detail"]["looked"] == ["/etc/crio/crio.conf, /etc/crio/crio.conf.d/"]


def test_runtime_none_checks_only_the_cdi_spec(h200):
    assert diagnose(h200, {"/etc/cdi/nvidia.yaml": SPEC_YAML}, runtime="none") == []
    assert ids(diagnose(h200, {}, runtime="none")) == ["cdi-spec-missing"]


def test_broken_configs(h200):
    tree = dict(GOOD_V3, **{"/etc/containerd/conf.d/99-nvidia.toml": "[plugins\n"})
    f = only(diagnose(h200, tree), "container-runtime-config-invalid")
    assert "/etc/containerd/conf.d/99-nvidia.toml: not valid TOML" in f["summary"]
    tree = {"/etc/docker/daemon.json": '{"runtimes": ', "/etc/cdi/nvidia.yaml": SPEC_YAML}
    assert ids(diagnose(h200, tree)) == ["container-runtime-config-invalid"]


def test_unreadable_config_is_a_warning_not_a_verdict(h200):
    state = role_reads({"/etc/cdi/nvidia.yaml": SPEC_YAML})
    state = _doctor.runtime_read(state, [{"item": "/etc/containerd/config.toml", "failed": False,
                                          "msg": "file is not readable: /etc/containerd/config.toml"}])
    facts = dict(h200, container_runtime=state)
    findings = _doctor.diagnose(facts, {"workload": "container"})
    assert ids(findings) == ["runtime-config-unreadable"]
    assert "--become" in findings[0]["remediation"]


def test_imports_deeper_than_two_levels_are_named(h200):
    tree = {"/etc/containerd/config.toml": 'version = 2\nimports = ["a.toml"]\n',
            "/etc/containerd/a.toml": 'version = 2\nimports = ["b.toml"]\n',
            "/etc/containerd/b.toml": 'version = 2\nimports = ["c.toml"]\n',
            "/etc/containerd/c.toml": V2_NVIDIA,
            "/etc/cdi/nvidia.yaml": SPEC_YAML}
    f = only(diagnose(h200, tree), "nvidia-runtime-missing")
    assert "(imports not read: /etc/containerd/c.toml)" in f["summary"]


@pytest.mark.parametrize("workload,expect", [("vm-passthrough", {}), ("container", {"toolkit": False})])
def test_runtime_checks_only_where_they_apply(h200, workload, expect):
    findings = diagnose(h200, {}, workload=workload, expect=expect)
    assert not {"cdi-spec-missing", "container-runtime-config-missing"} & set(ids(findings))


def test_no_runtime_verdict_without_a_loaded_driver(roots):
    facts, _w = _gpu_facts.gather(roots["nouveau"], _gpu_facts.SUBSETS, load_nvml=lambda: (None, "none"))
    facts["container_runtime"] = role_reads({})
    assert "cdi-spec-missing" not in ids(_doctor.diagnose(facts, {"workload": "container"}))


def test_glob_matching_is_per_path_element():
    assert _doctor._glob_match("/etc/containerd/conf.d/*.toml", "/etc/containerd/conf.d/99-nvidia.toml")
    assert not _doctor._glob_match("/etc/containerd/conf.d/*.toml", "/etc/containerd/conf.d/sub/x.toml")
    assert _doctor._glob_match("/etc/*/conf.d/[^x]*.toml", "/etc/containerd/conf.d/a.toml")
    pending = _doctor.runtime_pending({"files": {"/etc/containerd/config.toml": 'imports = ["/etc/*/conf.d/*.toml"]'}})
    assert pending == {"read": [], "globs": [{"pattern": "/etc/*/conf.d/*.toml", "dir": "/etc", "depth": 3, "name": "*.toml"}]}
