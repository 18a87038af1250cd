"""Hostile node files, the rest of the readers: what vfio_pci, vgpu_devices (and its boot-time apply), driver_plan,
gpu_validate, container_runtime, mig_config (and its boot-time apply) and the shared file helpers read from a node may
be a FIFO, a socket, a device node, a directory or a sparse file of hundreds of megabytes.  None of them may hang,
flood memory or end in a traceback: each read is bounded and non-blocking, and what cannot be read becomes a warning,
a failed check or a refusal naming the file -- before anything changes.

Every call runs under a hard deadline (SIGALRM, or a subprocess timeout for the boot-time copy of the MIG apply), so a
read that blocks fails the test instead of hanging the suite."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import noderoots
from hostile_files import ALL, KINDS, deadline, hostile
from conftest import REPO, run_module

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures", "vfio"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures", "vgpu"))

from sysfs import GRACE, GRACE_ALIASES, make_tree, write_kernel  # noqa: E402
from vgpu_sysfs import Host  # noqa: E402

from ansible_collections.gpuops.nvidia.plugins.module_utils import (  # noqa: E402
    _container_runtime,
    _driver,
    _files,
    _mig,
    _sriov,
    _validate,
    _vfio,
    _vgpu,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import HostError  # noqa: E402
from ansible_collections.gpuops.nvidia.plugins.modules import driver_plan, vfio_pci  # noqa: E402

RELEASE = "6.8.0-1015-nvidia-64k"
GH200 = "0009:01:00.0"


def says(text, path, kind):
    """``text`` names the file (its last two parts) and what is wrong with it."""
    tail = "/".join(path.rstrip("/").split("/")[-2:])
    return tail in text and KINDS[kind][1] in text


# -- vfio_pci ----------------------------------------------------------------------------------------------------------

def grace(tmp_path):
    return write_kernel(make_tree(str(tmp_path / "node"), GRACE), RELEASE, GRACE_ALIASES)


VFIO_FILES = ["proc/sys/kernel/osrelease", "lib/modules/%s/modules.alias" % RELEASE,
              "sys/bus/pci/devices/%s/modalias" % GH200]


@pytest.mark.parametrize("kind", ALL)
@pytest.mark.parametrize("rel", VFIO_FILES)
def test_vfio_refuses_to_choose_a_driver_from_a_file_it_cannot_read(tmp_path, rel, kind):
    """The variant driver (nvgrace_gpu_vfio_pci on Grace Hopper) is chosen from these files: vfio-pci is never
    guessed when one cannot be read, and nothing hangs."""
    root = grace(tmp_path)
    path = hostile(os.path.join(root, rel), kind)
    with deadline(), pytest.raises(_vfio.VfioError) as exc:
        _vfio.plan(root, [GH200], "present")
    assert says(str(exc.value), path, kind), str(exc.value)


@pytest.mark.parametrize("release", ["../../../etc", "..", "6.8.0 x", "6.8.0/../../x", "6.8.0\x00", "\u0661.8"])
def test_vfio_refuses_a_kernel_release_that_is_not_one_path_component(tmp_path, release):
    """The release names the directory of modules.alias: what the node writes there never walks out of it."""
    root = grace(tmp_path)
    noderoots._write(root, "proc/sys/kernel/osrelease", release + "\n")
    with deadline(), pytest.raises(_vfio.VfioError, match="not a kernel release"):
        _vfio.plan(root, [GH200], "present")


@pytest.mark.parametrize("kind", ["fifo", "huge"])
def test_vfio_absent_needs_no_kernel_release(tmp_path, kind):
    devs = [dict(GRACE[0], driver="vfio-pci", override="vfio-pci")]
    root = write_kernel(make_tree(str(tmp_path / "node"), devs), RELEASE, GRACE_ALIASES)
    hostile(os.path.join(root, "proc/sys/kernel/osrelease"), kind)
    state = json.dumps({"devices": {GH200: {"original_driver": "nvidia", "persistent": True}}})
    with deadline():
        pl = _vfio.plan(root, [GH200], "absent", current_state_text=state)
    assert [(a["from"], a["to"]) for a in pl["actions"]] == [("vfio-pci", "nvidia")]


def test_vfio_module_fails_naming_a_fifo_modules_alias_and_changes_nothing(tmp_path, capsys):
    root = grace(tmp_path)
    path = hostile(os.path.join(root, VFIO_FILES[1]), "fifo")
    with deadline():
        rc, out = run_module(capsys, vfio_pci.main, {"devices": [GH200], "root": root})
    assert rc == 1 and says(out["msg"], path, "fifo"), out
    assert os.readlink(os.path.join(root, "sys/bus/pci/devices", GH200, "driver")).endswith("/nvidia")
    assert not os.path.lexists(os.path.join(root, _vfio.STATE_FILE.lstrip("/")))
    assert not os.path.lexists(os.path.join(root, _vfio.UDEV_RULES.lstrip("/")))


@pytest.mark.parametrize("kind", ALL)
def test_vfio_driver_override_read_before_a_bind_never_hangs(tmp_path, kind):
    """The driver_override a function had (put back on a rollback) is read best effort: unreadable is "none"."""
    root = grace(tmp_path)
    hostile(os.path.join(root, "sys/bus/pci/devices", GH200, "driver_override"), kind)
    with deadline():
        assert _vfio._override_of(root, GH200) is None


def test_vfio_bind_onto_a_fifo_driver_override_fails_and_rolls_back(tmp_path):
    root = grace(tmp_path)
    hostile(os.path.join(root, "sys/bus/pci/devices", GH200, "driver_override"), "fifo")
    os.makedirs(os.path.join(root, "sys/bus/pci/drivers/vfio-pci"))
    action = {"bdf": GH200, "group": "21", "from": "nvidia", "to": "vfio-pci"}
    with deadline(), pytest.raises(_vfio.BindError) as exc:
        _vfio.apply_actions(root, [action], lambda _m: None)
    assert "driver_override" in str(exc.value) and exc.value.restored[GH200][0] == "nvidia"


# -- vgpu_devices' boot-time apply -----------------------------------------------------------------------------------

@pytest.fixture
def vgpu_host(tmp_path, monkeypatch):
    h = Host(tmp_path / "root")
    monkeypatch.setattr(_sriov, "_write", h.write)
    pf = h.l40s()
    h.enable(pf)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"version": "v1", "vgpu-configs": {"default": [
        {"devices": "all", "vgpu-devices": {"L40S-4Q": 2}}]}}))
    return h, str(config), str(tmp_path / "cache.json")


def vgpu_apply(capsys, root, config, cache):
    with deadline():
        rc = _vgpu.main(["--config", config, "--name", "default", "--cache", cache, "--check", "--root", root])
    return rc, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("kind", ALL)
def test_vgpu_boot_apply_passes_over_a_name_cache_it_cannot_read_with_a_note(vgpu_host, capsys, kind):
    h, config, cache = vgpu_host
    hostile(cache, kind)
    rc, out = vgpu_apply(capsys, h.root, config, cache)
    assert rc == 0 and out["gpus"][0]["wanted"] == {"L40S-4Q": 2}, out
    assert [n for n in out["notes"] if says(n, cache, kind)], out["notes"]


@pytest.mark.parametrize("kind", ALL)
def test_vgpu_boot_apply_fails_in_one_line_on_a_config_it_cannot_read(vgpu_host, capsys, kind):
    h, config, cache = vgpu_host
    hostile(config, kind)
    rc, out = vgpu_apply(capsys, h.root, config, cache)
    assert rc == 1 and out["failed"] and says(out["msg"], config, kind), out


# -- driver_plan -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ALL)
@pytest.mark.parametrize("reader,rel", [(_driver.read_dpkg_installed, "var/lib/dpkg/status"),
                                        (_driver.read_dpkg_held, "var/lib/dpkg/status"),
                                        (_driver.read_versionlock, "etc/dnf/plugins/versionlock.list")])
def test_driver_package_databases_that_cannot_be_read_are_refused(tmp_path, reader, rel, kind):
    """What is installed and held decides the plan: a database that cannot be read is an error, never "nothing"."""
    path = hostile(str(tmp_path / rel), kind)
    with deadline(), pytest.raises(HostError) as exc:
        reader(str(tmp_path))
    assert says(str(exc.value), path, kind), str(exc.value)


def test_a_dpkg_status_of_tens_of_megabytes_is_read(tmp_path):
    stanza = "Package: pkg%d\nStatus: install ok installed\nVersion: 1.0-%d\nDescription: %s\n\n"
    text = "".join(stanza % (i, i, "x" * 400) for i in range(60000))     # ~28 MB: a big host's dpkg status
    assert len(text) > 24 * 1024 * 1024
    noderoots._write(str(tmp_path), "var/lib/dpkg/status", text)
    with deadline():
        assert len(_driver.read_dpkg_installed(str(tmp_path))) == 60000


@pytest.mark.parametrize("kind", ["fifo", "huge"])
def test_driver_plan_module_fails_naming_the_dpkg_status(tmp_path, capsys, kind):
    root = noderoots.build("h200", str(tmp_path / "node"))
    path = hostile(os.path.join(root, "var/lib/dpkg/status"), kind)
    with deadline():
        rc, out = run_module(capsys, driver_plan.main, {"root": root, "branch": "580", "_ansible_check_mode": True})
    assert rc == 1 and says(out["msg"], path, kind), out


def _holder(root, pid, comm_kind):
    fd = os.path.join(root, "proc", pid, "fd")
    os.makedirs(fd)
    os.symlink("/dev/nvidia0", os.path.join(fd, "3"))
    return hostile(os.path.join(root, "proc", pid, "comm"), comm_kind)


@pytest.mark.parametrize("kind", ALL)
def test_device_holders_with_a_comm_that_cannot_be_read(tmp_path, kind):
    root = str(tmp_path)
    path = _holder(root, "4242", kind)
    with deadline():
        assert _driver.device_holders(root) == [{"pid": 4242, "comm": None, "devices": ["/dev/nvidia0"]}]
    warnings = []
    _driver.device_holders(root, warnings)
    assert [w for w in warnings if says(w, path, kind)], warnings


def test_device_holders_skip_what_is_not_a_process_id(tmp_path):
    """str.isdigit() takes '\u00b2' (int() does not: a traceback) and int() takes Arabic-Indic digits (42): neither
    names a process under /proc."""
    root = str(tmp_path)
    for name in ("\u00b2", "\u0664\u0662"):
        fd = os.path.join(root, "proc", name, "fd")
        os.makedirs(fd)
        os.symlink("/dev/nvidia0", os.path.join(fd, "3"))
    noderoots._write(root, "proc/7/comm", "python3\n")
    os.makedirs(os.path.join(root, "proc/7/fd"))
    os.symlink("/dev/nvidiactl", os.path.join(root, "proc/7/fd/4"))
    with deadline():
        assert _driver.device_holders(root) == [{"pid": 7, "comm": "python3", "devices": ["/dev/nvidiactl"]}]


@pytest.mark.parametrize("kind", ALL)
def test_mok_list_that_cannot_be_read_is_a_warning(tmp_path, kind):
    root = str(tmp_path)
    noderoots._write(root, "var/lib/shim-signed/mok/MOK.der", b"\x30\x82cert")
    path = hostile(os.path.join(root, "sys/firmware/efi/mok-variables/MokListRT"), kind)
    with deadline():
        mok = _driver.read_mok(root, "ubuntu")
    assert mok == {"key_path": "/var/lib/shim-signed/mok/MOK.der", "key_present": True, "enrolled": False}
    warnings = []
    _driver.read_mok(root, "ubuntu", warnings=warnings)
    assert [w for w in warnings if says(w, path, kind)], warnings


@pytest.mark.parametrize("kind", ALL)
def test_a_mok_certificate_that_cannot_be_read_is_a_warning(tmp_path, kind):
    root = str(tmp_path)
    path = hostile(os.path.join(root, "etc/mok/mok.der"), kind)
    warnings = []
    with deadline():
        mok = _driver.read_mok(root, "ubuntu", "/etc/mok/mok.der", warnings)
    assert mok["key_present"] is False and [w for w in warnings if says(w, path, kind)], warnings


# -- gpu_validate ------------------------------------------------------------------------------------------------------

class OneGPU(object):
    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return "580.95.05"

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, _h):
        return "GPU-11111111-0000-0000-0000-000000000000"

    def nvmlDeviceGetName(self, _h):
        return "NVIDIA L40S"


def check(name, **options):
    ctx = _validate.Context(options, nvml_loader=lambda: [(OneGPU(), "pynvml")])
    with deadline():
        return _validate.run_check(name, ctx)


@pytest.mark.parametrize("kind", ALL)
def test_validate_driver_check_reports_a_version_file_it_cannot_read(tmp_path, kind):
    path = hostile(str(tmp_path / "proc/driver/nvidia/version"), kind)
    r = check("driver", proc_version=path)
    assert r["ok"] is False and says(r["error"], path, kind), r["error"]
    assert "unexpected" not in r["error"]


@pytest.mark.parametrize("kind", ALL)
def test_validate_device_plugin_check_reports_a_checkpoint_it_cannot_read(tmp_path, kind):
    path = hostile(str(tmp_path / "kubelet/device-plugins/kubelet_internal_checkpoint"), kind)
    r = check("device_plugin", kubelet_dir=str(tmp_path / "kubelet"))
    assert r["ok"] is False and says(r["error"], path, kind), r["error"]
    assert "unexpected" not in r["error"]


def test_validate_reports_a_huge_cdi_spec_without_reading_it(tmp_path):
    path = hostile(str(tmp_path / "cdi/nvidia.yaml"), "huge")
    with deadline():
        specs, errors = _validate.read_cdi_specs([str(tmp_path / "cdi")])
    assert specs == [] and [e for e in errors if says(e, path, "huge")], errors


@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
def test_validate_passes_over_a_cdi_spec_that_is_not_a_file(tmp_path, kind):
    hostile(str(tmp_path / "cdi/nvidia.yaml"), kind)
    with deadline():
        assert _validate.read_cdi_specs([str(tmp_path / "cdi")]) == ([], [])


# -- container_runtime: the daemon's pid file and /proc/<pid>/stat --------------------------------------------------

class Module(object):
    """What Daemon needs of an AnsibleModule: no tools found, no command run."""

    def get_bin_path(self, _name, required=False):
        return None

    def run_command(self, argv, **_kw):   # pragma: no cover - never reached
        raise AssertionError("no command expected: %r" % (argv,))


@pytest.fixture
def kills(monkeypatch):
    """Every os.kill the code makes, recorded instead of sent (a pid file of '-1' would signal every process)."""
    sent = []
    monkeypatch.setattr(_container_runtime.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    return sent


def restart_by_signal(pid_file):
    daemon = _container_runtime.Daemon(Module(), {"runtime": "containerd", "restart_mode": "signal",
                                                  "pid_file": pid_file, "restart_timeout": 1})
    with deadline():
        return daemon.restart()


@pytest.mark.parametrize("kind", ALL)
def test_restart_by_signal_fails_on_a_pid_file_it_cannot_read(tmp_path, kills, kind):
    path = hostile(str(tmp_path / "run/containerd.pid"), kind)
    ok, why = restart_by_signal(path)
    assert ok is False and says(why, path, kind), why
    assert kills == []


@pytest.mark.parametrize("text", ["-1\n", "0x10", "\u0661\u0662", "1 2", "99999999999999999999", "+5", " -1 "])
def test_restart_by_signal_never_signals_what_is_not_a_process_id(tmp_path, kills, text):
    path = str(tmp_path / "containerd.pid")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    ok, why = restart_by_signal(path)
    assert ok is False and "containerd.pid" in why and repr(text.strip()) in why, why
    assert kills == []


@pytest.mark.parametrize("kind", ALL)
def test_alive_is_false_for_a_stat_file_it_cannot_read(tmp_path, kind):
    hostile(str(tmp_path / "4242/stat"), kind)
    with deadline():
        assert _container_runtime._alive(4242, proc=str(tmp_path)) is False


def test_alive_reads_a_process_state(tmp_path):
    noderoots._write(str(tmp_path), "4242/stat", "4242 (contai)nerd) S 1 4242\n")
    noderoots._write(str(tmp_path), "4243/stat", "4243 (containerd) Z 1 4243\n")
    assert _container_runtime._alive(4242, proc=str(tmp_path)) is True
    assert _container_runtime._alive(4243, proc=str(tmp_path)) is False


# -- mig_config's boot-time apply ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ALL)
def test_mig_boot_apply_fails_in_one_line_on_a_config_it_cannot_read(tmp_path, capsys, kind):
    path = hostile(str(tmp_path / "config.json"), kind)
    with deadline():
        rc = _mig.main(["--config", path, "--name", "all-balanced", "--check"], lib=object())
    out = json.loads(capsys.readouterr().out)
    assert rc == 1 and out["failed"] and says(out["msg"], path, kind), out


@pytest.mark.parametrize("kind", ["fifo", "huge"])
def test_the_standalone_mig_apply_copy_never_hangs_either(tmp_path, kind):
    """The mig_layout role copies _mig.py alone to the host (mig_apply.py): run it so, outside the collection
    (python -I -S: no site-packages, nothing of the collection importable)."""
    script = str(tmp_path / "mig_apply.py")
    shutil.copy(os.path.join(REPO, "plugins/module_utils/_mig.py"), script)
    path = hostile(str(tmp_path / "config.json"), kind)
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", script, "--config", path, "--name", "x", "--check"],
                              capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("mig_apply.py still reading %s after 30 s" % path)
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and says(out["msg"], path, kind), (proc.stdout, proc.stderr)


# -- _files: the read helpers of every module that edits a file ---------------------------------------------------------

def test_files_refuse_a_config_larger_than_their_bound(tmp_path):
    path = hostile(str(tmp_path / "etc/containerd/config.toml"), "huge")
    for read in (_files.read_bytes_of, _files.read_text):
        with deadline(), pytest.raises(_files.FileError) as exc:
            read(path)
        assert says(str(exc.value), path, "huge"), str(exc.value)


def test_files_read_a_config_of_a_few_megabytes(tmp_path):
    text = "".join("[plugins.'x%d']\n  key = 'value'\n" % i for i in range(150000))   # ~4.5 MB
    path = tmp_path / "config.toml"
    path.write_text(text)
    assert len(text) > 4 * 1024 * 1024
    with deadline():
        assert _files.read_text(str(path)) == text


@pytest.mark.parametrize("kind", ALL)
def test_files_name_what_is_not_a_readable_regular_file(tmp_path, kind):
    path = hostile(str(tmp_path / "etc/crio/crio.conf.d/99-nvidia.toml"), kind)
    with deadline(), pytest.raises(_files.FileError) as exc:
        _files.read_text(path)
    assert says(str(exc.value), path, kind), str(exc.value)
    assert isinstance(exc.value, OSError) and isinstance(exc.value, HostError)


# -- sysfs writes (vfio_pci, sriov_vfs, vgpu_devices share _pci.write_attr) --------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_sriov_count_written_onto_something_not_an_attribute_fails_at_once(tmp_path, kind):
    pf = "0000:41:00.0"
    dev = tmp_path / "sys" / "bus" / "pci" / "devices" / pf
    dev.mkdir(parents=True)
    hostile(str(dev / "sriov_numvfs"), kind)
    with deadline(), pytest.raises(OSError) as exc:
        _sriov._set_count(str(tmp_path), {"bdf": pf, "method": "sysfs"}, None, 0, 4, 1)
    assert "not a regular file" in str(exc.value) and "sriov_numvfs" in str(exc.value)
