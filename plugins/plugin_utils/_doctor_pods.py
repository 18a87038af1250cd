# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The doctor's view of the GPU Operator's component pods on one node (controller side only).

``pod_findings(pods, nodes, node_name, namespace=None, pods_error=None)`` takes the ``resources`` of two
``kubernetes.core.k8s_info`` lists (the Pods of the components' namespace, the Nodes) and returns
``{"findings": [...], "pods": [...]}`` for one node: what is wrong with the component pods placed on it
(crash loop, image pull, container/sandbox configuration, not ready, restarts), which components the Node's
``nvidia.com/gpu.deploy.*`` labels ask for but that have no pod there, whether its
``nvidia.com/gpu.workload.config`` label says the workload kind the inventory gives it (``workload=``), and a
summary of its component pods.

Components are recognised by the pod label ``app`` that the cluster roles render (roles/*/templates/*.j2);
the deploy label of each is the ``nodeSelector`` of its DaemonSet there.

Everything read from the API server is data, never code (docs/security.md): entries of the wrong shape are
skipped, every text that reaches a summary or remediation has its control, format and line-separator
characters replaced by a space and is cut to a bound, names in a suggested shell command are shell-quoted,
and nothing here is ever rendered as a template. Only the top-level arguments are refused (a list that is
no list, a node name that is no string), with ``DoctorPodsInputError``.

No Ansible import: plain data in, plain data out. Stdlib only.
"""
from __future__ import annotations

import re
import shlex
import types
import unicodedata

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError

NAME_MAX = 253   # a Kubernetes object name (DNS subdomain) is at most 253 characters: never cut a real one
TEXT_MAX = 200   # reasons, messages, images
_SCAN_MAX = 4096  # characters of any one string looked at (a 1 GB message costs no more than this)

_SEVERITY = {"error": 0, "warning": 1, "info": 2}


class DoctorPodsInputError(InputError):
    """Arguments of gpu_doctor_pods that are not the shape it reads; the message names the argument."""


# app label -> (role, deploy label or None, words for a person, kind: Deployment or DaemonSet)
COMPONENTS = {
    "nvidia-device-plugin-daemonset": ("device_plugin", "nvidia.com/gpu.deploy.device-plugin", "device plugin", "DaemonSet"),
    # its nodeSelector also asks for the device plugin's deploy label (REQUIRES below)
    "nvidia-device-plugin-mps-control-daemon": ("device_plugin", "nvidia.com/mps.capable", "MPS control daemon",
                                                "DaemonSet"),
    "nvidia-dra-driver-kubelet-plugin": ("dra_driver", "nvidia.com/gpu.deploy.dra-driver", "DRA driver kubelet plugin",
                                         "DaemonSet"),
    "gpu-feature-discovery": ("gfd", "nvidia.com/gpu.deploy.gpu-feature-discovery", "GPU feature discovery", "DaemonSet"),
    "nvidia-dcgm-exporter": ("dcgm_exporter", "nvidia.com/gpu.deploy.dcgm-exporter", "DCGM exporter", "DaemonSet"),
    "nvidia-mig-manager": ("mig_manager", "nvidia.com/gpu.deploy.mig-manager", "MIG manager", "DaemonSet"),
    "nvidia-operator-validator": ("validator", "nvidia.com/gpu.deploy.operator-validator", "operator validator", "DaemonSet"),
    "nvidia-sandbox-device-plugin-daemonset": ("sandbox_device_plugin", "nvidia.com/gpu.deploy.sandbox-device-plugin",
                                               "sandbox device plugin", "DaemonSet"),
    "nvidia-vgpu-device-manager": ("vgpu_device_manager", "nvidia.com/gpu.deploy.vgpu-device-manager",
                                   "vGPU device manager", "DaemonSet"),
    "nfd-worker": ("nfd", None, "NFD worker", "DaemonSet"),      # no deploy label: runs on every node
    "nfd-master": ("nfd", None, "NFD master", "Deployment"),     # reported only when it runs on this node
}
# further labels a component's nodeSelector asks for, beside its own
REQUIRES = {"nvidia-device-plugin-mps-control-daemon": ("nvidia.com/gpu.deploy.device-plugin",)}

#: NVIDIA's DRA driver: its kubelet plugin's app label, deploy label and driver name (ResourceSlice spec.driver)
DRA_APP = "nvidia-dra-driver-kubelet-plugin"
DRA_LABEL = "nvidia.com/gpu.deploy.dra-driver"
DRA_DRIVER = "gpu.nvidia.com"

#: the node's one GPU workload kind, as the GPU Operator reads it (no label: its default, container)
WORKLOAD_LABEL = "nvidia.com/gpu.workload.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
WORKLOADS = ("container", "vm-passthrough", "vm-vgpu")

CRASH_REASONS = frozenset({"CrashLoopBackOff"})
IMAGE_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull",
                           "ImageInspectError", "RegistryUnavailable"})
CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError",
                            "RunInitContainerError", "PreStartHookError", "PostStartHookError"})
# pod-level reasons (status.reason, a condition's reason) of a sandbox or admission failure (the kubelet's
# sync errors, kubelet admission)
POD_CONFIG_REASONS = frozenset({"CreatePodSandboxError", "ConfigPodSandboxError", "FailedCreatePodSandBox",
                                "UnexpectedAdmissionError"})

_K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_ASCII_DIGITS = re.compile(r"-?[0-9]{1,10}")
# control (Cc), format (Cf: bidi overrides, zero-width), line and paragraph separators, surrogates
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def text(value, limit=TEXT_MAX):
    """Untrusted text -> one line of at most ``limit`` characters ('' for anything that is not a string).
    Control, format and separator characters become a space; runs of whitespace one space."""
    if not isinstance(value, str):
        return ""
    s = "".join(" " if unicodedata.category(ch) in _UNSAFE_CATEGORIES else ch for ch in value[:_SCAN_MAX])
    s = " ".join(s.split())
    if len(s) > limit:
        s = s[:max(limit - 3, 0)].rstrip() + "..."
    return s


def _name(value):
    return text(value, NAME_MAX)


def _shell(value):
    """A name for a command line a person copies: a Kubernetes name as it is, anything else shell-quoted."""
    return value if _K8S_NAME.fullmatch(value or "") else shlex.quote(value)


def _dict(value):
    return value if isinstance(value, dict) else {}


def _list(value):
    return value if isinstance(value, list) else []


def _int(value):
    """A count or exit code as the API gives it (an int, never a bool); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _ASCII_DIGITS.fullmatch(value):
        return int(value)
    return None


def _seq(value, what):
    if isinstance(value, (list, tuple, types.GeneratorType)):
        return list(value)
    raise DoctorPodsInputError("%s must be the resources list of a kubernetes.core.k8s_info call, got %s"
                               % (what, type(value).__name__))


# --- reading one pod -------------------------------------------------------------------------------------

def _container(status, spec_images, init):
    """One entry of (init)containerStatuses -> the fields the findings use, or None when malformed."""
    if not isinstance(status, dict):
        return None
    name = _name(status.get("name"))
    if not name:
        return None
    state = _dict(status.get("state"))
    waiting = _dict(state.get("waiting"))
    terminated = _dict(state.get("terminated"))
    last = _dict(_dict(status.get("lastState")).get("terminated"))
    restarts = _int(status.get("restartCount"))
    return {
        "name": name,
        "init": init,
        "restarts": restarts if restarts is not None and restarts > 0 else 0,
        "ready": status.get("ready") is True,
        "waiting": text(waiting.get("reason")),
        "waiting_message": text(waiting.get("message")),
        "terminated": text(terminated.get("reason")) if terminated else "",
        "terminated_exit": _int(terminated.get("exitCode")) if terminated else None,
        "last_reason": text(last.get("reason")),
        "last_exit": _int(last.get("exitCode")),
        "last_message": text(last.get("message")),
        "image": spec_images.get(name) or text(status.get("image")),
    }


def _pod(obj):
    """A Pod object of a component -> the fields the findings use; None when it is no component pod or malformed."""
    if not isinstance(obj, dict):
        return None
    meta, spec, status = _dict(obj.get("metadata")), _dict(obj.get("spec")), _dict(obj.get("status"))
    app = _dict(meta.get("labels")).get("app")
    if not isinstance(app, str) or app not in COMPONENTS:
        return None
    name = _name(meta.get("name"))
    node = spec.get("nodeName")
    if not name or not isinstance(node, str):
        return None
    images = {}
    for key in ("initContainers", "containers"):
        for c in _list(spec.get(key)):
            if isinstance(c, dict) and isinstance(c.get("name"), str):
                images[_name(c["name"])] = text(c.get("image"))
    containers = []
    for key, init in (("initContainerStatuses", True), ("containerStatuses", False)):
        for c in _list(status.get(key)):
            parsed = _container(c, images, init)
            if parsed is not None:
                containers.append(parsed)
    conditions = [c for c in _list(status.get("conditions")) if isinstance(c, dict)]
    ready_cond = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    phase = text(status.get("phase"), 32) or "Unknown"
    pod_reasons = [text(status.get("reason"))] + [
        text(c.get("reason")) for c in conditions if c.get("status") == "False"]
    return {
        "app": app,
        "name": name,
        "namespace": _name(meta.get("namespace")),
        "node": node,
        "phase": phase,
        "ready": phase == "Running" and ready_cond,
        "terminating": meta.get("deletionTimestamp") not in (None, ""),
        "containers": containers,
        "pod_reasons": [r for r in pod_reasons if r],
        "pod_message": text(status.get("message")),
        "runtime_class": _name(spec.get("runtimeClassName")),
    }


def _reasons(pod):
    out = []
    for c in pod["containers"]:
        for r in (c["waiting"], c["terminated"]):
            if r and not (c["init"] and r == "Completed") and r not in out:
                out.append(r)
    for r in pod["pod_reasons"]:
        if r not in out:
            out.append(r)
    if pod["terminating"] and "Terminating" not in out:
        out.append("Terminating")
    return out


# --- findings --------------------------------------------------------------------------------------------

def _finding(fid, severity, summary, remediation, **detail):
    return {"id": fid, "severity": severity, "summary": summary, "remediation": remediation, "detail": detail}


def _what(pod):
    return "%s pod %s" % (COMPONENTS[pod["app"]][2], pod["name"])


def _last_exit(c):
    """'last exit: Error (exit code 1)' from lastState.terminated, '' when nothing is known."""
    if not c["last_reason"] and c["last_exit"] is None:
        return ""
    code = "" if c["last_exit"] is None else "exit code %d" % c["last_exit"]
    if c["last_reason"] and code:
        return "last exit: %s (%s)" % (c["last_reason"], code)
    return "last exit: %s" % (c["last_reason"] or code)


def _kubectl(ns, *args):
    return "kubectl -n %s %s" % (_shell(ns) if ns else "<namespace>", " ".join(args))


_NVML_HINT = ("if the log says NVML could not start (e.g. 'could not load NVML library', 'Driver Not Loaded'): is the "
              "driver loaded on the node (playbooks/driver.yml, the doctor's driver findings)? do the pods run "
              "with the RuntimeClass nvidia (runtime_class role) and does the node's runtime register the "
              "nvidia handler (playbooks/container_toolkit.yml)?")
_CRASH_HINTS = {
    "device_plugin": _NVML_HINT + " On a node without a GPU set flags.failOnInitError: false in its config "
                                  "(gpuops_device_plugin_configs).",
    "dra_driver": "its init container's log says where it looked for nvidia-smi and libnvidia-ml.so.1 under "
                  "dra_driver_driver_root (/ for a host-installed driver); the plugin needs the driver loaded "
                  "(playbooks/driver.yml) and refuses feature gates it does not know (dra_driver_feature_gates).",
    "gfd": _NVML_HINT + " On a node without a GPU set gfd_fail_on_init_error: false.",
    "dcgm_exporter": "DCGM needs the driver loaded and the nvidia runtime (RuntimeClass nvidia, "
                     "playbooks/container_toolkit.yml); check dcgm_exporter's metrics config.",
    "mig_manager": "check the MIG config the node's nvidia.com/mig.config label names (mig_manager's configs) "
                   "and that no GPU process holds the GPUs during a MIG change.",
    "validator": "the failing container names the stage (driver, toolkit, cuda, plugin): fix that component "
                 "first (the doctor's findings above).",
    "sandbox_device_plugin": "the GPUs must be bound to vfio-pci (playbooks/vfio.yml) or have vGPU mdev types "
                             "(playbooks/vgpu.yml) on this node.",
    "vgpu_device_manager": "check the vGPU config the node's nvidia.com/vgpu.config label names "
                           "(vgpu_device_manager's configs) and the vGPU manager driver (playbooks/vgpu.yml).",
}
_NFD_WORKER_HINT = "check nfd_worker_config (the nfd-worker-conf ConfigMap) for options nfd-worker refuses."
_START_HINT = ("the runtime could not start the container (exit code 128 / StartError): check the pod's "
               "RuntimeClass (runtime_class role) and the node's nvidia runtime and CDI spec "
               "(playbooks/container_toolkit.yml; the doctor's nvidia-runtime-missing and cdi-spec-missing findings).")


def _crash_hint(pod, c):
    role = COMPONENTS[pod["app"]][0]
    hints = []
    if c["last_reason"] == "StartError" or c["last_exit"] == 128:
        hints.append(_START_HINT)
    elif c["last_reason"] == "OOMKilled":
        hints.append("the container ran out of memory: raise %s_resources (limits.memory)." % role)
    if pod["app"] == "nfd-worker":
        hints.append(_NFD_WORKER_HINT)
    elif role in _CRASH_HINTS:
        hints.append(_CRASH_HINTS[role])
    else:
        hints.append("the log says why it exits; after fixing, rerun playbooks/cluster.yml.")
    return " ".join(hints)


def _detail(pod, c=None, **more):
    d = {"pod": pod["name"], "namespace": pod["namespace"], "component": pod["app"], "node": pod["node"]}
    if c is not None:
        d.update(container=c["name"], restarts=c["restarts"])
    d.update(more)
    return d


def _crashloop(pod, c, ns):
    summary = "%s on %s is crash-looping: container %s restarted %d time(s)" % (
        _what(pod), pod["node"], c["name"], c["restarts"])
    last = _last_exit(c)
    if last:
        summary += ", " + last
    remediation = "see why it exits: %s; %s" % (
        _kubectl(ns, "logs", _shell(pod["name"]), "-c", _shell(c["name"]), "--previous"), _crash_hint(pod, c))
    return _finding("component-pod-crashloop", "error", summary, remediation,
                    **_detail(pod, c, reason=c["waiting"], last_reason=c["last_reason"], last_exit_code=c["last_exit"],
                              last_message=c["last_message"]))


def _image(pod, c, ns):
    role = COMPONENTS[pod["app"]][0]
    summary = "%s on %s cannot get its image: container %s is %s" % (_what(pod), pod["node"], c["name"], c["waiting"])
    if c["waiting_message"]:
        summary += " (%s)" % c["waiting_message"]
    remediation = ("image %s: check that it exists and that the node can reach its registry; set gpuops_registry "
                   "(or %s_image) to a registry the node reaches, and gpuops_image_pull_secrets for a private one, "
                   "then rerun playbooks/cluster.yml; %s shows the pull error" % (
                       c["image"] or "(not in the pod spec)", role,
                       _kubectl(ns, "describe", "pod", _shell(pod["name"]))))
    return _finding("component-pod-image", "error", summary, remediation,
                    **_detail(pod, c, reason=c["waiting"], image=c["image"], message=c["waiting_message"]))


def _config_remediation(pod, ns):
    rc = pod["runtime_class"]
    return ("%s: its Events say what is missing (a ConfigMap, Secret, volume or device); for a sandbox or runtime "
            "error check the RuntimeClass %s (runtime_class role, playbooks/cluster.yml) and that the node's "
            "container runtime registers its handler (playbooks/container_toolkit.yml; the doctor's "
            "nvidia-runtime-missing finding)" % (
                _kubectl(ns, "describe", "pod", _shell(pod["name"])),
                rc if rc else "(none set: the node's default runtime)"))


def _config(pod, c, ns):
    summary = "%s on %s cannot start container %s: %s" % (_what(pod), pod["node"], c["name"], c["waiting"])
    if c["waiting_message"]:
        summary += " (%s)" % c["waiting_message"]
    return _finding("component-pod-config", "error", summary, _config_remediation(pod, ns),
                    **_detail(pod, c, reason=c["waiting"], message=c["waiting_message"],
                              runtime_class=pod["runtime_class"]))


def _pod_config(pod, reasons, ns):
    summary = "%s on %s cannot start: %s" % (_what(pod), pod["node"], ", ".join(reasons))
    if pod["pod_message"]:
        summary += " (%s)" % pod["pod_message"]
    return _finding("component-pod-config", "error", summary, _config_remediation(pod, ns),
                    **_detail(pod, reason=", ".join(reasons), message=pod["pod_message"],
                              runtime_class=pod["runtime_class"]))


def _not_ready(pod, reasons, ns):
    summary = "%s on %s is not ready: phase %s" % (_what(pod), pod["node"], pod["phase"])
    if reasons:
        summary += " (%s)" % ", ".join(reasons)
    if pod["terminating"]:
        remediation = ("the pod is stuck terminating: check the kubelet on the node (systemctl status kubelet; "
                       "journalctl -u kubelet) and %s" % _kubectl(ns, "describe", "pod", _shell(pod["name"])))
    else:
        remediation = ("%s: its Events say what it waits for (scheduling, image pull, volumes, the sandbox, a "
                       "failing readiness probe); the doctor's other findings for this node come first" %
                       _kubectl(ns, "describe", "pod", _shell(pod["name"])))
    return _finding("component-pod-not-ready", "warning", summary, remediation,
                    **_detail(pod, phase=pod["phase"], reasons=reasons, terminating=pod["terminating"]))


def _restarts(pod, ns):
    worst = max(pod["containers"], key=lambda c: c["restarts"])
    total = sum(c["restarts"] for c in pod["containers"])
    summary = "%s on %s is running but restarted %d time(s) (container %s: %d" % (
        _what(pod), pod["node"], total, worst["name"], worst["restarts"])
    last = _last_exit(worst)
    summary += (", " + last + ")") if last else ")"
    remediation = "see why it stopped last time: %s" % _kubectl(
        ns, "logs", _shell(pod["name"]), "-c", _shell(worst["name"]), "--previous")
    if worst["last_reason"] == "OOMKilled":
        remediation += "; it ran out of memory: raise %s_resources (limits.memory)" % COMPONENTS[pod["app"]][0]
    return _finding("component-pod-restarts", "warning", summary, remediation,
                    **_detail(pod, worst, total_restarts=total, last_reason=worst["last_reason"],
                              last_exit_code=worst["last_exit"]))


def _between_restarts(c):
    """A crash loop read between two of its restarts: the container has restarted, is not ready and has just
    exited with an error (the kubelet has not put it back into CrashLoopBackOff yet)."""
    return not c["ready"] and c["restarts"] > 0 and c["terminated_exit"] not in (None, 0)


def _pod_findings(pod, ns):
    found = []
    for c in pod["containers"]:
        if c["waiting"] in CRASH_REASONS or _between_restarts(c):
            found.append(_crashloop(pod, c, ns))
        elif c["waiting"] in IMAGE_REASONS:
            found.append(_image(pod, c, ns))
        elif c["waiting"] in CONFIG_REASONS:
            found.append(_config(pod, c, ns))
    sandbox = [r for r in pod["pod_reasons"] if r in POD_CONFIG_REASONS]
    if sandbox and not found:
        found.append(_pod_config(pod, sandbox, ns))
    if found:
        return found
    if pod["app"] == DRA_APP and pod["phase"] == "Running" and not pod["ready"] and not pod["terminating"]:
        return [_dra_not_registered(pod, ns)]
    if not pod["ready"] or pod["terminating"]:
        return [_not_ready(pod, _reasons(pod), ns)]
    if any(c["restarts"] > 0 for c in pod["containers"]):
        return [_restarts(pod, ns)]
    return []


def _dra_not_registered(pod, ns):
    """The DRA kubelet plugin runs but its startup probe (its gRPC health service: registered with the kubelet, its
    DRA service serving) has not passed."""
    summary = ("the DRA driver's kubelet plugin on %s runs but is not Ready: it has not registered with the kubelet "
               "(its health check, registration and DRA service, fails) -- pods on this node get no GPU by DRA"
               % pod["node"])
    remediation = (
        "the plugin registers through <kubelet root>/plugins_registry/gpu.nvidia.com-reg.sock: dra_driver_kubelet_root "
        "must be the kubelet's --root-dir (default /var/lib/kubelet); read the plugin's log (%s) and the kubelet's "
        "(journalctl -u kubelet | grep gpu.nvidia.com: a RegisterPlugin error says why); Kubernetes 1.34 or later "
        "with the DynamicResourceAllocation feature on the kubelet" % _kubectl(ns, "logs", _shell(pod["name"]), "-c", "gpus"))
    return _finding("dra-plugin-not-registered", "error", summary, remediation, **_detail(pod, reasons=_reasons(pod)))


def _dra_slices(node, node_name, labels, pods, slices, ns):
    """A DRA node whose kubelet plugin is Ready: no ResourceSlice of the driver for the node (error), or slices that
    list no device (warning). None when the node is no DRA node, its plugin is not Ready (its own finding says why),
    or the slices were not read."""
    if slices is None or labels.get(DRA_LABEL) != "true":
        return None
    plugin = [p for p in pods if p["app"] == DRA_APP]
    if not plugin or not plugin[0]["ready"]:
        return None
    mine = [_dict(s.get("spec")) for s in slices if isinstance(s, dict)]
    mine = [s for s in mine if s.get("driver") == DRA_DRIVER and s.get("nodeName") == node_name]
    logs = _kubectl(ns, "logs", _shell(plugin[0]["name"]), "-c", "gpus")
    listing = "kubectl get resourceslices --field-selector spec.nodeName=%s,spec.driver=%s" % (_shell(node), DRA_DRIVER)
    if not mine:
        return _finding(
            "dra-no-resourceslice", "error",
            "node %s allocates GPUs by DRA and its kubelet plugin is Ready, but no ResourceSlice of %s lists the node: "
            "the scheduler sees no GPU there" % (node, DRA_DRIVER),
            "read the plugin's log (%s) for why it publishes nothing (NVML, the driver under dra_driver_driver_root); "
            "the plugin's service account must be allowed to write the node's slices (the dra_driver role's ClusterRole "
            "and admission policy: its pod-bound token names the node); check with %s" % (logs, listing),
            node=node, driver=DRA_DRIVER)
    devices = sum(len(_list(s.get("devices"))) for s in mine)
    if devices == 0:
        return _finding(
            "dra-no-gpu-published", "warning",
            "node %s: the DRA driver's ResourceSlices list no device -- the plugin found no GPU it can hand out"
            % node,
            "nvidia-smi on the node lists the GPUs? (a GPU bound to vfio-pci is published only with the "
            "PassthroughSupport gate); the plugin's log says what it found: %s; %s" % (logs, listing),
            node=node, driver=DRA_DRIVER, slices=len(mine))
    return None


def _node_labels(nodes, node_name):
    """The labels of the Node named ``node_name``; None when the list has no such Node."""
    for obj in nodes:
        if not isinstance(obj, dict):
            continue
        meta = _dict(obj.get("metadata"))
        if meta.get("name") == node_name:
            return _dict(meta.get("labels"))
    return None


def _missing(app, node, ns):
    role, label, words, kind = COMPONENTS[app]
    summary = "node %s has %s=true but no %s pod runs on it" % (node, label, words)
    remediation = (
        "check that the %s %s exists (%s; else run playbooks/cluster.yml with %s in gpuops_cluster_components), "
        "that its nodeSelector and tolerations admit the node (the node's taints: kubectl describe node %s; "
        "%s_tolerations), and its events (%s)" % (
            kind, app, _kubectl(ns, "get", "ds"), role, _shell(node), role,
            _kubectl(ns, "describe", "ds", app)))
    return _finding("component-pod-missing", "error", summary, remediation,
                    component=app, node=node, deploy_label=label, namespace=ns)


def _workload_label(node, labels, workload):
    """The Node's workload label against the inventory's gpu_workload; None when they agree."""
    raw = labels.get(WORKLOAD_LABEL)
    have = text(raw, 63) if isinstance(raw, str) else None
    if have == workload:
        return None
    label_cmd = "kubectl label node %s %s=%s --overwrite" % (_shell(node), WORKLOAD_LABEL, workload)
    remediation = ("run playbooks/cluster.yml for this host (its node_labels step sets %s from gpu_workload), or "
                   "by hand: %s" % (WORKLOAD_LABEL, label_cmd))
    if have is None:
        severity = "warning" if workload == "container" else "error"
        summary = "node %s has no %s label; the inventory's gpu_workload is %s" % (node, WORKLOAD_LABEL, workload)
        if workload != "container":
            summary += (": the GPU Operator's components take an unlabelled node for container (their default), so "
                        "the %s components do not run there and VMs on it see no GPU" % workload)
    else:
        severity = "error"
        summary = "node %s is labelled %s=%s but the inventory's gpu_workload is %s" % (
            node, WORKLOAD_LABEL, _shell(have) if have else "''", workload)
        remediation += "; if the node is meant to run %s workloads, change its gpu_workload in the inventory instead" % (
            _shell(have) if have else "''")
    return _finding("node-workload-label", severity, summary, remediation,
                    node=node, label=WORKLOAD_LABEL, have=have, want=workload)


def _mig_state(node, labels, pods, ns):
    """NVIDIA's MIG manager's report on the Node: a finding when it says failed; None otherwise."""
    if labels.get(MIG_STATE_LABEL) != "failed":
        return None
    raw = labels.get(MIG_CONFIG_LABEL)
    config = text(raw, 63) if isinstance(raw, str) else None
    mgr = [p["name"] for p in pods if p["app"] == "nvidia-mig-manager"]
    logs = _kubectl(ns, "logs", _shell(mgr[0])) if mgr else _kubectl(ns, "get", "pods", "-l", "app=nvidia-mig-manager", "-o", "wide")
    summary = "node %s: NVIDIA's MIG manager could not apply MIG config %s (%s=failed)" % (
        node, _shell(config) if config else "(none named)", MIG_STATE_LABEL)
    remediation = (
        "read why in the MIG manager's log (%s); the config %s names must be one of mig_manager's configs "
        "(gpuops_mig_configs) and fit this node's GPUs: set the host's gpuops_mig_config to one that does and run "
        "playbooks/cluster.yml; a MIG mode change the GPU refuses while in use needs the node drained or rebooted "
        "(mig_manager_with_reboot); the MIG manager also needs the host's D-Bus system bus "
        "(/run/dbus/system_bus_socket)" % (logs, MIG_CONFIG_LABEL))
    return _finding("mig-config-failed", "error", summary, remediation,
                    node=node, label=MIG_STATE_LABEL, config=config)


def _unknown(error):
    return _finding("component-pods-unknown", "info",
                    "could not list the GPU Operator component pods: %s" % (text(error) or "no answer"),
                    "check gpuops_kubeconfig and the API server, or set doctor_k8s_pods: false", error=text(error))


def pod_findings(pods, nodes, node_name, namespace=None, pods_error=None, workload=None, slices=None):
    """-> {"findings": [...], "pods": [{name, component, phase, ready, restarts, reasons}]} for ``node_name``.

    ``slices``: the cluster's ResourceSlices (resource.k8s.io), or None when not read: on a DRA node (its
    ``nvidia.com/gpu.deploy.dra-driver`` label) whose kubelet plugin is Ready, a ``dra-no-resourceslice`` finding
    when no slice of the driver names the node, ``dra-no-gpu-published`` when its slices list no device.

    ``workload``: the inventory's gpu_workload for the node (container, vm-passthrough or vm-vgpu); when given and
    the Node is in ``nodes``, a ``node-workload-label`` finding says when its workload label is missing or differs.

    ``pods_error``: the message of a Pod list that failed (the list is then not read): one
    ``component-pods-unknown`` info finding. ``namespace``: used in the commands the remediations suggest
    (else the pods' own)."""
    if not isinstance(node_name, str) or not node_name:
        raise DoctorPodsInputError("node_name must be the Node's name (a non-empty string), got %s"
                                   % type(node_name).__name__)
    if namespace is not None and not isinstance(namespace, str):
        raise DoctorPodsInputError("namespace must be a string, got %s" % type(namespace).__name__)
    if workload in ("", None):
        workload = None
    elif workload not in WORKLOADS:
        raise DoctorPodsInputError("workload must be one of %s (the inventory's gpu_workload), got %r"
                                   % (", ".join(WORKLOADS), text(workload, 63) if isinstance(workload, str)
                                      else type(workload).__name__))
    nodes = [] if nodes is None else _seq(nodes, "nodes_resources")
    slices = None if slices is None else _seq(slices, "slices")
    if pods_error not in (None, "", False):
        return {"findings": [_unknown(pods_error if isinstance(pods_error, str) else str(pods_error))], "pods": []}
    pods = _seq(pods, "pods_resources")

    node = _name(node_name)
    # the node test first: a fleet's Pod list is read once per node, and only this node's pods are parsed
    here = [p for p in (_pod(obj) for obj in pods if isinstance(obj, dict)
                        and _dict(obj.get("spec")).get("nodeName") == node_name) if p is not None]
    for p in here:
        p["node"] = node  # the name as the summaries show it
    here.sort(key=lambda p: (p["name"], p["namespace"]))
    ns_given = _name(namespace) if namespace else ""

    findings = []
    for pod in here:
        findings += _pod_findings(pod, ns_given or pod["namespace"])

    labels = _node_labels(nodes, node_name)
    if labels is not None and workload:
        wrong = _workload_label(node, labels, workload)
        if wrong:
            findings.append(wrong)
    if labels is not None:
        present = {p["app"] for p in here}
        ns = ns_given or (here[0]["namespace"] if here else "")
        mig = _mig_state(node, labels, here, ns)
        if mig:
            findings.append(mig)
        dra = _dra_slices(node, node_name, labels, here, slices, ns)
        if dra:
            findings.append(dra)
        for app, (_role, label, _words, _kind) in COMPONENTS.items():
            if label and labels.get(label) == "true" and app not in present \
                    and all(labels.get(r) == "true" for r in REQUIRES.get(app, ())):
                findings.append(_missing(app, node, ns))

    findings.sort(key=lambda f: _SEVERITY[f["severity"]])  # stable: pods by name, then components in order
    summary = [{"name": p["name"], "component": p["app"], "phase": p["phase"], "ready": p["ready"],
                "restarts": sum(c["restarts"] for c in p["containers"]), "reasons": _reasons(p)} for p in here]
    return {"findings": findings, "pods": summary}
