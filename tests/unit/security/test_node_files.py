"""Hostile node files: what gpu_facts and cdi_spec read from a node (sysfs, procfs, /etc, pci.ids) may be a FIFO,
a socket, a device node, a directory or a file of hundreds of megabytes.  None of them may hang the module, flood
the facts or end in a traceback: each becomes a warning naming the file (or, where the module cannot go on
without the file, a refusal before anything is written).  MIG capability directories and the device names
derived from what the node reports must follow CDI's rules or be left out with a warning.

Every read runs under a hard deadline (SIGALRM), so a read that blocks fails the test instead of hanging the
suite."""
from __future__ import annotations

import json
import os
import re

import pytest
import yaml

import hostile_files
import noderoots
from hostile_files import HUGE, KINDS, deadline
from conftest import run_module

from ansible_collections.gpuops.nvidia.plugins.module_utils import _cdi, _gpu_facts
from ansible_collections.gpuops.nvidia.plugins.modules import cdi_spec, gpu_facts

BDF = "0000:3b:00.0"              # the L40S of the iommu-off node
DEV = "sys/devices/pci0000:3b/" + BDF
#: CDI's device name rule (container-device-interface, pkg/parser ValidateDeviceName), written out here
#: independently of the module's own pattern
CDI_NAME = re.compile(r"[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9_.:-]*[A-Za-z0-9]")


def hostile(root, rel, kind):
    """Replace ``root/rel`` by a hostile file of ``kind``; return the path."""
    return hostile_files.hostile(os.path.join(root, rel), kind)


def named(warnings, rel, kind):
    """The warnings that name the file ``rel`` (its last two parts: sysfs reads it through the bus link) and
    say what it is.  A module result's warnings may be events ({"event": {"msg": ...}})."""
    tail = "/".join(rel.split("/")[-2:])
    texts = [w["event"]["msg"] if isinstance(w, dict) else w for w in warnings]
    return [w for w in texts if tail in w and KINDS[kind][1] in w]


@pytest.fixture
def node(tmp_path):
    """A fresh L40S node (driver loaded, EFI, no IOMMU) with a DMI name, a pid file and a pci.ids to spoil."""
    root = noderoots.build("iommu-off", str(tmp_path / "node"))
    noderoots._write(root, "sys/class/dmi/id/product_name", "PowerEdge R760\n")
    noderoots._write(root, "var/run/nvidia-persistenced/nvidia-persistenced.pid", "1\n")
    noderoots._write(root, "usr/share/misc/pci.ids", "10de  NVIDIA Corporation\n\t26b9  AD102GL [L40S]\n")
    noderoots._write(root, DEV + "/config", bytes(256))
    return root


def facts_of(root):
    with deadline():
        facts, warnings = _gpu_facts.gather(root, _gpu_facts.SUBSETS, load_nvml=lambda: (None, "no NVML (test)"))
    return facts, warnings


# -- gpu_facts ----------------------------------------------------------------------------------------------------

#: every node file gpu_facts reads, with what must still hold when it is hostile (beyond: one GPU found)
GPU_FACTS_FILES = {
    DEV + "/modalias": lambda f: f["devices"][0]["modalias"] is None,
    DEV + "/current_link_speed": lambda f: f["devices"][0]["link"]["current_speed"] is None,
    DEV + "/driver_override": lambda f: f["devices"][0]["driver_override"] is None,
    DEV + "/sriov_totalvfs": lambda f: f["devices"][0]["sriov"] is None,
    "proc/cmdline": lambda f: f["kernel"]["cmdline"] == "",
    "proc/modules": lambda f: f["kernel"]["nvidia_modules"] == [],
    "proc/sys/kernel/osrelease": lambda f: f["kernel"]["release"] is None,
    "proc/driver/nvidia/version": lambda f: f["driver"]["version"] == "580.95.05",   # from /sys/module
    "proc/driver/nvidia/gpus/%s/information" % BDF: lambda f: f["driver"]["gpus"][0]["uuid"] is None,
    "sys/module/nvidia/version": lambda f: f["driver"]["version"] == "580.95.05",     # from /proc
    "var/run/nvidia-persistenced/nvidia-persistenced.pid": lambda f: f["driver"]["persistenced_running"] is False,
    noderoots.SECURE_BOOT_VAR: lambda f: f["secure_boot"] is False,
    "etc/os-release": lambda f: f["os"]["id"] is None,
    "sys/class/dmi/id/product_name": lambda f: f["machine"] is None,
    "proc/cpuinfo": lambda f: f["iommu"]["cpu_virtualization"] == [],
}


@pytest.mark.parametrize("rel,kind", [(r, k) for r in sorted(GPU_FACTS_FILES) for k in sorted(KINDS)
                                      if (r, k) != ("proc/cpuinfo", "huge")])   # a prefix of cpuinfo is read: below
def test_gpu_facts_never_hangs_or_floods_on_a_hostile_node_file(node, rel, kind):
    hostile(node, rel, kind)
    facts, warnings = facts_of(node)
    assert facts["count"] == 1
    assert GPU_FACTS_FILES[rel](facts)
    assert named(warnings, rel, kind), warnings
    assert named(facts["warnings"], rel, kind), "the warning is in the facts too"
    assert len(json.dumps(facts)) < 256 * 1024


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "directory"])
def test_a_pci_ids_that_is_not_a_file_is_passed_over(node, kind):
    hostile(node, "usr/share/misc/pci.ids", kind)
    facts, _warnings = facts_of(node)
    assert facts["pci_ids_source"] == "builtin" and facts["devices"][0]["name"] == "AD102GL [L40S]"


def test_a_huge_pci_ids_is_a_warning_and_the_builtin_names_serve(node):
    hostile(node, "usr/share/misc/pci.ids", "huge")
    facts, warnings = facts_of(node)
    assert facts["devices"][0]["name"] == "AD102GL [L40S]"
    assert named(warnings, "usr/share/misc/pci.ids", "huge"), warnings


def test_a_huge_cpuinfo_is_read_only_as_far_as_its_first_processor(node):
    """/proc/cpuinfo is long on big hosts; only the first processor's flags are needed, so a prefix is read."""
    path = os.path.join(node, "proc/cpuinfo")
    with open(path, "r+b") as f:
        f.truncate(HUGE)
    facts, warnings = facts_of(node)
    assert facts["iommu"]["cpu_virtualization"] == ["vmx"] and warnings == []


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_hostile_pci_config_space_leaves_the_vgpu_label_out(node, kind):
    hostile(node, DEV + "/config", kind)
    facts, _warnings = facts_of(node)
    assert facts["count"] == 1 and "nvidia.com/vgpu.present" not in facts["labels"]
    assert named(facts["notes"], DEV + "/config", kind), facts["notes"]


def test_gpu_facts_module_answers_with_warnings_not_a_hang(node, capsys):
    hostile(node, DEV + "/modalias", "fifo")
    hostile(node, "proc/driver/nvidia/version", "huge")
    with deadline():
        rc, out = run_module(capsys, gpu_facts.main, {"root": node, "gather_subset": ["pci", "iommu", "kernel", "driver"]})
    assert rc == 0, out
    gpu = out["ansible_facts"]["gpu"]
    assert gpu["count"] == 1 and gpu["driver"]["version"] == "580.95.05"
    for rel, kind in ((DEV + "/modalias", "fifo"), ("proc/driver/nvidia/version", "huge")):
        assert named(out["warnings"], rel, kind) and named(gpu["warnings"], rel, kind)
    assert len(json.dumps(out)) < 256 * 1024, "the 700 MB file must not reach the controller"


# -- cdi_spec -----------------------------------------------------------------------------------------------------

def spec_of(root, **kw):
    with deadline():
        return _cdi.build_spec(root=root, **kw)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_cdi_spec_survives_a_hostile_driver_version_file(node, kind):
    hostile(node, "proc/driver/nvidia/version", kind)
    spec, info = spec_of(node)
    assert info["driver_version"] == "580.95.05"        # /sys/module/nvidia/version
    assert [d["name"] for d in spec["devices"]] == ["0", "GPU-11111111-0000-0000-0000-000000000000", "all"]
    assert named(info["warnings"], "proc/driver/nvidia/version", kind), info["warnings"]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_cdi_spec_refuses_when_no_driver_version_can_be_read(node, kind):
    hostile(node, "proc/driver/nvidia/version", kind)
    hostile(node, "sys/module/nvidia/version", kind)
    with pytest.raises(_cdi.CdiError, match="no NVIDIA driver found") as exc:
        spec_of(node)
    assert named([str(exc.value)], "proc/driver/nvidia/version", kind)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_cdi_spec_refuses_a_hostile_gpu_information_file(node, kind):
    """A GPU whose information cannot be read is not left out silently (containers would get fewer GPUs)."""
    hostile(node, "proc/driver/nvidia/gpus/%s/information" % BDF, kind)
    with pytest.raises(_cdi.CdiError) as exc:
        spec_of(node)
    assert named([str(exc.value)], "gpus/%s/information" % BDF, kind)


def _mig_tree(root, gpu=0):
    base = os.path.join(root, "proc/driver/nvidia/capabilities/gpu%d/mig" % gpu)
    noderoots._write(base, "gi1/access", "DeviceFileMinor: 12\n")
    noderoots._write(base, "gi1/ci0/access", "DeviceFileMinor: 13\n")
    return base


@pytest.mark.parametrize("rel", ["gi1/access", "gi1/ci0/access"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_cdi_spec_survives_a_hostile_mig_capability_file(node, rel, kind):
    base = _mig_tree(node)
    hostile(base, rel, kind)
    spec, info = spec_of(node)
    assert [d["name"] for d in spec["devices"]] == ["0:0", "all"]
    assert named(info["warnings"], "mig/" + rel, kind), info["warnings"]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_cdi_spec_survives_a_hostile_firmware_path_parameter(node, kind):
    hostile(node, "sys/module/firmware_class/parameters/path", kind)
    _spec, info = spec_of(node)
    assert named(info["warnings"], "parameters/path", kind), info["warnings"]


@pytest.mark.parametrize("kind", ["fifo", "socket", "device", "directory"])
def test_cdi_spec_passes_over_a_binary_that_is_not_a_file(node, kind):
    hostile(node, "usr/bin/nvidia-smi", kind)
    spec, _info = spec_of(node)
    assert not any(m["hostPath"] == "/usr/bin/nvidia-smi" for m in spec["containerEdits"]["mounts"])


def test_cdi_spec_module_writes_the_spec_with_a_warning_not_a_hang(node, tmp_path, capsys):
    hostile(node, "proc/driver/nvidia/version", "fifo")
    path = str(tmp_path / "cdi" / "nvidia.yaml")
    with deadline():
        rc, out = run_module(capsys, cdi_spec.main, {"root": node, "path": path, "source": "proc"})
    assert rc == 0 and out["changed"], out
    assert out["driver_version"] == "580.95.05"
    assert named(out["warnings"], "proc/driver/nvidia/version", "fifo"), out["warnings"]


def test_cdi_spec_module_refuses_a_fifo_information_file_and_writes_nothing(node, tmp_path, capsys):
    hostile(node, "proc/driver/nvidia/gpus/%s/information" % BDF, "fifo")
    path = str(tmp_path / "cdi" / "nvidia.yaml")
    with deadline():
        rc, out = run_module(capsys, cdi_spec.main, {"root": node, "path": path, "source": "proc"})
    assert rc == 1 and named([out["msg"]], "gpus/%s/information" % BDF, "fifo"), out
    assert not os.path.exists(path)


# -- MIG capability directories and CDI device names -----------------------------------------------------------------

#: directory names the kernel never makes: letters, non-ASCII digits (int() takes '١' for 1), leading zeros
BAD_GI = ["gix", "gi", "gi\u00b2", "gi\u0661", "gi01", "gi1x", "gi-1", "gi 3"]
BAD_CI = ["ci2x", "ci", "ci\u00b2", "ci\u0661", "ci00", "cix"]


def test_non_numeric_mig_directories_are_skipped_with_a_warning(node):
    base = _mig_tree(node)
    noderoots._write(base, "gi2/access", "DeviceFileMinor: 21\n")
    noderoots._write(base, "gi2/ci0/access", "DeviceFileMinor: 22\n")
    for gi in BAD_GI:
        noderoots._write(base, gi + "/access", "DeviceFileMinor: 40\n")
        noderoots._write(base, gi + "/ci0/access", "DeviceFileMinor: 41\n")
    for ci in BAD_CI:
        noderoots._write(base, "gi2/%s/access" % ci, "DeviceFileMinor: 50\n")
    spec, info = spec_of(node)
    gpus = _cdi.gpus_from_proc(node, [])
    assert [(m["gi"], m["ci"], m["gi_cap"], m["ci_cap"]) for m in gpus[0]["mig"]] == [(1, 0, 12, 13), (2, 0, 21, 22)]
    assert [d["name"] for d in spec["devices"]] == ["0:0", "0:1", "all"]
    for name in BAD_GI + BAD_CI:
        assert [w for w in info["warnings"] if repr(name) in w], (name, info["warnings"])


@pytest.mark.parametrize("minor", ["\u0661\u0662", "12x", "99999999999"])
def test_a_capability_minor_that_is_not_a_device_minor_is_left_out(node, minor):
    base = _mig_tree(node)
    noderoots._write(base, "gi1/ci0/access", "DeviceFileMinor: %s\n" % minor)
    spec, info = spec_of(node)
    nodes = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert nodes == ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12"]
    assert any("ci0/access" in w for w in info["warnings"]), info["warnings"]


#: GPU UUIDs a node could report in /proc/driver/nvidia/gpus/*/information that CDI does not take as device names
BAD_UUIDS = ["GPU-aa/../bb", "GPU-aa bb", "-GPU-aa", "GPU-aa-", "GPU-\u00e4a", "GPU-aa=bb", "GPU-aa\x1b[0m",
             "GPU-aa,bb", "GPU-\u0661"]


@pytest.mark.parametrize("uuid", BAD_UUIDS)
def test_a_uuid_that_is_not_a_cdi_device_name_is_left_out_with_a_warning(node, uuid):
    info_path = "proc/driver/nvidia/gpus/%s/information" % BDF
    noderoots._write(node, info_path, "Model: \t NVIDIA L40S\nGPU UUID: \t %s\nBus Location: \t %s\nDevice Minor: \t 0\n"
                     % (uuid, BDF))
    spec, info = spec_of(node)
    names = [d["name"] for d in spec["devices"]]
    assert names == ["0", "all"]
    assert all(CDI_NAME.fullmatch(n) for n in names)
    assert [w for w in info["warnings"] if repr(uuid) in w], info["warnings"]
    assert yaml.safe_load(_cdi.render(spec, "/etc/cdi/nvidia.yaml")) == spec


@pytest.mark.parametrize("uuid", ["all", "0", "1"])
def test_a_uuid_that_takes_another_devices_name_is_left_out(node, uuid):
    """Two GPUs; the first reports a UUID equal to a name the spec gives another device (CDI refuses a spec
    whose device names repeat)."""
    noderoots._write(node, "proc/driver/nvidia/gpus/%s/information" % BDF,
                     "GPU UUID: \t %s\nBus Location: \t %s\nDevice Minor: \t 0\n" % (uuid, BDF))
    noderoots._write(node, "proc/driver/nvidia/gpus/0000:5e:00.0/information",
                     "GPU UUID: \t GPU-2\nBus Location: \t 0000:5e:00.0\nDevice Minor: \t 1\n")
    noderoots._write(node, "dev/nvidia1", "")
    spec, info = spec_of(node)
    names = [d["name"] for d in spec["devices"]]
    assert names == ["0", "1", "GPU-2", "all"]
    assert [w for w in info["warnings"] if repr(uuid) in w], info["warnings"]
