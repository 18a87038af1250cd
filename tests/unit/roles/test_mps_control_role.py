# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""roles/mps_control for real (issue 13, part 3): the installed collection's role under ansible-playbook
(connection local, service_manager none), every path under a temporary root, with the stand-in daemon of
tests/unit/mps_standin.py as nvidia-cuda-mps-control (it daemonizes, listens on <pipe>/control, starts a
"server" for a process that maps a libcuda.so with the pipe directory in its environment, answers quit).

present -> the daemon runs with exactly the env file's settings; rerun and check mode change nothing;
a changed setting restarts it (check mode only predicts); a connected client's server is waited for;
absent -> no process, no file, no directory the role or its script made; absent again changes nothing.
Bad input is refused before any change.  The rendered unit passes systemd-analyze verify; the control
script refuses an env file with shell metacharacters and passes sh -n and shellcheck.
"""
from __future__ import annotations

import atexit
import glob
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

import mps_standin
import pytest
import yaml
from ansible.template import trust_as_template
from conftest import ansible_command
from role_render import Role

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
PLAYBOOK = ansible_command("ansible-playbook")
if not os.path.exists(PLAYBOOK):
    PLAYBOOK = shutil.which("ansible-playbook") or PLAYBOOK
ROLE_DIR = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "nvidia", "roles", "mps_control")
# the stand-in's launchers, once per run (the role writes this path into its env file: keep it short)
STANDIN_DIR = tempfile.mkdtemp(prefix="mpsbin", dir="/tmp")
STANDIN = mps_standin.install_launchers(STANDIN_DIR)[0]
atexit.register(shutil.rmtree, STANDIN_DIR, True)


def tree(root):
    out = set()
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            out.add(os.path.relpath(os.path.join(base, name), root))
    return out


def environ(pid):
    with open("/proc/%d/environ" % pid, "rb") as f:
        return dict(item.decode().split("=", 1) for item in f.read().split(b"\0") if b"=" in item)


def alive(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip().startswith("nvidia-cuda-mps")
    except OSError:
        return False


def mps_processes(pipe):
    """Stand-in daemons and servers whose environment holds ``pipe``."""
    found = []
    for d in glob.glob("/proc/[0-9]*"):
        pid = int(d[6:])
        try:
            if alive(pid) and environ(pid).get("CUDA_MPS_PIPE_DIRECTORY") == pipe:
                found.append(pid)
        except OSError:
            continue
    return found


class Lab:
    """A temporary root (short: unix socket paths are limited to 108 bytes) and the role's variables."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="mps", dir="/tmp")
        for d in ("etc", "usr/local/sbin", "bin"):          # what any host already has
            os.makedirs(os.path.join(self.root, d))
        self.pipe = os.path.join(self.root, "run/nvidia/mps/host/pipe")
        self.log = os.path.join(self.root, "run/nvidia/mps/host/log")
        self.script = os.path.join(self.root, "usr/local/sbin/gpuops-mps-control")
        self.env_file = os.path.join(self.root, "etc/gpuops/mps-control.env")
        self.vars = {
            "ansible_python_interpreter": sys.executable,
            "mps_control_service_manager": "none",
            "mps_control_binary": STANDIN,
            "mps_control_pipe_directory": self.pipe,
            "mps_control_log_directory": self.log,
            "mps_control_script_path": self.script,
            "mps_control_env_file": self.env_file,
            "mps_control_unit_path": os.path.join(self.root, "etc/systemd/system/gpuops-mps-control.service"),
            "mps_control_active_thread_percentage": 50,
            "mps_control_pinned_device_mem_limit": "0=8G,1=16G",
            "mps_control_visible_devices": "0,1",
            "mps_control_stop_timeout": 10,
        }
        self.clients = []

    def play(self, check=False, path=None, **extra):
        book = os.path.join(self.root, "play.yml")
        with open(book, "w") as f:
            yaml.safe_dump([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                             "roles": [{"role": "gpuops.nvidia.mps_control"}]}], f)
        evars = os.path.join(self.root, "extra.json")
        with open(evars, "w") as f:
            json.dump(dict(self.vars, **extra), f)
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
                   ANSIBLE_PIPELINING="1", ANSIBLE_LOCAL_TEMP=os.path.join(self.root, ".ansible-tmp"),
                   ANSIBLE_REMOTE_TEMP=os.path.join(self.root, ".ansible-tmp"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_RETRY_FILES_ENABLED="0")
        if path is not None:
            # narrowed, but Ansible's own entry points stay reachable (ansible-test's injector finds them on PATH)
            keep = [d for d in os.environ.get("PATH", "").split(os.pathsep) if os.path.isfile(os.path.join(d, "ansible-playbook"))]
            env["PATH"] = os.pathsep.join([path] + keep)
        # run by this Python, not by a `python` looked up on that PATH
        cmd = [sys.executable, PLAYBOOK, "-i", "localhost,", book, "-e", "@" + evars] + (["--check", "--diff"] if check else [])
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=self.root, timeout=300, check=False)
        shutil.rmtree(os.path.join(self.root, ".ansible-tmp"), ignore_errors=True)
        for name in ("play.yml", "extra.json"):
            os.unlink(os.path.join(self.root, name))
        return res

    def daemon_pid(self):
        with open(os.path.join(self.pipe, "nvidia-cuda-mps-control.pid")) as f:
            return int(f.read())

    def ask(self, command):
        return subprocess.run([STANDIN], input=command + "\n", capture_output=True, text=True, timeout=30,
                              env=dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=self.pipe), check=False).stdout

    def client(self):
        """A process that looks like a CUDA program of this daemon: a libcuda.so mapped, the pipe in its env."""
        lib = os.path.join(self.root, "lib", "libcuda.so.1")
        if not os.path.exists(lib):
            os.makedirs(os.path.dirname(lib))
            shutil.copy(_libm(), lib)
        code = "import ctypes, sys, time; ctypes.CDLL(sys.argv[1]); print('up', flush=True); time.sleep(120)"
        proc = subprocess.Popen([sys.executable, "-c", code, lib], stdout=subprocess.PIPE, text=True,
                                env=dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=self.pipe))
        assert proc.stdout.readline().strip() == "up"
        self.clients.append(proc)
        return proc

    def cleanup(self):
        for proc in self.clients:
            proc.kill()
            proc.wait()
        if os.path.exists(self.script) and os.path.exists(self.env_file):
            subprocess.run([self.script, "purge"], capture_output=True, timeout=60, check=False)
        for pid in mps_processes(self.pipe):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


def _libm():
    for cand in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib64/libm.so.6",
                 "/usr/lib64/libm.so.6", "/lib/aarch64-linux-gnu/libm.so.6"):
        if os.path.exists(cand):
            return cand
    pytest.skip("no libm.so.6 to stand in for a libcuda.so")


@pytest.fixture
def lab():
    lab = Lab()
    try:
        yield lab
    finally:
        lab.cleanup()


def recap(res):
    lines = [x for x in res.stdout.splitlines() if x.startswith("localhost") and "ok=" in x]
    assert lines, res.stdout + res.stderr
    return {k: int(v) for k, v in (kv.split("=") for kv in lines[-1].split(":", 1)[1].split())}


def ok(res):
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
    return recap(res)


def checksums(*paths):
    out = {}
    for p in paths:
        with open(p, "rb") as f:
            out[p] = f.read()
    return out


# --- the role for real ----------------------------------------------------------------------------

def test_present_rerun_check_restart_absent(lab):
    before = tree(lab.root)

    first = ok(lab.play())
    assert first["changed"] >= 3 and first["failed"] == 0
    pid = lab.daemon_pid()
    assert alive(pid) and mps_processes(lab.pipe) == [pid]
    # exactly the env file's settings, nothing inherited from Ansible's environment
    assert environ(pid) == {
        "PATH": os.path.dirname(STANDIN) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "CUDA_MPS_PIPE_DIRECTORY": lab.pipe, "CUDA_MPS_LOG_DIRECTORY": lab.log,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8G,1=16G",
        "CUDA_VISIBLE_DEVICES": "0,1"}
    assert lab.ask("get_default_active_thread_percentage") == "50\n"
    with open(lab.env_file) as f:
        settings = [line for line in f.read().splitlines() if line and not line.startswith("#")]
    assert settings == ["MPS_CONTROL_BIN=" + STANDIN, "CUDA_MPS_PIPE_DIRECTORY=" + lab.pipe,
                        "CUDA_MPS_LOG_DIRECTORY=" + lab.log, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50",
                        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8G,1=16G", "CUDA_VISIBLE_DEVICES=0,1",
                        "MPS_START_TIMEOUT=15", "MPS_STOP_TIMEOUT=10"]
    assert stat.S_IMODE(os.stat(lab.script).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(lab.env_file).st_mode) == 0o644
    assert not os.path.exists(lab.vars["mps_control_unit_path"])          # service_manager none: no unit
    status = subprocess.run([lab.script, "status"], capture_output=True, text=True, check=False)
    assert status.returncode == 0 and "running (pids: %d " % pid in status.stdout
    files = checksums(lab.script, lab.env_file)

    assert ok(lab.play())["changed"] == 0                                   # rerun
    assert ok(lab.play(check=True))["changed"] == 0                         # check mode
    assert lab.daemon_pid() == pid and checksums(lab.script, lab.env_file) == files

    # a changed setting: check mode predicts it and touches nothing
    predicted = lab.play(check=True, mps_control_active_thread_percentage=25)
    assert ok(predicted)["changed"] >= 2 and "restarted with the new settings" in predicted.stdout
    assert "-CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" in predicted.stdout and "+CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in predicted.stdout
    assert lab.daemon_pid() == pid and checksums(lab.script, lab.env_file) == files
    # ... and applied: the old daemon is stopped (with its old files), a new one runs with the new setting
    assert ok(lab.play(mps_control_active_thread_percentage=25))["changed"] >= 3
    new = lab.daemon_pid()
    assert new != pid and not alive(pid) and mps_processes(lab.pipe) == [new]
    assert environ(new)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"

    # a client makes the daemon start a server; absent waits for both to go
    lab.client()
    for _attempt in range(50):
        servers = lab.ask("get_server_list").split()
        if servers:
            break
        time.sleep(0.1)
    assert len(servers) == 1 and alive(int(servers[0]))
    assert sorted(mps_processes(lab.pipe)) == sorted([new, int(servers[0])])
    assert lab.ask("get_client_list %s" % servers[0]).split() == [str(lab.clients[0].pid)]

    check_absent = lab.play(check=True, mps_control_state="absent")
    assert ok(check_absent)["changed"] >= 2 and alive(new) and os.path.exists(lab.script)
    gone = ok(lab.play(mps_control_state="absent"))
    assert gone["changed"] >= 3
    assert mps_processes(lab.pipe) == [] and not alive(new) and not alive(int(servers[0]))
    assert tree(lab.root) - {"lib", "lib/libcuda.so.1"} == before            # nothing left, not even /run's parents
    assert ok(lab.play(mps_control_state="absent"))["changed"] == 0


def test_binary_found_on_path_then_in_the_listed_dirs(lab):
    before = tree(lab.root)
    bindir = os.path.join(lab.root, "bin")
    os.symlink(STANDIN, os.path.join(bindir, "nvidia-cuda-mps-control"))
    lab.vars["mps_control_binary"] = ""
    ok(lab.play(path=bindir + ":" + os.environ["PATH"]))
    with open(lab.env_file) as f:
        assert "MPS_CONTROL_BIN=%s/nvidia-cuda-mps-control\n" % bindir in f.read()
    first = lab.daemon_pid()
    assert mps_processes(lab.pipe) == [first]
    # not on the PATH: the listed directories, in order; the binary changed, so the daemon is restarted
    other = os.path.join(lab.root, "opt-nvidia")
    os.makedirs(other)
    os.symlink(STANDIN, os.path.join(other, "nvidia-cuda-mps-control"))
    ok(lab.play(mps_control_binary_dirs=[os.path.join(lab.root, "nothing"), other]))
    with open(lab.env_file) as f:
        assert "MPS_CONTROL_BIN=%s/nvidia-cuda-mps-control\n" % other in f.read()
    assert not alive(first) and mps_processes(lab.pipe) == [lab.daemon_pid()]
    assert ok(lab.play(mps_control_state="absent"))["changed"] >= 3
    assert tree(lab.root) == before | {"bin/nvidia-cuda-mps-control", "opt-nvidia", "opt-nvidia/nvidia-cuda-mps-control"}


def test_missing_binary_refused_before_any_change(lab):
    before = tree(lab.root)
    lab.vars["mps_control_binary"] = ""
    res = lab.play(path="/usr/bin:/bin", mps_control_binary_dirs=[os.path.join(lab.root, "nothing")])
    assert res.returncode != 0
    assert "no executable nvidia-cuda-mps-control at %s/nothing/nvidia-cuda-mps-control or on the PATH" % lab.root in res.stdout
    assert "nothing was changed" in res.stdout and tree(lab.root) == before
    res = lab.play(mps_control_binary=os.path.join(lab.root, "etc"))          # a directory, not a binary
    assert res.returncode != 0 and "no executable nvidia-cuda-mps-control at %s/etc" % lab.root in res.stdout
    assert tree(lab.root) == before


def test_bad_input_refused_by_a_real_run_before_any_change(lab):
    """Every rule is checked below on the rendered preflight; here a real run: all problems named, nothing made."""
    before = tree(lab.root)
    res = lab.play(mps_control_pipe_directory="/tmp/x;reboot", mps_control_visible_devices="0,$(reboot)")
    assert res.returncode != 0 and "mps_control refused its input, nothing was changed (2 problem(s))" in res.stdout
    assert "(1) mps_control_pipe_directory must be an absolute path of plain components" in res.stdout
    assert "(2) mps_control_visible_devices (CUDA_VISIBLE_DEVICES): entry 2 " in res.stdout and "$(reboot)" in res.stdout
    assert tree(lab.root) == before and mps_processes(lab.pipe) == []


# --- every input rule (the preflight template, rendered as the role renders it) --------------------

ROLE = Role("mps_control")


def problems(**overrides):
    with open(os.path.join(ROLE.path, "templates", "problems.j2")) as f:
        text = f.read()
    out = ROLE.templar(**overrides).template(trust_as_template(text))
    return json.loads(out) if isinstance(out, str) else list(out)


def test_defaults_have_no_problem():
    assert problems() == []
    assert problems(mps_control_active_thread_percentage="40", mps_control_stop_timeout="60") == []   # -e gives strings


@pytest.mark.parametrize("overrides,expect", [
    ({"mps_control_state": "stopped"}, 'mps_control_state must be present or absent, got "stopped"'),
    ({"mps_control_service_manager": "openrc"}, 'mps_control_service_manager must be systemd or none, got "openrc"'),
    ({"mps_control_script_path": "usr/local/sbin/x"}, "mps_control_script_path must be an absolute path"),
    ({"mps_control_env_file": "/etc/gpuops/mps control.env"}, "mps_control_env_file must be an absolute path"),
    ({"mps_control_env_file": "/etc/gpuops/../mps.env"}, "mps_control_env_file must be an absolute path"),
    ({"mps_control_unit_path": "/etc/systemd/system/gpuops-mps.timer"}, "mps_control_unit_path must name a .service unit file"),
    ({"mps_control_binary": "nvidia-cuda-mps-control"}, 'mps_control_binary must be "" (search PATH'),
    ({"mps_control_binary": "/usr/bin/nvidia-cuda-mps-control`id`"}, 'mps_control_binary must be "" (search PATH'),
    ({"mps_control_binary_dirs": "/usr/bin"}, "mps_control_binary_dirs must be a list of directories"),
    ({"mps_control_binary_dirs": ["/usr/bin", "bin"]}, 'mps_control_binary_dirs[1] must be an absolute path'),
    ({"mps_control_pipe_directory": "/run/mps/pipe/"}, "mps_control_pipe_directory must be an absolute path"),
    ({"mps_control_pipe_directory": "/run/mps/$HOME"}, "mps_control_pipe_directory must be an absolute path"),
    ({"mps_control_pipe_directory": "/run/mps/a|b"}, "mps_control_pipe_directory must be an absolute path"),
    ({"mps_control_pipe_directory": "/srv"}, "mps_control_pipe_directory must be a directory of its own under"),
    ({"mps_control_pipe_directory": "/etc/mps"}, "mps_control_pipe_directory must be a directory of its own under"),
    ({"mps_control_log_directory": "/var/log"}, "mps_control_log_directory must be a directory of its own under"),
    ({"mps_control_log_directory": "/usr/lib/mps"}, "mps_control_log_directory must be a directory of its own under"),
    ({"mps_control_log_directory": "/run/nvidia/mps/host/pipe"}, "must be two separate directories, neither inside the other"),
    ({"mps_control_log_directory": "/run/nvidia/mps/host/pipe/log"}, "must be two separate directories, neither inside the other"),
    ({"mps_control_pipe_directory": "/run/nvidia/mps/host/log/p"}, "must be two separate directories, neither inside the other"),
    ({"mps_control_active_thread_percentage": 0}, "must be a whole number from 1 to 100 or null, got 0"),
    ({"mps_control_active_thread_percentage": 101}, "must be a whole number from 1 to 100 or null, got 101"),
    ({"mps_control_active_thread_percentage": 12.5}, "must be a whole number from 1 to 100 or null, got 12.5"),
    ({"mps_control_active_thread_percentage": True}, "must be a whole number from 1 to 100 or null, got true"),
    ({"mps_control_active_thread_percentage": "50;reboot"}, 'must be a whole number from 1 to 100 or null, got "50;reboot"'),
    ({"mps_control_pinned_device_mem_limit": "8G"}, 'entry 1 "8G" must be <GPU index or GPU-UUID>=<size><M|MB|G|GB>'),
    ({"mps_control_pinned_device_mem_limit": "0=8G,1=0G"}, 'entry 2 "1=0G" must be'),
    ({"mps_control_pinned_device_mem_limit": "0=8T"}, 'entry 1 "0=8T" must be'),
    ({"mps_control_pinned_device_mem_limit": "0=8g"}, 'entry 1 "0=8g" must be'),
    ({"mps_control_pinned_device_mem_limit": "0=8G,"}, 'entry 2 "" must be'),
    ({"mps_control_pinned_device_mem_limit": "0=8G;reboot"}, 'entry 1 "0=8G;reboot" must be'),
    ({"mps_control_pinned_device_mem_limit": "0=8G 1=4G"}, 'entry 1 "0=8G 1=4G" must be'),
    ({"mps_control_pinned_device_mem_limit": "0=8G,0=4G"}, "GPU 0 has two limits"),
    ({"mps_control_pinned_device_mem_limit": {"0": "8G"}}, 'must be a string like "0=8G,1=16G"'),
    ({"mps_control_visible_devices": "0,,1"}, 'entry 2 "" must be a GPU index'),
    ({"mps_control_visible_devices": "0,0"}, "0 is listed twice"),
    ({"mps_control_visible_devices": "gpu0"}, 'entry 1 "gpu0" must be a GPU index'),
    ({"mps_control_visible_devices": "0 1"}, 'entry 1 "0 1" must be a GPU index'),
    ({"mps_control_visible_devices": [0, 1]}, 'must be a string like "0,1"'),
    ({"mps_control_start_timeout": 0}, "mps_control_start_timeout must be whole seconds from 1 to 3600, got 0"),
    ({"mps_control_stop_timeout": "30s"}, 'mps_control_stop_timeout must be whole seconds from 1 to 3600, got "30s"'),
    ({"mps_control_unit_before": "kubelet.service"}, "mps_control_unit_before must be a list of systemd unit names"),
    ({"mps_control_unit_after": ["nvidia-persistenced"]}, 'mps_control_unit_after: "nvidia-persistenced" is not a systemd unit name'),
    ({"mps_control_unit_after": ["a.service b.service"]}, 'is not a systemd unit name'),
])
def test_each_bad_input_is_named(overrides, expect):
    found = problems(**overrides)
    assert len(found) == 1, found
    assert expect in found[0], found


@pytest.mark.parametrize("overrides", [
    {"mps_control_pinned_device_mem_limit": "0=8G,1=16384M,GPU-b1028956-cfa2-0990-bf4a-5da9abb51763=4GB"},
    {"mps_control_visible_devices": "GPU-b1028956,1,MIG-GPU-b1028956-cfa2-0990-bf4a-5da9abb51763/3/0"},
    {"mps_control_active_thread_percentage": 100},
    {"mps_control_pipe_directory": "/tmp/nvidia-mps", "mps_control_log_directory": "/var/log/nvidia-mps"},
    {"mps_control_pipe_directory": "/dev/shm/mps/pipe", "mps_control_binary": "/usr/local/nvidia/bin/nvidia-cuda-mps-control"},
    {"mps_control_unit_before": [], "mps_control_unit_after": ["nvidia-persistenced.service", "nvidia-fabricmanager.service"]},
])
def test_good_inputs_pass(overrides):
    assert problems(**overrides) == []


def test_several_problems_are_all_listed():
    found = problems(mps_control_state="on", mps_control_visible_devices="x", mps_control_stop_timeout=0)
    assert len(found) == 3


def test_script_and_preflight_agree_on_the_directories_they_may_own():
    with open(os.path.join(ROLE.path, "templates", "problems.j2")) as f:
        pre = f.read()
    with open(os.path.join(ROLE.path, "templates", "gpuops-mps-control.sh.j2")) as f:
        script = f.read()
    roots = re.search(r"set own_roots = \[([^\]]*)\]", pre).group(1)
    system = re.search(r"set system_dirs = \[([^\]]*)\]", pre).group(1)
    roots = sorted(x.strip(" '") for x in roots.split(","))
    system = sorted(x.strip(" '") for x in system.split(","))
    own_dir_ok = script[script.index("own_dir_ok() {"):script.index("load() {")]
    assert sorted(p[:-2] for p in re.findall(r"(/[a-z/]+/\*)", own_dir_ok.split("esac")[2])) == roots
    assert sorted(re.search(r"\n\s+(/var/run\|[^)]*)\)", own_dir_ok).group(1).split("|")) == system


# --- the control script ---------------------------------------------------------------------------------

def render_script(tmp_path, env_lines):
    env_file = tmp_path / "mps.env"
    env_file.write_text("\n".join(env_lines) + "\n")
    with open(os.path.join(ROLE.path, "templates", "gpuops-mps-control.sh.j2")) as f:
        text = ROLE.templar(mps_control_env_file=str(env_file), mps_control_script_path=str(tmp_path / "ctl")).template(
            trust_as_template(f.read()), preserve_trailing_newlines=True)
    script = tmp_path / "ctl"
    script.write_text(text)
    script.chmod(0o755)
    return script


GOOD_ENV = ["MPS_CONTROL_BIN=" + STANDIN, "CUDA_MPS_PIPE_DIRECTORY=/tmp/gpuops-mps-test/pipe",
            "CUDA_MPS_LOG_DIRECTORY=/tmp/gpuops-mps-test/log"]


def test_script_passes_sh_n_and_shellcheck(tmp_path):
    script = render_script(tmp_path, GOOD_ENV)
    for sh in ("sh", "dash", "bash"):
        if shutil.which(sh):
            res = subprocess.run([sh, "-n", str(script)], capture_output=True, text=True, check=False)
            assert res.returncode == 0, (sh, res.stderr)
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck not installed")
    res = subprocess.run(["shellcheck", "-s", "sh", str(script)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout


@pytest.mark.parametrize("line,expect", [
    ("CUDA_VISIBLE_DEVICES=0;reboot", "CUDA_VISIBLE_DEVICES holds a character outside"),
    ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=$(reboot)", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT holds a character outside"),
    ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 60", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE holds a character outside"),
    ("LD_PRELOAD=/tmp/x.so", "unknown key LD_PRELOAD"),
    ("just words", "not KEY=VALUE"),
    ("CUDA_MPS_PIPE_DIRECTORY=/", "CUDA_MPS_PIPE_DIRECTORY '/' is not a directory this script may own"),
    ("CUDA_MPS_PIPE_DIRECTORY=/var/log", "is not a directory this script may own"),
    ("CUDA_MPS_PIPE_DIRECTORY=/tmp/a/../b", "is not a directory this script may own"),
    ("CUDA_MPS_LOG_DIRECTORY=/tmp/gpuops-mps-test/pipe/log", "the log directory is inside the pipe directory"),
    ("MPS_STOP_TIMEOUT=ten", "timeouts are whole seconds"),
])
def test_script_refuses_a_bad_env_file(tmp_path, line, expect):
    script = render_script(tmp_path, GOOD_ENV + [line])
    res = subprocess.run([str(script), "status"], capture_output=True, text=True, check=False)
    assert res.returncode == 1 and expect in res.stderr, res.stderr
    assert not os.path.exists("/tmp/gpuops-mps-test")


def test_script_status_and_stop_without_a_daemon(tmp_path):
    script = render_script(tmp_path, GOOD_ENV)
    res = subprocess.run([str(script), "status"], capture_output=True, text=True, check=False)
    assert res.returncode == 3 and res.stdout == "gpuops-mps-control: not running\n"
    res = subprocess.run([str(script), "stop"], capture_output=True, text=True, check=False)
    assert res.returncode == 0 and res.stdout == "gpuops-mps-control: not running\n"
    res = subprocess.run([str(script), "restart"], capture_output=True, text=True, check=False)
    assert res.returncode == 1 and "usage:" in res.stderr


# --- the systemd unit --------------------------------------------------------------------------------

def test_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze") or ("/usr/bin/systemd-analyze" if os.path.exists("/usr/bin/systemd-analyze") else None)
    if not analyze:
        pytest.skip("no systemd-analyze")
    script = tmp_path / "gpuops-mps-control"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    with open(os.path.join(ROLE.path, "templates", "gpuops-mps-control.service.j2")) as f:
        text = ROLE.templar(mps_control_script_path=str(script)).template(
            trust_as_template(f.read()), preserve_trailing_newlines=True,
            overrides={"trim_blocks": True, "newline_sequence": "\n"})
    unit = tmp_path / "gpuops-mps-control.service"
    unit.write_text(text)
    lines = text.splitlines()
    assert "Type=forking" in lines and "ExecStart=%s start" % script in lines and "ExecStop=%s stop" % script in lines
    assert "After=nvidia-persistenced.service nvidia-fabricmanager.service" in lines
    assert "Before=containerd.service crio.service docker.service kubelet.service" in lines
    assert "WantedBy=multi-user.target" in lines and "TimeoutStopSec=45" in lines
    assert not [x for x in lines if "nvidia-smi" in x and not x.startswith("#")]       # no compute-mode change
    res = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, check=False,
                         env=dict(os.environ, SYSTEMD_LOG_LEVEL="notice"))
    problems_seen = [x for x in (res.stdout + res.stderr).splitlines() if str(unit) in x or "gpuops" in x]
    assert res.returncode == 0 and not problems_seen, res.stdout + res.stderr
    # the check can fail: a unit without ExecStart is what verify refuses
    bad = tmp_path / "bad.service"
    bad.write_text(text.replace("ExecStart=", "#ExecStart="))
    res = subprocess.run([analyze, "verify", str(bad)], capture_output=True, text=True, check=False)
    assert res.returncode != 0 or "ExecStart" in res.stdout + res.stderr


def test_role_files_are_in_the_installed_collection():
    for rel in ("tasks/main.yml", "tasks/present.yml", "tasks/absent.yml", "tasks/preflight.yml",
                "templates/gpuops-mps-control.sh.j2", "templates/gpuops-mps-control.service.j2",
                "templates/mps-control.env.j2", "templates/problems.j2", "meta/argument_specs.yml"):
        assert os.path.isfile(os.path.join(ROLE_DIR, rel)), rel


def test_h200_mps_script_is_valid_bash():
    """tests/lab/h200/mps.sh runs only on the GPU machine (by hand): here its syntax and shellcheck."""
    path = os.path.join(REPO, "tests", "lab", "h200", "mps.sh")
    if not os.path.exists(path):
        pytest.skip("tests/lab is not in the Galaxy tarball")
    res = subprocess.run(["bash", "-n", path], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck not installed")
    res = subprocess.run(["shellcheck", "-s", "bash", path], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout
