# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""gpuops.nvidia.vfio_pci under faults (issue 15, defects 8 and 3), over the synthetic sysfs trees.

* A corrupt or wrong-shape state file is refused before anything changes, naming the file, the BDFs
  the udev rule still persists and how to fix it; the persistence of GPUs bound earlier is kept.
* A failed bind gives every function touched in this run back to the driver (and driver_override) it
  had, and the module fails loudly: failed=true, the msg names the BDF and the error.
* A failed initramfs regeneration is retried on the next run (a marker written before the modprobe
  ordering file changes, removed only after the regeneration succeeded).

A small "kernel" stands in for sysfs: the module's writes go to the tree (so a directory where a sysfs
file should be makes the write fail, as a refusing kernel does), and unbind/bind/drivers_probe move
the device's ``driver`` link the way the kernel would.
"""
from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import run_module

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "vfio"))

from pci_core import Kernel  # noqa: E402
from sysfs import NVIDIA, make_tree  # noqa: E402

from ansible_collections.gpuops.nvidia.plugins.modules import vfio_pci  # noqa: E402

STATE = "etc/gpuops/vfio-pci.json"
RULES = "etc/udev/rules.d/40-gpuops-vfio-pci.rules"
MODPROBE = "etc/modprobe.d/gpuops-vfio-pci.conf"
MARKER = "var/lib/gpuops/vfio-initramfs.pending"


def call(capsys, args):
    _rc, res = run_module(capsys, vfio_pci.main, args)
    return res


def snapshot(root):
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p) and "/run/lock" not in p:
                with open(p) as fh:
                    out[os.path.relpath(p, root)] = fh.read()
    return out


def drivers_of(kernel, bdfs):
    return {b: (kernel.driver(b), kernel.override(b)) for b in bdfs}


@pytest.fixture
def nv(tmp_path, monkeypatch):
    root = make_tree(str(tmp_path), NVIDIA)
    return root, Kernel(root, monkeypatch)


def test_fake_kernel_binds(nv, capsys):
    root, kernel = nv
    res = call(capsys, {"devices": ["0000:41:00.0"], "root": root})
    assert res["changed"] is True and not res.get("failed"), res
    assert drivers_of(kernel, ["0000:41:00.0"]) == {"0000:41:00.0": ("vfio-pci", "vfio-pci")}
    assert call(capsys, {"devices": ["0000:41:00.0"], "root": root})["changed"] is False


# --- corrupt state file -------------------------------------------------------------------------

@pytest.mark.parametrize("corrupt", ["{\"devices\": {\"0000:42:00.0\": {\"orig", "[]", "{\"devices\": []}",
                                     "{\"devices\": {\"0000:42:00.0\": \"nvidia\"}}", "{\"devs\": {}}",
                                     "{\"devices\": {\"gpu0\": {}}}", "", "\n", "\x00\x00\x00"])
def test_corrupt_state_file_is_refused_and_earlier_persistence_kept(nv, capsys, corrupt):
    root, kernel = nv
    assert call(capsys, {"devices": ["0000:42:00.0"], "root": root})["changed"] is True
    with open(os.path.join(root, STATE), "w") as f:
        f.write(corrupt)
    before = snapshot(root)
    res = call(capsys, {"devices": ["0000:41:00.0"], "root": root})
    assert res.get("failed") is True, res
    msg = res["msg"]
    assert os.path.join(root, STATE) in msg and "0000:42:00.0" in msg, msg   # the file, what it still persists
    assert "restore" in msg and "remove" in msg, msg                        # how to fix it
    assert snapshot(root) == before
    assert drivers_of(kernel, ["0000:41:00.0"]) == {"0000:41:00.0": ("nvidia", None)}


def test_corrupt_state_file_refused_in_check_mode_too(nv, capsys):
    root, _kernel = nv
    os.makedirs(os.path.join(root, "etc/gpuops"))
    with open(os.path.join(root, STATE), "w") as f:
        f.write("not json")
    res = call(capsys, {"devices": ["0000:41:00.0"], "root": root, "_ansible_check_mode": True})
    assert res.get("failed") is True and os.path.join(root, STATE) in res["msg"]


# --- failed bind ----------------------------------------------------------------------------------

def test_failed_bind_gives_the_gpu_back_and_fails_loudly(nv, capsys):
    root, kernel = nv
    os.makedirs(os.path.join(root, "sys/bus/pci/drivers_probe"))   # probing refused: the GPU is driverless
    before = snapshot(root)
    res = call(capsys, {"devices": ["0000:41:00.0"], "root": root})
    assert res.get("failed") is True, res
    assert "0000:41:00.0" in res["msg"] and "is a directory" in res["msg"].lower(), res["msg"]
    assert drivers_of(kernel, ["0000:41:00.0"]) == {"0000:41:00.0": ("nvidia", None)}
    assert "back on nvidia" in res["msg"]
    # no persistence for a binding that did not happen
    for rel in (STATE, RULES, MODPROBE):
        assert not os.path.exists(os.path.join(root, rel))
    assert {p: c for p, c in snapshot(root).items() if not p.endswith(("unbind", "/bind", "driver_override"))} == \
        {p: c for p, c in before.items() if not p.endswith(("unbind", "/bind", "driver_override"))}


def test_failed_bind_mid_group_rolls_back_the_whole_group(nv, capsys):
    root, kernel = nv
    kernel.refuse_probe = {"0000:43:00.1"}
    res = call(capsys, {"devices": ["0000:43:00.0"], "root": root})
    assert res.get("failed") is True and "0000:43:00.1" in res["msg"] and "busy" in res["msg"], res
    assert drivers_of(kernel, ["0000:43:00.0", "0000:43:00.1"]) == {
        "0000:43:00.0": ("nvidia", None), "0000:43:00.1": ("snd_hda_intel", None)}
    assert not os.path.exists(os.path.join(root, RULES))


def test_failed_rollback_is_reported_as_a_change(nv, capsys):
    """When even the original driver refuses the device, the GPU is left driverless: failed, changed=true,
    and the msg says which function has no driver and what it had."""
    root, kernel = nv
    os.makedirs(os.path.join(root, "sys/bus/pci/drivers_probe"))
    os.makedirs(kernel.drivers("nvidia", "bind"))
    res = call(capsys, {"devices": ["0000:41:00.0"], "root": root})
    assert res.get("failed") is True and res.get("changed") is True, res
    assert "0000:41:00.0" in res["msg"] and "no driver" in res["msg"] and "nvidia" in res["msg"], res["msg"]
    assert kernel.driver("0000:41:00.0") is None


def test_bind_failure_before_unbind_changes_nothing(nv, capsys):
    """driver_override cannot be written: nothing moved, failed with the BDF, changed=false."""
    root, kernel = nv
    dev = os.path.realpath(kernel.dev("0000:41:00.0"))
    os.unlink(os.path.join(dev, "driver_override"))
    os.makedirs(os.path.join(dev, "driver_override"))
    res = call(capsys, {"devices": ["0000:41:00.0"], "root": root})
    assert res.get("failed") is True and res.get("changed") is False and "0000:41:00.0" in res["msg"], res
    assert kernel.driver("0000:41:00.0") == "nvidia"


def test_failed_give_back_is_loud(nv, capsys):
    """state=absent: the host driver refuses the function and nothing else probes it: failed, changed=true,
    the msg names the BDF, the driver and the error."""
    root, kernel = nv
    assert call(capsys, {"devices": ["0000:41:00.0"], "root": root})["changed"] is True
    os.makedirs(kernel.drivers("nvidia", "bind"))
    os.unlink(os.path.join(root, "sys/bus/pci/drivers_probe"))
    os.makedirs(os.path.join(root, "sys/bus/pci/drivers_probe"))
    res = call(capsys, {"devices": ["0000:41:00.0"], "root": root, "state": "absent"})
    assert res.get("failed") is True and res.get("changed") is True, res
    assert "giving 0000:41:00.0 back to nvidia failed" in res["msg"] and "no driver" in res["msg"], res["msg"]
    # persistence is kept: the function is still recorded, so a rerun tries again
    assert os.path.exists(os.path.join(root, STATE)) and os.path.exists(os.path.join(root, RULES))


# --- failed initramfs regeneration (defect 3, the module's own update_initramfs) ---------------------

def test_failed_initramfs_regeneration_is_retried(nv, capsys, monkeypatch):
    root, _kernel = nv
    runs = []

    def regenerate(module):
        runs.append(os.path.exists(os.path.join(root, MARKER)))
        if len(runs) == 1:
            module.fail_json(msg="update-initramfs -u failed (rc=1): out of space on /boot")
        return True
    monkeypatch.setattr(vfio_pci, "_update_initramfs", regenerate)
    monkeypatch.setattr(vfio_pci, "on_host", lambda r: True)
    args = {"devices": ["0000:41:00.0"], "root": root}
    first = call(capsys, args)
    assert first.get("failed") is True and len(runs) == 1, first
    assert os.path.exists(os.path.join(root, MODPROBE))
    second = call(capsys, args)   # the modprobe file already matches: the regeneration is still due
    assert second["changed"] is True and second["initramfs_updated"] is True and len(runs) == 2, second
    assert runs == [True, True] and not os.path.exists(os.path.join(root, MARKER))
    third = call(capsys, args)
    assert third["changed"] is False and third["initramfs_updated"] is False and len(runs) == 2


def test_initramfs_left_to_the_role_keeps_the_marker(nv, capsys):
    """update_initramfs=false (the vfio role regenerates once for blacklist and ordering): the marker is
    written before the ordering file changes and left for the role, which removes it after success."""
    root, _kernel = nv
    res = call(capsys, {"devices": ["0000:41:00.0"], "root": root, "update_initramfs": False})
    assert res["changed"] is True and res["initramfs_pending"] is True
    assert os.path.exists(os.path.join(root, MARKER))
    again = call(capsys, {"devices": ["0000:41:00.0"], "root": root, "update_initramfs": False})
    assert again["changed"] is False and again["initramfs_pending"] is True


def test_state_file_round_trip_is_json(nv, capsys):
    root, _kernel = nv
    call(capsys, {"devices": ["0000:43:00.0"], "root": root})
    with open(os.path.join(root, STATE)) as f:
        st = json.load(f)
    assert st["devices"]["0000:43:00.1"]["original_driver"] == "snd_hda_intel"
