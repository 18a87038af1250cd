"""Planner tests for gpuops.nvidia vfio_pci over synthetic sysfs trees."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "vfio"))

from sysfs import GRACE, GRACE_ALIASES, LANE, NVIDIA, make_tree, write_kernel  # noqa: E402

from ansible_collections.gpuops.nvidia.plugins.module_utils import _vfio as v  # noqa: E402


@pytest.fixture
def lane(tmp_path):
    return make_tree(str(tmp_path), LANE)


@pytest.fixture
def nv(tmp_path):
    return make_tree(str(tmp_path), NVIDIA)


def test_whole_group_moves_with_opt_in(lane):
    p = v.plan(lane, ["00:05.0"], "present", include_group_members=True)
    assert p["selected"] == ["0000:00:05.0", "0000:00:05.1"]
    assert p["groups"] == {"5": ["0000:00:05.0", "0000:00:05.1"]}
    assert [a["bdf"] for a in p["actions"]] == ["0000:00:05.0", "0000:00:05.1"]
    assert all(a["to"] == "vfio-pci" and a["from"] is None for a in p["actions"])
    # the identical stand-in in group 6 is untouched, and persistence is per BDF
    rules = p["files"][v.UDEV_RULES]
    assert 'KERNEL=="0000:00:05.0"' in rules and 'KERNEL=="0000:00:05.1"' in rules
    assert "0000:00:06.0" not in rules
    assert "vfio_pci" in p["files"][v.MODULES_LOAD]
    assert "softdep nvidia pre: vfio-pci" in p["files"][v.MODPROBE_CONF]
    state = json.loads(p["files"][v.STATE_FILE])
    assert set(state["devices"]) == {"0000:00:05.0", "0000:00:05.1"}


def test_foreign_group_member_refused(lane):
    with pytest.raises(v.VfioError, match=r"group 5 .*0000:00:05.1.*include_group_members"):
        v.plan(lane, ["0000:00:05.0"], "present")


def test_requesting_both_functions_needs_no_opt_in(lane):
    p = v.plan(lane, ["0000:00:05.0", "0000:00:05.1"], "present")
    assert p["selected"] == ["0000:00:05.0", "0000:00:05.1"]


def test_nvidia_audio_companion_moves_without_opt_in(nv):
    p = v.plan(nv, ["0000:43:00.0"], "present")
    assert p["selected"] == ["0000:43:00.0", "0000:43:00.1"]
    assert {a["bdf"]: a["from"] for a in p["actions"]} == {"0000:43:00.0": "nvidia", "0000:43:00.1": "snd_hda_intel"}
    st = json.loads(p["files"][v.STATE_FILE])
    assert st["devices"]["0000:43:00.1"]["original_driver"] == "snd_hda_intel"


def test_bridge_in_group_is_not_bound(nv):
    p = v.plan(nv, ["41:00.0"], "present")
    assert p["selected"] == ["0000:41:00.0"]


def test_vendor_device_id_matches_all_identical(nv):
    p = v.plan(nv, ["10de:2331"], "present")
    assert p["selected"] == ["0000:41:00.0", "0000:42:00.0"]


def test_one_of_two_identical_gpus_only(nv):
    p = v.plan(nv, ["0000:42:00.0"], "present")
    assert p["selected"] == ["0000:42:00.0"]
    assert "0000:41:00.0" not in p["files"][v.UDEV_RULES]


def test_all_nvidia_skips_boot_vga_of_other_vendor(nv):
    p = v.plan(nv, ["all_nvidia"], "present")
    assert p["selected"] == ["0000:41:00.0", "0000:42:00.0", "0000:43:00.0", "0000:43:00.1"]


@pytest.mark.parametrize("bad", ["0000:00:5.0", "zz:00.0", "0000:00:05.8", "10de:23", "gpu0"])
def test_malformed(lane, bad):
    with pytest.raises(v.VfioError, match="malformed"):
        v.plan(lane, [bad], "present", include_group_members=True)


def test_absent_device(lane):
    with pytest.raises(v.VfioError, match="not present on this host: 0000:00:09.0"):
        v.plan(lane, ["0000:00:09.0"], "present")
    with pytest.raises(v.VfioError, match="not present"):
        v.plan(lane, ["10de:2331"], "present")


def test_boot_vga_refused(lane):
    with pytest.raises(v.VfioError, match="boot VGA"):
        v.plan(lane, ["0000:00:01.0"], "present")


def test_iommu_off_refused(tmp_path):
    root = make_tree(str(tmp_path), LANE, iommu=False)
    with pytest.raises(v.VfioError, match="IOMMU is not active.*intel_iommu=on"):
        v.plan(root, ["0000:00:05.0"], "present", include_group_members=True)


def test_idempotent_when_bound(tmp_path):
    devs = [dict(d) for d in LANE]
    for d in devs:
        if d["bdf"] in ("0000:00:05.0", "0000:00:05.1"):
            d["driver"] = "vfio-pci"
            d["override"] = "vfio-pci"
    root = make_tree(str(tmp_path), devs)
    first = v.plan(root, ["0000:00:05.0"], "present", include_group_members=True)
    assert first["actions"] == []
    # original driver already vfio-pci and no state file: nothing to restore to
    st = json.loads(first["files"][v.STATE_FILE])
    assert st["devices"]["0000:00:05.0"]["original_driver"] is None
    again = v.plan(root, ["0000:00:05.0"], "present", include_group_members=True,
                   current_state_text=first["files"][v.STATE_FILE])
    assert again["files"] == first["files"]


def test_absent_restores_recorded_driver_and_removes_files(tmp_path):
    devs = [dict(d) for d in NVIDIA]
    for d in devs:
        if d["bdf"].startswith("0000:43:"):
            d["driver"] = "vfio-pci"
            d["override"] = "vfio-pci"
    root = make_tree(str(tmp_path), devs)
    state = v.dump_state({"devices": {
        "0000:43:00.0": {"original_driver": "nvidia", "persistent": True},
        "0000:43:00.1": {"original_driver": "snd_hda_intel", "persistent": True}}})
    p = v.plan(root, ["0000:43:00.0"], "absent", current_state_text=state)
    assert {a["bdf"]: a["to"] for a in p["actions"]} == {"0000:43:00.0": "nvidia", "0000:43:00.1": "snd_hda_intel"}
    assert all(content is None for content in p["files"].values())


def test_absent_keeps_other_persisted_groups(tmp_path):
    root = make_tree(str(tmp_path), NVIDIA)
    state = v.dump_state({"devices": {
        "0000:41:00.0": {"original_driver": "nvidia", "persistent": True},
        "0000:42:00.0": {"original_driver": "nvidia", "persistent": True}}})
    p = v.plan(root, ["0000:41:00.0"], "absent", current_state_text=state)
    assert p["actions"] == []  # not bound at runtime any more
    assert 'KERNEL=="0000:42:00.0"' in p["files"][v.UDEV_RULES]
    assert "0000:41:00.0" not in p["files"][v.UDEV_RULES]


def test_non_persistent_writes_no_boot_files(lane):
    p = v.plan(lane, ["0000:00:05.0"], "present", include_group_members=True, persistent=False)
    assert p["files"][v.UDEV_RULES] is None and p["files"][v.MODPROBE_CONF] is None
    assert p["files"][v.STATE_FILE] is not None


def test_bind_and_unbind_sysfs_writes(tmp_path):
    """bind_vfio/unbind_vfio write the right sysfs files (simulated kernel: we relink by hand)."""
    root = make_tree(str(tmp_path), NVIDIA)
    dev = os.path.join(root, "sys/bus/pci/devices/0000:41:00.0")
    os.makedirs(os.path.join(root, "sys/bus/pci/drivers/vfio-pci"))
    open(os.path.join(root, "sys/bus/pci/drivers/nvidia/unbind"), "w").close()
    open(os.path.join(root, "sys/bus/pci/drivers_probe"), "w").close()
    # the "kernel": after our writes, pretend vfio-pci probed the device
    real_write = v._write

    def fake_write(path, value):
        real_write(path, value)
        if path.endswith("drivers_probe") and value == "0000:41:00.0":
            os.unlink(os.path.join(dev, "driver"))
            os.symlink(os.path.join(root, "sys/bus/pci/drivers/vfio-pci"), os.path.join(dev, "driver"))
    v._write = fake_write
    try:
        os.unlink(os.path.join(root, "sys/bus/pci/drivers/nvidia/unbind"))
        # unbind via the device's driver link writes <driver>/unbind
        assert v.bind_vfio(root, "0000:41:00.0", lambda m: None) == "vfio-pci"
    finally:
        v._write = real_write
    with open(os.path.join(dev, "driver_override")) as f:
        assert f.read() == "vfio-pci"
    with open(os.path.join(root, "sys/bus/pci/drivers/nvidia/unbind")) as f:
        assert f.read() == "0000:41:00.0"


def test_iommu_off_deferred_validation(tmp_path):
    root = make_tree(str(tmp_path), LANE, iommu=False)
    p = v.plan(root, ["0000:00:05.0"], "present", allow_iommu_off=True)
    assert p["deferred"] is True and p["files"] == {} and p["actions"] == []
    with pytest.raises(v.VfioError, match="boot VGA"):
        v.plan(root, ["0000:00:01.0"], "present", allow_iommu_off=True)
    with pytest.raises(v.VfioError, match="malformed"):
        v.plan(root, ["0000:00:05"], "present", allow_iommu_off=True)


# --- issue 15, defect 8: a corrupt state file is refused, never read as "nothing bound" -------------

@pytest.mark.parametrize("text", ["{not json", "[]", '{"devices": []}', '{"devices": {"0000:42:00.0": 1}}',
                                  '{"devices": {"42:00.0": {}}}', '{"devices": {}, "x": ', "", "  \n"])
def test_corrupt_state_refused_with_what_the_rules_still_persist(nv, text):
    rules = v.render_udev_rules(["0000:42:00.0"])
    with pytest.raises(v.VfioError) as exc:
        v.plan(nv, ["0000:41:00.0"], "present", current_state_text=text, current_udev_text=rules,
               state_path="/etc/gpuops/vfio-pci.json")
    msg = str(exc.value)
    assert msg.startswith("/etc/gpuops/vfio-pci.json") and "0000:42:00.0" in msg
    assert v.UDEV_RULES in msg and "restore" in msg


def test_missing_state_is_an_empty_state(nv):
    p = v.plan(nv, ["0000:41:00.0"], "present", current_state_text=None)
    assert list(json.loads(p["files"][v.STATE_FILE])["devices"]) == ["0000:41:00.0"]


def test_rules_parse_back(nv):
    assert v.persisted_bdfs(v.render_udev_rules(["0000:42:00.0", "0000:41:00.0"])) == ["0000:41:00.0", "0000:42:00.0"]
    assert v.persisted_bdfs(None) == [] and v.persisted_bdfs("garbage\n") == []


# --- vfio-pci variant drivers (Grace Hopper / Grace Blackwell: nvgrace_gpu_vfio_pci) ------------


def _grace(tmp_path, aliases=GRACE_ALIASES, release="6.8.0-1015-nvidia-64k"):
    root = make_tree(str(tmp_path), GRACE)
    return write_kernel(root, release, aliases)


def test_grace_hopper_gets_the_variant_driver_the_kernel_ships(tmp_path):
    root = _grace(tmp_path)
    pl = v.plan(root, ["0009:01:00.0", "0000:41:00.0"], "present")
    to = {a["bdf"]: (a["to"], a.get("module")) for a in pl["actions"]}
    assert to == {"0009:01:00.0": ("nvgrace_gpu_vfio_pci", "nvgrace_gpu_vfio_pci"), "0000:41:00.0": ("vfio-pci", None)}
    rules = pl["files"][v.UDEV_RULES]
    assert 'KERNEL=="0009:01:00.0", ATTR{driver_override}="nvgrace_gpu_vfio_pci", RUN{builtin}+="kmod load nvgrace_gpu_vfio_pci"' in rules
    assert 'KERNEL=="0000:41:00.0", ATTR{driver_override}="vfio-pci", RUN{builtin}+="kmod load vfio-pci"' in rules
    assert pl["files"][v.MODULES_LOAD].endswith("vfio_pci\nnvgrace_gpu_vfio_pci\n")
    assert pl["state"]["devices"]["0009:01:00.0"]["vfio_module"] == "nvgrace_gpu_vfio_pci"
    # the udev rule's functions are recognised as ours on the next run
    assert v.persisted_bdfs(rules) == ["0000:41:00.0", "0009:01:00.0"]


def test_the_driver_directory_name_is_used_once_the_module_is_loaded(tmp_path):
    root = _grace(tmp_path)
    os.makedirs(os.path.join(root, "sys/bus/pci/drivers/nvgrace-gpu-vfio-pci"))
    pl = v.plan(root, ["0009:01:00.0"], "present")
    assert [(a["to"], a["module"]) for a in pl["actions"]] == [("nvgrace-gpu-vfio-pci", "nvgrace_gpu_vfio_pci")]


def test_most_specific_alias_wins_and_old_kernels_fall_back_to_vfio_pci(tmp_path):
    specific = ["vfio_pci:v000010DEd*sv*sd*bc03sc*i* some_generic_vfio_pci",
                "vfio_pci:v000010DEd00002342sv000010DEsd000016EBbc*sc*i* nvgrace_gpu_vfio_pci"]
    root = _grace(tmp_path, specific)
    modalias = open(os.path.join(root, "sys/bus/pci/devices/0009:01:00.0/modalias")).read().strip()
    assert v.vfio_variant(root, modalias, "6.8.0-1015-nvidia-64k") == "nvgrace_gpu_vfio_pci"
    # a kernel without the variant (no alias line, or no modules.alias at all): vfio-pci
    assert v.vfio_variant(root, modalias, "5.15.0-1") is None
    root2 = make_tree(str(tmp_path / "old"), GRACE)
    assert [a["to"] for a in v.plan(root2, ["0009:01:00.0"], "present")["actions"]] == ["vfio-pci"]


def test_a_function_on_the_variant_driver_is_given_back_on_absent(tmp_path):
    devs = [dict(GRACE[0], driver="nvgrace_gpu_vfio_pci", override="nvgrace_gpu_vfio_pci")]
    root = write_kernel(make_tree(str(tmp_path), devs), "6.8.0-1015-nvidia-64k", GRACE_ALIASES)
    state = json.dumps({"devices": {"0009:01:00.0": {"original_driver": "nvidia", "persistent": True,
                                                     "vfio_driver": "nvgrace_gpu_vfio_pci",
                                                     "vfio_module": "nvgrace_gpu_vfio_pci"}}})
    pl = v.plan(root, ["0009:01:00.0"], "absent", current_state_text=state)
    assert [(a["from"], a["to"]) for a in pl["actions"]] == [("nvgrace_gpu_vfio_pci", "nvidia")]
    assert pl["files"][v.UDEV_RULES] is None


@pytest.mark.parametrize("name, ok", [("vfio-pci", True), ("nvgrace_gpu_vfio_pci", True), ("nvgrace-gpu-vfio-pci", True),
                                      ("mlx5_vfio_pci", True), ("nvidia", False), ("vfio", False), (None, False),
                                      ("pci-stub", False)])
def test_is_vfio_driver(name, ok):
    assert v.is_vfio_driver(name) is ok
