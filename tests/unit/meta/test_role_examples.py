# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Each role README's example playbook runs on the example inventory a user copies:
- it is YAML, a list of plays, each play's `hosts` a group or host of inventories/example (or localhost) with at
  least one host in it;
- a play that runs a host role that site.yml runs in a stage targets the hosts that stage's playbook targets
  (the driver on gpu_container, VFIO on vm_passthrough, ...): an example on gpu_nodes would hand the data-centre
  driver to VM hosts, which the driver's preflight refuses.
"""
from __future__ import annotations

import os
import re

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
INVENTORY = os.path.join(REPO, "inventories", "example", "hosts.yml")
if not os.path.exists(INVENTORY):
    pytest.skip("no example inventory here", allow_module_level=True)
ROLES = sorted(d for d in os.listdir(os.path.join(REPO, "roles")) if os.path.isdir(os.path.join(REPO, "roles", d)))
STAGE_BOOKS = ["driver.yml", "container_toolkit.yml", "mig.yml", "vfio.yml", "vgpu.yml"]


def groups():
    """{group or host name: set of hosts} of the example inventory (YAML format)."""
    with open(INVENTORY, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    out = {}

    def walk(name, group):
        group = group or {}
        hosts = set((group.get("hosts") or {}).keys())
        for child, body in (group.get("children") or {}).items():
            hosts |= walk(child, body)
        out[name] = out.get(name, set()) | hosts
        for host in group.get("hosts") or {}:
            out[host] = {host}
        return hosts

    walk("all", data["all"])
    out["localhost"] = {"localhost"}
    return out


def example(role):
    with open(os.path.join(REPO, "roles", role, "README.md"), encoding="utf-8") as fh:
        text = fh.read()
    found = re.search(r"## Example playbook\s*```yaml\n(.*?)```", text, re.S)
    assert found, "roles/%s/README.md has no example playbook" % role
    plays = yaml.safe_load(found.group(1))
    assert isinstance(plays, list) and plays, "the example of %s is not a list of plays" % role
    return plays


def roles_of(play):
    """The gpuops.nvidia roles a play runs (roles:, include_role/import_role tasks)."""
    names = []
    for entry in play.get("roles") or []:
        names.append(entry["role"] if isinstance(entry, dict) else entry)
    for task in (play.get("tasks") or []) + (play.get("pre_tasks") or []) + (play.get("post_tasks") or []):
        for key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
            if key in task:
                names.append(task[key]["name"])
    return [n.split(".")[-1] for n in names if n.startswith("gpuops.nvidia.")]


def stage_hosts():
    """{role: the default host pattern of the stage playbook that runs it}."""
    out = {}
    for book in STAGE_BOOKS:
        with open(os.path.join(REPO, "playbooks", book), encoding="utf-8") as fh:
            plays = yaml.safe_load(fh)
        play = plays[0]
        found = re.fullmatch(r"\{\{ *gpuops_\w+_hosts *\| *default\('(\w+)'\) *\}\}", play["hosts"])
        assert found, "%s: hosts %r" % (book, play["hosts"])
        for role in roles_of(play):
            if role != "reboot":  # reboot runs wherever a stage asked for one
                out.setdefault(role, found.group(1))
    return out


def test_stage_hosts_are_read():
    have = stage_hosts()
    assert have["driver"] == "gpu_container" and have["vfio"] == "vm_passthrough" and have["vgpu_host"] == "vm_vgpu"
    assert have["mps_control"] == "gpu_container" and have["mig_layout"] == "gpu_container", have


@pytest.mark.parametrize("role", ROLES)
def test_the_example_runs_on_the_example_inventory(role):
    inventory, stages = groups(), stage_hosts()
    for play in example(role):
        pattern = play.get("hosts")
        assert pattern in inventory, "roles/%s/README.md: hosts %r is not in the example inventory" % (role, pattern)
        assert inventory[pattern], "roles/%s/README.md: hosts %r has no host in the example inventory" % (role, pattern)
        for ran in roles_of(play):
            if ran in stages:
                assert pattern == stages[ran], "roles/%s/README.md runs %s on %r; site.yml runs it on %r" % (
                    role, ran, pattern, stages[ran])
