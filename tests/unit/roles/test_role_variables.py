# Copyright: gpuops.nvidia contributors
# Apache License 2.0
# SPDX-License-Identifier: Apache-2.0
"""Every variable a role reads with ``| default(...)`` must be one somebody sets.

A misspelt variable with a default never fails: the driver role's VM-node refusal read
``gpu_workload_config`` (set nowhere) instead of ``gpu_workload`` and so never refused (issue 12).
Known names: any role's defaults, vars and argument_specs, what tasks register, set_fact or bind with
``vars:``/``loop_var``, and the inventory-level variables shared across roles listed below.
"""
from __future__ import annotations

import glob
import os
import re

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# Inventory / play-level variables several roles read (documented in the README and docs/cluster-lane.md).
SHARED = {
    "gpu_workload", "gpuops_state_dir", "gpuops_reboot_reasons", "gpuops_vgpu_default_config", "gpu_reboot_allowed",
    "gpuops_k8s_node_name", "gpuops_kubeconfig", "gpuops_k8s_namespace", "ansible_check_mode",
    # the cluster play's rollout mode and its one wait (docs/cluster-lane.md, playbooks/cluster.yml)
    "gpuops_cluster_rollout", "gpuops_cluster_wait_timeout", "gpuops_cluster_queue",
    # seconds per slice of that wait, a line of output each (docs/cluster-lane.md)
    "gpuops_progress_interval",
    # writes in flight for k8s_bulk_apply (docs/cluster-lane.md)
    "gpuops_k8s_concurrency",
}
USE_RE = re.compile(r"\b([a-z_][a-z0-9_]*)\s*\|\s*default\(")


def known_names():
    names = set(SHARED)
    for path in glob.glob(os.path.join(REPO, "roles/*/defaults/*.yml")) + glob.glob(os.path.join(REPO, "roles/*/vars/*.yml")):
        names |= set(yaml.safe_load(open(path)) or {})
    for path in glob.glob(os.path.join(REPO, "roles/*/meta/argument_specs.yml")):
        for entry in yaml.safe_load(open(path))["argument_specs"].values():
            names |= set(entry.get("options") or {})
    text = "".join(open(p).read() for p in glob.glob(os.path.join(REPO, "roles/*/tasks/*.yml")))
    names |= set(re.findall(r"register:\s*([a-z_][a-z0-9_]*)", text))
    names |= set(re.findall(r"loop_var:\s*([a-z_][a-z0-9_]*)", text))
    # keys bound by set_fact / vars: blocks (indented "name:" lines that are not module arguments we know of)
    names |= set(re.findall(r"^\s+([a-z_][a-z0-9_]*):", text, re.M))
    return names


def unknown_uses(text, names):
    used = set()
    for m in USE_RE.finditer(text):
        before = text[:m.start()].rstrip()[-1:]
        if before not in (".", "|", "]", "'", '"'):  # an attribute, a filter or a string, not a variable
            used.add(m.group(1))
    return sorted(used - names)


def test_every_defaulted_variable_in_the_roles_is_set_somewhere():
    names = known_names()
    problems = {}
    for path in sorted(glob.glob(os.path.join(REPO, "roles/*/tasks/*.yml")) + glob.glob(os.path.join(REPO, "roles/*/templates/*"))):
        bad = unknown_uses(open(path).read(), names)
        if bad:
            problems[os.path.relpath(path, REPO)] = bad
    assert problems == {}


def test_the_check_catches_the_driver_preflight_bug():
    names = known_names()
    assert "gpu_workload_config" not in names
    assert unknown_uses("that: (gpu_workload_config | default('container')) == 'container'", names) == ["gpu_workload_config"]
    assert unknown_uses("that: (gpu_workload | default('container')) == 'container'", names) == []
