# SPDX-License-Identifier: Apache-2.0
"""An API server on 127.0.0.1 (a port of its own) that misbehaves on purpose, for the Kubernetes modules' timeout,
retry and paging tests: real sockets, the real ``kubernetes`` library and the modules' own code in between.

It serves discovery for Nodes (v1) and DaemonSets (apps/v1) and answers every other request from a script per
(method, path): a list of steps taken in turn (the last one again and again), each an answer (``status``, ``body``,
``headers``), optionally after ``delay`` seconds, or ``silent`` (the connection stays open and nothing comes back).
``silent_listener()`` is lower still: a socket that the kernel accepts connections for and that never reads or
answers; ``full_listener()`` one that connections never complete to. Every request is recorded (method, path with its query, body) in ``requests``.

What the module under test runs in: ``run_module_process`` starts it as Ansible starts a module (its own Python
process, the arguments in a file), so a module that hangs is killed at a hard limit and the test fails instead of
hanging the suite.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

DISCOVERY = {
    "/version": {"major": "1", "minor": "33", "gitVersion": "v1.33.0"},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
         "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}]},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node",
         "verbs": ["get", "list", "patch", "watch"]}]},
    "/apis/apps/v1": {"kind": "APIResourceList", "groupVersion": "apps/v1", "resources": [
        {"name": "daemonsets", "singularName": "daemonset", "namespaced": True, "kind": "DaemonSet",
         "verbs": ["get", "list", "patch", "watch"]}]},
}


def node(name, labels=None):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {}), "resourceVersion": "1"}}


def node_list(*names, cont=None):
    meta = {"resourceVersion": "7"}
    if cont:
        meta["continue"] = cont
    return {"kind": "NodeList", "apiVersion": "v1", "metadata": meta,
            "items": [{k: v for k, v in node(n).items() if k not in ("apiVersion", "kind")} for n in names]}


def status(code, reason, message):
    """A metav1.Status body, as the API server refuses a request."""
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": message}


class ApiServer:
    """``with ApiServer({("GET", "/api/v1/nodes"): [step, ...]}) as api:`` -> api.url, api.kubeconfig(dir)."""

    def __init__(self, script=None):
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.requests, self.lock, self.stop = [], threading.Lock(), threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def handle_one(self, method):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = urlsplit(self.path).path
                with server.lock:
                    server.requests.append((method, self.path, body.decode() if body else None, time.monotonic()))
                    steps = server.script.get((method, path))
                    if steps:
                        step = steps.pop(0) if len(steps) > 1 else steps[0]
                    elif method == "GET" and path in DISCOVERY:
                        step = {"body": DISCOVERY[path]}
                    else:
                        step = {"status": 404, "body": status(404, "NotFound", "%s not found" % path)}
                if step.get("silent"):
                    server.stop.wait(600)
                    return
                if step.get("delay"):
                    time.sleep(step["delay"])
                data = json.dumps(step.get("body", {})).encode()
                self.send_response(step.get("status", 200))
                self.send_header("Content-Type", "application/json")
                for key, value in (step.get("headers") or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self.handle_one("GET")

            def do_PATCH(self):
                self.handle_one("PATCH")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def seen(self, method=None, path=None):
        """The requests made (method, path with query), those of ``method`` and ``path`` (without query) if given."""
        return [(m, p) for m, p, _b, _t in self.requests
                if (method is None or m == method) and (path is None or urlsplit(p).path == path)]

    def kubeconfig(self, where):
        return write_kubeconfig(where, self.url)


@contextlib.contextmanager
def silent_listener():
    """A listening socket nobody accepts on: connections complete (the kernel's backlog), nothing is ever read or
    answered. Yields its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield "http://127.0.0.1:%d" % sock.getsockname()[1]
    finally:
        sock.close()


@contextlib.contextmanager
def full_listener():
    """A listening socket whose backlog is full: the kernel drops further connection attempts, so a connection
    never completes (a firewall that drops packets, from the client's side). Yields its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(0)
    port = sock.getsockname()[1]
    queued = []
    try:
        for _attempt in range(4):
            conn = socket.socket()
            conn.setblocking(False)
            conn.connect_ex(("127.0.0.1", port))
            queued.append(conn)
        time.sleep(0.2)
        yield "http://127.0.0.1:%d" % port
    finally:
        for conn in queued:
            conn.close()
        sock.close()


def write_kubeconfig(where, url):
    path = os.path.join(str(where), "kubeconfig")
    with open(path, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "t",
                   "clusters": [{"name": "t", "cluster": {"server": url}}],
                   "users": [{"name": "t", "user": {"token": "t"}}],
                   "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}]}, f)
    return path


def run_module_process(name, args, where, limit=30):
    """Run module ``name`` of the collection under test with ``args`` in a Python process of its own, as Ansible
    does; -> (exit code, result, seconds it ran). A run still going after ``limit`` seconds is killed and reported
    as an AssertionError (the module hangs). ``where``: a directory of the test's own, its HOME and TMPDIR (the
    kubernetes library's discovery cache is written there)."""
    argfile = os.path.join(str(where), "args-%s.json" % name)
    with open(argfile, "w") as f:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, f)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(where), "TMPDIR": str(where),
           "LANG": "C.UTF-8",
           # the collection under test first, then where this process found ansible and kubernetes (a venv's
           # site-packages, or the paths ansible-test units puts on sys.path)
           "PYTHONPATH": os.pathsep.join([os.environ["GPUOPS_COLLECTIONS"]] + [p for p in sys.path if p and os.path.isdir(p)])}
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "ansible_collections.gpuops.nvidia.plugins.modules." + name,
                               argfile], capture_output=True, text=True, env=env, timeout=limit, check=False)
    except subprocess.TimeoutExpired:
        raise AssertionError("%s still running after %d s: it hangs" % (name, limit)) from None
    took = time.monotonic() - start
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("%s printed no result (rc %d): %s %s"
                             % (name, proc.returncode, proc.stdout, proc.stderr)) from None
    return proc.returncode, result, took
