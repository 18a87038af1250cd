# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Hostile-input corpus: a value that is valid but for a trailing newline is refused by every check.

``match('^...$')`` (Ansible's test is ``re.match``) and Python's ``re.match(r"^...$")`` accept ``"580\\n"``
as a driver branch: ``$`` also matches just before a final newline.  The value then reaches a package
name, a systemd unit, a unit file line, an env file or a label.  Each check below is run as the collection
runs it - a role's own assert/when expressions and templates through Ansible's Templar with the role's
defaults, the playbook's task, the module_utils function - with a good value (accepted) and the same
value plus "\\n" (refused).  Who controls the inputs: the operator's inventory and group_vars (role
variables, the ClusterPolicy import's output), AWX launchers (extra variables), the node (sysfs, /proc,
the collection's state files on it)."""
from __future__ import annotations

import json
import os

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from role_render import Role

from ansible_collections.gpuops.nvidia.plugins.module_utils import _cdi, _container_runtime, _driver, _files, _host, _mig, _vfio
from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _clusterpolicy, _k8s_jobs

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
PLAYBOOKS = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "nvidia", "playbooks")


def failing(conditions, variables):
    """The conditions (an assert's `that`, a task's `when`) that do not hold."""
    templar = Templar(loader=DataLoader(), variables=variables)
    conditions = conditions if isinstance(conditions, list) else [conditions]
    return [c for c in conditions if not templar.evaluate_conditional(trust_as_template(c))]


def role_task(role, tasks_file, name, key, **overrides):
    r = Role(role)
    task = r.task(tasks_file, name)
    variables = r.variables(**overrides)
    variables.update(task.get("vars") or {})
    return failing(task[key] if key == "when" else task["ansible.builtin.assert"]["that"], variables)


# (role, tasks file, task, its conditions, variables that make the rest hold, the variable, a good value)
ROLE_CHECKS = [
    ("driver", "preflight.yml", "Check the role's inputs", "that", {"driver_version": ""}, "driver_branch", "580"),
    ("driver", "preflight.yml", "Check the role's inputs", "that", {}, "driver_version", "580.95.05"),
    ("driver", "preflight.yml", "Check the signing certificate's name (it reaches openssl's -subj)", "that", {},
     "driver_mok_cn", "gpuops DKMS signing key"),
    ("mig_layout", "validate.yml", "Check the inputs that reach the unit file and the boot-time command line", "that",
     {"mig_layout_state": "present"}, "mig_layout_config", "all-1g.18gb"),
    ("mig_layout", "validate.yml", "Check the inputs that reach the unit file and the boot-time command line", "that",
     {}, "mig_layout_unit", "gpuops-mig-layout.service"),
    ("vgpu_host", "validate.yml", "Check the role's inputs", "that", {}, "vgpu_host_selected", "a10-8q"),
    ("vgpu_host", "validate.yml", "Check the role's inputs", "that", {}, "vgpu_host_driver_version", "550.144.02"),
    ("vgpu_host", "validate.yml", "Check the role's inputs", "that", {}, "vgpu_host_num_vfs", "4"),
    ("vgpu_host", "validate.yml", "Check the role's inputs", "that", {}, "vgpu_host_driver_package", "/srv/vgpu/nvidia-vgpu.deb"),
    ("vgpu_host", "install.yml", "Install the .deb", "when", {}, "_vgpu_host_package_file", "/tmp/nvidia-vgpu.deb"),
    ("vgpu_host", "install.yml", "Install the .rpm", "when", {}, "_vgpu_host_package_file", "/tmp/nvidia-vgpu.rpm"),
    ("vgpu_host", "install.yml", "Run NVIDIA's installer (.run)", "when", {}, "_vgpu_host_package_file", "/tmp/nvidia-vgpu.run"),
    ("mps_control", "preflight.yml", "Check that nvidia-cuda-mps-control was found", "that", {},
     "_mps_control_bin", "/usr/bin/nvidia-cuda-mps-control"),
]


@pytest.mark.parametrize("role, tasks_file, name, key, context, var, good", ROLE_CHECKS,
                         ids=["%s:%s=%s" % (c[0], c[5], c[6]) for c in ROLE_CHECKS])
def test_role_check_refuses_a_trailing_newline(role, tasks_file, name, key, context, var, good):
    assert role_task(role, tasks_file, name, key, **dict(context, **{var: good})) == []
    assert role_task(role, tasks_file, name, key, **dict(context, **{var: good + "\n"})), "%s=%r passed" % (var, good + "\n")


@pytest.mark.parametrize("var", ["vgpu_host_after_units", "vgpu_host_before_units"])
def test_vgpu_host_unit_lists(var):
    name = "Check the role's inputs"
    assert role_task("vgpu_host", "validate.yml", name, "that", **{var: ["kubelet.service"]}) == []
    assert role_task("vgpu_host", "validate.yml", name, "that", **{var: ["kubelet.service\n"]})


@pytest.mark.parametrize("var", ["mig_layout_before_units", "mig_layout_after_units"])
def test_mig_layout_unit_lists(var):
    name = "Check the inputs that reach the unit file and the boot-time command line"
    assert role_task("mig_layout", "validate.yml", name, "that", **{var: ["kubelet.service"]}) == []
    assert role_task("mig_layout", "validate.yml", name, "that", **{var: ["kubelet.service\n"]})


def test_policies_quota_count():
    r = Role("policies")
    task = r.task("main.yml", "Validate GPU quotas")
    for gpus, ok in ((2, True), ("2", True), ("2\n", False), (" 2", False)):
        v = r.variables(item={"namespace": "team-a", "gpus": gpus})
        assert (failing(task["ansible.builtin.assert"]["that"], v) == []) is ok, gpus


def test_driver_upgrade_options():
    with open(os.path.join(PLAYBOOKS, "driver_upgrade.yml")) as fh:
        plays = yaml.safe_load(fh)
    task = next(t for p in plays for t in p.get("tasks") or [] if t.get("name") == "Check the options")
    that = task["ansible.builtin.assert"]["that"]
    base = {"_upgrade_hosts": ["gpu-1"]}
    assert failing(that, base) == []
    assert failing(that, dict(base, gpu_upgrade_drain_timeout="300", gpu_upgrade_drain_retry_delay="5")) == []
    assert failing(that, dict(base, gpu_upgrade_drain_timeout="300\n"))
    assert failing(that, dict(base, gpu_upgrade_drain_retry_delay="5\n"))
    # the drain's pod selectors: a list of strings ('' from a survey: none)
    for ok in (["app=x"], [], "", None):
        assert failing(that, dict(base, gpu_upgrade_drain_pod_selectors=ok)) == [], ok
    for bad in ("app=x", {"app": "x"}, ["app=x", 3]):
        assert failing(that, dict(base, gpu_upgrade_drain_pod_selectors=bad)), bad


# -- mps_control: every rule of the preflight template ----------------------------------------------------

MPS = Role("mps_control")


def mps_problems(**overrides):
    with open(os.path.join(MPS.path, "templates", "problems.j2")) as f:
        out = MPS.templar(**overrides).template(trust_as_template(f.read()))
    return json.loads(out) if isinstance(out, str) else list(out)


MPS_VALUES = {
    "mps_control_script_path": "/usr/local/sbin/gpuops-mps-control",
    "mps_control_env_file": "/etc/gpuops/mps-control.env",
    "mps_control_unit_path": "/etc/systemd/system/gpuops-mps-control.service",
    "mps_control_binary": "/usr/bin/nvidia-cuda-mps-control",
    "mps_control_pipe_directory": "/run/nvidia/mps/pipe",
    "mps_control_log_directory": "/var/log/nvidia-mps",
    "mps_control_active_thread_percentage": "50",
    "mps_control_pinned_device_mem_limit": "0=8G",
    "mps_control_visible_devices": "0",
    "mps_control_start_timeout": "30",
    "mps_control_stop_timeout": "30",
}


@pytest.mark.parametrize("var", sorted(MPS_VALUES))
def test_mps_control_refuses_a_trailing_newline(var):
    good = MPS_VALUES[var]
    assert mps_problems(**{var: good}) == []
    found = mps_problems(**{var: good + "\n"})
    assert found and any(var in p for p in found), found


@pytest.mark.parametrize("var", ["mps_control_unit_after", "mps_control_unit_before", "mps_control_binary_dirs"])
def test_mps_control_lists_refuse_a_trailing_newline(var):
    good = "/usr/local/nvidia/bin" if var == "mps_control_binary_dirs" else "containerd.service"
    assert mps_problems(**{var: [good]}) == []
    assert mps_problems(**{var: [good + "\n"]})


# -- the same in module_utils and plugin_utils --------------------------------------------------------------

def runtime_params(**over):
    p = {"runtime": "containerd", "runtime_name": "nvidia", "runtime_path": "/usr/bin/nvidia-container-runtime",
         "config_path": "/etc/containerd/config.toml", "restart_mode": "systemd", "service_name": "containerd.service"}
    p.update(over)
    return p


@pytest.mark.parametrize("option, good", [("service_name", "containerd.service"), ("runtime_name", "nvidia")])
def test_container_runtime_names(option, good):
    _container_runtime.check_params(runtime_params(**{option: good}))
    with pytest.raises(_container_runtime.RuntimeConfigError, match=option):
        _container_runtime.check_params(runtime_params(**{option: good + "\n"}))


def mig_doc(name="all-1g.18gb", profile="1g.18gb", device_filter="0x233510DE"):
    return {"version": "v1", "mig-configs": {name: [
        {"devices": "all", "mig-enabled": True, "mig-devices": {profile: 7}, "device-filter": device_filter}]}}


@pytest.mark.parametrize("field", ["name", "profile", "device_filter"])
def test_mig_config_refuses_a_trailing_newline(field):
    good = mig_doc()
    assert _mig.validate_config(good) == ["all-1g.18gb"]
    value = {"name": "all-1g.18gb", "profile": "1g.18gb", "device_filter": "0x233510DE"}[field] + "\n"
    with pytest.raises(_mig.MigError):
        _mig.validate_config(mig_doc(**{field: value}))


def test_node_label_value_of_a_name_with_a_newline_is_a_digest():
    assert _k8s_jobs.node_label_value("gpu-1") == "gpu-1"
    value = _k8s_jobs.node_label_value("gpu-1\n")
    assert "\n" not in value and value != "gpu-1\n"


def test_kernel_flavour_of_a_release_with_a_newline():
    assert _driver.kernel_flavour("6.8.0-45-generic", "ubuntu") == "generic"
    assert _driver.kernel_flavour("6.8.0-45-generic\n", "ubuntu") is None
    assert _driver.kernel_flavour("6.1.0-27-amd64\n", "debian") is None


def clusterpolicy(spec):
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"}, "spec": spec}


def test_clusterpolicy_versions_with_a_newline_are_not_imported():
    assert _clusterpolicy.toolkit_package_version("v1.17.8") == "1.17.8-1"
    assert _clusterpolicy.toolkit_package_version("v1.17.8\n") is None
    assert _clusterpolicy.clusterpolicy_to_vars(clusterpolicy({"driver": {"version": "580"}}))["vars"]["driver_branch"] == "580"
    for version in ("580\n", "580.95.05\n"):
        got = _clusterpolicy.clusterpolicy_to_vars(clusterpolicy({"driver": {"version": version}}))["vars"]
        assert "driver_branch" not in got and "driver_version" not in got, got


def test_cdi_yaml_quotes_a_value_with_a_newline():
    assert _cdi._yaml_scalar("/dev/nvidia0") == "/dev/nvidia0"
    assert yaml.safe_load("k: %s" % _cdi._yaml_scalar("/dev/nvidia0\n")) == {"k": "/dev/nvidia0\n"}


def test_vfio_state_refuses_a_key_or_driver_with_a_newline():
    good = {"devices": {"0000:01:00.0": {"original_driver": "nvidia", "persistent": True}}}
    assert _vfio.load_state(json.dumps(good))["devices"]
    for bad in ({"devices": {"0000:01:00.0\n": {"original_driver": "nvidia"}}},
                {"devices": {"0000:01:00.0": {"original_driver": "nvidia\n"}}}):
        with pytest.raises(_vfio.VfioError):
            _vfio.load_state(json.dumps(bad))
    assert _vfio.is_vfio_driver("nvgrace_gpu_vfio_pci") and not _vfio.is_vfio_driver("nvgrace_gpu_vfio_pci\n")


# -- digits: str.isdigit() says yes to '²', which int() refuses, and \d takes '５８０' --------------------------------

def test_a_temp_file_named_with_another_kind_of_digit_is_not_a_writer(tmp_path):
    # a node's file name in the directory of a file being written: it must not stop the write with a traceback
    (tmp_path / ".name.\u00b2.x.tmp").write_text("")
    assert _files._stale_temps(str(tmp_path), ".name.") == []


def test_kernel_releases_sort_with_other_kinds_of_digit():
    assert sorted(["6.1.0-\u00b2-amd64", "6.1.0-50-amd64"], key=_driver.release_key)[0] == "6.1.0-50-amd64"


@pytest.mark.parametrize("branch", ["\uff15\uff18\uff10", "5\u00b28", "\u0665\u0668\u0660"])
def test_a_driver_branch_in_other_digits_is_refused(branch):
    host = _driver.host_from_facts({"os": {"id": "ubuntu", "version_id": "24.04"},
                                    "kernel": {"release": "6.8.0-49-generic", "headers_present": True},
                                    "driver": {}, "devices": [], "nvswitches": []})
    assert _driver.plan(host, {"branch": "580", "state": "present"})
    with pytest.raises(_driver.DriverPlanError):
        _driver.plan(host, {"branch": branch, "state": "present"})


def test_a_driver_version_in_other_digits_is_no_version():
    assert _host.parse_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  \uff15\uff18\uff10.95.05  Sun")[0] is None
    assert _host.parse_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Sun")[0] == "580.95.05"
