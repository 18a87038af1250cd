"""_sriov's readers and renderers: the in-use rule by kind, VFIO holders from /proc, the persistence formats."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "vgpu"))

from vgpu_sysfs import Host  # noqa: E402

from ansible_collections.gpuops.nvidia.plugins.module_utils import _sriov  # noqa: E402


def test_usage_kinds(tmp_path):
    h = Host(tmp_path)
    pf = h.l40s()
    h.enable(pf, 4)
    vfs = _sriov.virtfns(h.root, pf)
    idle = _sriov.usage(h.root, vfs[0], "nvidia", {})
    assert idle["driver"] == "nvidia" and idle["why"] == {"driver": [], "vgpu": [], "open": []}
    h.write(os.path.join(h.root, "sys/bus/pci/devices", vfs[1], "nvidia/current_vgpu_type"), "1150")
    cdev = sorted(os.listdir(os.path.join(h.root, "sys/bus/pci/devices", vfs[1], "vfio-dev")))[0]
    h.hold(77, "qemu-kvm", "/dev/vfio/devices/%s" % cdev)
    h.hold(78, "cat", "/dev/vfio/vfio")          # the container node is not a device
    u = _sriov.usage(h.root, vfs[1], "nvidia", _sriov.vfio_holders(h.root))
    assert u["why"]["vgpu"] == ["has vGPU type 1150 (nvidia/current_vgpu_type)"]
    assert u["why"]["open"] == ["/dev/vfio/devices/%s open by pid 77 (qemu-kvm)" % cdev]
    assert u["why"]["driver"] == []
    h.bind(vfs[2], "vfio-pci")
    assert _sriov.usage(h.root, vfs[2], "nvidia", {})["why"]["driver"] == ["bound to vfio-pci"]


def test_mdev_on_a_vf_is_in_use_and_its_group_is_watched(tmp_path):
    h = Host(tmp_path)
    pf = h.a10()
    h.enable(pf, 2)
    vf = _sriov.virtfns(h.root, pf)[0]
    uuid = "aa618089-8b16-4d01-a136-25a0f3c73123"
    h.write(os.path.join(h.root, "sys/bus/pci/devices", vf, "mdev_supported_types/nvidia-591/create"), uuid)
    group = os.path.basename(os.readlink(os.path.join(h.root, "sys/bus/pci/devices", vf, uuid, "iommu_group")))
    h.hold(9, "qemu-system-x86", "/dev/vfio/%s" % group)
    u = _sriov.usage(h.root, vf, "nvidia", _sriov.vfio_holders(h.root))
    assert u["mdevs"] == [uuid]
    assert u["why"]["vgpu"] == ["has mdev %s (nvidia-591)" % uuid]
    assert u["why"]["open"] == ["/dev/vfio/%s open by pid 9 (qemu-system-x86)" % group]


def test_render_and_parse_round_trip():
    udev = {"0000:00:07.0": {"driver": "nvme", "num_vfs": 2}}
    assert _sriov.parse_udev(_sriov.render_udev(udev)) == udev
    text = _sriov.render_unit({"0000:41:00.0": {}})
    assert _sriov.parse_unit(text) == {"0000:41:00.0": {"tool": "/usr/lib/nvidia/sriov-manage"}}
    assert "ConditionPathExists=/usr/lib/nvidia/sriov-manage" in text
    assert ("ExecStart=/usr/bin/timeout 90 /bin/sh -c 'until [ -e /sys/bus/pci/devices/0000:41:00.0/driver ]; "
            "do sleep 0.5; done'") in text
    assert "$" not in text       # systemd would expand it
    assert _sriov.render_udev({}) is None and _sriov.render_unit({}) is None
    # lines that are not ours are not records
    assert _sriov.parse_udev('ACTION=="add", KERNEL=="0000:00:07.0", ATTR{sriov_numvfs}="2"\n') == {}


# --- the boot unit: quoting and exact parsing ----------------------------------------------------------------------


@pytest.mark.parametrize("tool,word", [
    ("/usr/lib/nvidia/sriov-manage", "/usr/lib/nvidia/sriov-manage"),       # plain: as earlier versions wrote it
    ("/opt/nv tools/sriov-manage", '"/opt/nv tools/sriov-manage"'),
    ("/opt/vgpu 100%/sriov-manage", '"/opt/vgpu 100%%/sriov-manage"'),
    ("/opt/%n/sriov-manage", '"/opt/%%n/sriov-manage"'),
    ("/opt/a;b #c/sriov-manage", '"/opt/a;b #c/sriov-manage"'),
])
def test_tool_is_one_exec_word_and_parses_back(tool, word):
    assert _sriov.exec_word(tool) == word
    text = _sriov.render_unit({"0000:41:00.0": {"tool": tool}, "0000:c1:00.0": {}})
    assert "ExecStart=%s -e 0000:41:00.0" % word in text.splitlines()
    assert "ConditionPathExists=%s" % tool.replace("%", "%%") in text.splitlines()
    assert _sriov.parse_unit(text) == {"0000:41:00.0": {"tool": tool},
                                       "0000:c1:00.0": {"tool": "/usr/lib/nvidia/sriov-manage"}}
    assert _sriov.render_unit(_sriov.parse_unit(text)) == text


@pytest.mark.parametrize("tool", ["/opt/a$b/x", "/opt/a\nExecStartPre=/bin/false", "/opt/a\x00b", '/opt/"x"/y',
                                  "/opt/it's/x", "/opt/a\\b", "/opt/x ", "relative/x", "/opt/\x85/x"])
def test_tool_that_cannot_be_written_is_refused(tool):
    assert _sriov.tool_problem(tool)
    with pytest.raises(_sriov.SriovError):
        _sriov.render_unit({"0000:41:00.0": {"tool": tool}})


def test_unit_and_rule_lines_are_parsed_whole():
    unit = ("ExecStart=/usr/lib/nvidia/sriov-manage -e 0000:41:00.0 -x\n"
            "ExecStart=/usr/lib/nvidia/sriov-manage -e 0000:41:00.0; rm -rf /\n"
            " ExecStart=/usr/lib/nvidia/sriov-manage -e 0000:42:00.0\n"
            'ExecStart="/opt/a"b" -e 0000:43:00.0\n'
            "ExecStart=/opt/a b -e 0000:44:00.0\n"
            "ExecStart=/usr/lib/nvidia/sriov-manage -e 0000:45:00.0\n")
    assert _sriov.parse_unit(unit) == {"0000:45:00.0": {"tool": "/usr/lib/nvidia/sriov-manage"}}
    rule = ('ACTION=="add|bind", SUBSYSTEM=="pci", KERNEL=="0000:00:07.0", DRIVER=="nvme", ATTR{sriov_numvfs}="2" x\n'
            'ACTION=="add|bind", SUBSYSTEM=="pci", KERNEL=="0000:00:08.0", DRIVER=="nvme", ATTR{sriov_numvfs}="3"\n')
    assert _sriov.parse_udev(rule) == {"0000:00:08.0": {"driver": "nvme", "num_vfs": 3}}
    with pytest.raises(_sriov.SriovError, match="cannot go into a udev rule"):
        _sriov.render_udev({"0000:00:07.0": {"driver": 'nvme", RUN+="/bin/x', "num_vfs": 1}})


def test_counts_are_ascii_digits_only():
    assert _sriov._int("12\n") == 12 and _sriov._int("-1") == -1 and _sriov._int(3) == 3
    for bad in ("\u00b2", "\u0661\u0662", "1_000", " ", "", "0x10", None):
        assert _sriov._int(bad) is None, bad
    assert _sriov.is_digits("0042") and not _sriov.is_digits("\u00b2") and not _sriov.is_digits("4\n")
