# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""NVIDIA runtime entries for containerd, CRI-O and Docker configs.

PRIVATE: this module_utils file may change at any time; do not import it from
outside the collection.

Pure transforms (text in, text out) plus a small restart/verify/restore
orchestrator.  Every transform edits only what it must: TOML through the
comment-preserving :class:`Document`, daemon.json through an order-keeping
JSON merge that leaves the file untouched when the data already matches.

Uninstall (``state=absent``) rests on one record per config file kept in a
state directory (:class:`RecordStore`): the file's bytes as they were before
the module first changed it and the sha256 of what the module last wrote.
When the file still holds exactly what was written, the original bytes come
back; otherwise only the module's own entries are taken out.
"""
from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import os
import re
import socket
import tempfile
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils._files import (
    _fsync_dir,
    backup_copy,
    path_problem,
    read_bytes_of,
    target_problem,
    write_atomic,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import ATTR_LIMIT, NodeFileError, read_node_file, read_node_text
from ansible_collections.gpuops.nvidia.plugins.module_utils._toml import (
    Document,
    TomlEditError,
    TomlError,
    dumps_tables,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import ApplyError, InputError
from ansible_collections.gpuops.nvidia.plugins.module_utils._containerd_releases import CONFIG_VERSIONS

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
# containerd config version -> the table holding ``containerd.runtimes`` (_containerd_releases.py has the facts)
CRI_PLUGIN = {c["version"]: c["cri_plugin"] for c in CONFIG_VERSIONS}
#: config versions drop_in_path works for / the module writes ``enable_cdi`` for
_DROP_IN_VERSIONS = frozenset(c["version"] for c in CONFIG_VERSIONS if c["drop_in"])
_ENABLE_CDI_VERSIONS = frozenset(c["version"] for c in CONFIG_VERSIONS if c["enable_cdi"])
_EXPECTED_VERSIONS = "%s or %s" % (", ".join(str(v) for v in sorted(CRI_PLUGIN)[:-1]), max(CRI_PLUGIN))
RUNC_V2 = "io.containerd.runc.v2"
# k3s / RKE2 regenerate config.toml at every start from config.toml.tmpl
_RANCHER_GENERATED = re.compile(r"/var/lib/rancher/(k3s|rke2)/agent/etc/containerd/config(-v3)?\.toml$")
DROPIN_HEADER = (
    "# Managed by gpuops.nvidia.container_runtime: the CRI plugin section of %s\n"
    "# plus the NVIDIA runtime.  Edit the main file and re-run the module instead.\n"
)


#: a process ID as a pid file holds it (matched whole; pid_max is at most 2**22): never 0 or negative, which
#: os.kill() takes for "the process group" and "every process"
PID_RE = re.compile(r"[1-9][0-9]{0,6}")
PID_MAX = 1 << 22


def _alive(pid, proc="/proc"):
    """A live process (not a zombie waiting for its parent) with this pid: its ``<proc>/<pid>/stat`` (bounded,
    never blocking: ``_pci.read_node_text``) names a state other than Z."""
    text = read_node_text(os.path.join(proc, str(int(pid)), "stat"))
    try:
        return text is not None and text.rsplit(")", 1)[1].split()[0] != "Z"
    except IndexError:
        return False


class RuntimeConfigError(InputError):
    """Bad input or a config that cannot be edited safely (nothing written)."""


#: a systemd unit name (systemd.unit(5)): what restart_mode=systemd passes to systemctl (matched whole)
UNIT_RE = re.compile(r"[A-Za-z0-9:_.\\@-]+")
#: the runtime's name in the config (matched whole)
RUNTIME_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
#: options that name files, absolute when set
PATH_OPTIONS = ("config_path", "drop_in_path", "state_dir", "pid_file", "socket", "binary_path", "ctr_path",
                "backup_dir")


def _nulls(value, where):
    """Where ``value`` holds a null (TOML has none)."""
    if value is None:
        return [where]
    if isinstance(value, dict):
        return sum((_nulls(v, "%s.%s" % (where, k)) for k, v in value.items()), [])
    if isinstance(value, list):
        return sum((_nulls(v, "%s[%d]" % (where, i)) for i, v in enumerate(value)), [])
    return []


def check_params(p, need_runtime_path=True):
    """Input checks shared by present and absent (nothing is read before them)."""
    runtime = p["runtime"]
    if runtime not in RUNTIMES:
        raise RuntimeConfigError("unknown runtime %r (expected one of %s)" % (runtime, ", ".join(RUNTIMES)))
    if not p.get("runtime_name") or not RUNTIME_NAME_RE.fullmatch(p["runtime_name"]):
        raise RuntimeConfigError("runtime_name must be a non-empty name of letters, digits, '.', '_' or '-'")
    if need_runtime_path and (not p.get("runtime_path") or not os.path.isabs(p["runtime_path"])):
        raise RuntimeConfigError("runtime_path must be an absolute path")
    for option in PATH_OPTIONS:
        if option != "drop_in_path" and p.get(option) is not None:
            problem = path_problem(p[option], option)
            if problem:
                raise RuntimeConfigError(problem)
    if p.get("drop_in_path") and runtime != "containerd":
        raise RuntimeConfigError("drop_in_path is only supported for containerd (for CRI-O, config_path is the drop-in)")
    path = p.get("config_path") or DEFAULT_CONFIG[runtime]
    # the main config itself, in any form (relative ones too), is refused as such first
    check_drop_in(path, p.get("drop_in_path"))
    if p.get("drop_in_path") is not None:
        # relative: written relative to the module's working directory but imported relative to the main
        # file's directory by containerd -- two different files
        problem = path_problem(p["drop_in_path"], "drop_in_path")
        if problem:
            raise RuntimeConfigError(problem)
    if p.get("restart_timeout") is not None and p["restart_timeout"] < 1:
        raise RuntimeConfigError("restart_timeout must be at least 1 second, got %r" % (p["restart_timeout"],))
    if p.get("service_name") is not None and not UNIT_RE.fullmatch(p["service_name"]):
        raise RuntimeConfigError("service_name must be a systemd unit name (letters, digits and :_.\\@-), got %r"
                                 % (p["service_name"],))
    cmd = p.get("restart_command")
    if p.get("restart_mode") == "command" and not cmd:
        raise RuntimeConfigError("restart_mode=command needs restart_command (the argv that restarts %s)" % runtime)
    if cmd is not None and (not cmd or any(not (w or "").strip() for w in cmd)):
        raise RuntimeConfigError("restart_command must be a non-empty argv list without empty words, got %r" % (cmd,))
    if runtime in ("containerd", "crio"):
        nulls = _nulls(p.get("runtime_options") or {}, "runtime_options") + \
            _nulls(p.get("runtime_config") or {}, "runtime_config")
        if nulls:
            raise RuntimeConfigError("%s: null values cannot be written to %s's TOML config; leave the key(s) out"
                                     % (", ".join(nulls), runtime))
    return path


def check_targets(paths):
    """Refuse config files that cannot be read or replaced (a directory, FIFO, a parent that is a file)."""
    for path in paths:
        if path:
            problem = target_problem(path)
            if problem:
                raise RuntimeConfigError(problem + "; nothing was changed")


def _real_candidates(path, base_dir):
    """Real paths ``path`` may name: from the working directory and, when relative, from
    ``base_dir`` (containerd resolves a relative import against the main file's directory)."""
    out = [os.path.realpath(os.path.abspath(path))]
    if not os.path.isabs(path) and base_dir:
        out.append(os.path.realpath(os.path.join(base_dir, path)))
    return out


def same_file(a, b, base_dir=None):
    """Whether paths ``a`` and ``b`` name one file (symlinks, ``..``, relative forms, hard links)."""
    reals_a = _real_candidates(a, base_dir)
    reals_b = _real_candidates(b, base_dir)
    if set(reals_a) & set(reals_b):
        return True
    for x in reals_a:
        for y in reals_b:
            try:
                if os.path.samefile(x, y):
                    return True
            except OSError:
                continue
    return False


def check_drop_in(config_path, drop_in_path):
    """Refuse a containerd drop-in that is the main config itself (it would overwrite it)."""
    if not drop_in_path:
        return
    base_dir = os.path.dirname(os.path.realpath(os.path.abspath(config_path)))
    if same_file(config_path, drop_in_path, base_dir):
        raise RuntimeConfigError(
            "drop_in_path %s is the same file as config_path %s (%s): writing the drop-in would replace "
            "the main containerd config. Use a file of its own, for example /etc/containerd/conf.d/99-nvidia.toml"
            % (drop_in_path, config_path, os.path.realpath(os.path.abspath(config_path))))


def default_backup_dir(p):
    """Backups live under the state directory, never next to the configs."""
    return os.path.join(p.get("state_dir") or DEFAULT_STATE_DIR, "backups")


def check_backup_dir(backup_dir, p, paths):
    """Refuse a backup directory the daemon could load configs from.

    That is the directory of any file the module edits, or anything below the
    directory of a drop-in (CRI-O loads every file of ``crio.conf.d``; a
    containerd ``imports`` glob may cover the drop-in's directory).
    """
    if not backup_dir or not os.path.isabs(backup_dir):
        raise RuntimeConfigError("backup_dir must be an absolute path")
    bdir = os.path.realpath(backup_dir)
    runtime = p["runtime"]
    for path in paths:
        if not path:
            continue
        d = os.path.dirname(os.path.realpath(os.path.abspath(path)))
        drop_in = runtime == "crio" or (runtime == "containerd" and path == p.get("drop_in_path"))
        if bdir == d or (drop_in and bdir.startswith(d.rstrip(os.sep) + os.sep)):
            raise RuntimeConfigError(
                "backup_dir %s is %s %s, where %s reads configuration files: a backup there would be "
                "loaded as configuration. Choose a directory elsewhere (default: <state_dir>/backups)"
                % (backup_dir, "the directory of" if bdir == d else "inside the drop-in directory of", path,
                   runtime))
    return bdir


# -- containerd ---------------------------------------------------------------

def containerd_version(doc):
    """Config version: explicit ``version``; empty file = 2; legacy v1 layout = 1."""
    version = doc.data.get("version")
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, int) or version not in CRI_PLUGIN:
            raise RuntimeConfigError("unsupported containerd config version %r (expected %s)" % (version, _EXPECTED_VERSIONS))
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
    if p.get("enable_cdi") and version in _ENABLE_CDI_VERSIONS:
        # containerd 2.x (config 3+) has CDI on by default
        doc.set(cri_path + ("enable_cdi",), True)
    return {"config_version": version, "cri_plugin": cri_path[1], "inherited_from": base_name}


def _check_containerd_path(path, text):
    if _RANCHER_GENERATED.search(path):
        raise RuntimeConfigError(
            "%s is regenerated by k3s/RKE2 at every start; edits there are lost. "
            "k3s/RKE2 add the 'nvidia' runtime themselves when nvidia-container-runtime is installed; "
            "for more, point config_path at config.toml.tmpl (or config-v3.toml.tmpl for containerd 2)" % path)
    if path.endswith(".tmpl") and "{{" in (text or ""):
        raise RuntimeConfigError(
            "%s is a Go template; only plain-TOML templates can be edited (remove the template "
            "directives or let k3s/RKE2 detect nvidia-container-runtime)" % path)


def configure_containerd(main_text, p, dropin_text=None):
    """Return (new_main_text, new_dropin_text_or_None, info)."""
    path = p.get("config_path") or DEFAULT_CONFIG["containerd"]
    _check_containerd_path(path, main_text)
    doc = _load_toml(main_text, path)
    version = containerd_version(doc)
    drop_in = p.get("drop_in_path")
    if not drop_in:
        info = _containerd_edit(doc, version, p)
        return doc.text, None, info
    if version not in _DROP_IN_VERSIONS:
        raise RuntimeConfigError("drop_in_path needs containerd config version 2 or 3; %s is version %d" % (path, version))
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
    path = check_params(p)
    check_targets([path, p.get("drop_in_path")])
    read = _reader(read)
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


def _reader(read):
    """``read`` with its OSErrors (unreadable, not a regular file, not UTF-8) as RuntimeConfigError."""
    def wrapped(path):
        try:
            return read(path)
        except (OSError, UnicodeDecodeError) as e:
            why = str(e) if path in str(e) else "cannot read %s: %s" % (path, e)
            raise RuntimeConfigError("%s; nothing was changed" % why)
    return wrapped


# -- pristine records and uninstall (state=absent) --------------------------------

DEFAULT_STATE_DIR = "/var/lib/gpuops/container_runtime"
RECORD_FORMAT = 1
_OURS_HEADER = DROPIN_HEADER.split("%s", maxsplit=1)[0]


def sha256_of(data):
    """sha256 hex of bytes; None for a missing file."""
    return None if data is None else hashlib.sha256(data).hexdigest()


def read_bytes(path):
    """The file's exact bytes, or None when it does not exist (FileError, an OSError, when it is not a
    readable regular file)."""
    return read_bytes_of(path)


def file_meta(path):
    """Mode and owner of an existing file (to put back with its bytes), else None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return {"mode": st.st_mode & 0o7777, "uid": st.st_uid, "gid": st.st_gid}


def to_text(data, path=""):
    """Bytes as the editors see them (UTF-8, newlines as Python's text mode reads them)."""
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RuntimeConfigError("%s is not UTF-8: %s" % (path, e))
    return text.replace("\r\n", "\n").replace("\r", "\n")


class FileChange(object):
    """One file going from ``before`` to ``after`` bytes (None = no file)."""

    def __init__(self, path, before, after, meta=None, how="edit"):
        self.path = path
        self.before = before
        self.after = after
        self.meta = meta                         # mode/owner to give the file when ``after`` is written
        self.before_meta = file_meta(path) if before is not None else None
        self.how = how                           # edit | pristine | surgical | delete

    @property
    def before_text(self):
        return to_text(self.before, self.path)

    @property
    def after_text(self):
        return to_text(self.after, self.path)

    def diff(self):
        return {
            "before": self.before_text or "",
            "after": self.after_text or "",
            "before_header": self.path if self.before is not None else "%s (absent)" % self.path,
            "after_header": self.path if self.after is not None else "%s (absent)" % self.path,
        }


class RecordStore(object):
    """One JSON record per config file under ``state_dir``.

    A record holds the file as it was before the module first changed it
    (``pristine_existed``, ``pristine_b64``, mode and owner), the sha256 of the
    bytes the module last wrote (``written_sha256``), the runtime names the
    module added there and whether someone else changed the file between two
    of the module's writes (``user_edited``: the original bytes are then no
    longer a faithful undo).  The record is named by the sha256 of the file's
    real path.
    """

    def __init__(self, state_dir):
        if not state_dir or not os.path.isabs(state_dir):
            raise RuntimeConfigError("state_dir must be an absolute path")
        if os.path.lexists(state_dir) and not os.path.isdir(state_dir):
            raise RuntimeConfigError("state_dir %s exists and is not a directory" % state_dir)
        self.dir = state_dir

    def record_path(self, path):
        return os.path.join(self.dir, hashlib.sha256(os.path.realpath(path).encode("utf-8")).hexdigest() + ".json")

    def load_raw(self, path):
        return read_bytes(self.record_path(path))

    def load(self, path):
        try:
            raw = self.load_raw(path)
        except OSError as e:
            raise RuntimeConfigError("state record %s (for %s) is unreadable: %s; move it away to continue"
                                     % (self.record_path(path), path, e))
        if raw is None:
            return None
        try:
            rec = json.loads(raw.decode("utf-8"))
            if not isinstance(rec, dict) or rec.get("format") != RECORD_FORMAT:
                raise ValueError("unknown record format")
            if rec.get("pristine_existed"):
                rec["_pristine"] = base64.b64decode(rec["pristine_b64"])
            else:
                rec["_pristine"] = None
        except (ValueError, KeyError, TypeError) as e:
            raise RuntimeConfigError("state record %s (for %s) is unreadable: %s; move it away to continue"
                                     % (self.record_path(path), path, e))
        return rec

    def save(self, path, rec):
        data = dict((k, v) for k, v in rec.items() if not k.startswith("_"))
        self._write(self.record_path(path), (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"))

    def remove(self, path):
        rp = self.record_path(path)
        if os.path.exists(rp):
            os.unlink(rp)

    def put_raw(self, path, raw):
        """Put a record back as :meth:`load_raw` returned it (None removes it)."""
        if raw is None:
            self.remove(path)
        else:
            self._write(self.record_path(path), raw)

    def restart_marker(self, path):
        """``<state_dir>/<sha256 of the config's real path>.restart-pending``: present from before the first write
        of a change that needs a daemon restart until a restart after it came back healthy."""
        return os.path.join(self.dir, hashlib.sha256(os.path.realpath(path).encode("utf-8")).hexdigest()
                            + ".restart-pending")

    def restart_pending(self, path):
        return os.path.exists(self.restart_marker(path))

    def mark_restart(self, path, runtime):
        self._write(self.restart_marker(path), ("runtime=%s\nconfig=%s\n" % (runtime, path)).encode("utf-8"))

    def clear_restart(self, path):
        marker = self.restart_marker(path)
        try:
            os.unlink(marker)
        except FileNotFoundError:
            return
        _fsync_dir(self.dir)

    def _write(self, target, data):
        if not os.path.isdir(self.dir):
            os.makedirs(self.dir, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=".gpuops-", dir=self.dir)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        _fsync_dir(self.dir)


def record_after_write(rec, path, runtime, name, before, written, drop_in=None):
    """The record of ``path`` once the module writes ``written`` over ``before``.

    The first write keeps ``before`` as the pristine copy; it is never replaced
    afterwards, except when the file holds the pristine bytes again (then the
    old record is stale and starts over).
    """
    if rec is not None and before is not None and rec.get("pristine_existed") and before == rec["_pristine"]:
        rec = None
    if rec is not None and before is None and not rec.get("pristine_existed"):
        rec = None
    if rec is None:
        meta = file_meta(path) if before is not None else None
        rec = {
            "format": RECORD_FORMAT,
            "path": path,
            "real_path": os.path.realpath(path),
            "runtime": runtime,
            "pristine_existed": before is not None,
            "pristine_b64": base64.b64encode(before).decode("ascii") if before is not None else None,
            "pristine_sha256": sha256_of(before),
            "pristine_mode": meta and meta["mode"],
            "pristine_uid": meta and meta["uid"],
            "pristine_gid": meta and meta["gid"],
            "written_sha256": None,
            "user_edited": False,
            "runtime_names": [],
            "_pristine": before,
        }
    else:
        rec = dict(rec)
        if sha256_of(before) != rec.get("written_sha256"):
            rec["user_edited"] = True
    rec["written_sha256"] = sha256_of(written)
    rec["runtime_names"] = sorted(set(rec.get("runtime_names") or []) | {name})
    if drop_in:
        rec["drop_in_path"] = drop_in
    return rec


def present_records(store, p, changes, main_path):
    """Record updates for the files a state=present run is about to write.

    Returns [(path, record)].
    """
    out = []
    for c in changes:
        drop_in = p.get("drop_in_path") if c.path == main_path else None
        out.append((c.path, record_after_write(store.load(c.path), c.path, p["runtime"], p["runtime_name"],
                                               c.before, c.after, drop_in=drop_in)))
    return out


def _pristine_meta(rec):
    if not rec or rec.get("pristine_mode") is None:
        return None
    return {"mode": rec["pristine_mode"], "uid": rec.get("pristine_uid"), "gid": rec.get("pristine_gid")}


def _same_value(a, b):
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _restore_table(doc, path, pristine_value):
    """Take table ``path`` out of ``doc``, or put back its pristine value."""
    current = doc.get(path)
    if isinstance(pristine_value, dict):
        if current is not None and _same_value(current, pristine_value):
            return
        doc.delete(path)
        doc.set(path, pristine_value)
    elif current is not None:
        doc.delete(path)


def _tidy_end(before, after):
    """A removed table leaves the blank line that separated it: no new blank lines at the end."""
    if after != before and after.endswith("\n\n") and not before.endswith("\n\n"):
        after = after.rstrip("\n") + "\n"
    return after


def remove_containerd(text, name, pristine_text=None, drop_in=None, path=""):
    """containerd config without the module's entries.

    ``pristine_text``: the file before the module's first change ("" when it
    did not exist), None when unknown.  Takes out the runtime table (or puts
    the pristine one back), resets ``default_runtime_name`` when it names the
    runtime (pristine value, else ``runc``) and drops ``drop_in`` from
    ``imports``.  Everything else is kept as it is.
    """
    if text is None or not text.strip():
        return text
    doc = _load_toml(text, path)
    version = containerd_version(doc)
    pristine = None
    if pristine_text is not None:
        try:
            pdoc = Document(pristine_text)
            if containerd_version(pdoc) == version:
                pristine = pdoc
        except (TomlError, RuntimeConfigError):
            pristine = None
    cri_path = CRI_PLUGIN[version]
    rt_path = cri_path + ("containerd", "runtimes", name)
    default_path = cri_path + ("containerd", "default_runtime_name")
    pristine_rt = pristine.get(rt_path) if pristine is not None else None
    try:
        _restore_table(doc, rt_path, pristine_rt)
        if doc.get(default_path) == name:
            pv = pristine.get(default_path) if pristine is not None else None
            if not (isinstance(pristine_rt, dict) and pv == name):
                doc.set(default_path, pv if isinstance(pv, str) and pv != name else "runc")
        imports = doc.data.get("imports")
        if drop_in and isinstance(imports, list) and drop_in in imports:
            rest = [i for i in imports if i != drop_in]
            if rest or (pristine is not None and "imports" in pristine.data):
                doc.set(("imports",), rest)
            else:
                doc.delete(("imports",))
    except TomlEditError as e:
        raise RuntimeConfigError("cannot edit %s safely: %s" % (path, e))
    return _tidy_end(text, doc.text)


def remove_crio(text, name, pristine_text=None, path=""):
    """CRI-O drop-in without the module's runtime table and default_runtime."""
    if text is None or not text.strip():
        return text
    doc = _load_toml(text, path)
    pristine = None
    if pristine_text is not None:
        try:
            pristine = Document(pristine_text)
        except TomlError:
            pristine = None
    rt_path = ("crio", "runtime", "runtimes", name)
    default_path = ("crio", "runtime", "default_runtime")
    pristine_rt = pristine.get(rt_path) if pristine is not None else None
    try:
        _restore_table(doc, rt_path, pristine_rt)
        if doc.get(default_path) == name:
            pv = pristine.get(default_path) if pristine is not None else None
            if not (isinstance(pristine_rt, dict) and pv == name):
                if isinstance(pv, str) and pv != name:
                    doc.set(default_path, pv)
                else:
                    doc.delete(default_path)
    except TomlEditError as e:
        raise RuntimeConfigError("cannot edit %s safely: %s" % (path, e))
    return _tidy_end(text, doc.text)


def remove_docker(text, name, pristine_text=None, path=""):
    """daemon.json without ``runtimes.<name>`` (or with its pristine value) and
    without ``default-runtime`` when it names the runtime; key order and
    indentation kept, text untouched when nothing is ours."""
    if text is None or not text.strip():
        return text
    try:
        data = json.loads(text)
    except ValueError as e:
        raise RuntimeConfigError("%s is not valid JSON: %s" % (path, e))
    if not isinstance(data, dict):
        raise RuntimeConfigError("%s must hold a JSON object" % path)
    pristine = None
    if pristine_text is not None:
        try:
            pristine = json.loads(pristine_text) if pristine_text.strip() else {}
        except ValueError:
            pristine = None
        if not isinstance(pristine, dict):
            pristine = None
    before = json.loads(json.dumps(data))
    prts = pristine.get("runtimes") if pristine is not None else None
    pristine_rt = prts.get(name) if isinstance(prts, dict) else None
    rts = data.get("runtimes")
    if isinstance(rts, dict) and name in rts:
        if pristine_rt is not None:
            rts[name] = pristine_rt
        else:
            del rts[name]
        if not rts and (pristine is None or "runtimes" not in pristine):
            del data["runtimes"]
    if data.get("default-runtime") == name:
        pv = pristine.get("default-runtime") if pristine is not None else None
        if not (pristine_rt is not None and pv == name):
            if isinstance(pv, str) and pv != name:
                data["default-runtime"] = pv
            else:
                del data["default-runtime"]
    if data == before:
        return text
    return json.dumps(data, indent=_json_indent(text)) + "\n"


def _empty(data):
    return isinstance(data, dict) and all(_empty(v) for v in data.values())


def _surgical(runtime, role, text, name, rec, drop_in, path):
    """Text of ``path`` without the module's entries (None: delete the file)."""
    pristine_text = None
    if rec is not None:
        pristine_text = to_text(rec["_pristine"], path) if rec.get("pristine_existed") else ""
    if runtime == "containerd":
        if role == "drop_in":
            ours = (rec is not None and not rec.get("pristine_existed")) or \
                (rec is None and (text or "").startswith(_OURS_HEADER))
            if ours:
                return None         # the drop-in is the module's own file
            return remove_containerd(text, name, pristine_text, path=path)
        return remove_containerd(text, name, pristine_text, drop_in=drop_in, path=path)
    if runtime == "crio":
        out = remove_crio(text, name, pristine_text, path=path)
        created = rec is not None and not rec.get("pristine_existed")
        if out is not None and (created or (rec is None and out != text)) and _empty(Document(out).data):
            return None             # nothing but the module's runtime was in this drop-in
        return out
    out = remove_docker(text, name, pristine_text, path=path)
    if out is not None and rec is not None and not rec.get("pristine_existed") and json.loads(out) == {}:
        return None                 # daemon.json was the module's creation and holds nothing else
    return out


def plan_absent(p, store, read=read_bytes):
    """What state=absent changes.

    Returns (changes, record_ops, info, warnings): ``changes`` are the
    :class:`FileChange` objects to apply (only real changes), ``record_ops``
    [(path, record or None)] to apply once the files are in place (None
    removes the record).  Raises RuntimeConfigError before anything is written.
    """
    runtime = p["runtime"]
    name = p["runtime_name"]
    path = check_params(p, need_runtime_path=False)
    read = _reader(read)
    main_rec = store.load(path)
    files = [(path, "main", main_rec)]
    drop_in = None
    if runtime == "containerd":
        drop_in = p.get("drop_in_path") or (main_rec or {}).get("drop_in_path")
        check_drop_in(path, drop_in)
        if drop_in:
            files.append((drop_in, "drop_in", store.load(drop_in)))
    check_targets([path, drop_in])
    changes, ops, warnings = [], [], []
    info = {"config_path": path, "restored_files": [], "removed_files": [], "edited_files": []}
    if drop_in:
        info["drop_in_path"] = drop_in
    for fpath, role, rec in files:
        cur = read(fpath)
        cur_text = to_text(cur, fpath)
        if runtime == "containerd" and role == "main":
            _check_containerd_path(fpath, cur_text)
        others = [n for n in (rec or {}).get("runtime_names", []) if n != name]
        meta = None
        if rec is not None and not others and not rec.get("user_edited") and cur is not None \
                and sha256_of(cur) == rec.get("written_sha256"):
            after, how, meta = rec["_pristine"], "pristine", _pristine_meta(rec)
        else:
            try:
                new_text = _surgical(runtime, role, cur_text, name, rec, drop_in, fpath)
            except TomlEditError as e:
                raise RuntimeConfigError("cannot edit %s safely: %s" % (fpath, e))
            how = "surgical"
            after = cur if new_text == cur_text else (None if new_text is None else new_text.encode("utf-8"))
            if after != cur and after is not None:
                if rec is None:
                    warnings.append("%s: no record of its original content in %s; removed only the %r runtime's "
                                    "entries" % (fpath, store.dir, name))
                elif not others:
                    warnings.append("%s changed since gpuops.nvidia last wrote it; removed only the %r runtime's "
                                    "entries and kept the other changes, so the file is not byte-identical to its "
                                    "original" % (fpath, name))
        if after != cur:
            if after is None:
                how = "delete"
            changes.append(FileChange(fpath, cur, after, meta=meta, how=how))
            key = {"pristine": "restored_files", "delete": "removed_files"}.get(how, "edited_files")
            info[key].append(fpath)
        if rec is not None:
            if others and after is not None:
                kept = dict(rec, runtime_names=others, written_sha256=sha256_of(after))
                ops.append((fpath, kept))
            else:
                ops.append((fpath, None))
    info["effective_changed"] = any(_data_differs(runtime, c.before_text, c.after_text) for c in changes)
    return changes, ops, info, warnings


def _data_differs(runtime, before, after):
    try:
        return effective_data(runtime, before) != effective_data(runtime, after)
    except (TomlError, ValueError):
        return True


# -- writing ----------------------------------------------------------------------

class RuntimeApplyError(RuntimeConfigError, ApplyError):
    """A write failed; the files written so far were put back (``unrestored`` lists those that could not be)."""

    def __init__(self, msg, unrestored):
        RuntimeConfigError.__init__(self, msg)
        self.unrestored = unrestored


def write_bytes(module, path, data, meta=None):
    """Atomically make ``path`` hold ``data`` (None removes it).

    Written through a symlink (the link stays).  ``meta`` (mode/uid/gid) is
    enforced when given; otherwise an existing file keeps its mode and owner and a
    new one gets 0644.
    """
    if data is None:
        if os.path.lexists(path):
            os.unlink(path)
        return
    owner = None
    if meta and meta.get("uid") is not None:
        owner = (meta["uid"], meta.get("gid"))
    write_atomic(module, path, data, mode=meta["mode"] if meta else None, owner=owner)


def _is_as_before(c):
    if read_bytes(c.path) != c.before:
        return False
    return c.before is None or c.before_meta is None or file_meta(c.path)["mode"] == c.before_meta["mode"]


def apply_changes(module, changes, backup=False, backup_dir=None):
    """Write every change, in the order given; returns {path: backup file}.

    Backups are all taken before the first write.  If any write fails, the
    files written so far are put back byte for byte (a file that did not exist
    is deleted) and :class:`RuntimeApplyError` is raised.
    """
    backups = {}
    if backup:
        for c in changes:
            if c.before is not None:
                try:
                    backups[c.path] = backup_copy(module, c.path, backup_dir)
                except (OSError, IOError) as e:
                    raise RuntimeApplyError(str(e) if "nothing was changed" in str(e) else
                                            "cannot back up %s: %s; nothing was changed" % (c.path, e), [])
    done = []
    for c in changes:
        done.append(c)
        try:
            write_bytes(module, c.path, c.after, meta=c.meta)
        except Exception as e:      # disk full, read-only file system, EBUSY bind mount, ...
            unrestored = restore_changes(module, done)
            if unrestored:
                state = "could NOT restore %s (see backups or the records in state_dir)" % ", ".join(unrestored)
            else:
                state = "original files restored byte for byte, nothing was changed"
            raise RuntimeApplyError("writing %s failed: %s; %s" % (c.path, e, state), unrestored)
    return backups


def restore_changes(module, changes):
    """Put every file back exactly as it was before ``changes`` (bytes, mode, owner).

    Files already as they were are left alone.  Returns the paths that could not
    be restored (an empty list when all are back).
    """
    failed = []
    for c in reversed(changes):
        try:
            if not _is_as_before(c):
                write_bytes(module, c.path, c.before, meta=c.before_meta)
            if read_bytes(c.path) != c.before:
                failed.append(c.path)
        except Exception:
            failed.append(c.path)
    return failed


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
        # after a restart on the new files, the runtime must be in the daemon's running configuration (CRI-O);
        # a restart back on restored files only has to come up
        self.expect_runtime = p.get("state", "present") == "present"

    def _run(self, argv, limit=None, **kw):
        """``limit``: seconds a read of the daemon may take (coreutils ``timeout``, where the host has it): a daemon
        that accepts on its socket and never answers must not hold the task."""
        if limit:
            timeout = self.module.get_bin_path("timeout")
            if timeout:
                argv = [timeout, "--kill-after=2", str(int(limit))] + list(argv)
        rc, out, err = self.module.run_command(argv, environ_update={"LC_ALL": "C", "LANG": "C"}, **kw)
        return rc, out, err

    def _read_pid(self):
        """The daemon's pid: from ``pid_file`` when set (0 while it is absent or empty), else pidof's answer (0: none).
        A pid file that cannot be read (``_pci.read_node_file``: a FIFO, a device, more than 64 KiB) or that holds
        anything but a process ID raises NodeFileError naming it: what it holds is never signalled."""
        pid_file = self.p.get("pid_file")
        if pid_file:
            data = read_node_file(pid_file, ATTR_LIMIT)
            text = (data or b"").decode("utf-8", "replace").strip()
            if not text:
                return 0
            if not PID_RE.fullmatch(text) or int(text) > PID_MAX:
                raise NodeFileError("pid file %s does not hold a process ID: %r" % (pid_file, text[:40]))
            return int(text)
        pidof = self.module.get_bin_path("pidof")
        if pidof:
            rc, out, _err = self._run([pidof, "-s", self.p.get("binary_path") or DEFAULT_BINARY[self.runtime]])
            if rc == 0 and PID_RE.fullmatch(out.strip()):
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
            return self._restart_by_signal()
        return self.healthy()

    def _restart_by_signal(self):
        """SIGHUP the daemon (restart_mode=signal); (ok, error text)."""
        try:
            pid = self._read_pid()
        except NodeFileError as exc:
            return False, "%s; no process was signalled" % exc
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
        # restarted means a NEW containerd serves the socket: wait until the supervisor has started
        # another process (the pid file or pidof names a live pid other than the signalled one)
        deadline = time.time() + self.timeout
        while True:
            try:
                now = self._read_pid()
            except NodeFileError as exc:
                return False, "%s (after SIGHUP to containerd, pid %d)" % (exc, pid)
            if now and now != pid and _alive(now):
                break
            if time.time() > deadline:
                state = "still running" if _alive(pid) else "exited, and no new process was started"
                return False, ("containerd (pid %d) %s %d s after SIGHUP: restart_mode=signal needs a supervisor "
                               "that restarts it (systemd Restart=always, s6, runit)" % (pid, state, self.timeout))
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
                    rc, table, err = self._run([ctr, "--address", self.socket, "plugins", "ls"], limit=10)
                    if rc == 0:
                        break
                    if time.time() > deadline:
                        return False, "ctr plugins ls failed: %s" % (err or table).strip()
                    time.sleep(0.3)
                plugins = parse_ctr_plugins(table)
                if cri_plugin_failures(plugins):
                    rc, detail, err = self._run([ctr, "--address", self.socket, "plugins", "ls", "-d"], limit=10)
                    bad = cri_plugin_failures(parse_ctr_plugins(table, detail))
                    return False, "containerd is running but its CRI plugin failed to load: " + "; ".join(bad)
        if self.runtime == "crio" and self.expect_runtime:
            return self._crio_serves_runtime()
        return True, ""

    def _crio_drop_in(self):
        return self.p.get("config_path") or DEFAULT_CONFIG["crio"]

    def _crio_serves_runtime(self):
        """CRI-O starts and serves without a runtime whose runtime_path is missing (it logs "is being ignored"):
        read the running daemon's configuration (``crio status --socket S config``) and require the runtime in it,
        at our runtime_path, and as the default when set_as_default.  Without a ``crio`` binary the socket check
        above is all there is."""
        binary = self.p.get("binary_path") or self.module.get_bin_path("crio")
        if not binary:
            return True, ""
        deadline = time.time() + self.timeout
        while True:
            rc, out, err = self._run([binary, "status", "--socket", self.socket, "config"], limit=10)
            if rc == 0:
                break
            if time.time() > deadline:
                return False, "`crio status config` failed: %s" % (err or out).strip()[-500:]
            time.sleep(0.3)
        try:
            running = Document(out).data
        except TomlError as e:
            return False, "cannot read `crio status config`: %s" % e
        name = self.p["runtime_name"]
        rt = _get(running, ("crio", "runtime", "runtimes", name))
        if not isinstance(rt, dict):
            return False, ("CRI-O is running without runtime %r: it ignores a runtime whose runtime_path (%s) does not "
                           "exist or is not executable (its log says \"is being ignored\")" % (name, self.p["runtime_path"]))
        if rt.get("runtime_path") != self.p["runtime_path"]:
            return False, ("CRI-O runs runtime %r with runtime_path %s, not %s: a drop-in that sorts after %s sets it"
                           % (name, rt.get("runtime_path"), self.p["runtime_path"], self._crio_drop_in()))
        default = _get(running, ("crio", "runtime", "default_runtime"))
        if self.p.get("set_as_default") and default != name:
            return False, ("CRI-O's default_runtime is %r, not %r: a drop-in that sorts after %s sets it"
                           % (default, name, self._crio_drop_in()))
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


def _validate_dir(p):
    """A private directory for validation candidates: under ``<state_dir>/tmp`` (when state_dir exists) or the
    system temp directory -- never in a directory a daemon loads.  Directories of killed runs are removed."""
    bases = []
    sd = p.get("state_dir")
    if sd and os.path.isdir(sd):
        bases.append(os.path.join(sd, "tmp"))
    bases.append(tempfile.gettempdir())
    last = None
    for base in bases:
        try:
            os.makedirs(base, mode=0o700, exist_ok=True)
            _clean_stale_validate_dirs(base)
            return tempfile.mkdtemp(prefix="gpuops-validate-%d." % os.getpid(), dir=base)
        except OSError as e:
            last = e
    raise last


def _drop_validate_dir(d):
    """A validation's candidate directory removed; ``<state_dir>/tmp`` too when it is empty (state_dir then holds
    records only, and is empty after absent)."""
    import shutil
    if d is None:
        return
    shutil.rmtree(d, ignore_errors=True)
    try:
        os.rmdir(os.path.dirname(d))
    except OSError:
        pass


def _clean_stale_validate_dirs(base):
    import shutil
    prefix = "gpuops-validate-"
    for n in os.listdir(base):
        if not n.startswith(prefix):
            continue
        pid = n[len(prefix):].split(".", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue
        except ProcessLookupError:
            pass
        except OSError:
            continue
        shutil.rmtree(os.path.join(base, n), ignore_errors=True)


def _absolute_imports(imports, parent):
    """containerd resolves a relative import (and glob) against the directory of the file importing it."""
    out = []
    for i in imports:
        if isinstance(i, str) and i and not os.path.isabs(i):
            i = os.path.normpath(os.path.join(os.path.dirname(parent) or ".", i))
        out.append(i)
    return out


def validate_containerd(module, binary, changes, p):
    """``containerd --config <candidate> config dump``; returns dumped data.

    Candidates are written to a private directory (``<state_dir>/tmp`` or the system temp directory),
    never next to the real files (a glob import or a daemon loading the directory would read them); their
    relative imports are made absolute so that they resolve as from the real files.  They are removed
    afterwards (those of a killed run by the next validation).  The dump is containerd's own merged view, so
    it also proves that drop-in + imports give the expected result.  A candidate that cannot be written
    raises RuntimeConfigError.
    """
    d = None
    try:
        try:
            d = _validate_dir(p)
            tmps = {}
            for n, (path, _before, _after) in enumerate(changes):
                tmps[path] = os.path.join(d, "%d-%s" % (n, os.path.basename(path) or "config.toml"))
            texts = {}
            for n, (path, _before, after) in enumerate(changes):
                text = after
                try:
                    doc = Document(after)
                    imports = doc.data.get("imports")
                except TomlError:
                    doc, imports = None, None
                if n == 0 and len(changes) > 1 and doc is not None:
                    drop_in, tmp_drop = changes[1][0], tmps[changes[1][0]]
                    imports = _absolute_imports(imports if isinstance(imports, list) else [], path)
                    imports = [tmp_drop if i == drop_in else i for i in imports]
                    if tmp_drop not in imports:
                        imports.append(tmp_drop)
                    doc.set(("imports",), imports)
                    text = doc.text
                elif doc is not None and isinstance(imports, list) and imports:
                    absolute = _absolute_imports(imports, path)
                    if absolute != imports:
                        doc.set(("imports",), absolute)
                        text = doc.text
                texts[path] = text
            for path, _before, _after in changes:
                fd = os.open(tmps[path], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(texts[path])
        except OSError as e:
            raise RuntimeConfigError("cannot write the candidate configuration to validate it: %s; nothing was "
                                     "changed" % e)
        main_tmp = tmps[changes[0][0]]
        rc, out, err = module.run_command([binary, "--config", main_tmp, "config", "dump"],
                                          environ_update={"LC_ALL": "C"})
        if rc != 0:
            raise RuntimeConfigError("containerd rejects the new configuration: %s" % (err or out).strip())
        try:
            return Document(out).data
        except TomlError as e:
            raise RuntimeConfigError("cannot read `containerd config dump` output: %s" % e)
    finally:
        _drop_validate_dir(d)


CRIO_MAIN_CONFIG = "/etc/crio/crio.conf"


def validate_crio(module, binary, change, p):
    """``crio --config <main> --config-dir <candidate dir> config``; returns CRI-O's merged view as data.

    The candidate directory (private, as for containerd) holds a copy of every file of the drop-in's directory
    with the new drop-in in its place, so CRI-O merges them in its own order; ``crio_config`` (default
    /etc/crio/crio.conf, skipped when absent) is the main file.  CRI-O refuses what it would refuse at start (a
    value of the wrong type, a default_runtime without its table); a runtime_path that does not exist it
    only ignores at start, which the restart's check catches."""
    import shutil
    path, _before, after = change
    real_dir = os.path.dirname(os.path.abspath(path))
    d = None
    try:
        try:
            d = _validate_dir(p)
            cand = os.path.join(d, "crio.conf.d")
            os.mkdir(cand, 0o700)
            for n in sorted(os.listdir(real_dir)) if os.path.isdir(real_dir) else []:
                src = os.path.join(real_dir, n)
                if n != os.path.basename(path) and os.path.isfile(src):
                    shutil.copyfile(src, os.path.join(cand, n))
            fd = os.open(os.path.join(cand, os.path.basename(path)), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(after)
        except OSError as e:
            raise RuntimeConfigError("cannot write the candidate configuration to validate it: %s; nothing was "
                                     "changed" % e)
        main = p.get("crio_config") or CRIO_MAIN_CONFIG
        argv = [binary, "--config", main if os.path.isfile(main) else "", "--config-dir", cand, "config"]
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
        if rc != 0:
            lines = [ln for ln in (err or out).strip().splitlines() if "level=fatal" in ln] or (err or out).strip().splitlines()[-1:]
            raise RuntimeConfigError("CRI-O rejects the new configuration: %s" % "; ".join(lines)[-1500:])
        try:
            return Document(out).data
        except TomlError as e:
            raise RuntimeConfigError("cannot read `crio config` output: %s" % e)
    finally:
        _drop_validate_dir(d)


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
