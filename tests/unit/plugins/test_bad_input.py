# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Bad input never ends in a traceback (issue 15, defect 10).

Every module (gpu_facts, kernel_cmdline, vfio_pci, container_runtime, cdi_spec, driver_plan,
gpu_validate) is driven through the real AnsibleModule with input it must refuse: malformed
JSON/TOML/YAML in the files it reads, files it cannot read (a directory, a FIFO or a dangling
symlink where a file is expected: these tests run as root, so chmod 000 proves nothing), relative
paths where absolute ones are required, empty strings, shell metacharacters, a PCI bridge given to
vfio_pci, driver_plan without a kernel release (never ``linux-headers-None``), roots that do not
exist, facts of the wrong shape.  A case passes only when the module exits with failed=true and a
``msg`` that says something (no traceback, no "MODULE FAILURE", not an exception's name alone) and
the tree it works on is byte for byte as before.

Every filter is called as Jinja calls it, with wrong types (None, int, str, a list for a dict, a
dict for a list) and malformed nested data; it must raise AnsibleFilterError (or Ansible's type
error) with a message, never a bare Python exception, and never return garbage built from the
characters of a string.

Nothing outside tmp_path is written: boot-loader tools, modprobe and systemctl are stand-ins.

Before the fix, 190 of the 240 module and filter cases here failed: 108 ended in a Python exception
(33 in modules, 75 in filters), 4 hung reading a FIFO, 3 passed bad input on to a restart command,
10 failed only after changing the tree (a PCI bridge moved the GPU behind it to vfio-pci), and 65
were accepted (relative paths, linux-headers-None, garbage built from the characters of a string).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sys

import pytest
from ansible.errors import AnsibleFilterError
from ansible.module_utils.basic import AnsibleModule
from conftest import run_module

try:  # ansible-core >= 2.19 (AnsibleFilterTypeError is its deprecated alias)
    from ansible.errors import AnsibleTypeError
except ImportError:  # pragma: no cover
    from ansible.errors import AnsibleFilterTypeError as AnsibleTypeError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures", "vfio"))

from sysfs import NVIDIA, make_tree  # noqa: E402

from ansible_collections.gpuops.nvidia.plugins.filter import gpu_diagnose as fd  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.filter import k8s_plan as fk  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.module_utils import _vfio  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.modules import (  # noqa: E402
    cdi_spec,
    container_runtime,
    driver_plan,
    gpu_facts,
    gpu_validate,
    kernel_cmdline,
    vfio_pci,
)

DRIVER = "580.159.04"
UUID = "GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8"
EXCEPTION_NAME = re.compile(r"^\s*(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b|Traceback)")


# --- helpers ------------------------------------------------------------------------------------

def write(path, data=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    return path


def snapshot(top):
    """Every entry below ``top`` (not following links): type, mode, bytes of files, link targets."""
    out = {}
    for dirpath, dirs, files in os.walk(top):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if os.path.islink(p):
                what = ("link", os.readlink(p))
            elif os.path.isdir(p):
                what = ("dir", st.st_mode & 0o7777)
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    what = ("file", st.st_mode & 0o7777, hashlib.sha256(f.read()).hexdigest())
            else:
                what = ("other", st.st_mode)
            out[os.path.relpath(p, top)] = what
    return out


class Hang(Exception):
    pass


def _hang(signum, frame):
    raise Hang("no answer within 10 s (blocked reading a FIFO?)")


def assert_refused(capsys, main, args, top, must_mention=()):
    """``main`` fails with a real message and leaves ``top`` unchanged."""
    before = snapshot(top)
    old = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(10)
    try:
        rc, res = run_module(capsys, main, args)
    except Exception as exc:  # anything but SystemExit: what the user sees as MODULE FAILURE + traceback
        pytest.fail("TRACEBACK: %s: %s" % (type(exc).__name__, exc))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert res.get("failed") is True and rc == 1, "ACCEPTED (not refused): %r" % (res,)
    msg = res.get("msg")
    assert isinstance(msg, str) and len(msg.strip()) >= 20 and " " in msg.strip(), "no real message: %r" % (msg,)
    assert "Traceback" not in msg and "MODULE FAILURE" not in msg, msg
    assert not EXCEPTION_NAME.match(msg), "only an exception name: %r" % msg
    for word in must_mention:
        assert word in msg, (word, msg)
    assert snapshot(top) == before, "the tree changed although the module failed"
    return res


def assert_filter_refuses(fn, *args, **kwargs):
    try:
        value = fn(*args, **kwargs)
    except (AnsibleFilterError, AnsibleTypeError) as exc:
        msg = str(exc)
        assert len(msg.strip()) >= 15 and " " in msg and not EXCEPTION_NAME.match(msg), msg
        return msg
    except Exception as exc:
        pytest.fail("TRACEBACK: %s: %s" % (type(exc).__name__, exc))
    pytest.fail("ACCEPTED (not refused): returned %r" % (value,))


@pytest.fixture(autouse=True)
def no_host_commands(monkeypatch, tmp_path):
    """No test reaches the host's tools or lock directories."""
    monkeypatch.setenv("GPUOPS_LOCK_DIR", str(tmp_path / "locks"))

    def run_command(module, args, **kw):
        raise AssertionError("unexpected command %r" % (args,))
    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda module, name, required=False, opt_dirs=None: None)


@pytest.fixture
def top(tmp_path, monkeypatch):
    """The tree a module works on; also the working directory, so that a relative path that is not
    refused lands here (and shows up as a change) instead of in the checkout."""
    d = tmp_path / "host"
    d.mkdir()
    monkeypatch.chdir(str(d))
    return str(d)


# --- gpu_facts ------------------------------------------------------------------------------------

def gpu_root(top):
    """A node tree with NVIDIA GPUs (PCI, IOMMU groups, kernel, driver, os-release)."""
    root = make_tree(os.path.join(top, "root"), NVIDIA)
    write(root + "/proc/sys/kernel/osrelease", "6.8.0-51-generic\n")
    write(root + "/proc/cmdline", "BOOT_IMAGE=/vmlinuz quiet\n")
    write(root + "/proc/modules", "nvidia 1 0 - Live 0x0\n")
    write(root + "/proc/driver/nvidia/version",
          "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build\n" % DRIVER)
    write(root + "/etc/os-release", 'ID=ubuntu\nVERSION_ID="24.04"\n')
    return root


GPU_FACTS_CASES = {
    "relative root": lambda top: {"root": "relative/root", "gather_subset": ["pci"]},
    "root does not exist": lambda top: {"root": os.path.join(top, "nope"), "gather_subset": ["pci"]},
    "root is a file": lambda top: {"root": write(os.path.join(top, "rootfile"), "x"), "gather_subset": ["pci"]},
    "root is empty": lambda top: {"root": "", "gather_subset": ["pci"]},
    "unknown subset with shell metacharacters": lambda top: {"root": gpu_root(top), "gather_subset": ["pci;reboot"]},
    "gfd_config flags not a mapping": lambda top: {"root": gpu_root(top), "gather_subset": ["pci", "driver"],
                                                   "gfd_config": {"version": "v1", "flags": "single"}},
    "gfd_config sharing not a mapping": lambda top: {"root": gpu_root(top), "gather_subset": ["pci"],
                                                     "gfd_config": {"version": "v1", "sharing": "time-slicing"}},
    "gfd_config resources not a list": lambda top: {"root": gpu_root(top), "gather_subset": ["pci"],
                                                    "gfd_config": {"sharing": {"timeSlicing": {"resources": 4}}}},
    "gfd_config bad without GPUs too": lambda top: {"root": top, "gather_subset": ["pci"],
                                                    "gfd_config": {"version": "v1", "flags": "single"}},
}


@pytest.mark.parametrize("case", sorted(GPU_FACTS_CASES))
def test_gpu_facts_refuses(case, capsys, top):
    args = GPU_FACTS_CASES[case](top)
    assert_refused(capsys, gpu_facts.main, args, top)


# --- driver_plan ----------------------------------------------------------------------------------

def facts(**over):
    gpu = {"os": {"id": "ubuntu", "version_id": "24.04"},
           "kernel": {"release": "6.8.0-51-generic", "headers_present": False},
           "driver": {"loaded": False, "version": None, "kernel_module_type": None},
           "devices": [{"bdf": "0000:41:00.0", "device_id": "2335", "compute_capability": "9.0"}],
           "nvswitches": [], "secure_boot": False}
    gpu.update(over)
    return gpu


def dp_args(top, **over):
    args = {"branch": "580", "root": top, "source": "distro", "precompiled": "never", "gpu_facts": facts()}
    args.update(over)
    return args


DRIVER_PLAN_CASES = {
    "kernel release unknown (linux-headers-None)": lambda top: dp_args(top, gpu_facts=facts(kernel={})),
    "kernel release null, precompiled": lambda top: dp_args(top, precompiled="auto",
                                                            gpu_facts=facts(kernel={"release": None})),
    "kernel release unknown, debian": lambda top: dp_args(top, branch="535", gpu_facts=facts(
        os={"id": "debian", "version_id": "12"}, kernel={"release": None})),
    "kernel release unknown, cuda repo": lambda top: dp_args(top, source="cuda_repo", gpu_facts=facts(kernel={})),
    "no kernel facts gathered from the root": lambda top: dp_args(
        top, gpu_facts=None, root=write(top + "/noderoot/etc/os-release", 'ID=ubuntu\nVERSION_ID="24.04"\n')
        and top + "/noderoot"),
    "os facts a string": lambda top: dp_args(top, gpu_facts=facts(os="ubuntu 24.04")),
    "kernel facts a list": lambda top: dp_args(top, gpu_facts=facts(kernel=["6.8.0-51-generic"])),
    "driver facts a string": lambda top: dp_args(top, gpu_facts=facts(driver="580.159.04")),
    "devices a list of strings": lambda top: dp_args(top, gpu_facts=facts(devices=["0000:41:00.0"])),
    "devices a mapping": lambda top: dp_args(top, gpu_facts=facts(devices={"bdf": "0000:41:00.0"})),
    "version_id a number": lambda top: dp_args(top, branch="535", gpu_facts=facts(os={"id": "debian", "version_id": 12})),
    "loaded driver version a number": lambda top: dp_args(top, gpu_facts=facts(
        driver={"loaded": True, "version": 580, "kernel_module_type": "open"})),
    "kernel release with a newline": lambda top: dp_args(top, gpu_facts=facts(
        kernel={"release": "6.8.0-51-generic\nrm -rf /"})),
    "version with shell metacharacters": lambda top: dp_args(top, version="580.159.04; rm -rf /"),
    "branch with a trailing newline": lambda top: dp_args(top, branch="580\n"),
    "empty branch": lambda top: dp_args(top, branch=""),
    "repo_url with a newline": lambda top: dp_args(top, source="cuda_repo",
                                                   repo_url="https://mirror.example/cuda/\n[evil]\nenabled=1"),
    "repo_url not a URL": lambda top: dp_args(top, source="cuda_repo", repo_url="$(curl evil)"),
    "repo_key_url with spaces": lambda top: dp_args(top, source="cuda_repo", repo_key_url="https://x/ key.pub"),
    "debian_mirror with a newline": lambda top: dp_args(top, branch="535", debian_mirror="http://m/debian\nSigned-By: /x",
                                                        gpu_facts=facts(os={"id": "debian", "version_id": "12"})),
    "arch with shell metacharacters": lambda top: dp_args(top, source="cuda_repo", arch="x86_64;reboot"),
    "relative root": lambda top: dp_args(top, root="relative/root", gpu_facts=None),
    "root does not exist": lambda top: dp_args(top, root=os.path.join(top, "nope"), gpu_facts=None),
}


@pytest.mark.parametrize("case", sorted(DRIVER_PLAN_CASES))
def test_driver_plan_refuses(case, capsys, top):
    args = DRIVER_PLAN_CASES[case](top)
    res = assert_refused(capsys, driver_plan.main, args, top)
    assert "None" not in res["msg"].replace("'None'", "") or "linux-headers-None" not in res["msg"]


def test_driver_plan_never_plans_linux_headers_none(capsys, top):
    """Whatever the facts lack, no package name ends in None."""
    for kernel in ({}, {"release": None}, {"release": ""}):
        for precompiled in ("never", "auto"):
            try:
                _rc, res = run_module(capsys, driver_plan.main, dp_args(top, precompiled=precompiled,
                                                                        gpu_facts=facts(kernel=kernel)))
            except Exception as exc:
                pytest.fail("TRACEBACK: %s: %s" % (type(exc).__name__, exc))
            assert "None" not in json.dumps(res.get("plan", {}).get("headers", [])), res
            assert "-None" not in json.dumps(res.get("plan", {})), res


# --- vfio_pci -------------------------------------------------------------------------------------

@pytest.fixture
def sysfs(top, monkeypatch):
    root = make_tree(os.path.join(top, "root"), NVIDIA)
    os.makedirs(os.path.join(root, "sys/bus/pci/drivers/vfio-pci"), exist_ok=True)
    monkeypatch.setattr(_vfio, "WAIT_TIMEOUT", 0.05)
    return root


STATE = "etc/gpuops/vfio-pci.json"


def bound_state(root, entry):
    write(os.path.join(root, STATE), json.dumps({"devices": {"0000:41:00.0": entry}}))


VFIO_CASES = {
    "a PCI bridge": lambda root: {"devices": ["0000:40:00.0"]},
    "a PCI bridge, short form": lambda root: {"devices": ["40:00.0"]},
    "a PCI bridge with its GPU": lambda root: {"devices": ["0000:40:00.0", "0000:41:00.0"]},
    "a PCI bridge, state absent": lambda root: {"devices": ["0000:40:00.0"], "state": "absent"},
    "a PCI bridge by vendor:device ID": lambda root: {"devices": ["8086:2030"]},
    "empty device": lambda root: {"devices": [""]},
    "no devices": lambda root: {"devices": []},
    "shell metacharacters": lambda root: {"devices": ["0000:41:00.0;reboot"]},
    "relative root": lambda root: {"devices": ["0000:41:00.0"], "root": "relative/root"},
    "root does not exist": lambda root: {"devices": ["0000:41:00.0"], "root": root + "-nope"},
    "relative initramfs_marker": lambda root: {"devices": ["0000:41:00.0"], "initramfs_marker": "pending"},
    "state file not JSON": lambda root: write(os.path.join(root, STATE), "{not json") and {"devices": ["0000:41:00.0"]},
    "state file a directory": lambda root: os.makedirs(os.path.join(root, STATE)) or {"devices": ["0000:41:00.0"]},
    "state file a FIFO": lambda root: (os.makedirs(os.path.join(root, "etc/gpuops")),
                                       os.mkfifo(os.path.join(root, STATE)))
    and {"devices": ["0000:41:00.0"], "_ansible_check_mode": True},
    "state file not UTF-8": lambda root: write(os.path.join(root, STATE), b"\xff\xfe{}") and {"devices": ["0000:41:00.0"]},
    "state original_driver a number": lambda root: bound_state(root, {"original_driver": 5, "persistent": True}) or {
        "devices": ["0000:41:00.0"], "state": "absent"},
    "state original_driver a path": lambda root: bound_state(root, {"original_driver": "../../../../etc", "persistent": True})
    or {"devices": ["0000:41:00.0"], "state": "absent"},
    "udev rules a directory": lambda root: os.makedirs(os.path.join(root, "etc/udev/rules.d/40-gpuops-vfio-pci.rules"))
    or {"devices": ["0000:41:00.0"]},
    "modprobe.d a file": lambda root: write(os.path.join(root, "etc/modprobe.d"), "x") and {"devices": ["0000:41:00.0"]},
    "modules-load.d conf a directory": lambda root: os.makedirs(
        os.path.join(root, "etc/modules-load.d/gpuops-vfio-pci.conf")) or {"devices": ["0000:41:00.0"]},
    "initramfs marker directory a file": lambda root: write(os.path.join(root, "var/lib/gpuops"), "x")
    and {"devices": ["0000:41:00.0"]},
}


@pytest.mark.parametrize("case", sorted(VFIO_CASES))
def test_vfio_pci_refuses(case, capsys, top, sysfs):
    args = dict({"root": sysfs}, **VFIO_CASES[case](sysfs))
    res = assert_refused(capsys, vfio_pci.main, args, top)
    if "bridge" in case:
        assert "bridge" in res["msg"], res["msg"]


# --- cdi_spec -------------------------------------------------------------------------------------

def cdi_root(top, information=None):
    r = os.path.join(top, "root")
    write(r + "/proc/driver/nvidia/version",
          "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build\n" % DRIVER)
    info = r + "/proc/driver/nvidia/gpus/0000:00:06.0/information"
    if information is None:
        write(info, "Model: \t\t NVIDIA H200\nDevice Minor: \t 0\nGPU UUID: \t %s\nBus Location: \t 0000:00:06.0\n" % UUID)
    elif information == "dir":
        os.makedirs(info)
    else:
        write(info, information)
    write(r + "/dev/nvidia0")
    write(r + "/dev/nvidiactl")
    write(r + "/usr/lib/x86_64-linux-gnu/libcuda.so." + DRIVER, "ELF")
    return r


def spec(top, name="cdi/nvidia.yaml"):
    """Where the spec at host path /etc/<name> is, under the node tree (cdi_spec writes path under root)."""
    return os.path.join(top, "root", "etc", name)


def host(name="cdi/nvidia.yaml"):
    return "/etc/" + name


CDI_CASES = {
    "path is a directory": lambda top: {"path": os.makedirs(spec(top)) or host()},
    "path is a directory, absent": lambda top: {"path": os.makedirs(spec(top)) or host(), "state": "absent"},
    "path is relative": lambda top: {"path": "nvidia.yaml"},
    "path is empty": lambda top: {"path": ""},
    "path below a file": lambda top: {"path": write(spec(top, "cdi"), "x") and host("cdi/nvidia.yaml")},
    "path below a file, absent": lambda top: {"path": write(spec(top, "cdi"), "x") and host("cdi/nvidia.yaml"),
                                              "state": "absent"},
    "existing spec not UTF-8": lambda top: {"path": write(spec(top), b"\xff\xfe\x00cdi") and host()},
    "existing spec not UTF-8, absent": lambda top: {"path": write(spec(top), b"\xff\xfe\x00cdi") and host(),
                                                    "state": "absent"},
    "existing spec a FIFO": lambda top: {"path": os.makedirs(os.path.dirname(spec(top))) or os.mkfifo(spec(top))
                                         or host(), "_ansible_check_mode": True},
    "relative root": lambda top: {"root": "relative/root"},
    "root does not exist": lambda top: {"root": os.path.join(top, "nope")},
    "GPU information unparsable": lambda top: {"root": cdi_root(top, "Device Minor: \t zero\n")},
    "GPU information a directory": lambda top: {"root": cdi_root(top, "dir")},
    "GPU information not UTF-8": lambda top: {"root": cdi_root(top, b"Device Minor: \xff\xfe\n")},
    "relative library dir": lambda top: {"library_dirs": ["usr/lib/x86_64-linux-gnu"]},
    "relative bin dir": lambda top: {"bin_dirs": ["bin"]},
    "relative hook_path": lambda top: {"hook_path": "nvidia-ctk"},
    "hook_path with shell metacharacters": lambda top: {"hook_path": "/usr/bin/nvidia-ctk;reboot"},
    "mode not octal": lambda top: {"mode": "rw-r--r--"},
    "no device at all": lambda top: {"device_name_strategy": [], "all_device": False},
}


@pytest.mark.parametrize("case", sorted(CDI_CASES))
def test_cdi_spec_refuses(case, capsys, top):
    args = {"source": "proc", "path": host()}
    extra = CDI_CASES[case](top)
    if "root" not in extra:
        extra["root"] = cdi_root(top)
    args.update(extra)
    assert_refused(capsys, cdi_spec.main, args, top)


# --- kernel_cmdline -------------------------------------------------------------------------------

@pytest.fixture
def boot(top, monkeypatch):
    """kernel_cmdline's files under ``top``; update-grub and kernel-install succeed."""
    paths = {"dropin": os.path.join(top, "etc/default/grub.d/90-gpuops-kernel-cmdline.cfg"),
             "kcmdline": os.path.join(top, "etc/kernel/cmdline"),
             "marker": os.path.join(top, "var/lib/gpuops/kernel_cmdline.regenerate-pending")}
    os.makedirs(os.path.dirname(paths["dropin"]))
    monkeypatch.setattr(kernel_cmdline, "GRUB_DROPIN", paths["dropin"])
    monkeypatch.setattr(kernel_cmdline, "SYSTEMD_BOOT_CMDLINE", paths["kcmdline"])
    monkeypatch.setattr(kernel_cmdline, "REGEN_PENDING", paths["marker"])
    monkeypatch.setattr(kernel_cmdline, "_kernel_image", lambda kver: "/boot/vmlinuz-test")
    tools = {"update-grub": "/usr/sbin/update-grub", "kernel-install": "/usr/bin/kernel-install"}
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda module, name, required=False, opt_dirs=None: tools.get(name))

    def run_command(module, args, **kw):
        if args[:2] == ["/bin/sh", "-c"]:
            return 0, "quiet splash", ""
        if os.path.basename(args[0]) in ("update-grub", "kernel-install"):
            return 0, "", ""
        raise AssertionError("unexpected command %r" % (args,))
    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    return paths


KERNEL_CMDLINE_CASES = {
    "no arguments": lambda p: {"args": []},
    "an empty argument": lambda p: {"args": [""]},
    "command substitution": lambda p: {"args": ["quiet", "x=$(reboot)"]},
    "drop-in a directory": lambda p: os.makedirs(p["dropin"]) or {"args": ["iommu=pt"]},
    "drop-in a FIFO": lambda p: os.mkfifo(p["dropin"]) or {"args": ["iommu=pt"], "_ansible_check_mode": True},
    "drop-in not UTF-8": lambda p: write(p["dropin"], b"\xff\xfeGRUB") and {"args": ["iommu=pt"]},
    "drop-in edited by hand": lambda p: write(
        p["dropin"], "GRUB_CMDLINE_LINUX_DEFAULT=\"${GRUB_CMDLINE_LINUX_DEFAULT}\"' a=$(x)'\n") and {"args": ["iommu=pt"]},
    "/etc/kernel/cmdline a directory": lambda p: os.makedirs(p["kcmdline"]) or {
        "args": ["iommu=pt"], "bootloader": "systemd-boot"},
    "/etc/kernel/cmdline not UTF-8": lambda p: write(p["kcmdline"], b"quiet \xff\xfe") and {
        "args": ["iommu=pt"], "bootloader": "systemd-boot"},
    "marker directory a file": lambda p: write(os.path.dirname(p["marker"]), "x") and {"args": ["iommu=pt"]},
    "marker a directory": lambda p: os.makedirs(p["marker"]) or {"args": ["iommu=pt"]},
}


@pytest.mark.parametrize("case", sorted(KERNEL_CMDLINE_CASES))
def test_kernel_cmdline_refuses(case, capsys, top, boot):
    args = dict({"bootloader": "grub"}, **KERNEL_CMDLINE_CASES[case](boot))
    assert_refused(capsys, kernel_cmdline.main, args, top)


# --- container_runtime ----------------------------------------------------------------------------

def cr_args(top, runtime="containerd", **over):
    name = {"containerd": "containerd/config.toml", "crio": "crio/crio.conf.d/99-nvidia.toml",
            "docker": "docker/daemon.json"}[runtime]
    args = {"runtime": runtime, "config_path": os.path.join(top, "etc", name), "state_dir": os.path.join(top, "state"),
            "validate": False, "restart_mode": "none"}
    args.update(over)
    return args


def cfg(top, runtime, data):
    return write(cr_args(top, runtime)["config_path"], data)


CONTAINER_RUNTIME_CASES = {
    "malformed TOML": lambda top: cfg(top, "containerd", "version = 2\n[plugins\n") and cr_args(top),
    "malformed TOML, absent": lambda top: cfg(top, "containerd", "version = 2\n[plugins\n") and cr_args(top, state="absent"),
    "malformed TOML, crio": lambda top: cfg(top, "crio", "[crio.runtime\n") and cr_args(top, "crio"),
    "malformed JSON, docker": lambda top: cfg(top, "docker", "{\"runtimes\": ") and cr_args(top, "docker"),
    "JSON not an object, docker": lambda top: cfg(top, "docker", "[1, 2]") and cr_args(top, "docker"),
    "malformed JSON, docker absent": lambda top: cfg(top, "docker", "{\"runtimes\": ") and cr_args(top, "docker", state="absent"),
    "config not UTF-8": lambda top: cfg(top, "containerd", b"version = 2\n# \xff\xfe\n") and cr_args(top),
    "config not UTF-8, docker": lambda top: cfg(top, "docker", b"{\"x\": \"\xff\"}") and cr_args(top, "docker"),
    "config a directory": lambda top: os.makedirs(cr_args(top)["config_path"]) or cr_args(top),
    "config a directory, absent": lambda top: os.makedirs(cr_args(top)["config_path"]) or cr_args(top, state="absent"),
    "config a FIFO": lambda top: (os.makedirs(os.path.dirname(cr_args(top)["config_path"])),
                                  os.mkfifo(cr_args(top)["config_path"])) and cr_args(top, _ansible_check_mode=True),
    "config below a file": lambda top: write(os.path.join(top, "etc/containerd"), "x") and cr_args(top),
    "config below a file, absent": lambda top: write(os.path.join(top, "etc/containerd"), "x")
    and cr_args(top, state="absent"),
    "relative config_path": lambda top: cr_args(top, config_path="etc/containerd/config.toml"),
    # check mode: before the fix "" fell back to the host's /etc/containerd/config.toml
    "empty config_path": lambda top: cr_args(top, config_path="", _ansible_check_mode=True),
    "relative drop_in_path": lambda top: cr_args(top, drop_in_path="conf.d/99-nvidia.toml"),
    "drop-in a directory": lambda top: os.makedirs(os.path.join(top, "etc/containerd/conf.d/99-nvidia.toml"))
    or cr_args(top, drop_in_path=os.path.join(top, "etc/containerd/conf.d/99-nvidia.toml")),
    "relative state_dir": lambda top: cr_args(top, state_dir="state"),
    "state_dir a file": lambda top: write(os.path.join(top, "state"), "x") and cr_args(top),
    "state record not JSON": lambda top: cr_args(top, state="absent") if _bad_record(top) else None,
    "runtime_name with shell metacharacters": lambda top: cr_args(top, runtime_name="nvidia;reboot"),
    "relative runtime_path": lambda top: cr_args(top, runtime_path="nvidia-container-runtime"),
    "runtime_config null value": lambda top: cr_args(top, runtime_config={"privileged_without_host_devices": None}),
    "runtime_options null value": lambda top: cr_args(top, runtime_options={"BinaryName": None}),
    "runtime_config nested null": lambda top: cr_args(top, runtime_options={"X": [None]}),
    "negative restart_timeout": lambda top: cr_args(top, restart_timeout=-1, restart_mode="systemd"),
    "relative pid_file": lambda top: cr_args(top, pid_file="containerd.pid", restart_mode="signal"),
    "relative socket": lambda top: cr_args(top, socket="containerd.sock"),
    "empty restart_command": lambda top: cr_args(top, restart_mode="command", restart_command=[]),
    "restart_command with an empty word": lambda top: cr_args(top, restart_mode="command", restart_command=[""]),
    "service_name with shell metacharacters": lambda top: cr_args(top, restart_mode="systemd",
                                                                  service_name="containerd; reboot"),
    "relative backup_dir": lambda top: cr_args(top, backup=True, backup_dir="backups"),
}


def _bad_record(top):
    import hashlib as _h
    path = os.path.realpath(cfg(top, "containerd", "version = 2\n"))
    write(os.path.join(top, "state", _h.sha256(path.encode()).hexdigest() + ".json"), "{not json")
    return True


@pytest.mark.parametrize("case", sorted(CONTAINER_RUNTIME_CASES))
def test_container_runtime_refuses(case, capsys, top):
    args = CONTAINER_RUNTIME_CASES[case](top)
    assert_refused(capsys, container_runtime.main, args, top)


# --- gpu_validate ---------------------------------------------------------------------------------

def gv_args(top, **over):
    args = {"checks": ["toolkit", "device_plugin"], "runtime_path": os.path.join(top, "usr/bin/nvidia-container-runtime"),
            "cdi_spec_dirs": [os.path.join(top, "etc/cdi")], "kubelet_dir": os.path.join(top, "var/lib/kubelet"),
            "fail_on_error": False}
    args.update(over)
    return args


GPU_VALIDATE_CASES = {
    "no checks": lambda top: gv_args(top, checks=[]),
    "cuda_elements 0": lambda top: gv_args(top, cuda_elements=0),
    "cuda_device not an ordinal": lambda top: gv_args(top, cuda_device="0;reboot"),
    "cuda_device empty": lambda top: gv_args(top, cuda_device=""),
    "command_timeout 0": lambda top: gv_args(top, command_timeout=0),
    "negative command_timeout": lambda top: gv_args(top, command_timeout=-5),
    "relative runtime_path": lambda top: gv_args(top, runtime_path="nvidia-container-runtime"),
    "relative hook_path": lambda top: gv_args(top, hook_path="nvidia-cdi-hook"),
    "relative cdi_spec_dirs": lambda top: gv_args(top, cdi_spec_dirs=["etc/cdi"]),
    "no cdi_spec_dirs": lambda top: gv_args(top, cdi_spec_dirs=[]),
    "relative kubelet_dir": lambda top: gv_args(top, kubelet_dir="var/lib/kubelet"),
    "empty containerd_config_dump_cmd word": lambda top: gv_args(top, containerd_config_dump_cmd=[""]),
    "empty runtime_name": lambda top: gv_args(top, runtime_name=""),
    "empty resource_name": lambda top: gv_args(top, resource_name=""),
}


@pytest.mark.parametrize("case", sorted(GPU_VALIDATE_CASES))
def test_gpu_validate_refuses(case, capsys, top):
    assert_refused(capsys, gpu_validate.main, GPU_VALIDATE_CASES[case](top), top)


def test_gpu_validate_reports_malformed_specs_and_checkpoints(capsys, top):
    """Malformed CDI specs (JSON and YAML) and a malformed kubelet checkpoint are check failures with
    a message, never a crash."""
    write(os.path.join(top, "etc/cdi/a.json"), "{\"kind\": ")
    write(os.path.join(top, "etc/cdi/b.yaml"), "kind: nvidia.com/gpu\ndevices:\n  - name: [unclosed\n   bad: 'x\n")
    os.makedirs(os.path.join(top, "etc/cdi/c.yaml"))
    write(os.path.join(top, "var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"), "{\"Data\": ")
    res = assert_refused(capsys, gpu_validate.main, gv_args(top, fail_on_error=True), top)
    assert "a.json" in res["msg"] and "kubelet_internal_checkpoint" in res["msg"], res["msg"]


# --- filters --------------------------------------------------------------------------------------

GPU = {"bdf": "0000:41:00.0", "driver": "nvidia", "product": "NVIDIA H200"}

FILTER_CASES = {
    # gpu_diagnose.py
    "gpu_diagnose: facts None": (fd.gpu_diagnose, (None,), {}),
    "gpu_diagnose: facts a list": (fd.gpu_diagnose, ([GPU],), {}),
    "gpu_diagnose: devices a string": (fd.gpu_diagnose, ({"devices": "0000:41:00.0"},), {}),
    "gpu_diagnose: devices of ints": (fd.gpu_diagnose, ({"devices": [5]},), {}),
    "gpu_diagnose: expect a string": (fd.gpu_diagnose, ({"devices": [GPU]}, "container"), {}),
    "gpu_diagnose: kernel a list": (fd.gpu_diagnose, ({"devices": [GPU], "kernel": ["6.8"]},), {}),
    "gpu_diagnose: driver a string": (fd.gpu_diagnose, ({"devices": [GPU], "driver": "580"},), {}),
    "gpu_diagnose: nvml device without pending mode": (fd.gpu_diagnose, (
        {"devices": [GPU], "nvml": {"devices": [{"index": 0, "mig_mode": {"current": 1}}]}},), {}),
    "gpu_diagnose: workload a number": (fd.gpu_diagnose, ({"devices": [GPU], "iommu": {"enabled": False}},
                                                          {"workload": 5}), {}),
    "gpu_readiness: facts a string": (fd.gpu_readiness, ("x",), {}),
    "gpu_readiness: workload a number": (fd.gpu_readiness, ({"devices": [GPU], "iommu": {"enabled": False}}, 5), {}),
    "gpu_readiness: workload a mapping": (fd.gpu_readiness, ({}, {"kind": "container"}), {}),
    "gpu_readiness: reboot_reasons a string": (fd.gpu_readiness, ({}, None, "kernel args"), {}),
    "gpu_readiness: validated a string": (fd.gpu_readiness, ({}, None, [], "false"), {}),
    "gpu_readiness: devices a mapping": (fd.gpu_readiness, ({"devices": {"0": GPU}}, "container"), {}),
    "gpu_doctor_read: state a list": (fd.gpu_doctor_read, ([], []), {}),
    "gpu_doctor_read: results a string": (fd.gpu_doctor_read, ({}, "x"), {}),
    "gpu_doctor_read: results of ints": (fd.gpu_doctor_read, ({}, [5]), {}),
    "gpu_doctor_read: content not base64": (fd.gpu_doctor_read, ({}, [
        {"item": "/etc/containerd/config.toml", "content": "!!! not base64 !!!", "encoding": "base64"}]), {}),
    "gpu_doctor_read: item a number": (fd.gpu_doctor_read, ({}, [{"item": 5, "content": "", "encoding": "utf-8"}]), {}),
    "gpu_doctor_read: containerd_config a number": (fd.gpu_doctor_read, ({"containerd_config": 5}, []), {}),
    "gpu_doctor_read: globbed a number": (fd.gpu_doctor_read, ({}, [], 5), {}),
    "gpu_doctor_read: files a list": (fd.gpu_doctor_read, ({"files": ["/etc/containerd/config.toml"]}, []), {}),
    "gpu_doctor_pending: state None": (fd.gpu_doctor_pending, (None,), {}),
    "gpu_doctor_pending: files a string": (fd.gpu_doctor_pending, ({"files": "x"},), {}),
    "gpu_doctor_pending: file text a number": (fd.gpu_doctor_pending, (
        {"files": {"/etc/containerd/config.toml": 5}},), {}),
    "gpu_doctor_pending: cdi_dirs a number": (fd.gpu_doctor_pending, ({"cdi_dirs": 5},), {}),
    "gpu_doctor_pending: unreadable a list": (fd.gpu_doctor_pending, ({"unreadable": ["x"]},), {}),
    # k8s_plan.py
    "k8s_node_inputs: hosts a string": (fk.k8s_node_inputs, ("node1", {"node1": {}}), {}),
    "k8s_node_inputs: hostvars None": (fk.k8s_node_inputs, (["node1"], None), {}),
    "k8s_node_inputs: host vars a string": (fk.k8s_node_inputs, (["node1"], {"node1": "x"}), {}),
    "k8s_node_inputs: host not in hostvars": (fk.k8s_node_inputs, (["ghost"], {}), {}),
    "k8s_node_inputs: facts a list": (fk.k8s_node_inputs, (["n"], {"n": {"ansible_facts": ["gpu"]}}), {}),
    "k8s_node_current: a mapping": (fk.k8s_node_current, ({"metadata": {"name": "n"}},), {}),
    "k8s_node_current: resource without metadata": (fk.k8s_node_current, ([{}],), {}),
    "k8s_node_current: spec a string": (fk.k8s_node_current, ([{"metadata": {"name": "n"}, "spec": "x"}],), {}),
    "k8s_node_current: resources of strings": (fk.k8s_node_current, (["n"],), {}),
    "k8s_node_plan: nodes None": (fk.k8s_node_plan, (None,), {}),
    "k8s_node_plan: nodes of strings": (fk.k8s_node_plan, (["node1"],), {}),
    "k8s_node_plan: nodes a mapping": (fk.k8s_node_plan, ({"name": "n"},), {}),
    "k8s_node_plan: gpu count not a number": (fk.k8s_node_plan, ([{"name": "n", "gpu": {"count": "many"}}],), {}),
    "k8s_node_plan: gpu compute capability garbage": (fk.k8s_node_plan, (
        [{"name": "n", "gpu": {"count": 1, "compute_capability": "x.y"}}],), {}),
    "k8s_node_plan: gpu a string": (fk.k8s_node_plan, ([{"name": "n", "gpu": "H200"}],), {}),
    "k8s_node_plan: labels a list": (fk.k8s_node_plan, ([{"name": "n", "labels": ["a"]}],), {}),
    "k8s_node_plan: options a list": (fk.k8s_node_plan, ([], None, ["x"]), {}),
    "k8s_node_plan: current a list": (fk.k8s_node_plan, ([{"name": "n"}], ["n"]), {}),
    "k8s_node_plan: taint a string": (fk.k8s_node_plan, (
        [{"name": "n", "labels": {"nvidia.com/gpu.present": "true"}}], None, {"taint": "nvidia.com/gpu"}), {}),
    "k8s_node_plan: name a list": (fk.k8s_node_plan, ([{"name": ["a"]}],), {}),
    "k8s_node_plan: extra_labels a list": (fk.k8s_node_plan, ([{"name": "n", "extra_labels": ["a=b"]}],), {}),
    "k8s_node_plan: device_plugin_configs a list": (fk.k8s_node_plan, (
        [{"name": "n", "labels": {"nvidia.com/gpu.present": "true"}, "device_plugin_config": "ts"}], None,
        {"device_plugin_configs": ["ts"]}), {}),
    "k8s_node_objects: plan None": (fk.k8s_node_objects, (None,), {}),
    "k8s_node_objects: nodes without labels": (fk.k8s_node_objects, ({"nodes": [{"name": "n"}]},), {}),
    "k8s_node_objects: current a list": (fk.k8s_node_objects, (
        {"nodes": [{"name": "n", "labels": {}, "taints": []}]}, ["n"]), {}),
    "k8s_placement: a string": (fk.k8s_placement, ("x",), {}),
    "k8s_placement: nodes None": (fk.k8s_placement, ({"nodes": None},), {}),
    "k8s_deploy_components: unknown workload": (fk.k8s_deploy_components, ("gpu",), {}),
    "k8s_deploy_components: sandbox mode unknown": (fk.k8s_deploy_components, ("vm-passthrough",),
                                                    {"sandbox_mode": "qemu"}),
    "k8s_device_plugin_data: a string": (fk.k8s_device_plugin_data, ("time-slicing",), {}),
    "k8s_device_plugin_data: a list": (fk.k8s_device_plugin_data, ([{"version": "v1"}],), {}),
    "k8s_device_plugin_data: flags a string": (fk.k8s_device_plugin_data, ({"a": {"flags": "x"}},), {}),
    "k8s_device_plugin_data: plugin a string": (fk.k8s_device_plugin_data, ({"a": {"flags": {"plugin": "x"}}},), {}),
    "k8s_device_plugin_data: sharing a list": (fk.k8s_device_plugin_data, ({"a": {"sharing": ["timeSlicing"]}},), {}),
    "k8s_device_plugin_data: resources a number": (fk.k8s_device_plugin_data, (
        {"a": {"sharing": {"timeSlicing": {"resources": 5}}}},), {}),
    "k8s_device_plugin_data: default name a list": (fk.k8s_device_plugin_data, ({}, ["default"]), {}),
    "k8s_mig_config_names: mig-configs a list": (fk.k8s_mig_config_names, ({"version": "v1", "mig-configs": ["a"]},), {}),
    "k8s_mig_config_names: entry a number": (fk.k8s_mig_config_names, ({"version": "v1", "mig-configs": {"a": [5]}},), {}),
    "k8s_mig_config_names: entries a number": (fk.k8s_mig_config_names, ({"version": "v1", "mig-configs": {"a": 5}},), {}),
    "k8s_mig_config_names: entries a string": (fk.k8s_mig_config_names, (
        {"version": "v1", "mig-configs": {"a": "all-disabled"}},), {}),
    "k8s_mig_config_names: None": (fk.k8s_mig_config_names, (None,), {}),
    "k8s_vgpu_config_names: default name a list": (fk.k8s_vgpu_config_names, (
        {"version": "v1", "vgpu-configs": {"a": [{"devices": "all", "vgpu-devices": {"A100-1-5C": 1}}]}}, ["a"]), {}),
    "k8s_vgpu_config_names: a string": (fk.k8s_vgpu_config_names, ("default",), {}),
    "k8s_image: None": (fk.k8s_image, (None,), {}),
    "k8s_image: a string": (fk.k8s_image, ("nvcr.io/nvidia/k8s-device-plugin:v0.17.4",), {}),
    "k8s_image: no image": (fk.k8s_image, ({"repository": "nvcr.io/nvidia"},), {}),
    "k8s_image: image a list": (fk.k8s_image, ({"image": ["k8s-device-plugin"]},), {}),
    "k8s_image: image empty": (fk.k8s_image, ({"image": ""},), {}),
    "k8s_image: registry a number": (fk.k8s_image, ({"image": "x"}, 5), {}),
    "k8s_image: version a mapping": (fk.k8s_image, ({"image": "x", "version": {"tag": "1"}},), {}),
    "k8s_image: image with whitespace": (fk.k8s_image, ({"image": "x y"},), {}),
    "k8s_name_refs: a string": (fk.k8s_name_refs, ("regcred",), {}),
    "k8s_name_refs: a number": (fk.k8s_name_refs, (5,), {}),
    "k8s_name_refs: a mapping": (fk.k8s_name_refs, ({"name": "regcred"},), {}),
    "k8s_name_refs: mappings": (fk.k8s_name_refs, ([{"name": "regcred"}],), {}),
    "k8s_node_label_objects: on a string": (fk.k8s_node_label_objects, ("node1",), {}),
    "k8s_node_label_objects: off a number": (fk.k8s_node_label_objects, (["n"], 5), {}),
    "k8s_node_label_objects: labels a list": (fk.k8s_node_label_objects, (["n"], None, ["a=b"]), {}),
    "k8s_node_label_objects: names of ints": (fk.k8s_node_label_objects, ([5],), {}),
    "k8s_labels_left_by: nodes a mapping": (fk.k8s_labels_left_by, ({"items": []}, ["m"], ["k"]), {}),
    "k8s_labels_left_by: managers a string": (fk.k8s_labels_left_by, ([], "nvidia-mig-manager", ["k"]), {}),
    "k8s_labels_left_by: keys missing": (fk.k8s_labels_left_by, ([], ["m"], None), {}),
    "k8s_labels_left_by: a node without a name": (fk.k8s_labels_left_by, ([{"metadata": {}}], ["m"], ["k"]), {}),
    "k8s_daemonset_ready_nodes: a mapping": (fk.k8s_daemonset_ready_nodes, ({"items": []}, []), {}),
    "k8s_daemonset_ready_nodes: status a string": (fk.k8s_daemonset_ready_nodes, (
        [{"metadata": {"name": "ds"}, "status": "Ready"}], []), {}),
    "k8s_daemonset_ready_nodes: nodes without names": (fk.k8s_daemonset_ready_nodes, ([], [{"metadata": {}}]), {}),
    "k8s_daemonset_ready_nodes: nodes a string": (fk.k8s_daemonset_ready_nodes, ([], "gpu-1"), {}),
    "k8s_ready_pod_nodes: a mapping": (fk.k8s_ready_pod_nodes, ({"items": []},), {}),
    "k8s_rollouts_pending: a mapping": (fk.k8s_rollouts_pending, ({"items": []},), {}),
    "k8s_rollouts_pending: status a string": (fk.k8s_rollouts_pending, ([{"metadata": {"name": "a"}, "status": "ok"}],), {}),
    "k8s_ready_pod_nodes: status a string": (fk.k8s_ready_pod_nodes, ([{"status": "Running"}],), {}),
    "k8s_ready_pod_nodes: conditions of strings": (fk.k8s_ready_pod_nodes, ([{"status": {"conditions": ["Ready"]}}],), {}),
    "k8s_validation_jobs: nodes a string": (fk.k8s_validation_jobs, ("node1", "gpuops-validate", "k"), {}),
    "k8s_validation_jobs: nodes of ints": (fk.k8s_validation_jobs, ([5], "gpuops-validate", "k"), {}),
    "k8s_validation_jobs: prefix None": (fk.k8s_validation_jobs, (["n"], None, "k"), {}),
    "k8s_validation_jobs: prefix not a DNS label": (fk.k8s_validation_jobs, (["n"], "Bad Prefix!", "k"), {}),
    "k8s_gpu_allocatable_split: a mapping": (fk.k8s_gpu_allocatable_split, ({"items": []},), {}),
    "k8s_gpu_allocatable_split: no metadata": (fk.k8s_gpu_allocatable_split, ([{}],), {}),
    "k8s_gpu_allocatable_split: allocatable a string": (fk.k8s_gpu_allocatable_split, (
        [{"metadata": {"name": "n"}, "status": {"allocatable": "x"}}],), {}),
    "k8s_named_objects: names a string": (fk.k8s_named_objects, ("job-a", "batch/v1", "Job"), {}),
    "k8s_named_objects: api_version None": (fk.k8s_named_objects, (["a"], None, "Job"), {}),
    "k8s_named_objects: kind empty": (fk.k8s_named_objects, (["a"], "batch/v1", ""), {}),
    "k8s_named_objects: namespace a number": (fk.k8s_named_objects, (["a"], "batch/v1", "Job", 5), {}),
    "k8s_named_objects: names of mappings": (fk.k8s_named_objects, ([{"name": "a"}], "batch/v1", "Job"), {}),
    "k8s_job_outcomes: resources of ints": (fk.k8s_job_outcomes, ([5], []), {}),
    "k8s_job_outcomes: resources a mapping": (fk.k8s_job_outcomes, ({"items": []}, []), {}),
    "k8s_job_outcomes: wanted a string": (fk.k8s_job_outcomes, ([], "job-a"), {}),
    "k8s_job_outcomes: status a string": (fk.k8s_job_outcomes, ([{"metadata": {"name": "j"}, "status": "Complete"}],
                                                                ["j"]), {}),
    "k8s_queue: queue a list": (fk.k8s_queue, ([], "m", []), {}),
    "k8s_queue: field manager None": (fk.k8s_queue, ({}, None, []), {}),
    "k8s_queue: objects a mapping": (fk.k8s_queue, ({}, "m", {"kind": "Namespace"}), {}),
    "k8s_queue: objects of strings": (fk.k8s_queue, ({}, "m", ["kind: Namespace"]), {}),
    "k8s_queue: queued objects a string": (fk.k8s_queue, ({"m": "x"}, "m", []), {}),
}


@pytest.mark.parametrize("case", sorted(FILTER_CASES))
def test_filter_refuses(case):
    fn, args, kwargs = FILTER_CASES[case]
    assert_filter_refuses(fn, *args, **kwargs)


def test_every_filter_is_covered():
    names = set(fd.FilterModule().filters()) | set(fk.FilterModule().filters())
    covered = set(c.split(":")[0] for c in FILTER_CASES)
    assert names <= covered, sorted(names - covered)


def test_filters_accept_generators_where_lists_are_expected():
    """Jinja's map/select hand filters generators: those are lists, not wrong types."""
    assert fk.k8s_job_outcomes(iter([]), (n for n in ["j"]))["missing"] == ["j"]
    assert fk.k8s_name_refs(n for n in ["a", "b"]) == [{"name": "a"}, {"name": "b"}]
    assert fk.k8s_named_objects(iter(["a"]), "batch/v1", "Job")[0]["metadata"] == {"name": "a"}
    assert [j["node"] for j in fk.k8s_validation_jobs(iter(["n1", "n2"]), "gpuops-validate", "k")] == ["n1", "n2"]
    assert fk.k8s_name_refs(None) == [] and fk.k8s_name_refs([]) == []


# --- module_utils raise the collection's own errors (the layers the modules and filters convert) ---------

def _module_utils_cases():
    from ansible_collections.gpuops.nvidia.plugins.module_utils import _driver, _files, _labels
    from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _doctor
    from ansible_collections.gpuops.nvidia.plugins.module_utils import _k8s_device_plugin as dp
    from ansible_collections.gpuops.nvidia.plugins.module_utils import _mig
    from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _k8s_jobs as kj
    from ansible_collections.gpuops.nvidia.plugins.module_utils import _k8s_labels as kl
    return {
        "node_plan: nodes a string": (kl.LabelPlanError, kl.node_plan, ("node1",)),
        "node_plan: current of strings": (kl.LabelPlanError, kl.node_plan, ([{"name": "n"}], {"n": "x"})),
        "node_plan: options a list": (kl.LabelPlanError, kl.node_plan, ([], None, ["x"])),
        "labels_from_inventory: count": (kl.LabelPlanError, kl.labels_from_inventory, ({"count": "x"},)),
        "render: configs a string": (dp.ConfigError, dp.render, ("x",)),
        "mig validate_config: entry a number": (_mig.MigError, _mig.validate_config,
                                                ({"version": "v1", "mig-configs": {"a": [5]}},)),
        "jobs: nodes a string": (kj.JobsInputError, kj.jobs, ("node1", "gpuops-validate", "k")),
        "outcomes: resources of ints": (kj.JobsInputError, kj.outcomes, ([5], [])),
        "diagnose: devices a string": (_doctor.DoctorInputError, _doctor.diagnose, ({"devices": "x"},)),
        "runtime_state: files a list": (_doctor.DoctorInputError, _doctor.runtime_pending, ({"files": ["x"]},)),
        "check_facts: os a string": (_driver.DriverPlanError, _driver.check_facts, ({"os": "ubuntu"},)),
        "parse_config: flags a string": (_labels.GFDConfigError, _labels.parse_config, ({"flags": "x"},)),
        "load_state: driver a path": (_vfio.VfioError, _vfio.load_state,
                                      ('{"devices": {"0000:41:00.0": {"original_driver": "../x"}}}',)),
        "read_text: a directory": (_files.FileError, _files.read_text, ("/",)),
    }


@pytest.mark.parametrize("case", sorted(_module_utils_cases()))
def test_module_utils_raise_their_own_errors(case):
    error, fn, args = _module_utils_cases()[case]
    with pytest.raises(error) as exc:
        fn(*args)
    assert len(str(exc.value)) >= 15, str(exc.value)
