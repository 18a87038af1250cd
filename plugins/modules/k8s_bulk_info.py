#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_bulk_info
short_description: Several Kubernetes reads in one module run, at once
version_added: 0.3.0
description:
  - Runs every query of O(queries) (a GET of one named object, or a LIST with label and field selectors)
    concurrently in one module run and returns each query's objects under its own name.
  - Each query is what one C(kubernetes.core.k8s_info) task reads (same result keys, C(resources) and
    C(api_found)); the difference is the cost. A module run is a Python start, the C(kubernetes) library's
    import and API discovery (about 0.7-1 s on a small controller), and the queries of one task are sent
    together; a role that must read Nodes, Jobs and Pods pays that once, not three times, and an C(until) loop
    that waits on several kinds polls them in one run each time.
  - Only reads; writes are C(gpuops.nvidia.k8s_bulk_apply) and C(kubernetes.core.k8s).
  - Part of the action group C(gpuops.nvidia.k8s) (which extends C(kubernetes.core.k8s)), so
    C(module_defaults) for C(group/gpuops.nvidia.k8s) reach it.
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
    details: Reads only; check mode reads as well, so later tasks plan from the cluster as it is.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  queries:
    description:
      - Result name -> query. Each query takes C(kind) (required), C(api_version) (default C(v1)),
        C(namespace) (a namespaced kind without it is read in every namespace), and either C(name) (one
        object) or C(label_selectors) and C(field_selectors) (lists of selector terms, all of which must
        match, as in C(kubernetes.core.k8s_info)).
      - C(fields) (a list of dotted paths such as C(status.conditions)) keeps only those fields of each object,
        each whole, and what names it (C(apiVersion), C(kind), C(metadata.name), C(metadata.namespace));
        without it the objects come back whole. A read of a thousand Nodes whole is megabytes for the
        controller to parse; the paths a task needs are a fraction of that. When every path is under
        C(metadata) (or the list is empty, for names only), the API server is asked for the metadata alone
        (C(PartialObjectMetadata)); the objects still come back with their own C(apiVersion) and C(kind).
      - C(field_managers) (a list of names) keeps only those managers' entries of C(metadata.managedFields)
        (what a server-side apply of theirs owns); another client's status updates are most of a Node's.
      - Unknown keys, wrong types, and a name given with selectors are refused before any request.
    type: dict
    required: true
  concurrency:
    description: Reads in flight at once (1-256).
    type: int
    default: 16
  wait:
    description:
      - Read again and again, in this one module run, until every object of the waited queries is done, and
        return the last read. Without it the queries are read once.
      - The pause between reads is O(wait.interval), or twice as long as the last read took when that is longer
        (a busy API server is asked at most a third of the time). An C(until) loop around the task instead
        would start the module and the C(kubernetes) library again for every read.
      - When O(wait.timeout) seconds go by first, the task fails, naming what is not done, with the last read
        in C(reads).
      - O(wait.timeout) bounds the whole wait, the reads included - each request's timeouts are cut to what is left
        of it. A read the deadline cuts short is not waited for; the task fails with the last complete read (or, when
        the first read is cut short, naming that request).
    type: dict
    suboptions:
      condition:
        description:
          - C(rolled_out) - every DaemonSet and Deployment read has its current spec seen by its controller
            (C(observedGeneration)) and every pod it wants updated and Ready (available, for a Deployment);
            objects of other kinds and objects being deleted count as done. What the
            C(gpuops.nvidia.k8s_rollouts_pending) filter checks.
          - C(finished) - every Job read is complete or failed (its C(Complete)/C(SuccessCriteriaMet) or
            C(Failed)/C(FailureTarget) condition); objects of other kinds count as done. A failed Job ends the
            wait as a complete one does; telling them apart is the caller's (C(gpuops.nvidia.k8s_job_outcomes)).
        type: str
        required: true
        choices: [rolled_out, finished]
      queries:
        description:
          - The queries whose objects are waited for (the others are read along); default all.
          - A waited query with C(fields) keeps the fields the condition reads as well (C(rolled_out) -
            C(metadata.generation), C(metadata.deletionTimestamp), C(spec.replicas), C(status); C(finished) -
            C(status.conditions)).
        type: list
        elements: str
      names:
        description:
          - Only the objects of these names are waited for, and each must be among those read (one not there
            yet is not done). Without it every object read counts and none is required.
        type: list
        elements: str
      timeout:
        description: Seconds to wait at most, from the first read's start to the last read's end.
        type: float
        default: 600
      interval:
        description: Seconds between the start of one read and the next, at least.
        type: float
        default: 1
notes:
  - A named object that does not exist is an empty C(resources) list; a kind the API server does not serve (a CRD
    not installed) is C(api_found=false) with an empty list, as C(kubernetes.core.k8s_info) answers.
  - Any other failed read fails the task, naming the query and the API server's answer.
seealso:
  - module: kubernetes.core.k8s_info
  - module: gpuops.nvidia.k8s_bulk_apply
"""

EXAMPLES = r"""
- name: Read the DaemonSets and Deployments to wait for, in one run per poll
  gpuops.nvidia.k8s_bulk_info:
    queries:
      daemonsets: {api_version: apps/v1, kind: DaemonSet, label_selectors: [app.kubernetes.io/managed-by=gpuops.nvidia]}
      deployments: {api_version: apps/v1, kind: Deployment, label_selectors: [app.kubernetes.io/managed-by=gpuops.nvidia]}
  register: rollouts
  until: (rollouts.reads.daemonsets.resources + rollouts.reads.deployments.resources)
         | gpuops.nvidia.k8s_rollouts_pending | length == 0
  retries: 150
  delay: 2

- name: The same wait in one module run (one read a second, the task ends as soon as all are rolled out)
  gpuops.nvidia.k8s_bulk_info:
    queries:
      daemonsets: {api_version: apps/v1, kind: DaemonSet, label_selectors: [app.kubernetes.io/managed-by=gpuops.nvidia]}
      deployments: {api_version: apps/v1, kind: Deployment, label_selectors: [app.kubernetes.io/managed-by=gpuops.nvidia]}
    wait: {condition: rolled_out, timeout: 300}

- name: Wait for two Jobs by name, reading the nodes along at every poll
  gpuops.nvidia.k8s_bulk_info:
    queries:
      jobs: {api_version: batch/v1, kind: Job, namespace: gpu-operator, fields: [status.conditions]}
      nodes: {kind: Node, fields: [metadata.labels]}
    wait: {condition: finished, queries: [jobs], names: [validate-node-a, validate-node-b], timeout: 120}

- name: The nodes' allocatable GPUs and the validation Jobs' conditions (only those fields come back)
  gpuops.nvidia.k8s_bulk_info:
    queries:
      nodes: {kind: Node, label_selectors: [nvidia.com/gpu.present=true], fields: [status.allocatable]}
      jobs: {api_version: batch/v1, kind: Job, namespace: gpu-operator, fields: [metadata.annotations, status.conditions]}
  register: state

- name: Is the Prometheus Operator's ServiceMonitor CRD installed
  gpuops.nvidia.k8s_bulk_info:
    queries:
      crd: {api_version: apiextensions.k8s.io/v1, kind: CustomResourceDefinition, name: servicemonitors.monitoring.coreos.com}
  register: found
"""

RETURN = r"""
reads:
  description:
    - Query name -> C(resources) (the objects read, as the API server returns them, each with its C(apiVersion)
      and C(kind) as C(kubernetes.core.k8s_info) gives them) and C(api_found).
    - Not named C(results), which Ansible gives the per-item results of a loop.
  type: dict
  returned: always
  sample: {crd: {resources: [], api_found: true}}
requests:
  description: Read requests made (one per query whose kind is served, per read with O(wait); a LIST of more than
    O(list_page_size) objects one per page).
  type: int
  returned: always
pending:
  description: With O(wait), what was not done at the last read (C(Kind/namespace/name) and why); empty unless the
    wait timed out.
  type: list
  elements: str
  returned: when O(wait) is given
  sample: ["DaemonSet/gpu-operator/nvidia-device-plugin-daemonset: 7 ready of 10"]
polls:
  description: With O(wait), how many times the queries were read.
  type: int
  returned: when O(wait) is given
waited:
  description: With O(wait), seconds from the first read to the end of the last one.
  type: float
  returned: when O(wait) is given
"""

import json
import threading

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError, HostError, fail
from ansible_collections.gpuops.nvidia.plugins.module_utils._k8s_bulk import check_concurrency, check_queries, read_all
from ansible_collections.gpuops.nvidia.plugins.module_utils._k8s_client import (
    Deadline, RequestTimeout, api_error, connect, connection_spec, list_items, list_spec, timeout_spec)
from ansible_collections.gpuops.nvidia.plugins.module_utils._k8s_wait import check_wait, wait_for

try:
    from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError
except ImportError:
    pass  # connect() says the library is missing


def argument_spec():
    spec = dict(
        queries=dict(type="dict", required=True),
        concurrency=dict(type="int", default=16),
        wait=dict(type="dict", options=dict(
            condition=dict(type="str", required=True, choices=["rolled_out", "finished"]),
            queries=dict(type="list", elements="str"),
            names=dict(type="list", elements="str"),
            timeout=dict(type="float", default=600),
            interval=dict(type="float", default=1),
        )),
    )
    spec.update(connection_spec())
    spec.update(list_spec())
    spec.update(timeout_spec())
    return spec


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    p = module.params

    def check():
        check_concurrency(p["concurrency"])
        queries = check_queries(p["queries"])
        return queries, (check_wait(p["wait"], queries) if p["wait"] is not None else None)

    (queries, wait), dyn = connect(module, check, p["concurrency"])

    # discovery first, in this thread (the library's discovery cache is not shared safely between threads);
    # a kind not found is looked up once more with fresh discovery (a CRD installed since the cache was written)
    resources = {}
    try:
        for query in queries.values():
            kind = (query["api_version"], query["kind"])
            if kind in resources:
                continue
            try:
                resources[kind] = dyn.resources.get(api_version=kind[0], kind=kind[1])
            except ResourceNotFoundError:
                dyn.resources.invalidate_cache()
                try:
                    resources[kind] = dyn.resources.get(api_version=kind[0], kind=kind[1])
                except ResourceNotFoundError:
                    resources[kind] = None
    except Exception as exc:  # pylint: disable=broad-except
        fail(module, HostError("cannot discover the API server's kinds: %s" % api_error(exc)))

    # every request a read makes, counted as it is made (the reads run in threads)
    made, lock = [0], threading.Lock()

    def count(requests):
        with lock:
            made[0] += requests

    def read(query, deadline=None):
        res = resources[(query["api_version"], query["kind"])]
        until = Deadline(deadline, "wait.timeout") if deadline is not None else None
        if res is None:
            return False, []
        ns = query["namespace"] if res.namespaced else None
        # only metadata asked: the server sends only metadata (PartialObjectMetadata), a fraction of a Node; a
        # server that cannot answers with the whole objects (the second type accepted), cut down here as usual
        meta_only = query["fields"] is not None and all(f.startswith("metadata.") for f in query["fields"])
        headers = {"Accept": "application/json;as=PartialObjectMetadata%s;v=v1;g=meta.k8s.io,application/json" % (
            "" if query["name"] else "List")} if meta_only else {}
        try:
            if query["name"]:
                count(1)
                try:
                    items = [json.loads(dyn.request("get", res.path(name=query["name"], namespace=ns),
                                                    header_params=headers, serialize=False, deadline=until).data)]
                except NotFoundError:
                    return True, []
            else:
                selectors = (("labelSelector", query["label_selectors"]), ("fieldSelector", query["field_selectors"]))
                params = [(k, ",".join(v)) for k, v in selectors if v]
                items, pages = list_items(dyn, res.path(namespace=ns), p["list_page_size"], params, headers, until)
                count(pages)
            # a LIST's items carry no apiVersion and kind (the list does), metadata-only ones name the metadata
            # type; kubernetes.core.k8s_info's carry the object's own
            for item in items:
                if item.get("kind") in (None, "PartialObjectMetadata"):
                    item["apiVersion"], item["kind"] = res.group_version, res.kind
            return True, items
        except RequestTimeout:
            raise  # names the request; one the wait's deadline cut short ends the wait (wait_for)
        except Exception as exc:  # pylint: disable=broad-except
            raise HostError("cannot read %s%s: %s" % (query["kind"], " in " + ns if ns else "", api_error(exc)))

    try:
        if wait is None:
            reads = read_all(queries, read, p["concurrency"])
            module.exit_json(changed=False, reads=reads, requests=made[0])
        results, pending, polls, waited = wait_for(
            lambda deadline: read_all(queries, lambda query: read(query, deadline), p["concurrency"]), wait)
    except GpuopsError as exc:
        fail(module, exc)
    out = dict(changed=False, reads=results, requests=made[0], pending=pending, polls=polls,
               waited=round(waited, 1))
    if pending:
        module.fail_json(msg="not %s in %g s: %s%s" % (
            "rolled out" if wait["condition"] == "rolled_out" else "finished", wait["timeout"],
            "; ".join(pending[:20]), " and %d more" % (len(pending) - 20) if len(pending) > 20 else ""), **out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
