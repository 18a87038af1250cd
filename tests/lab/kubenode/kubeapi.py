"""A small Kubernetes API client for the kubelet node lanes (stdlib only, plus PyYAML when the kubeconfig is
YAML): the GPU machine has no kubectl and no kubernetes client package.

Reads the current context of a kubeconfig that names its CA, client certificate and key as files or as
inline base64 data (what the lanes' up.sh writes), and speaks JSON to the API server with a timeout on
every request.
"""
from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request

TIMEOUT = 15


def _load(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return json.loads(text)
    except ValueError:
        import yaml  # noqa: PLC0415 - only YAML kubeconfigs need it
        return yaml.safe_load(text)


def _named(items, name, what):
    for item in items or []:
        if item.get("name") == name:
            return item.get(what) or {}
    raise ValueError(f"kubeconfig has no {what} named {name!r}")


class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body[:400]}")
        self.status = status
        self.body = body


class Api:
    def __init__(self, kubeconfig, timeout=TIMEOUT):
        cfg = _load(kubeconfig)
        ctx = _named(cfg.get("contexts"), cfg.get("current-context"), "context")
        cluster = _named(cfg.get("clusters"), ctx.get("cluster"), "cluster")
        user = _named(cfg.get("users"), ctx.get("user"), "user")
        self.server = cluster["server"].rstrip("/")
        self.timeout = timeout
        self._tmp = []
        self.ctx = ssl.create_default_context(cafile=self._file(cluster, "certificate-authority"))
        cert, key = self._file(user, "client-certificate"), self._file(user, "client-key")
        if cert:
            self.ctx.load_cert_chain(cert, key)
        self.token = user.get("token")

    def _file(self, section, key):
        if section.get(key):
            return section[key]
        data = section.get(key + "-data")
        if not data:
            return None
        fd, path = tempfile.mkstemp(prefix="kubeapi-")
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(data))
        self._tmp.append(path)
        return path

    def __del__(self):
        for p in getattr(self, "_tmp", []):
            try:
                os.unlink(p)
            except OSError:
                pass

    def request(self, method, path, body=None, query=None):
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=self.timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, e.read().decode(errors="replace")) from None
        return json.loads(raw) if raw else {}

    def get(self, path, **query):
        return self.request("GET", path, query=query or None)
