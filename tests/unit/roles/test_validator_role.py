"""roles/validator rendered as Ansible renders it: the RBAC NVIDIA's validator v26.7.0 needs (its workload pods,
its own DaemonSet and the driver's), and where its driver validation looks for a driver outside the host's
standard places (validator_driver_install_dir) and whether it links /dev/char (validator_dev_char_symlinks)."""
from __future__ import annotations

import pytest
from role_render import Role, by_kind

ROLE = Role("validator")
JOB = {"name": "gpuops-validate-gpu-0-abc", "node": "gpu-0", "node_label": "gpu-0"}


def render(template="validator.yaml.j2", **overrides):
    return ROLE.render(template, **dict({"_validator_jobs": [JOB]}, **overrides))


def env(c):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def test_rbac_covers_what_the_validator_reads_and_writes():
    role = by_kind(render(), "Role", "gpuops-nvidia-operator-validator")
    rules = {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in role["rules"]}
    # cuda/plugin workload pods: created, watched, deleted; the validator DaemonSet (owner, tolerations) and the
    # driver DaemonSets (is the driver the operator's?) read
    assert rules[("", "pods")] >= {"create", "get", "list", "watch", "delete"}
    assert rules[("apps", "daemonsets")] == {"get", "list", "watch"}
    cluster = by_kind(render(), "ClusterRole", "gpuops-nvidia-operator-validator")
    assert {"get", "list", "watch"} <= set(cluster["rules"][0]["verbs"])


def driver_container(objs, kind, name):
    pod = by_kind(objs, kind, name)["spec"]["template"]["spec"]
    c = next(c for c in pod["initContainers"] if c["name"] == "driver-validation")
    vol = next(v for v in pod["volumes"] if v["name"] == "driver-install-dir")
    return c, vol


@pytest.mark.parametrize("template, kind, name", [("validator.yaml.j2", "DaemonSet", "nvidia-operator-validator"),
                                                  ("validator_jobs.yaml.j2", "Job", JOB["name"])])
def test_driver_dir_and_dev_char_links(template, kind, name):
    c, vol = driver_container(render(template), kind, name)
    assert env(c)["DRIVER_INSTALL_DIR"] == "/run/nvidia/driver"
    assert env(c)["DISABLE_DEV_CHAR_SYMLINK_CREATION"] == "false"
    assert vol["hostPath"] == {"path": "/run/nvidia/driver", "type": "DirectoryOrCreate"}
    assert {"name": "driver-install-dir", "mountPath": "/run/nvidia/driver",
            "mountPropagation": "HostToContainer"} in c["volumeMounts"]
    c, vol = driver_container(render(template, validator_driver_install_dir="/usr/local/nvidia",
                                     validator_dev_char_symlinks=False), kind, name)
    assert env(c)["DRIVER_INSTALL_DIR"] == "/usr/local/nvidia"
    assert env(c)["DISABLE_DEV_CHAR_SYMLINK_CREATION"] == "true"
    # a driver directory given must be there: never created empty on the host
    assert vol["hostPath"] == {"path": "/usr/local/nvidia", "type": "Directory"}


def test_only_the_driver_validation_gets_the_driver_settings():
    pod = by_kind(render(), "DaemonSet", "nvidia-operator-validator")["spec"]["template"]["spec"]
    for c in pod["initContainers"]:
        assert ("DRIVER_INSTALL_DIR" in env(c)) == (c["name"] == "driver-validation")
