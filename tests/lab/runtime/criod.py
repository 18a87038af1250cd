# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""One lab CRI-O daemon, every path of it under one directory, driven with crictl.

CRI-O (built from its Go module by ``make runtime-crio``, with pinns compiled from the same module's
source and crictl from cri-tools' module; conmon and runc from Debian) runs as root with its own socket,
containers-storage (vfs: no mounts to leak), state, exits and namespace dirs, signature policy,
registries.conf and storage.conf -- nothing under /etc/crio, /var/lib/crio, /run/crio or
/etc/containers is read or written.  ``restart.sh`` stops and starts it with the same flags, the way the
container_runtime module's ``restart_mode: command`` expects a supervisor to.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time

BASE_CONF = """\
# the site's own CRI-O configuration (the lab's stand-in for /etc/crio/crio.conf)
[crio]
root = "{d}/storage"
runroot = "{d}/run/storage"
storage_driver = "vfs"
log_dir = "{d}/pod-logs"
version_file = "{d}/run/version"
version_file_persist = "{d}/lib/version"
clean_shutdown_file = "{d}/lib/clean.shutdown"

[crio.api]
listen = "{d}/crio.sock"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon = "{conmon}"
conmon_cgroup = "pod"
pinns_path = "{pinns}"
namespaces_dir = "{d}/run/ns"
container_exits_dir = "{d}/run/exits"
container_attach_socket_dir = "{d}/run/attach"
hooks_dir = []
default_mounts_file = ""
decryption_keys_path = "{d}/keys"
irqbalance_config_file = ""
irqbalance_config_restore_file = ""
cdi_spec_dirs = {cdi_dirs}

[crio.runtime.runtimes.runc]
runtime_path = "{runc}"
runtime_type = "oci"
runtime_root = "{d}/run/runc"

[crio.image]
signature_policy = "{d}/policy.json"
signature_policy_dir = "{d}/policies"
pause_image = "{pause_image}"
pause_command = "{pause_command}"

[crio.network]
network_dir = "{d}/net.d"
plugin_dirs = ["{d}/cni-bin"]

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = false
"""

RESTART_SH = """#!/bin/sh
# What systemd would do for this lab CRI-O: stop it, start it with the same flags.
D=%(dir)s
if [ -s $D/pid ] && kill -0 "$(cat $D/pid)" 2>/dev/null; then
  kill "$(cat $D/pid)"
  i=0; while kill -0 "$(cat $D/pid)" 2>/dev/null && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done
fi
echo "--- restart $(date +%%s.%%N)" >> $D/daemon.log
CONTAINERS_STORAGE_CONF=$D/storage.conf CONTAINERS_REGISTRIES_CONF=$D/registries.conf PATH=%(path)s \\
  setsid %(binary)s --config $D/crio.conf --config-dir $D/crio.conf.d%(extra)s >> $D/daemon.log 2>&1 < /dev/null &
echo $! > $D/pid
echo restarted >> $D/restarts
"""


class Crio(object):
    def __init__(self, bindir, directory, registry, pause_image, pause_command="/usr/bin/pause",
                 conmon="/usr/bin/conmon", runc="/usr/sbin/runc", path_dirs=(), cdi_dirs=None, extra_args=()):
        self.bin, self.dir, self.registry = bindir, directory, registry
        self.binary = os.path.join(bindir, "crio")
        self.crictl_bin = os.path.join(bindir, "crictl")
        self.socket = os.path.join(directory, "crio.sock")
        self.confd = os.path.join(directory, "crio.conf.d")
        self.restart_script = os.path.join(directory, "restart.sh")
        for sub in ("crio.conf.d", "lib", "run", "pod-logs", "net.d", "cni-bin", "cdi", "keys", "policies"):
            os.makedirs(os.path.join(directory, sub), exist_ok=True)
        with open(os.path.join(directory, "crio.conf"), "w") as f:
            f.write(BASE_CONF.format(d=directory, conmon=conmon, pinns=os.path.join(bindir, "pinns"), runc=runc,
                                    pause_image=pause_image, pause_command=pause_command,
                                    cdi_dirs=json.dumps(list(cdi_dirs or [os.path.join(directory, "cdi")]))))
        with open(os.path.join(directory, "policy.json"), "w") as f:
            json.dump({"default": [{"type": "insecureAcceptAnything"}]}, f)
        with open(os.path.join(directory, "storage.conf"), "w") as f:
            f.write('[storage]\ndriver = "vfs"\nrunroot = "%s/run/storage"\ngraphroot = "%s/storage"\n' % (directory, directory))
        with open(os.path.join(directory, "registries.conf"), "w") as f:
            f.write('[[registry]]\nlocation = "%s"\ninsecure = true\n' % registry)
        path = ":".join(list(path_dirs) + ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"])
        self.crictl_config = os.path.join(directory, "crictl.yaml")
        with open(self.crictl_config, "w") as f:
            f.write("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\n" % (self.socket, self.socket))
        with open(self.restart_script, "w") as f:
            f.write(RESTART_SH % {"dir": directory, "binary": self.binary, "path": path,
                                  "extra": "".join(" " + shlex.quote(a) for a in extra_args)})
        os.chmod(self.restart_script, 0o755)

    # -- the daemon ----------------------------------------------------------------------------------

    def start(self):
        subprocess.run([self.restart_script], check=True)
        open(os.path.join(self.dir, "restarts"), "w").close()
        self.wait_ready()

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if os.path.exists(self.socket) and self.crictl("version", check=False).returncode == 0:
                return
            if not self.alive():
                break
            time.sleep(0.2)
        raise AssertionError("CRI-O did not start:\n" + self.log_tail())

    def pid(self):
        with open(os.path.join(self.dir, "pid")) as f:
            return int(f.read().strip())

    def alive(self):
        try:
            os.kill(self.pid(), 0)
            return True
        except (OSError, ValueError):
            return False

    def restarts(self):
        with open(os.path.join(self.dir, "restarts")) as f:
            return len(f.read().split())

    def log_tail(self, n=40):
        try:
            with open(os.path.join(self.dir, "daemon.log")) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self):
        """Pods removed, the daemon stopped, any conmon of this directory killed: nothing of it left running."""
        if self.alive():
            for pod in self.crictl("pods", "-q", check=False).stdout.split():
                self.crictl("stopp", pod, check=False)
                self.crictl("rmp", "-f", pod, check=False)
            pid = self.pid()
            try:
                os.kill(pid, signal.SIGTERM)
                for _ in range(150):
                    os.kill(pid, 0)
                    time.sleep(0.1)
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        # conmon itself, or conmon run through a carried loader (the GPU machine's kit): conmon.real -b <dir>/...
        subprocess.run(["pkill", "-KILL", "-f", "conmon[^ ]* .*%s" % self.dir], check=False)

    def processes(self):
        """``pid args`` of every process whose command line names this daemon's directory (conmon carries its
        paths), read from /proc whole (``ps`` cuts lines at the terminal's width when it has none)."""
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    argv = f.read().rstrip(b"\0").decode("utf-8", "replace").split("\0")
            except OSError:
                continue
            if int(pid) != os.getpid() and any(self.dir in a for a in argv):
                found.append("%s %s" % (pid, " ".join(argv)))
        return found

    # -- crictl ----------------------------------------------------------------------------------------

    def crictl(self, *args, check=True, timeout=120):
        cmd = [self.crictl_bin, "--config", self.crictl_config] + list(args)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode:
            raise AssertionError("crictl %s (rc=%d): %s\n--- crio log:\n%s" % (" ".join(args), proc.returncode,
                                                                               proc.stderr[-2000:], self.log_tail()))
        return proc

    def run_pod(self, name, image, command, runtime_handler="", cdi_devices=()):
        """A host-network pod with one container: (pod id, container id), the container started.  ``cdi_devices``:
        fully qualified CDI device names the container asks for (the CRI's CDI_devices field: CRI-O injects them
        from the specs of its cdi_spec_dirs)."""
        pod = {"metadata": {"name": name, "namespace": "gpuops-lab", "uid": name + "-uid", "attempt": 0},
               "log_directory": os.path.join(self.dir, "pod-logs", name),
               # host network (no CNI here); a PID namespace per container, so CRI-O keeps no infra container:
               # its infra process gets oom_score_adj -998, which this machine's root may not set
               "linux": {"security_context": {"namespace_options": {"network": 2, "pid": 1}}}}
        ctr = {"metadata": {"name": "c"}, "image": {"image": image}, "command": command, "log_path": "c.log",
               "linux": {"security_context": {"namespace_options": {"network": 2, "pid": 1}}}}
        if cdi_devices:
            ctr["CDI_devices"] = [{"name": n} for n in cdi_devices]
        pod_json = os.path.join(self.dir, name + "-pod.json")
        ctr_json = os.path.join(self.dir, name + "-ctr.json")
        with open(pod_json, "w") as f:
            json.dump(pod, f)
        with open(ctr_json, "w") as f:
            json.dump(ctr, f)
        args = ["runp"] + (["--runtime", runtime_handler] if runtime_handler else []) + [pod_json]
        pod_id = self.crictl(*args).stdout.strip()
        ctr_id = self.crictl("create", pod_id, ctr_json, pod_json).stdout.strip()
        self.crictl("start", ctr_id)
        return pod_id, ctr_id

    def remove_pod(self, pod_id):
        # the containers' main processes are PID 1 of their namespaces and ignore SIGTERM: no grace period
        for ctr in self.crictl("ps", "-a", "-q", "--pod", pod_id).stdout.split():
            self.crictl("stop", "--timeout", "0", ctr)
        self.crictl("stopp", pod_id)
        self.crictl("rmp", pod_id)

    def conmon_runtime(self, ctr_id):
        """The OCI runtime binary CRI-O handed the container to: the ``-r`` argument of its conmon."""
        for line in self.processes():
            argv = line.split()[1:]
            if argv and os.path.basename(argv[0]) == "conmon" and "-c" in argv and argv[argv.index("-c") + 1] == ctr_id:
                return argv[argv.index("-r") + 1] if "-r" in argv else None
        return None

    def running_config(self):
        """The running daemon's configuration (``crio status config``), as TOML text."""
        proc = subprocess.run([self.binary, "status", "--socket", self.socket, "config"], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    def inspect(self, ctr_id):
        return json.loads(self.crictl("inspect", ctr_id).stdout)

    def wait_exit(self, ctr_id, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st = self.inspect(ctr_id)["status"]
            if st["state"] == "CONTAINER_EXITED":
                return st
            time.sleep(0.3)
        raise AssertionError("container %s still running after %ds" % (ctr_id, timeout))

    def logs(self, ctr_id):
        p = self.crictl("logs", ctr_id)
        return p.stdout + p.stderr
