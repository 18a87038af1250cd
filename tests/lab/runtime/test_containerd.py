# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""container_runtime against real containerd daemons (1.6 from Debian, 2.x built from Go modules)."""
from __future__ import annotations

import os
import signal

from conftest import fixture_text

NVIDIA_BIN = "/usr/bin/nvidia-container-runtime"


def cri(dump):
    plugins = dump["plugins"]
    return plugins.get("io.containerd.cri.v1.runtime") or plugins["io.containerd.grpc.v1.cri"]


def custom_config(daemon):
    if daemon.label == "containerd-1.6":
        return fixture_text("containerd", "v2-custom.toml")
    return fixture_text("containerd", "v3-custom.toml")


def assert_lines_kept(before, after, edited=()):
    """Every line of the original file is still there, in the same order
    (except lines holding a key the task was asked to change)."""
    it = iter(after.splitlines())
    for line in before.splitlines():
        if any(e in line for e in edited):
            continue
        for candidate in it:
            if candidate == line:
                break
        else:
            raise AssertionError("line lost or reordered: %r" % line)


def converge(ansible, daemon, **kw):
    first = ansible.module("gpuops.nvidia.container_runtime", daemon.module_args(**kw))
    assert not first.get("failed"), first.get("msg")
    assert first["changed"] and first["restarted"] and first["validated"], first
    assert daemon.restarts() == 1
    assert daemon.alive() and daemon.cri_ok(), daemon.log_tail()
    pid = daemon.pid()
    second = ansible.module("gpuops.nvidia.container_runtime", daemon.module_args(**kw))
    assert not second.get("failed"), second.get("msg")
    assert not second["changed"] and not second["restarted"], second
    assert daemon.restarts() == 1 and daemon.pid() == pid
    return first


def test_default_config(ansible, containerd):
    containerd.write_config(containerd.default_config())
    containerd.start()
    before = containerd.read_config()
    converge(ansible, containerd, enable_cdi=True)
    after = containerd.read_config()
    assert_lines_kept(before, after)
    rt = cri(containerd.dump())["containerd"]["runtimes"]
    nv, runc = rt["nvidia"], rt["runc"]
    assert nv["runtime_type"] == "io.containerd.runc.v2"
    assert nv["options"]["BinaryName"] == NVIDIA_BIN
    # inherited: every runc option is there with the same value
    for k, v in runc["options"].items():
        if k != "BinaryName":
            assert nv["options"][k] == v, k


def test_custom_config(ansible, containerd):
    containerd.write_config(custom_config(containerd))
    containerd.start()
    before = containerd.read_config()
    converge(ansible, containerd, set_as_default=True, enable_cdi=True)
    assert_lines_kept(before, containerd.read_config(), edited=["default_runtime_name"])
    dump = containerd.dump()
    c = cri(dump)
    rt = c["containerd"]["runtimes"]
    assert rt["nvidia"]["options"]["SystemdCgroup"] is True          # inherited from runc
    assert rt["nvidia"]["options"]["BinaryName"] == NVIDIA_BIN
    assert rt["runc"]["options"]["SystemdCgroup"] is True            # site settings intact
    assert rt["runsc"]["runtime_type"] == "io.containerd.runsc.v1"
    assert c["containerd"]["default_runtime_name"] == "nvidia"
    assert dump["oom_score"] == -999
    if containerd.label == "containerd-1.6":
        assert rt["nvidia"]["pod_annotations"] == ["example.com/trace"]
        assert c["sandbox_image"] == "registry.example.internal/pause:3.9"
        assert c["registry"]["config_path"] == "/etc/containerd/certs.d"
        # containerd 1.6 has no CDI support: the key is written but 1.6 ignores it
        # (config dump does not list it); CDI needs containerd 1.7+
        assert "enable_cdi = true" in containerd.read_config()
        assert "enable_cdi" not in c
    else:
        images = dump["plugins"]["io.containerd.cri.v1.images"]
        assert images["pinned_images"]["sandbox"] == "registry.example.internal/pause:3.10"
        assert images["registry"]["config_path"] == "/etc/containerd/certs.d"


def test_drop_in(ansible, containerd):
    containerd.write_config(custom_config(containerd))
    containerd.start()
    before = containerd.read_config()
    drop = os.path.join(containerd.dir, "conf.d", "99-nvidia.toml")
    converge(ansible, containerd, drop_in_path=drop)
    after = containerd.read_config()
    assert_lines_kept(before, after)
    assert drop in after  # only `imports` was added to the main file
    c = cri(containerd.dump())
    rt = c["containerd"]["runtimes"]
    assert rt["nvidia"]["options"]["BinaryName"] == NVIDIA_BIN
    assert rt["nvidia"]["options"]["SystemdCgroup"] is True
    assert rt["runsc"]["runtime_type"] == "io.containerd.runsc.v1"   # survived the plugin-table copy
    if containerd.label == "containerd-1.6":
        assert c["sandbox_image"] == "registry.example.internal/pause:3.9"


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def test_absent_gives_back_the_original_bytes(ansible, containerd):
    """present -> absent: the config is byte-identical to what it was before the first run,
    containerd restarted once more and runs without the runtime; a second absent does nothing."""
    containerd.write_config(custom_config(containerd))
    containerd.start()
    before = read_bytes(containerd.config)
    state_dir = os.path.join(containerd.dir, "gpuops-state")
    converge(ansible, containerd, set_as_default=True, enable_cdi=True, state_dir=state_dir)
    assert read_bytes(containerd.config) != before and os.listdir(state_dir)
    res = ansible.module("gpuops.nvidia.container_runtime",
                         containerd.module_args(state="absent", state_dir=state_dir), diff=True)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] and res["restarted"] and res["validated"], res
    assert res["restored_files"] == [containerd.config] and res["edited_files"] == []
    assert read_bytes(containerd.config) == before
    assert containerd.restarts() == 2
    assert containerd.alive() and containerd.cri_ok(), containerd.log_tail()
    c = cri(containerd.dump())
    assert "nvidia" not in c["containerd"]["runtimes"] and c["containerd"]["default_runtime_name"] == "runc"
    assert os.listdir(state_dir) == []
    again = ansible.module("gpuops.nvidia.container_runtime", containerd.module_args(state="absent", state_dir=state_dir))
    assert not again.get("failed") and not again["changed"] and not again["restarted"], again
    assert containerd.restarts() == 2


def test_absent_drop_in(ansible, containerd):
    """Drop-in mode: absent deletes the drop-in and gives back the main file byte for byte."""
    containerd.write_config(custom_config(containerd))
    containerd.start()
    before = read_bytes(containerd.config)
    state_dir = os.path.join(containerd.dir, "gpuops-state")
    drop = os.path.join(containerd.dir, "conf.d", "99-nvidia.toml")
    converge(ansible, containerd, drop_in_path=drop, state_dir=state_dir)
    res = ansible.module("gpuops.nvidia.container_runtime",
                         containerd.module_args(state="absent", state_dir=state_dir, drop_in_path=drop))
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] and res["restarted"] and res["removed_files"] == [drop], res
    assert read_bytes(containerd.config) == before and not os.path.exists(drop)
    assert containerd.alive() and containerd.cri_ok(), containerd.log_tail()
    assert "nvidia" not in cri(containerd.dump())["containerd"]["runtimes"]


def test_restart_fault_restores(ansible, containerd):
    """A runtime option that makes the CRI plugin fail to start: restored, running, failed with the reason."""
    containerd.write_config(custom_config(containerd))
    containerd.start()
    before = containerd.read_config()
    res = ansible.module("gpuops.nvidia.container_runtime", containerd.module_args(
        runtime_config={"base_runtime_spec": "/nonexistent/gpuops-spec.json"}, backup=True))
    assert res.get("failed"), res
    assert "CRI plugin failed to load" in res["msg"] and "/nonexistent/gpuops-spec.json" in res["msg"], res["msg"]
    assert res["restored"] is True
    assert containerd.read_config() == before
    assert containerd.restarts() == 2                     # the failed start + the restore
    assert containerd.alive() and containerd.cri_ok(), containerd.log_tail()


def test_validation_fault_writes_nothing(ansible, containerd):
    containerd.write_config(custom_config(containerd))
    containerd.start()
    before = containerd.read_config()
    pid = containerd.pid()
    res = ansible.module("gpuops.nvidia.container_runtime", containerd.module_args(
        runtime_config={"privileged_without_host_devices": "not-a-bool"}))
    assert res.get("failed") and "rejects the new configuration" in res["msg"], res
    assert containerd.read_config() == before
    assert containerd.restarts() == 0 and containerd.pid() == pid


def test_bad_input_writes_nothing(ansible, containerd):
    containerd.write_config("version = 2\n[plugins\n")
    before = containerd.read_config()
    res = ansible.module("gpuops.nvidia.container_runtime", containerd.module_args(restart_mode="none"))
    assert res.get("failed") and "not valid TOML" in res["msg"], res
    assert containerd.read_config() == before
    res = ansible.module("gpuops.nvidia.container_runtime", dict(containerd.module_args(), runtime="podman"))
    assert res.get("failed") and "runtime" in res["msg"], res
    assert containerd.read_config() == before


def test_check_mode_and_diff(ansible, containerd):
    containerd.write_config(custom_config(containerd))
    before = containerd.read_config()
    res = ansible.module("gpuops.nvidia.container_runtime", containerd.module_args(restart_mode="none"),
                         check=True, diff=True)
    assert res["changed"] and not res["restarted"], res
    assert containerd.read_config() == before
    assert "BinaryName" in res["diff"][0]["after"]


SUPERVISOR_SH = """#!/bin/sh
# A minimal supervisor (what systemd's Restart=always does): restart containerd whenever it exits.
D=%(dir)s
while [ ! -e $D/stop ]; do
  %(binary)s --config $D/config.toml --root $D/root --state $D/state --address $D/containerd.sock >> $D/daemon.log 2>&1 &
  echo $! > $D/pid
  echo started >> $D/starts
  wait $!
  sleep 0.2
done
"""


def test_signal_mode_under_a_supervisor(ansible, containerd):
    """restart_mode=signal: SIGHUP makes containerd exit; the supervisor starts it with the new config."""
    import subprocess
    import time
    containerd.write_config(custom_config(containerd))
    sup = os.path.join(containerd.dir, "supervise.sh")
    with open(sup, "w") as f:
        f.write(SUPERVISOR_SH % {"dir": containerd.dir, "binary": containerd.binary})
    os.chmod(sup, 0o755)
    # SIGHUP at its default action, as systemd starts a daemon: an ignored SIGHUP is inherited through exec, so
    # under nohup (or any runner that ignores it) containerd would outlive the module's signal
    proc = subprocess.Popen(["setsid", sup], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    try:
        containerd.wait_ready()
        old = containerd.pid()
        args = containerd.module_args(restart_mode="signal", pid_file=os.path.join(containerd.dir, "pid"))
        del args["restart_command"]
        res = ansible.module("gpuops.nvidia.container_runtime", args)
        assert res["changed"] and res["restarted"] and not res.get("failed"), (res.get("msg"), res)
        assert containerd.pid() != old and containerd.cri_ok()
        rt = cri(containerd.dump())["containerd"]["runtimes"]
        assert rt["nvidia"]["options"]["BinaryName"] == NVIDIA_BIN
        with open(os.path.join(containerd.dir, "starts")) as f:
            assert len(f.read().split()) == 2
    finally:
        open(os.path.join(containerd.dir, "stop"), "w").close()
        containerd.stop()
        for _ in range(50):
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        if proc.poll() is None:
            proc.kill()
