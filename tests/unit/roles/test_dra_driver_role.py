"""roles/dra_driver rendered as Ansible renders it, and its input checks as Ansible evaluates them: NVIDIA's DRA
driver v0.5.0 as GPU Operator v26.7.0 deploys it (docs/dra.md); refusals before anything is applied."""
from __future__ import annotations

import pytest
from role_render import Role, by_kind, k8s_strict_errors

ROLE = Role("dra_driver")
DS = "nvidia-dra-driver-kubelet-plugin"
GATES_CHECK = "Check the feature gates (names the driver v0.5.0 knows, true or false, no pair it refuses)"


def render(**overrides):
    return ROLE.render("dra_driver.yaml.j2", **overrides)


def pod(objs):
    return by_kind(objs, "DaemonSet", DS)["spec"]["template"]["spec"]


def env(c):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def test_defaults_render_the_gpu_half_of_the_operators_dra_stack():
    objs = render()
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objs) == sorted([
        ("ServiceAccount", "nvidia-dra-driver-kubeletplugin"),
        ("ClusterRole", "gpuops-nvidia-dra-driver-kubeletplugin"),
        ("ClusterRoleBinding", "gpuops-nvidia-dra-driver-kubeletplugin"),
        ("DeviceClass", "gpu.nvidia.com"), ("DeviceClass", "mig.nvidia.com"), ("DeviceClass", "vfio.gpu.nvidia.com"),
        ("ValidatingAdmissionPolicy", "gpuops-nvidia-dra-driver-resourceslices"),
        ("ValidatingAdmissionPolicyBinding", "gpuops-nvidia-dra-driver-resourceslices"),
        ("DaemonSet", DS)])
    for o in objs:
        assert not k8s_strict_errors(o), (o["kind"], k8s_strict_errors(o))
    assert "extendedResourceName" not in by_kind(objs, "DeviceClass", "gpu.nvidia.com")["spec"]
    p = pod(objs)
    assert p["nodeSelector"] == {"nvidia.com/gpu.deploy.dra-driver": "true"}
    assert "runtimeClassName" not in p  # the plugin reads the driver itself
    gpus = p["containers"][0]
    assert gpus["command"] == ["gpu-kubelet-plugin"] and gpus["args"] == ["-v", "4"]
    e = env(gpus)
    assert e["IMAGE_NAME"] == "nvcr.io/nvidia/dra-driver-nvidia-gpu:v0.5.0"
    assert (e["NVIDIA_DRIVER_ROOT"], e["DRIVER_ROOT_CTR_PATH"], e["CDI_ROOT"], e["HEALTHCHECK_PORT"]) == (
        "/", "/driver-root", "/var/run/cdi", "51516")
    assert "FEATURE_GATES" not in e and "IMAGE_PULL_SECRETS" not in e
    assert gpus["startupProbe"]["grpc"] == {"port": 51516, "service": "liveness"}
    mounts = {m["name"]: m for m in gpus["volumeMounts"]}
    assert mounts["plugins"]["mountPropagation"] == "Bidirectional"
    assert mounts["plugins"]["mountPath"] == "/var/lib/kubelet/plugins"
    vols = {v["name"]: v["hostPath"]["path"] for v in p["volumes"]}
    assert (vols["driver-root"], vols["driver-root-parent"], vols["plugins-registry"]) == (
        "/", "/", "/var/lib/kubelet/plugins_registry")
    assert p["initContainers"][0]["command"] == ["bash", "/usr/bin/kubelet-plugin-prestart.sh"]


def test_gates_paths_and_policy_options_reach_the_objects():
    objs = render(dra_driver_feature_gates={"TimeSlicingSettings": True, "MPSSupport": True, "DynamicMIG": False},
                  dra_driver_driver_root="/run/nvidia/driver", dra_driver_kubelet_root="/data/kubelet",
                  dra_driver_healthcheck_port=0, dra_driver_extended_resource_name="nvidia.com/gpu",
                  dra_driver_image_pull_secrets=["a", "b"], dra_driver_namespace="gpu-ops")
    e = env(pod(objs)["containers"][0])
    assert e["FEATURE_GATES"] == "DynamicMIG=false,MPSSupport=true,TimeSlicingSettings=true"
    assert e["IMAGE_PULL_SECRETS"] == "a,b" and e["HEALTHCHECK_PORT"] == "-1"
    assert e["KUBELET_REGISTRAR_DIRECTORY_PATH"] == "/data/kubelet/plugins_registry"
    assert "startupProbe" not in pod(objs)["containers"][0]
    vols = {v["name"]: v["hostPath"]["path"] for v in pod(objs)["volumes"]}
    assert (vols["driver-root"], vols["driver-root-parent"]) == ("/run/nvidia/driver", "/run/nvidia")
    assert by_kind(objs, "Role", "nvidia-dra-driver-kubeletplugin-mps")["rules"][0]["resources"] == ["deployments"]
    assert by_kind(objs, "DeviceClass", "gpu.nvidia.com")["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    vap = by_kind(objs, "ValidatingAdmissionPolicy", "gpuops-nvidia-dra-driver-resourceslices")
    assert vap["spec"]["matchConditions"][0]["expression"] == (
        'request.userInfo.username == "system:serviceaccount:gpu-ops:nvidia-dra-driver-kubeletplugin"')
    assert [o["kind"] for o in render(dra_driver_admission_policy=False)].count("ValidatingAdmissionPolicy") == 0


@pytest.mark.parametrize("gates,words", [
    ({"TimeSlicing": True}, 'unknown: ["TimeSlicing"]'),
    ({"{{ lookup('pipe', 'id') }}": True}, "unknown: [\"{{ lookup('pipe', 'id') }}\"]"),
    ({"MPSSupport": "yes"}, 'not true/false: ["MPSSupport"]'),
    ({"DynamicMIG": True, "MPSSupport": True}, '[["DynamicMIG", "MPSSupport"]]'),
    ({"PassthroughSupport": True, "NVMLDeviceHealthCheck": True}, '[["PassthroughSupport", "NVMLDeviceHealthCheck"]]'),
    (["MPSSupport"], 'got "[\'MPSSupport\']"'),
])
def test_bad_feature_gates_are_refused_with_what_is_wrong(gates, words):
    holds, msg = ROLE.assert_holds("prepare.yml", GATES_CHECK, dra_driver_feature_gates=gates,
                                   **ROLE.task("prepare.yml", GATES_CHECK)["vars"])
    assert not holds and words in msg, msg


def test_good_feature_gates_pass():
    holds, msg = ROLE.assert_holds("prepare.yml", GATES_CHECK, dra_driver_feature_gates={"DynamicMIG": True, "MPSSupport": False},
                                   **ROLE.task("prepare.yml", GATES_CHECK)["vars"])
    assert holds, msg


@pytest.mark.parametrize("var,value,ok", [
    ("dra_driver_driver_root", "/", True), ("dra_driver_driver_root", "/run/nvidia/driver", True),
    ("dra_driver_driver_root", "/run/../etc", False), ("dra_driver_driver_root", "run/nvidia", False),
    ("dra_driver_kubelet_root", "/var/lib/kubelet/", False), ("dra_driver_cdi_root", "/var/run/cdi\n/etc", False),
    ("dra_driver_cdi_root", "/var/run/$(id)", False),
])
def test_host_directories_are_checked_whole(var, value, ok):
    name = "Check the host directories the kubelet plugin mounts"
    holds, msg = ROLE.assert_holds("prepare.yml", name, item=var, **{var: value})
    assert holds is ok, msg


@pytest.mark.parametrize("overrides,ok", [
    ({}, True), ({"dra_driver_healthcheck_port": 65536}, False), ({"dra_driver_log_verbosity": 10}, False),
    ({"dra_driver_extended_resource_name": "gpu"}, False), ({"dra_driver_extended_resource_name": "nvidia.com/gpu\n"}, False),
])
def test_port_verbosity_and_extended_resource_name(overrides, ok):
    holds, msg = ROLE.assert_holds("prepare.yml", "Check the health port, log verbosity and extended resource name", **overrides)
    assert holds is ok, msg


def test_a_cluster_without_resource_k8s_io_v1_is_refused_with_a_message():
    name = "Refuse DRA on a cluster without resource.k8s.io/v1"
    holds, msg = ROLE.assert_holds("prepare.yml", name, _dra_driver_api={"api_found": False, "resources": []})
    assert not holds and "Kubernetes 1.34 or later" in msg and "gpuops_gpu_allocation device-plugin" in msg
    assert ROLE.assert_holds("prepare.yml", name, _dra_driver_api={"api_found": True, "resources": []})[0]


def test_the_namespace_must_be_a_dns_label():
    name = "Check the namespace (a DNS label)"
    assert ROLE.assert_holds("prepare.yml", name, dra_driver_namespace="gpu-operator")[0]
    assert not ROLE.assert_holds("prepare.yml", name, dra_driver_namespace='x" || true || "')[0]
