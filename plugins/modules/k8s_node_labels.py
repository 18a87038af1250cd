#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_node_labels
short_description: Plan and apply the GPU Operator's node labels and taints for a whole fleet in one run
version_added: 0.3.0
description:
  - Takes what the inventory knows about every node (O(nodes), from the C(gpuops.nvidia.k8s_node_inputs)
    filter), reads the cluster's Nodes once (one LIST), plans each node's labels and taints as the GPU
    Operator sets them (the C(gpuops.nvidia.k8s_node_plan) filter's plan), and applies with server-side apply
    only the nodes whose labels or taints differ, O(concurrency) at a time.
  - A node is in sync, and not written, when the labels the field manager last applied are exactly the planned
    ones with the planned values and its taints are as planned. A no-op run makes one read request (one a page of
    O(list_page_size) Nodes) and no write.
  - The node read never leaves the module run; what comes back is a summary, where each component goes
    (C(placement)) and, with C(--diff), one entry per changed node. At 1,000 nodes that is a module run instead
    of a read, a plan over megabytes of registered data on the controller, and an apply.
  - Every node's input is checked before the API server is contacted; all problems are listed in one message
    and nothing is written.
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
    details: The Nodes are read and planned as in a real run; every write is sent as a dry run (C(dryRun=All)).
  diff_mode:
    support: full
    details: One entry per changed node, its labels and taints involved before and after.
  idempotent:
    support: full
options:
  nodes:
    description:
      - One entry per inventory node, as the C(gpuops.nvidia.k8s_node_inputs) filter makes them from C(hostvars)
        (C(name), C(workload), C(labels), C(gpu), C(device_plugin_config), C(mig_config), C(allocation), C(extra_labels)).
      - C(allocation) V(dra) (a container node) gives the node the DRA driver's deploy label
        (C(nvidia.com/gpu.deploy.dra-driver)) instead of the device plugin's and the operator validator's; a node
        naming both models, a device plugin config, or another manager's device plugin deploy label is refused.
      - A node the cluster does not have is listed in C(missing) and skipped.
    type: list
    elements: dict
    required: true
  state:
    description: C(absent) removes the labels and taints this field manager applied.
    type: str
    choices: [present, absent]
    default: present
  default_workload:
    description: Workload kind of nodes that name none.
    type: str
    choices: [container, vm-passthrough, vm-vgpu]
    default: container
  sandbox_mode:
    description: Which sandbox operands VM-workload nodes get (KubeVirt's or Kata's).
    type: str
    choices: [kubevirt, kata]
    default: kubevirt
  mig_strategy:
    description: The device plugin's and GFD's MIG strategy (C(nvidia.com/mig.strategy)).
    type: str
    choices: [none, single, mixed]
    default: single
  device_plugin_configs:
    description: Device plugin configs by name; a node naming one gets its sharing labels (replicas, strategy).
    type: dict
    default: {}
  mig_default_config:
    description:
      - The MIG manager's default config, labelled C(nvidia.com/mig.config) on every MIG-capable container node
        that names no MIG config and has no such label set by anyone else (as the GPU Operator labels
        C(all-disabled) when its MIG manager is on). Empty, no label.
    type: str
    default: ""
  taint_gpu_nodes:
    description: Taint container GPU nodes with O(taint).
    type: bool
    default: true
  taint_vm_nodes:
    description: Taint VM-workload GPU nodes too (their KubeVirt pods tolerate nothing of ours by default).
    type: bool
    default: false
  taint:
    description: The GPU taint (C(key), C(value), C(effect)).
    type: dict
    default: {key: nvidia.com/gpu, value: present, effect: NoSchedule}
  field_manager:
    description: The server-side apply field manager; labels it applied before and not planned now are removed.
    type: str
    required: true
  force_conflicts:
    description: Take over labels another manager owns (otherwise such a node fails with a conflict).
    type: bool
    default: false
  concurrency:
    description: Writes in flight at once (1-256).
    type: int
    default: 16
notes:
  - Nodes are written one by one; when some fail the others stay written and the failure lists each failed node
    with the API server's answer (a rerun finishes the rest).
seealso:
  - module: gpuops.nvidia.k8s_bulk_apply
"""

EXAMPLES = r"""
- name: Label and taint the GPU nodes (one read; only the nodes that differ are written)
  gpuops.nvidia.k8s_node_labels:
    nodes: "{{ groups['k8s_nodes'] | gpuops.nvidia.k8s_node_inputs(hostvars) }}"
    field_manager: gpuops-nvidia
    force_conflicts: true
  register: labelled

- name: Where the device plugin goes
  ansible.builtin.debug:
    var: labelled.placement['device-plugin']
"""

RETURN = r"""
placement:
  description: Component -> the node names whose deploy label says it runs there (sorted).
  type: dict
  returned: always
  sample: {device-plugin: [gpu-1, gpu-2], sandbox-device-plugin: [vm-1]}
missing:
  description: Inventory nodes the cluster does not have (skipped).
  type: list
  elements: str
  returned: always
planned:
  description: How many nodes were planned (the inventory's nodes the cluster has).
  type: int
  returned: always
created:
  description: Always empty (a Node is never created); kept for the shape of C(gpuops.nvidia.k8s_bulk_apply).
  type: list
  elements: str
  returned: always
updated:
  description: Nodes whose labels or taints the apply changed (C(Node/name)).
  type: list
  elements: str
  returned: always
unchanged:
  description: Nodes sent whose apply changed nothing.
  type: list
  elements: str
  returned: always
in_sync:
  description: How many nodes were already as planned and not sent.
  type: int
  returned: always
applied:
  description: How many nodes were sent.
  type: int
  returned: always
failed:
  description: Nodes the API server refused, with its answer.
  type: list
  elements: dict
  returned: on failure
requests:
  description: Requests made, C(read) (the pages of the one LIST of Nodes, O(list_page_size)) and C(apply) (one per node sent).
  type: dict
  returned: always
"""

import json
from urllib.parse import quote

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils import _diff
from ansible_collections.gpuops.nvidia.plugins.module_utils import _k8s_labels as kl
from ansible_collections.gpuops.nvidia.plugins.module_utils._errors import GpuopsError, HostError, InputError, fail
from ansible_collections.gpuops.nvidia.plugins.module_utils._k8s_bulk import Applier
from ansible_collections.gpuops.nvidia.plugins.module_utils._k8s_client import (
    api_error, connect, connection_spec, list_items, list_spec, timeout_spec)

_PLAN_OPTIONS = ("state", "default_workload", "sandbox_mode", "mig_strategy", "device_plugin_configs",
                 "taint_gpu_nodes", "taint_vm_nodes", "taint", "mig_default_config")


def argument_spec():
    spec = dict(
        nodes=dict(type="list", elements="dict", required=True),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        default_workload=dict(type="str", choices=list(kl.WORKLOADS), default="container"),
        sandbox_mode=dict(type="str", choices=list(kl.SANDBOX_MODES), default="kubevirt"),
        mig_strategy=dict(type="str", choices=["none", "single", "mixed"], default="single"),
        device_plugin_configs=dict(type="dict", default={}),
        mig_default_config=dict(type="str", default=""),
        taint_gpu_nodes=dict(type="bool", default=True),
        taint_vm_nodes=dict(type="bool", default=False),
        taint=dict(type="dict", default=dict(kl.DEFAULT_TAINT)),
        field_manager=dict(type="str", required=True),
        force_conflicts=dict(type="bool", default=False),
        concurrency=dict(type="int", default=16),
    )
    spec.update(connection_spec())
    spec.update(list_spec())
    spec.update(timeout_spec())
    return spec


def plan_or_refuse(nodes, current, options):
    """The plan, or InputError listing every invalid node (the filter's message)."""
    try:
        return kl.node_plan(nodes, current, options)
    except kl.LabelPlanError as exc:
        raise InputError("invalid GPU node inventory:\n  - " + "\n  - ".join(exc.errors))


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    p = module.params
    options = {k: p[k] for k in _PLAN_OPTIONS}

    def check():
        applier = Applier(None, None, p["field_manager"], p["concurrency"])
        # every node's input (a node listed twice included), before any request
        plan_or_refuse(p["nodes"], None, options)
        return applier

    applier, dyn = connect(module, check, p["concurrency"])
    try:
        items, pages = list_items(dyn, "/api/v1/nodes", p["list_page_size"])
        live = {o["metadata"]["name"]: o for o in items}
    except Exception as exc:  # pylint: disable=broad-except
        fail(module, HostError("cannot read the cluster's Nodes: %s" % api_error(exc)))
    current = kl.node_current(live.values(), p["field_manager"])
    missing = sorted(n["name"] for n in p["nodes"] if n["name"] not in current)
    try:
        plan = plan_or_refuse([n for n in p["nodes"] if n["name"] in current], current, options)
    except GpuopsError as exc:
        fail(module, exc)
    changes = kl.node_objects(plan, current=current)

    def read(api_version, kind, namespace, names):
        # the LIST above (its pages are the module's reads): the Applier compares with it and reads nothing more
        return {name: live[name] for name in names if name in live}, 0

    def apply(obj):
        try:
            resp = dyn.request("patch", "/api/v1/nodes/" + quote(obj["metadata"]["name"], safe=""), body=obj,
                               content_type="application/apply-patch+yaml", field_manager=p["field_manager"],
                               force_conflicts=p["force_conflicts"], dry_run="All" if module.check_mode else None,
                               serialize=False)
        except Exception as exc:  # pylint: disable=broad-except
            raise HostError(api_error(exc))
        return json.loads(resp.data)

    applier.read, applier.apply = read, apply
    try:
        result, diffs = applier.run(changes)
    except GpuopsError as exc:
        fail(module, exc, placement=kl.placement(plan), missing=missing, planned=len(plan["nodes"]))
    # the nodes found in sync before the Applier saw them count as in sync too
    result["requests"]["read"] += pages
    result["in_sync"] += len(plan["nodes"]) - len(changes)
    del result["rollouts"]  # Nodes only
    result.update(placement=kl.placement(plan), missing=missing, planned=len(plan["nodes"]))
    _diff.exit_json(module, result, diffs)


if __name__ == "__main__":
    main()
