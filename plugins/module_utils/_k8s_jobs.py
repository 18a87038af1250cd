# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
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

NAME_MAX = 63
NODE_LABEL = "gpuops.nvidia/node"


def _digest(text, n):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def job_name(prefix, key, node):
    """``<prefix>-<key8>-<node>``, shortened to 63 characters with a hash of the node name."""
    head = "{}-{}-".format(prefix, _digest(str(key), 8))
    tail = re.sub(r"[^a-z0-9-]", "-", node.lower()).strip("-") or "node"
    if len(head) + len(tail) > NAME_MAX or tail != node:
        room = NAME_MAX - len(head) - 9
        if room < 1:
            raise ValueError("job name prefix {!r} leaves no room for the node name".format(prefix))
        tail = tail[:room].rstrip("-") + "-" + _digest(node, 8)
    return head + tail


def node_label_value(node):
    """The node name as a label value (63 characters, alphanumerics at both ends)."""
    if len(node) <= NAME_MAX and re.match(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$", node):
        return node
    return _digest(node, 16)


def jobs(nodes, prefix, key):
    """Sorted node names -> [{name, node, node_label}] for the Jobs the play wants."""
    out = [{"name": job_name(prefix, key, n), "node": n, "node_label": node_label_value(n)}
           for n in sorted(set(nodes or []))]
    names = [j["name"] for j in out]
    if len(set(names)) != len(names):  # cannot happen with the hash; guard anyway
        raise ValueError("two nodes map to the same validation Job name")
    return out


def job_state(job):
    """A Job resource (dict) -> 'complete' | 'failed' | 'running'."""
    conds = (job.get("status") or {}).get("conditions") or []
    for c in conds:
        if c.get("status") == "True" and c.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "complete"
    for c in conds:
        if c.get("status") == "True" and c.get("type") in ("Failed", "FailureTarget"):
            return "failed"
    return "running"


def outcomes(resources, wanted):
    """Job resources + wanted Job names -> {complete: [nodes], failed: [nodes], running: [nodes],
    stale: [job names not wanted], missing: [wanted job names not found]}; node names come
    from the Job's node annotation."""
    wanted = set(wanted or [])
    out = {"complete": [], "failed": [], "running": [], "stale": [], "missing": []}
    seen = set()
    for r in resources or []:
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
    for n in nodes or []:
        (with_gpus if gpu_allocatable(n) > 0 else without).append(n["metadata"]["name"])
    return sorted(with_gpus), sorted(without)
