"""_sriov's readers and renderers: the in-use rule by kind, VFIO holders from /proc, the persistence formats."""
import os
import sys

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
