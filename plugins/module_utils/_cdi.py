# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""CDI spec generation for NVIDIA GPUs (stdlib only; NVML when importable).

PRIVATE: this module_utils file may change at any time; do not import it from
outside the collection.

Everything is read below a ``root`` directory (``/`` on a real host, a
synthetic tree in unit tests): ``/dev``, ``/proc/driver/nvidia``, library,
binary and firmware directories.  Paths written into the spec are the
host's own paths (the root prefix is stripped).

The spec follows what ``nvidia-ctk cdi generate`` (toolkit 1.20) produces for
the default ``index,uuid`` naming: one device per GPU index and UUID, MIG
devices as ``<gpu>:<mig>`` and by MIG UUID, an ``all`` device, and common
container edits (control device nodes, driver libraries, binaries, firmware,
IPC sockets and, when an ``nvidia-cdi-hook``/``nvidia-ctk`` binary is present,
the create-symlinks / update-ldcache / enable-cuda-compat hooks).
"""
from __future__ import annotations

import glob
import json
import os
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError
from ansible_collections.gpuops.nvidia.plugins.module_utils._pci import NodeFileError, read_node_file, read_node_text

KIND = "nvidia.com/gpu"
#: CDI's names (container-device-interface, pkg/parser): a vendor and a class are ASCII letters, digits, '_', '-'
#: and '.', starting with a letter and ending with a letter or digit; a device name may also hold ':' and may
#: start with a digit.  Matched whole.
_VENDOR_OR_CLASS = r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
KIND_RE = re.compile("%s/%s" % (_VENDOR_OR_CLASS, _VENDOR_OR_CLASS))
DEVICE_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
#: a driver version as it names library files (libcuda.so.<version>), firmware directories and a hook argument
VERSION_RE = re.compile(r"[0-9]+\.[0-9]+(?:\.[0-9]+)?")
#: MIG capability directories as the driver makes them: gi<id> and ci<id>, in ASCII digits without leading zeros
MIG_DIR_RE = {"gi": re.compile(r"gi(0|[1-9][0-9]{0,5})"), "ci": re.compile(r"ci(0|[1-9][0-9]{0,5})")}
#: device minors are 20 bits wide (the kernel's MINORBITS)
MINOR_LIMIT = 1 << 20
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
DEFAULT_LIBRARY_DIRS = [
    "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
    "/usr/local/nvidia/lib64", "/usr/lib", "/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
    "/lib64", "/lib", "/usr/local/nvidia/lib",
]
DEFAULT_BIN_DIRS = ["/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin", "/usr/local/nvidia/bin"]
BINARIES = ["nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"]
CONTROL_NODES = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]
IPC_PATHS = ["/run/nvidia-persistenced/socket", "/run/nvidia-fabricmanager/socket", "/tmp/nvidia-mps"]
HOOK_CANDIDATES = ["/usr/bin/nvidia-cdi-hook", "/usr/local/bin/nvidia-cdi-hook", "/usr/bin/nvidia-ctk", "/usr/local/bin/nvidia-ctk"]


class CdiError(InputError):
    """The host does not look like an NVIDIA GPU host (nothing written)."""


def _p(root, path):
    return os.path.join(root, path.lstrip("/")) if root not in ("", "/") else path


def _read(root, path, warnings=None):
    """The text of a node file (at most 64 KiB, a regular file only: see _pci.read_node_file), or None when it
    is missing or not read (then with a warning)."""
    return read_node_text(_p(root, path), warnings)


def device_name_problem(name):
    """Why CDI refuses ``name`` as a device name (its ValidateDeviceName), or None when it takes it."""
    if isinstance(name, str) and DEVICE_NAME_RE.fullmatch(name):
        return None
    return "not a CDI device name (ASCII letters and digits, with '_', '.', ':' or '-' only between them)"


# -- discovery -----------------------------------------------------------------

def driver_version(root, warnings=None):
    """The loaded driver's version from /proc/driver/nvidia/version, else /sys/module/nvidia/version; None when
    neither gives one (a value that is no version, say with a '/' or '*', is not used: with a warning)."""
    text = _read(root, "/proc/driver/nvidia/version", warnings)
    if text:
        m = re.search(r"Kernel Module(?: for \S+)?\s+([0-9]+\.[0-9]+(?:\.[0-9]+)?)", text)
        if m:
            return m.group(1)
    path = "/sys/module/nvidia/version"
    text = (_read(root, path, warnings) or "").strip()
    if text and not VERSION_RE.fullmatch(text):
        if warnings is not None:
            warnings.append("%s holds %r, which is not a driver version; not used" % (_p(root, path), text))
        return None
    return text or None


def parse_information(text):
    """Fields of /proc/driver/nvidia/gpus/<bus>/information."""
    out = {}
    for line in text.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def _cap_minor(dirpath, warnings):
    """The device minor of a MIG capability (``DeviceFileMinor:`` of ``<dirpath>/access``), or None."""
    path = os.path.join(dirpath, "access")
    for line in (read_node_text(path, warnings) or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "DeviceFileMinor":
            value = value.strip()
            if re.fullmatch(r"[0-9]{1,7}", value) and int(value) < MINOR_LIMIT:
                return int(value)
            if warnings is not None:
                warnings.append("%s: DeviceFileMinor %r is not a device minor; left out" % (path, value))
            return None
    return None


def _mig_dirs(parent, kind, warnings):
    """``[(id, path)]`` of the ``gi<id>``/``ci<id>`` directories in ``parent``, by id; an entry named like one
    that is not (``gix``, ``gi01``, a non-ASCII digit, a file) is skipped with a warning."""
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    out = []
    for name in names:
        if not name.startswith(kind):
            continue
        path = os.path.join(parent, name)
        m = MIG_DIR_RE[kind].fullmatch(name)
        if m and os.path.isdir(path):
            out.append((int(m.group(1)), path))
        elif warnings is not None:
            warnings.append("%s: %r is not a MIG capability directory as the driver makes them (%s<number>); skipped"
                            % (parent, name, kind))
    return sorted(out)


def mig_from_proc(root, minor, warnings=None):
    """MIG devices of one GPU from /proc capability files (no UUIDs there)."""
    base = _p(root, "/proc/driver/nvidia/capabilities/gpu%d/mig" % minor)
    devs = []
    for gi, gi_dir in _mig_dirs(base, "gi", warnings):
        gi_cap = _cap_minor(gi_dir, warnings)
        for ci, ci_dir in _mig_dirs(gi_dir, "ci", warnings):
            devs.append({"gi": gi, "ci": ci, "uuid": None, "gi_cap": gi_cap, "ci_cap": _cap_minor(ci_dir, warnings)})
    return devs


def gpus_from_proc(root, warnings=None):
    """GPUs from /proc/driver/nvidia/gpus/*/information; CdiError when one cannot be read or parsed
    (a spec that silently left a GPU out would hand containers fewer GPUs than the node has)."""
    gpus = []
    for info in sorted(glob.glob(glob.escape(_p(root, "/proc/driver/nvidia/gpus")) + "/*/information")):
        try:
            text = (read_node_file(info) or b"").decode("utf-8")
        except NodeFileError as e:
            raise CdiError("%s; nothing was written" % e)
        except UnicodeDecodeError:
            raise CdiError("%s is not UTF-8 text; nothing was written" % info)
        f = parse_information(text)
        if "Device Minor" not in f:
            continue
        if not re.fullmatch(r"[0-9]+", f["Device Minor"]):
            raise CdiError("%s: Device Minor %r is not a number; nothing was written" % (info, f["Device Minor"]))
        minor = int(f["Device Minor"])
        gpus.append({
            "minor": minor,
            "uuid": f.get("GPU UUID"),
            "bus": (f.get("Bus Location") or os.path.basename(os.path.dirname(info))).lower(),
            "model": f.get("Model"),
            "mig": mig_from_proc(root, minor, warnings),
        })
    gpus.sort(key=lambda g: g["bus"])   # NVML enumerates in PCI bus order
    for i, g in enumerate(gpus):
        g["index"] = i
    return gpus


def gpus_from_nvml(pynvml, root, warnings=None):
    """GPU list through NVML (UUIDs for MIG devices too); caps from /proc."""
    pynvml.nvmlInit()
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            minor = pynvml.nvmlDeviceGetMinorNumber(h)
            uuid = _s(pynvml.nvmlDeviceGetUUID(h))
            bus = _s(pynvml.nvmlDeviceGetPciInfo(h).busId).lower()
            if len(bus) > 12:
                bus = bus[-12:]
            gpu = {"index": i, "minor": minor, "uuid": uuid, "bus": bus, "model": _s(pynvml.nvmlDeviceGetName(h)), "mig": []}
            try:
                current, _pending = pynvml.nvmlDeviceGetMigMode(h)
            except pynvml.NVMLError:
                current = 0
            if current:
                caps = dict(((d["gi"], d["ci"]), d) for d in mig_from_proc(root, minor, warnings))
                for j in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
                    try:
                        mh = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
                    except pynvml.NVMLError:
                        continue
                    gi = pynvml.nvmlDeviceGetGpuInstanceId(mh)
                    ci = pynvml.nvmlDeviceGetComputeInstanceId(mh)
                    cap = caps.get((gi, ci), {})
                    gpu["mig"].append({"gi": gi, "ci": ci, "uuid": _s(pynvml.nvmlDeviceGetUUID(mh)),
                                       "gi_cap": cap.get("gi_cap"), "ci_cap": cap.get("ci_cap")})
            gpus.append(gpu)
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _s(v):
    return v.decode() if isinstance(v, bytes) else v


def _is_script(path):
    try:
        return read_node_file(path, 2, prefix=True) == b"#!"
    except NodeFileError:
        return False


def _first_existing(root, paths):
    return [p for p in paths if os.path.exists(_p(root, p))]


def find_library_dir(root, version, dirs):
    for d in dirs:
        if os.path.isfile(_p(root, "%s/libcuda.so.%s" % (d, version))):
            return d
    return None


def driver_libraries(root, version, libdir):
    """(files, links): real ``lib*.so.<version>`` files and the symlinks onto them."""
    host = _p(root, libdir)
    files, links = [], []
    suffix = ".so." + version
    for name in sorted(os.listdir(host)):
        full = os.path.join(host, name)
        if name.endswith(suffix) and os.path.isfile(full) and not os.path.islink(full):
            files.append("%s/%s" % (libdir, name))
    targets = set(os.path.basename(f) for f in files)
    for name in sorted(os.listdir(host)):
        full = os.path.join(host, name)
        if os.path.islink(full) and name.startswith("lib"):
            t = os.readlink(full)
            # one level (libcuda.so.1 -> libcuda.so.580) or two (libcuda.so -> libcuda.so.1)
            if os.path.basename(t) in targets or (os.path.islink(os.path.join(host, os.path.basename(t)))
                                                  and os.path.basename(os.readlink(os.path.join(host, os.path.basename(t)))) in targets):
                links.append(("%s/%s" % (libdir, name), t))
    return files, links


def firmware_files(root, version, warnings=None):
    dirs = ["/lib/firmware/nvidia/%s" % version, "/usr/lib/firmware/nvidia/%s" % version]
    custom = _read(root, "/sys/module/firmware_class/parameters/path", warnings)
    if custom and custom.strip():
        dirs.insert(0, "%s/nvidia/%s" % (custom.strip().rstrip("/"), version))
    out = []
    for d in dirs:
        for f in sorted(glob.glob(glob.escape(_p(root, d)) + "/*.bin")):
            out.append("%s/%s" % (d, os.path.basename(f)))
    return out


def find_hook(root, hook_path):
    if hook_path:
        return hook_path
    found = _first_existing(root, HOOK_CANDIDATES)
    return found[0] if found else None


# -- spec ------------------------------------------------------------------------

def _mount(path):
    return {"hostPath": path, "containerPath": path, "options": list(MOUNT_OPTIONS)}


def _hook(hook, name, args):
    argv0 = os.path.basename(hook)
    fixed = [argv0, "hook"] if argv0 == "nvidia-ctk" else [argv0]
    return {"hookName": "createContainer", "path": hook, "args": fixed + [name] + args, "env": ["NVIDIA_CTK_DEBUG=false"]}


def build_spec(root="/", gpus=None, version=None, naming=("index", "uuid"), library_dirs=None,
               bin_dirs=None, hook_path=None, kind=KIND, all_device=True):
    """Return (spec dict, info dict).

    Device names follow CDI's rules: a UUID the node reports that CDI would refuse (a '/', a space, a non-ASCII
    letter, the old ``MIG-GPU-<uuid>/<gi>/<ci>`` form) or that repeats another device's name is left out with a
    warning, not written: the runtime refuses a whole spec for one bad name, so every GPU of the node would be
    lost, while the device stays reachable by its index and through ``all``.
    """
    if not isinstance(kind, str) or not KIND_RE.fullmatch(kind):
        raise CdiError("kind %r is not a CDI kind (<vendor>/<class>, e.g. nvidia.com/gpu)" % (kind,))
    warnings = []
    version = version or driver_version(root, warnings)
    if not version:
        raise CdiError("no NVIDIA driver found under %s (no driver version in /proc/driver/nvidia/version or "
                       "/sys/module/nvidia/version)%s" % (root, "".join("; " + w for w in warnings)))
    if not VERSION_RE.fullmatch(version):
        raise CdiError("driver version %r is not a version (digits and dots)" % (version,))
    if gpus is None:
        gpus = gpus_from_proc(root, warnings)
    if not gpus:
        raise CdiError("the NVIDIA driver %s is loaded but no GPU is visible" % version)
    devices = []
    all_nodes = []
    taken = set(["all"] if all_device else [])
    if "index" in naming:
        for g in gpus:
            taken.update(["%d:%d" % (g["index"], j) for j in range(len(g["mig"]))] if g.get("mig") else [str(g["index"])])

    def uuid_name(uuid, what):
        """``uuid`` when CDI takes it as a device name no other device has, else None (with a warning)."""
        problem = device_name_problem(uuid) or ("already the name of another device" if uuid in taken else None)
        if problem:
            warnings.append("%s: device name %r left out: %s" % (what, uuid, problem))
            return None
        taken.add(uuid)
        return uuid

    for g in gpus:
        gpu = "GPU %s (%s)" % (g["index"], g.get("bus"))
        node = "/dev/nvidia%d" % g["minor"]
        if not os.path.exists(_p(root, node)):
            warnings.append("%s is missing (GPU %s)" % (node, g.get("uuid")))
        edits = {"deviceNodes": [{"path": node}]}
        all_nodes.append(node)
        if g.get("mig"):
            for j, m in enumerate(g["mig"]):
                nodes = [node]
                for cap in (m.get("gi_cap"), m.get("ci_cap")):
                    if cap is not None:
                        nodes.append("/dev/nvidia-caps/nvidia-cap%d" % cap)
                medits = {"deviceNodes": [{"path": n} for n in nodes]}
                all_nodes.extend(n for n in nodes if n not in all_nodes)
                if "index" in naming:
                    devices.append({"name": "%d:%d" % (g["index"], j), "containerEdits": medits})
                if "uuid" in naming and m.get("uuid") and uuid_name(m["uuid"], "%s MIG device %d" % (gpu, j)):
                    devices.append({"name": m["uuid"], "containerEdits": medits})
            continue  # a GPU in MIG mode is handed out through its MIG devices
        if "index" in naming:
            devices.append({"name": str(g["index"]), "containerEdits": edits})
        if "uuid" in naming and g.get("uuid") and uuid_name(g["uuid"], gpu):
            devices.append({"name": g["uuid"], "containerEdits": edits})
    if all_device:
        devices.append({"name": "all", "containerEdits": {"deviceNodes": [{"path": n} for n in all_nodes]}})

    common = {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}
    common["deviceNodes"] = [{"path": n} for n in _first_existing(root, CONTROL_NODES)]
    mounts = []
    libdir = find_library_dir(root, version, library_dirs or DEFAULT_LIBRARY_DIRS)
    links = []
    if libdir:
        libs, links = driver_libraries(root, version, libdir)
        mounts.extend(_mount(p) for p in libs)
    else:
        warnings.append("libcuda.so.%s not found in %s" % (version, ", ".join(library_dirs or DEFAULT_LIBRARY_DIRS)))
    seen = set()
    for b in BINARIES:
        for d in bin_dirs or DEFAULT_BIN_DIRS:
            path = "%s/%s" % (d, b)
            # the executable itself: a wrapper script (e.g. /usr/bin/nvidia-smi exec'ing
            # /usr/local/nvidia/bin/nvidia-smi, seen on the lent H200) is useless in a container
            if b not in seen and os.path.isfile(_p(root, path)) and not _is_script(_p(root, path)):
                mounts.append(_mount(path))
                seen.add(b)
    mounts.extend(_mount(p) for p in firmware_files(root, version, warnings))
    mounts.extend(_mount(p) for p in _first_existing(root, IPC_PATHS))
    hook = find_hook(root, hook_path)
    hooks = []
    if hook:
        if links:
            hooks.append(_hook(hook, "create-symlinks", sum((["--link", "%s::%s" % (target, link)] for link, target in links), [])))
        hooks.append(_hook(hook, "enable-cuda-compat", ["--host-driver-version=%s" % version]))
        if libdir:
            hooks.append(_hook(hook, "update-ldcache", ["--folder", libdir]))
        hooks.append(_hook(hook, "disable-device-node-modification", []))
    else:
        # no hook binary: expose the SONAME links as mounts so that
        # LD_LIBRARY_PATH=<libdir> (set by CUDA images) finds the libraries
        for link, target in links:
            real = os.path.join(libdir, target) if not target.startswith("/") else target
            real = os.path.normpath(real)
            while os.path.islink(_p(root, real)):
                t = os.readlink(_p(root, real))
                real = os.path.normpath(os.path.join(os.path.dirname(real), t))
            mounts.append({"hostPath": real, "containerPath": link, "options": list(MOUNT_OPTIONS)})
        if libdir:
            warnings.append("no nvidia-cdi-hook or nvidia-ctk found: the spec has no hooks (no ldcache update); "
                            "containers must have %s on LD_LIBRARY_PATH" % libdir)
    common["mounts"] = mounts
    if hooks:
        common["hooks"] = hooks
    spec = {"cdiVersion": "", "kind": kind, "devices": devices, "containerEdits": common}
    spec["cdiVersion"] = minimum_version(spec)
    info = {"driver_version": version, "library_dir": libdir, "hook": hook, "warnings": warnings,
            "device_names": [d["name"] for d in devices]}
    return spec, info


def minimum_version(spec):
    """Lowest CDI spec version that can express ``spec`` (rules of the CDI Go package)."""
    edits = [d.get("containerEdits", {}) for d in spec.get("devices", [])] + [spec.get("containerEdits", {})]
    if any(e.get("netDevices") or (e.get("intelRdt") or {}).get("schemata") for e in edits):
        return "1.1.0"
    if any(e.get("intelRdt") is not None or e.get("additionalGids") for e in edits):
        return "0.7.0"
    _vendor, _sep, cls = spec.get("kind", "").partition("/")
    if spec.get("annotations") or any(d.get("annotations") for d in spec.get("devices", [])) or "." in cls:
        return "0.6.0"
    if any(d["name"][:1].isdigit() for d in spec.get("devices", [])) or \
            any(n.get("hostPath") for e in edits for n in e.get("deviceNodes", [])):
        return "0.5.0"
    if any(m.get("type") for e in edits for m in e.get("mounts", [])):
        return "0.4.0"
    return "0.3.0"


# -- output ----------------------------------------------------------------------

_PLAIN = re.compile(r"^[A-Za-z_/][A-Za-z0-9_./=@+-]*\Z")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def _yaml_scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    s = str(v)
    if _PLAIN.match(s) and s.lower() not in _RESERVED:
        return s
    return json.dumps(s)


def to_yaml(value, indent=0):
    """Block-style YAML for dicts/lists/scalars (enough for CDI specs)."""
    pad = " " * indent
    lines = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                lines.append("%s%s:" % (pad, k))
                lines.append(to_yaml(v, indent + (0 if isinstance(v, list) else 2)).rstrip("\n"))
            else:
                lines.append("%s%s: %s" % (pad, k, _yaml_scalar(v) if not isinstance(v, (dict, list)) else ("{}" if isinstance(v, dict) else "[]")))
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and item:
                sub = to_yaml(item, indent + 2).rstrip("\n").split("\n")
                sub[0] = pad + "- " + sub[0][indent + 2:]
                lines.extend(sub)
            elif isinstance(item, list) and item:
                lines.append(pad + "-")
                lines.append(to_yaml(item, indent + 2).rstrip("\n"))
            else:
                lines.append("%s- %s" % (pad, _yaml_scalar(item)))
    else:
        lines.append(pad + _yaml_scalar(value))
    return "\n".join(lines) + "\n"


def render(spec, path):
    if path.endswith(".json"):
        return json.dumps(spec, indent=2) + "\n"
    return "---\n" + to_yaml(spec)
