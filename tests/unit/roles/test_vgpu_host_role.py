"""The vgpu_host role run for real by ansible-playbook (connection local) over a vGPU host's sysfs tree
(tests/unit/fixtures/vgpu: an L40S with its 32 VFs enabled, NVIDIA's vendor-specific VFIO files): the driver
refusal with nothing written, bad input, apply, rerun and check mode changed=0, the boot-time apply re-creating the
vGPUs after a (simulated) reboot, absent."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import ansible_command

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
PLAYBOOK = ansible_command("ansible-playbook")
sys.path.insert(0, os.path.join(REPO, "tests", "unit", "fixtures", "vgpu"))
from vgpu_sysfs import Host, snapshot  # noqa: E402

CONFIG = {"version": "v1", "vgpu-configs": {"default": [{"devices": "all", "vgpu-devices": {"L40S-4Q": 6}}],
                                            "big": [{"devices": "all", "vgpu-devices": {"L40S-24Q": 2}}]}}
PF = "0000:41:00.0"


@pytest.fixture
def lab(tmp_path):
    host = Host(tmp_path / "root")
    host.l40s(PF)
    host.enable(PF)
    tool = os.path.join(host.root, "usr/lib/nvidia/sriov-manage")
    os.makedirs(os.path.dirname(tool))
    with open(tool, "w") as f:   # a stand-in for NVIDIA's tool: -d only (the VFs are already there)
        f.write('#!/bin/sh\n[ "$1" = -d ] || exit 3\nd=%s/sys/bus/pci/devices/$2\necho 0 > $d/sriov_numvfs\n'
                'rm -f $d/virtfn*\n' % shlex.quote(host.root))
    os.chmod(tool, 0o755)
    dirs = {k: str(tmp_path / k) for k in ("etc", "lib", "systemd")}
    return {"tmp": tmp_path, "host": host, "dirs": dirs, "tool": tool}


def play(lab, *args, **overrides):
    book = lab["tmp"] / "play.yml"
    book.write_text("- hosts: localhost\n  connection: local\n  gather_facts: false\n"
                    "  roles:\n    - role: gpuops.nvidia.vgpu_host\n")
    extra = lab["tmp"] / "vars.json"
    variables = {"vgpu_host_root": lab["host"].root, "vgpu_host_driver_markers": [lab["tool"]], "vgpu_host_iommu": False,
                 "vgpu_host_config": CONFIG, "gpu_workload": "vm-vgpu", "vgpu_host_config_dir": lab["dirs"]["etc"],
                 "vgpu_host_lib_dir": lab["dirs"]["lib"], "vgpu_host_unit_dir": lab["dirs"]["systemd"],
                 "vgpu_host_service_manager": "none", "vgpu_host_python": sys.executable,
                 "ansible_python_interpreter": sys.executable}
    variables.update(overrides)
    extra.write_text(json.dumps(variables))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
               GPUOPS_LOCK_DIR=str(lab["tmp"] / "locks"))
    res = subprocess.run([PLAYBOOK, "-i", "localhost,", str(book), "-e", "@" + str(extra)] + list(args),
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    m = re.search(r"localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", res.stdout)
    assert m, res.stdout + res.stderr
    return res, int(m.group(2)), int(m.group(4))


def types(lab):
    out = {}
    for vf in lab["host"].pfs[PF]["vfs"]:
        with open(os.path.join(lab["host"].root, "sys/bus/pci/devices", vf, "nvidia/current_vgpu_type")) as f:
            t = int(f.read())
        if t:
            out[vf] = t
    return out


def everything(lab):
    out = snapshot(str(lab["tmp"] / "root"))
    for d in lab["dirs"].values():
        out.update(snapshot(d) if os.path.isdir(d) else {})
    return out


def test_refused_without_the_driver_and_without_a_package(lab):
    before = everything(lab)
    res, changed, failed = play(lab, vgpu_host_driver_markers=[str(lab["tmp"] / "no-such-file")])
    assert failed == 1 and changed == 0
    assert "the NVIDIA vGPU host driver (vGPU Manager) is not installed" in res.stdout
    assert "is not downloadable by this collection: set vgpu_host_driver_package" in res.stdout
    assert "Nothing was changed" in res.stdout
    assert everything(lab) == before


@pytest.mark.parametrize("overrides,match", [
    ({"vgpu_host_driver_package": "/x/vgpu.deb", "vgpu_host_driver_url": "https://mirror.example/vgpu.deb"},
     "give vgpu_host_driver_package or vgpu_host_driver_url, not both"),
    ({"vgpu_host_driver_package": "/x/vgpu.zip"}, "naming a .deb, .rpm or .run"),
    ({"gpu_workload": "vm-passthrough"}, "only when gpu_workload is vm-vgpu (it is vm-passthrough)"),
    ({"vgpu_host_selected": "a10-8q"}, "the default config 'a10-8q' is not defined"),
    ({"vgpu_host_num_vfs": 0}, "vgpu_host_num_vfs is max or a count (got 0)"),
])
def test_bad_input_refused_before_any_change(lab, overrides, match):
    before = everything(lab)
    res, changed, failed = play(lab, **overrides)
    assert failed == 1 and match in res.stdout, res.stdout[-3000:]
    assert everything(lab) == before


def test_apply_rerun_check_boot_and_absent(lab):
    res, changed, failed = play(lab)
    assert failed == 0 and changed > 0, res.stdout[-4000:]
    vfs = lab["host"].pfs[PF]["vfs"]
    assert types(lab) == {vf: 1150 for vf in vfs[:6]}
    unit_sriov = os.path.join(lab["host"].root, "etc/systemd/system/gpuops-sriov-vfs.service")
    assert "ExecStart=/usr/lib/nvidia/sriov-manage -e 0000:41:00.0" in open(unit_sriov).read()
    res, changed, failed = play(lab)
    assert (changed, failed) == (0, 0), res.stdout[-4000:]
    res, changed, failed = play(lab, "--check", vgpu_host_selected="big")
    assert failed == 0 and "L40S-24Q" in res.stdout and types(lab) == {vf: 1150 for vf in vfs[:6]}
    # the boot-time unit: after the VFs and the vGPU manager, before libvirt and the kubelet; its ExecStart run
    # after a reboot (vGPUs gone) makes them again
    unit = open(os.path.join(lab["dirs"]["systemd"], "gpuops-vgpu-devices.service")).read()
    assert "After=systemd-modules-load.service gpuops-sriov-vfs.service nvidia-vgpud.service nvidia-vgpu-mgr.service" in unit
    assert "Before=libvirtd.service virtqemud.service kubelet.service" in unit
    for vf in vfs:
        with open(os.path.join(lab["host"].root, "sys/bus/pci/devices", vf, "nvidia/current_vgpu_type"), "w") as f:
            f.write("0\n")
    cmd = shlex.split(re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)) + ["--root", lab["host"].root]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["changed"] is True and types(lab) == {vf: 1150 for vf in vfs[:6]}
    # absent: vGPUs away, boot files gone, VFs away (through sriov-manage -d), the unit with them; the driver stays
    res, changed, failed = play(lab, vgpu_host_state="absent")
    assert failed == 0 and changed > 0, res.stdout[-4000:]
    assert types(lab) == {} and lab["host"].numvfs(PF) == 0
    assert not os.path.exists(unit_sriov)
    assert not os.path.exists(os.path.join(lab["dirs"]["systemd"], "gpuops-vgpu-devices.service"))
    assert not os.path.exists(os.path.join(lab["dirs"]["lib"], "vgpu_apply.py"))
    assert "the NVIDIA vGPU host driver stays installed" in res.stdout
