# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Server-side apply of many objects at once: the logic of the ``k8s_bulk_apply`` module.

Why not ``kubernetes.core.k8s`` with a list: it applies one object after the other and reads each
one before its PATCH, two round trips per object in series; at 1,000 nodes that is 2,000 requests
one after the other for node labels alone (benchmarks/cluster_deploy). Here, per group of objects
of one kind (and namespace) one read (a LIST, or a GET for a single object), then a PATCH only for
the objects that are not already as wanted, ``concurrency`` at a time.

"As wanted" (``in_sync``) is what server-side apply itself would find: our field manager's
applied field set is exactly the manifest's fields, and every field has the manifest's value.
An object in sync is not sent at all. For the others, ``changed`` compares the object before and
after at the fields involved (ours before and after) and our manager's field set, never the
resourceVersion: a Node's status heartbeat between the read and the PATCH moves that without any
change of ours.

Only the I/O is given from outside (``Applier(read, apply)``), so the logic is tested without a
cluster and the module decides how to reach the API server. Targets run this file: stdlib only.
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import ApplyError, InputError

# never part of a manifest's field set: they name the object
_IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}
_LIST_KEYS = ("k:", "v:", "i:")


class PartialApply(ApplyError):
    """Some objects could not be applied; the others were (nothing to roll back: each apply is whole)."""

    result_fields = ("created", "updated", "unchanged", "failed")


def object_id(obj):
    """'Kind/name' or 'Kind/namespace/name'."""
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return "%s/%s%s" % (obj["kind"], ns + "/" if ns else "", meta["name"])


def check_objects(objects):
    """Every object names apiVersion, kind and metadata.name, none twice. InputError lists them all."""
    errors, seen = [], set()
    if not isinstance(objects, list):
        raise InputError("objects must be a list of manifests, got %s" % type(objects).__name__)
    for i, obj in enumerate(objects):
        if not isinstance(obj, dict):
            errors.append("objects[%d] is not a mapping: %r" % (i, obj))
            continue
        meta = obj.get("metadata")
        bad = [k for k in ("apiVersion", "kind") if not isinstance(obj.get(k), str) or not obj.get(k)]
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta.get("name"):
            bad.append("metadata.name")
        elif meta.get("namespace") is not None and (not isinstance(meta["namespace"], str) or not meta["namespace"]):
            bad.append("metadata.namespace")
        if bad:
            errors.append("objects[%d] has no valid %s" % (i, ", ".join(bad)))
            continue
        key = (obj["apiVersion"], object_id(obj))
        if key in seen:
            errors.append("objects[%d]: %s is given twice" % (i, object_id(obj)))
        seen.add(key)
    if errors:
        raise InputError("cannot apply: " + "; ".join(errors), errors=errors)
    return objects


# Kinds others refer to go first, workloads last: a Namespace and a CRD exist before what is in them or
# of their kind, and a DaemonSet's ServiceAccount, ConfigMaps and RBAC before its pods start (they would
# fail and back off otherwise). Each wave is read and applied before the next is read.
FIRST_KINDS = ("Namespace", "CustomResourceDefinition", "PriorityClass", "RuntimeClass", "StorageClass")
LAST_KINDS = ("DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job", "CronJob", "Pod")


def waves(objects):
    """The objects in up to three waves (FIRST_KINDS, the others, LAST_KINDS), first-seen order in each."""
    out = ([], [], [])
    for obj in objects:
        out[0 if obj["kind"] in FIRST_KINDS else 2 if obj["kind"] in LAST_KINDS else 1].append(obj)
    return [w for w in out if w]


def groups(objects):
    """{(apiVersion, kind, namespace or None): [objects]}, in first-seen order."""
    out = {}
    for obj in objects:
        out.setdefault((obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace")), []).append(obj)
    return out


def leaf_paths(obj, path=()):
    """The fields a manifest sets: paths to scalars and lists (lists are one field); empty maps set nothing."""
    out = set()
    for key, value in obj.items():
        here = path + (key,)
        if here in _IDENTITY:
            continue
        if isinstance(value, dict):
            out |= leaf_paths(value, here)
        else:
            out.add(here)
    return out


def _walk_fields(fields, path):
    children = [k for k in fields if k != "."]
    if not children or any(k.startswith(_LIST_KEYS) for k in children):
        # a leaf, or a list the server tracks item by item: the list is one field for us
        return {path}
    out = set()
    for k in children:
        if k.startswith("f:"):
            out |= _walk_fields(fields[k] or {}, path + (k[2:],))
    return out


def owned_paths(live, manager):
    """The fields ``manager`` applied (managedFields entries of operation Apply, main resource)."""
    out = set()
    for entry in ((live or {}).get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") != manager or entry.get("operation") != "Apply" or entry.get("subresource"):
            continue
        for k, sub in (entry.get("fieldsV1") or {}).items():
            if k.startswith("f:"):
                out |= _walk_fields(sub or {}, (k[2:],))
    return out


_MISSING = object()


def value_at(obj, path):
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return _MISSING
        obj = obj[key]
    return obj


# what the API server leaves out of an object it serializes (omitempty): a list item's ``value: ""`` comes
# back without the key
_EMPTY = ("", {}, [])


def matches(want, have):
    """``have`` carries ``want``: maps key by key (the server may add defaults, and leaves out empty
    values), lists item by item."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(
            matches(v, have[k]) if k in have else any(v == e and type(v) is type(e) for e in _EMPTY)
            for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(matches(w, h) for w, h in zip(want, have))
    return want == have and type(want) is type(have)


def in_sync(obj, live, manager):
    """Would applying ``obj`` change nothing? (our field set equal, every value already there)"""
    if live is None:
        return False
    owned = owned_paths(live, manager)
    paths, atomic = set(), set()
    for path in leaf_paths(obj):
        # an atomic map (a roleRef, a label selector, a nodeSelector) is one field in managedFields
        whole = next((path[:i] for i in range(1, len(path)) if path[:i] in owned), None)
        if whole is None:
            paths.add(path)
        else:
            atomic.add(whole)
    if paths | atomic != owned:
        return False
    # the server replaces an atomic map whole: it must be exactly the manifest's
    return all(matches(value_at(obj, p), value_at(live, p)) for p in paths) and all(
        value_at(obj, p) == value_at(live, p) for p in atomic)


def _manager_fields(live, manager):
    return [(e.get("apiVersion"), e.get("fieldsV1")) for e in ((live or {}).get("metadata") or {}).get("managedFields") or []
            if e.get("manager") == manager and e.get("operation") == "Apply" and not e.get("subresource")]


def view(live, paths):
    """The object reduced to ``paths`` (nested mappings), for a diff a person reads."""
    out = {}
    for path in sorted(paths):
        value = value_at(live, path)
        if value is _MISSING:
            continue
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def changed(obj, before, after, manager):
    """Did the PATCH change the object? Fields involved (wanted, ours before, ours after) and our field set."""
    if before is None:
        return True
    paths = leaf_paths(obj) | owned_paths(before, manager) | owned_paths(after, manager)
    return view(before, paths) != view(after, paths) or _manager_fields(before, manager) != _manager_fields(after, manager)


def check_concurrency(concurrency):
    """Requests in flight at once: an integer from 1 to 256 (InputError otherwise); returned as given."""
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or not 1 <= concurrency <= 256:
        raise InputError("concurrency must be an integer from 1 to 256, got %r" % (concurrency,))
    return concurrency


def _text(value):
    return json.dumps(value, indent=2, sort_keys=True) + "\n" if value is not None else ""


#: the workload kinds whose rollout a wait checks (``rollout_view``)
ROLLOUT_KINDS = ("DaemonSet", "Deployment")


def rollout_view(live):
    """What a rollout check needs of a DaemonSet or Deployment as the API server showed it: what names it, its
    generation (and deletion), a Deployment's replicas, and its status."""
    meta = live.get("metadata") or {}
    out = {"apiVersion": live.get("apiVersion"), "kind": live.get("kind"),
           "metadata": {k: meta[k] for k in ("name", "namespace", "generation", "deletionTimestamp") if k in meta},
           "status": live.get("status") or {}}
    if "replicas" in (live.get("spec") or {}):
        out["spec"] = {"replicas": live["spec"]["replicas"]}
    return out


class Applier:
    """Apply ``objects`` with server-side apply.

    read(api_version, kind, namespace, names) -> ({name: live object}, requests made): one read for the group
    (a GET, or a LIST in pages).
    apply(obj) -> the object as the server answers the apply PATCH (dry run in check mode is the caller's
    choice); raises on failure.
    """

    def __init__(self, read, apply, manager, concurrency=16):
        if not isinstance(manager, str) or not manager:
            raise InputError("field_manager must be a non-empty string")
        self.read, self.apply, self.manager, self.concurrency = read, apply, manager, check_concurrency(concurrency)

    def run(self, objects):
        check_objects(objects)
        todo_all, done, reads, skipped, synced, kept = 0, [], 0, [], 0, []
        for wave in waves(objects):
            if any(error is not None for *_rest, error in done):
                # what the failed objects were for (a namespace, a CRD, a ServiceAccount) may not be there:
                # the objects of the later waves are not sent
                skipped.extend(wave)
                continue
            plan = []
            for (api_version, kind, ns), objs in groups(wave).items():
                if any(error is not None for *_rest, error in done):
                    skipped.extend(objs)
                    continue
                try:
                    live, made = self.read(api_version, kind, ns, [o["metadata"]["name"] for o in objs])
                except Exception as e:  # pylint: disable=broad-except  # the group fails, what was applied stays listed
                    if not done and not plan:
                        raise  # nothing sent yet: the read's own error
                    done.extend((obj, None, None, e) for obj in objs)
                    continue
                reads += made
                for obj in objs:
                    before = live.get(obj["metadata"]["name"])
                    plan.append((obj, before, in_sync(obj, before, self.manager)))
            todo = [(obj, before) for obj, before, ok in plan if not ok]
            kept.extend((obj, before) for obj, before, ok in plan if ok)
            todo_all, synced = todo_all + len(todo), synced + len(plan) - len(todo)
            done.extend(self._apply_all(todo))
        result = {"changed": False, "in_sync": synced, "applied": todo_all,
                  "created": [], "updated": [], "unchanged": [], "failed": [],
                  "requests": {"read": reads, "apply": todo_all},
                  "rollouts": [rollout_view(live) for obj, live in kept + [(o, a) for o, _b, a, e in done if e is None]
                               if obj["kind"] in ROLLOUT_KINDS and live is not None]}
        diffs = []
        for obj, before, after, error in done:
            oid = object_id(obj)
            if error is not None:
                result["failed"].append({"object": oid, "error": str(error)})
                continue
            if not changed(obj, before, after, self.manager):
                result["unchanged"].append(oid)
                continue
            result["created" if before is None else "updated"].append(oid)
            paths = leaf_paths(obj) | owned_paths(before, self.manager) | owned_paths(after, self.manager)
            diffs.append({"before": _text(view(before, paths)) if before is not None else "",
                          "after": _text(view(after, paths)), "before_header": oid, "after_header": oid})
        result["failed"].extend({"object": object_id(obj), "error": "not sent: an object it may need failed before it"}
                                for obj in skipped)
        result["changed"] = bool(result["created"] or result["updated"])
        if result["failed"]:
            shown = "; ".join("%s: %s" % (f["object"], f["error"].splitlines()[0] if f["error"] else "")
                              for f in result["failed"][:10])
            exc = PartialApply("%d of %d object(s) could not be applied (the others were): %s%s" % (
                len(result["failed"]), len(objects) - synced, shown, " ..." if len(result["failed"]) > 10 else ""))
            for key in PartialApply.result_fields:
                setattr(exc, key, result[key])
            raise exc
        return result, diffs

    def _apply_all(self, todo):
        def one(item):
            obj, before = item
            try:
                return obj, before, self.apply(obj), None
            except Exception as e:  # pylint: disable=broad-except  # reported per object by run()
                return obj, before, None, e

        if not todo:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(todo))) as pool:
            return list(pool.map(one, todo))


# --- many reads in one module run (k8s_bulk_info) ---

_QUERY_KEYS = {"api_version": str, "kind": str, "namespace": str, "name": str,
               "label_selectors": list, "field_selectors": list, "fields": list, "field_managers": list}
# kept by every projection: what names the object
_ALWAYS = (("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace"))


def project(obj, fields, field_managers=None):
    """The object cut down to ``fields`` (dotted paths, each kept whole) and what names it; None: all of it.

    ``field_managers``: of metadata.managedFields, only the entries of these managers (a Node's status
    updates alone are most of its managedFields).

    A read of 1,000 Nodes answered whole is megabytes the controller parses and copies (the validator's reads
    took 29 s at 1,000 nodes); the fields a filter needs are a fraction of that.
    """
    if field_managers is not None and isinstance((obj.get("metadata") or {}).get("managedFields"), list):
        meta = dict(obj["metadata"], managedFields=[m for m in obj["metadata"]["managedFields"]
                                                    if isinstance(m, dict) and m.get("manager") in field_managers])
        obj = dict(obj, metadata=meta)
    if fields is None:
        return obj
    out = {}
    for path in list(_ALWAYS) + [tuple(f.split(".")) for f in fields]:
        node = obj
        for key in path:
            if not isinstance(node, dict) or key not in node:
                break
            node = node[key]
        else:
            into = out
            for key in path[:-1]:
                into = into.setdefault(key, {})
            into[path[-1]] = node
    return out


def check_queries(queries):
    """{result name: query}: every query names a kind, keys and types as documented. InputError lists them all.

    Returns the queries with defaults (api_version v1, no namespace, name or selectors).
    """
    if not isinstance(queries, dict) or not queries:
        raise InputError("queries must be a non-empty mapping of result names to queries, got %r" % (queries,))
    errors, out = [], {}
    for key, query in queries.items():
        if not isinstance(query, dict):
            errors.append("%s is not a mapping: %r" % (key, query))
            continue
        unknown = sorted(set(query) - set(_QUERY_KEYS))
        if unknown:
            errors.append("%s: unknown key(s) %s (known: %s)" % (key, ", ".join(unknown), ", ".join(sorted(_QUERY_KEYS))))
        want = dict({"api_version": "v1", "namespace": None, "name": None,
                     "label_selectors": [], "field_selectors": [], "fields": None, "field_managers": None},
                    **query)
        for field, kind in _QUERY_KEYS.items():
            value = want.get(field)
            if value is None and field != "kind":
                continue
            if not isinstance(value, kind) or (kind is str and not value) \
                    or (kind is list and not all(isinstance(v, str) and v for v in value)):
                errors.append("%s: %s must be %s, got %r" % (
                    key, field, "a non-empty string" if kind is str else "a list of non-empty strings", value))
        if want.get("name") and (want["label_selectors"] or want["field_selectors"]):
            errors.append("%s: name and selectors exclude each other (a name reads one object)" % key)
        out[key] = want
    if errors:
        raise InputError("cannot read: " + "; ".join(errors), errors=errors)
    return out


def read_all(queries, read, concurrency=16):
    """Run every checked query at once: {key: {"resources": [...], "api_found": bool}}.

    read(query) -> (api_found, [objects]): one request (a GET by name, else a LIST with the selectors);
    an object named and not there is an empty list, a kind the server does not serve is api_found False.
    Each object is cut down to the query's ``fields`` and ``field_managers`` (project()).
    The first failing query's error is raised, after every query has ended.
    """
    keys = list(queries)
    check_concurrency(concurrency)

    def one(key):
        try:
            found, items = read(queries[key])
            query = queries[key]
            items = [project(o, query["fields"], query["field_managers"]) for o in items]
            return key, {"resources": items, "api_found": found}, None
        except Exception as e:  # pylint: disable=broad-except  # raised below, after the others ended
            return key, None, e

    with ThreadPoolExecutor(max_workers=min(concurrency, len(keys))) as pool:
        answers = list(pool.map(one, keys))
    for _key, _answer, error in answers:
        if error is not None:
            raise error
    return {key: answer for key, answer, _error in answers}
