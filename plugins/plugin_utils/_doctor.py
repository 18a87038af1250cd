# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Diagnose a GPU node from its gathered facts (the guide's troubleshooting cases).

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

``diagnose(facts, expect)`` is pure: ``facts`` is ``ansible_facts.gpu`` (plus a few
host probes the role adds), ``expect`` what the inventory asks of the node.  Each
finding has an ``id``, a ``severity`` (error/warning/info), what was seen and what to do.

``facts["container_runtime"]`` (added by the doctor role on container nodes) carries the
text of the container runtime's config files and of the CDI spec directories as read on
the node; ``runtime_checks`` parses them here, on the controller (the "nvidia-smi not
found in the container" case: no CDI spec, or no nvidia runtime in the runtime's config).
"""
from __future__ import annotations

import base64
import json
import posixpath
import re
from fnmatch import fnmatchcase

from ansible_collections.gpuops.nvidia.plugins.module_utils._container_runtime import CRI_PLUGIN, DEFAULT_CONFIG
from ansible_collections.gpuops.nvidia.plugins.module_utils._toml import TomlError, format_key, loads
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError

# CUDA version each driver branch supports at most (driver >= branch minimum).
BRANCH_CUDA = (
    (580, "13.0"), (575, "12.9"), (570, "12.8"), (565, "12.7"), (560, "12.6"), (555, "12.5"),
    (550, "12.4"), (545, "12.3"), (535, "12.2"), (530, "12.1"), (525, "12.0"), (520, "11.8"),
    (515, "11.7"), (510, "11.6"), (470, "11.4"),
)
VFIO_DRIVERS = ("vfio-pci", "nvgrace_gpu_vfio_pci")


class DoctorInputError(InputError):
    """Facts or runtime state of the wrong shape (what the filters were given is not what gpu_facts or the
    doctor role produce); the message says which value and what was expected."""


def _type(value):
    return "null" if value is None else type(value).__name__


def _short(value, limit=120):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _need(value, types, where, what, errors):
    if value is not None and not isinstance(value, types):
        errors.append("%s must be %s, got %s %s" % (where, what, _type(value), _short(value)))
        return False
    return value is not None


def _records(value, where, errors, key=None):
    """``value`` a list of mappings (each with a string ``key`` when given)."""
    if not _need(value, list, where, "a list of mappings", errors):
        return
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            errors.append("%s[%d] must be a mapping, got %s %s" % (where, i, _type(item), _short(item)))
        elif key and not isinstance(item.get(key), str):
            errors.append("%s[%d].%s must be a string, got %r" % (where, i, key, item.get(key)))


def check_facts(facts, where="facts"):
    """Refuse ``ansible_facts.gpu`` of the wrong shape (DoctorInputError listing every problem)."""
    errors = []
    if not isinstance(facts, dict):
        raise DoctorInputError("%s must be ansible_facts.gpu (a mapping), got %s %s" % (where, _type(facts), _short(facts)))
    for key in ("devices", "others", "nvswitches"):
        _records(facts.get(key), "%s.%s" % (where, key), errors, key="bdf")
    for key in ("kernel", "driver", "probes", "iommu", "nvml", "container_runtime"):
        _need(facts.get(key), dict, "%s.%s" % (where, key), "a mapping", errors)
    nvml = facts.get("nvml") if isinstance(facts.get("nvml"), dict) else {}
    _records(nvml.get("devices"), "%s.nvml.devices" % where, errors)
    for i, dev in enumerate(nvml.get("devices") if isinstance(nvml.get("devices"), list) else []):
        mode = dev.get("mig_mode") if isinstance(dev, dict) else None
        if mode is not None and not (isinstance(mode, dict) and "current" in mode and "pending" in mode):
            errors.append("%s.nvml.devices[%d].mig_mode must be {current, pending}, got %r" % (where, i, mode))
    iommu = facts.get("iommu") if isinstance(facts.get("iommu"), dict) else {}
    if iommu and "enabled" not in iommu:
        errors.append("%s.iommu has no enabled key" % where)
    if errors:
        raise DoctorInputError("; ".join(errors))
    return facts


def check_workload(workload, where="workload"):
    """A workload kind is a string (or null); a list of one kind, as node inventories may give it, is that kind."""
    if isinstance(workload, (list, tuple)):
        kinds = sorted(set(workload))
        if len(kinds) > 1 or not all(isinstance(k, str) for k in kinds):
            raise DoctorInputError("%s must be one workload kind (a string), got %r" % (where, workload))
        workload = kinds[0] if kinds else None
    if workload is not None and not isinstance(workload, str):
        raise DoctorInputError("%s must be a workload kind (a string such as container), got %s %r"
                               % (where, _type(workload), workload))
    return workload


# a CUDA version as the doctor's survey question and doctor_cuda_version take it: ASCII digits, 1 to 3 parts
_CUDA_VERSION = re.compile(r"[0-9]{1,4}(\.[0-9]{1,4}){0,2}")


def check_expect(expect):
    if expect is None:
        return {}
    if not isinstance(expect, dict):
        raise DoctorInputError("expect must be a mapping (workload, toolkit, cuda_version), got %s %r"
                               % (_type(expect), expect))
    out = dict(expect)
    out["workload"] = check_workload(expect.get("workload"), "expect.workload")
    want = out.get("cuda_version")
    if want not in (None, "") and (isinstance(want, bool) or not isinstance(want, (str, int, float))
                                   or not _CUDA_VERSION.fullmatch(str(want))):
        raise DoctorInputError("expect.cuda_version must be a version such as 12.4, got %r" % (want,))
    return out


def _version_tuple(text):
    out = []
    for part in str(text).split("."):
        digits = "".join(ch for ch in part if ch in "0123456789")
        out.append(int(digits) if digits else 0)
    return tuple(out)


def driver_cuda(facts):
    """The CUDA version the installed driver supports, from NVML or the branch table."""
    nvml = facts.get("nvml") or {}
    if nvml.get("cuda_driver_version"):
        return nvml["cuda_driver_version"]
    version = (facts.get("driver") or {}).get("version")
    if not version:
        return None
    branch = _version_tuple(version)[0]
    for floor, cuda in BRANCH_CUDA:
        if branch >= floor:
            return cuda
    return None


def _f(fid, severity, summary, remediation, **detail):
    return {"id": fid, "severity": severity, "summary": summary, "remediation": remediation, "detail": detail}


def diagnose(facts, expect=None):
    check_facts(facts)
    expect = check_expect(expect)
    workload = expect.get("workload") or ""
    gpus = facts.get("devices") or []
    kernel = facts.get("kernel") or {}
    driver = facts.get("driver") or {}
    probes = facts.get("probes") or {}
    findings = []
    if not gpus:
        if workload:
            findings.append(_f("gpu-not-detected", "error", "no NVIDIA GPU function on the PCI bus",
                               "check the card is seated/passed through (lspci -d 10de:) and that the host's PCI "
                               "view is complete; a VM needs the GPU assigned by its hypervisor", workload=workload))
        return findings

    host_gpus = [g for g in gpus if g.get("driver") not in VFIO_DRIVERS]
    if workload in ("", "container"):
        findings.extend(_container_checks(facts, expect, host_gpus, kernel, driver, probes))
    if workload == "vm-passthrough":
        findings.extend(_passthrough_checks(facts, gpus))
    if workload == "vm-vgpu":
        if not driver.get("loaded"):
            findings.append(_f("vgpu-manager-missing", "error", "vm-vgpu node without the NVIDIA vGPU manager driver loaded",
                               "install the vGPU manager package (licensed, from the NVIDIA portal) and reboot"))
        if not probes.get("mdev_types"):
            findings.append(_f("vgpu-no-mdev-types", "error", "no mdev/SR-IOV vGPU types exposed",
                               "enable SR-IOV VFs (sriov-manage -e ALL) or load the vGPU manager; check nvidia-vgpu-mgr"))
    findings.extend(_mig_checks(facts))
    if facts.get("iommu") and workload.startswith("vm-") and not facts["iommu"]["enabled"]:
        findings.append(_f("iommu-off", "error", "IOMMU is not enabled in the kernel",
                           "enable VT-d/AMD-Vi in firmware and add intel_iommu=on iommu=pt (or amd_iommu=on) with "
                           "gpuops.nvidia.kernel_cmdline, then reboot", cmdline=kernel.get("cmdline")))
    return findings


def _container_checks(facts, expect, host_gpus, kernel, driver, probes):
    out = []
    if kernel.get("nouveau_loaded") or kernel.get("nova_core_loaded"):
        out.append(_f("nouveau-conflict", "error", "nouveau/nova_core is loaded and holds the GPU",
                      "blacklist nouveau and nova_core (gpuops.nvidia.driver does), regenerate the initramfs, reboot",
                      holders=[g["bdf"] for g in host_gpus if g.get("driver") in ("nouveau", "nova_core")]))
    if not driver.get("loaded"):
        out.append(_f("driver-not-loaded", "error", "the NVIDIA kernel module is not loaded",
                      "run the driver role; then `modprobe nvidia` and read `dmesg | grep -i nvrm` for the reason"))
        if kernel.get("headers_present") is False:
            out.append(_f("kernel-headers-missing", "error",
                          "no kernel headers for the running kernel %s: DKMS cannot build the module" % kernel.get("release"),
                          "install the headers for exactly this kernel (linux-headers-$(uname -r) / kernel-devel-$(uname -r)) "
                          "or use precompiled modules"))
        if facts.get("secure_boot"):
            out.append(_f("secure-boot-unsigned", "warning", "Secure Boot is on: an unsigned module will not load",
                          "use signed precompiled modules, or sign the DKMS build with an enrolled MOK key"))
    unbound = [g["bdf"] for g in host_gpus if g.get("driver") is None]
    if driver.get("loaded") and unbound:
        out.append(_f("gpu-not-bound", "error", "GPUs not bound to the nvidia driver: %s" % ", ".join(unbound),
                      "check `dmesg` for RmInitAdapter/NVRM errors; an unsupported GPU for this branch or a fallen-off-the-bus GPU shows there"))
    if driver.get("loaded") and probes.get("nvidia_smi") is False:
        out.append(_f("nvidia-smi-not-found", "error", "the driver is loaded but nvidia-smi is not installed or not on PATH",
                      "install the driver's utilities package (nvidia-utils-<branch> / nvidia-driver-cuda)"))
    if probes.get("toolkit") is False and expect.get("toolkit", True):
        out.append(_f("toolkit-missing", "error", "nvidia-container-runtime/nvidia-ctk not found: containers will not see the GPU",
                      "run the container_toolkit role; check `containerd config dump | grep -A5 nvidia`"))
    if facts.get("container_runtime") and driver.get("loaded") and expect.get("toolkit", True):
        out.extend(runtime_checks(facts["container_runtime"]))
    want = expect.get("cuda_version")
    have = driver_cuda(facts)
    if want and have and _version_tuple(have) < _version_tuple(want):
        out.append(_f("cuda-version-mismatch", "error",
                      "the driver supports CUDA %s but the workload needs CUDA %s" % (have, want),
                      "upgrade the driver branch (driver_branch) to one whose CUDA version is >= %s, or use "
                      "a CUDA forward-compatibility package on data-centre GPUs" % want, driver=driver.get("version")))
    return out


def _passthrough_checks(facts, gpus):
    out = []
    not_vfio = [g["bdf"] for g in gpus if g.get("driver") not in VFIO_DRIVERS]
    if not_vfio:
        out.append(_f("vfio-not-bound", "error", "vm-passthrough node with GPUs not on vfio-pci: %s" % ", ".join(not_vfio),
                      "run the vfio role (binds whole IOMMU groups, persists across reboot)"))
    for g in gpus:
        companions = g.get("companions") or []
        if g.get("iommu_group_foreign"):
            out.append(_f("iommu-group-shared", "error",
                          "GPU %s shares IOMMU group %s with non-NVIDIA devices %s" % (g["bdf"], g.get("iommu_group"), ", ".join(g["iommu_group_foreign"])),
                          "move the card to a slot with ACS isolation, or pass the whole group through (vfio_include_group_members)"))
        for c in companions:
            comp = next((d for d in (facts.get("others") or []) + gpus if d["bdf"] == c), None)
            if comp and comp.get("driver") not in VFIO_DRIVERS and g.get("driver") in VFIO_DRIVERS:
                out.append(_f("vfio-companion-not-bound", "error",
                              "companion %s of GPU %s is on %s, not vfio-pci: KubeVirt refuses the group" % (c, g["bdf"], comp.get("driver")),
                              "bind the whole IOMMU group (gpuops.nvidia.vfio_pci does)"))
    return out


def _mig_checks(facts):
    out = []
    for dev in (facts.get("nvml") or {}).get("devices", []):
        mode = dev.get("mig_mode")
        if mode and mode["current"] != mode["pending"]:
            out.append(_f("mig-mode-pending", "warning",
                          "GPU %s MIG mode change pending (current %s, pending %s)" % (dev["index"], mode["current"], mode["pending"]),
                          "stop GPU clients (nvidia-persistenced, nvidia_drm users, dcgm, fabric manager) and reset the GPU, or reboot"))
    return out


def readiness(facts, workload=None, reboot_reasons=None, validated=None):
    """Is the node ready for its workload? -> {"ready": bool, "reasons": [str]}.

    Ready means: no error-severity finding for the node's workload kind, no reboot pending, and,
    when the cluster validated it (``validated`` is True/False; None = not a validated node),
    its validation passed. A node without GPUs and without a GPU workload is ready (CPU node).
    """
    facts = facts or {}
    check_facts(facts)
    workload = check_workload(workload)
    if reboot_reasons is not None and not isinstance(reboot_reasons, (list, tuple)):
        raise DoctorInputError("reboot_reasons must be a list of reasons (or null), got %s %r"
                               % (_type(reboot_reasons), reboot_reasons))
    if validated is not None and not isinstance(validated, bool):
        raise DoctorInputError("validated must be true, false or null, got %s %r" % (_type(validated), validated))
    reasons = []
    if facts.get("count", len(facts.get("devices") or [])) or workload:
        expect = {"workload": workload or ""}
        reasons += [f["id"] for f in diagnose(facts, expect) if f["severity"] == "error"]
    if reboot_reasons:
        reasons.append("reboot-pending")
    if validated is False:
        reasons.append("not-validated")
    return {"ready": not reasons, "reasons": reasons}


# -- container runtime and CDI (the "nvidia-smi not found in the container" case) ----------------

RUNTIME_DEFAULTS = {
    "runtime": "auto",                       # auto | containerd | crio | docker | none
    "runtime_name": "nvidia",
    "containerd_config": "/etc/containerd/config.toml",
    "crio_config": "/etc/crio/crio.conf",
    "crio_config_dir": "/etc/crio/crio.conf.d",
    "docker_config": "/etc/docker/daemon.json",
    "cdi_dirs": ["/etc/cdi", "/var/run/cdi"],
}
RUNTIME_LABEL = {"containerd": "containerd", "crio": "CRI-O", "docker": "Docker"}
CDI_KIND = "nvidia.com/gpu"
CDI_EXTENSIONS = (".json", ".yaml")          # the CDI library reads only these (not .yml), not in subdirectories
# disabling any of these takes containerd's CRI (Kubernetes) side away: Docker's containerd.io ships `cri` disabled
CONTAINERD_CRI_IDS = ("cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime")
_CRI_SECTIONS = tuple(sorted(set(CRI_PLUGIN.values())))
_RANCHER = re.compile(r"/var/lib/rancher/(k3s|rke2)/agent/etc/containerd/config(-v3)?\.toml(\.tmpl)?$")
_TOOLKIT = "playbooks/container_toolkit.yml"
_NOT_IN_CONTAINER = '("nvidia-smi: not found" in the container)'
_YAML_KIND = re.compile(r"""(["']?)kind\1[ \t]*:[ \t]*(?:"([^"]*)"|'([^']*)'|([^\s#"'][^#]*?))[ \t]*(?:#.*)?""")


def _get(d, path):
    for part in path:
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def _norm(path):
    path = posixpath.normpath(path)
    return "/" + path.lstrip("/") if path.startswith("/") else path


def check_runtime_state(state):
    """Refuse a container_runtime state of the wrong shape (DoctorInputError listing every problem)."""
    if state is None:
        return
    if not isinstance(state, dict):
        raise DoctorInputError("the container_runtime state must be a mapping, got %s %s" % (_type(state), _short(state)))
    errors = []
    for key in ("runtime", "runtime_name", "containerd_config", "crio_config", "crio_config_dir", "docker_config"):
        _need(state.get(key), str, key, "a string", errors)
    for key in ("cdi_dirs", "globbed"):
        if _need(state.get(key), (list, tuple), key, "a list of paths", errors):
            errors.extend("%s[%d] must be a path, got %r" % (key, i, v) for i, v in enumerate(state[key])
                          if not isinstance(v, str))
    for key in ("files", "unreadable"):
        if _need(state.get(key), dict, key, "a mapping of path to text", errors):
            errors.extend("%s must be keyed by path, got key %r" % (key, k) for k in state[key] if not isinstance(k, str))
    files = state.get("files") if isinstance(state.get("files"), dict) else {}
    errors.extend("files[%r] must be the file's text (or null when it does not exist), got %s"
                  % (k, _type(v)) for k, v in files.items() if v is not None and not isinstance(v, str))
    if errors:
        raise DoctorInputError("; ".join(errors))


def runtime_state(state):
    """``state`` with defaults filled in (paths normalised)."""
    check_runtime_state(state)
    out = dict(RUNTIME_DEFAULTS)
    out.update({k: v for k, v in (state or {}).items() if v is not None})
    for key in ("containerd_config", "crio_config", "crio_config_dir", "docker_config"):
        out[key] = _norm(out[key])
    out["cdi_dirs"] = [_norm(d) for d in out.get("cdi_dirs") or []]
    out["files"] = dict(out.get("files") or {})
    out["unreadable"] = dict(out.get("unreadable") or {})
    out["globbed"] = list(out.get("globbed") or [])
    return out


def _glob_match(pattern, path):
    """Go's filepath.Match per path element (``*`` never crosses ``/``)."""
    pp, fp = pattern.split("/"), path.split("/")
    return len(pp) == len(fp) and all(fnmatchcase(f, p.replace("[^", "[!")) for p, f in zip(pp, fp))


def _imports(parent, data):
    """containerd's resolveImports: cleaned, relative to the importing file's directory."""
    imports = data.get("imports") or []
    if not isinstance(imports, list):
        return []
    out = []
    for imp in imports:
        if isinstance(imp, str) and imp:
            path = posixpath.normpath(imp)
            if not path.startswith("/"):
                path = posixpath.normpath(posixpath.join(posixpath.dirname(parent), path))
            out.append(_norm(path))
    return out


def containerd_chain(state):
    """The containerd config files in containerd's load order (main file, then its imports, breadth first).

    Returns ``order`` [(path, data)], ``invalid`` [(path, error)], ``unreadable`` [(path, error)],
    ``missing`` (literal imports that do not exist), and what is still to be read on the node:
    ``read`` (literal paths) and ``globs`` (patterns not yet listed; the role lists them with find).
    """
    st = runtime_state(state)
    files, globbed = st["files"], set(st["globbed"])
    out = {"order": [], "invalid": [], "unreadable": [], "missing": [], "read": [], "globs": []}
    queue, seen = [st["containerd_config"]], set()
    while queue:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        if path in st["unreadable"]:
            out["unreadable"].append((path, st["unreadable"][path]))
            continue
        if path not in files:
            out["read"].append(path)
            continue
        if files[path] is None:
            out["missing"].append(path)
            continue
        try:
            data = loads(files[path])
        except TomlError as e:
            out["invalid"].append((path, "not valid TOML: %s" % e))
            continue
        version = data.get("version")
        if version is not None and (isinstance(version, bool) or version not in CRI_PLUGIN):
            out["invalid"].append((path, "unsupported config version %r" % (version,)))
            continue
        out["order"].append((path, data))
        for imp in _imports(path, data):
            if "*" not in imp:
                queue.append(imp)
            elif imp in globbed:
                queue.extend(sorted(p for p in files if files[p] is not None and _glob_match(imp, p)))
            elif imp not in out["globs"]:
                out["globs"].append(imp)
    return out


def runtime_pending(state):
    """What the role still has to read for containerd's imports: {"read": [paths], "globs": [{pattern, dir, depth, name}]}."""
    chain = containerd_chain(state)
    globs = []
    for pattern in chain["globs"]:
        parts = pattern.split("/")
        first = next(i for i, p in enumerate(parts) if re.search(r"[*?\[]", p))
        globs.append({"pattern": pattern, "dir": "/".join(parts[:first]) or "/",
                      "depth": len(parts) - first, "name": parts[-1]})
    return {"read": chain["read"], "globs": globs}


def runtime_read(state, results, globbed=()):
    """Merge the role's slurp loop results (item = path on the node) into ``state``.

    A file that does not exist is recorded as None; one that cannot be read as unreadable.
    """
    st = runtime_state(state)
    if results is not None and not isinstance(results, (list, tuple)):
        raise DoctorInputError("results must be a slurp loop's results (a list), got %s" % _type(results))
    if (globbed is not None and not isinstance(globbed, (list, tuple))) or \
            any(not isinstance(g, str) for g in (globbed if isinstance(globbed, (list, tuple)) else ())):
        raise DoctorInputError("globbed must be a list of import patterns, got %r" % (globbed,))
    for i, r in enumerate(results or []):
        if not isinstance(r, dict):
            raise DoctorInputError("results[%d] must be a slurp result (a mapping), got %s %s" % (i, _type(r), _short(r)))
        if r.get("skipped"):
            continue
        path = r.get("item")
        if isinstance(path, dict):
            path = path.get("path")
        if not path:
            continue
        if not isinstance(path, str):
            raise DoctorInputError("results[%d].item must be the path read on the node, got %r" % (i, path))
        path = _norm(path)
        if "content" in r and not r.get("failed"):
            raw = r["content"]
            if not isinstance(raw, str):
                raise DoctorInputError("results[%d].content (%s) must be text, got %s" % (i, path, _type(raw)))
            if r.get("encoding", "base64") == "base64":
                try:
                    raw = base64.b64decode(raw, validate=True).decode("utf-8", "replace")
                except ValueError as e:
                    raise DoctorInputError("results[%d].content (%s) is not base64 as slurp returns it: %s" % (i, path, e))
            st["files"][path] = raw
            st["unreadable"].pop(path, None)
        elif "not found" in str(r.get("msg", "")).lower():
            st["files"][path] = None
        else:
            st["unreadable"][path] = str(r.get("msg") or "unreadable")
    st["globbed"] = sorted(set(st["globbed"]) | set(globbed or ()))
    return st


def cdi_kind(text):
    """The ``kind`` of a CDI spec (YAML or JSON text), or None."""
    s = (text or "").lstrip("\ufeff \t\r\n")
    if s.startswith("{"):
        try:
            data = json.loads(s)
        except ValueError:
            return None
        return data.get("kind") if isinstance(data, dict) else None
    for line in s.splitlines():
        m = _YAML_KIND.fullmatch(line)
        if m:
            return m.group(2) if m.group(2) is not None else (m.group(3) if m.group(3) is not None else m.group(4))
    return None


def _cdi_checks(st):
    dirs = st["cdi_dirs"]
    if not dirs:
        return []
    specs, misnamed, looked = [], [], []
    for path, text in sorted(st["files"].items()):
        if posixpath.dirname(path) not in dirs or text is None:
            continue
        looked.append(path)
        if cdi_kind(text) == CDI_KIND:
            (specs if posixpath.splitext(path)[1] in CDI_EXTENSIONS else misnamed).append(path)
    if specs:
        return []
    where = " or ".join(dirs)
    summary = "no CDI spec declares kind %s in %s: containers that get their GPUs through CDI get none %s" % (
        CDI_KIND, where, _NOT_IN_CONTAINER)
    fix = "run %s (or `nvidia-ctk cdi generate --output=%s/nvidia.yaml`)" % (_TOOLKIT, dirs[0])
    if misnamed:
        summary += "; %s declares it but CDI reads only .yaml and .json files" % ", ".join(misnamed)
        fix = "rename %s to .yaml, or %s" % (", ".join(misnamed), fix)
    unreadable = sorted(p for p in st["unreadable"] if posixpath.dirname(p) in dirs)
    if unreadable:
        summary += " (could not read %s)" % ", ".join(unreadable)
    return [_f("cdi-spec-missing", "error", summary, fix, cdi_dirs=dirs, files=looked, unreadable=unreadable)]


def _register_fix(runtime, st, config_path):
    name = st["runtime_name"]
    if runtime == "containerd" and _RANCHER.search(config_path):
        return ("k3s/RKE2 regenerate %s and add the nvidia runtime themselves when nvidia-container-runtime is "
                "installed: run %s to install the toolkit, then restart k3s / rke2-agent" % (config_path, _TOOLKIT))
    extra = ["container_toolkit_runtime=%s" % runtime]
    if config_path != DEFAULT_CONFIG[runtime]:
        extra.append("container_toolkit_runtime_config_path=%s" % config_path)
    if name != "nvidia":
        extra.append("container_toolkit_runtime_name=%s" % name)
    fix = "run %s to register the %s runtime (%s: config_path %s; -e '%s')" % (
        _TOOLKIT, name, RUNTIME_LABEL[runtime], config_path, " ".join(extra))
    if name == "nvidia":
        fix += ", or by hand `nvidia-ctk runtime configure --runtime=%s --config=%s` and restart %s" % (
            runtime, config_path, runtime)
    return fix


def _invalid(runtime, bad):
    return _f("container-runtime-config-invalid", "error",
              "%s config is broken: %s" % (RUNTIME_LABEL[runtime], "; ".join("%s: %s" % b for b in bad)),
              "correct the file (the error gives line and column) and restart %s; then re-run the doctor" % runtime,
              runtime=runtime, files=[b[0] for b in bad])


def _unreadable(runtime, bad):
    return _f("runtime-config-unreadable", "warning",
              "cannot read %s config %s: the nvidia runtime check was skipped" % (
                  RUNTIME_LABEL[runtime], "; ".join("%s (%s)" % b for b in bad)),
              "run the doctor with privileges (ansible-playbook playbooks/doctor.yml --become)",
              runtime=runtime, files=[b[0] for b in bad])


def _containerd(st):
    """-> (state, findings); state: absent | cri-disabled | checked."""
    main = st["containerd_config"]
    if main in st["unreadable"]:
        return "checked", [_unreadable("containerd", [(main, st["unreadable"][main])])]
    if st["files"].get(main) is None:
        return "absent", []
    chain = containerd_chain(st)
    if chain["invalid"]:
        return "checked", [_invalid("containerd", chain["invalid"])]
    if chain["unreadable"]:
        return "checked", [_unreadable("containerd", chain["unreadable"])]
    order = chain["order"]
    disabled = set()
    for _path, data in order:
        if isinstance(data.get("disabled_plugins"), list):
            disabled.update(p for p in data["disabled_plugins"] if isinstance(p, str))
    if disabled & set(CONTAINERD_CRI_IDS):
        return "cri-disabled", []
    name = st["runtime_name"]
    declared, misplaced, cri_files = [], [], []
    for path, data in order:
        version = data.get("version")
        sections = [CRI_PLUGIN[version]] if version is not None else [CRI_PLUGIN[1], CRI_PLUGIN[2]]
        if any(isinstance(_get(data, s), dict) for s in sections):
            cri_files.append(path)
        if any(isinstance(_get(data, s + ("containerd", "runtimes", name)), dict) for s in sections):
            declared.append(path)
        else:
            misplaced += ["%s in %s (version %s)" % (format_key(s + ("containerd", "runtimes", name)), path, version or "unset")
                          for s in _CRI_SECTIONS if s not in sections
                          and isinstance(_get(data, s + ("containerd", "runtimes", name)), dict)]
    main_data = order[0][1]
    main_version = main_data.get("version") or (1 if isinstance(_get(main_data, CRI_PLUGIN[1]), dict) else 2)
    want = format_key(CRI_PLUGIN[main_version] + ("containerd", "runtimes", name))
    detail = {"runtime": "containerd", "config_path": main, "files": [p for p, _d in order],
              "declared_in": declared, "imports_not_read": chain["read"] + chain["globs"]}
    if not declared:
        imports = [p for p, _d in order[1:]]
        summary = "containerd has no %s runtime: %s is in neither %s nor %s: pods get no GPU %s" % (
            name, want, main, ("its imports (%s)" % ", ".join(imports)) if imports else "any file it imports", _NOT_IN_CONTAINER)
        if misplaced:
            summary += "; found under the wrong plugin for the file's config version: %s" % ", ".join(misplaced)
        if detail["imports_not_read"]:
            summary += " (imports not read: %s)" % ", ".join(detail["imports_not_read"])
        return "checked", [_f("nvidia-runtime-missing", "error", summary, _register_fix("containerd", st, main), **detail)]
    if cri_files and cri_files[-1] not in declared:
        last = cri_files[-1]
        return "checked", [_f(
            "nvidia-runtime-shadowed", "warning",
            "containerd: the %s runtime is in %s, but %s, loaded later, redefines the CRI plugin section without it: "
            "containerd before 2.1 replaces the whole section, so the runtime is lost there" % (name, ", ".join(declared), last),
            "add the %s runtime to %s as well, or run %s with container_toolkit_containerd_drop_in_path set to a drop-in "
            "imported after it (the drop-in carries the whole CRI section)" % (name, last, _TOOLKIT), shadowed_by=last, **detail)]
    return "checked", []


def _crio(st):
    main, conf_dir = st["crio_config"], st["crio_config_dir"]
    paths = [main] + sorted(p for p in set(st["files"]) | set(st["unreadable"]) if p.startswith(conf_dir.rstrip("/") + "/"))
    bad = [(p, st["unreadable"][p]) for p in paths if p in st["unreadable"]]
    present = [p for p in paths if st["files"].get(p) is not None]
    if not present and not bad:
        return "absent", []
    if bad:
        return "checked", [_unreadable("crio", bad)]
    name, declared, invalid = st["runtime_name"], [], []
    for path in present:
        try:
            data = loads(st["files"][path])
        except TomlError as e:
            invalid.append((path, "not valid TOML: %s" % e))
            continue
        if isinstance(_get(data, ("crio", "runtime", "runtimes", name)), dict):
            declared.append(path)
    if invalid:
        return "checked", [_invalid("crio", invalid)]
    if declared:
        return "checked", []
    return "checked", [_f(
        "nvidia-runtime-missing", "error",
        "CRI-O has no %s runtime: [%s] is in neither %s nor %s/*: pods get no GPU %s" % (
            name, format_key(("crio", "runtime", "runtimes", name)), main, conf_dir, _NOT_IN_CONTAINER),
        _register_fix("crio", st, conf_dir.rstrip("/") + "/99-nvidia.toml"),
        runtime="crio", config_path=main, files=present, declared_in=[])]


def _docker(st):
    path = st["docker_config"]
    if path in st["unreadable"]:
        return "checked", [_unreadable("docker", [(path, st["unreadable"][path])])]
    text = st["files"].get(path)
    if text is None:
        return "absent", []
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as e:
        return "checked", [_invalid("docker", [(path, "not valid JSON: %s" % e)])]
    if not isinstance(data, dict):
        return "checked", [_invalid("docker", [(path, "not a JSON object")])]
    name = st["runtime_name"]
    if isinstance(_get(data, ("runtimes", name)), dict):
        return "checked", []
    return "checked", [_f(
        "nvidia-runtime-missing", "error",
        "Docker has no %s runtime: runtimes.%s is missing from %s: containers get no GPU %s" % (
            name, name, path, _NOT_IN_CONTAINER),
        _register_fix("docker", st, path), runtime="docker", config_path=path, files=[path], declared_in=[])]


_RUNTIME_CHECKS = (("containerd", _containerd), ("crio", _crio), ("docker", _docker))


def runtime_checks(state):
    """Findings for a container node's runtime config and CDI specs (``state``: see ``RUNTIME_DEFAULTS``
    plus ``files`` {path: text or None}, ``unreadable`` {path: error}, ``globbed`` [import patterns listed])."""
    st = runtime_state(state)
    out = _cdi_checks(st)
    if st["runtime"] == "none":
        return out
    wanted = [r for r, _fn in _RUNTIME_CHECKS] if st["runtime"] == "auto" else [st["runtime"]]
    checked, notes = [], []
    for runtime, fn in _RUNTIME_CHECKS:
        if runtime not in wanted:
            continue
        verdict, findings = fn(st)
        out.extend(findings)
        if verdict == "checked":
            checked.append(runtime)
        elif verdict == "cri-disabled":
            notes.append("%s disables containerd's CRI plugin (disabled_plugins)" % st["containerd_config"])
    if not checked:
        where = {"containerd": st["containerd_config"], "crio": "%s, %s/" % (st["crio_config"], st["crio_config_dir"]),
                 "docker": st["docker_config"]}
        summary = "no container runtime configuration on this container node (looked for %s)" % ", ".join(where[r] for r in wanted)
        if notes:
            summary += "; " + "; ".join(notes)
        out.append(_f("container-runtime-config-missing", "error", summary,
                      "install the container runtime (containerd, CRI-O or Docker), then run %s: it writes the runtime's "
                      "config with the nvidia runtime; if the config lives elsewhere set doctor_containerd_config, "
                      "doctor_crio_config/doctor_crio_config_dir or doctor_docker_config" % _TOOLKIT,
                      looked=[where[r] for r in wanted]))
    return out
