# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""container_runtime against a real dockerd (Debian's docker.io) with its own dirs and socket."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

BIN = "/usr/bin/nvidia-container-runtime"
RESTART_SH = """#!/bin/sh
D=%(dir)s
if [ -s $D/pid ] && kill -0 "$(cat $D/pid)" 2>/dev/null; then
  kill "$(cat $D/pid)"
  i=0; while kill -0 "$(cat $D/pid)" 2>/dev/null && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done
fi
rm -f $D/docker.sock
echo "--- restart" >> $D/daemon.log
setsid dockerd --config-file $D/daemon.json --data-root $D/data --exec-root $D/exec -H unix://$D/docker.sock \\
  --pidfile $D/docker.pid --iptables=false --ip6tables=false --bridge=none >> $D/daemon.log 2>&1 < /dev/null &
echo $! > $D/pid
echo restarted >> $D/restarts
"""


class Dockerd(object):
    def __init__(self, d):
        self.dir = d
        self.config = os.path.join(d, "daemon.json")
        self.socket = os.path.join(d, "docker.sock")
        self.script = os.path.join(d, "restart.sh")
        with open(self.script, "w") as f:
            f.write(RESTART_SH % {"dir": d})
        os.chmod(self.script, 0o755)

    def start(self):
        subprocess.run([self.script], check=True)
        open(os.path.join(self.dir, "restarts"), "w").close()
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.info():
                return
            time.sleep(0.5)
        raise AssertionError("dockerd did not start:\n" + open(os.path.join(self.dir, "daemon.log")).read()[-3000:])

    def info(self):
        proc = subprocess.run(["docker", "-H", "unix://" + self.socket, "info", "--format", "{{json .}}"],
                              capture_output=True, text=True)
        return json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else None

    def restarts(self):
        return len(open(os.path.join(self.dir, "restarts")).read().split())

    def stop(self):
        try:
            pid = int(open(os.path.join(self.dir, "pid")).read())
            os.kill(pid, 15)
            for _ in range(100):
                os.kill(pid, 0)
                time.sleep(0.1)
        except (OSError, ValueError):
            pass

    def args(self, **kw):
        a = {"runtime": "docker", "config_path": self.config, "socket": self.socket, "restart_mode": "command",
             "restart_command": [self.script], "restart_timeout": 60}
        a.update(kw)
        return a


@pytest.fixture
def dockerd():
    if not shutil.which("dockerd") or not shutil.which("docker") or os.geteuid() != 0:
        pytest.skip("needs root, dockerd and docker (make runtime-deps installs docker.io)")
    d = tempfile.mkdtemp(prefix="gpuops-dockerd-", dir="/tmp")
    with open(os.path.join(d, "daemon.json"), "w") as f:
        json.dump({"log-driver": "json-file", "log-opts": {"max-size": "10m"},
                   "runtimes": {"runc-debug": {"path": "/usr/bin/runc", "runtimeArgs": ["--debug"]}}}, f, indent=2)
    daemon = Dockerd(d)
    daemon.start()
    yield daemon
    daemon.stop()
    subprocess.run(["umount", "-R", os.path.join(d, "exec")], capture_output=True)
    shutil.rmtree(d, ignore_errors=True)


def test_dockerd_merge_restart_once(ansible, dockerd):
    args = dockerd.args(set_as_default=True, enable_cdi=True)
    res = ansible.module("gpuops.nvidia.container_runtime", args)
    assert res["changed"] and res["restarted"] and not res.get("failed"), res
    info = dockerd.info()
    assert info["DefaultRuntime"] == "nvidia"
    assert info["Runtimes"]["nvidia"]["path"] == BIN
    assert "runc-debug" in info["Runtimes"]
    assert info["LoggingDriver"] == "json-file"
    again = ansible.module("gpuops.nvidia.container_runtime", args)
    assert not again["changed"] and not again["restarted"]
    assert dockerd.restarts() == 1


def test_dockerd_fault_restores(ansible, dockerd):
    before = open(dockerd.config).read()
    res = ansible.module("gpuops.nvidia.container_runtime", dockerd.args(runtime_config={"runtimeArgs": "not-a-list"}))
    assert res.get("failed") and res["restored"], res
    assert open(dockerd.config).read() == before
    assert dockerd.info() is not None


def test_dockerd_signal_reloads_runtimes(ansible, dockerd):
    """restart_mode=signal: dockerd reloads `runtimes` and `default-runtime` on SIGHUP, no restart."""
    args = dockerd.args(restart_mode="signal", pid_file=os.path.join(dockerd.dir, "docker.pid"), set_as_default=True)
    del args["restart_command"]
    res = ansible.module("gpuops.nvidia.container_runtime", args)
    assert res["changed"] and res["restarted"] and not res.get("failed"), res
    deadline = time.time() + 20
    while time.time() < deadline and "nvidia" not in (dockerd.info() or {}).get("Runtimes", {}):
        time.sleep(0.5)
    info = dockerd.info()
    assert info["Runtimes"]["nvidia"]["path"] == BIN and info["DefaultRuntime"] == "nvidia"
    assert dockerd.restarts() == 0
