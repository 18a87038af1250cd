#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_bulk_apply
short_description: Server-side apply of many Kubernetes objects at once, skipping those already as wanted
version_added: 0.3.0
description:
  - Applies a list of manifests with server-side apply under one field manager, O(concurrency) requests at a
    time, with one read per kind and namespace (a LIST, or a GET for a single object) instead of a read per
    object.
  - An object is not sent at all when the field manager's applied fields are exactly the manifest's fields
    and every one already has the manifest's value (what the API server would find too). A no-op run
    therefore makes no write request.
  - C(changed) compares each object's fields involved (the manifest's, and the field manager's before and
    after) and the field manager's field set; status moving between the read and the write (a node's
    heartbeat) is not a change.
  - Built for fleets (node labels and taints of thousands of nodes, per-node Jobs). Deletions, waits and
    reads are left to C(kubernetes.core.k8s) and C(kubernetes.core.k8s_info).
  - Part of the action group C(gpuops.nvidia.k8s), which extends C(kubernetes.core.k8s); C(module_defaults)
    given for C(group/gpuops.nvidia.k8s) reach this module and every kubernetes.core k8s module. Defaults
    given only for C(group/kubernetes.core.k8s) do not reach this module.
  - Connection options and their environment variables are those of C(kubernetes.core); needs the
    C(kubernetes) Python library on the host the module runs on.
author:
  - gpuops.nvidia contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.k8s_auth
  - gpuops.nvidia.k8s_list
  - gpuops.nvidia.k8s_timeouts
attributes:
  check_mode:
    support: full
    details:
      - Every write is sent as a dry run (C(dryRun=All)); the server validates and answers as if applied.
      - An object in a Namespace, or of a CRD, that the same run would create cannot be dry-run (the dry run
        creates neither); it is reported as created, unvalidated.
  diff_mode:
    support: full
    details: One entry per changed object, the fields involved before and after.
  idempotent:
    support: full
options:
  objects:
    description:
      - The manifests (each with C(apiVersion), C(kind), C(metadata.name), and C(metadata.namespace) for
        namespaced kinds). The same object twice is refused before any request.
      - Applied in up to three waves, each read and applied before the next is read - Namespaces,
        CustomResourceDefinitions, PriorityClasses, RuntimeClasses and StorageClasses first; workloads
        (DaemonSet, Deployment, StatefulSet, ReplicaSet, Job, CronJob, Pod) last; every other kind
        between - so what a workload refers to exists before its pods start. Objects of a kind whose
        CRD is in the same list are applied once the API server serves that kind (up to 30 s).
      - When an object fails, the objects of the later waves are not sent (each is listed in C(failed)).
    type: list
    elements: dict
    required: true
  field_manager:
    description: The server-side apply field manager. Fields it applied before and not given now are removed.
    type: str
    required: true
  force_conflicts:
    description: Take over fields another manager owns (otherwise such an object fails with a conflict).
    type: bool
    default: false
  concurrency:
    description: Writes in flight at once (1-256).
    type: int
    default: 16
notes:
  - Objects are applied whole one by one; when some fail the others stay applied (a rerun finishes the
    rest) and the failure lists each failed object with the API server's answer.
seealso:
  - module: kubernetes.core.k8s
"""

EXAMPLES = r"""
- name: Label and taint the GPU nodes (only the nodes that differ are written)
  gpuops.nvidia.k8s_bulk_apply:
    field_manager: gpuops-node-labels
    force_conflicts: true
    objects:
      - apiVersion: v1
        kind: Node
        metadata: {name: gpu-1, labels: {nvidia.com/gpu.deploy.device-plugin: "true"}}
        spec: {taints: []}
"""

RETURN = r"""
created:
  description: Objects created (C(Kind/name) or C(Kind/namespace/name)).
  type: list
  elements: str
  returned: always
updated:
  description: Objects the apply changed.
  type: list
  elements: str
  returned: always
unchanged:
  description: Objects sent whose apply changed nothing.
  type: list
  elements: str
  returned: always
in_sync:
  description: How many objects were already as wanted and not sent.
  type: int
  returned: always
applied:
  description: How many objects were sent.
  type: int
  returned: always
failed:
  description: Objects the API server refused, with its answer.
  type: list
  elements: dict
  returned: on failure
requests:
  description: Requests made, C(read) (one per kind and namespace; a LIST of more than O(list_page_size) objects one
    per page) and C(apply) (one per object sent).
  type: dict
  returned: always
rollouts:
  description:
    - The DaemonSets and Deployments among O(objects) as the API server last showed them - the apply's answer
      for one sent, the read for one in sync - cut down to what a rollout check needs (C(apiVersion), C(kind),
      C(metadata.name), C(metadata.namespace), C(metadata.generation), a Deployment's C(spec.replicas),
      C(status)); the C(gpuops.nvidia.k8s_rollouts_pending) filter reads them.
    - A workload just written shows the status of before the write (its controller has not seen the new
      generation yet), so it reads as pending until it is read again; one in sync shows its current status, so
      a no-op run knows without another read whether everything is rolled out.
  type: list
  elements: dict
  returned: always
  version_added: 0.3.0
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils import _diff
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError, HostError, fail
from ansible_collections.gpuops.nvidia.plugins.module_utils._k8s_bulk import Applier, check_objects
from ansible_collections.gpuops.nvidia.plugins.module_utils._k8s_client import (
    api_error, connect, connection_spec, list_items, list_spec, timeout_spec)

try:
    from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError
except ImportError:
    pass  # connect() says the library is missing


def argument_spec():
    spec = dict(
        objects=dict(type="list", elements="dict", required=True),
        field_manager=dict(type="str", required=True),
        force_conflicts=dict(type="bool", default=False),
        concurrency=dict(type="int", default=16),
    )
    spec.update(connection_spec())
    spec.update(list_spec())
    spec.update(timeout_spec())
    return spec


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    p = module.params

    def check():
        applier = Applier(None, None, p["field_manager"], p["concurrency"])
        check_objects(p["objects"])
        return applier

    applier, dyn = connect(module, check, p["concurrency"])
    resources = {}
    # a kind whose CRD this same run applies is served once the CRD is established (a second or so)
    with_crds = any(o["kind"] == "CustomResourceDefinition" for o in p["objects"])

    def resource(api_version, kind):
        deadline = time.monotonic() + (30 if with_crds and not module.check_mode else 0)
        while (api_version, kind) not in resources:
            try:
                resources[(api_version, kind)] = dyn.resources.get(api_version=api_version, kind=kind)
            except ResourceNotFoundError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(1)
                dyn.resources.invalidate_cache()
        return resources[(api_version, kind)]

    # check mode sends dry runs: a Namespace or CRD of this same run is not created by them, so what is in
    # that namespace, or of that kind, cannot be dry-run; it is reported as it would be created
    run_namespaces = {o["metadata"]["name"] for o in p["objects"] if o["kind"] == "Namespace"}

    def not_there_yet(obj, exc):
        if not module.check_mode:
            return False
        if isinstance(exc, ResourceNotFoundError):
            return with_crds
        return isinstance(exc, NotFoundError) and obj["metadata"].get("namespace") in run_namespaces

    def read(api_version, kind, namespace, names):
        try:
            res = resource(api_version, kind)
        except ResourceNotFoundError:
            if module.check_mode and with_crds:
                return {}, 0
            raise
        ns = namespace if res.namespaced else None
        try:
            if len(names) == 1:
                try:
                    one = json.loads(dyn.request("get", res.path(name=names[0], namespace=ns), serialize=False).data)
                except NotFoundError:
                    return {}, 1
                return {names[0]: one}, 1
            items, made = list_items(dyn, res.path(namespace=ns), p["list_page_size"])
        except Exception as exc:  # pylint: disable=broad-except
            raise HostError("cannot read %s %s: %s" % (kind, "in " + ns if ns else "", api_error(exc)))
        wanted = set(names)
        return {o["metadata"]["name"]: o for o in items if o["metadata"]["name"] in wanted}, made

    def apply(obj):
        try:
            res = resource(obj["apiVersion"], obj["kind"])
            resp = dyn.server_side_apply(res, body=obj, name=obj["metadata"]["name"],
                                         namespace=obj["metadata"].get("namespace") if res.namespaced else None,
                                         force_conflicts=p["force_conflicts"], field_manager=p["field_manager"],
                                         dry_run="All" if module.check_mode else None, serialize=False)
        except Exception as exc:  # pylint: disable=broad-except
            if not_there_yet(obj, exc):
                return obj
            raise HostError(api_error(exc))
        return json.loads(resp.data)

    applier.read, applier.apply = read, apply
    try:
        result, diffs = applier.run(p["objects"])
    except GpuopsError as exc:
        fail(module, exc)
    except Exception as exc:  # pylint: disable=broad-except  # discovery: an unknown kind or API version
        fail(module, HostError("cannot apply: %s" % exc))
    _diff.exit_json(module, result, diffs)


if __name__ == "__main__":
    main()
