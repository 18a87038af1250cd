"""roles/doctor, the KubeVirt part (issue 14): per node, the running VMIs that hold its GPUs or host
devices (they cannot live-migrate: a drain, driver upgrade or reboot stops them), rendered as Ansible
renders the role's set_fact."""
from __future__ import annotations

from role_render import Role

ROLE = Role("doctor")
TASK = "Add what a drain would stop to the findings"


def vmi(name, node, phase="Running", gpus=None, host_devices=None, ns="vms"):
    return {"metadata": {"name": name, "namespace": ns},
            "spec": {"domain": {"devices": {"gpus": gpus or [], "hostDevices": host_devices or []}}},
            "status": {"nodeName": node, "phase": phase}}


RESOURCES = [
    vmi("train-1", "gpu-p02", gpus=[{"name": "g1", "deviceName": "nvidia.com/GH100_H100_PCIE"}]),
    vmi("desk-7", "gpu-p02", ns="vdi", gpus=[{"name": "v", "deviceName": "nvidia.com/NVIDIA_A10-4Q"}]),
    vmi("web", "gpu-p02"),                                                     # no device: migrates
    vmi("old", "gpu-p02", phase="Succeeded", gpus=[{"name": "g", "deviceName": "nvidia.com/X"}]),
    vmi("other-node", "gpu-p03", host_devices=[{"name": "h", "deviceName": "nvidia.com/GH100_H100_PCIE"}]),
]


def facts(**kw):
    ok, out = ROLE.set_fact("vmis.yml", TASK, doctor_findings=[], doctor_k8s_node_name="gpu-p02", **kw)
    assert ok
    return out


def test_vmis_holding_this_nodes_gpus_are_a_warning():
    out = facts(_doctor_vmis={"resources": RESOURCES, "failed": False})
    assert [(v["namespace"], v["name"]) for v in out["doctor_vmis"]] == [("vdi", "desk-7"), ("vms", "train-1")]
    (finding,) = out["doctor_findings"]
    assert finding["id"] == "gpu-vmis-cannot-migrate" and finding["severity"] == "warning"
    assert "2 running VMI(s)" in finding["summary"] and "vdi/desk-7, vms/train-1" in finding["summary"]
    assert "driver_upgrade" in finding["remediation"]


def test_no_vmis_or_no_kubevirt_means_no_finding():
    assert facts(_doctor_vmis={"resources": [], "failed": False})["doctor_findings"] == []
    assert facts(_doctor_vmis={"resources": RESOURCES[2:4], "failed": False})["doctor_findings"] == []


def test_an_unreachable_api_server_is_said_not_hidden():
    out = facts(_doctor_vmis={"failed": True, "msg": "Failed to get client due to HTTPSConnectionPool"})
    assert [f["id"] for f in out["doctor_findings"]] == ["kubevirt-vmis-unknown"]
    assert "HTTPSConnectionPool" in out["doctor_findings"][0]["summary"]
