# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""Runtime lane: real containerd daemons driven through real Ansible.

Each daemon runs as root with its own --root/--state/--address under a
temporary directory, so the lane never touches a host containerd.  The module
is invoked with ``ansible localhost -m gpuops.nvidia.container_runtime`` (the
real AnsiballZ path) and its JSON result is read through the ansible.posix.json
callback.  The restart is done the way a non-systemd supervisor would do it:
``restart_mode: command`` with a generated script that stops the daemon and
starts it again with the same flags.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "unit", "fixtures", "runtime")
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
CACHE = os.environ.get("GPUOPS_CACHE", os.path.expanduser("~/.cache/gpuops"))


def _containerd_binaries():
    found = []
    if shutil.which("containerd"):
        found.append(("containerd-1.6", shutil.which("containerd"), shutil.which("ctr")))
    for entry in sorted(os.listdir(os.path.join(CACHE, "runtime"))) if os.path.isdir(os.path.join(CACHE, "runtime")) else []:
        if entry.startswith("containerd-v2"):
            b = os.path.join(CACHE, "runtime", entry, "bin")
            if os.path.exists(os.path.join(b, "containerd")):
                ctr = os.path.join(b, "ctr") if os.path.exists(os.path.join(b, "ctr")) else shutil.which("ctr")
                found.append((entry.replace("containerd-v", "containerd-"), os.path.join(b, "containerd"), ctr))
    return found


CONTAINERDS = _containerd_binaries()


@pytest.fixture(scope="session")
def collections_path(tmp_path_factory):
    """A private copy of the installed collection (other jobs may reinstall .collections)."""
    src = os.path.join(ROOT, ".collections")
    if not os.path.isdir(os.path.join(src, "ansible_collections", "gpuops", "nvidia")):
        pytest.fail("run `make install` first")
    dst = tmp_path_factory.mktemp("collections")
    shutil.copytree(src, str(dst), dirs_exist_ok=True, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    return str(dst)


class Ansible(object):
    def __init__(self, collections_path):
        self.env = dict(os.environ)
        self.env.update({
            "ANSIBLE_COLLECTIONS_PATH": collections_path,
            "ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"),
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
            "ANSIBLE_NOCOLOR": "1",
        })

    def module(self, name, args, check=False, diff=False):
        """Run one module on localhost; returns its result dict."""
        # an explicit host list: the repository's ansible.cfg points at the lab inventory
        cmd = [os.path.join(VENV_BIN, "ansible"), "localhost", "-i", "localhost,", "-c", "local", "-m", name, "-a", json.dumps(args)]
        if check:
            cmd.append("--check")
        if diff:
            cmd.append("--diff")
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True, cwd=ROOT)
        start = proc.stdout.find("{")
        try:
            data = json.loads(proc.stdout[start:])
        except ValueError:
            raise AssertionError("no JSON from ansible (rc=%d):\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr))
        return data["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.fixture(scope="session")
def ansible(collections_path):
    return Ansible(collections_path)


RESTART_SH = """#!/bin/sh
# What systemd would do for this lab daemon: stop it, start it with the same flags.
D=%(dir)s
if [ -s $D/pid ] && kill -0 "$(cat $D/pid)" 2>/dev/null; then
  kill "$(cat $D/pid)"
  i=0; while kill -0 "$(cat $D/pid)" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
fi
echo "--- restart $(date +%%s.%%N)" >> $D/daemon.log
setsid %(binary)s --config $D/config.toml --root $D/root --state $D/state --address $D/containerd.sock >> $D/daemon.log 2>&1 < /dev/null &
echo $! > $D/pid
echo restarted >> $D/restarts
"""


class Containerd(object):
    """One lab containerd daemon under its own directory."""

    def __init__(self, label, binary, ctr, directory):
        self.label, self.binary, self.ctr, self.dir = label, binary, ctr, directory
        self.config = os.path.join(directory, "config.toml")
        self.socket = os.path.join(directory, "containerd.sock")
        self.restart_script = os.path.join(directory, "restart.sh")
        with open(self.restart_script, "w") as f:
            f.write(RESTART_SH % {"dir": directory, "binary": binary})
        os.chmod(self.restart_script, 0o755)

    def default_config(self):
        return subprocess.run([self.binary, "config", "default"], capture_output=True, text=True, check=True).stdout

    def write_config(self, text):
        with open(self.config, "w") as f:
            f.write(text)

    def read_config(self):
        with open(self.config) as f:
            return f.read()

    def start(self):
        subprocess.run([self.restart_script], check=True)
        open(os.path.join(self.dir, "restarts"), "w").close()  # count restarts from here on
        self.wait_ready()

    def wait_ready(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if os.path.exists(self.socket) and self.ctr_ok(["version"]):
                return
            time.sleep(0.2)
        raise AssertionError("containerd did not start:\n" + self.log_tail())

    def ctr_ok(self, args):
        return subprocess.run([self.ctr, "--address", self.socket] + args, capture_output=True).returncode == 0

    def plugin_status(self, ptype, pid):
        out = subprocess.run([self.ctr, "--address", self.socket, "plugins", "ls"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            cols = line.split()
            if len(cols) >= 3 and cols[0] == ptype and cols[1] == pid:
                return cols[-1]
        return None

    def cri_ok(self):
        if self.plugin_status("io.containerd.grpc.v1", "cri") != "ok":
            return False
        if self.label != "containerd-1.6":
            return self.plugin_status("io.containerd.cri.v1", "runtime") == "ok"
        return True

    def dump(self):
        proc = subprocess.run([self.binary, "--config", self.config, "config", "dump"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        import tomllib
        return tomllib.loads(proc.stdout)

    def pid(self):
        with open(os.path.join(self.dir, "pid")) as f:
            return int(f.read().strip())

    def alive(self):
        try:
            os.kill(self.pid(), 0)
            return True
        except OSError:
            return False

    def restarts(self):
        with open(os.path.join(self.dir, "restarts")) as f:
            return len(f.read().split())

    def log_tail(self, n=30):
        try:
            with open(os.path.join(self.dir, "daemon.log")) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self):
        try:
            pid = self.pid()
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                os.kill(pid, 0)
                time.sleep(0.1)
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass

    def module_args(self, **kw):
        args = {
            "runtime": "containerd",
            "config_path": self.config,
            "socket": self.socket,
            "binary_path": self.binary,
            "ctr_path": self.ctr,
            "restart_mode": "command",
            "restart_command": [self.restart_script],
            "restart_timeout": 20,
            # the module's uninstall records stay with this daemon, not in the host's /var/lib/gpuops
            "state_dir": os.path.join(os.path.dirname(self.config), "gpuops-state"),
        }
        args.update(kw)
        return args


@pytest.fixture(params=[c[0] for c in CONTAINERDS] or ["none"])
def containerd(request):
    if not CONTAINERDS:
        pytest.fail("no containerd binary: run `make runtime-deps`")
    label, binary, ctr = [c for c in CONTAINERDS if c[0] == request.param][0]
    if os.geteuid() != 0:
        pytest.skip("the containerd lane needs root")
    d = tempfile.mkdtemp(prefix="gpuops-%s-" % label, dir="/tmp")
    daemon = Containerd(label, binary, ctr, d)
    yield daemon
    daemon.stop()
    subprocess.run(["umount", "-R", os.path.join(d, "root")], capture_output=True)
    shutil.rmtree(d, ignore_errors=True)


def fixture_text(*parts):
    with open(os.path.join(FIXTURES, *parts)) as f:
        return f.read()
