"""The driver_plan module boundary: read-only, check mode, failure with remediation."""
from __future__ import annotations


from ansible_collections.gpuops.nvidia.plugins.modules import driver_plan
from conftest import run_module


def run(capsys, args):
    return run_module(capsys, driver_plan.main, args)


def test_h200_580_satisfied_in_check_mode(capsys, roots):
    rc, out = run(capsys, {"root": roots["h200"], "branch": "580", "_ansible_check_mode": True})
    assert rc == 0 and out["changed"] is False
    assert out["satisfied"] is True and out["changes"] == [] and out["holders"] == []
    assert out["plan"]["installed"]["loaded_version"] == "580.159.04"


def test_h200_570_reports_what_would_change(capsys, roots):
    rc, out = run(capsys, {"root": roots["h200"], "branch": "570", "_ansible_check_mode": True})
    assert rc == 0 and out["changed"] is False and out["satisfied"] is False
    assert out["changes"][0] == "driver: replace loaded 580.159.04 (open) with 570 (open, dkms)"


def test_secure_boot_failure_carries_remediation(capsys, roots):
    rc, out = run(capsys, {"root": roots["workstation"], "branch": "535"})
    assert rc == 1 and "Secure Boot is on" in out["msg"] and "mokutil --import" in out["remediation"]


def test_branch_or_version_required(capsys, roots):
    rc, out = run(capsys, {"root": roots["h200"]})
    assert rc == 1 and "branch" in out["msg"]


def test_facts_passed_in_are_used(capsys, roots):
    from ansible_collections.gpuops.nvidia.plugins.module_utils._gpu_facts import gather

    gpu, _warnings = gather(roots["hgx-h100"], ("pci", "kernel", "driver"))
    rc, out = run(capsys, {"root": roots["hgx-h100"], "gpu_facts": gpu, "branch": "570"})
    assert rc == 0 and out["satisfied"] is True
    assert out["plan"]["services"]["fabricmanager"]["enabled"] is True
