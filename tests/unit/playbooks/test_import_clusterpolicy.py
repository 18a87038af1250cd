# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""playbooks/import_clusterpolicy.yml against a ClusterPolicy file (issue 16, part 4), run by
ansible-playbook from the installed collection: writes the group_vars (checked against the roles'
argument specs first), lists what has no equivalent, refuses to overwrite unless told, shows the diff
in check mode without writing, and changes nothing on a rerun."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader

from conftest import ansible_command

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
BOOK = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "nvidia", "playbooks", "import_clusterpolicy.yml")
FIXTURE = os.path.join(REPO, "tests", "unit", "fixtures", "clusterpolicy", "mig-mixed-custom-registry.yaml-stream")
PLAYBOOK = ansible_command("ansible-playbook")


def run(tmp_path, *args):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_STDOUT_CALLBACK="default", PWD=str(tmp_path))
    cmd = [PLAYBOOK, "-i", "localhost,", BOOK, "-e", "ansible_python_interpreter=%s" % sys.executable] + list(args)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(tmp_path), timeout=300, check=False)


def recap(res):
    line = [x for x in res.stdout.splitlines() if x.startswith("localhost") and "ok=" in x]
    assert line, res.stdout + res.stderr
    return {k: int(v) for k, v in (kv.split("=") for kv in line[-1].split(":", 1)[1].split())}


@pytest.fixture(scope="module")
def expected():
    from ansible_collections.gpuops.nvidia.plugins.filter import clusterpolicy as f

    with open(FIXTURE) as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    result = f.clusterpolicy_to_vars(docs)
    return result, f.clusterpolicy_group_vars(result, FIXTURE)


def test_import_from_file(tmp_path, expected):
    result, text = expected
    out = tmp_path / "group_vars" / "all" / "gpu_operator.yml"
    args = ["-e", "clusterpolicy_file=%s" % FIXTURE, "-e", "clusterpolicy_output=group_vars/all/gpu_operator.yml"]

    res = run(tmp_path, *args)  # relative output path: from the current directory
    assert res.returncode == 0, res.stdout + res.stderr
    assert out.read_text() == text
    assert DataLoader().load_from_file(str(out), trusted_as_template=True) == result["vars"]  # as Ansible reads group_vars
    assert "No equivalent in gpuops.nvidia (%d)" % len(result["unmapped"]) in res.stdout
    for u in result["unmapped"]:
        assert u["path"] + ":" in res.stdout  # every field with no equivalent is in the play's output too
    assert "Check the variables against the roles' argument specs" in res.stdout

    # an existing file is not overwritten unless told
    out.write_text(text.replace("gpu_upgrade_max_unavailable: 1", "gpu_upgrade_max_unavailable: 3"))
    edited = out.read_text()
    res = run(tmp_path, *args)
    assert res.returncode != 0 and "exists: -e clusterpolicy_overwrite=true replaces it" in res.stdout
    assert out.read_text() == edited

    # check mode shows the change and writes nothing
    res = run(tmp_path, *args, "--check", "--diff")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "-gpu_upgrade_max_unavailable: 3" in res.stdout and "+gpu_upgrade_max_unavailable: 1" in res.stdout
    assert out.read_text() == edited

    res = run(tmp_path, *args, "-e", "clusterpolicy_overwrite=true")
    assert res.returncode == 0 and recap(res)["changed"] == 1, res.stdout + res.stderr
    assert out.read_text() == text
    res = run(tmp_path, *args, "-e", "clusterpolicy_overwrite=true")
    assert res.returncode == 0 and recap(res)["changed"] == 0, res.stdout


def test_values_the_roles_refuse_stop_before_writing(tmp_path):
    with open(FIXTURE) as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    docs[0]["spec"]["devicePlugin"]["imagePullPolicy"] = "Sometimes"
    bad = tmp_path / "cp.yaml"
    bad.write_text(yaml.safe_dump_all(docs))
    res = run(tmp_path, "-e", "clusterpolicy_file=cp.yaml", "-e", "clusterpolicy_output=out.yml")
    assert res.returncode != 0
    assert "device_plugin_image_pull_policy" in res.stdout and "Sometimes" in res.stdout
    assert not (tmp_path / "out.yml").exists()


def test_import_a_gpucluster_file(tmp_path):
    fixture = os.path.join(REPO, "tests", "unit", "fixtures", "clusterpolicy", "gpucluster-dra.yaml")
    res = run(tmp_path, "-e", "clusterpolicy_file=%s" % fixture, "-e", "clusterpolicy_output=gc.yml")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "GPUCluster gpu-cluster -> %s/gc.yml" % tmp_path in res.stdout
    assert "draDriver.computeDomains:" in res.stdout
    written = DataLoader().load_from_file(str(tmp_path / "gc.yml"), trusted_as_template=True)
    assert written["gpuops_gpu_allocation"] == "dra" and "dra_driver" in written["gpuops_cluster_components"]
