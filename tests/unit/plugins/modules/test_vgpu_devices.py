"""gpuops.nvidia.vgpu_devices over sysfs trees shaped like NVIDIA's documented layouts (tests/unit/fixtures/vgpu):
type selection per VF (vendor-specific VFIO) and per mdev parent, idempotence, bad input refused with nothing
changed, the in-use rule, check mode writing nothing, undo of a run the GPU stops half-way."""
import json
import os
import sys

import pytest
from ansible.module_utils.testing import patch_module_args
from conftest import module_context

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "vgpu"))

from vgpu_sysfs import Host, snapshot  # noqa: E402

from ansible_collections.gpuops.nvidia.plugins.module_utils import _sriov  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.modules import vgpu_devices  # noqa: E402


def cfg(*entries, name="default"):
    return {"version": "v1", "vgpu-configs": {name: list(entries)}}


def every(types, **kw):
    return dict({"devices": "all", "vgpu-devices": types}, **kw)


@pytest.fixture
def host(tmp_path, monkeypatch):
    h = Host(tmp_path / "root")
    monkeypatch.setattr(_sriov, "_write", h.write)
    return h


def run(capsys, host, **args):
    args.setdefault("root", host.root)
    with module_context(), patch_module_args(args):
        with pytest.raises(SystemExit):
            vgpu_devices.main()
    return json.loads(capsys.readouterr().out)


def vfio_node(host, vf):
    d = os.path.join(host.root, "sys/bus/pci/devices", vf, "vfio-dev")
    return "/dev/vfio/devices/" + sorted(os.listdir(d))[0]


def l40s(host, bdf="0000:41:00.0"):
    pf = host.l40s(bdf)
    host.enable(pf)
    return pf, _sriov.virtfns(host.root, pf)


def test_vendor_vfio_types_per_vf_then_idempotent(host, capsys):
    pf, vfs = l40s(host)
    res = run(capsys, host, config=cfg(every({"L40S-4Q": 6})), _ansible_diff=True)
    assert res["changed"]
    gpu = res["gpus"][0]
    assert (gpu["index"], gpu["interface"], gpu["before"], gpu["after"]) == (0, "vendor-vfio", {}, {"L40S-4Q": 6})
    assert host.vgpu_types(pf) == {vf: 1150 for vf in vfs[:6]}
    assert list(host.writes) == [("sys/bus/pci/devices/%s/nvidia/current_vgpu_type" % vf, "1150") for vf in vfs[:6]]
    assert res["diff"][0]["before"] == "GPU 0 (0000:41:00.0, 10de:26b9): no vGPU\n"
    assert res["diff"][0]["after"] == "GPU 0 (0000:41:00.0, 10de:26b9): L40S-4Q x6\n"
    writes = list(host.writes)
    again = run(capsys, host, config=cfg(every({"L40S-4Q": 6})))
    assert not again["changed"] and host.writes == writes and again["gpus"][0]["after"] == {"L40S-4Q": 6}
    # the full name is the same type
    assert not run(capsys, host, config=cfg(every({"NVIDIA L40S-4Q": 6})))["changed"]


def test_check_mode_writes_nothing(host, capsys):
    pf, vfs = l40s(host)
    before = snapshot(host.root)
    res = run(capsys, host, config=cfg(every({"L40S-8Q": 2})), _ansible_check_mode=True)
    assert res["changed"] and res["gpus"][0]["after"] == {"L40S-8Q": 2}
    assert res["gpus"][0]["actions"] == [{"create": "L40S-8Q", "count": 2}]
    assert host.writes == [] and snapshot(host.root) == before


def test_another_type_replaces_idle_vgpus(host, capsys):
    pf, vfs = l40s(host)
    run(capsys, host, config=cfg(every({"L40S-4Q": 6})))
    res = run(capsys, host, config=cfg(every({"L40S-8Q": 3})))
    assert res["changed"] and res["gpus"][0]["before"] == {"L40S-4Q": 6} and res["gpus"][0]["after"] == {"L40S-8Q": 3}
    assert host.vgpu_types(pf) == {vf: 1152 for vf in vfs[:3]}


def test_a_vgpu_in_use_is_kept_and_never_taken_away(host, capsys):
    pf, vfs = l40s(host)
    run(capsys, host, config=cfg(every({"L40S-4Q": 6})))
    host.hold(4242, "qemu-system-x86", vfio_node(host, vfs[4]))
    # fewer of the same type: the one in use stays, idle ones go
    res = run(capsys, host, config=cfg(every({"L40S-4Q": 2})))
    assert res["changed"] and sorted(host.vgpu_types(pf)) == [vfs[0], vfs[4]]
    # another type: refused, naming the VF, its type and why; nothing changed
    before, writes = snapshot(host.root), list(host.writes)
    res = run(capsys, host, config=cfg(every({"L40S-8Q": 1})))
    assert res["failed"]
    assert ("GPU 0 (0000:41:00.0, 10de:26b9): VF %s has L40S-4Q (type 1150), which vGPU config 'default' does not want "
            "(or not that many), and it is in use: %s open by pid 4242 (qemu-system-x86)" % (vfs[4], vfio_node(host, vfs[4]))
            ) in res["msg"]
    assert res["msg"].endswith("nothing was changed") and host.writes == writes and snapshot(host.root) == before
    res = run(capsys, host, state="absent")
    assert res["failed"] and "is in use" in res["msg"] and host.writes == writes
    host.release(4242)
    assert run(capsys, host, state="absent")["changed"] and host.vgpu_types(pf) == {}


def test_vfs_on_another_driver_are_neither_used_nor_counted_free(host, capsys):
    pf, vfs = l40s(host)
    for vf in vfs[2:]:
        host.bind(vf, "vfio-pci")
    res = run(capsys, host, config=cfg(every({"L40S-2Q": 3})))
    assert res["failed"] and "asks for 3 more vGPUs (L40S-2Q: 3) but only 2 of its 32 VFs are free" in res["msg"]
    assert run(capsys, host, config=cfg(every({"L40S-2Q": 2})))["changed"]
    assert sorted(host.vgpu_types(pf)) == vfs[:2]


@pytest.mark.parametrize("config,match", [
    (cfg(every({"L40S-5Q": 1})), "GPU 0 (0000:41:00.0, 10de:26b9): vGPU type 'L40S-5Q' is unknown here: the types its VFs "
                                 "list in nvidia/creatable_vgpu_types are L40S-1Q (1147), L40S-2Q (1148)"),
    (cfg(every({"L40S-1Q": 40})), "asks for 40 more vGPUs (L40S-1Q: 40) but only 32 of its 32 VFs are free"),
    (cfg(every({"L40S-4Q": 0})), "vgpu-devices['L40S-4Q'] must be an integer >= 1, got 0"),
    (cfg(every({"L40S-4Q": 1, "NVIDIA L40S-4Q": 1})), "vGPU types 'L40S-4Q' and 'NVIDIA L40S-4Q' are the same type"),
    ({"version": "v2", "vgpu-configs": {}}, "version must be v1"),
    (cfg(every({"L40S-4Q": 1}), name="other"), "the default config 'default' is not defined"),
    (cfg({"devices": [1], "vgpu-devices": {"L40S-4Q": 1}}), "names GPU 1; this host has GPU 0"),
    (cfg(every({"L40S-4Q": 1}), every({"L40S-2Q": 1})), "GPU 0 (0000:41:00.0, 10de:26b9) is already matched by entry 0"),
    (cfg(every({"L40S-4Q": 1}, **{"device-filter": "26b9"})), "device-filter must be 0x<DEVICE><VENDOR>"),
])
def test_bad_config_is_refused_before_any_write(host, capsys, config, match):
    l40s(host)
    before = snapshot(host.root)
    res = run(capsys, host, config=config)
    assert res["failed"] and match in res["msg"], res["msg"]
    assert host.writes == [] and snapshot(host.root) == before


def test_more_than_the_gpu_can_create_is_refused_up_front_when_its_vfs_say_so(host, capsys):
    pf, vfs = l40s(host)
    run(capsys, host, config=cfg(every({"L40S-24Q": 2})))       # 48 GB: the GPU is full
    writes = list(host.writes)
    res = run(capsys, host, config=cfg(every({"L40S-24Q": 3})))
    assert res["failed"] and ("GPU 0 (0000:41:00.0, 10de:26b9): 1 more L40S-24Q asked for, but only 0 of its free VFs "
                              "can create it now (nvidia/creatable_vgpu_types lists it on none)") in res["msg"]
    assert host.writes == writes


def test_the_gpu_stopping_half_way_undoes_the_run(host, capsys):
    pf, vfs = l40s(host)
    run(capsys, host, config=cfg(every({"L40S-8Q": 2})))
    # every free VF lists L40S-48Q only when the GPU is empty: the plan cannot tell 2 will not fit, the GPU can
    res = run(capsys, host, config=cfg(every({"L40S-48Q": 2})))
    assert res["failed"]
    assert ("GPU 0 (0000:41:00.0, 10de:26b9): 1 of 2 more L40S-48Q made, then no free VF listed it in "
            "nvidia/creatable_vgpu_types: the GPU has no room for more; undone: the GPU's vGPUs are as they were before "
            "the run") in res["msg"]
    assert res["changed"] is False and host.vgpu_types(pf) == {vfs[0]: 1152, vfs[1]: 1152}


def test_a_gpu_without_vfs_or_without_the_vgpu_driver(host, capsys):
    host.l40s()
    res = run(capsys, host, config=cfg(every({"L40S-4Q": 1})))
    assert res["failed"] and ("GPU 0 (0000:41:00.0, 10de:26b9): vGPU config 'default' asks for L40S-4Q: 1, but it has "
                              "SR-IOV but no VF is enabled: enable its VFs first") in res["msg"]
    h2 = Host(os.path.join(host.root, "..", "plain"))
    h2.add_pf("0000:01:00.0", device="2330", kind="plain", total_vfs=0)
    res = run(capsys, h2, config=cfg(every({"H100-4C": 1})))
    assert res["failed"] and "no vGPU interface" in res["msg"] and "vGPU host driver loaded" in res["msg"]


def test_gpu_indexes_and_device_filters_pick_gpus(host, capsys):
    pf0, vfs0 = l40s(host, "0000:41:00.0")
    pf1, vfs1 = l40s(host, "0000:c1:00.0")
    res = run(capsys, host, config=cfg({"devices": [1], "vgpu-devices": {"L40S-6Q": 2}}))
    assert host.vgpu_types(pf0) == {} and len(host.vgpu_types(pf1)) == 2
    assert res["notes"] == ["GPU 0 (0000:41:00.0, 10de:26b9): not matched by vGPU config 'default', left alone"]
    res = run(capsys, host, config=cfg(every({"L40S-12Q": 1}, **{"device-filter": ["0x26B910DE"]})))
    assert len(host.vgpu_types(pf0)) == 1 and host.vgpu_types(pf1) == {vfs1[0]: 1153}


def test_the_name_cache_names_types_a_full_gpu_no_longer_lists(host, capsys):
    pf, vfs = l40s(host)
    run(capsys, host, config=cfg(every({"L40S-1Q": 32})))      # every VF taken: each lists only its own type
    cache = os.path.join(host.root, "var/lib/gpuops/vgpu-types.json")
    assert json.load(open(cache))[pf]["1148"] == "NVIDIA L40S-2Q"
    os.rename(cache, cache + ".away")
    res = run(capsys, host, config=cfg(every({"L40S-2Q": 16})))
    assert res["failed"] and "(a VF lists only what it can create now: 32 of its 32 VFs have a vGPU" in res["msg"]
    os.rename(cache + ".away", cache)
    res = run(capsys, host, config=cfg(every({"L40S-2Q": 16})))
    assert res["changed"] and res["gpus"][0]["after"] == {"L40S-2Q": 16}


# --- mdev ------------------------------------------------------------------------------------------------

def test_mdev_on_the_vfs_of_an_ampere_gpu(host, capsys):
    pf = host.a10()
    host.enable(pf)
    res = run(capsys, host, config=cfg(every({"A10-4Q": 6})))
    assert res["changed"] and res["gpus"][0]["interface"] == "mdev"
    made = host.mdevs(pf)
    vfs = _sriov.virtfns(host.root, pf)
    assert [(p, t) for p, _u, t in made] == [(vf, "NVIDIA A10-4Q") for vf in vfs[:6]]
    for parent, uuid, _t in made:      # linked from the type's devices/ and the mdev bus
        assert os.path.islink(os.path.join(host.root, "sys/bus/mdev/devices", uuid))
        assert os.path.islink(os.path.join(host.root, "sys/bus/pci/devices", parent,
                                           "mdev_supported_types/nvidia-591/devices", uuid))
    writes = list(host.writes)
    assert not run(capsys, host, config=cfg(every({"A10-4Q": 6})))["changed"] and host.writes == writes
    res = run(capsys, host, config=cfg(every({"A10-4Q": 7})))
    assert res["failed"] and ("GPU 0 (0000:81:00.0, 10de:2236): 1 more A10-4Q asked for, but the GPU says 0 can be "
                              "created (available_instances of nvidia-591 on its VFs)") in res["msg"]
    assert host.writes == writes


def test_mdev_on_a_gpu_without_sriov(host, capsys):
    pf = host.t4()
    res = run(capsys, host, config=cfg(every({"T4-4Q": 5})))
    assert res["failed"] and ("GPU 0 (0000:3b:00.0, 10de:1eb8): 5 more T4-4Q asked for, but the GPU says 4 can be "
                              "created (available_instances of nvidia-224 on 0000:3b:00.0)") in res["msg"]
    assert host.writes == []
    res = run(capsys, host, config=cfg(every({"T4-4Q": 4})))
    assert res["changed"] and [t for _p, _u, t in host.mdevs(pf)] == ["GRID T4-4Q"] * 4
    # one in use: a change of type is refused, a smaller count keeps it
    uuid = host.mdevs(pf)[2][1]
    group = os.path.basename(os.readlink(os.path.join(host.root, "sys/bus/pci/devices", pf, uuid, "iommu_group")))
    host.hold(99, "qemu-system-x86", "/dev/vfio/%s" % group)
    res = run(capsys, host, config=cfg(every({"T4-2Q": 1})))
    assert res["failed"] and ("mdev %s on 0000:3b:00.0 is T4-4Q, which vGPU config 'default' does not want (or not that "
                              "many), and it is in use: /dev/vfio/%s open by pid 99 (qemu-system-x86)" % (uuid, group)
                              ) in res["msg"]
    assert run(capsys, host, config=cfg(every({"T4-4Q": 1})))["changed"]
    assert [u for _p, u, _t in host.mdevs(pf)] == [uuid]
    res = run(capsys, host, config=cfg(every({"T4-5Q": 1})))
    assert res["failed"] and "vGPU type 'T4-5Q' is unknown here: its mdev_supported_types are T4-1Q (nvidia-222)" in res["msg"]


def test_mdev_undo_recreates_what_the_run_removed(host, capsys):
    pf = host.t4()
    run(capsys, host, config=cfg(every({"T4-2Q": 2})))
    old = sorted(u for _p, u, _t in host.mdevs(pf))
    host.fail["sys/bus/pci/devices/%s/mdev_supported_types/nvidia-225/create" % pf] = OSError(22, "Invalid argument")
    res = run(capsys, host, config=cfg(every({"T4-8Q": 1})))
    assert res["failed"] and "Invalid argument" in res["msg"] and "undone" in res["msg"] and res["changed"] is False
    assert sorted(u for _p, u, _t in host.mdevs(pf)) == old


@pytest.mark.parametrize("args", [
    {"config": {"version": "v1", "vgpu-configs": []}},
    {"config": {"version": "v1", "vgpu-configs": {"default": "L40S-4Q"}}},
    {"config": {"version": "v1", "vgpu-configs": {"default": [{"devices": "all", "vgpu-devices": ["L40S-4Q"]}]}}},
    {"config": {"version": "v1", "vgpu-configs": {"default": [{"devices": "some", "vgpu-devices": {"L40S-4Q": 1}}]}}},
    {"config": {"version": "v1", "vgpu-configs": {"default": [{"devices": "all", "vgpu-devices": {"L40S-4Q": "6"}}]}}},
    {"config": cfg(every({"L40S-4Q": 1})), "selected": ""},
    {"config": cfg(every({"L40S-4Q": 1})), "root": "relative"},
    {"config": cfg(every({"L40S-4Q": 1})), "name_cache": "relative/cache.json"},
    {},
])
def test_nonsense_is_a_message_never_a_traceback(host, capsys, args):
    l40s(host)
    before = snapshot(host.root)
    res = run(capsys, host, **args)
    assert res["failed"] is True and res["msg"] and "Traceback" not in res["msg"], res
    assert snapshot(host.root) == before and host.writes == []
