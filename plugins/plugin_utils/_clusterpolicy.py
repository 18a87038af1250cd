# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""GPU Operator ClusterPolicy (nvidia.com/v1), or its GPUCluster (nvidia.com/v1alpha1, the DRA stack) ->
gpuops.nvidia inventory variables.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

Controller-side only (the clusterpolicy_to_vars / clusterpolicy_group_vars filters). Pure functions,
no Ansible import. Every field of ``spec`` that is set (not empty) ends in exactly one of three places:

* ``vars``: the variable(s) of this collection with the same effect (``sources`` names the fields
  each variable comes from);
* ``unmapped``: ``{path, value, why}`` -- no equivalent here, and why;
* ``notes``: fields whose value needs nothing here (a component the operator does not deploy with
  these settings, e.g. everything under ``vgpuManager`` while ``sandboxWorkloads`` is off).

A field of the wrong shape (a mapping given as a string, a list of names given as one name, ...) is
refused with a ClusterPolicyError that names it, never dropped or converted.

What the ClusterPolicy's editors write is data: YAML text is parsed here within limits (``load_text``:
size, nesting, nodes, aliases) and objects are walked within the same nesting and node limits
(``plain``); values used as Kubernetes names must be names, host paths plain absolute paths;
``group_vars_text`` writes no variable name outside ``VARIABLES``, in a document tagged ``!unsafe``,
and escapes comment text.

Field names, defaults and enablement rules follow the operator's ``api/nvidia/v1/clusterpolicy_types.go``
(the ``IsEnabled`` defaults: driver, toolkit, devicePlugin, dcgmExporter, gfd, migManager and cdi are on
when unset; dcgm, nodeStatusExporter, sandboxWorkloads, vfioManager, vgpuManager, vgpuDeviceManager,
sandboxDevicePlugin and the rest are off when unset). A GPUCluster (``api/nvidia/v1alpha1/gpucluster_types.go``
of v26.7.0; the operator refuses it beside a ClusterPolicy) deploys the DRA driver, DCGM exporter and a DRA
validator on every GPU node and no device plugin: it maps to ``gpuops_gpu_allocation: dra``, the dra_driver role's
variables and the components it deploys; its compute-domain half (IMEX) has no equivalent here and is listed.
"""
from __future__ import annotations

import csv
import io
import re
import unicodedata

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, ScalarNode
from yaml.resolver import Resolver

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError
from ansible_collections.gpuops.nvidia.plugins.plugin_utils._components import IMAGES

try:  # libyaml's scanner and parser (events only: the composing is ours, below)
    from yaml._yaml import CParser as _EventSource
except ImportError:  # pragma: no cover - PyYAML without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _EventSource(Reader, Scanner, Parser):
        def __init__(self, stream):
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)

# Limits on what is read (a ClusterPolicy file, the objects k8s_info returns, the YAML text of a ConfigMap key),
# checked while it is parsed or walked, before the objects are built. Real inputs are far below them: a
# ClusterPolicy has a few hundred nodes, the largest ConfigMap it names (the MIG manager's config) a few
# thousand in a few tens of KiB; the API server keeps one object under 1.5 MiB (etcd's request limit) and a
# ConfigMap's data under 1 MiB, so a file with a ClusterPolicy and the five ConfigMaps it can name fits in 8 MiB.
MAX_TEXT = 8 * 1024 * 1024  # characters of YAML text
MAX_NODES = 250000  # scalars, mappings and lists (of the objects walked: each shared reference again)
MAX_ALIAS_NODES = 10000  # nodes YAML aliases (and merge keys) stand for, together: "billion laughs" is refused
MAX_DEPTH = 64  # nesting (a ClusterPolicy, its ConfigMaps' configs and a k8s_info result around them: under 12)

# Kubernetes object names (RFC 1123 subdomain, as ConfigMaps, Secrets, RuntimeClasses and PriorityClasses are
# named) and namespaces (RFC 1123 label)
K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
K8S_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# host paths the import passes on (runtime config files, sockets, kubelet's directory): absolute, plain characters
HOST_PATH = re.compile(r"(/[A-Za-z0-9._+@:-]+)+/?|/")

# Image components with a cluster role here: ClusterPolicy key -> (role prefix, default image of the
# role's defaults/main.yml), from the one data file (plugin_utils/_components.py).
IMAGE_COMPONENTS = {
    c["clusterpolicy"]: (role, {f: c[f] for f in ("repository", "image", "version")})
    for role, c in IMAGES.items() if c["clusterpolicy"]
}
# GPUCluster component -> (role, default image): what a GPUCluster deploys that has an image field
GPUCLUSTER_IMAGES = {
    "draDriver": ("dra_driver", {f: IMAGES["dra_driver"][f] for f in ("repository", "image", "version")}),
    "dcgmExporter": IMAGE_COMPONENTS["dcgmExporter"],
}
#: the feature gates of NVIDIA's DRA driver v0.5.0 (roles/dra_driver checks the same list)
DRA_FEATURE_GATES = frozenset([
    "TimeSlicingSettings", "MPSSupport", "IMEXDaemonsWithDNSNames", "PassthroughSupport", "DynamicMIG",
    "NVMLDeviceHealthCheck", "ComputeDomainCliques", "CrashOnNVLinkFabricErrors", "DeviceMetadata",
    "FabricManagerPartitioning", "HostManagedIMEXDaemon", "DRAListTypeAttributes", "ConsumableShares",
    "ContextualLogging", "LoggingAlphaOptions", "LoggingBetaOptions"])
WHY_COMPUTE_DOMAINS = ("gpuops.nvidia deploys the DRA driver's GPU half only: ComputeDomains (IMEX channels across "
                       "multi-node NVLink, its controller and compute-domain kubelet plugin) are not deployed")
# Every variable the import can write (group_vars_text refuses any other name: the file's keys are ours)
VARIABLES = frozenset([
    "gpuops_cluster_components", "gpuops_default_workload", "gpuops_device_plugin_configs", "gpuops_k8s_tolerations",
    "gpuops_k8s_namespace_psa",
    "gpuops_mig_configs", "gpuops_mig_strategy", "gpuops_registry", "gpuops_runtime_class", "gpuops_sandbox_mode",
    "gpuops_vgpu_default_config", "gpuops_vgpu_device_manager_config",
    "driver_branch", "driver_kernel_module_type", "driver_precompiled", "driver_state", "driver_version",
    "gpu_upgrade_drain_delete_emptydir_data", "gpu_upgrade_drain_force", "gpu_upgrade_drain_pod_selectors",
    "gpu_upgrade_drain_timeout", "gpu_upgrade_max_unavailable",
    "container_toolkit_cdi_enabled", "container_toolkit_configure_runtime", "container_toolkit_containerd_drop_in_path",
    "container_toolkit_runtime_cdi_enabled", "container_toolkit_install", "container_toolkit_runtime",
    "container_toolkit_runtime_config_path", "container_toolkit_runtime_extra_args", "container_toolkit_runtime_mode",
    "container_toolkit_runtime_name", "container_toolkit_set_as_default", "container_toolkit_version",
    "runtime_class_handlers",
    "device_plugin_default_config", "gfd_default_config", "gfd_fail_on_init_error", "gfd_sleep_interval",
    "gfd_use_node_feature_api", "device_plugin_mps_root", "validator_driver_install_dir", "validator_dev_char_symlinks",
    "dcgm_exporter_metrics", "dcgm_exporter_port", "dcgm_exporter_service_monitor",
    "dcgm_exporter_service_monitor_interval", "dcgm_exporter_service_monitor_labels", "dcgm_exporter_service_type",
    "mig_manager_cdi_enabled", "mig_manager_default_config", "mig_manager_gpu_clients", "mig_manager_with_reboot",
    "validator_node_kubelet_dir", "validator_with_workload",
    "gpuops_gpu_allocation", "dra_driver_feature_gates", "dra_driver_healthcheck_port", "dra_driver_kubelet_root",
] + [prefix + suffix for prefix, _default in list(IMAGE_COMPONENTS.values()) + list(GPUCLUSTER_IMAGES.values())
     for suffix in ("_image", "_registry", "_image_pull_policy", "_image_pull_secrets", "_resources", "_priority_class")])
# ClusterPolicy component -> the entry of gpuops_cluster_components it turns on or off
COMPONENT_ROLES = {
    "gfd": "gfd", "devicePlugin": "device_plugin", "dcgmExporter": "dcgm_exporter", "migManager": "mig_manager",
    "vgpuDeviceManager": "vgpu_device_manager", "sandboxDevicePlugin": "sandbox_device_plugin",
}
# playbooks/cluster.yml's default order
CLUSTER_COMPONENTS = ["runtime_class", "nfd", "gfd", "device_plugin", "dcgm_exporter", "mig_manager", "validator",
                      "vgpu_device_manager", "sandbox_device_plugin", "kubevirt_config", "policies"]
ENABLED_BY_DEFAULT = {"driver", "toolkit", "devicePlugin", "dcgmExporter", "gfd", "migManager", "dcgm", "cdi"}
SANDBOX_COMPONENTS = ("vfioManager", "vgpuManager", "vgpuDeviceManager", "sandboxDevicePlugin",
                      "kataManager", "kataSandboxDevicePlugin")
# components the operator can deploy that have no counterpart here: key -> why
NOT_PROVIDED = {
    "dcgm": "gpuops.nvidia runs dcgm-exporter with its embedded DCGM hostengine; there is no standalone "
            "DCGM hostengine DaemonSet",
    "nodeStatusExporter": "gpuops.nvidia has no node-status-exporter; the readiness report (playbooks/report.yml, "
                          "set_stats gpuops_report) gives each node's state",
    "gds": "GPUDirect Storage (nvidia-fs) is not installed by gpuops.nvidia",
    "gdrcopy": "GDRCopy is not installed by gpuops.nvidia",
    "kataManager": "Kata Containers runtime classes are not managed by gpuops.nvidia",
    "kataSandboxDevicePlugin": "the Kata sandbox device plugin is not deployed by gpuops.nvidia",
    "ccManager": "confidential-computing mode (CC manager) is not managed by gpuops.nvidia",
    "vgpuManager": "gpuops.nvidia has no vGPU manager (host driver) installer yet; install the vGPU manager "
                   "package on the vm-vgpu hosts by other means",
}
OPERATOR_DEFAULT_REGISTRY = "nvcr.io"
WORKLOADS = ("container", "vm-passthrough", "vm-vgpu")
RUNTIMES = ("containerd", "crio", "docker")
RUNTIME_MODES = ("auto", "legacy", "cdi", "csv", "jit-cdi")
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")

WHY_IMAGE_HOST = ("gpuops.nvidia installs {what} on the hosts from packages (roles/{role}), not from an "
                  "operator container image")
WHY_ARGS = "the component's container arguments are set by gpuops.nvidia's manifest template"
WHY_HOST_NETWORK = "gpuops.nvidia's component pods do not use the host network"
WHY_ENV = "no variable of gpuops.nvidia sets this environment variable of the component"


class ClusterPolicyError(InputError):
    """The input is not (exactly one) ClusterPolicy, or a field has the wrong shape."""


def _show(value, limit=80):
    """A value for a message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# -- reading: YAML text and objects, within the limits ------------------------------------------------------

class _LimitedComposer(Composer):
    """PyYAML's composer, counting while it composes: nesting depth, nodes, aliases to an enclosing node
    (a recursive structure), and -- once a document is composed, before anything is constructed from it --
    how many nodes its aliases stand for (aliases share nodes; whoever walks the objects later walks each
    alias again)."""

    def _limits(self, what):
        self.what = what
        self.depth = 0
        self.nodes = 0
        self.alias_nodes = 0
        self.open_anchors = set()

    def _where(self, mark):
        return " (line %d, column %d)" % (mark.line + 1, mark.column + 1) if mark is not None else ""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if self.check_event(AliasEvent):
            if event.anchor in self.open_anchors:
                raise ClusterPolicyError("%s: recursive YAML alias *%s%s"
                                         % (self.what, event.anchor, self._where(event.start_mark)))
            return super().compose_node(parent, index)
        self.depth += 1
        self.nodes += 1
        if self.depth > MAX_DEPTH:
            raise ClusterPolicyError("%s is nested deeper than %d levels%s"
                                     % (self.what, MAX_DEPTH, self._where(event.start_mark)))
        if self.nodes > MAX_NODES:
            raise ClusterPolicyError("%s has more than %d nodes%s" % (self.what, MAX_NODES, self._where(event.start_mark)))
        anchor = event.anchor
        if anchor is not None:
            self.open_anchors.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1
            self.open_anchors.discard(anchor)

    def compose_document(self):
        node = super().compose_document()
        sizes = {}  # id(node) -> (nodes it stands for, its height)

        def walk(n, level):
            if level > MAX_DEPTH:
                raise ClusterPolicyError("%s is nested deeper than %d levels (through YAML aliases)%s"
                                         % (self.what, MAX_DEPTH, self._where(n.start_mark)))
            known = sizes.get(id(n))
            if known is None:
                if isinstance(n, ScalarNode):
                    children = []
                elif isinstance(n, MappingNode):
                    children = [c for pair in n.value for c in pair]
                else:
                    children = n.value
                size, height = 1, 0
                for c in children:
                    size += walk(c, level + 1)
                    height = max(height, sizes[id(c)][1] + 1)
                known = sizes[id(n)] = (size, height)
            elif level + known[1] > MAX_DEPTH:
                raise ClusterPolicyError("%s is nested deeper than %d levels (through YAML aliases)%s"
                                         % (self.what, MAX_DEPTH, self._where(n.start_mark)))
            return known[0]

        if node is not None:
            self.alias_nodes += walk(node, 1) - len(sizes)
            if self.alias_nodes > MAX_ALIAS_NODES:
                raise ClusterPolicyError("%s: YAML aliases stand for more than %d nodes (an alias bomb?)"
                                         % (self.what, MAX_ALIAS_NODES))
        return node


class _LimitedLoader(_LimitedComposer, _EventSource, SafeConstructor, Resolver):
    """yaml.safe_load's reading (libyaml's parser when present, the safe constructor and resolver) with the
    composer above."""

    def __init__(self, stream, what):
        _EventSource.__init__(self, stream)
        _LimitedComposer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._limits(what)

    # the composing is _LimitedComposer's, not the C parser's own
    check_node = Composer.check_node
    get_node = Composer.get_node
    get_single_node = Composer.get_single_node

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep)
        except ClusterPolicyError:
            raise
        except (ValueError, OverflowError) as e:  # an integer of more digits than Python converts, a bad date
            raise ClusterPolicyError("%s: %s%s" % (self.what, e, self._where(node.start_mark))) from e


def _yaml_problem(e):
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        where = " (line %d, column %d)" % (mark.line + 1, mark.column + 1) if mark is not None else ""
        return "%s%s" % ((e.problem or e.context or "invalid").strip(), where)
    return " ".join(str(e).split())


def load_text(text, what="the ClusterPolicy input"):
    """Every YAML document of ``text``, read within the limits (size, nesting, nodes, aliases); anything
    else ends in a ClusterPolicyError that starts with ``what``."""
    if not isinstance(text, str):
        raise ClusterPolicyError("%s must be YAML text, got %s" % (what, type(text).__name__))
    if len(text) > MAX_TEXT:
        raise ClusterPolicyError("%s is larger than %d MiB (%d characters)" % (what, MAX_TEXT // 2 ** 20, len(text)))
    loader = _LimitedLoader(str(text), what)  # an exact str: libyaml's parser takes no subclass (Ansible's tagged str)
    try:
        docs = []
        while loader.check_node():
            docs.append(loader.construct_document(loader.get_node()))
        return docs
    except yaml.YAMLError as e:
        raise ClusterPolicyError("%s is not valid YAML: %s" % (what, _yaml_problem(e))) from e
    finally:
        loader.dispose()


def load_one(text, what):
    """The one YAML document of ``text`` (None when it is empty)."""
    docs = load_text(text, what)
    if len(docs) > 1:
        raise ClusterPolicyError("%s holds %d YAML documents, not one" % (what, len(docs)))
    return docs[0] if docs else None


def plain(obj, what="the ClusterPolicy input"):
    """Plain dict/list/str/int/float/bool/None copies of (Ansible's tagged or lazy) data, within the limits:
    nesting and nodes (a reference shared in several places counts in each, as a recursive structure does
    until the nesting limit)."""
    count = [0]

    def walk(o, depth):
        count[0] += 1
        if count[0] > MAX_NODES:
            raise ClusterPolicyError("%s has more than %d nodes" % (what, MAX_NODES))
        if depth > MAX_DEPTH:
            raise ClusterPolicyError("%s is nested deeper than %d levels" % (what, MAX_DEPTH))
        if isinstance(o, dict):
            return {str(k): walk(v, depth + 1) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [walk(v, depth + 1) for v in o]
        if isinstance(o, str):
            return str(o)
        if isinstance(o, bool) or o is None:
            return o
        if isinstance(o, int):  # tagged ints and floats of Ansible 2.19 are subclasses
            return int(o)
        if isinstance(o, float):
            return float(o)
        return o

    return walk(obj, 1)


def read_input(data, what="the ClusterPolicy input"):
    """The filter's input as plain data: YAML text (a file's content) is parsed here, objects are copied."""
    return plain(load_text(data, what) if isinstance(data, str) else data, what)


# -- checking fields ---------------------------------------------------------------------------------------

def _empty(value):
    return value is None or value == "" or value == {} or value == []


def _bool(value, path):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ClusterPolicyError("%s must be a boolean, got %s" % (path, _show(value)))


def _mapping(value, path):
    if not isinstance(value, dict):
        raise ClusterPolicyError("%s must be a mapping, got %s" % (path, _show(value)))
    return value


def _typed(value, path, kind, what):
    if value is not None and not isinstance(value, kind):
        raise ClusterPolicyError("%s must be %s, got %s" % (path, what, _show(value)))
    return value


def _host_path(value, path):
    """A path on the hosts: absolute, without '..' and of plain characters (no spaces, quotes or line breaks)."""
    if not isinstance(value, str) or len(value) > 4096 or not HOST_PATH.fullmatch(value) or ".." in value.split("/"):
        raise ClusterPolicyError("%s must be an absolute path of letters, digits and . _ + @ : - (no '..'), got %s"
                                 % (path, _show(value)))
    return value


def _k8s_name(value, path, what="a Kubernetes object name", pattern=K8S_NAME, limit=253):
    if not isinstance(value, str) or len(value) > limit or not pattern.fullmatch(value):
        chars = "'-' and '.'" if pattern is K8S_NAME else "'-'"
        raise ClusterPolicyError("%s must be %s (lowercase letters, digits, %s, at most %d characters), got %s"
                                 % (path, what, chars, limit, _show(value)))
    return value


def find_clusterpolicy(data):
    """One ClusterPolicy and the ConfigMaps beside it, from: the object, a k8s List, a k8s_info result,
    or a list of documents (a multi-document YAML file)."""
    docs = []

    def collect(obj):
        if isinstance(obj, list):
            for o in obj:
                collect(o)
        elif isinstance(obj, dict):
            if isinstance(obj.get("resources"), list) and "kind" not in obj:  # kubernetes.core.k8s_info result
                collect(obj["resources"])
            elif obj.get("kind") == "List" or (isinstance(obj.get("kind"), str) and obj["kind"].endswith("List")
                                               and isinstance(obj.get("items"), list)):
                collect(obj.get("items") or [])
            else:
                docs.append(obj)
        elif obj is not None:
            raise ClusterPolicyError("expected Kubernetes objects (mappings), got %s" % _show(obj))

    collect(data)

    def name_of(doc, kind):
        meta = doc.get("metadata")
        if meta is None:
            return ""
        name = _mapping(meta, kind + " metadata").get("name", "")
        if not isinstance(name, str):
            raise ClusterPolicyError("%s metadata.name must be a string, got %s" % (kind, _show(name)))
        return name

    # the operator runs one stack: a ClusterPolicy or a GPUCluster, never both
    policies = [d for d in docs if d.get("kind") in ("ClusterPolicy", "GPUCluster")]
    if len(policies) != 1:
        names = ["%s %s" % (p["kind"], name_of(p, p["kind"]) or "?") for p in policies]
        raise ClusterPolicyError("expected exactly one ClusterPolicy or GPUCluster (the operator refuses both), "
                                 "found %d%s" % (len(policies), (": " + ", ".join(_comment(n)[:80] for n in names))
                                                 if names else ""))
    policy = policies[0]
    kind = policy["kind"]
    name_of(policy, kind)
    api = policy.get("apiVersion")
    want = "nvidia.com/v1" if kind == "ClusterPolicy" else "nvidia.com/v1alpha1"
    if api != want:
        raise ClusterPolicyError("%s apiVersion must be %s, got %s" % (kind, want, _show(api)))
    if not isinstance(policy.get("spec"), dict):
        raise ClusterPolicyError("%s has no spec mapping" % kind)
    configmaps = {}
    for d in docs:
        if d.get("kind") == "ConfigMap":
            name = name_of(d, "ConfigMap")
            if name:
                configmaps[name] = _mapping(d.get("data") or {}, "ConfigMap %s data" % _show(name, 60))
    return policy, configmaps


def policy_namespace(policy):
    """The operator's namespace as the ClusterPolicy's status gives it ("" when it does not): the live import
    reads the ConfigMaps there."""
    status = policy.get("status")
    namespace = _mapping(status, "status").get("namespace") if status is not None else None
    if _empty(namespace):
        return ""
    return _k8s_name(namespace, "status.namespace", "a namespace name", K8S_NAMESPACE, 63)


def _split_repo(repo):
    parts = repo.split("/", 1)
    return parts[0], (parts[1] if len(parts) > 1 else "")


def toolkit_package_version(version):
    """Toolkit image tag (v1.17.8, v1.17.8-ubuntu20.04, v1.18.0-rc.1) -> package version (1.17.8-1,
    1.18.0~rc.1-1), as NVIDIA's libnvidia-container repository names them; None if it is no such tag."""
    m = re.fullmatch(r"v?([0-9]+\.[0-9]+\.[0-9]+)(?:-(rc\.[0-9]+))?(?:-[a-z][a-z0-9.]*)?", str(version))
    if not m:
        return None
    return m.group(1) + ("~" + m.group(2) if m.group(2) else "") + "-1"


class _Mapper:
    def __init__(self, spec, configmaps):
        self.spec = spec
        self.configmaps = dict(configmaps or {})
        self.vars = {}
        self.sources = {}
        self.unmapped = []
        self.notes = []
        self.consumed = set()
        self.configmaps_needed = []
        self.inert = set()  # components the operator would not deploy with this spec

    # -- access -----------------------------------------------------------------------------------
    def get(self, path, default=None):
        """The field at ``path`` (dotted), ``default`` when it or a mapping above it is not set; a field above
        it that is set but is no mapping is refused (it would hide everything under it)."""
        node = self.spec
        keys = path.split(".")
        for i, key in enumerate(keys):
            if node is None:
                return default
            _mapping(node, ".".join(keys[:i]))
            if key not in node:
                return default
            node = node[key]
        self.consumed.add(path)
        return node

    def text(self, path):
        """A string field (None when not set)."""
        value = self.get(path)
        return None if _empty(value) else _typed(value, path, str, "a string")

    def has(self, path):
        return not _empty(self.get(path))

    def set(self, var, value, *paths):
        if var not in VARIABLES:
            raise RuntimeError("bug: %s is not in VARIABLES, the importer's variables" % var)
        self.vars[var] = value
        src = self.sources.setdefault(var, [])
        for p in paths:
            if p not in src:
                src.append(p)

    def skip(self, path, value, why):
        self.unmapped.append({"path": path, "value": value, "why": why})

    def section(self, key):
        value = self.get(key)
        if value is None:
            return {}
        _mapping(value, key)
        self.consumed.discard(key)  # only its fields count as consumed
        return value

    def enabled(self, key):
        value = self.get(key + ".enabled")
        if value is None:
            return key in ENABLED_BY_DEFAULT
        return _bool(value, key + ".enabled")

    def configmap_name(self, path):
        """A field naming a ConfigMap (None when not set): a Kubernetes name, nothing else."""
        value = self.get(path)
        return None if _empty(value) else _k8s_name(value, path, "a ConfigMap name")

    def configmap(self, path, name):
        """The ConfigMap's data, or None (and the name recorded as needed)."""
        if name in self.configmaps:
            return self.configmaps[name]
        if name not in self.configmaps_needed:
            self.configmaps_needed.append(name)
        return None

    def configmap_yaml(self, name, data, key):
        """The YAML document under ``key`` of ConfigMap ``name``'s data, read within the input limits."""
        what = "ConfigMap %s key %s" % (name, _show(key, 60) if not isinstance(key, str) else _comment(key)[:60])
        return plain(load_one(_typed(data[key], what, str, "a string"), what), what)

    def env(self, path):
        """EnvVar list -> [(name, value, path)]: the literal value, or (valueFrom) the entry without its name.
        An entry that a later one of the same name overrides (as Kubernetes does) is listed as unmapped."""
        value = self.get(path, [])
        if _empty(value):
            return []
        _typed(value, path, list, "a list of {name, value}")
        out = {}
        for i, item in enumerate(value):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise ClusterPolicyError("%s[%d] must be {name, value}, got %s" % (path, i, _show(item)))
            where = "%s[%s]" % (path, item["name"])
            if set(item) <= {"name", "value"}:
                literal = _typed(item.get("value", ""), where + ".value", str, "a string")
            else:
                literal = {k: v for k, v in item.items() if k != "name"}
            if item["name"] in out:
                self.skip(where, out[item["name"]][0], "overridden by a later entry of the same name")
            out[item["name"]] = (literal, where)
        return [(name, literal, where) for name, (literal, where) in out.items()]

    def leftover(self):
        """Every set leaf of spec nobody consumed: unmapped, reason unknown."""
        def walk(node, path):
            if any(path == c or path.startswith(c + ".") for c in self.consumed):
                return
            if isinstance(node, dict) and node:
                for k, v in node.items():
                    walk(v, "%s.%s" % (path, k) if path else k)
            elif not _empty(node):
                self.skip(path, node, "no gpuops.nvidia equivalent (field not mapped by this importer)")
        walk(self.spec, "")

    def consume_tree(self, key):
        self.consumed.add(key)

    # -- shared per-component fields ----------------------------------------------------------------
    def common(self, key, prefix=None, env_handlers=None, what=None, keep=()):
        """repository/image/version/imagePullPolicy/imagePullSecrets/resources/args/env/hostNetwork
        (``keep``: fields the caller maps itself)."""
        if prefix is None:  # a host-side component: no image here
            for f in ("repository", "image", "version", "imagePullPolicy", "imagePullSecrets"):
                if f in keep:
                    continue
                if self.has("%s.%s" % (key, f)):
                    self.skip("%s.%s" % (key, f), self.get("%s.%s" % (key, f)), what)
        else:
            policy = self.text(key + ".imagePullPolicy")
            if policy is not None:
                self.set(prefix + "_image_pull_policy", policy, key + ".imagePullPolicy")
            if self.has(key + ".imagePullSecrets"):
                path = key + ".imagePullSecrets"
                secrets = _typed(self.get(path), path, list, "a list of Secret names")
                names = [_k8s_name(s.get("name") if isinstance(s, dict) else s, "%s[%d]" % (path, i), "a Secret name")
                         for i, s in enumerate(secrets)]
                self.set(prefix + "_image_pull_secrets", names, path)
            if self.has(key + ".resources"):
                path = key + ".resources"
                self.set(prefix + "_resources", _typed(self.get(path), path, dict, "a mapping"), path)
        if self.has(key + ".args"):
            self.skip(key + ".args", self.get(key + ".args"), WHY_ARGS)
        net = self.get(key + ".hostNetwork")
        if net is not None and _bool(net, key + ".hostNetwork"):
            self.skip(key + ".hostNetwork", net, WHY_HOST_NETWORK)
        for name, value, path in self.env(key + ".env"):
            handler = (env_handlers or {}).get(name)
            if handler is None or not isinstance(value, str):
                self.skip(path, value, WHY_ENV if handler is None else "valueFrom is not supported here")
            else:
                handler(value, path)


def _image_vars(m, images=None):
    """<role>_image / <role>_registry / gpuops_registry from the components' repository/image/version
    (``images``: spec key -> (role, default image); the ClusterPolicy's by default)."""
    hosts = {}
    components = {k: v for k, v in (images or IMAGE_COMPONENTS).items() if k not in m.inert}
    fields = {}
    for key in components:
        given = {}
        for f in ("repository", "image", "version"):
            path = "%s.%s" % (key, f)
            value = m.get(path)
            if _empty(value):
                continue
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise ClusterPolicyError("%s must be a string, got %s" % (path, _show(value)))
            given[f] = str(value)
        fields[key] = given
        if given.get("repository"):
            hosts[key] = _split_repo(given["repository"])[0]
    distinct = set(hosts.values())
    registry = None
    if len(distinct) == 1 and OPERATOR_DEFAULT_REGISTRY not in distinct:
        registry = distinct.pop()
        m.set("gpuops_registry", registry, *["%s.repository" % k for k in hosts])
    for key, (prefix, default) in components.items():
        given = fields[key]
        if not given:
            continue
        paths = ["%s.%s" % (key, f) for f in given]
        if key in hosts and hosts[key] != (registry or OPERATOR_DEFAULT_REGISTRY):
            m.set(prefix + "_registry", hosts[key], key + ".repository")
        image = dict(default)
        if "repository" in given:
            host, path = _split_repo(given["repository"])
            # the registry host is set by gpuops_registry/<role>_registry; keep the default host when only it differs
            image["repository"] = default["repository"] if path == _split_repo(default["repository"])[1] else given["repository"]
        image.update({f: given[f] for f in ("image", "version") if f in given})
        if image != default or "version" in given:
            m.set(prefix + "_image", image, *paths)


def _driver(m):
    if not m.enabled("driver"):
        m.skip("driver.enabled", False, "the operator does not manage the driver (it is pre-installed on the hosts); "
               "gpuops.nvidia's driver play (playbooks/driver.yml) installs one on the gpu_nodes hosts: run the plays "
               "without it (site.yml installs it) or keep such hosts out of gpu_nodes")
        for f in (m.section("driver") or {}):
            m.consume_tree("driver." + f)
        m.notes.append("driver.*: not used by the operator while driver.enabled is false")
        return
    if m.get("driver.enabled") is not None:
        m.set("driver_state", "present", "driver.enabled")
    version = m.get("driver.version")
    if not _empty(version):
        v = str(version)
        if re.fullmatch(r"[0-9]+", v):
            m.set("driver_branch", v, "driver.version")
        elif re.fullmatch(r"[0-9]+\.[0-9]+(\.[0-9]+)?", v):
            m.set("driver_branch", v.split(".", maxsplit=1)[0], "driver.version")
            m.set("driver_version", v, "driver.version")
        else:
            m.skip("driver.version", version, "not a driver version (branch such as 580 or version such as "
                                              "580.95.05): an image tag or digest has no package equivalent")
    kmt = m.get("driver.kernelModuleType")
    if not _empty(kmt):
        if kmt not in ("auto", "open", "proprietary"):
            raise ClusterPolicyError("driver.kernelModuleType must be auto, open or proprietary, got %s" % _show(kmt))
        m.set("driver_kernel_module_type", kmt, "driver.kernelModuleType")
    open_modules = m.get("driver.useOpenKernelModules")
    if open_modules is not None:
        if _bool(open_modules, "driver.useOpenKernelModules") and _empty(kmt):
            m.set("driver_kernel_module_type", "open", "driver.useOpenKernelModules")
        else:
            m.skip("driver.useOpenKernelModules", open_modules, "deprecated in the operator (a no-op); "
                   "driver.kernelModuleType decides")
    pre = m.get("driver.usePrecompiled")
    if pre is not None:
        m.set("driver_precompiled", "always" if _bool(pre, "driver.usePrecompiled") else "never", "driver.usePrecompiled")
    what = WHY_IMAGE_HOST.format(what="the driver", role="driver")
    m.common("driver", None, what=what, keep=("version",))
    rdma = m.get("driver.rdma.enabled")
    if rdma is not None and _bool(rdma, "driver.rdma.enabled"):
        m.skip("driver.rdma.enabled", True, "GPUDirect RDMA (nvidia-peermem) is not set up by gpuops.nvidia")
    if m.get("driver.rdma.useHostMofed") is not None and _bool(m.get("driver.rdma.useHostMofed"), "driver.rdma.useHostMofed"):
        m.skip("driver.rdma.useHostMofed", True, "GPUDirect RDMA (nvidia-peermem) is not set up by gpuops.nvidia")
    crd = m.get("driver.useNvidiaDriverCRD")
    if crd is not None and _bool(crd, "driver.useNvidiaDriverCRD"):
        m.skip("driver.useNvidiaDriverCRD", True, "NVIDIADriver custom resources: give each node pool's driver "
               "(driver_branch, driver_version, driver_kernel_module_type) as group_vars of its inventory group")
    repo_cm = m.get("driver.repoConfig.configMapName")
    if not _empty(repo_cm):
        m.skip("driver.repoConfig.configMapName", repo_cm, "package repository files for the driver container; "
               "for a mirror set driver_repo_url (and driver_repo_key_url) or driver_manage_repository: false")
    for path, why in (
            ("driver.certConfig.name", "custom CA certificates for the driver container; hosts use their own trust store"),
            ("driver.licensingConfig.secretName", "vGPU guest licensing is not configured by gpuops.nvidia"),
            ("driver.licensingConfig.configMapName", "vGPU guest licensing is not configured by gpuops.nvidia"),
            ("driver.virtualTopology.config", "the vGPU topology daemon is not configured by gpuops.nvidia"),
            ("driver.kernelModuleConfig.name", "kernel module parameters for the driver container; on the hosts put "
                                               "them in /etc/modprobe.d (not managed by the driver role)"),
            ("driver.secretEnv", "environment of the driver container"),
            ("driver.manager", "k8s-driver-manager (the operator's driver container helper): gpuops.nvidia drains "
                               "and reloads through its own plays"),
            ("driver.startupProbe", "probes of the driver container; gpuops.nvidia verifies the driver with "
                                    "nvidia-smi after installing it (roles/driver verify)"),
            ("driver.livenessProbe", "probes of the driver container; no driver container here"),
            ("driver.readinessProbe", "probes of the driver container; no driver container here"),
            ("driver.resources", "resources of the driver container; no driver container here")):
        value = m.get(path)
        if not _empty(value):
            m.skip(path, value, why)
        m.consume_tree(path)
    nls = m.get("driver.licensingConfig.nlsEnabled")
    if nls is not None:
        _bool(nls, "driver.licensingConfig.nlsEnabled")
        if m.has("driver.licensingConfig.secretName") or m.has("driver.licensingConfig.configMapName"):
            m.skip("driver.licensingConfig.nlsEnabled", nls, "vGPU guest licensing is not configured by gpuops.nvidia")
        else:
            m.notes.append("driver.licensingConfig.nlsEnabled: no licensing Secret or ConfigMap is named, so there is "
                           "nothing to license")


def _upgrade(m):
    """driver.upgradePolicy and daemonsets.rollingUpdate -> gpu_upgrade_max_unavailable."""
    pol = "driver.upgradePolicy"
    candidates = []  # (value, path), most specific first
    mu = m.get(pol + ".maxUnavailable")
    if not _empty(mu):
        candidates.append((mu, pol + ".maxUnavailable"))
    mp = m.get(pol + ".maxParallelUpgrades")
    if mp is not None:
        if isinstance(mp, bool) or not isinstance(mp, int) or mp < 0:
            raise ClusterPolicyError("%s.maxParallelUpgrades must be an integer >= 0, got %s" % (pol, _show(mp)))
        if mp > 0:
            candidates.append((mp, pol + ".maxParallelUpgrades"))
    ds = m.get("daemonsets.rollingUpdate.maxUnavailable")
    if not _empty(ds):
        candidates.append((ds, "daemonsets.rollingUpdate.maxUnavailable"))

    def norm(v, path):
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        s = str(v).strip()
        if re.fullmatch(r"[0-9]+", s):
            return int(s)
        if re.fullmatch(r"[0-9]+%", s):
            return s
        raise ClusterPolicyError("%s must be a count or a percentage, got %s" % (path, _show(v)))

    values = [(norm(v, p), p) for v, p in candidates]
    driver_values = [vp for vp in values if vp[1].startswith(pol)]
    chosen = None
    if driver_values:
        # the operator applies both limits (min(maxParallelUpgrades, maxUnavailable of the nodes)); one value
        # is kept: the smallest count, else the percentage
        counts = [vp for vp in driver_values if isinstance(vp[0], int)]
        chosen = min(counts, key=lambda vp: vp[0]) if counts else driver_values[0]
    elif values:
        chosen = values[0]
    if chosen:
        m.set("gpu_upgrade_max_unavailable", chosen[0], chosen[1])
    for v, p in values:
        if chosen and p == chosen[1]:
            continue
        if p.startswith("daemonsets."):
            m.skip(p, v, "rolling updates of the operand DaemonSets: gpuops.nvidia's component DaemonSets roll with "
                         "maxUnavailable 1; the driver's batch size comes from %s" % chosen[1])
        else:
            m.skip(p, v, "gpuops.nvidia's rolling driver upgrade (playbooks/driver_upgrade.yml) has one batch size, "
                         "gpu_upgrade_max_unavailable, taken from %s (the operator applies both limits at once; set "
                         "this one instead if it is the stricter on your fleet)" % chosen[1])
    if mp == 0:
        m.skip(pol + ".maxParallelUpgrades", 0, "0 (no limit) has no equivalent: the rolling upgrade always works in "
                                                "batches of gpu_upgrade_max_unavailable")
    auto = m.get(pol + ".autoUpgrade")
    if auto is not None:
        m.skip(pol + ".autoUpgrade", auto, "upgrades are not automatic here: a changed driver_version is rolled out "
                                           "by running playbooks/driver_upgrade.yml")
    # playbooks/driver_upgrade.yml always drains (eviction API). With drain.enable the operator drains with
    # drain.*; without it, it deletes the GPU pods with podDeletion.* (gpuPodDeletion in the helm values):
    # the settings of whichever the operator uses become the drain's.
    drain_on = m.get(pol + ".drain.enable")
    drain_on = drain_on is not None and _bool(drain_on, pol + ".drain.enable")
    if drain_on:
        used = "drain"
    else:
        used = next((s for s in ("podDeletion", "gpuPodDeletion") if isinstance(m.get("%s.%s" % (pol, s)), dict)), None)
        if isinstance(m.get(pol + ".drain"), dict) and m.get(pol + ".drain.enable") is not None:
            m.skip(pol + ".drain.enable", False, "playbooks/driver_upgrade.yml always drains the node (eviction API); "
                   "the settings of the operator's GPU pod deletion (podDeletion) are used for the drain")
    targets = {"timeoutSeconds": "gpu_upgrade_drain_timeout", "force": "gpu_upgrade_drain_force",
               "deleteEmptyDir": "gpu_upgrade_drain_delete_emptydir_data", "podSelector": "gpu_upgrade_drain_pod_selectors"}
    for sub in ("drain", "podDeletion", "gpuPodDeletion", "waitForCompletion"):
        node = m.get("%s.%s" % (pol, sub))
        if node is not None:
            for k, v in _mapping(node, "%s.%s" % (pol, sub)).items():
                path = "%s.%s.%s" % (pol, sub, k)
                if k == "enable" and sub == "drain":
                    continue
                if sub == used and k in targets:
                    if k == "timeoutSeconds":
                        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                            raise ClusterPolicyError("%s must be an integer >= 0, got %s" % (path, _show(v)))
                        m.set(targets[k], v, path)
                    elif k == "podSelector":
                        if not _empty(v):
                            m.set(targets[k], [_typed(v, path, str, "a label selector (a string)")], path)
                    else:
                        m.set(targets[k], _bool(v, path), path)
                elif sub == "waitForCompletion":
                    if not _empty(v) and v != 0:
                        m.skip(path, v, "playbooks/driver_upgrade.yml does not wait for jobs to complete before it "
                                        "drains; the drain's eviction waits for PodDisruptionBudgets")
                elif sub == used:
                    if not _empty(v):
                        m.skip(path, v, "no setting of playbooks/driver_upgrade.yml's drain corresponds")
                elif not _empty(v):
                    m.skip(path, v, "the operator does not use these %s settings (%s); the drain takes its "
                                    "settings from %s" % (sub, "drain.enable is false" if sub == "drain"
                                                          else "drain.enable is true", used))
        m.consume_tree("%s.%s" % (pol, sub))


def _toolkit(m):
    if not m.enabled("toolkit"):
        m.set("container_toolkit_install", False, "toolkit.enabled")
        m.set("container_toolkit_configure_runtime", False, "toolkit.enabled")
        for f in m.section("toolkit"):
            m.consume_tree("toolkit." + f)
        m.notes.append("toolkit.*: not used by the operator while toolkit.enabled is false")
        return
    if m.get("toolkit.enabled") is not None:
        m.set("container_toolkit_install", True, "toolkit.enabled")
    version = m.get("toolkit.version")
    if not _empty(version):
        pkg = toolkit_package_version(version)
        if pkg:
            m.set("container_toolkit_version", pkg, "toolkit.version")
        else:
            m.skip("toolkit.version", version, "an image tag or digest with no toolkit package version")
    m.consume_tree("toolkit.version")
    inst = m.get("toolkit.installDir")
    if not _empty(inst):
        m.skip("toolkit.installDir", inst, "the toolkit is installed from packages into /usr/bin (or, with "
               "container_toolkit_install_method: archive, linked into container_toolkit_archive_prefix/bin), "
               "not into an operator install directory")
    runtime = [None]

    def set_runtime(value, path):
        if value not in RUNTIMES:
            m.skip(path, value, "not a runtime gpuops.nvidia configures (containerd, crio, docker)")
            return
        runtime[0] = value
        m.set("container_toolkit_runtime", value, path)

    configs = {}

    def config_for(rt):
        def handler(value, path):
            configs[rt] = (_host_path(value, path), path)
        return handler

    extra = {}

    def socket_for(rt):
        def handler(value, path):
            extra.setdefault("socket", []).append((rt, _host_path(value, path), path))
        return handler

    def set_default(value, path):
        m.set("container_toolkit_set_as_default", _bool(value, path), path)

    def set_class(value, path):
        m.set("container_toolkit_runtime_name", _k8s_name(value, path, "a runtime handler name", K8S_NAMESPACE, 63), path)

    def set_mode(value, path):
        if value not in RUNTIME_MODES:
            m.skip(path, value, "not a runtime mode nvidia-container-runtime knows (%s)" % ", ".join(RUNTIME_MODES))
        else:
            m.set("container_toolkit_runtime_mode", value, path)

    def set_dropin(value, path):
        configs["drop-in"] = (_host_path(value, path), path)

    def crio_mode(value, path):
        if value != "config":
            m.skip(path, value, "gpuops.nvidia always registers the runtime in CRI-O's config (no OCI hook mode)")

    handlers = {
        "RUNTIME": set_runtime, "CONTAINERD_CONFIG": config_for("containerd"), "DOCKER_CONFIG": config_for("docker"),
        "CRIO_CONFIG": config_for("crio"), "RUNTIME_CONFIG": config_for(None),
        "CONTAINERD_SOCKET": socket_for("containerd"), "DOCKER_SOCKET": socket_for("docker"),
        "RUNTIME_SOCKET": socket_for(None), "CONTAINERD_SET_AS_DEFAULT": set_default,
        "NVIDIA_RUNTIME_SET_AS_DEFAULT": set_default, "CONTAINERD_RUNTIME_CLASS": set_class,
        "NVIDIA_CONTAINER_RUNTIME_MODE": set_mode, "RUNTIME_DROP_IN_CONFIG_HOST_PATH": set_dropin,
        "CRIO_CONFIG_MODE": crio_mode,
    }
    default_rt = m.get("operator.defaultRuntime")
    if not _empty(default_rt):
        set_runtime(default_rt, "operator.defaultRuntime")
    m.common("toolkit", None, env_handlers=handlers, keep=("version",),
             what=WHY_IMAGE_HOST.format(what="the NVIDIA container toolkit", role="container_toolkit"))
    rt = runtime[0]
    for key, (value, path) in configs.items():
        if key == "drop-in":
            if rt in (None, "containerd"):
                m.set("container_toolkit_containerd_drop_in_path", value, path)
            else:
                m.skip(path, value, "drop-in files are used for containerd only here")
        elif key is None or key == rt or (rt is None and len([k for k in configs if k != "drop-in"]) == 1):
            m.set("container_toolkit_runtime_config_path", value, path)
        else:
            m.skip(path, value, "configures %s, but the runtime here is %s" % (key, rt))
    for rt_key, value, path in extra.get("socket", []):
        if rt_key in (None, rt) or rt is None:
            args = dict(m.vars.get("container_toolkit_runtime_extra_args", {}))
            args["socket"] = value
            m.set("container_toolkit_runtime_extra_args", args, path)
        else:
            m.skip(path, value, "configures %s, but the runtime here is %s" % (rt_key, rt))


def _cdi(m):
    enabled = m.get("cdi.enabled")
    if enabled is not None:
        on = _bool(enabled, "cdi.enabled")
        for var in ("container_toolkit_cdi_enabled", "container_toolkit_runtime_cdi_enabled", "mig_manager_cdi_enabled"):
            m.set(var, on, "cdi.enabled")
        if "container_toolkit_runtime_mode" not in m.vars:
            m.set("container_toolkit_runtime_mode", "cdi" if on else "legacy", "cdi.enabled")
    default = m.get("cdi.default")
    if default is not None:
        m.skip("cdi.default", default, "deprecated and ignored by the operator; cdi.enabled decides (mapped to "
                                       "container_toolkit_runtime_mode)")
    nri = m.get("cdi.nriPluginEnabled")
    if nri is not None and _bool(nri, "cdi.nriPluginEnabled"):
        m.skip("cdi.nriPluginEnabled", nri, "no NRI plugin is run by gpuops.nvidia")


def _device_plugin(m, disabled):
    key = "devicePlugin"
    if not m.enabled(key):
        disabled["device_plugin"] = key + ".enabled"
    name = m.configmap_name(key + ".config.name")
    default = m.text(key + ".config.default")
    configs = None
    if not _empty(name):
        data = m.configmap(key + ".config.name", name)
        if data is None:
            m.skip(key + ".config.name", name, "the named configs are the data of ConfigMap %s: import from the live "
                   "cluster, or add the ConfigMap as another document of the ClusterPolicy file" % name)
        else:
            configs = {k: m.configmap_yaml(name, data, k) for k in data}
    for f in ("create", "data"):  # helm-only keys some ClusterPolicies carry
        if m.has("%s.config.%s" % (key, f)):
            m.skip("%s.config.%s" % (key, f), m.get("%s.config.%s" % (key, f)), "helm chart value, not a ClusterPolicy field")
    if not _empty(default):
        m.set("device_plugin_default_config", default, key + ".config.default")
        m.set("gfd_default_config", default, key + ".config.default")
    flags = {}

    def flag(*where, conv=None):
        def handler(value, path):
            flags[where] = (conv(value, path) if conv else value, path)
        return handler

    def list_strategy(value, path):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        return parts if len(parts) > 1 else (parts[0] if parts else value)

    def mig_env(value, path):
        strategy = m.get("mig.strategy")
        if _empty(strategy):
            m.set("gpuops_mig_strategy", value, path)
        elif value != strategy:
            m.skip(path, value, "mig.strategy (%s) decides the MIG strategy" % strategy)

    handlers = {
        "DEVICE_LIST_STRATEGY": flag("plugin", "deviceListStrategy", conv=list_strategy),
        "DEVICE_ID_STRATEGY": flag("plugin", "deviceIDStrategy"),
        "PASS_DEVICE_SPECS": flag("plugin", "passDeviceSpecs", conv=_bool),
        "FAIL_ON_INIT_ERROR": flag("failOnInitError", conv=_bool),
        "MIG_STRATEGY": mig_env,
    }
    m.common(key, "device_plugin", env_handlers=handlers)
    if m.has(key + ".mps.root") and not _empty(m.get(key + ".mps.root")):
        root = _host_path(m.get(key + ".mps.root"), key + ".mps.root").rstrip("/")
        if not root:
            raise ClusterPolicyError("%s.mps.root must be a directory below /, got '/'" % key)
        m.set("device_plugin_mps_root", root, key + ".mps.root")
    if flags:
        if configs is None and not _empty(name):
            for value, path in flags.values():
                m.skip(path, value, "belongs in the flags of every config of ConfigMap %s, which was not given" % name)
        else:
            configs = configs if configs is not None else {(default or "default"): {"version": "v1"}}
            for cfg in configs.values():
                if not isinstance(cfg, dict):
                    continue
                for where, (value, _path) in flags.items():
                    node = cfg.setdefault("flags", {})
                    for k in where[:-1]:
                        node = node.setdefault(k, {})
                    node[where[-1]] = value
    if configs is not None:
        paths = ([key + ".config.name"] if not _empty(name) else []) + [p for _v, p in flags.values()]
        m.set("gpuops_device_plugin_configs", configs, *paths)


def _gfd(m, disabled):
    if not m.enabled("gfd"):
        disabled["gfd"] = "gfd.enabled"

    def sleep(value, path):
        m.set("gfd_sleep_interval", value, path)

    def fail_on_init_error(value, path):
        m.set("gfd_fail_on_init_error", _bool(value, path), path)

    def node_feature_api(value, path):
        m.set("gfd_use_node_feature_api", _bool(value, path), path)
    m.common("gfd", "gfd", env_handlers={"GFD_SLEEP_INTERVAL": sleep, "GFD_FAIL_ON_INIT_ERROR": fail_on_init_error,
                                         "USE_NODE_FEATURE_API": node_feature_api,
                                         "GFD_USE_NODE_FEATURE_API": node_feature_api})


def _mig(m, disabled):
    strategy = m.get("mig.strategy")
    if not _empty(strategy):
        if strategy not in ("none", "single", "mixed"):
            raise ClusterPolicyError("mig.strategy must be none, single or mixed, got %s" % _show(strategy))
        m.set("gpuops_mig_strategy", strategy, "mig.strategy")
    key = "migManager"
    if not m.enabled(key):
        disabled["mig_manager"] = key + ".enabled"

    def with_reboot(value, path):
        m.set("mig_manager_with_reboot", _bool(value, path), path)
    m.common(key, "mig_manager", env_handlers={"WITH_REBOOT": with_reboot})
    for sub, var, cm_key in (("config", "gpuops_mig_configs", "config.yaml"),
                             ("gpuClientsConfig", "mig_manager_gpu_clients", "clients.yaml")):
        name = m.configmap_name("%s.%s.name" % (key, sub))
        if _empty(name):
            continue
        data = m.configmap("%s.%s.name" % (key, sub), name)
        if data is None:
            m.skip("%s.%s.name" % (key, sub), name, "the %s is the %s key of ConfigMap %s: import from the live cluster, "
                   "or add the ConfigMap as another document of the ClusterPolicy file" % (var, cm_key, name))
        elif cm_key not in data:
            m.skip("%s.%s.name" % (key, sub), name, "ConfigMap %s has no %s key" % (name, cm_key))
        else:
            m.set(var, m.configmap_yaml(name, data, cm_key), "%s.%s.name" % (key, sub))
    default = m.text(key + ".config.default")
    if not _empty(default):
        m.set("mig_manager_default_config", default, key + ".config.default")
    for f in ("create", "data"):
        if m.has("%s.config.%s" % (key, f)):
            m.skip("%s.config.%s" % (key, f), m.get("%s.config.%s" % (key, f)), "helm chart value, not a ClusterPolicy field")


def _dcgm(m, disabled):
    key = "dcgmExporter"
    if not m.enabled(key):
        disabled["dcgm_exporter"] = key + ".enabled"

    def listen(value, path):
        mm = re.fullmatch(r"[^:]*:([0-9]+)", value)
        if mm:
            m.set("dcgm_exporter_port", int(mm.group(1)), path)
        else:
            m.skip(path, value, "not a :PORT listen address")
    m.common(key, "dcgm_exporter", env_handlers={"DCGM_EXPORTER_LISTEN": listen})
    sm = key + ".serviceMonitor"
    if m.get(sm + ".enabled") is not None:
        m.set("dcgm_exporter_service_monitor", "true" if _bool(m.get(sm + ".enabled"), sm + ".enabled") else "false",
              sm + ".enabled")
    interval = m.text(sm + ".interval")
    if interval is not None:
        m.set("dcgm_exporter_service_monitor_interval", interval, sm + ".interval")
    if m.has(sm + ".additionalLabels"):
        labels = _typed(m.get(sm + ".additionalLabels"), sm + ".additionalLabels", dict, "a mapping")
        m.set("dcgm_exporter_service_monitor_labels", labels, sm + ".additionalLabels")
    for f, why in (("honorLabels", "the ServiceMonitor's honorLabels is not configurable here"),
                   ("scrapeTimeout", "the ServiceMonitor's scrapeTimeout is not configurable here (Prometheus' default applies)"),
                   ("relabelings", "the ServiceMonitor's relabelings are not configurable here")):
        value = m.get("%s.%s" % (sm, f))
        if not _empty(value) and value is not False:
            m.skip("%s.%s" % (sm, f), value, why)
    name = m.configmap_name(key + ".config.name")
    if not _empty(name):
        data = m.configmap(key + ".config.name", name)
        if data is None:
            m.skip(key + ".config.name", name, "the metrics are the dcgm-metrics.csv key of ConfigMap %s: import from "
                   "the live cluster, or add the ConfigMap as another document of the ClusterPolicy file" % name)
        elif "dcgm-metrics.csv" not in data:
            m.skip(key + ".config.name", name, "ConfigMap %s has no dcgm-metrics.csv key" % name)
        else:
            what = "ConfigMap %s key dcgm-metrics.csv" % name
            text = _typed(data["dcgm-metrics.csv"], what, str, "a string")
            if len(text) > MAX_TEXT:
                raise ClusterPolicyError("%s is larger than %d MiB" % (what, MAX_TEXT // 2 ** 20))
            m.set("dcgm_exporter_metrics", parse_metrics_csv(text, what), key + ".config.name")
    for f in ("create", "data"):
        if m.has("%s.config.%s" % (key, f)):
            m.skip("%s.config.%s" % (key, f), m.get("%s.config.%s" % (key, f)), "helm chart value, not a ClusterPolicy field")
    service_type = m.text(key + ".service.type")
    if service_type is not None:
        m.set("dcgm_exporter_service_type", service_type, key + ".service.type")
    itp = m.get(key + ".service.internalTrafficPolicy")
    if not _empty(itp) and itp != "Cluster":
        m.skip(key + ".service.internalTrafficPolicy", itp, "the Service's internalTrafficPolicy is not configurable here")
    for f in ("hostPID", "enablePodLabels", "enablePodUID"):
        value = m.get("%s.%s" % (key, f))
        if value is not None and _bool(value, "%s.%s" % (key, f)):
            m.skip("%s.%s" % (key, f), value, "not configurable in gpuops.nvidia's dcgm-exporter manifests")
    hpc = m.get(key + ".hpcJobMapping.enabled")
    if hpc is not None and _bool(hpc, key + ".hpcJobMapping.enabled"):
        m.skip(key + ".hpcJobMapping", m.get(key + ".hpcJobMapping"), "HPC job mapping is not configurable here")
        m.consume_tree(key + ".hpcJobMapping")
    elif set(m.get(key + ".hpcJobMapping") or {}) - {"enabled"}:
        m.notes.append("%s.hpcJobMapping.*: not used by the operator while hpcJobMapping.enabled is false" % key)
        m.consume_tree(key + ".hpcJobMapping")
    if m.has(key + ".podLabelAllowlistRegex"):
        m.skip(key + ".podLabelAllowlistRegex", m.get(key + ".podLabelAllowlistRegex"), "pod labels are not exported here")
    if m.has(key + ".annotations"):
        m.skip(key + ".annotations", m.get(key + ".annotations"), "pod annotations are not configurable here")


def parse_metrics_csv(text, what="dcgm-metrics.csv"):
    """dcgm-exporter's counters CSV -> [[field, type, help], ...] (comments and blank lines dropped)."""
    rows = []
    try:
        for row in csv.reader(io.StringIO(text), skipinitialspace=True):
            if not row or not row[0].strip() or row[0].lstrip().startswith("#"):
                continue
            if len(row) < 2:
                raise ClusterPolicyError("%s: row %s needs at least a field and a type" % (what, _show(row)))
            rows.append([row[0].strip(), row[1].strip(), ",".join(row[2:]).strip()])
    except csv.Error as e:
        raise ClusterPolicyError("%s is not valid CSV: %s" % (what, e)) from e
    return rows


def _sandbox(m, disabled):
    enabled = m.get("sandboxWorkloads.enabled")
    on = enabled is not None and _bool(enabled, "sandboxWorkloads.enabled")
    workload = m.get("sandboxWorkloads.defaultWorkload")
    if not _empty(workload) and workload not in WORKLOADS:
        raise ClusterPolicyError("sandboxWorkloads.defaultWorkload must be one of %s, got %s" % (", ".join(WORKLOADS), _show(workload)))
    if on:
        if not _empty(workload):
            m.set("gpuops_default_workload", workload, "sandboxWorkloads.defaultWorkload")
        mode = m.get("sandboxWorkloads.mode")
        if not _empty(mode):
            if mode not in ("kubevirt", "kata"):
                raise ClusterPolicyError("sandboxWorkloads.mode must be kubevirt or kata, got %s" % _show(mode))
            m.set("gpuops_sandbox_mode", mode, "sandboxWorkloads.mode")
    else:
        if enabled is not None or not _empty(workload):
            # every GPU node runs containers while sandbox workloads are off
            m.set("gpuops_default_workload", "container", "sandboxWorkloads.enabled")
        if not _empty(workload) and workload != "container":
            m.notes.append("sandboxWorkloads.defaultWorkload=%s: ignored by the operator while sandboxWorkloads.enabled "
                           "is false" % workload)
        if m.has("sandboxWorkloads.mode"):
            m.notes.append("sandboxWorkloads.mode: ignored by the operator while sandboxWorkloads.enabled is false")
        for key in SANDBOX_COMPONENTS:
            if m.spec.get(key) is not None and _mapping(m.spec[key], key):
                m.notes.append("%s.*: not deployed by the operator while sandboxWorkloads.enabled is false" % key)
            m.consume_tree(key)
            m.inert.add(key)
        disabled.update({"vgpu_device_manager": "sandboxWorkloads.enabled", "sandbox_device_plugin": "sandboxWorkloads.enabled",
                         "kubevirt_config": "sandboxWorkloads.enabled"})
        return
    # vfio-manager: the host-side vfio role (playbooks/vfio.yml on the vm_passthrough group) does its work
    if not m.enabled("vfioManager"):
        m.skip("vfioManager.enabled", False, "gpuops.nvidia binds the GPUs of the hosts in the vm_passthrough group "
               "to vfio-pci (playbooks/vfio.yml): keep hosts out of that group, or leave vfio.yml out, to do without")
        m.consume_tree("vfioManager")
    else:
        m.common("vfioManager", None, what="the vfio role binds the GPUs to vfio-pci on the hosts itself "
                 "(playbooks/vfio.yml), with no operator container image")
        if m.has("vfioManager.driverManager"):
            m.skip("vfioManager.driverManager", m.get("vfioManager.driverManager"),
                   "k8s-driver-manager of the vfio-manager: the vfio role unbinds the host driver itself")
        m.consume_tree("vfioManager.driverManager")
        m.consume_tree("vfioManager.enabled")
    if not m.enabled("vgpuDeviceManager"):
        disabled["vgpu_device_manager"] = "vgpuDeviceManager.enabled"
    m.common("vgpuDeviceManager", "vgpu_device_manager")
    name = m.configmap_name("vgpuDeviceManager.config.name")
    if not _empty(name):
        data = m.configmap("vgpuDeviceManager.config.name", name)
        if data is None:
            m.skip("vgpuDeviceManager.config.name", name, "the vGPU configs are the config.yaml key of ConfigMap %s: "
                   "import from the live cluster, or add the ConfigMap as another document of the ClusterPolicy file" % name)
        elif "config.yaml" not in data:
            m.skip("vgpuDeviceManager.config.name", name, "ConfigMap %s has no config.yaml key" % name)
        else:
            m.set("gpuops_vgpu_device_manager_config", m.configmap_yaml(name, data, "config.yaml"),
                  "vgpuDeviceManager.config.name")
    default = m.text("vgpuDeviceManager.config.default")
    if not _empty(default):
        m.set("gpuops_vgpu_default_config", default, "vgpuDeviceManager.config.default")
    if not m.enabled("sandboxDevicePlugin"):
        disabled["sandbox_device_plugin"] = "sandboxDevicePlugin.enabled"
    m.common("sandboxDevicePlugin", "sandbox_device_plugin")


def _validator(m):
    def with_workload(value, path):
        m.set("validator_with_workload", _bool(value, path), path)
    m.common("validator", "validator")
    for sub in ("plugin", "cuda", "driver", "toolkit", "vfioPCI", "vgpuManager", "vgpuDevices"):
        for name, value, path in m.env("validator.%s.env" % sub):
            if name == "WITH_WORKLOAD" and sub in ("plugin", "cuda") and isinstance(value, str):
                with_workload(value, path)
            elif name == "DISABLE_DEV_CHAR_SYMLINK_CREATION" and sub == "driver" and isinstance(value, str):
                m.set("validator_dev_char_symlinks", not _bool(value, path), path)
            else:
                m.skip(path, value, WHY_ENV)


def _daemonsets(m, images=None):
    tol = m.get("daemonsets.tolerations")
    if tol is not None:
        m.set("gpuops_k8s_tolerations", _typed(tol, "daemonsets.tolerations", list, "a list"), "daemonsets.tolerations")
    pc = m.get("daemonsets.priorityClassName")
    if not _empty(pc):
        _k8s_name(pc, "daemonsets.priorityClassName", "a PriorityClass name")
        sandbox_on = _bool(m.get("sandboxWorkloads.enabled", False), "sandboxWorkloads.enabled")
        for key, (prefix, _d) in (images or IMAGE_COMPONENTS).items():
            if sandbox_on or key not in SANDBOX_COMPONENTS:
                m.set(prefix + "_priority_class", pc, "daemonsets.priorityClassName")
    strategy = m.get("daemonsets.updateStrategy")
    if not _empty(strategy) and strategy != "RollingUpdate":
        m.skip("daemonsets.updateStrategy", strategy, "gpuops.nvidia's component DaemonSets always roll "
               "(RollingUpdate, maxUnavailable 1); the driver's rollout is playbooks/driver_upgrade.yml")
    for f, why in (("labels", "extra pod labels of the operands are not configurable here"),
                   ("annotations", "extra pod annotations of the operands are not configurable here"),
                   ("podSecurityContext", "the operands' pod security context is fixed by gpuops.nvidia's manifests")):
        if m.has("daemonsets." + f):
            m.skip("daemonsets." + f, m.get("daemonsets." + f), why)


def _operator(m):
    rc = m.get("operator.runtimeClass")
    handler = "nvidia"
    env = m.get("toolkit.env")  # its shape is checked with the toolkit's other fields
    for e in env if isinstance(env, list) else []:
        if isinstance(e, dict) and e.get("name") == "CONTAINERD_RUNTIME_CLASS" and e.get("value") \
                and isinstance(e["value"], str):
            handler = _k8s_name(e["value"], "toolkit.env[CONTAINERD_RUNTIME_CLASS]", "a runtime handler name",
                                K8S_NAMESPACE, 63)
    if not _empty(rc):
        _k8s_name(rc, "operator.runtimeClass", "a RuntimeClass name")
        m.set("gpuops_runtime_class", rc, "operator.runtimeClass")
        m.set("runtime_class_handlers", [{"name": rc, "handler": handler}], "operator.runtimeClass")
    m.get("operator.defaultRuntime")  # mapped with the toolkit
    ocp = m.get("operator.use_ocp_driver_toolkit")
    if ocp is not None and _bool(ocp, "operator.use_ocp_driver_toolkit"):
        m.skip("operator.use_ocp_driver_toolkit", ocp, "OpenShift Driver Toolkit builds are not used: the driver role "
               "installs distribution or CUDA-repository packages")
    for f in ("initContainer", "labels", "annotations", "metrics"):
        value = m.get("operator." + f)
        if not _empty(value):
            m.skip("operator." + f, value, "a setting of the operator's own pods; gpuops.nvidia runs no operator")


def _others(m, host_paths=True):
    for key, why in NOT_PROVIDED.items():
        if key in ("vgpuManager", "kataManager", "kataSandboxDevicePlugin") and key in m.consumed:
            continue
        if key not in m.spec:
            continue
        section = m.spec.get(key)
        if section is None:
            continue
        if m.enabled(key):
            m.skip(key, section, why)
        elif set(_mapping(section, key)) - {"enabled"}:
            m.notes.append("%s.*: not deployed by the operator while %s.enabled is false" % (key, key))
        m.consume_tree(key)
    value = m.get("psp.enabled")
    if value is not None and _bool(value, "psp.enabled"):
        m.skip("psp.enabled", value, "PodSecurityPolicy was removed in Kubernetes 1.25; nothing to create")
    # psa: the operator labels its namespace privileged for Pod Security Admission; so does the common role
    value = m.get("psa.enabled")
    if value is not None and _bool(value, "psa.enabled"):
        m.set("gpuops_k8s_namespace_psa", True, "psa.enabled")
    hp = "hostPaths"
    fields = (("rootFS", "/", None), ("driverInstallDir", "/run/nvidia/driver", "validator_driver_install_dir"),
              ("kubeletRootDir", "/var/lib/kubelet", "validator_node_kubelet_dir"))
    for f, default, var in fields if host_paths else ():
        value = m.get("%s.%s" % (hp, f))
        if _empty(value):
            continue
        if var:
            path = _host_path(value, "%s.%s" % (hp, f))
            if path != "/":
                path = path.rstrip("/")
            m.set(var, path, "%s.%s" % (hp, f))
        elif value != default:
            m.skip("%s.%s" % (hp, f), value, "host paths of the operator's containers; gpuops.nvidia works on the "
                   "hosts themselves (driver under /, toolkit in /usr/bin)")


def _dra_driver(m):
    """GPUCluster spec.draDriver -> the dra_driver role's variables; its compute-domain half is listed."""
    key = "draDriver"
    m.common(key, "dra_driver", keep=("repository", "image", "version"))
    gates = m.get(key + ".featureGates")
    if not _empty(gates):
        path = key + ".featureGates"
        gates = _typed(gates, path, dict, "a mapping of gate names to true/false")
        for name, value in gates.items():
            if name not in DRA_FEATURE_GATES:
                raise ClusterPolicyError("%s: %s is not a feature gate of the DRA driver v0.5.0 (known: %s)" % (
                    path, _show(name, 60), ", ".join(sorted(DRA_FEATURE_GATES))))
            if not isinstance(value, bool):
                raise ClusterPolicyError("%s.%s must be true or false, got %s" % (path, name, _show(value)))
        m.set("dra_driver_feature_gates", dict(gates), path)
    plugin = key + ".gpus.kubeletPlugin"
    if m.has(plugin + ".resources"):
        m.set("dra_driver_resources", _typed(m.get(plugin + ".resources"), plugin + ".resources", dict, "a mapping"),
              plugin + ".resources")
    for _name, value, path in m.env(plugin + ".env"):
        m.skip(path, value, WHY_ENV)
    hc = plugin + ".healthcheck"
    enabled = m.get(hc + ".enabled")
    port = m.get(hc + ".port")
    if enabled is not None and not _bool(enabled, hc + ".enabled"):
        m.set("dra_driver_healthcheck_port", 0, hc + ".enabled")
    elif not _empty(port):
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ClusterPolicyError("%s.port must be a port number 1-65535, got %s" % (hc, _show(port)))
        m.set("dra_driver_healthcheck_port", port, hc + ".port")
    cd = key + ".computeDomains"
    on = m.get(cd + ".enabled")
    # the API's default: enabled
    if on is None or _bool(on, cd + ".enabled"):
        m.skip(cd, m.get(cd) if m.get(cd) is not None else {"enabled": True}, WHY_COMPUTE_DOMAINS)
    elif set(_mapping(m.get(cd), cd)) - {"enabled"}:
        m.notes.append("%s.*: not deployed by the operator while %s.enabled is false" % (cd, cd))
    m.consume_tree(cd)


def _gpucluster(m):
    """A GPUCluster: the DRA driver on every GPU node (no device plugin, GFD or toolkit), DCGM exporter when enabled."""
    disabled = {}
    _daemonsets(m, GPUCLUSTER_IMAGES)
    _dra_driver(m)
    _dcgm(m, disabled)
    _image_vars(m, GPUCLUSTER_IMAGES)
    _others(m, host_paths=False)
    hp = "hostPaths"
    value = m.get(hp + ".kubeletRootDir")
    if not _empty(value):
        path = _host_path(value, hp + ".kubeletRootDir")
        m.set("dra_driver_kubelet_root", path.rstrip("/") if path != "/" else path, hp + ".kubeletRootDir")
    value = m.get(hp + ".driverInstallDir")
    if not _empty(value):
        m.skip(hp + ".driverInstallDir", value, "the operator's driver-validation path; gpuops.nvidia installs the "
               "driver on the hosts (dra_driver_driver_root /) -- set dra_driver_driver_root for a containerised one")
    m.set("gpuops_gpu_allocation", "dra", "kind GPUCluster")
    m.set("gpuops_cluster_components",
          ["nfd", "dra_driver"] + ([] if "dcgm_exporter" in disabled else ["runtime_class", "dcgm_exporter"]),
          "kind GPUCluster", *sorted(set(disabled.values())))
    m.leftover()


def clusterpolicy_to_vars(data, configmaps=None):
    """The mapping (see the module docstring). ``data``: the objects, or YAML text (a file's content: parsed
    here, within the limits). ``configmaps``: {name: data} or ConfigMap objects, added to the ConfigMaps found
    beside the ClusterPolicy."""
    policy, found = find_clusterpolicy(read_input(data))
    if configmaps:
        configmaps = read_input(configmaps, "the configmaps argument")
        if isinstance(configmaps, dict) and configmaps.get("kind") is None and "resources" not in configmaps:
            found.update({k: _mapping(v or {}, "ConfigMap %s data" % _show(k, 60)) for k, v in configmaps.items()})
        else:
            _p, extra = find_clusterpolicy([policy, configmaps])
            found.update(extra)
    m = _Mapper(policy["spec"], found)
    if policy["kind"] == "GPUCluster":
        _gpucluster(m)
        return _result(policy, m)
    disabled = {}
    _operator(m)
    _daemonsets(m)
    _driver(m)
    _upgrade(m)
    _toolkit(m)
    _cdi(m)
    _mig(m, disabled)
    _device_plugin(m, disabled)
    _gfd(m, disabled)
    _dcgm(m, disabled)
    _sandbox(m, disabled)
    _validator(m)
    _image_vars(m)
    _others(m)
    if disabled:
        m.set("gpuops_cluster_components", [c for c in CLUSTER_COMPONENTS if c not in disabled],
              *sorted(set(disabled.values())))
    m.leftover()
    return _result(policy, m)


def _result(policy, m):
    meta = policy.get("metadata") or {}
    return {
        "kind": policy["kind"],
        "name": meta.get("name", ""),
        "namespace": policy_namespace(policy),
        "vars": _ordered(m.vars),
        "sources": {k: m.sources[k] for k in _ordered(m.vars)},
        "unmapped": m.unmapped,
        "notes": m.notes,
        "configmaps_needed": m.configmaps_needed,
    }


_SECTIONS = [
    ("Cluster-wide", ("gpuops_",)),
    ("Driver", ("driver_", "gpu_upgrade_")),
    ("Container toolkit and runtime", ("container_toolkit_", "runtime_class_")),
    ("Device plugin", ("device_plugin_",)),
    ("DRA driver", ("dra_driver_",)),
    ("GPU feature discovery", ("gfd_",)),
    ("DCGM exporter", ("dcgm_exporter_",)),
    ("MIG manager", ("mig_manager_",)),
    ("Validator", ("validator_",)),
    ("vGPU device manager", ("vgpu_device_manager_",)),
    ("Sandbox device plugin", ("sandbox_device_plugin_",)),
]


def _section_of(var):
    for i, (_title, prefixes) in enumerate(_SECTIONS):
        if var.startswith(prefixes):
            return i
    return len(_SECTIONS)


def _ordered(variables):
    return {k: variables[k] for k in sorted(variables, key=lambda k: (_section_of(k), k))}


class _GroupVarsDumper(yaml.SafeDumper):
    """safe_dump, with every value written out in full (no anchors or aliases) and any string holding a line
    break or another control or format character written double-quoted, where YAML escapes them."""

    def ignore_aliases(self, data):
        return True


def _represent_str(dumper, value):
    quote = any(unicodedata.category(c)[0] in "CZ" and c != " " for c in value)
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"' if quote else None)


_GroupVarsDumper.add_representer(str, _represent_str)


def _dump(value, **kw):
    try:
        return yaml.dump(value, Dumper=_GroupVarsDumper, sort_keys=False, allow_unicode=True, **kw)
    except yaml.YAMLError as e:
        raise ClusterPolicyError("cannot write %s as YAML: %s" % (_show(value), e)) from e


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _comment(text):
    """Text for a ``#`` comment line: line breaks (YAML also ends a comment at U+0085, U+2028 and U+2029),
    other control and format characters and every space but ' ' are shown escaped, so the text can neither
    end the comment nor hide in it."""
    out = []
    for c in str(text):
        if c == " " or unicodedata.category(c)[0] not in "CZ":
            out.append(c)
        elif c in _ESCAPES:
            out.append(_ESCAPES[c])
        else:
            o = ord(c)
            out.append("\\x%02x" % o if o < 0x100 else "\\u%04x" % o if o < 0x10000 else "\\U%08x" % o)
    return "".join(out)


def _comment_value(value):
    text = _dump(value, default_flow_style=True, width=10 ** 6).strip()
    if text.endswith("\n..."):
        text = text[:-4].strip()
    return _comment(text if len(text) <= 160 else text[:157] + "...")


def _check_result(result):
    """A clusterpolicy_to_vars result, as group_vars_text writes it: its variables are the importer's own."""
    if not isinstance(result, dict) or not isinstance(result.get("vars"), dict):
        raise ClusterPolicyError("expected the result of clusterpolicy_to_vars (with vars, sources, unmapped)")
    for var in result["vars"]:
        if var not in VARIABLES:
            raise ClusterPolicyError("%s is not a variable the ClusterPolicy import writes" % _show(var))
    if result.get("kind", "ClusterPolicy") not in ("ClusterPolicy", "GPUCluster"):
        raise ClusterPolicyError("the result's kind must be ClusterPolicy or GPUCluster, got %s" % _show(result["kind"]))
    if not isinstance(result.get("name") or "", str):
        raise ClusterPolicyError("the result's name must be a string, got %s" % _show(result["name"]))
    sources = _typed(result.get("sources") or {}, "the result's sources", dict, "a mapping")
    for var, paths in sources.items():
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ClusterPolicyError("the result's sources of %s must be a list of field paths" % _show(var))
    for i, u in enumerate(_typed(result.get("unmapped") or [], "the result's unmapped", list, "a list")):
        if not isinstance(u, dict) or not {"path", "value", "why"} <= set(u) \
                or not isinstance(u["path"], str) or not isinstance(u["why"], str):
            raise ClusterPolicyError("the result's unmapped[%d] must be {path, value, why}, got %s" % (i, _show(u)))
    notes = _typed(result.get("notes") or [], "the result's notes", list, "a list")
    if not all(isinstance(n, str) for n in notes):
        raise ClusterPolicyError("the result's notes must be strings")


def group_vars_text(result, source=""):
    """The group_vars YAML file for a clusterpolicy_to_vars result: each variable with the fields it
    comes from, then every field with no equivalent (path: value -- why) as comments.

    The document carries the ``!unsafe`` tag: Ansible reads every string in it -- values, nested keys, list
    items -- as data it never templates (ansible-core 2.19 propagates the tag into the whole document and
    keeps each value's type), so a ``{{ ... }}`` in a ClusterPolicy or ConfigMap cannot run when the
    variables are used. Tagging each value instead would not do: Ansible re-reads a tagged scalar as if it
    were unquoted, so ``!unsafe '580'`` would become the integer 580. Only the importer's own variable names
    are written, and comment text is escaped (``_comment``)."""
    _check_result(result)
    lines = ["--- !unsafe",
             "# gpuops.nvidia group_vars imported from GPU Operator %s %s%s" % (
                 result.get("kind", "ClusterPolicy"), _comment(result.get("name") or "?"), (" (%s)" % _comment(source)) if source else ""),
             "# by playbooks/import_clusterpolicy.yml (the gpuops.nvidia.clusterpolicy_to_vars filter).",
             "# Each variable names the ClusterPolicy field(s) it comes from; the fields with no equivalent",
             "# in gpuops.nvidia are listed at the end, with why. Everything in this file is data (the !unsafe",
             "# tag above): Ansible never templates it. Put variables of your own in another file."]
    current = None
    sources = result.get("sources") or {}
    for var, value in result["vars"].items():
        sec = _section_of(var)
        if sec != current:
            current = sec
            lines += ["", "# --- %s ---" % (_SECTIONS[sec][0] if sec < len(_SECTIONS) else "Other")]
        lines.append("# from %s" % _comment(", ".join(sources.get(var) or ["?"])))
        lines += _dump({var: value}, default_flow_style=False, width=100).rstrip("\n").split("\n")
    notes = result.get("notes") or []
    if notes:
        lines += ["", "# --- Needs nothing here ---"] + ["#   %s" % _comment(n) for n in notes]
    unmapped = result.get("unmapped") or []
    lines += ["", "# --- No equivalent in gpuops.nvidia (%d) ---" % len(unmapped)]
    if not unmapped:
        lines.append("#   (none)")
    for u in unmapped:
        lines.append("#   %s: %s" % (_comment(u["path"]), _comment_value(u["value"])))
        lines.append("#       -- %s" % _comment(u["why"]))
    return "\n".join(lines) + "\n"
