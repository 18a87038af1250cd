# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Stand-ins for NVIDIA's MPS control daemon and nvidia-smi, for machines without a GPU (tests only).

``python3 mps_standin.py --install-launchers DIR`` (or ``install_launchers(DIR)``) writes the executables
``DIR/nvidia-cuda-mps-control`` and ``DIR/nvidia-smi``: a few lines each, run by this Python, that call
``control_main`` / ``smi_main`` below (tests/unit/roles/test_mps_control_role.py; the dry run of
tests/lab/h200/mps.sh puts DIR first on its PATH).

``nvidia-cuda-mps-control``:

* ``-d``: becomes a daemon (double fork, new session), names itself ``nvidia-cuda-mps`` (what the
  real binaries' 15-character comm is), needs CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY to
  exist (it creates neither, so a caller that forgets them fails), listens on ``<pipe>/control``,
  writes ``<pipe>/nvidia-cuda-mps-control.pid``, logs to ``<log>/control.log`` and records its
  environment in ``<log>/standin-env.json``.  A second ``-d`` on the same pipe directory fails.
  Clients: processes whose environment holds this pipe directory and that have a ``libcuda.so``
  mapped (what a CUDA program that initialised looks like); the first one makes the daemon start
  a server (a child process, also ``nvidia-cuda-mps``), which stays until ``quit``.
* no argument: client mode, one command per stdin line sent to the daemon, the answers printed:
  ``get_server_list``, ``get_client_list <pid>``, ``get_default_active_thread_percentage``,
  ``set_default_active_thread_percentage <n>``, ``quit`` (stops the server, removes the socket and
  the pid file, exits).  Without a daemon: a message on stderr, exit 1.

``nvidia-smi``: ``--query-gpu=... --format=csv,noheader[,nounits]`` with
fixed values of one GPU, ``--query-compute-apps=...``, ``-L``, and the default report whose process
table lists the stand-in's server (type C) and its clients (type M+C).
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time

NAME = "nvidia-cuda-mps"
DEFAULT_PIPE = "/tmp/nvidia-mps"
DEFAULT_LOG = "/var/log/nvidia-mps"
GPU = {
    "index": "0", "uuid": "GPU-00000000-0000-4000-8000-000000000000", "name": "Stand-in GPU",
    "pci.bus_id": "00000000:00:06.0", "driver_version": "580.0.0", "compute_mode": "Default",
    "mig.mode.current": "Disabled", "mig.mode.pending": "Disabled", "persistence_mode": "Enabled",
    "ecc.mode.current": "Enabled", "power.limit": "700.00 W", "clocks.applications.graphics": "1980 MHz",
    "clocks.applications.memory": "3201 MHz", "memory.total": "143771 MiB",
}


def set_comm(name=NAME):
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(name[:15])
    except OSError:
        pass


def pipe_dir():
    return os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE


def _read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None


def environ_of(pid):
    raw = _read("/proc/%s/environ" % pid, "rb")
    if raw is None:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def comm_of(pid):
    return (_read("/proc/%s/comm" % pid) or "").strip()


def pids():
    return sorted(int(p) for p in os.listdir("/proc") if p.isdigit())


def clients(pipe):
    """Processes that look like CUDA programs of this pipe directory: the variable set, libcuda mapped."""
    found = []
    for pid in pids():
        if pid == os.getpid() or comm_of(pid).startswith(NAME):
            continue
        if environ_of(pid).get("CUDA_MPS_PIPE_DIRECTORY") != pipe:
            continue
        maps = _read("/proc/%d/maps" % pid) or ""
        if "libcuda.so" in maps:
            found.append(pid)
    return found


# --- the daemon -----------------------------------------------------------------------------------

class Daemon:
    def __init__(self, pipe, log):
        self.pipe, self.log = pipe, log
        self.server = None
        self.threads = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") or "100.0"
        self.sock = None

    def logline(self, text):
        with open(os.path.join(self.log, "control.log"), "a") as f:
            f.write("[%s] %s\n" % (time.strftime("%Y-%m-%d %H:%M:%S"), text))

    def start_server(self):
        pid = os.fork()
        if pid == 0:  # the "server": lives until told to stop or the daemon is gone
            os.environ["GPUOPS_STANDIN_ROLE"] = "server"
            try:
                os.execv(sys.executable, [sys.executable, os.path.abspath(__file__), "--server", str(os.getppid())])
            finally:
                os._exit(127)
        for _attempt in range(200):  # listed once it runs (after exec) under the daemon's name, as a real server would
            if environ_of(pid).get("GPUOPS_STANDIN_ROLE") == "server" and comm_of(pid).startswith(NAME):
                break
            time.sleep(0.05)
        self.server = pid
        self.logline("Server %d starting (stand-in)" % pid)
        with open(os.path.join(self.log, "server.log"), "a") as f:  # what a real server logs of its limits
            f.write("[%s Server %d] Active Threads Percentage set to %.1f\n"
                    % (time.strftime("%Y-%m-%d %H:%M:%S"), pid, float(self.threads)))

    def stop_server(self):
        if self.server:
            try:
                os.kill(self.server, signal.SIGTERM)
                os.waitpid(self.server, 0)
            except OSError:
                pass
            self.logline("Server %d exited" % self.server)
            self.server = None

    def answer(self, line):
        words = line.split()
        if not words:
            return ""
        cmd, args = words[0], words[1:]
        if cmd == "get_server_list":
            return "".join("%d\n" % p for p in ([self.server] if self.server else []))
        if cmd == "get_client_list":
            if self.server and args == [str(self.server)]:
                return "".join("%d\n" % p for p in clients(self.pipe))
            return ""
        if cmd == "get_default_active_thread_percentage":
            return "%s\n" % self.threads
        if cmd == "set_default_active_thread_percentage" and len(args) == 1:
            self.threads = args[0]
            return "%s\n" % self.threads
        return "Unknown command %s\n" % cmd

    def run(self):
        path = os.path.join(self.pipe, "control")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        with open(os.path.join(self.pipe, "nvidia-cuda-mps-control.pid"), "w") as f:
            f.write("%d\n" % os.getpid())
        with open(os.path.join(self.log, "standin-env.json"), "w") as f:
            json.dump(dict(os.environ), f, indent=1, sort_keys=True)
        self.logline("Startup (stand-in), pipe %s" % self.pipe)
        quit_ = False
        while not quit_:
            ready, _w, _x = select.select([self.sock], [], [], 0.2)
            if self.server is None and clients(self.pipe):
                self.start_server()
            if self.server is not None:
                done, _status = os.waitpid(self.server, os.WNOHANG)
                if done:
                    self.server = None
            if not ready:
                continue
            conn, _addr = self.sock.accept()
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                line = data.decode("utf-8", "replace").strip()
                if line.split()[:1] == ["quit"]:
                    quit_ = True
                    reply = ""
                else:
                    reply = self.answer(line)
                conn.sendall(reply.encode())
        self.stop_server()
        self.sock.close()
        for name in ("control", "nvidia-cuda-mps-control.pid"):
            try:
                os.unlink(os.path.join(self.pipe, name))
            except OSError:
                pass
        self.logline("Shutdown")


def daemonize(pipe, log):
    for d, what in ((pipe, "CUDA_MPS_PIPE_DIRECTORY"), (log, "CUDA_MPS_LOG_DIRECTORY")):
        if not os.path.isdir(d):
            sys.stderr.write("%s %s does not exist\n" % (what, d))
            return 1
    if os.path.exists(os.path.join(pipe, "control")) and ask(pipe, "get_server_list") is not None:
        sys.stderr.write("An instance of this daemon is already running\n")
        return 1
    try:
        os.unlink(os.path.join(pipe, "control"))
    except OSError:
        pass
    if os.fork():
        return 0
    os.setsid()
    if os.fork():
        os._exit(0)
    os.chdir("/")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    try:
        Daemon(pipe, log).run()
    finally:
        os._exit(0)


def ask(pipe, line):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(os.path.join(pipe, "control"))
            s.sendall(line.encode() + b"\n")
            out = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                out += chunk
            return out.decode()
    except OSError:
        return None


def server_main(daemon_pid):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        try:
            os.kill(daemon_pid, 0)
        except OSError:
            return 0
        time.sleep(0.2)


def control_main(argv):
    set_comm()
    if argv[:1] == ["--server"]:
        return server_main(int(argv[1]))
    pipe = pipe_dir()
    if argv[:1] == ["-d"]:
        return daemonize(pipe, os.environ.get("CUDA_MPS_LOG_DIRECTORY") or DEFAULT_LOG)
    if argv:
        sys.stderr.write("usage: nvidia-cuda-mps-control [-d]\n")
        return 2
    rc = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        out = ask(pipe, line.strip())
        if out is None:
            sys.stderr.write("Cannot find MPS control daemon process\n")
            return 1
        sys.stdout.write(out)
    return rc


# --- nvidia-smi -------------------------------------------------------------------------------------

def _all_mps():
    """(servers, clients) of every stand-in daemon on this machine."""
    srv, cli = [], []
    for pid in pids():
        if comm_of(pid).startswith(NAME) and environ_of(pid).get("GPUOPS_STANDIN_ROLE") == "server":
            srv.append(pid)
            cli.extend(clients(environ_of(pid).get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE))
    return srv, sorted(set(cli))


def _cmdline(pid):
    raw = _read("/proc/%d/cmdline" % pid, "rb") or b""
    return raw.split(b"\0")[0].decode("utf-8", "replace") or comm_of(pid)


def smi_main(argv):
    opts = dict(a.split("=", 1) if "=" in a else (a, "") for a in argv)
    fmt = opts.get("--format", "")
    if "--query-gpu" in opts:
        fields = opts["--query-gpu"].split(",")
        vals = [GPU.get(f, "[N/A]") for f in fields]
        if "nounits" in fmt:
            vals = [v.split(" ")[0] for v in vals]
        print(", ".join(vals) if "noheader" in fmt else ", ".join(fields) + "\n" + ", ".join(vals))
        return 0
    srv, cli = _all_mps()
    if "--query-compute-apps" in opts:
        fields = opts["--query-compute-apps"].split(",")
        for pid in srv + cli:
            row = {"pid": str(pid), "process_name": _cmdline(pid), "used_memory": "30 MiB",
                   "gpu_uuid": GPU["uuid"]}
            print(", ".join(row.get(f, "[N/A]") for f in fields))
        return 0
    if "-L" in opts:
        print("GPU 0: %s (UUID: %s)" % (GPU["name"], GPU["uuid"]))
        return 0
    if argv:
        sys.stderr.write("nvidia-smi stand-in: unsupported arguments %s\n" % " ".join(argv))
        return 2
    print("+-- nvidia-smi stand-in (tests/unit/mps_standin.py) --+\n|   0  %s  %s |" % (GPU["name"], GPU["compute_mode"]))
    print("| Processes:\n|  GPU   GI   CI        PID   Type   Process name   GPU Memory |")
    for pid in srv:
        print("|    0   N/A  N/A  %9d      C   %s   30MiB |" % (pid, "nvidia-cuda-mps-server"))
    for pid in cli:
        print("|    0   N/A  N/A  %9d    M+C   %s   30MiB |" % (pid, _cmdline(pid)))
    return 0


# --- the launchers -----------------------------------------------------------------------------------

LAUNCHER = """#!%(python)s
# Stand-in for NVIDIA's %(name)s (tests only), written by %(module)s
import sys
sys.path.insert(0, %(dir)r)
import mps_standin
raise SystemExit(mps_standin.%(main)s(sys.argv[1:]))
"""


def install_launchers(directory, python=None):
    """Write ``nvidia-cuda-mps-control`` and ``nvidia-smi`` into ``directory``; returns their paths."""
    here = os.path.dirname(os.path.abspath(__file__))
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, main in (("nvidia-cuda-mps-control", "control_main"), ("nvidia-smi", "smi_main")):
        path = os.path.join(directory, name)
        with open(path, "w") as f:
            f.write(LAUNCHER % {"python": python or sys.executable, "name": name, "module": os.path.abspath(__file__),
                                "dir": here, "main": main})
        os.chmod(path, 0o755)
        paths.append(path)
    return paths


if __name__ == "__main__":
    if sys.argv[1:2] == ["--server"]:  # the daemon's server child is started as this file
        set_comm()
        raise SystemExit(server_main(int(sys.argv[2])))
    if len(sys.argv) == 3 and sys.argv[1] == "--install-launchers":
        sys.stdout.write("\n".join(install_launchers(sys.argv[2])) + "\n")
        raise SystemExit(0)
    sys.stderr.write("usage: mps_standin.py --install-launchers DIR\n")
    raise SystemExit(2)
