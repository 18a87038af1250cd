# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Device plugin (k8s-device-plugin v0.20) configs (the MIG manager's mig-parted configs are _mig.validate_config's).

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

Configs are written in the upstream format (``version: v1``, ``flags``, ``sharing``); this
module validates them the way the plugin would at start-up (so a bad config is refused
by Ansible, not by a crash-looping pod) and renders the ConfigMap data.
"""
from __future__ import annotations

import json
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError

MIG_STRATEGIES = ("none", "single", "mixed")
LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
SHARING_KEYS = {"timeSlicing": "time-slicing", "mps": "mps"}
RESOURCE_KEYS = {"name", "rename", "devices", "replicas"}
SHARING_SPEC_KEYS = {"renameByDefault", "failRequestsGreaterThanOne", "resources"}
#: the plugin's resource names: "nvidia.com/" + a DNS-1123 subdomain, 63 characters in all
#: (api/config/v1/resources.go NewResourceName, consts.go MaxResourceNameLength)
RESOURCE_PREFIX = "nvidia.com/"
MAX_RESOURCE_NAME = 63
_DNS_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
#: MPS clients per GPU the plugin's MPS control daemon allows (cmd/mps-control-daemon/mps/device.go:
#: 48 from compute capability 7.5, 16 below); it refuses a config with more replicas at start-up
MPS_MAX_REPLICAS = 48
MPS_MAX_REPLICAS_BEFORE_CC75 = 16
# devices list entries (api/config/v1/replicas.go ReplicatedDeviceRef): a GPU index, a MIG index
# "<gpu>:<mig>", a GPU UUID, a MIG UUID (MIG-<uuid> or MIG-GPU-<uuid>/<gi>/<ci>)
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_GPU_INDEX_RE = re.compile(r"[0-9]+\Z")
_MIG_INDEX_RE = re.compile(r"[0-9]+:[0-9]+\Z")
_GPU_UUID_RE = re.compile(r"GPU-%s\Z" % _UUID)
_MIG_UUID_RE = re.compile(r"MIG-(%s|GPU-%s/[0-9]+/[0-9]+)\Z" % (_UUID, _UUID))


def _check_keys(errors, where, mapping, allowed):
    unknown = set(mapping) - set(allowed)
    if unknown:
        errors.append("{}: unknown keys {}".format(where, ", ".join(sorted(unknown))))


class ConfigError(InputError):
    def __init__(self, errors):
        self.errors = list(errors)
        super().__init__("; ".join(self.errors))


def _resource_name_problem(value, qualified=True):
    """Why ``value`` is not a resource name the plugin accepts in a sharing section, or None
    (NewResourceName: ``nvidia.com/`` + a DNS-1123 subdomain, 63 characters in all).  The plugin
    prefixes a bare name with ``nvidia.com/``; a resource ``name`` must be written fully qualified
    here all the same (``qualified``), because GFD's labels and the node plans compare full names."""
    if not isinstance(value, str):
        return "must be a resource name (a string)"
    full = value if (qualified or value.startswith(RESOURCE_PREFIX)) else RESOURCE_PREFIX + value
    if not full.startswith(RESOURCE_PREFIX):
        return "must be fully qualified (nvidia.com/gpu or nvidia.com/mig-<profile>)"
    if len(full) > MAX_RESOURCE_NAME:
        return "must be at most %d characters with its nvidia.com/ prefix" % MAX_RESOURCE_NAME
    if not _DNS_SUBDOMAIN_RE.match(full[len(RESOURCE_PREFIX):]):
        return "must be nvidia.com/ followed by lower-case letters, digits, '-' and '.'"
    return None


def _device_ref_kind(ref):
    """'gpu' or 'mig' for a valid devices-list entry, None for anything the plugin refuses."""
    if isinstance(ref, int) and not isinstance(ref, bool):
        return "gpu" if ref >= 0 else None
    if not isinstance(ref, str):
        return None
    if _GPU_INDEX_RE.match(ref) or _GPU_UUID_RE.match(ref):
        return "gpu"
    if _MIG_INDEX_RE.match(ref) or _MIG_UUID_RE.match(ref):
        return "mig"
    return None


def _validate_devices(at, kind, devices, errors, warnings):
    """``devices``: 'all', a count > 0, or a non-empty list of distinct GPU indexes, 'gpu:mig' indexes
    and GPU-/MIG- UUIDs (replicas.go ReplicatedDevices.UnmarshalJSON)."""
    if devices == "all":
        return
    if isinstance(devices, bool) or not isinstance(devices, (int, list)):
        errors.append(f"{at}.devices must be 'all', a count of GPUs or a list of GPU indexes, "
                      f"'<gpu>:<mig>' indexes or GPU-/MIG- UUIDs, got {devices!r}")
        return
    if isinstance(devices, int):
        if devices < 1:
            errors.append(f"{at}.devices: a count of GPUs must be at least 1, got {devices!r}")
            return
    else:
        if not devices:
            errors.append(f"{at}.devices must not be an empty list (use 'all')")
            return
        seen = set()
        for j, ref in enumerate(devices):
            ref_kind = _device_ref_kind(ref)
            if ref_kind is None:
                errors.append(f"{at}.devices[{j}] must be a GPU index (0, 1, ...), a '<gpu>:<mig>' index, "
                              f"a GPU-<uuid> or a MIG-<uuid>, got {ref!r}")
                continue
            if str(ref) in seen:
                errors.append(f"{at}.devices[{j}]: {ref!r} is listed twice")
            seen.add(str(ref))
            if kind == "mps" and ref_kind == "mig":
                errors.append(f"{at}.devices[{j}]: {ref!r} is a MIG device; MPS sharing is not supported "
                              "for MIG devices (the plugin refuses it)")
    warnings.append(f"{at}: device plugin v0.20 ignores non-'all' devices (k8s-device-plugin#1786)")


def _validate_sharing(where, kind, spec, mig_strategy, errors, warnings):
    """One ``sharing.timeSlicing`` / ``sharing.mps`` section, as the plugin parses it
    (api/config/v1/replicas.go) and then uses it (cmd/nvidia-device-plugin/main.go validateFlags,
    cmd/mps-control-daemon/mps); every message names the config and the key."""
    sec = f"{where}: sharing.{kind}"
    if not isinstance(spec, dict):
        errors.append(f"{sec} must be a mapping, got {spec!r}")
        return
    _check_keys(errors, sec, spec, SHARING_SPEC_KEYS)
    for key in ("renameByDefault", "failRequestsGreaterThanOne"):
        if key in spec and not isinstance(spec[key], bool):
            errors.append(f"{sec}.{key} must be true or false, got {spec[key]!r}")
    if kind == "mps" and spec.get("failRequestsGreaterThanOne") is False:
        warnings.append(f"{sec}.failRequestsGreaterThanOne is false: a container may request more than one "
                        "MPS replica, yet each of its processes is still one MPS client limited to one replica's "
                        "share (the daemon's default thread percentage and pinned memory limit are 1/replicas "
                        "of the GPU); device plugin releases before v0.20.0 ignore false and refuse such requests")
    resources = spec.get("resources")
    if not resources or not isinstance(resources, list):
        errors.append(f"{sec}.resources must list at least one resource, got {resources!r}")
        return
    first = {}
    for i, res in enumerate(resources):
        at = f"{sec}.resources[{i}]"
        if not isinstance(res, dict):
            errors.append(f"{at} must be a mapping, got {res!r}")
            continue
        _check_keys(errors, at, res, RESOURCE_KEYS)
        name = res.get("name")
        problem = _resource_name_problem(name)
        if problem is None and not (name == "nvidia.com/gpu" or name.startswith("nvidia.com/mig-")):
            problem = "must be nvidia.com/gpu or nvidia.com/mig-<profile>"
        if problem:
            errors.append(f"{at}.name {problem}, got {name!r}")
        elif name in first:
            errors.append(f"{at}.name: {name!r} is already listed in sharing.{kind}.resources[{first[name]}] "
                          "(the plugin would replicate it twice, GFD would label only the first entry)")
        else:
            first[name] = i
            if kind == "mps" and name.startswith("nvidia.com/mig-"):
                errors.append(f"{at}.name: {name!r} is a MIG resource; MPS sharing is not supported for MIG "
                              "devices (and nvidia.com/mig-* resources exist only with migStrategy=mixed, "
                              "which MPS refuses)")
        replicas = res.get("replicas")
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2:
            errors.append(f"{at}.replicas must be an integer >= 2, got {replicas!r}")
        elif kind == "mps" and replicas > MPS_MAX_REPLICAS:
            errors.append(f"{at}.replicas: MPS allows at most {MPS_MAX_REPLICAS} clients per GPU "
                          f"({MPS_MAX_REPLICAS_BEFORE_CC75} before compute capability 7.5); the plugin's MPS "
                          f"control daemon refuses {replicas}")
        _validate_devices(at, kind, res.get("devices", "all"), errors, warnings)
        if "rename" in res:
            rename = res["rename"]
            problem = _resource_name_problem(rename, qualified=False)
            if problem:
                errors.append(f"{at}.rename {problem}, got {rename!r}")
            elif rename:
                warnings.append(f"{at}: device plugin v0.20 ignores per-resource rename; use renameByDefault")
    if kind == "mps" and mig_strategy == "mixed":
        errors.append(f"{where}: MPS sharing cannot be combined with migStrategy=mixed "
                      "(sharing.mps with flags.migStrategy mixed: the plugin refuses to start)")


def validate(name, config, default_mig_strategy="single"):
    """Validate one named device plugin config; returns (normalised config, warnings)."""
    errors, warnings = [], []
    where = f"device plugin config {name!r}"
    if not isinstance(config, dict):
        raise ConfigError([f"{where} must be a mapping"])
    _check_keys(errors, where, config, {"version", "flags", "sharing", "resources", "imex"})
    version = config.get("version", "v1")
    if version != "v1":
        errors.append(f"{where}: version must be v1, got {version!r}")
    shape = [f"{where}: {key} must be a mapping, got {config[key]!r}" for key in ("flags", "sharing")
             if config.get(key) is not None and not isinstance(config[key], dict)]
    plugin = (config.get("flags") or {}).get("plugin") if isinstance(config.get("flags"), dict) else None
    if plugin is not None and not isinstance(plugin, dict):
        shape.append(f"{where}: flags.plugin must be a mapping, got {plugin!r}")
    if shape:
        raise ConfigError(errors + shape)
    flags = dict(config.get("flags") or {})
    strategy = flags.get("migStrategy", default_mig_strategy)
    if not isinstance(strategy, str) or strategy not in MIG_STRATEGIES:
        errors.append(f"{where}: unknown MIG strategy {strategy!r} (expected none, single or mixed)")
    elif strategy != default_mig_strategy:
        # the pods' MIG_STRATEGY env (the cluster's strategy) is a set flag, and a set flag takes precedence over
        # the config file (api/config/v1/config.go: UpdateFromCLIFlags): the plugin and GFD run with the cluster's
        warnings.append(f"{where}: flags.migStrategy {strategy} is overridden by the pods' MIG_STRATEGY "
                        f"{default_mig_strategy} (gpuops_mig_strategy): the device plugin and GFD run with "
                        f"{default_mig_strategy}; set gpuops_mig_strategy instead, or drop the flag")
    flags["migStrategy"] = strategy
    plugin = flags.get("plugin") or {}
    dls = plugin.get("deviceListStrategy")
    if dls is not None:
        for s in dls if isinstance(dls, list) else [dls]:
            if s not in LIST_STRATEGIES:
                errors.append(f"{where}: unknown deviceListStrategy {s!r}")
    if plugin.get("deviceIDStrategy", "uuid") not in ("uuid", "index"):
        errors.append(f"{where}: deviceIDStrategy must be uuid or index")
    mps_root = flags.get("mpsRoot")
    if mps_root is not None and not (isinstance(mps_root, str) and mps_root.startswith("/")):
        errors.append(f"{where}: flags.mpsRoot must be an absolute path, got {mps_root!r}")
    sharing = config.get("sharing") or {}
    _check_keys(errors, "{}: sharing".format(where), sharing, SHARING_KEYS)
    if sharing.get("timeSlicing") is not None and sharing.get("mps") is not None:
        # Sharing.ReplicatedResources() (api/config/v1/sharing.go) returns the mps section whenever
        # it exists: the plugin would silently drop the time-slicing one
        errors.append(f"{where}: sharing.timeSlicing and sharing.mps are both set; the plugin uses only "
                      "sharing.mps and ignores sharing.timeSlicing without a word -- keep one of them")
    for kind in SHARING_KEYS:
        if sharing.get(kind) is not None:
            _validate_sharing(where, kind, sharing[kind], strategy, errors, warnings)
    if errors:
        raise ConfigError(errors)
    out = {"version": "v1", "flags": flags}
    if sharing:
        out["sharing"] = sharing
    for k in ("resources", "imex"):
        if k in config:
            out[k] = config[k]
    return out, warnings


def render(configs, default_name="default", mig_strategy="single"):
    """ConfigMap data for the plugin's config-manager: one key per named config.

    Always contains ``default_name`` (a plain config with the cluster MIG strategy) unless
    the user defined it. Returns (data, warnings); raises ConfigError listing every problem.
    """
    if not isinstance(mig_strategy, str) or mig_strategy not in MIG_STRATEGIES:
        raise ConfigError([f"unknown MIG strategy {mig_strategy!r} (expected none, single or mixed)"])
    if configs is not None and not isinstance(configs, dict):
        raise ConfigError([f"configs must map config names to device plugin configs, got {configs!r}"])
    if not isinstance(default_name, str) or not default_name:
        raise ConfigError([f"the default config name must be a non-empty string, got {default_name!r}"])
    configs = dict(configs or {})
    configs.setdefault(default_name, {"version": "v1"})
    data, warnings, errors = {}, [], []
    for name in sorted(configs):
        try:
            cfg, warn = validate(name, configs[name], mig_strategy)
        except ConfigError as e:
            errors.extend(e.errors)
            continue
        warnings.extend(warn)
        # JSON is valid YAML and renders deterministically (stable ConfigMap => no restarts)
        data[name] = json.dumps(cfg, sort_keys=True, indent=2) + "\n"
    if errors:
        raise ConfigError(errors)
    return data, warnings


def validate_vgpu_configs(doc, default_name="default"):
    """vgpu-device-manager config file (``version: v1``, ``vgpu-configs``); returns the names."""
    errors = []
    if not isinstance(default_name, str) or not default_name:
        raise ConfigError([f"vGPU config: the default config name must be a non-empty string, got {default_name!r}"])
    if not isinstance(doc, dict) or doc.get("version") != "v1":
        raise ConfigError(["vGPU config: version must be v1"])
    _check_keys(errors, "vGPU config", doc, {"version", "vgpu-configs"})
    configs = doc.get("vgpu-configs")
    if not isinstance(configs, dict) or not configs:
        raise ConfigError(errors + ["vGPU config: vgpu-configs must map config names to entry lists"])
    for name, specs in configs.items():
        if not isinstance(specs, list) or not specs:
            errors.append(f"vGPU config {name!r}: needs at least one entry")
            continue
        for i, spec in enumerate(specs):
            at = f"vGPU config {name!r}[{i}]"
            if not isinstance(spec, dict):
                errors.append(f"{at}: must be a mapping")
                continue
            _check_keys(errors, at, spec, {"devices", "vgpu-devices", "device-filter"})
            devices = spec.get("devices")
            if devices != "all" and not (isinstance(devices, list) and devices
                                         and all(isinstance(d, int) and d >= 0 for d in devices)):
                errors.append(f"{at}: devices must be 'all' or a list of GPU indexes")
            vgpus = spec.get("vgpu-devices")
            if not isinstance(vgpus, dict):
                errors.append(f"{at}: vgpu-devices must map vGPU types to counts")
                continue
            for vtype, count in vgpus.items():
                if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                    errors.append(f"{at}: vgpu-devices[{vtype!r}] must be an integer >= 1, got {count!r}")
    if default_name not in configs:
        errors.append(f"vGPU config: the default config {default_name!r} is not defined")
    if errors:
        raise ConfigError(errors)
    return sorted(configs)
