# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Rolling driver upgrade: the pure decisions of playbooks/driver_upgrade.yml (controller side only).

* ``parse_max_unavailable``: ``gpu_upgrade_max_unavailable`` (a count, or a percent string) -> the
  value given to the play's ``serial:`` (an int >= 1, or ``"N%"`` with 0 < N <= 100); anything else
  is refused with a message naming the value.
* ``batch_size`` / ``batches``: the batches Ansible's ``serial:`` makes of the target nodes (a
  percent is taken of the node count and rounded *down*, at least 1, as Ansible does), so the plan
  printed before the rollout is the one that runs.
* ``blocking_vmis``: KubeVirt VirtualMachineInstances that cannot live-migrate because they hold a
  host device (PCI passthrough: ``spec.domain.devices.hostDevices``; passthrough or vGPU:
  ``spec.domain.devices.gpus``), per node.

No Ansible import: plain data in, plain data out, errors as ``UpgradeInputError``.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError

STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
# The values the GPU Operator's upgrade controller (k8s-operator-libs) writes to STATE_LABEL.
STATES = (
    "upgrade-required", "cordon-required", "wait-for-jobs-required", "pod-deletion-required",
    "drain-required", "node-maintenance-required", "post-maintenance-required", "pod-restart-required",
    "validation-required", "uncordon-required", "upgrade-done", "upgrade-failed",
)

# ASCII digits, at most 6 of them: int() of a longer string is slow, and Unicode digits are no count here
_PERCENT = re.compile(r"\s*([0-9]{1,6})\s*%\s*")
_COUNT = re.compile(r"\s*[+]?([0-9]{1,6})\s*")


class UpgradeInputError(InputError):
    """Input the upgrade refuses; the message says what and why."""


def _refuse(value, why):
    raise UpgradeInputError(
        "gpu_upgrade_max_unavailable must be a count >= 1 or a percent in 1%%..100%% (e.g. 1, 2, \"25%%\"); "
        "got %r: %s" % (value, why))


def parse_max_unavailable(value):
    """-> int >= 1, or "N%" (1 <= N <= 100). Booleans, floats, 0, negatives, > 100%, garbage: refused."""
    if isinstance(value, bool) or value is None:
        _refuse(value, "not a number")
    if isinstance(value, int):
        if value < 1:
            _refuse(value, "0 or fewer nodes at a time would never upgrade anything")
        return value
    if isinstance(value, float):
        if value.is_integer():
            if value < 1:
                _refuse(value, "0 or fewer nodes at a time would never upgrade anything")
            return int(value)
        _refuse(value, "a count must be a whole number")
    if not isinstance(value, str):
        _refuse(value, "not a number or a percent string")
    m = _PERCENT.fullmatch(value)
    if m:
        pct = int(m.group(1))
        if pct < 1:
            _refuse(value, "0% would never upgrade anything")
        if pct > 100:
            _refuse(value, "more than 100% of the nodes")
        return "%d%%" % pct
    m = _COUNT.fullmatch(value)
    if m:
        if int(m.group(1)) < 1:
            _refuse(value, "0 or fewer nodes at a time would never upgrade anything")
        return int(m.group(1))
    if value.strip().startswith("-"):
        _refuse(value, "0 or fewer nodes at a time would never upgrade anything")
    _refuse(value, "not a number or a percent string")
    return None  # not reached


def batch_size(value, nodes):
    """Nodes per batch for ``nodes`` target nodes, as Ansible's ``serial:`` computes it."""
    parsed = parse_max_unavailable(value)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 0:
        raise UpgradeInputError("node count must be an integer >= 0, got %r" % (nodes,))
    if isinstance(parsed, int):
        return parsed
    return max(1, int(int(parsed[:-1]) / 100.0 * nodes))


def batches(hosts, value):
    """The target hosts in the batches the rollout runs them in (inventory order kept)."""
    if isinstance(hosts, (str, bytes, dict)) or not isinstance(hosts, Iterable):
        raise UpgradeInputError("hosts must be a list of host names, got %s" % type(hosts).__name__)
    hosts = list(hosts)  # Jinja's map/select hand over generators
    bad = [h for h in hosts if not isinstance(h, str)]
    if bad:
        raise UpgradeInputError("hosts must be host names, got %r" % (bad[0],))
    size = batch_size(value, len(hosts))
    return [hosts[i:i + size] for i in range(0, len(hosts), size)]


def _devices(vmi):
    devices = ((vmi.get("spec") or {}).get("domain") or {}).get("devices") or {}
    out = []
    for key in ("hostDevices", "gpus"):
        for d in devices.get(key) or []:
            d = d or {}
            out.append("%s:%s" % (key, d.get("deviceName") or d.get("name") or "?"))
    return out


def vmi_node(vmi):
    """Node a VMI runs on: status.nodeName, else KubeVirt's kubevirt.io/nodeName label."""
    status = vmi.get("status") or {}
    labels = (vmi.get("metadata") or {}).get("labels") or {}
    return status.get("nodeName") or labels.get("kubevirt.io/nodeName")


def blocking_vmis(vmis):
    """{node: [{namespace, name, devices}]} of VMIs with host devices or GPUs (cannot live-migrate).

    VMIs that are finished (phase Succeeded/Failed) or not placed on a node are left out."""
    if vmis is None:
        return {}
    if isinstance(vmis, (dict, str, bytes)) or not isinstance(vmis, Iterable):
        raise UpgradeInputError("expected the list of VirtualMachineInstance objects (k8s_info resources), got %s"
                                % type(vmis).__name__)
    vmis = list(vmis)
    out = {}
    for i, vmi in enumerate(vmis):
        if not isinstance(vmi, dict):
            raise UpgradeInputError("VirtualMachineInstance [%d] is a %s, not an object" % (i, type(vmi).__name__))
        if (vmi.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        node = vmi_node(vmi)
        devices = _devices(vmi)
        if not node or not devices:
            continue
        meta = vmi.get("metadata") or {}
        out.setdefault(node, []).append(
            {"namespace": meta.get("namespace"), "name": meta.get("name"), "devices": devices})
    for node in out:
        out[node].sort(key=lambda v: (v["namespace"] or "", v["name"] or ""))
    return out


def pods_left(pods):
    """Pods a drain should have removed but that are still on the node, as "namespace/name" (sorted):
    everything except DaemonSet pods, mirror (static) pods and finished pods (Succeeded/Failed)."""
    if pods is None:
        return []
    if isinstance(pods, (dict, str, bytes)) or not isinstance(pods, Iterable):
        raise UpgradeInputError("expected the list of Pod objects (k8s_info resources), got %s" % type(pods).__name__)
    out = []
    for i, pod in enumerate(pods):
        if not isinstance(pod, dict):
            raise UpgradeInputError("Pod [%d] is a %s, not an object" % (i, type(pod).__name__))
        meta = pod.get("metadata") or {}
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
            continue
        if any((ref or {}).get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
            continue
        out.append("%s/%s" % (meta.get("namespace"), meta.get("name")))
    return sorted(out)
