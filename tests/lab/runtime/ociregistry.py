# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""A read-only image registry (the OCI distribution API's pull half) over plain HTTP on 127.0.0.1.

CRI-O pulls only through a registry (its ``docker://`` transport); the lanes have no registry and no
network, so this one serves the OCI image-layout archives that ``tests/lab/gpu/node/mkimage.py`` writes:

    reg = Registry({"gpuops/busybox:lab": "/path/busybox.tar"})
    reg.start()            # -> "127.0.0.1:PORT"; pull "127.0.0.1:PORT/gpuops/busybox:lab"
    ...
    reg.stop()

It answers ``GET|HEAD /v2/``, ``/v2/<name>/manifests/<tag or digest>`` and ``/v2/<name>/blobs/<digest>``
and nothing else (no push, no catalog, no auth).  Every request is recorded in ``reg.requests`` so a test
can tell that a daemon really pulled.
"""
from __future__ import annotations

import hashlib
import json
import re
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_PATH = re.compile(r"^/v2/(?P<name>[a-z0-9]+(?:[._/-][a-z0-9]+)*)/(?P<kind>manifests|blobs)/(?P<ref>[A-Za-z0-9_.:+-]{1,160})$")


def _digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def load_archive(path):
    """An OCI image-layout tar -> (manifest digest, {digest: bytes}), every blob's digest checked."""
    blobs = {}
    with tarfile.open(path) as t:
        index = json.load(t.extractfile("index.json"))
        for m in t.getmembers():
            if m.isfile() and m.name.startswith("blobs/sha256/"):
                data = t.extractfile(m).read()
                d = "sha256:" + m.name.rsplit("/", 1)[1]
                if _digest(data) != d:
                    raise ValueError("%s: blob %s does not hash to its name" % (path, d))
                blobs[d] = data
    manifests = index.get("manifests") or []
    if len(manifests) != 1 or manifests[0]["digest"] not in blobs:
        raise ValueError("%s: expected one manifest in index.json" % path)
    return manifests[0]["digest"], blobs


class Registry(object):
    def __init__(self, images):
        self.tags = {}                     # (name, tag) -> manifest digest
        self.blobs = {}                    # digest -> bytes (shared by every repository)
        self.names = set()
        for ref, path in images.items():
            name, tag = ref.rsplit(":", 1)
            digest, blobs = load_archive(path)
            self.tags[(name, tag)] = digest
            self.blobs.update(blobs)
            self.names.add(name)
        self.requests = []
        self._server = None
        self._thread = None

    def start(self):
        registry = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_):     # the test reads registry.requests instead
                pass

            def _send(self, code, body=b"", ctype="application/json", digest=None):
                self.send_response(code)
                self.send_header("Docker-Distribution-API-Version", "registry/2.0")
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                if digest:
                    self.send_header("Docker-Content-Digest", digest)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _answer(self):
                registry.requests.append((self.command, self.path))
                if self.path == "/v2/":
                    return self._send(200, b"{}")
                m = _PATH.match(self.path)
                if not m or m.group("name") not in registry.names:
                    return self._send(404, b'{"errors":[{"code":"NAME_UNKNOWN","message":"unknown"}]}')
                ref = m.group("ref")
                if m.group("kind") == "manifests":
                    digest = ref if ref.startswith("sha256:") else registry.tags.get((m.group("name"), ref))
                    if digest not in registry.blobs:
                        return self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"unknown"}]}')
                    body = registry.blobs[digest]
                    return self._send(200, body, json.loads(body)["mediaType"], digest)
                if ref not in registry.blobs:
                    return self._send(404, b'{"errors":[{"code":"BLOB_UNKNOWN","message":"unknown"}]}')
                return self._send(200, registry.blobs[ref], "application/octet-stream", ref)

            do_GET = do_HEAD = _answer

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):   # a client that hangs up mid-blob is not news
                pass

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return "127.0.0.1:%d" % self._server.server_address[1]

    def pulled(self, name):
        """Blob GETs for one repository: what a client actually downloaded from it."""
        return [p for c, p in self.requests if c == "GET" and p.startswith("/v2/%s/blobs/" % name)]

    def stop(self):
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
