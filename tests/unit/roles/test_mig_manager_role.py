"""roles/mig_manager rendered as Ansible renders it: runtimeClassName as the GPU Operator sets it,
schema-valid manifests, and the argument spec."""
from __future__ import annotations

import pytest
from role_render import Role, by_kind, k8s_strict_errors

ROLE = Role("mig_manager")
BASE = {}


def pod_spec(**overrides):
    objs = ROLE.render("mig_manager.yaml.j2", **dict(BASE, **overrides))
    return by_kind(objs, "DaemonSet", "nvidia-mig-manager")["spec"]["template"]["spec"]


def test_pods_run_with_the_nvidia_runtime_class():
    assert pod_spec()["runtimeClassName"] == "nvidia"


def test_runtime_class_follows_the_collection_name():
    assert pod_spec(gpuops_runtime_class="nvidia-cdi")["runtimeClassName"] == "nvidia-cdi"


def test_runtime_class_off_where_nvidia_is_the_default_runtime():
    spec = pod_spec(mig_manager_runtime_class="")
    assert "runtimeClassName" not in spec and spec["hostPID"] is True


@pytest.mark.parametrize("overrides", [{}, {"mig_manager_runtime_class": ""},
                                       {"mig_manager_image_pull_secrets": ["mirror"]}])
def test_manifests_are_schema_valid(overrides):
    for obj in ROLE.render("mig_manager.yaml.j2", **dict(BASE, **overrides)):
        assert k8s_strict_errors(obj) == [], obj["kind"]


def test_defaults_match_argument_specs():
    defaults = ROLE.plain("defaults/main.yml")
    options = ROLE.plain("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options)
    templar = ROLE.templar()
    for name, value in defaults.items():
        if isinstance(value, str) and "{{" in value:  # computed at run time: the spec gives the plain result
            value = templar.template(ROLE.variables()[name])
            if "default" not in options[name]:
                continue
        assert options[name]["default"] == value, name


def test_the_role_validates_its_configs_with_the_mig_config_modules_validator():
    """One validator, two users: the cluster's MIG manager refuses what mig_config refuses."""
    ok, facts = ROLE.set_fact("prepare.yml", "Validate the MIG configs")
    assert ok and "all-balanced" in facts["_mig_manager_config_names"]
    nonsense = {"version": "v1", "mig-configs": {"x": [{"devices": "all", "mig-enabled": True,
                                                        "mig-devices": {"9g.999gb": -3}}]}}
    with pytest.raises(Exception, match=r"'9g.999gb': count must be a positive integer, got -3"):
        ROLE.set_fact("prepare.yml", "Validate the MIG configs", gpuops_mig_configs=nonsense)
