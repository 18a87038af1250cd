# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""Cluster lane: what its test files share -- the lane's paths, playbooks/cluster.yml run against the lab
cluster, the recap's changed counts, and objects (CRDs) created where an earlier run may have left them.

The tests import these (``from conftest import ...``), as the runtime lane's do.
"""
from __future__ import annotations

import os
import re
import subprocess
import time

import pytest
from kubernetes import client

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
CLUSTER_DIR = os.environ["CLUSTER_DIR"]
KUBECONFIG = os.path.join(CLUSTER_DIR, "kubeconfig")
INVENTORY = os.path.join(CLUSTER_DIR, "inventory.yml")
VARS = os.path.join(HERE, "vars.yml")


def cluster_playbook(*extra, inventory=INVENTORY, check=True, timing=False, vars_file=VARS, playbook="cluster.yml"):
    """Run playbooks/cluster.yml (the installed collection; or ``playbook``) with the lane's vars (or
    ``vars_file``) and ``extra`` arguments.

    Returns the CompletedProcess with ``seconds`` (how long it ran) added; ``timing`` prints that first.
    ``check``: a failed run fails the test, showing the end of its output."""
    cmd = [os.path.join(ROOT, ".venv", "bin", "ansible-playbook"), "-i", inventory,
           os.path.join(ROOT, "playbooks", playbook), "-e", "@" + vars_file] + list(extra)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.environ.get(
                   "ANSIBLE_COLLECTIONS_PATH", os.path.join(ROOT, ".collections")),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_NOCOLOR="1", K8S_AUTH_KUBECONFIG=KUBECONFIG)
    t0 = time.time()
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    r.seconds = time.time() - t0
    if timing:
        print(f"{playbook} {' '.join(extra)}: {r.seconds:.1f}s")
    if check and r.returncode != 0:
        pytest.fail(f"playbook failed (rc={r.returncode}):\n{r.stdout[-8000:]}\n{r.stderr[-3000:]}")
    return r


def recap_changed(stdout):
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)", stdout, re.MULTILINE)}


def create_if_missing(create, *args):
    """``create(*args)`` (a Kubernetes API create call); an object that exists already (409) is fine."""
    try:
        create(*args)
    except client.ApiException as e:
        if e.status != 409:
            raise


def ensure_crd(body):
    """Create the CustomResourceDefinition ``body`` (one that exists is fine) and wait up to 30 s until it is
    Established."""
    ext = client.ApiextensionsV1Api()
    create_if_missing(ext.create_custom_resource_definition, body)
    for _ in range(60):
        crd = ext.read_custom_resource_definition(body["metadata"]["name"])
        if any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or [])):
            break
        time.sleep(0.5)
