# Copyright: gpuops.nvidia contributors
# Apache License 2.0
# SPDX-License-Identifier: Apache-2.0
"""The driver role's preflight, run for real (ansible-playbook, connection local) against node roots.

Regression (issue 12): the VM-node refusal read ``gpu_workload_config``, which nothing sets, so
vm-passthrough nodes got the data-centre driver.  The refusal must follow the inventory variable
``gpu_workload`` that every other role reads, and must stop the role before the plan.
"""
from __future__ import annotations

import pytest

from test_initramfs_retry import play, recap


@pytest.mark.parametrize("workload", ["vm-passthrough", "vm-vgpu"])
def test_vm_nodes_are_refused_by_gpu_workload(tmp_path, roots, workload):
    res = play(tmp_path, "driver", ["preflight"], {"gpu_workload": workload, "driver_root": roots["h200"]})
    assert res.returncode != 0
    assert "has gpu_workload=%s: the data-centre driver is for container nodes only" % workload in res.stdout
    assert "Plan the driver" not in res.stdout  # refused before the plan ran


def test_container_nodes_pass_preflight_and_absent_is_allowed_on_vm_nodes(tmp_path, roots):
    res = play(tmp_path, "driver", ["preflight"], {"gpu_workload": "container", "driver_root": roots["h200"]})
    assert res.returncode == 0, res.stdout[-3000:]
    assert recap(res)["failed"] == "0"
    # removing a driver from a node that became a VM node is what such a node needs
    res = play(tmp_path, "driver", ["preflight"], {"gpu_workload": "vm-passthrough", "driver_state": "absent",
                                                   "driver_root": roots["h200"]})
    assert res.returncode == 0, res.stdout[-3000:]


@pytest.mark.parametrize("bad", [{"driver_install_timeout": 0}, {"driver_progress_interval": "15; reboot"},
                                 {"driver_install_timeout": 10, "driver_progress_interval": 20}])
def test_install_wait_bounds_are_checked_before_the_plan(tmp_path, roots, bad):
    res = play(tmp_path, "driver", ["preflight"], dict({"gpu_workload": "container", "driver_root": roots["h200"]}, **bad))
    assert res.returncode != 0
    assert "driver_install_timeout and driver_progress_interval must be whole seconds above 0" in res.stdout
    assert "Plan the driver" not in res.stdout
