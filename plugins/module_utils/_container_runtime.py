# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""NVIDIA runtime entries for containerd, CRI-O and Docker configs.

PRIVATE: this module_utils file may change at any time; do not import it from
outside the collection.

Pure transforms (text in, text out) plus a small restart/verify/restore
orchestrator.  Every transform edits only what it must: TOML through the
comment-preserving :class:`Document`, daemon.json through an order-keeping
JSON merge that leaves the file untouched when the data already matches.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import socket
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils._toml import (
    Document,
    TomlEditError,
    TomlError,
    dumps_tables,
)

RUNTIMES = ("containerd", "crio", "docker")
DEFAULT_CONFIG = {
    "containerd": "/etc/containerd/config.toml",
    "crio": "/etc/crio/crio.conf.d/99-nvidia.toml",
    "docker": "/etc/docker/daemon.json",
}
DEFAULT_SOCKET = {
    "containerd": "/run/containerd/containerd.sock",
    "crio": "/var/run/crio/crio.sock",
    "docker": "/var/run/docker.sock",
}
DEFAULT_UNIT = {"containerd": "containerd", "crio": "crio", "docker": "docker"}
DEFAULT_BINARY = {"containerd": "containerd", "crio": "crio", "docker": "dockerd"}
CRI_PLUGIN = {
    1: ("plugins", "cri"),
    2: ("plugins", "io.containerd.grpc.v1.cri"),
    3: ("plugins", "io.containerd.cri.v1.runtime"),
    4: ("plugins", "io.containerd.cri.v1.runtime"),   # containerd 2.2+ writes version 4, same CRI layout
}
RUNC_V2 = "io.containerd.runc.v2"
# k3s / RKE2 regenerate config.toml at every start from config.toml.tmpl
_RANCHER_GENERATED = re.compile(r"/var/lib/rancher/(k3s|rke2)/agent/etc/containerd/config(-v3)?\.toml$")
DROPIN_HEADER = (
    "# Managed by gpuops.nvidia.container_runtime: the CRI plugin section of %s\n"
    "# plus the NVIDIA runtime.  Edit the main file and re-run the module instead.\n"
)


class RuntimeConfigError(ValueError):
    """Bad input or a config that cannot be edited safely (nothing written)."""


# -- containerd ---------------------------------------------------------------

def containerd_version(doc):
    """Config version: explicit ``version``; empty file = 2; legacy v1 layout = 1."""
    version = doc.data.get("version")
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, int) or version not in CRI_PLUGIN:
            raise RuntimeConfigError("unsupported containerd config version %r (expected 1, 2, 3 or 4)" % (version,))
        return version
    plugins = doc.data.get("plugins")
    if isinstance(plugins, dict) and "cri" in plugins:
        return 1  # containerd reads a file without `version` as v1
    return 2


def _default_runtime(cri, name):
    """The runtime the NVIDIA one inherits from (default, else runc, else crun)."""
    ctd = cri.get("containerd") if isinstance(cri.get("containerd"), dict) else {}
    runtimes = ctd.get("runtimes") if isinstance(ctd.get("runtimes"), dict) else {}
    for candidate in (ctd.get("default_runtime_name"), "runc", "crun"):
        if candidate and candidate != name and isinstance(runtimes.get(candidate), dict):
            return candidate, runtimes[candidate]
    return None, {}


def _fill_missing(target, base):
    """Copy keys of ``base`` that ``target`` lacks (recursively)."""
    out = dict(target)
    for k, v in base.items():
        if k not in out:
            out[k] = json.loads(json.dumps(v)) if isinstance(v, (dict, list)) else v
        elif isinstance(out[k], dict) and isinstance(v, dict):
            out[k] = _fill_missing(out[k], v)
    return out


def _containerd_edit(doc, version, p):
    """Apply the NVIDIA runtime to a containerd Document; returns info dict."""
    cri_path = CRI_PLUGIN[version]
    cri = doc.get(cri_path, {})
    if not isinstance(cri, dict):
        raise RuntimeConfigError("%s is not a table" % ".".join(cri_path))
    name = p["runtime_name"]
    runtimes_path = cri_path + ("containerd", "runtimes")
    existing = doc.get(runtimes_path + (name,), {})
    if not isinstance(existing, dict):
        raise RuntimeConfigError("runtime %s is not a table" % name)
    base_name, base = _default_runtime(cri, name)
    managed = dict(p.get("runtime_config") or {})
    managed.setdefault("runtime_type", existing.get("runtime_type") or base.get("runtime_type") or RUNC_V2)
    options = dict(p.get("runtime_options") or {})
    options["BinaryName"] = p["runtime_path"]
    managed["options"] = options
    # inherited keys only where the NVIDIA runtime does not set them already
    inherited = _fill_missing(existing, base)
    desired = _fill_missing(managed, inherited)
    if doc.data.get("version") is None and not (version == 1 and doc.text.strip()):
        doc.set(("version",), version)
    doc.set(runtimes_path + (name,), desired)
    default_path = cri_path + ("containerd", "default_runtime_name")
    if p.get("set_as_default"):
        doc.set(default_path, name)
    elif doc.get(default_path) == name:
        doc.set(default_path, "runc")
    if p.get("enable_cdi") and version < 3:
        # containerd 2.x (config 3+) has CDI on by default
        doc.set(cri_path + ("enable_cdi",), True)
    return {"config_version": version, "cri_plugin": cri_path[1], "inherited_from": base_name}


def configure_containerd(main_text, p, dropin_text=None):
    """Return (new_main_text, new_dropin_text_or_None, info)."""
    path = p.get("config_path") or DEFAULT_CONFIG["containerd"]
    if _RANCHER_GENERATED.search(path):
        raise RuntimeConfigError(
            "%s is regenerated by k3s/RKE2 at every start; edits there are lost. "
            "k3s/RKE2 add the 'nvidia' runtime themselves when nvidia-container-runtime is installed; "
            "for more, point config_path at config.toml.tmpl (or config-v3.toml.tmpl for containerd 2)" % path)
    if path.endswith(".tmpl") and "{{" in (main_text or ""):
        raise RuntimeConfigError(
            "%s is a Go template; only plain-TOML templates can be edited (remove the template "
            "directives or let k3s/RKE2 detect nvidia-container-runtime)" % path)
    doc = _load_toml(main_text, path)
    version = containerd_version(doc)
    drop_in = p.get("drop_in_path")
    if not drop_in:
        info = _containerd_edit(doc, version, p)
        return doc.text, None, info
    if version == 1:
        raise RuntimeConfigError("drop_in_path needs containerd config version 2 or 3; %s is version 1" % path)
    # main file: version + imports
    if doc.data.get("version") is None:
        doc.set(("version",), version)
    imports = doc.data.get("imports", [])
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise RuntimeConfigError("imports in %s is not a list of strings" % path)
    base_dir = os.path.dirname(path)
    if not any(fnmatch.fnmatch(drop_in, os.path.join(base_dir, i)) for i in imports):
        doc.set(("imports",), imports + [drop_in])
    # drop-in: the whole CRI plugin section of the main file (containerd < 2.1
    # replaces plugin tables from imports instead of merging them) + NVIDIA
    cri_path = CRI_PLUGIN[version]
    cri = doc.get(cri_path, {})
    owned = Document(dumps_tables({"version": version, "plugins": {cri_path[1]: json.loads(json.dumps(cri, default=str))}}))
    info = _containerd_edit(owned, version, p)
    info["drop_in_path"] = drop_in
    return doc.text, (DROPIN_HEADER % path) + owned.text, info


# -- CRI-O ----------------------------------------------------------------------

def configure_crio(text, p):
    path = p.get("config_path") or DEFAULT_CONFIG["crio"]
    doc = _load_toml(text, path)
    name = p["runtime_name"]
    entry = dict(p.get("runtime_config") or {})
    entry["runtime_path"] = p["runtime_path"]
    entry.setdefault("runtime_type", "oci")
    doc.set(("crio", "runtime", "runtimes", name), entry)
    if p.get("set_as_default"):
        doc.set(("crio", "runtime", "default_runtime"), name)
    elif doc.get(("crio", "runtime", "default_runtime")) == name:
        doc.delete(("crio", "runtime", "default_runtime"))
    return doc.text, {}


# -- Docker -----------------------------------------------------------------------

def configure_docker(text, p):
    path = p.get("config_path") or DEFAULT_CONFIG["docker"]
    if text is None or not text.strip():
        data = {}
    else:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise RuntimeConfigError("%s is not valid JSON: %s" % (path, e))
    if not isinstance(data, dict):
        raise RuntimeConfigError("%s must hold a JSON object" % path)
    before = json.loads(json.dumps(data))
    name = p["runtime_name"]
    runtimes = data.setdefault("runtimes", {})
    if not isinstance(runtimes, dict):
        raise RuntimeConfigError("'runtimes' in %s is not an object" % path)
    entry = runtimes.get(name)
    if entry is None:
        entry = runtimes[name] = {}
    if not isinstance(entry, dict):
        raise RuntimeConfigError("'runtimes.%s' in %s is not an object" % (name, path))
    entry["path"] = p["runtime_path"]
    entry.setdefault("args", [])
    for k, v in (p.get("runtime_config") or {}).items():
        entry[k] = v
    if p.get("set_as_default"):
        data["default-runtime"] = name
    elif data.get("default-runtime") == name:
        del data["default-runtime"]
    if p.get("enable_cdi"):
        features = data.setdefault("features", {})
        if not isinstance(features, dict):
            raise RuntimeConfigError("'features' in %s is not an object" % path)
        features["cdi"] = True
    if data == before and text is not None and text.strip():
        return text, {}
    return json.dumps(data, indent=_json_indent(text)) + "\n", {}


def _json_indent(text):
    m = re.search(r"\n([ \t]+)\"", text or "")
    if not m:
        return 4
    return m.group(1) if "\t" in m.group(1) else len(m.group(1))


# -- common -----------------------------------------------------------------------

def _load_toml(text, path):
    try:
        return Document(text or "")
    except TomlError as e:
        raise RuntimeConfigError("%s is not valid TOML: %s" % (path, e))


def effective_data(runtime, text):
    """Parsed content used to decide whether a restart is needed."""
    if text is None or not text.strip():
        return {}
    if runtime == "docker":
        return json.loads(text)
    return Document(text).data


def plan(p, read):
    """Compute the file changes for parameters ``p``.

    ``read(path)`` returns a file's text or None.  Returns a list of
    (path, before, after) and an info dict.  Raises RuntimeConfigError on bad
    input, before anything is written.
    """
    runtime = p["runtime"]
    if runtime not in RUNTIMES:
        raise RuntimeConfigError("unknown runtime %r (expected one of %s)" % (runtime, ", ".join(RUNTIMES)))
    if not p.get("runtime_name") or not re.match(r"^[A-Za-z0-9_.-]+$", p["runtime_name"]):
        raise RuntimeConfigError("runtime_name must be a non-empty name of letters, digits, '.', '_' or '-'")
    if not p.get("runtime_path") or not os.path.isabs(p["runtime_path"]):
        raise RuntimeConfigError("runtime_path must be an absolute path")
    path = p.get("config_path") or DEFAULT_CONFIG[runtime]
    if p.get("drop_in_path") and runtime != "containerd":
        raise RuntimeConfigError("drop_in_path is only supported for containerd (for CRI-O, config_path is the drop-in)")
    before = read(path)
    try:
        if runtime == "containerd":
            drop_in = p.get("drop_in_path")
            main_after, dropin_after, info = configure_containerd(before, dict(p, config_path=path))
            changes = [(path, before, main_after)]
            if drop_in:
                changes.append((drop_in, read(drop_in), dropin_after))
        elif runtime == "crio":
            after, info = configure_crio(before, dict(p, config_path=path))
            changes = [(path, before, after)]
        else:
            after, info = configure_docker(before, dict(p, config_path=path))
            changes = [(path, before, after)]
    except TomlEditError as e:
        raise RuntimeConfigError("cannot edit %s safely: %s" % (path, e))
    info["effective_changed"] = any(
        effective_data(runtime, b) != effective_data(runtime, a) for _path, b, a in changes)
    return changes, info


# -- daemon control ---------------------------------------------------------------

def wait_socket(path, timeout):
    deadline = time.time() + timeout
    last = "socket %s not present" % path
    while time.time() < deadline:
        if os.path.exists(path):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(1.0)
            try:
                s.connect(path)
                return True, ""
            except OSError as e:
                last = "cannot connect to %s: %s" % (path, e)
            finally:
                s.close()
        time.sleep(0.2)
    return False, last


def parse_ctr_plugins(table_text, detail_text=""):
    """Plugins from ``ctr plugins ls`` (+ ``-d`` for errors).

    Returns {(type, id): {"status": ..., "error": ...}}.
    """
    out = {}
    for line in table_text.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 3:
            out[(cols[0], cols[1])] = {"status": cols[-1], "error": ""}
    cur = None
    for line in detail_text.splitlines():
        line = line.strip()
        if line.startswith("Type:"):
            cur = [line.split(None, 1)[1] if " " in line else "", ""]
        elif line.startswith("ID:") and cur is not None:
            cur[1] = line.split(None, 1)[1] if " " in line else ""
        elif line.startswith("Message:") and cur is not None:
            key = tuple(cur)
            out.setdefault(key, {"status": "error", "error": ""})["error"] = line.split(None, 1)[1]
    return out


def cri_plugin_failures(plugins):
    """CRI-related plugins that did not load (containerd 1.x and 2.x names)."""
    bad = []
    for (ptype, pid), st in sorted(plugins.items()):
        cri = (ptype == "io.containerd.grpc.v1" and pid == "cri") or ptype == "io.containerd.cri.v1"
        if cri and st["status"] != "ok":
            bad.append("%s.%s: %s" % (ptype, pid, st.get("error") or st["status"]))
    return bad


class Daemon(object):
    """Restart + health check + restore for one runtime daemon."""

    def __init__(self, module, p):
        self.module = module
        self.p = p
        self.runtime = p["runtime"]
        self.socket = p.get("socket") or DEFAULT_SOCKET[self.runtime]
        self.timeout = p.get("restart_timeout") or 30

    def _run(self, argv, **kw):
        rc, out, err = self.module.run_command(argv, environ_update={"LC_ALL": "C", "LANG": "C"}, **kw)
        return rc, out, err

    def _read_pid(self):
        pid_file = self.p.get("pid_file")
        if pid_file:
            try:
                with open(pid_file) as f:
                    return int(f.read().strip() or 0)
            except (OSError, ValueError):
                return 0
        pidof = self.module.get_bin_path("pidof")
        if pidof:
            rc, out, _err = self._run([pidof, "-s", self.p.get("binary_path") or DEFAULT_BINARY[self.runtime]])
            if rc == 0 and out.strip().isdigit():
                return int(out.strip())
        return 0

    def restart(self):
        """Restart the daemon; returns (ok, error text)."""
        mode = self.p["restart_mode"]
        if mode == "systemd":
            systemctl = self.module.get_bin_path("systemctl", required=True)
            rc, out, err = self._run([systemctl, "restart", self.p.get("service_name") or DEFAULT_UNIT[self.runtime]])
            if rc != 0:
                return False, (err or out).strip() + self._journal()
        elif mode == "command":
            rc, out, err = self._run(self.p["restart_command"])
            if rc != 0:
                return False, ("restart command failed (rc=%d): %s" % (rc, (err + out).strip()))
        elif mode == "signal":
            pid = self._read_pid()
            if not pid:
                return False, "no running %s process found to signal" % self.runtime
            try:
                # SIGHUP: containerd does not handle it and exits, its supervisor restarts it;
                # dockerd and CRI-O reload their configuration in place
                os.kill(pid, 1)
            except OSError as e:
                return False, "cannot signal pid %d: %s" % (pid, e)
            if self.runtime != "containerd":
                time.sleep(1)
                return self.healthy()
            deadline = time.time() + self.timeout
            while time.time() < deadline and os.path.exists("/proc/%d" % pid) and self._read_pid() == pid:
                time.sleep(0.2)
        return self.healthy()

    def healthy(self):
        ok, err = wait_socket(self.socket, self.timeout)
        if not ok:
            return False, err + self._journal()
        if self.runtime == "containerd":
            ctr = self.p.get("ctr_path") or self.module.get_bin_path("ctr")
            if ctr:
                deadline = time.time() + self.timeout
                while True:
                    rc, table, err = self._run([ctr, "--address", self.socket, "plugins", "ls"])
                    if rc == 0:
                        break
                    if time.time() > deadline:
                        return False, "ctr plugins ls failed: %s" % (err or table).strip()
                    time.sleep(0.3)
                plugins = parse_ctr_plugins(table)
                if cri_plugin_failures(plugins):
                    rc, detail, err = self._run([ctr, "--address", self.socket, "plugins", "ls", "-d"])
                    bad = cri_plugin_failures(parse_ctr_plugins(table, detail))
                    return False, "containerd is running but its CRI plugin failed to load: " + "; ".join(bad)
        return True, ""

    def _journal(self):
        if self.p["restart_mode"] != "systemd":
            return ""
        journalctl = self.module.get_bin_path("journalctl")
        if not journalctl:
            return ""
        unit = self.p.get("service_name") or DEFAULT_UNIT[self.runtime]
        rc, out, _err = self._run([journalctl, "-u", unit, "-n", "15", "--no-pager", "-o", "cat"])
        return ("\n" + out.strip()) if rc == 0 and out.strip() else ""


def validate_containerd(module, binary, changes, p):
    """``containerd --config <candidate> config dump``; returns dumped data.

    Candidates are written next to the real files (relative imports keep
    resolving) and removed afterwards.  The dump is containerd's own merged
    view, so it also proves that drop-in + imports give the expected result.
    """
    import tempfile
    tmps = {}
    try:
        for path, _before, after in changes:
            d = os.path.dirname(path) or "."
            if not os.path.isdir(d):
                d = tempfile.gettempdir()
            fd, tmp = tempfile.mkstemp(prefix=".gpuops-validate-", suffix=".toml", dir=d)
            tmps[path] = tmp
            with os.fdopen(fd, "w") as f:
                f.write(after)
        main_path = changes[0][0]
        main_tmp = tmps[main_path]
        if len(changes) > 1:
            drop_in, tmp_drop = changes[1][0], tmps[changes[1][0]]
            doc = Document(changes[0][2])
            imports = [tmp_drop if i == drop_in else i for i in doc.data.get("imports", [])]
            if tmp_drop not in imports:
                imports.append(tmp_drop)
            doc.set(("imports",), imports)
            with open(main_tmp, "w") as f:
                f.write(doc.text)
        rc, out, err = module.run_command([binary, "--config", main_tmp, "config", "dump"],
                                          environ_update={"LC_ALL": "C"})
        if rc != 0:
            raise RuntimeConfigError("containerd rejects the new configuration: %s" % (err or out).strip())
        try:
            return Document(out).data
        except TomlError as e:
            raise RuntimeConfigError("cannot read `containerd config dump` output: %s" % e)
    finally:
        for tmp in tmps.values():
            if os.path.exists(tmp):
                os.unlink(tmp)


def dump_has_runtime(dump, p):
    """The runtime as containerd sees it in ``config dump`` output, or None."""
    for version in (4, 2, 1):
        rt = _get(dump, CRI_PLUGIN[version] + ("containerd", "runtimes", p["runtime_name"]))
        if isinstance(rt, dict):
            return rt
    return None


def _get(d, path):
    for part in path:
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d
