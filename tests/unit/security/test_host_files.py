# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""Hostile-input corpus: the host files the modules write (sriov_vfs, vgpu_devices, vfio_pci, kernel_cmdline,
cdi_spec).

* A value that reaches a systemd unit (sriov_vfs' tool path) is one word as systemd parses it, or is refused
  before anything changes; every GPU's record keeps its own tool; reruns settle.
* A corrupt vGPU name cache (a node file) is rebuilt with a warning, never a traceback; digits are ASCII digits.
* A file a module writes whole is never written through a symlink, and a file at its path that is not its own is
  refused before anything changes; the user's own files that a module edits (/etc/kernel/cmdline) still follow
  their links.
* Init's arguments after ``--`` on the kernel command line are never kernel arguments; removing an argument that
  is not set changes nothing.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from ansible.module_utils.basic import AnsibleModule
from conftest import run_module

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures", "vgpu"))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures", "vfio"))

from pci_core import Kernel  # noqa: E402
from sysfs import NVIDIA, make_tree  # noqa: E402
from vgpu_sysfs import Host, snapshot  # noqa: E402

from ansible_collections.gpuops.nvidia.plugins.module_utils import _sriov  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.module_utils import _vfio  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.modules import cdi_spec  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.modules import kernel_cmdline as km  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.modules import sriov_vfs  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.modules import vfio_pci  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.modules import vgpu_devices  # noqa: E402

UNIT = "etc/systemd/system/gpuops-sriov-vfs.service"
FSTAB = "UUID=0b4c-11 / ext4 errors=remount-ro 0 1\n/swapfile none swap sw 0 0\n"


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUOPS_LOCK_DIR", str(tmp_path / "locks"))


def _put(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def _read(path):
    with open(path) as f:
        return f.read()


def _warnings(res):
    """The module's warnings as text (plain strings, or the structured events newer ansible-core returns)."""
    out = []
    for w in res.get("warnings") or []:
        out.append(w if isinstance(w, str) else json.dumps(w))
    return out


# --- sriov_vfs: the boot unit -----------------------------------------------------------------------------------

class SriovHost:
    """A vGPU host (tests/unit/fixtures/vgpu) whose sriov-manage may live anywhere under the root."""

    def __init__(self, tmp_path, monkeypatch, capsys):
        self.h = Host(tmp_path / "root")
        self.root = self.h.root
        self.capsys = capsys
        self.tools_run = []
        monkeypatch.setattr(_sriov, "_write", self.h.write)
        monkeypatch.setattr(_sriov, "WAIT_TIMEOUT", 0.2)

        def run_command(module, args, **kwargs):
            self.tools_run.append(args[0])
            self.h.sriov_manage(args[1:])
            return 0, "", ""
        monkeypatch.setattr(AnsibleModule, "run_command", run_command)

    def tool(self, path):
        _put(os.path.join(self.root, path.lstrip("/")), "#!/bin/sh\n", 0o755)
        return path

    def run(self, **args):
        args.setdefault("root", self.root)
        return run_module(self.capsys, sriov_vfs.main, args)[1]

    def unit(self):
        p = os.path.join(self.root, UNIT)
        return _read(p) if os.path.exists(p) else None


@pytest.fixture
def sriov(tmp_path, monkeypatch, capsys):
    return SriovHost(tmp_path, monkeypatch, capsys)


#: tool paths systemd must see as one word: spaces, a specifier, shell and unit-file punctuation, non-ASCII
QUOTABLE = ["/opt/nv tools/sriov-manage", "/opt/vgpu 100%/sriov-manage", "/opt/%n %%i/sriov-manage",
            "/opt/a  b;c&d|e/sriov-manage", "/opt/x=y #z ;w/sriov-manage", "/opt/ünï cödé/sriov-manage"]


@pytest.mark.parametrize("tool", QUOTABLE)
def test_sriov_tool_path_is_one_word_and_parses_back(sriov, tool):
    pf = sriov.h.l40s()
    res = sriov.run(devices=[pf], num_vfs="max", sriov_manage=sriov.tool(tool))
    assert res["changed"] and not res.get("failed"), res
    unit = sriov.unit()
    assert _sriov.parse_unit(unit) == {pf: {"tool": tool}}, unit
    # an identical rerun settles
    again = sriov.run(devices=[pf], num_vfs="max", sriov_manage=tool)
    assert again["changed"] is False and sriov.unit() == unit, again


def _systemd_analyze():
    exe = shutil.which("systemd-analyze")
    if not exe:
        return None
    try:
        probe = subprocess.run([exe, "condition", "ConditionPathExists=/"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return exe if probe.returncode == 0 else None


@pytest.mark.parametrize("tool", QUOTABLE)
def test_sriov_unit_lines_mean_the_tool_to_systemd_itself(sriov, tmp_path, tool):
    """systemd's own parser: `systemd-analyze verify` resolves the first command of ExecStart= (it must be the tool,
    an executable that exists) and `systemd-analyze condition` evaluates our ConditionPathExists= line."""
    exe = _systemd_analyze()
    if exe is None:
        pytest.skip("needs systemd-analyze (verify, condition) on this machine")
    real = str(tmp_path / "real") + tool          # the same odd path, on the real file system for systemd
    _put(real, "#!/bin/sh\n", 0o755)
    pf = sriov.h.l40s()
    res = sriov.run(devices=[pf], num_vfs="max", sriov_manage=sriov.tool(real))
    assert res["changed"] and not res.get("failed"), res
    lines = sriov.unit().splitlines()
    execs = [ln for ln in lines if ln.startswith("ExecStart=") and "timeout" not in ln]
    conds = [ln for ln in lines if ln.startswith("ConditionPathExists=")]
    assert len(execs) == 1 and len(conds) == 1, lines
    unit = tmp_path / "units" / "gpuops-probe.service"
    _put(str(unit), "[Service]\nType=oneshot\n%s\n" % execs[0])
    p = subprocess.run([exe, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0 and "not executable" not in p.stderr, (execs[0], p.stdout, p.stderr)
    p = subprocess.run([exe, "condition", conds[0]], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0 and "succeeded" in p.stdout + p.stderr, (conds[0], p.stdout, p.stderr)
    os.unlink(real)                                # gone: the condition fails, so the unit is skipped at boot
    p = subprocess.run([exe, "condition", conds[0]], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode != 0, (conds[0], p.stdout, p.stderr)


@pytest.mark.parametrize("tool,why", [
    ("/opt/cost$/sriov-manage", "$"),
    ("/opt/${GPUOPS_TEST_UNSET}/sriov-manage", "$"),
    ("/opt/a\nExecStartPre=/bin/rm -rf /x/sriov-manage", "control character"),
    ("/opt/a\rb/sriov-manage", "control character"),
    ("/opt/a\tb/sriov-manage", "control character"),
    ("/opt/a\x1b[31m/sriov-manage", "control character"),
    ("/opt/sriov-manage ", "whitespace"),
    ('/opt/say "hi"/sriov-manage', "quote"),          # systemd refuses these in an executable path, however escaped
    ("/opt/it's/sriov-manage", "quote"),
    ("/opt/back\\slash/sriov-manage", "backslash"),
    ("/opt/sriov-manage\\", "backslash"),
])
def test_sriov_tool_path_that_cannot_be_quoted_is_refused_before_any_change(sriov, tool, why):
    pf = sriov.h.l40s()
    _put(os.path.join(sriov.root, tool.lstrip("/")) if "\n" not in tool else os.path.join(sriov.root, "opt/x"),
         "#!/bin/sh\n", 0o755)
    before = snapshot(sriov.root)
    res = sriov.run(devices=[pf], num_vfs="max", sriov_manage=tool)
    assert res.get("failed") is True and why in res["msg"] and "Traceback" not in res["msg"], res
    assert "sriov_manage" in res["msg"], res["msg"]
    assert snapshot(sriov.root) == before and sriov.tools_run == [] and sriov.h.writes == []


def test_sriov_second_gpu_keeps_the_first_gpus_record_and_its_own_tool(sriov):
    a, b = sriov.h.l40s(), sriov.h.l40s("0000:c1:00.0")
    ta, tb = sriov.tool("/opt/nv tools/sriov-manage"), sriov.tool("/usr/lib/nvidia/sriov-manage")
    assert sriov.run(devices=[a], num_vfs="max", sriov_manage=ta)["changed"]
    assert sriov.run(devices=[b], num_vfs="max", sriov_manage=tb)["changed"]
    assert _sriov.parse_unit(sriov.unit()) == {a: {"tool": ta}, b: {"tool": tb}}, sriov.unit()
    unit = sriov.unit()
    # identical reruns of either GPU, in any order, settle
    for dev, tool in ((a, ta), (b, tb), (a, ta), (b, tb)):
        res = sriov.run(devices=[dev], num_vfs="max", sriov_manage=tool)
        assert res["changed"] is False and sriov.unit() == unit, (dev, res)
    # removing one GPU leaves the other's record as it was
    assert sriov.run(devices=[a], state="absent", sriov_manage=ta)["changed"]
    assert _sriov.parse_unit(sriov.unit()) == {b: {"tool": tb}}


def test_sriov_identical_reruns_for_two_gpus_with_their_own_tools_report_no_change(sriov):
    """Plain paths (no quoting involved): each GPU's run used to rewrite every record with its own tool."""
    a, b = sriov.h.l40s(), sriov.h.l40s("0000:c1:00.0")
    ta, tb = sriov.tool("/opt/vgpu-17/sriov-manage"), sriov.tool("/usr/lib/nvidia/sriov-manage")
    sriov.run(devices=[a], num_vfs="max", sriov_manage=ta)
    sriov.run(devices=[b], num_vfs="max", sriov_manage=tb)
    for dev, tool in ((a, ta), (b, tb)):
        res = sriov.run(devices=[dev], num_vfs="max", sriov_manage=tool)
        assert res["changed"] is False, (dev, res["files"], sriov.unit())


def test_sriov_unit_that_is_a_symlink_or_foreign_is_refused_before_any_change(sriov, tmp_path):
    pf = sriov.h.l40s()
    tool = sriov.tool("/usr/lib/nvidia/sriov-manage")
    fstab = os.path.join(sriov.root, "etc/fstab")
    _put(fstab, FSTAB)
    os.makedirs(os.path.dirname(os.path.join(sriov.root, UNIT)))
    os.symlink(fstab, os.path.join(sriov.root, UNIT))
    before = snapshot(sriov.root)
    res = sriov.run(devices=[pf], num_vfs="max", sriov_manage=tool)
    assert res.get("failed") is True and "symbolic link" in res["msg"] and "nothing was changed" in res["msg"], res
    assert snapshot(sriov.root) == before and _read(fstab) == FSTAB and sriov.h.numvfs(pf) == 0
    os.unlink(os.path.join(sriov.root, UNIT))
    _put(os.path.join(sriov.root, UNIT), "[Service]\nExecStart=/usr/local/bin/mine\n")   # the admin's own unit
    res = sriov.run(devices=[pf], num_vfs="max", sriov_manage=tool)
    assert res.get("failed") is True and "not written by gpuops.nvidia" in res["msg"], res
    assert _read(os.path.join(sriov.root, UNIT)) == "[Service]\nExecStart=/usr/local/bin/mine\n"
    assert sriov.h.numvfs(pf) == 0 and sriov.tools_run == []


# --- vgpu_devices: the name cache -----------------------------------------------------------------------------

CACHE = "var/lib/gpuops/vgpu-types.json"
CORRUPT_CACHES = [
    '{"0000:41:00.0": {"\u00b2": "NVIDIA L40S-2Q"}}'.encode(),        # '²'.isdigit() is True, int('²') fails
    '{"0000:41:00.0": {"\u0661\u0662": "NVIDIA L40S-2Q"}}'.encode(),  # Arabic-Indic digits
    b'{"0000:41:00.0": {"1148": 7}}',
    b'{"0000:41:00.0": ["1148"]}',
    b'["not", "a", "cache"]',
    b'{"0000:41:00.0": {"1148": "NVIDIA L40S-2Q"',
    b"\xff\xfe garbage",
    b"",
    b"null",
]


def _l40s(host):
    pf = host.l40s()
    host.enable(pf)
    return pf, _sriov.virtfns(host.root, pf)


def _vgpu(capsys, host, **args):
    args.setdefault("root", host.root)
    args.setdefault("config", {"version": "v1", "vgpu-configs": {"default": [
        {"devices": "all", "vgpu-devices": {"L40S-4Q": 2}}]}})
    return run_module(capsys, vgpu_devices.main, args)[1]


@pytest.mark.parametrize("text", CORRUPT_CACHES)
def test_vgpu_corrupt_name_cache_is_rebuilt_with_a_warning(tmp_path, monkeypatch, capsys, text):
    host = Host(tmp_path / "root")
    monkeypatch.setattr(_sriov, "_write", host.write)
    pf, _vfs = _l40s(host)
    cache = os.path.join(host.root, CACHE)
    os.makedirs(os.path.dirname(cache))
    with open(cache, "wb") as f:
        f.write(text)
    res = _vgpu(capsys, host)
    assert not res.get("failed") and "Traceback" not in json.dumps(res), res
    assert res["changed"] and res["gpus"][0]["after"] == {"L40S-4Q": 2}
    assert any("vGPU type cache" in w and "rebuilt" in w for w in _warnings(res)), _warnings(res)
    rebuilt = json.loads(_read(cache))
    assert rebuilt[pf]["1150"] == "NVIDIA L40S-4Q"
    again = _vgpu(capsys, host)
    assert again["changed"] is False and not again.get("warnings"), again


def test_vgpu_non_ascii_digits_from_sysfs_are_not_numbers(tmp_path, monkeypatch, capsys):
    """available_instances is node data: '²' is not a count (and never a traceback)."""
    host = Host(tmp_path / "root")
    monkeypatch.setattr(_sriov, "_write", host.write)
    pf = host.t4()
    d = os.path.join(host.root, "sys/bus/pci/devices", pf, "mdev_supported_types")
    for t in os.listdir(d):
        with open(os.path.join(d, t, "available_instances"), "w") as f:
            f.write("\u00b2\n")
    res = _vgpu(capsys, host, config={"version": "v1", "vgpu-configs": {"default": [
        {"devices": "all", "vgpu-devices": {"T4-4Q": 1}}]}})
    assert "Traceback" not in json.dumps(res), res
    assert res.get("failed") is True and "T4-4Q" in res["msg"], res


def test_vgpu_cache_that_is_a_symlink_is_not_written_through(tmp_path, monkeypatch, capsys):
    host = Host(tmp_path / "root")
    monkeypatch.setattr(_sriov, "_write", host.write)
    _l40s(host)
    fstab = os.path.join(host.root, "etc/fstab")
    _put(fstab, FSTAB)
    os.makedirs(os.path.dirname(os.path.join(host.root, CACHE)))
    os.symlink(fstab, os.path.join(host.root, CACHE))
    res = _vgpu(capsys, host)
    assert not res.get("failed") and res["changed"], res
    assert _read(fstab) == FSTAB and os.path.islink(os.path.join(host.root, CACHE))
    assert any("symbolic link" in w for w in _warnings(res)), _warnings(res)


# --- vfio_pci: files written whole ------------------------------------------------------------------------------

VFIO_FILES = {"rules": _vfio.UDEV_RULES, "modules-load": _vfio.MODULES_LOAD, "modprobe": _vfio.MODPROBE_CONF,
              "state": _vfio.STATE_FILE}


@pytest.fixture
def nv(tmp_path, monkeypatch):
    root = make_tree(str(tmp_path), NVIDIA)
    return root, Kernel(root, monkeypatch)


def _vfio_run(capsys, root, **args):
    args = dict({"devices": ["0000:41:00.0"], "root": root, "update_initramfs": False}, **args)
    return run_module(capsys, vfio_pci.main, args)[1]


@pytest.mark.parametrize("which", sorted(VFIO_FILES))
def test_vfio_file_that_is_a_symlink_to_another_file_is_refused_before_any_change(nv, capsys, which):
    root, kernel = nv
    fstab = os.path.join(root, "etc/fstab")
    _put(fstab, FSTAB)
    path = os.path.join(root, VFIO_FILES[which].lstrip("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.symlink(fstab, path)
    before = snapshot(root)
    res = _vfio_run(capsys, root)
    assert res.get("failed") is True and "symbolic link" in res["msg"], res
    assert "nothing was changed" in res["msg"] or which == "state", res["msg"]
    assert _read(fstab) == FSTAB and snapshot(root) == before and kernel.writes == []
    assert kernel.driver("0000:41:00.0") == "nvidia"


def test_vfio_absent_leaves_a_symlinked_rule_and_its_target_alone(nv, capsys):
    """The rule replaced by a link after a run: absent neither writes through it nor unlinks it."""
    root, kernel = nv
    assert _vfio_run(capsys, root)["changed"]
    rules = os.path.join(root, _vfio.UDEV_RULES.lstrip("/"))
    fstab = os.path.join(root, "etc/fstab")
    _put(fstab, FSTAB)
    os.unlink(rules)
    os.symlink(fstab, rules)
    before = snapshot(root)
    res = _vfio_run(capsys, root, state="absent")
    assert res.get("failed") is True and "symbolic link" in res["msg"], res
    assert _read(fstab) == FSTAB and snapshot(root) == before and kernel.driver("0000:41:00.0") == "vfio-pci"


@pytest.mark.parametrize("which", ["rules", "modules-load", "modprobe"])
def test_vfio_file_of_someone_else_at_our_path_is_refused(nv, capsys, which):
    root, kernel = nv
    path = os.path.join(root, VFIO_FILES[which].lstrip("/"))
    mine = "# the admin's own\noptions vfio-pci disable_vga=1\n"
    _put(path, mine)
    res = _vfio_run(capsys, root)
    assert res.get("failed") is True and "not written by gpuops.nvidia" in res["msg"] and path in res["msg"], res
    assert _read(path) == mine and kernel.writes == []


def test_vfio_files_of_our_own_are_rewritten_and_removed(nv, capsys):
    root, kernel = nv
    assert _vfio_run(capsys, root)["changed"]
    assert _vfio_run(capsys, root)["changed"] is False
    res = _vfio_run(capsys, root, state="absent")
    assert res["changed"] and not res.get("failed"), res
    assert not any(os.path.exists(os.path.join(root, p.lstrip("/"))) for p in VFIO_FILES.values())


# --- kernel_cmdline ---------------------------------------------------------------------------------------------

class Boot:
    """kernel_cmdline's paths under tmp_path, a /proc/cmdline of the test's choosing, stand-in tools."""

    def __init__(self, tmp_path, monkeypatch, capsys, proc_cmdline="BOOT_IMAGE=/vmlinuz root=UUID=x ro quiet\n",
                 grub_base="quiet splash"):
        self.capsys = capsys
        self.dropin = str(tmp_path / "etc/default/grub.d/90-gpuops-kernel-cmdline.cfg")
        self.kcmdline = str(tmp_path / "etc/kernel/cmdline")
        self.marker = str(tmp_path / "var/lib/gpuops/kernel_cmdline.regenerate-pending")
        self.proc = str(tmp_path / "proc/cmdline")
        self.record_dir = str(tmp_path / "var/lib/gpuops/kernel_cmdline")
        self.tools = []
        _put(self.proc, proc_cmdline)
        os.makedirs(os.path.dirname(self.dropin))
        monkeypatch.setattr(km, "GRUB_DROPIN", self.dropin)
        monkeypatch.setattr(km, "SYSTEMD_BOOT_CMDLINE", self.kcmdline)
        monkeypatch.setattr(km, "REGEN_PENDING", self.marker)
        monkeypatch.setattr(km, "_kernel_image", lambda kver: "/boot/vmlinuz-test")
        real_read = km.read_text
        monkeypatch.setattr(km, "read_text", lambda p: real_read(self.proc if p == "/proc/cmdline" else p))
        monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda m, name, required=False, opt_dirs=None: {
            "update-grub": "/usr/sbin/update-grub", "kernel-install": "/usr/bin/kernel-install"}.get(name))

        def run_command(module, args, **kw):
            if args[:2] == ["/bin/sh", "-c"]:
                return 0, grub_base, ""
            self.tools.append(os.path.basename(args[0]))
            return 0, "", ""
        monkeypatch.setattr(AnsibleModule, "run_command", run_command)

    def run(self, **args):
        args.setdefault("record_dir", self.record_dir)
        return run_module(self.capsys, km.main, args)[1]


def test_kernel_cmdline_absent_of_an_unset_argument_on_systemd_boot_is_a_no_op(tmp_path, monkeypatch, capsys):
    boot = Boot(tmp_path, monkeypatch, capsys)
    for args in (["iommu=pt"], ["intel_iommu"]):
        res = boot.run(args=args, state="absent", bootloader="systemd-boot")
        assert res["changed"] is False and not res.get("failed"), res
        assert not os.path.exists(boot.kcmdline) and boot.tools == [] and not os.path.exists(boot.marker)
    # present of what the running kernel already has: nothing to write either (kernel-install uses /proc/cmdline)
    res = boot.run(args=["ro"], bootloader="systemd-boot")
    assert res["changed"] is False and not os.path.exists(boot.kcmdline) and boot.tools == [], res


PROC_WITH_INIT = "BOOT_IMAGE=/vmlinuz root=UUID=x ro quiet -- iommu=pt single\n"


def test_kernel_cmdline_init_arguments_are_not_kernel_arguments(tmp_path, monkeypatch, capsys):
    boot = Boot(tmp_path, monkeypatch, capsys, PROC_WITH_INIT)
    # iommu=pt after "--" goes to init: the kernel does not have it
    res = boot.run(args=["iommu=pt"], state="absent", bootloader="systemd-boot")
    assert res["changed"] is False and res["reboot_required"] is False and not os.path.exists(boot.kcmdline), res
    assert "iommu=pt" not in res["running"] and "single" not in res["running"], res
    res = boot.run(args=["iommu=pt"], bootloader="systemd-boot")
    assert res["changed"] is True and res["reboot_required"] is True and res["unmet"] == ["iommu=pt"], res
    assert res["configured"] == ["root=UUID=x", "ro", "quiet", "iommu=pt"], res
    # the new file: kernel arguments, then init's arguments kept verbatim after "--"
    assert _read(boot.kcmdline) == "root=UUID=x ro quiet iommu=pt -- iommu=pt single\n"
    assert boot.tools == ["kernel-install"]
    assert boot.run(args=["iommu=pt"], bootloader="systemd-boot")["changed"] is False
    res = boot.run(args=["iommu=pt"], state="absent", bootloader="systemd-boot")
    assert res["changed"] is True and _read(boot.kcmdline) == "root=UUID=x ro quiet -- iommu=pt single\n", res


def test_kernel_cmdline_grub_with_init_arguments_refuses_to_append_after_them(tmp_path, monkeypatch, capsys):
    boot = Boot(tmp_path, monkeypatch, capsys, grub_base="quiet -- single")
    res = boot.run(args=["iommu=pt"], bootloader="grub")
    assert res.get("failed") is True and "'--'" in res["msg"] and "nothing was changed" in res["msg"], res
    assert not os.path.exists(boot.dropin) and boot.tools == []
    # removing is fine, and init's "single" is no kernel argument
    res = boot.run(args=["single"], state="absent", bootloader="grub")
    assert res["changed"] is False and not res.get("failed") and "single" not in res["configured"], res


def test_kernel_cmdline_grub_dropin_symlink_or_foreign_is_refused(tmp_path, monkeypatch, capsys):
    boot = Boot(tmp_path, monkeypatch, capsys)
    fstab = str(tmp_path / "etc/fstab")
    _put(fstab, FSTAB)
    os.symlink(fstab, boot.dropin)
    res = boot.run(args=["iommu=pt"], bootloader="grub")
    assert res.get("failed") is True and "symbolic link" in res["msg"], res
    assert _read(fstab) == FSTAB and boot.tools == [] and not os.path.exists(boot.marker)
    os.unlink(boot.dropin)
    mine = 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT nomodeset"\n'
    _put(boot.dropin, mine)
    res = boot.run(args=["iommu=pt"], bootloader="grub")
    assert res.get("failed") is True and "not written by gpuops.nvidia" in res["msg"], res
    assert _read(boot.dropin) == mine and boot.tools == []


def test_kernel_cmdline_record_that_is_a_symlink_is_refused(tmp_path, monkeypatch, capsys):
    boot = Boot(tmp_path, monkeypatch, capsys)
    fstab = str(tmp_path / "etc/fstab")
    _put(fstab, FSTAB)
    os.makedirs(boot.record_dir)
    os.symlink(fstab, os.path.join(boot.record_dir, "vfio.json"))
    res = boot.run(args=["iommu=pt"], bootloader="grub", owner="vfio")
    assert res.get("failed") is True and "symbolic link" in res["msg"], res
    assert _read(fstab) == FSTAB and not os.path.exists(boot.dropin)


def test_kernel_cmdline_users_own_symlinked_cmdline_is_still_edited_through_the_link(tmp_path, monkeypatch, capsys):
    """/etc/kernel/cmdline is the user's file on systemd-boot hosts (edited, not written whole): its link stays."""
    boot = Boot(tmp_path, monkeypatch, capsys)
    real = str(tmp_path / "boot/efi/cmdline")
    _put(real, "root=UUID=x ro quiet\n")
    os.makedirs(os.path.dirname(boot.kcmdline))
    os.symlink(real, boot.kcmdline)
    res = boot.run(args=["iommu=pt"], bootloader="systemd-boot")
    assert res["changed"] and os.path.islink(boot.kcmdline) and _read(real) == "root=UUID=x ro quiet iommu=pt\n", res


# --- cdi_spec -----------------------------------------------------------------------------------------------------

VER = "580.159.04"
GPU_UUID = "GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8"
NVIDIA_CTK_SPEC = ("---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n"
                   "    deviceNodes:\n    - path: /dev/nvidia0\n")


@pytest.fixture
def gpu_root(tmp_path):
    r = str(tmp_path / "root")
    _put(r + "/proc/driver/nvidia/version",
         "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build\n" % VER)
    _put(r + "/proc/driver/nvidia/gpus/0000:00:06.0/information",
         "Model: \t\t NVIDIA H200\nDevice Minor: \t 0\nGPU UUID: \t %s\nBus Location: \t 0000:00:06.0\n" % GPU_UUID)
    _put(r + "/dev/nvidia0", "")
    _put(r + "/dev/nvidiactl", "")
    _put(r + "/usr/lib/x86_64-linux-gnu/libcuda.so." + VER, "ELF")
    return r


def _cdi(capsys, **kw):
    kw.setdefault("source", "proc")
    return run_module(capsys, cdi_spec.main, kw)[1]


@pytest.mark.parametrize("state", ["present", "absent"])
def test_cdi_spec_symlink_to_another_file_is_refused(gpu_root, tmp_path, capsys, state):
    fstab = str(tmp_path / "etc/fstab")
    _put(fstab, FSTAB)
    spec = gpu_root + "/etc/cdi/nvidia.yaml"          # path is under root (cdi_spec, 0.3.0)
    os.makedirs(os.path.dirname(spec))
    os.symlink(fstab, spec)
    res = _cdi(capsys, root=gpu_root, path="/etc/cdi/nvidia.yaml", state=state)
    assert res.get("failed") is True and "symbolic link" in res["msg"], res
    assert _read(fstab) == FSTAB and os.path.islink(spec)


@pytest.mark.parametrize("state", ["present", "absent"])
def test_cdi_spec_foreign_file_is_refused_and_a_cdi_spec_of_the_kind_replaced(gpu_root, tmp_path, capsys, state):
    spec = gpu_root + "/etc/cdi/nvidia.yaml"          # path is under root (cdi_spec, 0.3.0)
    _put(spec, FSTAB)
    res = _cdi(capsys, root=gpu_root, path="/etc/cdi/nvidia.yaml", state=state)
    assert res.get("failed") is True and "not written by gpuops.nvidia" in res["msg"], res
    assert _read(spec) == FSTAB
    _put(spec, NVIDIA_CTK_SPEC)        # nvidia-ctk's spec of the same kind: this module replaces it
    res = _cdi(capsys, root=gpu_root, path="/etc/cdi/nvidia.yaml", state=state)
    assert res["changed"] and not res.get("failed"), res
    assert (state == "absent") != os.path.exists(spec)
