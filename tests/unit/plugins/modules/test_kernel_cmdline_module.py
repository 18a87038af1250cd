# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""gpuops.nvidia.kernel_cmdline through the real AnsibleModule, on real files under tmp_path (issue 15).

Defect 3: a failed boot-loader regeneration (update-grub, grub2-mkconfig, kernel-install) is retried on
every later run until it succeeds, although the drop-in (or /etc/kernel/cmdline) already matches: a
"regeneration pending" marker is written before the file changes and removed only after the tool succeeded.

Defect 4: arguments the shell or GRUB would interpret are refused before anything changes.

The boot-loader tools are stand-ins (AnsibleModule.run_command/get_bin_path patched): nothing on this
machine's /etc, /boot or /var is read or written except /proc/cmdline (read).
"""
from __future__ import annotations

import os

import pytest
from ansible.module_utils.basic import AnsibleModule
from conftest import run_module

from ansible_collections.gpuops.nvidia.plugins.modules import kernel_cmdline as km


class Host:
    """Paths under tmp_path and stand-ins for the boot-loader tools."""

    def __init__(self, tmp_path, monkeypatch, base="quiet splash", fail=0):
        self.tmp = tmp_path
        self.dropin = str(tmp_path / "etc/default/grub.d/90-gpuops-kernel-cmdline.cfg")
        self.kcmdline = str(tmp_path / "etc/kernel/cmdline")
        self.marker = str(tmp_path / "var/lib/gpuops/kernel_cmdline.regenerate-pending")
        self.base = base
        self.fail = fail          # how many regenerations fail before one succeeds
        self.regens = []          # (tool, marker present while it ran, file content it saw)
        self.writes = []          # (path, marker present when the file was written)
        os.makedirs(os.path.dirname(self.dropin))
        monkeypatch.setenv("GPUOPS_LOCK_DIR", str(tmp_path / "locks"))
        monkeypatch.setattr(km, "GRUB_DROPIN", self.dropin)
        monkeypatch.setattr(km, "SYSTEMD_BOOT_CMDLINE", self.kcmdline)
        # raising=False: before the fix these names do not exist, and the test must fail on behaviour
        monkeypatch.setattr(km, "REGEN_PENDING", self.marker, raising=False)
        monkeypatch.setattr(km, "_kernel_image", lambda kver: "/boot/vmlinuz-test", raising=False)
        monkeypatch.setattr(AnsibleModule, "get_bin_path", self.get_bin_path)

        def run_command(module, args, **kw):
            return self.run_command(module, args, **kw)

        monkeypatch.setattr(AnsibleModule, "run_command", run_command)
        real_ensure = km.ensure_file

        def ensure_file(module, path, content, *a, **kw):
            if path in (self.dropin, self.kcmdline) and not module.check_mode:
                self.writes.append((path, os.path.exists(self.marker)))
            return real_ensure(module, path, content, *a, **kw)
        monkeypatch.setattr(km, "ensure_file", ensure_file)

    @staticmethod
    def get_bin_path(module, name, required=False, opt_dirs=None):
        return {"update-grub": "/usr/sbin/update-grub", "kernel-install": "/usr/bin/kernel-install"}.get(name)

    def run_command(self, module, args, **kw):
        if args[:2] == ["/bin/sh", "-c"]:
            return 0, self.base, ""
        tool = os.path.basename(args[0])
        if tool in ("update-grub", "kernel-install"):
            seen = open(self.dropin if tool == "update-grub" else self.kcmdline).read() \
                if os.path.exists(self.dropin if tool == "update-grub" else self.kcmdline) else None
            self.regens.append((tool, os.path.exists(self.marker), seen))
            if self.fail:
                self.fail -= 1
                return 1, "", "/usr/sbin/grub-probe: error: failed to get canonical path of `overlay'."
            return 0, "", ""
        raise AssertionError("unexpected command %r" % (args,))


def call(capsys, args, check=False, diff=False):
    if check:
        args = dict(args, _ansible_check_mode=True)
    if diff:
        args = dict(args, _ansible_diff=True)
    _rc, res = run_module(capsys, km.main, args)
    return res


GRUB = {"args": ["intel_iommu=on", "iommu=pt"], "bootloader": "grub"}


@pytest.mark.parametrize("bootloader", ["grub", "systemd-boot"])
def test_failed_regeneration_is_retried_until_it_succeeds(tmp_path, monkeypatch, capsys, bootloader):
    host = Host(tmp_path, monkeypatch, fail=2)
    if bootloader == "systemd-boot":
        os.makedirs(os.path.dirname(host.kcmdline))
        with open(host.kcmdline, "w") as f:
            f.write("root=UUID=x ro quiet\n")
    args = dict(GRUB, bootloader=bootloader)
    tool = "update-grub" if bootloader == "grub" else "kernel-install"

    first = call(capsys, args)
    assert first["failed"] is True and tool in first["msg"], first

    # the file already holds the arguments: the regeneration is still due, and still fails
    second = call(capsys, args)
    assert second.get("failed") is True and len(host.regens) == 2, second
    assert "retried on the next run" in second["msg"] and os.path.exists(host.marker)

    third = call(capsys, args)
    assert not third.get("failed") and third["changed"] is True and third["regenerated"] is True, third
    assert len(host.regens) == 3 and not os.path.exists(host.marker)
    # every regeneration ran on the new content, with the marker in place
    assert all(marked and "iommu=pt" in seen for _tool, marked, seen in host.regens)

    fourth = call(capsys, args)
    assert fourth["changed"] is False and fourth["regenerated"] is False and len(host.regens) == 3


def test_marker_is_written_before_the_dropin_changes(tmp_path, monkeypatch, capsys):
    host = Host(tmp_path, monkeypatch)
    res = call(capsys, GRUB)
    assert res["changed"] is True and not os.path.exists(host.marker)
    assert host.writes == [(host.dropin, True)]
    # removal of the arguments: same order
    res = call(capsys, dict(GRUB, args=["intel_iommu", "iommu=pt"], state="absent"))
    assert res["changed"] is True and not os.path.exists(host.dropin) and not os.path.exists(host.marker)
    assert [marked for _t, marked, _seen in host.regens] == [True, True]


def test_pending_regeneration_in_check_mode_reports_change_and_runs_nothing(tmp_path, monkeypatch, capsys):
    host = Host(tmp_path, monkeypatch, fail=1)
    call(capsys, GRUB)
    dropin = open(host.dropin).read()
    res = call(capsys, GRUB, check=True, diff=True)
    assert res["changed"] is True and res["regenerated"] is False and len(host.regens) == 1
    assert res["diff"][0]["before"] == res["diff"][0]["after"] == dropin
    assert os.path.exists(host.marker) and open(host.dropin).read() == dropin


def test_no_marker_when_regeneration_is_off(tmp_path, monkeypatch, capsys):
    host = Host(tmp_path, monkeypatch)
    res = call(capsys, dict(GRUB, update_bootloader=False))
    assert res["changed"] is True and host.regens == [] and not os.path.exists(host.marker)
    assert call(capsys, dict(GRUB, update_bootloader=False))["changed"] is False


@pytest.mark.parametrize("bad", ["x=$(touch${IFS}PWNED)", 'x="$(touch PWNED)"', "x=`touch PWNED`",
                                 "iommu=pt\ntouch PWNED", "iommu=pt\n", "x=a;touch"])
def test_hostile_argument_refused_before_any_change(tmp_path, monkeypatch, capsys, bad):
    host = Host(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    res = call(capsys, dict(GRUB, args=["intel_iommu=on", bad]))
    assert res["failed"] is True and "malformed" in res["msg"] and repr(bad) in res["msg"], res
    assert not os.path.exists(host.dropin) and not os.path.exists(host.marker) and host.regens == []
    assert not (tmp_path / "PWNED").exists()


def test_quoted_value_written_and_idempotent(tmp_path, monkeypatch, capsys):
    host = Host(tmp_path, monkeypatch)
    args = dict(GRUB, args=['dyndbg="file a.c +p"'])
    res = call(capsys, args)
    assert res["changed"] is True and res["configured"] == ["quiet", "splash", 'dyndbg="file a.c +p"']
    assert call(capsys, args)["changed"] is False and len(host.regens) == 1


# --- owner: a role's uninstall removes the arguments it added, and only those (issue 12) ---------------------

class OwnedHost(Host):
    """Host with a record directory under tmp_path and a stand-in /proc/cmdline."""

    def __init__(self, tmp_path, monkeypatch, running="BOOT_IMAGE=/vmlinuz ro quiet", **kw):
        super().__init__(tmp_path, monkeypatch, **kw)
        self.record_dir = str(tmp_path / "var/lib/gpuops/kernel_cmdline")
        self.running = running
        real_read = km.read_text
        monkeypatch.setattr(km, "read_text", lambda p: self.running if p == "/proc/cmdline" else real_read(p))
        self.record_at_write = []   # did the owner's record exist when the boot loader file was written?
        wrapped = km.ensure_file

        def ensure_file(module, path, content, *a, **kw):
            if path in (self.dropin, self.kcmdline) and not module.check_mode:
                self.record_at_write.append(os.path.exists(self.record("vfio")))
            return wrapped(module, path, content, *a, **kw)
        monkeypatch.setattr(km, "ensure_file", ensure_file)

    def record(self, owner):
        return os.path.join(self.record_dir, owner + ".json")

    def args(self, args, state="present", owner="vfio", bootloader="grub", **kw):
        return dict(args=args, state=state, owner=owner, bootloader=bootloader, record_dir=self.record_dir, **kw)


VFIO = ["intel_iommu=on", "iommu=pt"]


def test_owned_absent_removes_what_it_added_and_keeps_the_users_own(tmp_path, monkeypatch, capsys):
    # the user's own intel_iommu=on is in /etc/default/grub before the role runs
    host = OwnedHost(tmp_path, monkeypatch, base="quiet intel_iommu=on")
    res = call(capsys, host.args(VFIO))
    assert res["changed"] is True and res["recorded"] == ["iommu=pt"] and res["kept"] == ["intel_iommu=on"], res
    assert "iommu=pt" in open(host.dropin).read() and "intel_iommu" not in open(host.dropin).read()
    assert host.record_at_write == [True]          # recorded before the argument went in
    assert call(capsys, host.args(VFIO))["changed"] is False

    res = call(capsys, host.args(VFIO, state="absent"))
    assert not res.get("failed") and res["changed"] is True, res
    assert res["removed"] == ["iommu=pt"] and res["kept"] == ["intel_iommu=on"] and res["recorded"] == []
    assert res["configured"] == ["quiet", "intel_iommu=on"]
    assert not os.path.exists(host.dropin) and not os.path.exists(host.record_dir)
    assert [t for t, _m, _s in host.regens] == ["update-grub", "update-grub"]

    again = call(capsys, host.args(VFIO, state="absent"))
    assert again["changed"] is False and again["removed"] == [] and len(host.regens) == 2, again


def test_without_owner_the_users_own_argument_is_refused_not_removed(tmp_path, monkeypatch, capsys):
    # what the role did before records: absent named the user's intel_iommu=on and failed
    host = OwnedHost(tmp_path, monkeypatch, base="quiet intel_iommu=on")
    call(capsys, host.args(VFIO))
    res = call(capsys, dict(host.args(VFIO, state="absent"), owner=None))
    assert res["failed"] is True and "set outside" in res["msg"]


def test_owned_absent_reports_the_reboot_until_the_kernel_lacks_them(tmp_path, monkeypatch, capsys):
    host = OwnedHost(tmp_path, monkeypatch, base="quiet intel_iommu=on")
    call(capsys, host.args(VFIO))
    host.running = "BOOT_IMAGE=/vmlinuz quiet intel_iommu=on iommu=pt"
    res = call(capsys, host.args(VFIO, state="absent"))
    # the user's intel_iommu=on stays configured: only iommu=pt needs the reboot
    assert res["reboot_required"] is True and res["unmet"] == ["iommu=pt"], res
    # not rebooted yet: a second run changes nothing and still says so
    again = call(capsys, host.args(VFIO, state="absent"))
    assert again["changed"] is False and again["reboot_required"] is True and again["unmet"] == ["iommu=pt"]
    host.running = "BOOT_IMAGE=/vmlinuz quiet intel_iommu=on"
    assert call(capsys, host.args(VFIO, state="absent"))["reboot_required"] is False


def test_owned_check_mode_writes_nothing_and_diffs_the_record(tmp_path, monkeypatch, capsys):
    host = OwnedHost(tmp_path, monkeypatch)
    res = call(capsys, host.args(VFIO), check=True, diff=True)
    assert res["changed"] is True and res["recorded"] == VFIO and res["regenerated"] is False, res
    assert not os.path.exists(host.dropin) and not os.path.exists(host.record_dir) and host.regens == []
    assert isinstance(res["diff"], list) and res["diff"][1]["before_header"].startswith(host.record("vfio"))
    assert '"iommu=pt"' in res["diff"][1]["after"]

    call(capsys, host.args(VFIO))
    dropin, record = open(host.dropin).read(), open(host.record("vfio")).read()
    res = call(capsys, host.args(VFIO, state="absent"), check=True, diff=True)
    assert res["changed"] is True and res["removed"] == VFIO and res["configured"] == ["quiet", "splash"], res
    assert res["diff"][1]["after"] == ""
    assert open(host.dropin).read() == dropin and open(host.record("vfio")).read() == record
    assert len(host.regens) == 1


def test_owned_absent_with_no_args_removes_everything_recorded(tmp_path, monkeypatch, capsys):
    host = OwnedHost(tmp_path, monkeypatch)
    call(capsys, host.args(VFIO))
    res = call(capsys, host.args([], state="absent"))
    assert res["changed"] is True and res["removed"] == VFIO and not os.path.exists(host.dropin), res
    # an empty args list is an error without an owner, or with state=present
    assert call(capsys, host.args([]))["failed"] is True
    assert call(capsys, dict(host.args([], state="absent"), owner=None))["failed"] is True


def test_argument_added_before_without_owner_is_kept(tmp_path, monkeypatch, capsys):
    # the user's own call of the module (no owner) put iommu=pt in the drop-in before the role ran
    host = OwnedHost(tmp_path, monkeypatch)
    call(capsys, dict(GRUB, args=["iommu=pt"]))
    assert call(capsys, host.args(VFIO))["recorded"] == ["intel_iommu=on"]
    res = call(capsys, host.args(VFIO, state="absent"))
    assert res["removed"] == ["intel_iommu=on"] and res["kept"] == ["iommu=pt"]
    assert res["configured"] == ["quiet", "splash", "iommu=pt"] and "iommu=pt" in open(host.dropin).read()


def test_shared_argument_stays_until_its_last_owner_goes(tmp_path, monkeypatch, capsys):
    host = OwnedHost(tmp_path, monkeypatch)
    call(capsys, host.args(VFIO))
    assert call(capsys, host.args(["iommu=pt"], owner="other"))["recorded"] == ["iommu=pt"]
    res = call(capsys, host.args(VFIO, state="absent"))
    assert res["removed"] == ["intel_iommu=on"] and res["configured"] == ["quiet", "splash", "iommu=pt"], res
    res = call(capsys, host.args(["iommu=pt"], state="absent", owner="other"))
    assert res["removed"] == ["iommu=pt"] and not os.path.exists(host.dropin)
    assert not os.path.exists(host.record_dir)


def test_systemd_boot_symlinked_crlf_cmdline_gets_its_replaced_value_back(tmp_path, monkeypatch, capsys):
    host = OwnedHost(tmp_path, monkeypatch)
    os.makedirs(os.path.dirname(host.kcmdline))
    real = tmp_path / "real-cmdline"
    real.write_bytes(b"root=UUID=x ro intel_iommu=off quiet\r\n")
    os.symlink(str(real), host.kcmdline)
    res = call(capsys, host.args(VFIO, bootloader="systemd-boot"))
    assert res["configured"] == ["root=UUID=x", "ro", "intel_iommu=on", "quiet", "iommu=pt"], res
    res = call(capsys, host.args(VFIO, state="absent", bootloader="systemd-boot"))
    assert sorted(res["configured"]) == sorted(["root=UUID=x", "ro", "quiet", "intel_iommu=off"]), res
    assert os.path.islink(host.kcmdline) and os.path.realpath(host.kcmdline) == str(real)
    assert sorted(real.read_text().split()) == sorted(["root=UUID=x", "ro", "quiet", "intel_iommu=off"])
    assert call(capsys, host.args(VFIO, state="absent", bootloader="systemd-boot"))["changed"] is False


@pytest.mark.parametrize("owner", ["../x", "", "a b", "-x", "x" * 65])
def test_bad_owner_refused(tmp_path, monkeypatch, capsys, owner):
    host = OwnedHost(tmp_path, monkeypatch)
    res = call(capsys, host.args(VFIO, owner=owner))
    assert res["failed"] is True and "owner must be" in res["msg"] and not os.path.exists(host.dropin)


def test_foreign_record_refused_before_any_change(tmp_path, monkeypatch, capsys):
    host = OwnedHost(tmp_path, monkeypatch)
    os.makedirs(host.record_dir)
    with open(host.record("vfio"), "w") as f:
        f.write('{"added": [{"arg": "x=$(id)"}]}')
    res = call(capsys, host.args(VFIO))
    assert res["failed"] is True and "ownership record" in res["msg"] and not os.path.exists(host.dropin)
