# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Per-node validation Jobs: names and outcomes.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.

A validation Job runs to completion on one node. Its pod template is immutable, so the
Job name carries a short key of everything in the template (image, checks, options):
an unchanged play re-applies the same Jobs (no change), a new validator image or a
changed check set makes new Jobs (a fresh validation) and the old ones are deleted.
Job names must also be valid label values (the Job controller copies them into
``job-name``), so they are at most 63 characters; long node names are shortened with a
hash of the full name so two nodes never share a Job.
"""
from __future__ import annotations

import hashlib
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError
# what a Job's state is: shared with the modules that wait in their own run (k8s_bulk_info's wait)
from ansible_collections.gpuops.nvidia.plugins.module_utils._k8s_wait import job_state

NAME_MAX = 63
NODE_LABEL = "gpuops.nvidia/node"


class JobsInputError(InputError):
    """Names or resources of the wrong shape; the message says which."""


#: a DNS-1123 label, what a Job name prefix must be
PREFIX_RE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?\Z")


def _names(values, what):
    """A list of non-empty strings (any iterable but a string or a mapping); ValueError otherwise."""
    if values is None:
        return []
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise JobsInputError("{} must be a list of names, got {} {!r}".format(what, type(values).__name__, values))
    out = list(values)
    bad = [v for v in out if not isinstance(v, str) or not v]
    if bad:
        raise JobsInputError("{} must be a list of names (non-empty strings), got {!r}".format(what, bad))
    return out


def _resource(r, what, i):
    if not isinstance(r, dict):
        raise JobsInputError("{}[{}] must be a Kubernetes resource (a mapping), got {!r}".format(what, i, r))
    meta = r.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise JobsInputError("{}[{}] has no metadata.name".format(what, i))
    for key in ("status", "spec"):
        if r.get(key) is not None and not isinstance(r[key], dict):
            raise JobsInputError("{}[{}] ({}): {} must be a mapping, got {!r}".format(what, i, meta["name"], key, r[key]))
    return r


def _resources(values, what):
    if values is None:
        return []
    if not isinstance(values, (list, tuple)):
        raise JobsInputError("{} must be a list of Kubernetes resources (k8s_info's resources), got {} {!r}"
                             .format(what, type(values).__name__, values))
    return [_resource(r, what, i) for i, r in enumerate(values)]


def _digest(text, n):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def job_name(prefix, key, node):
    """``<prefix>-<key8>-<node>``, shortened to 63 characters with a hash of the node name."""
    head = "{}-{}-".format(prefix, _digest(str(key), 8))
    tail = re.sub(r"[^a-z0-9-]", "-", node.lower()).strip("-") or "node"
    if len(head) + len(tail) > NAME_MAX or tail != node:
        room = NAME_MAX - len(head) - 9
        if room < 1:
            raise JobsInputError("job name prefix {!r} leaves no room for the node name".format(prefix))
        tail = tail[:room].rstrip("-") + "-" + _digest(node, 8)
    return head + tail


def node_label_value(node):
    """The node name as a label value (63 characters, alphanumerics at both ends)."""
    if len(node) <= NAME_MAX and re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", node):
        return node
    return _digest(node, 16)


def jobs(nodes, prefix, key):
    """Sorted node names -> [{name, node, node_label}] for the Jobs the play wants."""
    nodes = _names(nodes, "nodes")
    if not isinstance(prefix, str) or not PREFIX_RE.match(prefix) or len(prefix) > 40:
        raise JobsInputError("the Job name prefix must be a DNS label of at most 40 characters (lower-case letters, "
                             "digits, '-'), got {!r}".format(prefix))
    out = [{"name": job_name(prefix, key, n), "node": n, "node_label": node_label_value(n)}
           for n in sorted(set(nodes or []))]
    names = [j["name"] for j in out]
    if len(set(names)) != len(names):  # cannot happen with the hash; guard anyway
        raise JobsInputError("two nodes map to the same validation Job name")
    return out


def outcomes(resources, wanted):
    """Job resources + wanted Job names -> {complete: [nodes], failed: [nodes], running: [nodes],
    stale: [job names not wanted], missing: [wanted job names not found]}; node names come
    from the Job's node annotation."""
    wanted = set(_names(wanted, "wanted Job names"))
    out = {"complete": [], "failed": [], "running": [], "stale": [], "missing": []}
    seen = set()
    for r in _resources(resources, "Job resources"):
        meta = r.get("metadata") or {}
        name = meta.get("name")
        if name not in wanted:
            out["stale"].append(name)
            continue
        seen.add(name)
        node = (meta.get("annotations") or {}).get(NODE_LABEL) or name
        out[job_state(r)].append(node)
    out["missing"] = sorted(wanted - seen)
    return {k: sorted(v) for k, v in out.items()}


def gpu_allocatable(node):
    """Node resource (dict) -> GPUs it advertises (nvidia.com/gpu plus nvidia.com/mig-* resources)."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    if not isinstance(alloc, dict):
        raise JobsInputError("Node {}: status.allocatable must be a mapping, got {!r}"
                             .format((node.get("metadata") or {}).get("name"), alloc))
    total = 0
    for key, value in alloc.items():
        if key == "nvidia.com/gpu" or key.startswith("nvidia.com/mig-"):
            try:
                total += int(str(value))
            except ValueError:
                continue
    return total


def split_by_gpu_allocatable(nodes):
    """Node resources -> (names advertising GPUs, names advertising none), each sorted."""
    with_gpus, without = [], []
    for n in _resources(nodes, "Node resources"):
        (with_gpus if gpu_allocatable(n) > 0 else without).append(n["metadata"]["name"])
    return sorted(with_gpus), sorted(without)
