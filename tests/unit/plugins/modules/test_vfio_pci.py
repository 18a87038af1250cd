"""Module-level tests for gpuops.nvidia.vfio_pci over a synthetic sysfs tree (check mode, diff, refusals)."""
import json
import os
import sys

import pytest
from ansible.module_utils.testing import patch_module_args
from conftest import module_context

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "vfio"))

from sysfs import LANE, make_tree  # noqa: E402

from ansible_collections.gpuops.nvidia.plugins.modules import vfio_pci  # noqa: E402


def run_module(capsys, args):
    with module_context(), patch_module_args(args):
        with pytest.raises(SystemExit):
            vfio_pci.main()
    return json.loads(capsys.readouterr().out)


def snapshot(root):
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                with open(p) as fh:
                    out[p] = fh.read()
    return out


def test_check_mode_plans_and_diffs_without_touching_anything(tmp_path, capsys):
    root = make_tree(str(tmp_path), LANE)
    before = snapshot(root)
    res = run_module(capsys, {"devices": ["0000:00:05.0"], "include_group_members": True, "root": root,
                              "_ansible_check_mode": True, "_ansible_diff": True})
    assert res["changed"] is True
    assert [a["bdf"] for a in res["actions"]] == ["0000:00:05.0", "0000:00:05.1"]
    assert res["groups"] == {"5": ["0000:00:05.0", "0000:00:05.1"]}
    headers = [d.get("after_header") for d in res["diff"]]
    assert "drivers" in headers and any(h and h.endswith("40-gpuops-vfio-pci.rules") for h in headers)
    assert snapshot(root) == before


@pytest.mark.parametrize("args,match", [
    ({"devices": ["0000:00:5.0"]}, "malformed"),
    ({"devices": ["0000:00:09.0"]}, "not present"),
    ({"devices": ["0000:00:05.0"]}, "include_group_members"),
    ({"devices": ["0000:00:01.0"]}, "boot VGA"),
])
def test_refusals_change_nothing(tmp_path, capsys, args, match):
    root = make_tree(str(tmp_path), LANE)
    before = snapshot(root)
    res = run_module(capsys, dict(args, root=root))
    assert res["failed"] is True and match in res["msg"]
    assert snapshot(root) == before


def test_iommu_off(tmp_path, capsys):
    root = make_tree(str(tmp_path), LANE, iommu=False)
    res = run_module(capsys, {"devices": ["0000:00:05.0"], "include_group_members": True, "root": root})
    assert res["failed"] is True and "IOMMU is not active" in res["msg"]
    res = run_module(capsys, {"devices": ["0000:00:05.0"], "root": root, "allow_iommu_off": True,
                              "_ansible_check_mode": True})
    assert res["deferred"] is True and res["changed"] is False and res["iommu_active"] is False
