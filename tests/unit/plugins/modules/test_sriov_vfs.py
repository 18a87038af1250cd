"""gpuops.nvidia.sriov_vfs over sysfs trees whose writes are answered like the kernel and NVIDIA's sriov-manage
answer them (tests/unit/fixtures/vgpu/vgpu_sysfs.py): counts, persistence, refusals with nothing changed, check mode,
idempotence, the in-use rule, rollback."""
import errno
import json
import os
import sys

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args
from conftest import module_context

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "vgpu"))

from vgpu_sysfs import Host, snapshot  # noqa: E402

from ansible_collections.gpuops.nvidia.plugins.module_utils import _sriov  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.modules import sriov_vfs  # noqa: E402

RULES = "etc/udev/rules.d/60-gpuops-sriov-vfs.rules"
UNIT = "etc/systemd/system/gpuops-sriov-vfs.service"


@pytest.fixture
def host(tmp_path, monkeypatch):
    h = Host(tmp_path / "root")
    monkeypatch.setattr(_sriov, "_write", h.write)
    monkeypatch.setattr(_sriov, "WAIT_TIMEOUT", 0.2)

    def run_command(self, args, **kwargs):
        assert args[0] == os.path.join(h.root, "usr/lib/nvidia/sriov-manage"), args
        h.sriov_manage(args[1:])
        return 0, "", ""
    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    return h


def with_tool(h):
    p = os.path.join(h.root, "usr/lib/nvidia/sriov-manage")
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write("#!/bin/sh\n")
    return h


def run(capsys, host, **args):
    args.setdefault("root", host.root)
    with module_context(), patch_module_args(args):
        with pytest.raises(SystemExit):
            sriov_vfs.main()
    return json.loads(capsys.readouterr().out)


def read(host, rel):
    p = os.path.join(host.root, rel)
    return open(p).read() if os.path.exists(p) else None


def test_nvme_count_through_sysfs_persisted_by_udev_then_idempotent(host, capsys):
    pf = host.nvme()
    res = run(capsys, host, devices=[pf], num_vfs=2)
    assert res["changed"] and res["actions"] == [{"bdf": pf, "from": 0, "to": 2, "method": "sysfs"}]
    assert host.numvfs(pf) == 2
    assert host.writes == [("sys/bus/pci/devices/0000:00:07.0/sriov_numvfs", "2")]
    rule = read(host, RULES)
    assert ('ACTION=="add|bind", SUBSYSTEM=="pci", KERNEL=="0000:00:07.0", DRIVER=="nvme", '
            'ATTR{sriov_numvfs}="2"') in rule.splitlines()
    assert read(host, UNIT) is None
    # the VFs the kernel made: virtfn links, probed by the PF's driver
    assert _sriov.virtfns(host.root, pf) == ["0000:00:07.1", "0000:00:07.2"]
    again = run(capsys, host, devices=["00:07.0"], num_vfs="2")
    assert not again["changed"] and again["actions"] == [] and host.writes == [host.writes[0]]
    assert [v["in_use"] for v in again["devices"][0]["vfs"]] == [False, False]


def test_a_non_zero_count_changes_through_zero(host, capsys):
    pf = host.nvme()
    host.enable(pf, 1)
    res = run(capsys, host, devices=[pf], num_vfs="max", _ansible_diff=True)
    assert res["actions"] == [{"bdf": pf, "from": 1, "to": 4, "method": "sysfs"}]
    assert [v for _path, v in host.writes] == ["0", "4"] and host.numvfs(pf) == 4
    assert res["diff"][0]["before"] == "0000:00:07.0: sriov_numvfs 1\n"
    assert res["diff"][0]["after"] == "0000:00:07.0: sriov_numvfs 4\n"


def test_check_mode_plans_writes_nothing(host, capsys):
    pf = host.nvme()
    before = snapshot(host.root)
    res = run(capsys, host, devices=[pf], num_vfs=3, _ansible_check_mode=True, _ansible_diff=True)
    assert res["changed"] and res["actions"][0]["to"] == 3 and res["files"][os.sep + RULES] is True
    assert any(d.get("after_header", "").endswith("60-gpuops-sriov-vfs.rules") for d in res["diff"])
    assert snapshot(host.root) == before and host.writes == []


def test_nvidia_gpus_through_sriov_manage_persisted_by_a_systemd_unit(host, capsys):
    with_tool(host)
    pf = host.l40s()
    other = host.l40s("0000:c1:00.0")
    res = run(capsys, host, devices=["all_nvidia"], num_vfs="max")
    assert [a["method"] for a in res["actions"]] == ["sriov-manage", "sriov-manage"]
    assert host.numvfs(pf) == 32 and host.numvfs(other) == 32
    assert len(_sriov.virtfns(host.root, pf)) == 32 and _sriov.virtfns(host.root, pf)[0] == "0000:41:00.4"
    unit = read(host, UNIT)
    assert "ExecStart=/usr/lib/nvidia/sriov-manage -e 0000:41:00.0" in unit.splitlines()
    assert "ExecStart=/usr/lib/nvidia/sriov-manage -e 0000:c1:00.0" in unit.splitlines()
    assert "After=systemd-modules-load.service systemd-udev-trigger.service nvidia-vgpud.service " \
           "nvidia-vgpu-mgr.service" in unit
    assert "Before=libvirtd.service virtqemud.service kubelet.service gpuops-vgpu-devices.service" in unit
    assert read(host, RULES) is None
    # parsed back: the record is the unit itself
    assert _sriov.parse_unit(unit) == {pf: {"tool": "/usr/lib/nvidia/sriov-manage"},
                                       other: {"tool": "/usr/lib/nvidia/sriov-manage"}}
    assert not run(capsys, host, devices=["all_nvidia"], num_vfs="max")["changed"]
    # absent: VFs gone, unit gone
    res = run(capsys, host, devices=[pf, other], state="absent")
    assert res["changed"] and host.numvfs(pf) == 0 and read(host, UNIT) is None


def test_all_nvidia_skips_gpus_without_sriov_and_says_so(host, capsys):
    host.t4()
    res = run(capsys, host, devices=["all_nvidia"], num_vfs="max")
    assert not res["changed"] and res["devices"] == [] and "no SR-IOV physical function" in res["notes"][0]


@pytest.mark.parametrize("args,match", [
    ({"devices": ["0000:00:7.0"], "num_vfs": 1}, "malformed device"),
    ({"devices": ["0000:00:09.0"], "num_vfs": 1}, "not present on this host"),
    ({"devices": ["0000:00:07.0"], "num_vfs": 5},
     "0000:00:07.0 (1b36:0010, driver nvme): 5 VFs requested, but its sriov_totalvfs is 4"),
    ({"devices": ["0000:00:07.0"], "num_vfs": 0}, "use state: absent"),
    ({"devices": ["0000:00:07.0"], "num_vfs": -1}, "a count >= 1 or max"),
    ({"devices": ["0000:00:07.0"], "num_vfs": "lots"}, "a count >= 1 or max"),
    ({"devices": ["0000:00:07.0"]}, "num_vfs is required"),
    ({"devices": ["0000:00:07.0"], "state": "absent", "num_vfs": 2}, "must not be set with state=absent"),
    ({"devices": ["0000:3b:00.0"], "num_vfs": 1}, "has no SR-IOV"),
    ({"devices": ["0000:41:00.0"], "num_vfs": 4}, "sriov-manage is not on this host"),
    ({"devices": ["0000:41:00.0"], "num_vfs": 4, "method": "sysfs"}, None),
])
def test_bad_input_is_refused_before_any_change(host, capsys, args, match):
    host.nvme()
    host.t4()
    host.l40s()
    before = snapshot(host.root)
    res = run(capsys, host, **args)
    assert res["failed"] is True
    if match is None:   # the nvidia driver refuses a direct write: the write failed, nothing is left changed
        assert "Operation not permitted" in res["msg"] and res["changed"] is False
    else:
        assert match in res["msg"], res["msg"]
        assert host.writes == []
    assert snapshot(host.root) == before


def test_sriov_manage_enables_every_vf_only(host, capsys):
    with_tool(host)
    host.l40s()
    res = run(capsys, host, devices=["0000:41:00.0"], num_vfs=4)
    assert res["failed"] and "sriov-manage enables all 32 VFs of a GPU; 4 asked for: set num_vfs: max" in res["msg"]


def test_a_vf_is_a_vf(host, capsys):
    pf = host.nvme()
    host.enable(pf, 2)
    res = run(capsys, host, devices=["0000:00:07.1"], num_vfs=1)
    assert res["failed"] and "0000:00:07.1 is a virtual function of 0000:00:07.0" in res["msg"]


def test_a_pf_without_driver_is_refused(host, capsys):
    host.add_pf("0000:00:08.0", vendor="8086", device="1572", klass="020000", driver=None, total_vfs=8, kind="plain")
    res = run(capsys, host, devices=["0000:00:08.0"], num_vfs=2)
    assert res["failed"] and "has no driver bound" in res["msg"] and host.writes == []


@pytest.mark.parametrize("busy,why", [
    ("vfio-pci", "0000:00:07.2: bound to vfio-pci"),
    ("open", "0000:00:07.2: bound to vfio-pci, /dev/vfio/%s open by pid 4242 (qemu-system-x86)"),
])
def test_count_change_refused_while_a_vf_is_in_use(host, capsys, busy, why):
    pf = host.nvme()
    run(capsys, host, devices=[pf], num_vfs=2)
    host.bind("0000:00:07.2", "vfio-pci")
    if busy == "open":
        host.hold(4242, "qemu-system-x86", "/dev/vfio/%s" % host.group_of("0000:00:07.2"))
        why = why % host.group_of("0000:00:07.2")
    before, writes = snapshot(host.root), list(host.writes)
    for args in ({"num_vfs": 4}, {"state": "absent"}):
        res = run(capsys, host, devices=[pf], **args)
        assert res["failed"] and "refusing to change the VF count 2 -> " in res["msg"], res["msg"]
        assert why in res["msg"] and "nothing was changed" in res["msg"]
        assert snapshot(host.root) == before and host.writes == writes
    # the same count is no change: the VF in use stays, and is reported as in use
    res = run(capsys, host, devices=[pf], num_vfs=2)
    assert not res["changed"]
    assert [(v["bdf"], v["in_use"]) for v in res["devices"][0]["vfs"]] == [("0000:00:07.1", False), ("0000:00:07.2", True)]
    # still held open after the unbind: still in use
    host.bind("0000:00:07.2", "nvme")
    if busy == "open":
        res = run(capsys, host, devices=[pf], state="absent")
        assert res["failed"] and "0000:00:07.2: /dev/vfio/" in res["msg"] and "open by pid 4242" in res["msg"]
        host.release(4242)
    # given back: the count changes
    assert run(capsys, host, devices=[pf], state="absent")["changed"] and host.numvfs(pf) == 0
    assert read(host, RULES) is None


def test_a_vf_with_a_vgpu_is_in_use(host, capsys):
    with_tool(host)
    pf = host.l40s()
    host.enable(pf)
    vf = _sriov.virtfns(host.root, pf)[3]
    host.write(os.path.join(host.root, "sys/bus/pci/devices", vf, "nvidia/current_vgpu_type"), "1150")
    res = run(capsys, host, devices=[pf], state="absent")
    assert res["failed"] and "%s: has vGPU type 1150 (nvidia/current_vgpu_type)" % vf in res["msg"]
    assert "gpuops.nvidia.vgpu_devices state=absent" in res["msg"] and host.numvfs(pf) == 32


def test_a_failed_write_rolls_back_every_pf_of_the_run(host, capsys):
    a, b = host.nvme("0000:00:07.0"), host.nvme("0000:00:08.0")
    host.enable(b, 1)
    host.fail["sys/bus/pci/devices/0000:00:08.0/sriov_numvfs"] = OSError(errno.ENOMEM, "Cannot allocate memory")
    res = run(capsys, host, devices=[a, b], num_vfs=3)
    assert res["failed"] and "setting 3 VFs on 0000:00:08.0 (sysfs) failed: Cannot allocate memory" in res["msg"]
    assert "back to the count it had: 0000:00:07.0 (0), 0000:00:08.0 (1)" in res["msg"]
    assert host.numvfs(a) == 0 and host.numvfs(b) == 1 and res["changed"] is False
    assert read(host, RULES) is None


def test_persistent_false_and_other_pfs_records_are_kept(host, capsys):
    a, b = host.nvme("0000:00:07.0"), host.nvme("0000:00:08.0")
    run(capsys, host, devices=[a], num_vfs=1)
    run(capsys, host, devices=[b], num_vfs=2)
    assert sorted(_sriov.parse_udev(read(host, RULES))) == [a, b]
    run(capsys, host, devices=[b], num_vfs=2, persistent=False)
    assert _sriov.parse_udev(read(host, RULES)) == {a: {"driver": "nvme", "num_vfs": 1}}
    assert host.numvfs(b) == 2


@pytest.mark.parametrize("args", [
    {"devices": ["0000:00:07.0"], "num_vfs": 1, "root": "relative/root"},
    {"devices": ["0000:00:07.0"], "num_vfs": 1, "root": "/no/such/root"},
    {"devices": [], "num_vfs": 1},
    {"devices": [""], "num_vfs": 1},
    {"devices": ["$(reboot)"], "num_vfs": 1},
    {"devices": ["0000:00:07.0"], "num_vfs": [1]},
    {"devices": ["0000:00:07.0"], "num_vfs": {"n": 1}},
    {"devices": ["0000:00:07.0"], "num_vfs": 1.5},
    {"devices": ["0000:00:07.0"], "num_vfs": True},
    {"devices": ["0000:00:07.0"], "num_vfs": 1, "sriov_manage": "bin/sriov-manage"},
])
def test_nonsense_is_a_message_never_a_traceback(host, capsys, args):
    host.nvme()
    before = snapshot(host.root)
    res = run(capsys, host, **args)
    assert res["failed"] is True and res["msg"] and "Traceback" not in res["msg"], res
    assert snapshot(host.root) == before and host.writes == []
