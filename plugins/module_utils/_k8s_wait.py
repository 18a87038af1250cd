# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Is an object done (a workload rolled out, a Job finished), and waiting for that in one module run.

A wait written as an Ansible ``until`` loop pays, per poll, a module start (a Python process, the
``kubernetes`` library's import, the API discovery: 0.7-1 s on a small controller) plus its ``delay``:
a rollout that ends just after a poll is seen up to ``delay`` + 1 s late, and every poll costs the
controller a second of CPU. ``wait()`` polls in the module run that made the first read: one list per
query per poll, the pause between polls the ``interval`` or twice as long as the last poll took,
whichever is longer (so a slow API server is never asked more than a third of the time), and it
returns as soon as every object is done.

Why polling, not a watch: a poll is one stateless LIST per query, the same requests the API
server's floor in ``benchmarks/cluster_deploy`` makes; a watch would need a resourceVersion kept
across reconnects, 410 Gone handled by a new list, and bookmarks, for a wait that lasts seconds to
minutes and reads a handful of DaemonSets or one Job per node.

Only the I/O and the clock come from outside (``wait(read, ...)``), so the logic is tested without a
cluster. Targets run this file: stdlib only.
"""
from __future__ import annotations

import time

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import InputError

#: condition -> what it checks
CONDITIONS = {
    "rolled_out": "every DaemonSet and Deployment updated and Ready as its controller last saw its spec",
    "finished": "every Job complete or failed",
}


#: condition -> the fields of an object it reads (kept in a waited query's ``fields``, whatever else it asks)
NEEDS = {
    "rolled_out": ["metadata.generation", "metadata.deletionTimestamp", "spec.replicas", "status"],
    "finished": ["status.conditions"],
}


def _name(obj):
    meta = obj.get("metadata") or {}
    return "%s/%s%s" % (obj.get("kind") or "?", meta["namespace"] + "/" if meta.get("namespace") else "",
                        meta.get("name"))


def job_state(job):
    """A Job (dict) -> 'complete' | 'failed' | 'running' (its conditions; success criteria count as complete)."""
    conds = (job.get("status") or {}).get("conditions") or []
    if not isinstance(conds, list) or not all(isinstance(c, dict) for c in conds):
        raise InputError("Job %s: status.conditions must be a list of mappings, got %r"
                         % ((job.get("metadata") or {}).get("name"), conds))
    for c in conds:
        if c.get("status") == "True" and c.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "complete"
    for c in conds:
        if c.get("status") == "True" and c.get("type") in ("Failed", "FailureTarget"):
            return "failed"
    return "running"


def rollout_pending(workload):
    """Why a DaemonSet or Deployment (dict) is not rolled out yet, or None when it is (or is being deleted).

    Rolled out: the controller has seen the current spec (observedGeneration), and every pod it wants is
    updated and Ready (DaemonSet: desired/updated/ready; Deployment: replicas/updated/available)."""
    meta, status, kind = workload.get("metadata") or {}, workload.get("status") or {}, workload.get("kind") or "DaemonSet"
    name = "%s/%s/%s" % (kind, meta.get("namespace", ""), meta.get("name"))
    if meta.get("deletionTimestamp"):
        return None
    if (status.get("observedGeneration") or 0) < (meta.get("generation") or 0):
        return "%s: spec not yet seen by its controller" % name
    if kind == "Deployment":
        want = (workload.get("spec") or {}).get("replicas", 1)
        have = {"updated": status.get("updatedReplicas") or 0, "available": status.get("availableReplicas") or 0}
    else:
        want = status.get("desiredNumberScheduled") or 0
        have = {"updated": status.get("updatedNumberScheduled") or 0, "ready": status.get("numberReady") or 0}
    short = {k: v for k, v in have.items() if v < want}
    if short:
        return "%s: %s of %d" % (name, ", ".join("%d %s" % (v, k) for k, v in short.items()), want)
    return None


def rollouts_pending(workloads):
    """DaemonSets and Deployments (dicts) -> ['Kind/namespace/name: why'] of those not rolled out."""
    return [why for why in (rollout_pending(w) for w in workloads) if why]


def _job_pending(job):
    return "%s: running" % _name(job) if job_state(job) == "running" else None


def _pending_one(obj, condition):
    if condition == "finished":
        return _job_pending(obj) if obj.get("kind") == "Job" else None
    return rollout_pending(obj) if obj.get("kind") in ("DaemonSet", "Deployment") else None


def check_wait(wait, queries):
    """The module's ``wait`` option, checked against the (checked) queries -> a dict with every key set.

    A waited query cut down to some ``fields`` gets the fields the condition reads added (NEEDS).

    InputError (listing every problem) for an unknown condition or key, a query not among ``queries``,
    names that are not strings, a timeout or interval that is not a positive number."""
    if not isinstance(wait, dict):
        raise InputError("wait must be a mapping (condition, queries, names, timeout, interval), got %r" % (wait,))
    errors = []
    unknown = sorted(set(wait) - {"condition", "queries", "names", "timeout", "interval"})
    if unknown:
        errors.append("unknown key(s) %s" % ", ".join(unknown))
    condition = wait.get("condition")
    if condition not in CONDITIONS:
        errors.append("condition must be one of %s, got %r" % (", ".join(sorted(CONDITIONS)), condition))
    which = wait.get("queries")
    if which is None:
        which = list(queries)
    elif not isinstance(which, list) or not all(isinstance(q, str) for q in which):
        errors.append("queries must be a list of query names, got %r" % (which,))
        which = []
    else:
        errors.extend("queries: %r is not one of the queries (%s)" % (q, ", ".join(queries))
                      for q in which if q not in queries)
    names = wait.get("names")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) and n for n in names)):
        errors.append("names must be a list of object names, got %r" % (names,))
        names = None
    out = {"condition": condition, "queries": which, "names": names}
    for key, default in (("timeout", 600), ("interval", 1)):
        value = wait.get(key, default)
        if value is None:
            value = default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86400:
            errors.append("%s must be a number of seconds from 0 to 86400 (not 0), got %r" % (key, value))
        out[key] = value
    if errors:
        raise InputError("wait: " + "; ".join(errors), errors=errors)
    for q in which:
        fields = queries[q].get("fields")
        if fields is not None:  # cut down to a few fields: keep what the condition reads as well
            queries[q]["fields"] = fields + [f for f in NEEDS[condition] if f not in fields]
    return out


def pending(reads, wait):
    """{query: {resources: [...]}} + a checked wait -> ['Kind/ns/name: why'] of what is not done yet.

    With ``names``, only the objects of those names count, and a name none of them has is pending
    ('name: not found'); without, every object the waited queries returned counts."""
    objects = [obj for q in wait["queries"] for obj in (reads.get(q) or {}).get("resources") or []]
    names = wait["names"]
    if names is not None:
        wanted = set(names)
        objects = [o for o in objects if (o.get("metadata") or {}).get("name") in wanted]
        found = {(o.get("metadata") or {}).get("name") for o in objects}
        missing = ["%s: not found" % n for n in names if n not in found]
    else:
        missing = []
    return missing + [why for why in (_pending_one(o, wait["condition"]) for o in objects) if why]


def wait_for(read, wait, clock=time.monotonic, sleep=time.sleep):
    """Poll ``read(deadline)`` (-> {query: {resources, api_found}}: one poll, every query) until nothing is pending.

    ``deadline`` is the ``clock()`` time ``wait['timeout']`` seconds after the first poll started: the whole wait,
    the polls included, ends by then. ``read`` cuts its requests to it; a poll it cuts short raises an error whose
    ``by_deadline`` is true, which ends the wait with the last complete poll (the first poll's error is raised).

    Returns (reads of the last complete poll, its pending, complete polls, seconds waited); pending is empty unless
    the deadline came first. The first poll is made at once; the pause after a poll is the interval or twice as
    long as the poll took, whichever is longer, but no later than the deadline less that time (so the last poll can
    end by it), and no poll starts when less time is left than the last one took."""
    start = clock()
    deadline = start + wait["timeout"]
    polls, last = 0, None
    while True:
        t = clock()
        try:
            reads = read(deadline)
        except Exception as exc:  # pylint: disable=broad-except  # re-raised unless the deadline cut the poll
            if last is None or not getattr(exc, "by_deadline", False):
                raise
            return last[0], last[1], polls, clock() - start
        polls += 1
        now = clock()
        took, left = now - t, pending(reads, wait)
        if not left or deadline - now <= took:
            return reads, left, polls, now - start
        last = (reads, left)
        sleep(min(max(wait["interval"], 2 * took), deadline - now - took))
