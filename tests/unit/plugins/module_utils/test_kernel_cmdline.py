"""Pure-logic tests for gpuops.nvidia kernel_cmdline."""
import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils import _kernel_cmdline as k


def test_split_keeps_quoted_values():
    assert k.split_cmdline('BOOT_IMAGE=/vmlinuz root=UUID=x ro dyndbg="file a.c +p"  quiet\n') == [
        "BOOT_IMAGE=/vmlinuz", "root=UUID=x", "ro", 'dyndbg="file a.c +p"', "quiet"]


@pytest.mark.parametrize("tokens,args,state,expected", [
    (["ro", "quiet"], ["intel_iommu=on", "iommu=pt"], "present", ["ro", "quiet", "intel_iommu=on", "iommu=pt"]),
    (["ro", "iommu=nopt", "quiet"], ["iommu=pt"], "present", ["ro", "iommu=pt", "quiet"]),
    (["iommu=pt", "ro", "iommu=pt"], ["iommu=pt"], "present", ["iommu=pt", "ro", "iommu=pt"]),
    (["iommu=nopt", "ro", "iommu=pt"], ["iommu=pt"], "present", ["ro", "iommu=pt"]),
    (["ro", "intel_iommu=on", "iommu=pt"], ["intel_iommu"], "absent", ["ro", "iommu=pt"]),
    (["ro", "iommu=pt"], ["iommu=nopt"], "absent", ["ro", "iommu=pt"]),
    (["ro", "iommu=pt"], ["iommu=pt"], "absent", ["ro"]),
])
def test_apply_args(tokens, args, state, expected):
    assert k.apply_args(tokens, args, state) == expected


def test_unmet_and_reboot():
    running = ["BOOT_IMAGE=/boot/vmlinuz", "ro", "console=ttyS0"]
    assert k.unmet(running, ["intel_iommu=on", "iommu=pt"], "present") == ["intel_iommu=on", "iommu=pt"]
    running += ["intel_iommu=on", "iommu=pt"]
    assert k.unmet(running, ["intel_iommu=on", "iommu=pt"], "present") == []
    assert k.unmet(running, ["intel_iommu"], "absent") == ["intel_iommu"]
    assert k.unmet(running, ["intel_iommu=off"], "absent") == []


@pytest.mark.parametrize("bad", ["a b", "x='y'", "", "=on", "foo=\"bar"])
def test_validate_rejects(bad):
    with pytest.raises(k.CmdlineError, match="malformed"):
        k.validate_args([bad])


def test_validate_rejects_duplicate_keys():
    with pytest.raises(k.CmdlineError, match="more than once: iommu"):
        k.validate_args(["iommu=pt", "iommu=on"])


def test_grub_dropin_roundtrip_and_idempotence():
    text, configured = k.plan_grub(None, ["console=ttyS0,115200"], ["intel_iommu=on", "iommu=pt"], "present")
    assert text.endswith('GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} intel_iommu=on iommu=pt"\n')
    assert configured == ["console=ttyS0,115200", "intel_iommu=on", "iommu=pt"]
    assert k.parse_grub_dropin(text) == ["intel_iommu=on", "iommu=pt"]
    again, _cfg = k.plan_grub(text, ["console=ttyS0,115200"], ["intel_iommu=on", "iommu=pt"], "present")
    assert again == text
    # adding another argument keeps ours
    more, _cfg = k.plan_grub(text, [], ["vfio-pci.ids=10de:2331"], "present")
    assert k.parse_grub_dropin(more) == ["intel_iommu=on", "iommu=pt", "vfio-pci.ids=10de:2331"]


def test_grub_absent_removes_dropin_when_empty():
    text, _cfg = k.plan_grub(None, [], ["intel_iommu=on", "iommu=pt"], "present")
    gone, configured = k.plan_grub(text, ["quiet"], ["intel_iommu", "iommu=pt"], "absent")
    assert gone is None and configured == ["quiet"]


def test_grub_present_already_in_base_writes_nothing():
    text, configured = k.plan_grub(None, ["quiet", "iommu=pt"], ["iommu=pt"], "present")
    assert text is None and configured == ["quiet", "iommu=pt"]


def test_grub_refuses_foreign_removal():
    with pytest.raises(k.CmdlineError, match="set outside"):
        k.plan_grub(None, ["quiet", "iommu=pt"], ["iommu"], "absent")


def test_grub_overrides_base_value_last_wins():
    base = ["console=ttyS0", "intel_iommu=off"]
    text, configured = k.plan_grub(None, base, ["intel_iommu=on", "iommu=pt"], "present")
    assert k.parse_grub_dropin(text) == ["intel_iommu=on", "iommu=pt"]
    assert k.effective(configured)["intel_iommu"] == "intel_iommu=on"
    assert k.overridden(base, ["intel_iommu=on", "iommu=pt"]) == ["intel_iommu=on"]
    # running kernel booted with both: the last one counts
    assert k.unmet(["intel_iommu=off", "intel_iommu=on", "iommu=pt"], ["intel_iommu=on"], "present") == []
    assert k.unmet(["intel_iommu=on", "intel_iommu=off"], ["intel_iommu=on"], "present") == ["intel_iommu=on"]


def test_cmdline_file():
    new, tokens = k.plan_cmdline_file("root=UUID=x ro quiet\n", ["intel_iommu=on"], "present")
    assert new == "root=UUID=x ro quiet intel_iommu=on\n"
    same, _tokens = k.plan_cmdline_file(new, ["intel_iommu=on"], "present")
    assert same == new


def test_detect(tmp_path):
    (tmp_path / "etc/default").mkdir(parents=True)
    (tmp_path / "etc/default/grub").write_text("")
    tools = {"update-grub": "/usr/sbin/update-grub"}
    assert k.detect_bootloader(str(tmp_path), tools.get) == "grub"
    (tmp_path / "boot/loader/entries").mkdir(parents=True)
    tools["grubby"] = "/usr/sbin/grubby"
    assert k.detect_bootloader(str(tmp_path), tools.get) == "grubby"
    assert k.detect_bootloader(str(tmp_path / "nothing"), {}.get) is None
