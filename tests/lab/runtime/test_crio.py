# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""CRI-O for real: the container_runtime module against a running CRI-O daemon.

CRI-O v1.34 is built from its Go module (with pinns compiled from the same module's source and crictl from
cri-tools'), conmon and runc come from Debian, NVIDIA's nvidia-container-runtime from the GPU bundle's
toolkit build (``make kubenode-bin``).  The daemon runs under a temporary directory (criod.py), pulls from
a registry in this process (ociregistry.py) and is restarted by the module through ``restart_mode:
command``.  What is checked is what CRI-O itself reports: ``crio config`` (the files merged),
``crio status config`` (the running daemon), and the conmon process that runs each container (its
``-r`` names the runtime binary CRI-O picked for the pod's handler).
"""
from __future__ import annotations

import glob
import os
import socket
import subprocess
import sys
import time
import tomllib
import types

import pytest

from conftest import CACHE, ROOT

sys.path.insert(0, os.path.dirname(__file__))
from criod import Crio  # noqa: E402  pylint: disable=wrong-import-position
from ociregistry import Registry  # noqa: E402  pylint: disable=wrong-import-position

CRIO_VERSION = os.environ.get("CRIO_VERSION", "v1.34.0")
CRIO_BIN = os.path.join(CACHE, "runtime", "crio-" + CRIO_VERSION, "bin")
GPU_BIN = os.path.join(CACHE, "gpu", "bin")
NVIDIA_RT = os.path.join(GPU_BIN, "nvidia-container-runtime")
RUNC = "/usr/sbin/runc" if os.path.exists("/usr/sbin/runc") else "/usr/bin/runc"
NEEDED = [os.path.join(CRIO_BIN, b) for b in ("crio", "pinns", "crictl")] + \
    [os.path.join(GPU_BIN, b) for b in ("busybox", "pause", "nvidia-container-runtime")] + ["/usr/bin/conmon", RUNC]
SITE_DROP_IN = '[crio.runtime]\nlog_size_max = 1048576\n'


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    missing = [p for p in NEEDED if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail("missing %s: run `make runtime-crio kubenode-bin` (conmon, runc: `make runtime-apt`)" % missing)
    d = str(tmp_path_factory.mktemp("crio"))
    tar = os.path.join(d, "busybox.tar")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "lab", "gpu", "node", "mkimage.py"),
                    "--name", "gpuops/busybox:lab", "--busybox", os.path.join(GPU_BIN, "busybox"),
                    "--bin", os.path.join(GPU_BIN, "pause"), "--out", tar], check=True, capture_output=True)
    reg = Registry({"gpuops/busybox:lab": tar})
    addr = reg.start()
    image = addr + "/gpuops/busybox:lab"
    crio = Crio(CRIO_BIN, os.path.join(d, "daemon"), addr, image, runc=RUNC, path_dirs=[GPU_BIN])
    with open(os.path.join(crio.confd, "10-site.toml"), "w") as f:
        f.write(SITE_DROP_IN)
    crio.start()
    yield types.SimpleNamespace(crio=crio, reg=reg, image=image, dir=d, drop=os.path.join(crio.confd, "99-nvidia.toml"))
    crio.stop()
    reg.stop()


def module_args(lab, **kw):
    args = {"runtime": "crio", "config_path": lab.drop, "runtime_path": NVIDIA_RT,
            "runtime_config": {"runtime_root": os.path.join(lab.crio.dir, "run", "nvidia")},
            "restart_mode": "command", "restart_command": [lab.crio.restart_script], "socket": lab.crio.socket,
            "binary_path": lab.crio.binary, "crio_config": os.path.join(lab.crio.dir, "crio.conf"),
            "state_dir": os.path.join(lab.dir, "state"), "restart_timeout": 60}
    args.update(kw)
    return args


def running(lab):
    return tomllib.loads(lab.crio.running_config())["crio"]["runtime"]


def read(path):
    with open(path, "rb") as f:
        return f.read()


def run_and_see_runtime(lab, name, handler=""):
    """Run one pod (optionally naming a runtime handler); the runtime binary its conmon runs and its output."""
    pod, ctr = lab.crio.run_pod(name, lab.image, ["sh", "-c", "echo ran-%s; exec sleep 600" % name], handler)
    try:
        binary = lab.crio.conmon_runtime(ctr) or "no conmon for %s among %s" % (ctr, lab.crio.processes())
        state = os.path.isdir(os.path.join(lab.crio.dir, "run", "nvidia", ctr))
        logs = lab.crio.logs(ctr)
    finally:
        lab.crio.remove_pod(pod)
    return binary, state, logs


def test_check_mode_writes_nothing_and_shows_the_drop_in(lab, ansible):
    res = ansible.module("gpuops.nvidia.container_runtime", module_args(lab), check=True, diff=True)
    assert res["changed"] and not res.get("failed"), res
    assert "runtimes.nvidia" in str(res["diff"]) and NVIDIA_RT in str(res["diff"]), res["diff"]
    assert not os.path.exists(lab.drop)
    assert lab.crio.restarts() == 0


def test_present_puts_the_runtime_in_the_running_daemon(lab, ansible):
    res = ansible.module("gpuops.nvidia.container_runtime", module_args(lab))
    assert res["changed"] and res["restarted"] and res["validated"] and not res.get("failed"), res
    assert res["effective_runtime"]["runtime_path"] == NVIDIA_RT, res
    assert lab.crio.restarts() == 1 and lab.crio.alive()
    rt = running(lab)
    assert rt["runtimes"]["nvidia"]["runtime_path"] == NVIDIA_RT
    assert rt["runtimes"]["nvidia"]["runtime_type"] == "oci"
    assert rt["runtimes"]["nvidia"]["runtime_root"] == os.path.join(lab.crio.dir, "run", "nvidia")
    assert rt["default_runtime"] == "runc"          # the site's choice stands
    assert rt["log_size_max"] == 1048576            # the site's other drop-in still applies
    with open(os.path.join(lab.crio.confd, "10-site.toml")) as f:
        assert f.read() == SITE_DROP_IN


def test_second_run_changes_nothing(lab, ansible):
    res = ansible.module("gpuops.nvidia.container_runtime", module_args(lab))
    assert not res["changed"] and not res.get("restarted"), res
    assert lab.crio.restarts() == 1


def test_a_pod_of_handler_nvidia_runs_through_nvidia_container_runtime(lab):
    binary, state, logs = run_and_see_runtime(lab, "handler-nvidia", "nvidia")
    assert binary == NVIDIA_RT
    assert state, "no runc state under the nvidia handler's runtime_root"
    assert "ran-handler-nvidia" in logs
    assert lab.reg.pulled("gpuops/busybox"), "CRI-O did not pull the image from the lab registry"
    # the control: a pod that names no handler gets the site's default, runc itself
    binary, state, logs = run_and_see_runtime(lab, "handler-default")
    assert binary == RUNC and not state and "ran-handler-default" in logs


def test_set_as_default_gives_unnamed_pods_the_nvidia_runtime(lab, ansible):
    res = ansible.module("gpuops.nvidia.container_runtime", module_args(lab, set_as_default=True))
    assert res["changed"] and res["restarted"] and not res.get("failed"), res
    assert running(lab)["default_runtime"] == "nvidia"
    binary, _state, logs = run_and_see_runtime(lab, "default-nvidia")
    assert binary == NVIDIA_RT and "ran-default-nvidia" in logs
    res = ansible.module("gpuops.nvidia.container_runtime", module_args(lab, set_as_default=False))
    assert res["changed"] and res["restarted"], res
    assert running(lab)["default_runtime"] == "runc"


def test_a_runtime_path_crio_would_ignore_is_restored(lab, ansible):
    """CRI-O starts without a runtime whose binary is missing (it logs "is being ignored"): the module reads the
    running configuration, finds the runtime gone, puts the drop-in back and restarts CRI-O on it."""
    before, restarts = read(lab.drop), lab.crio.restarts()
    missing = os.path.join(lab.dir, "not-installed", "nvidia-container-runtime")
    res = ansible.module("gpuops.nvidia.container_runtime", module_args(lab, runtime_path=missing))
    assert res.get("failed") and res["restored"], res
    assert "without runtime 'nvidia'" in res["msg"] and "is running again" in res["msg"], res["msg"]
    assert "is being ignored" in lab.crio.log_tail(400)
    assert read(lab.drop) == before
    assert lab.crio.restarts() == restarts + 2 and lab.crio.alive()
    assert running(lab)["runtimes"]["nvidia"]["runtime_path"] == NVIDIA_RT
    res = ansible.module("gpuops.nvidia.container_runtime", module_args(lab))
    assert not res["changed"], res                  # nothing pending: the restore completed


def test_a_value_crio_rejects_is_refused_before_anything_changes(lab, ansible):
    before, restarts = read(lab.drop), lab.crio.restarts()
    res = ansible.module("gpuops.nvidia.container_runtime",
                         module_args(lab, runtime_config={"privileged_without_host_devices": "yes"}))
    assert res.get("failed") and not res["changed"], res
    assert "CRI-O rejects the new configuration" in res["msg"], res["msg"]
    assert read(lab.drop) == before and lab.crio.restarts() == restarts


def test_absent_takes_the_runtime_out_of_crio(lab, ansible):
    res = ansible.module("gpuops.nvidia.container_runtime", module_args(lab, state="absent"))
    assert res["changed"] and res["restarted"] and not res.get("failed"), res
    assert not os.path.exists(lab.drop)             # the module made the file: it goes
    rt = running(lab)
    assert "nvidia" not in rt["runtimes"] and rt["default_runtime"] == "runc"
    refused = lab.crio.crictl("runp", "--runtime", "nvidia", os.path.join(lab.crio.dir, "handler-nvidia-pod.json"),
                              check=False)
    assert refused.returncode != 0 and "nvidia" in refused.stderr, refused.stderr[-1000:]
    res = ansible.module("gpuops.nvidia.container_runtime", module_args(lab, state="absent"))
    assert not res["changed"], res


def test_stop_leaves_nothing_running(lab):
    lab.crio.stop()
    assert not lab.crio.alive()
    assert not lab.crio.processes()
    with open("/proc/mounts", encoding="utf-8") as f:
        mounts = [line for line in f if lab.crio.dir in line]
    assert not mounts, mounts


def test_a_daemon_that_never_answers_does_not_hold_the_task(ansible, tmp_path):
    """A socket that accepts and never answers (a hung CRI-O): the read of its running configuration is cut off
    (coreutils timeout) and the module fails, restoring, instead of waiting for ever."""
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(tmp_path / "silent.sock"))
    silent.listen(16)  # the kernel completes the connections; nothing reads or answers them
    confd = tmp_path / "crio.conf.d"
    confd.mkdir()
    t0 = time.time()
    try:
        res = ansible.module("gpuops.nvidia.container_runtime", {
            "runtime": "crio", "config_path": str(confd / "99-nvidia.toml"), "runtime_path": RUNC,
            "restart_mode": "command", "restart_command": ["true"], "socket": str(tmp_path / "silent.sock"),
            "binary_path": os.path.join(CRIO_BIN, "crio"), "restart_timeout": 3, "state_dir": str(tmp_path / "state")})
    finally:
        silent.close()
    assert res.get("failed") and "`crio status config` failed" in res["msg"] and res["restored"], res
    assert time.time() - t0 < 60
    assert not os.path.exists(confd / "99-nvidia.toml")     # the file the module made is gone again


def test_crio_config_sees_the_runtime(ansible, tmp_path):
    """The drop-in merged by `crio config` with a site drop-in beside it (no daemon)."""
    confd = tmp_path / "crio.conf.d"
    confd.mkdir()
    (confd / "10-site.toml").write_text("[crio.runtime]\nlog_level = \"debug\"\n")
    drop = str(confd / "99-nvidia.toml")
    res = ansible.module("gpuops.nvidia.container_runtime", {
        "runtime": "crio", "config_path": drop, "runtime_path": RUNC, "set_as_default": True, "restart_mode": "none",
        "binary_path": os.path.join(CRIO_BIN, "crio"), "state_dir": str(tmp_path / "state")})
    assert res["changed"] and res["validated"] and not res.get("failed"), res
    proc = subprocess.run([os.path.join(CRIO_BIN, "crio"), "--config", "", "--config-dir", str(confd), "--root",
                           str(tmp_path / "root"), "--runroot", str(tmp_path / "run"), "config"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rt = tomllib.loads(proc.stdout)["crio"]["runtime"]
    assert rt["default_runtime"] == "nvidia"
    assert rt["runtimes"]["nvidia"]["runtime_path"] == RUNC
    assert rt["runtimes"]["nvidia"]["runtime_type"] == "oci"
    assert rt["log_level"] == "debug"          # the other drop-in still applies
    assert not glob.glob(str(tmp_path / "state" / "tmp" / "*"))     # no validation candidate left behind
