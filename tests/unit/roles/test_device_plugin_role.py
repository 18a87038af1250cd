"""roles/device_plugin rendered as Ansible renders it: NVIDIA's MPS control daemon beside the device plugin
(the GPU Operator's state-mps-control-daemon, same image, service account and named configs), on the nodes GFD
labels nvidia.com/mps.capable=true, and the MPS root both of them and the plugin's clients share."""
from __future__ import annotations

import pytest
from role_render import Role, by_kind

ROLE = Role("device_plugin")
MPS = "nvidia-device-plugin-mps-control-daemon"


def render(**overrides):
    base = {"_device_plugin_config": {"data": {"default": "version: v1\n"}}}
    return ROLE.render("device_plugin.yaml.j2", **dict(base, **overrides))


def spec(objs, name):
    return by_kind(objs, "DaemonSet", name)["spec"]["template"]["spec"]


def container(pod, name, init=False):
    return next(c for c in pod["initContainers" if init else "containers"] if c["name"] == name)


def env(c):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def test_mps_daemon_on_mps_capable_device_plugin_nodes_only():
    objs = render()
    pod = spec(objs, MPS)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/mps.capable": "true"}
    assert pod["hostPID"] is True
    assert pod["serviceAccountName"] == "nvidia-device-plugin"
    dp_image = container(spec(objs, "nvidia-device-plugin-daemonset"), "nvidia-device-plugin")["image"]
    images = {c["image"] for c in pod["initContainers"] + pod["containers"]}
    assert images == {dp_image}, "the MPS daemon, its mounts and its config-manager: the device plugin's image"
    assert pod["runtimeClassName"] == "nvidia"


def test_mps_daemon_containers_as_the_operator_runs_them():
    pod = spec(render(), MPS)
    assert [c["name"] for c in pod["initContainers"]] == ["mps-control-daemon-mounts", "config-manager-init"]
    mounts = container(pod, "mps-control-daemon-mounts", init=True)
    assert mounts["command"] == ["mps-control-daemon", "mount-shm"]
    assert mounts["volumeMounts"] == [{"name": "mps-root", "mountPath": "/mps", "mountPropagation": "Bidirectional"}]
    assert mounts["securityContext"] == {"privileged": True}
    daemon = container(pod, "mps-control-daemon-ctr")
    e = env(daemon)
    assert daemon["command"] == ["mps-control-daemon"]
    assert e["CONFIG_FILE"] == "/config/config.yaml"
    assert e["NVIDIA_VISIBLE_DEVICES"] == "all" and e["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert e["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert {m["mountPath"]: m["name"] for m in daemon["volumeMounts"]} == {
        "/dev/shm": "mps-shm", "/mps": "mps-root", "/available-configs": "available-configs", "/config": "config"}
    sidecar = env(container(pod, "config-manager"))
    assert sidecar["ONESHOT"] == "false" and sidecar["SIGNAL"] == "1"
    assert sidecar["PROCESS_TO_SIGNAL"] == "/usr/bin/mps-control-daemon"
    assert sidecar["NODE_LABEL"] == "nvidia.com/device-plugin.config"
    init = env(container(pod, "config-manager-init", init=True))
    assert init["ONESHOT"] == "true" and init["SEND_SIGNAL"] == "false"


@pytest.mark.parametrize("root", ["/run/nvidia/mps", "/var/lib/gpu-mps"])
def test_one_mps_root_for_the_daemon_the_plugin_and_its_clients(root):
    objs = render(device_plugin_mps_root=root)
    for name in (MPS, "nvidia-device-plugin-daemonset"):
        vols = {v["name"]: v["hostPath"] for v in spec(objs, name)["volumes"] if "hostPath" in v}
        assert vols["mps-root"] == {"path": root, "type": "DirectoryOrCreate"}
        assert vols["mps-shm"] == {"path": root + "/shm", "type": "DirectoryOrCreate"}
    plugin = container(spec(objs, "nvidia-device-plugin-daemonset"), "nvidia-device-plugin")
    assert env(plugin)["MPS_ROOT"] == root  # the host path of the pipes the plugin mounts into its clients
    assert {"name": "mps-shm", "mountPath": "/dev/shm"} in plugin["volumeMounts"]


# the two host directories the component roles mount (each role's own check, run before it applies anything)
DIR_CHECKS = {"device_plugin_mps_root": (ROLE, "prepare.yml", "Check the MPS root"),
              "validator_driver_install_dir": (Role("validator"), "main.yml",
                                               "Check the driver directory the validator searches")}


def dir_ok(var, value):
    role, tasks, name = DIR_CHECKS[var]
    return role.assert_holds(tasks, name, **{var: value})[0]


@pytest.mark.parametrize("var", sorted(DIR_CHECKS))
@pytest.mark.parametrize("value", ["relative/mps", "/run/nvidia/mps/", "/run/../etc", "/run/nvidia/mps\n",
                                   "/run/{{ lookup('pipe', 'id') }}", "/run/nvidia mps", "/", "/run/$(id)", 7, "",
                                   "usr/local/nvidia", "/x;id"])
def test_bad_directory_refused(var, value):
    assert not dir_ok(var, value)


@pytest.mark.parametrize("var", sorted(DIR_CHECKS))
@pytest.mark.parametrize("value", ["/run/nvidia/mps", "/var/lib/gpu-mps", "/run/nvidia/mps.d/x_1", "/run/nvidia/driver",
                                   "/usr/local/nvidia", "/opt/nvidia-580.159"])
def test_directory_accepted(var, value):
    assert dir_ok(var, value)


def test_mps_root_message_names_the_variable():
    msg = ROLE.assert_holds("prepare.yml", "Check the MPS root", device_plugin_mps_root='/run/"x')[1]
    assert msg.startswith("device_plugin_mps_root must be an absolute directory path")
    assert '"/run/\\"x"' in msg  # the value shown as JSON, quoted


@pytest.mark.parametrize("value, ok", [("/run/nvidia/mps", True), ("/usr/local/nvidia", True), ("/run/../etc", False),
                                       ("/run/mps/", False), ("/run/mps\n", False), ("/{{ x }}", False), (5, False)])
def test_cluster_preflight_checks_the_directories_before_any_component(value, ok):
    """cluster.yml's preflight (roles/node_labels) refuses a bad MPS root or validator driver directory from the
    inventory before the first component is applied (the component roles check them again with their defaults)."""
    nl = Role("node_labels")
    name = "Validate the host directories given to the component roles"
    assert nl.task("preflight.yml", name)["loop"] == ["device_plugin_mps_root", "validator_driver_install_dir"]
    holds, msg = nl.assert_holds("preflight.yml", name, _node_labels_dir=value, item="validator_driver_install_dir")
    assert holds is ok
    assert msg.startswith("validator_driver_install_dir must be an absolute directory path")
