# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Host-side GPU node validation: the GPU Operator validator's checks, without pods.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

Four checks, each run for real on the node and timed:

``driver``         /proc/driver/nvidia/version is readable and NVML (pynvml, else libnvidia-ml.so.1
                   through ctypes) lists at least one GPU; driver version and GPU UUIDs reported.
``cuda``           a vectorAdd kernel JIT-compiled from PTX, launched and checked on every GPU
                   through the CUDA driver API (``_cuda.py``).
``toolkit``        nvidia-container-runtime and nvidia-cdi-hook exist and execute; the CDI specs of
                   kind nvidia.com/gpu name every GPU and every path they reference exists; optionally
                   containerd's effective config (``config dump``) has the NVIDIA runtime.
``device_plugin``  kubelet's device manager checkpoint has the resource with at least one healthy
                   device, kubelet's and a plugin's sockets accept connections.

Every check returns ``{name, ok, seconds, detail, error, summary}``; nothing is changed on the host.
Hardware, commands and NVML come in through a :class:`Context`, so unit tests pass stand-ins.
"""
from __future__ import annotations

import ctypes
import errno
import glob
import json
import os
import re
import socket
import stat
import subprocess
import time

from ansible_collections.gpuops.nvidia.plugins.module_utils import _cuda
from ansible_collections.gpuops.nvidia.plugins.module_utils._container_runtime import CRI_PLUGIN, dump_has_runtime
from ansible_collections.gpuops.nvidia.plugins.module_utils._host import parse_driver_version
from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import ATTR_LIMIT, NodeFileError, read_node_file
from ansible_collections.gpuops.nvidia.plugins.module_utils._toml import loads as toml_loads
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import HostError, InputError

CHECKS = ("driver", "cuda", "toolkit", "device_plugin")
CDI_KIND = "nvidia.com/gpu"
DEFAULTS = {
    "proc_version": "/proc/driver/nvidia/version",
    "runtime_path": "/usr/bin/nvidia-container-runtime",
    "hook_path": None,
    "cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"],
    "containerd_config_dump_cmd": None,
    "runtime_name": "nvidia",
    "kubelet_dir": "/var/lib/kubelet",
    "resource_name": "nvidia.com/gpu",
    "cuda_elements": _cuda.DEFAULT_ELEMENTS,
    "cuda_device": "all",
    "command_timeout": 30,
}
HOOK_NAMES = ("nvidia-cdi-hook", "nvidia-ctk")
HOOK_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/local/nvidia/toolkit", "/usr/local/nvidia/bin")
NVML_CANDIDATES = (
    "libnvidia-ml.so.1",
    "/usr/local/nvidia/lib64/libnvidia-ml.so.1",
    "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1",
    "/usr/lib64/libnvidia-ml.so.1",
)
KUBELET_SOCKET = "kubelet.sock"
CHECKPOINT = "kubelet_internal_checkpoint"
#: bytes read at most from a CDI spec (nvidia-ctk's for eight GPUs with every MIG device: a few hundred KiB) and
#: from kubelet's device manager checkpoint (a few hundred bytes per allocation); a larger file is reported, not read
SPEC_LIMIT = 16 * 1024 * 1024
CHECKPOINT_LIMIT = 16 * 1024 * 1024

FIXES = {
    "driver": "load the NVIDIA kernel module and make libnvidia-ml.so.1 loadable (role gpuops.nvidia.driver; "
              "dmesg | grep NVRM shows why the module failed)",
    "cuda": "make libcuda.so.1 of the running driver loadable (ldconfig), free the GPU (exclusive-process mode, "
            "memory) and on NVSwitch systems run nvidia-fabricmanager",
    "toolkit": "install nvidia-container-toolkit and regenerate the CDI spec after every driver change "
               "(role gpuops.nvidia.container_toolkit, module gpuops.nvidia.cdi_spec); configure the runtime "
               "with module gpuops.nvidia.container_runtime",
    "device_plugin": "run the NVIDIA device plugin on this node and make sure kubelet is running and the plugin "
                     "registered (role gpuops.nvidia.device_plugin; the plugin's log shows registration errors)",
}


def run_command(argv, timeout=30):
    """(rc, stdout, stderr) of ``argv`` with a C locale; 127 when it cannot start, 124 on timeout."""
    env = dict(os.environ, LC_ALL="C", LANG="C")
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, env=env,
                              check=False)
    except subprocess.TimeoutExpired:
        return 124, "", "timed out after %s s" % timeout
    except OSError as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def _tail(text, n=300):
    text = (text or "").strip()
    return text if len(text) <= n else "..." + text[-n:]


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


# -- NVML -------------------------------------------------------------------------------------

class NvmlCallError(HostError):
    pass


class CtypesNVML(object):
    """The few pynvml functions the driver check needs, over libnvidia-ml.so.1 directly."""

    _SIGS = {
        "nvmlInit_v2": (), "nvmlShutdown": (),
        "nvmlDeviceGetCount_v2": (ctypes.c_void_p,),
        "nvmlSystemGetDriverVersion": (ctypes.c_void_p, ctypes.c_uint),
        "nvmlDeviceGetHandleByIndex_v2": (ctypes.c_uint, ctypes.c_void_p),
        "nvmlDeviceGetUUID": (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint),
        "nvmlDeviceGetName": (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint),
    }

    def __init__(self, lib):
        self.lib = lib

    def _fn(self, name):
        fn = getattr(self.lib, name)
        if hasattr(fn, "argtypes") and name in self._SIGS:
            fn.argtypes = list(self._SIGS[name])
            fn.restype = ctypes.c_int
        return fn

    def _error(self, rc):
        try:
            fn = self.lib.nvmlErrorString
            if hasattr(fn, "argtypes"):
                fn.argtypes = [ctypes.c_int]
                fn.restype = ctypes.c_char_p
            text = _text(fn(rc))
        except Exception:
            text = None
        return "%s (NVML return %d)" % (text or "NVML error", rc)

    def _call(self, name, *args):
        try:
            fn = self._fn(name)
        except AttributeError:
            raise NvmlCallError("%s not found in libnvidia-ml" % name)
        rc = fn(*args)
        if rc != 0:
            raise NvmlCallError("%s: %s" % (name, self._error(rc)))

    def nvmlInit(self):
        self._call("nvmlInit_v2")

    def nvmlShutdown(self):
        self._call("nvmlShutdown")

    def nvmlDeviceGetCount(self):
        count = ctypes.c_uint(0)
        self._call("nvmlDeviceGetCount_v2", ctypes.pointer(count))
        return count.value

    def nvmlSystemGetDriverVersion(self):
        buf = ctypes.create_string_buffer(96)
        self._call("nvmlSystemGetDriverVersion", buf, 96)
        return buf.value.decode()

    def nvmlDeviceGetHandleByIndex(self, index):
        handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", index, ctypes.pointer(handle))
        return handle.value

    def _string(self, name, handle):
        buf = ctypes.create_string_buffer(96)
        self._call(name, handle, buf, 96)
        return buf.value.decode("utf-8", "replace")

    def nvmlDeviceGetUUID(self, handle):
        return self._string("nvmlDeviceGetUUID", handle)

    def nvmlDeviceGetName(self, handle):
        return self._string("nvmlDeviceGetName", handle)


def _load_ctypes_nvml():
    errors = []
    for candidate in NVML_CANDIDATES:
        try:
            return CtypesNVML(ctypes.CDLL(candidate)), candidate, None
        except OSError as exc:
            errors.append(str(exc))
    return None, None, "libnvidia-ml.so.1 cannot be loaded: %s" % "; ".join(errors[:2])


def load_nvml():
    """[(lib, source)] to try in order: pynvml when importable, then libnvidia-ml.so.1 through ctypes."""
    tries = []
    try:
        import pynvml  # pylint: disable=import-outside-toplevel
        tries.append((pynvml, "pynvml"))
    except ImportError:
        pass
    lib, source, err = _load_ctypes_nvml()
    if lib is not None:
        tries.append((lib, source))
    elif not tries:
        raise NvmlCallError(err)
    return tries


def nvml_gpus(loader):
    """(gpus, driver_version, source) from the first NVML that initialises; raises NvmlCallError."""
    errors = []
    for lib, source in loader():
        try:
            lib.nvmlInit()
        except Exception as exc:
            errors.append("%s: %s" % (source, exc))
            continue
        try:
            version = _text(lib.nvmlSystemGetDriverVersion())
            gpus = []
            for index in range(int(lib.nvmlDeviceGetCount())):
                handle = lib.nvmlDeviceGetHandleByIndex(index)
                gpus.append({"index": index, "uuid": _text(lib.nvmlDeviceGetUUID(handle)),
                             "name": _text(lib.nvmlDeviceGetName(handle))})
            return gpus, version, source
        except Exception as exc:
            raise NvmlCallError("%s: %s" % (source, exc))
        finally:
            try:
                lib.nvmlShutdown()
            except Exception:
                pass
    raise NvmlCallError("; ".join(errors) or "no NVML library")


# -- CDI specs (JSON, or YAML without PyYAML) ----------------------------------------------------

class YamlError(InputError):
    pass


_INT = re.compile(r"[-+]?[0-9]+")


def _yaml_quoted_end(s):
    """Index just past the quoted scalar that starts ``s`` (``"`` or ``'``)."""
    q = s[0]
    i = 1
    while i < len(s):
        if q == '"' and s[i] == "\\":
            i += 2
            continue
        if s[i] == q:
            if q == "'" and i + 1 < len(s) and s[i + 1] == "'":
                i += 2
                continue
            return i + 1
        i += 1
    raise YamlError("unterminated quoted scalar: %s" % s)


def _yaml_scalar(s):
    s = s.strip()
    if not s:
        return None
    if s[0] in "\"'":
        end = _yaml_quoted_end(s)
        body = s[:end]
        if s[0] == '"':
            try:
                return json.loads(body)
            except ValueError:
                return body[1:-1]
        return body[1:-1].replace("''", "'")
    if " #" in s:
        s = s.split(" #", 1)[0].rstrip()
    if s == "[]":
        return []
    if s == "{}":
        return {}
    if s.startswith("[") and s.endswith("]"):
        return [_yaml_scalar(x) for x in s[1:-1].split(",") if x.strip()]
    if s in ("null", "~", "Null", "NULL"):
        return None
    if s in ("true", "True", "TRUE"):
        return True
    if s in ("false", "False", "FALSE"):
        return False
    if _INT.fullmatch(s):
        return int(s)
    return s


def _yaml_key(text):
    """(key, rest) of a ``key: value`` line, or (None, None) when it is not a mapping entry."""
    if text[0] in "\"'":
        end = _yaml_quoted_end(text)
        rest = text[end:].lstrip(" ")
        if rest.startswith(":") and (len(rest) == 1 or rest[1] == " "):
            return _yaml_scalar(text[:end]), rest[1:].strip()
        return None, None
    if text.endswith(":"):
        return text[:-1].strip(), ""
    pos = text.find(": ")
    if pos <= 0 or " #" in text[:pos]:
        return None, None
    return text[:pos].strip(), text[pos + 2:].strip()


def _yaml_is_seq(text):
    return text == "-" or text.startswith("- ")


def _yaml_block(lines, i, indent):
    if i >= len(lines):
        return None, i
    if _yaml_is_seq(lines[i][1]):
        return _yaml_seq(lines, i, indent)
    return _yaml_map(lines, i, indent)


def _yaml_seq(lines, i, indent):
    items = []
    while i < len(lines) and lines[i][0] == indent and _yaml_is_seq(lines[i][1]):
        text = lines[i][1]
        rest = text[1:].lstrip(" ")
        if not rest:
            if i + 1 < len(lines) and lines[i + 1][0] > indent:
                value, i = _yaml_block(lines, i + 1, lines[i + 1][0])
            else:
                value, i = None, i + 1
        elif _yaml_is_seq(rest) or _yaml_key(rest)[0] is not None:
            col = indent + len(text) - len(rest)
            lines[i] = (col, rest)
            value, i = _yaml_block(lines, i, col)
        else:
            value, i = _yaml_scalar(rest), i + 1
        items.append(value)
    return items, i


def _yaml_map(lines, i, indent):
    data = {}
    while i < len(lines) and lines[i][0] == indent and not _yaml_is_seq(lines[i][1]):
        key, rest = _yaml_key(lines[i][1])
        if key is None:
            raise YamlError("line %r is not a mapping entry" % lines[i][1])
        i += 1
        if rest and rest[0] in "|>":
            parts = []
            while i < len(lines) and lines[i][0] > indent:
                parts.append(lines[i][1])
                i += 1
            value = ("\n" if rest[0] == "|" else " ").join(parts)
        elif rest:
            value = _yaml_scalar(rest)
            while i < len(lines) and lines[i][0] > indent and isinstance(value, str):  # folded plain scalar
                value = "%s %s" % (value, lines[i][1])
                i += 1
        elif i < len(lines) and lines[i][0] > indent:
            value, i = _yaml_block(lines, i, lines[i][0])
        elif i < len(lines) and lines[i][0] == indent and _yaml_is_seq(lines[i][1]):
            value, i = _yaml_seq(lines, i, indent)  # "key:\n- item" at the key's own indentation
        else:
            value = None
        data[key] = value
    return data, i


def yaml_load(text):
    """Block-style YAML of one document (what nvidia-ctk and cdi_spec write); no anchors, no flow maps."""
    lines = []
    for raw in text.splitlines():
        body = raw.rstrip()
        stripped = body.lstrip(" ")
        if not stripped or stripped.startswith("#") or (stripped in ("---", "...") and body == stripped):
            continue
        if stripped.startswith("%"):
            continue
        lines.append((len(body) - len(stripped), stripped))
    if not lines:
        return None
    value, i = _yaml_block(lines, 0, lines[0][0])
    if i != len(lines):
        raise YamlError("cannot parse line %r" % (lines[i][1],))
    return value


def load_spec(text, path):
    """A CDI spec file's data: JSON for .json, else YAML (PyYAML when importable)."""
    if path.endswith(".json"):
        return json.loads(text)
    try:
        import yaml  # pylint: disable=import-outside-toplevel
    except ImportError:
        return yaml_load(text)
    loader = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader


def read_cdi_specs(dirs):
    """([{path, spec}], [errors]) of every *.yaml/*.yml/*.json in ``dirs`` (each real file once)."""
    specs, errors, seen = [], [], set()
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "*"))):
            if not path.endswith((".yaml", ".yml", ".json")) or not os.path.isfile(path):
                continue
            real = os.path.realpath(path)
            if real in seen:
                continue
            seen.add(real)
            try:
                data = read_node_file(path, SPEC_LIMIT)
            except NodeFileError as exc:
                errors.append(str(exc))
                continue
            if data is None:        # removed since it was listed
                continue
            try:
                spec = load_spec(data.decode("utf-8"), path)
            except Exception as exc:
                errors.append("%s: cannot parse: %s" % (path, exc))
                continue
            if not isinstance(spec, dict):
                errors.append("%s: not a CDI spec" % path)
                continue
            specs.append({"path": path, "spec": spec})
    return specs, errors


def _edits(spec):
    """Every containerEdits dict of a spec (the spec's own and each device's)."""
    out = [spec.get("containerEdits") or {}]
    for dev in spec.get("devices") or []:
        if isinstance(dev, dict):
            out.append(dev.get("containerEdits") or {})
    return [e for e in out if isinstance(e, dict)]


def spec_paths(spec):
    """(device node host paths, mount host paths, hook paths) referenced by a spec."""
    nodes, mounts, hooks = [], [], []
    for edits in _edits(spec):
        for node in edits.get("deviceNodes") or []:
            if isinstance(node, dict) and (node.get("hostPath") or node.get("path")):
                nodes.append(str(node.get("hostPath") or node.get("path")))
        for mount in edits.get("mounts") or []:
            if isinstance(mount, dict) and mount.get("hostPath"):
                mounts.append(str(mount["hostPath"]))
        for hook in edits.get("hooks") or []:
            if isinstance(hook, dict) and hook.get("path"):
                hooks.append(str(hook["path"]))

    def uniq(xs):
        return sorted(set(xs))

    return uniq(nodes), uniq(mounts), uniq(hooks)


def cdi_coverage(specs, gpus, kind=CDI_KIND):
    """Devices of ``kind`` and which GPUs they name: by UUID, else by NVML index (nvidia-ctk's ``index`` naming)."""
    names = []
    for entry in specs:
        if entry["spec"].get("kind") == kind:
            names.extend(str(d.get("name")) for d in entry["spec"].get("devices") or [] if isinstance(d, dict))
    covered, missing = {}, []
    for gpu in gpus or []:
        if gpu["uuid"] in names:
            covered[gpu["uuid"]] = gpu["uuid"]
        elif str(gpu["index"]) in names:
            covered[gpu["uuid"]] = str(gpu["index"])
        else:
            missing.append(gpu["uuid"])
    return names, covered, missing


def _which(name, dirs=HOOK_DIRS):
    for d in list(os.environ.get("PATH", "").split(os.pathsep)) + list(dirs):
        path = os.path.join(d, name)
        if d and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _runtimes(dump):
    out = {}
    for version in (4, 2, 1):
        node = dump
        for part in CRI_PLUGIN[version] + ("containerd", "runtimes"):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            out.update(node)
    return out


# -- checks ------------------------------------------------------------------------------------

class Context(object):
    """Options plus the ways a check reaches the host (stand-ins in unit tests)."""

    def __init__(self, options=None, nvml_loader=load_nvml, cuda_lib=None, runner=None):
        self.o = dict(DEFAULTS)
        self.o.update(dict((k, v) for k, v in (options or {}).items() if v is not None))
        self.nvml_loader = nvml_loader
        self.cuda_lib = cuda_lib
        self._runner = runner or run_command
        self.gpus = None  # set by the driver check; the toolkit check reuses it

    def run(self, argv):
        return self._runner(list(argv), timeout=self.o["command_timeout"])


def check_driver(ctx, detail):
    errors = []
    try:
        data = read_node_file(ctx.o["proc_version"], ATTR_LIMIT)
    except NodeFileError as exc:
        data = None
        errors.append(str(exc))
    else:
        if data is None:
            errors.append("%s not readable (%s): the NVIDIA kernel module is not loaded"
                          % (ctx.o["proc_version"], os.strerror(errno.ENOENT)))
    text = None if data is None else data.decode("utf-8", "replace")
    kernel_version, module_type = parse_driver_version(text)
    detail["kernel_module_version"] = kernel_version
    detail["kernel_module_type"] = module_type
    try:
        gpus, version, source = nvml_gpus(ctx.nvml_loader)
    except NvmlCallError as exc:
        errors.append("NVML: %s" % exc)
        return "; ".join(errors), "NVML failed"
    detail.update(driver_version=version, nvml=source, gpus=gpus, uuids=[g["uuid"] for g in gpus])
    ctx.gpus = gpus
    if not gpus:
        errors.append("NVML lists no GPU")
    if kernel_version and version and kernel_version != version:
        errors.append("kernel module %s but user-space driver (NVML) %s: reload the module or reboot"
                      % (kernel_version, version))
    summary = "%s, %d GPU%s" % (version, len(gpus), "" if len(gpus) == 1 else "s")
    return "; ".join(errors) or None, summary


def check_cuda(ctx, detail):
    res = _cuda.check(elements=int(ctx.o["cuda_elements"]), device=str(ctx.o["cuda_device"]), lib=ctx.cuda_lib)
    detail.update(res)
    if res["ok"]:
        n = len(res["devices"])
        return None, "vectorAdd on %d device%s, %d elements, 0 mismatches" % (n, "" if n == 1 else "s",
                                                                              res["elements"])
    problems = []
    for dev in res["devices"]:
        if dev["error"]:
            problems.append(_cuda.describe(dev) + (" (%s)" % dev["hint"] if dev.get("hint") else ""))
        elif dev["mismatches"]:
            problems.append(_cuda.describe(dev) + ": wrong results from the GPU")
    if not res["devices"]:
        problems.append("%s%s%s" % (res["error"], " in %s" % res["call"] if res.get("call") else "",
                                    " (%s)" % res["hint"] if res.get("hint") else ""))
    return "; ".join(problems), "vectorAdd failed"


def _version_check(ctx, path, errors, what, marker=None):
    if not os.path.isfile(path):
        errors.append("%s %s does not exist" % (what, path))
        return None
    if not os.access(path, os.X_OK):
        errors.append("%s %s is not executable" % (what, path))
        return None
    rc, out, err = ctx.run([path, "--version"])
    text = (out or err).strip()
    if rc != 0 and not (marker and marker in text):
        errors.append("`%s --version` exited %d: %s" % (path, rc, _tail(err or out)))
        return None
    return text.splitlines()[0] if text else ""


def check_toolkit(ctx, detail):
    errors = []
    o = ctx.o
    detail["runtime"] = {"path": o["runtime_path"],
                         "version": _version_check(ctx, o["runtime_path"], errors, "runtime",
                                                   "NVIDIA Container Runtime")}
    specs, spec_errors = read_cdi_specs(o["cdi_spec_dirs"])
    errors.extend(spec_errors)
    ours = [s for s in specs if s["spec"].get("kind") == CDI_KIND]
    nodes, mounts, hooks = [], [], []
    for entry in ours:
        n, m, h = spec_paths(entry["spec"])
        nodes.extend(n)
        mounts.extend(m)
        hooks.extend(h)
    nodes, mounts, hooks = sorted(set(nodes)), sorted(set(mounts)), sorted(set(hooks))

    hook = o["hook_path"] or next((h for h in hooks if os.path.basename(h) in HOOK_NAMES), None) \
        or next((p for p in (_which(n) for n in HOOK_NAMES) if p), None)
    if hook:
        detail["hook"] = {"path": hook, "version": _version_check(ctx, hook, errors, "CDI hook", "version")}
    else:
        detail["hook"] = {"path": None, "version": None}
        errors.append("nvidia-cdi-hook not found (PATH, %s)" % ", ".join(HOOK_DIRS))

    gpus = ctx.gpus
    if gpus is None:
        try:
            gpus = nvml_gpus(ctx.nvml_loader)[0]
        except NvmlCallError as exc:
            detail["nvml_error"] = str(exc)
    names, covered, missing = cdi_coverage(ours, gpus)
    missing_nodes = [p for p in nodes if not os.path.exists(p)]
    missing_mounts = [p for p in mounts if not os.path.exists(p)]
    missing_hooks = [p for p in hooks if not os.path.isfile(p)]
    detail["cdi"] = {"dirs": o["cdi_spec_dirs"], "specs": [s["path"] for s in ours],
                     "other_specs": [s["path"] for s in specs if s not in ours],
                     "devices": names, "gpus_covered": covered, "gpus_missing": missing,
                     "device_nodes": nodes, "missing_device_nodes": missing_nodes,
                     "mounts": len(mounts), "missing_mounts": missing_mounts,
                     "hooks": hooks, "missing_hooks": missing_hooks}
    if not ours:
        errors.append("no CDI spec of kind %s in %s" % (CDI_KIND, ", ".join(o["cdi_spec_dirs"])))
    else:
        if gpus is not None and missing:
            errors.append("CDI spec has no device for GPU %s" % ", ".join(missing))
        if gpus is None and not [n for n in names if n != "all"]:
            errors.append("CDI spec of kind %s lists no GPU device" % CDI_KIND)
        if missing_nodes:
            errors.append("CDI device nodes missing on the host: %s" % ", ".join(missing_nodes))
        if missing_mounts:
            errors.append("CDI spec mounts %d host path(s) that do not exist (stale spec after a driver change?): %s"
                          % (len(missing_mounts), ", ".join(missing_mounts[:5])))
        if missing_hooks:
            errors.append("CDI hooks missing on the host: %s" % ", ".join(missing_hooks))

    cmd = o["containerd_config_dump_cmd"]
    if cmd:
        detail["containerd"] = _containerd_runtime(ctx, cmd, errors)
    summary = "CDI %d device(s) in %d spec(s)%s" % (len(names), len(ours),
                                                    ", containerd runtime %s" % o["runtime_name"] if cmd else "")
    return "; ".join(errors) or None, summary


def _containerd_runtime(ctx, cmd, errors):
    name = ctx.o["runtime_name"]
    rc, out, err = ctx.run(cmd)
    info = {"command": list(cmd), "runtime_name": name, "found": False}
    if rc != 0:
        errors.append("`%s` exited %d: %s" % (" ".join(cmd), rc, _tail(err or out)))
        return info
    try:
        dump = toml_loads(out)
    except Exception as exc:
        errors.append("cannot parse `%s` output: %s" % (" ".join(cmd), exc))
        return info
    runtimes = _runtimes(dump)
    info["runtimes"] = sorted(runtimes)
    rt = dump_has_runtime(dump, {"runtime_name": name})
    if not isinstance(rt, dict):
        errors.append("containerd has no CRI runtime %r (it has: %s)" % (name, ", ".join(sorted(runtimes)) or "none"))
        return info
    info["found"] = True
    info["runtime_type"] = rt.get("runtime_type")
    binary = (rt.get("options") or {}).get("BinaryName") if isinstance(rt.get("options"), dict) else None
    info["binary_name"] = binary
    if binary:
        path = binary if os.path.isabs(binary) else _which(binary, ())
        if not path or not os.path.isfile(path):
            errors.append("containerd runtime %r uses BinaryName %s, which does not exist" % (name, binary))
    return info


def _listening(path, timeout=1.0):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        return True, None
    except OSError as exc:
        return False, exc.strerror or str(exc)
    finally:
        sock.close()


def _ci(d, key):
    """``d[key]`` matching the key case-insensitively (checkpoints are Go structs marshalled as JSON)."""
    if not isinstance(d, dict):
        return None
    if key in d:
        return d[key]
    low = key.lower()
    for k, v in d.items():
        if isinstance(k, str) and k.lower() == low:
            return v
    return None


def parse_checkpoint(data):
    """(registered {resource: [ids]}, [pod entries]) of kubelet's device manager checkpoint.

    v1.20+ format: ``{"Data": {"PodDeviceEntries": [...], "RegisteredDevices": {...}}, "Checksum": N}``
    (entries' ``DeviceIDs`` map a NUMA node to IDs); older kubelets wrote ``DeviceIDs`` as a list.
    """
    body = _ci(data, "Data")
    if not isinstance(body, dict):
        body = data if isinstance(data, dict) else {}
    registered = _ci(body, "RegisteredDevices") or {}
    entries = _ci(body, "PodDeviceEntries") or []
    if not isinstance(registered, dict):
        registered = {}
    out = dict((str(k), [str(i) for i in (v or [])]) for k, v in registered.items() if isinstance(v, list))
    return out, [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _entry_ids(entry):
    ids = _ci(entry, "DeviceIDs")
    if isinstance(ids, dict):
        return [str(i) for v in ids.values() if isinstance(v, list) for i in v]
    if isinstance(ids, list):
        return [str(i) for i in ids]
    return []


def check_device_plugin(ctx, detail):
    errors = []
    resource = ctx.o["resource_name"]
    dp_dir = os.path.join(ctx.o["kubelet_dir"], "device-plugins")
    path = os.path.join(dp_dir, CHECKPOINT)
    detail.update(resource_name=resource, checkpoint=path, devices=0)
    try:
        raw = read_node_file(path, CHECKPOINT_LIMIT)
        if raw is None:
            raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        data = json.loads(raw.decode("utf-8"))
    except NodeFileError as exc:
        errors.append("cannot read kubelet's device manager checkpoint: %s" % exc)
        data = None
    except (OSError, ValueError) as exc:
        errors.append("cannot read kubelet's device manager checkpoint %s: %s" % (path, getattr(exc, "strerror", None) or exc))
        data = None
    if data is not None:
        registered, entries = parse_checkpoint(data)
        ids = registered.get(resource) or []
        allocated = sorted(set(i for e in entries if _ci(e, "ResourceName") == resource for i in _entry_ids(e)))
        detail.update(devices=len(ids), device_ids=ids, allocated=len(allocated),
                      resources=dict((k, len(v)) for k, v in registered.items()))
        if not ids:
            errors.append("kubelet has no healthy %s device registered (registered: %s)"
                          % (resource, ", ".join("%s=%d" % kv for kv in sorted(detail["resources"].items())) or "none"))
    sockets = []
    try:
        names = sorted(os.listdir(dp_dir))
        listed = True
    except OSError as exc:
        names, listed = [], False
        errors.append("cannot list %s: %s" % (dp_dir, exc.strerror or exc))
    for name in names:
        full = os.path.join(dp_dir, name)
        try:
            if not stat.S_ISSOCK(os.stat(full).st_mode):
                continue
        except OSError:
            continue
        listening, why = _listening(full)
        sockets.append({"path": full, "listening": listening, "error": why})
    kubelet = [s for s in sockets if os.path.basename(s["path"]) == KUBELET_SOCKET]
    plugins = [s for s in sockets if os.path.basename(s["path"]) != KUBELET_SOCKET]
    detail["kubelet_socket"] = kubelet[0] if kubelet else None
    detail["plugin_sockets"] = plugins
    if listed:
        if not kubelet:
            errors.append("%s has no %s: kubelet is not running" % (dp_dir, KUBELET_SOCKET))
        elif not kubelet[0]["listening"]:
            errors.append("kubelet's %s refuses connections (%s): kubelet is not running"
                          % (kubelet[0]["path"], kubelet[0]["error"]))
        if not plugins:
            errors.append("no device plugin socket in %s besides %s" % (dp_dir, KUBELET_SOCKET))
        elif not any(s["listening"] for s in plugins):
            errors.append("no device plugin socket accepts connections: %s"
                          % ", ".join("%s (%s)" % (s["path"], s["error"]) for s in plugins))
    return "; ".join(errors) or None, "%d %s" % (detail["devices"], resource)


_CHECK_FNS = {"driver": check_driver, "cuda": check_cuda, "toolkit": check_toolkit,
              "device_plugin": check_device_plugin}


def run_check(name, ctx):
    start = time.monotonic()
    detail = {}
    try:
        error, summary = _CHECK_FNS[name](ctx, detail)
    except Exception as exc:  # a check must report, never take the others down
        error, summary = "unexpected %s: %s" % (type(exc).__name__, exc), "crashed"
    return {"name": name, "ok": error is None, "seconds": round(time.monotonic() - start, 3),
            "detail": detail, "error": error, "summary": summary}


def validate(checks=CHECKS, ctx=None):
    """Run ``checks`` in the operator's order; the module's result (``checks, ok, failed_checks, wall_seconds,
    summary, msg``)."""
    ctx = ctx or Context()
    unknown = [c for c in checks if c not in _CHECK_FNS]
    if unknown:
        raise ValueError("unknown check(s) %s; choose from %s" % (", ".join(unknown), ", ".join(CHECKS)))
    start = time.monotonic()
    ordered = [c for c in CHECKS if c in checks]
    results = [run_check(name, ctx) for name in ordered]
    wall = round(time.monotonic() - start, 3)
    failed = [r["name"] for r in results if not r["ok"]]
    summary = "GPU node validation %s in %.2f s: %s" % (
        "FAILED" if failed else "passed", wall,
        "; ".join("%s %s (%s)" % (r["name"], "ok" if r["ok"] else "FAILED", r["summary"]) for r in results))
    if failed:
        msg = "GPU node validation failed: %s" % " | ".join(
            "%s: %s. Fix: %s" % (r["name"], r["error"], FIXES[r["name"]]) for r in results if not r["ok"])
    else:
        msg = summary
    return {"checks": results, "ok": not failed, "failed_checks": failed, "wall_seconds": wall,
            "summary": summary, "msg": msg}
