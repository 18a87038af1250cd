# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""playbooks/site.yml on the example inventory (issue 16, part 1): every stage runs on a host, or says
why.  Run by ansible-playbook from the installed collection on inventories/example/hosts.yml with
inventories/lab/hosts.yml (node-root stand-ins on this machine; no API server: gpuops_k8s_api=false).
A stage with no host is reported (preflight output, recap, readiness report) and an inventory that makes
no sense is refused by preflight before any stage runs."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml

from conftest import ansible_command, needs

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
BOOKS = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "nvidia", "playbooks")
EXAMPLE = os.path.join(REPO, "inventories", "example", "hosts.yml")
LAB = os.path.join(REPO, "inventories", "lab", "hosts.yml")
PLAYBOOK = ansible_command("ansible-playbook")
STAGES = ["discovery", "driver", "mig", "container_toolkit", "vfio", "vgpu", "cluster", "report"]
FIRST_STAGE_PLAY = "PLAY [Discover GPUs"
# the lab inventory (node-root stand-ins on this machine) is development tooling, not in the Galaxy tarball
lab = needs("inventories/lab/hosts.yml")


def site(tmp_path, roots_dir, *args, inventories=(EXAMPLE, LAB)):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_STDOUT_CALLBACK="default", GPUOPS_LAB_ROOTS=roots_dir)
    cmd = [PLAYBOOK, os.path.join(BOOKS, "site.yml"), "-e", "ansible_python_interpreter=%s" % sys.executable,
           "-e", "gpuops_k8s_api=false"]
    for inv in inventories:
        cmd += ["-i", inv]
    return subprocess.run(cmd + list(args), env=env, capture_output=True, text=True, cwd=str(tmp_path),
                          timeout=600, check=False)


def recap(res):
    out = {}
    for line in res.stdout.split("PLAY RECAP", 1)[-1].splitlines():
        m = re.match(r"^(\S+)\s+:\s+(.*)$", line)
        if m:
            out[m.group(1)] = {k: int(v) for k, v in (kv.split("=") for kv in m.group(2).split())}
    return out


def plays(stdout):
    """[(play name, its first output line)] -- 'skipping: no hosts matched' when it ran on no host."""
    lines = stdout.splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.startswith("PLAY [") and not line.startswith("PLAY RECAP"):
            nxt = next((x for x in lines[i + 1:] if x.strip()), "")
            out.append((line, nxt))
    return out


@pytest.fixture(scope="module")
def roots_dir(roots):
    return os.path.dirname(roots["h200"])


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, roots_dir):
    tmp = tmp_path_factory.mktemp("site")
    return site(tmp, roots_dir, "-e", "gpuops_report_dir=%s" % (tmp / "report"), "-e", "gpuops_empty_stage=fail"), tmp


@lab
def test_every_stage_runs_on_the_example_inventory(full_run):
    res, tmp = full_run
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    empty = [p for p, first in plays(res.stdout) if "no hosts matched" in first]
    assert not empty, "plays that ran on no host: %s" % empty
    assert "STAGE WILL RUN ON NO HOST" not in res.stdout
    for stage in STAGES:
        m = re.search(r"msg: '?%s \(%s\.yml, hosts: [^)]*\): (\d+) host\(s\)" % (stage, stage), res.stdout)
        assert m and int(m.group(1)) > 0, "stage %s has no host line:\n%s" % (stage, res.stdout[:4000])
    # the cluster play ran and said why it applied nothing (no API server)
    assert "Cluster components NOT applied: gpuops_k8s_api is false" in res.stdout
    # every example host was reached by its stages, none failed
    r = recap(res)
    for host in ["gpu-c01.example.net", "gpu-c02.example.net", "gpu-p01.example.net", "gpu-p02.example.net",
                 "gpu-g01.example.net", "cpu-01.example.net"]:
        assert r[host]["failed"] == 0 and r[host]["unreachable"] == 0 and r[host]["ok"] > 0, (host, r)
    assert r["localhost"]["ignored"] == 0


@lab
def test_readiness_report_lists_the_stages_each_host_ran(full_run):
    res, tmp = full_run
    assert res.returncode == 0
    import json

    rows = {r["host"]: r for r in json.loads((tmp / "report" / "readiness.json").read_text())}
    assert rows["gpu-c01.example.net"]["stages_run"] == ["discovery", "driver", "mig", "container_toolkit", "cluster", "report"]
    assert rows["gpu-p01.example.net"]["stages_run"] == ["discovery", "vfio", "report"]  # a KVM host outside k8s
    assert rows["gpu-p02.example.net"]["stages_run"] == ["discovery", "vfio", "cluster", "report"]
    assert rows["cpu-01.example.net"]["stages_run"] == ["discovery", "cluster", "report"]
    assert rows["gpu-g01.example.net"]["stages_run"] == ["discovery", "vgpu", "cluster", "report"]
    # each container node's GPU allocation model (the device plugin unless its gpuops_gpu_allocation says dra)
    assert (rows["gpu-c01.example.net"]["allocation"], rows["gpu-p02.example.net"]["allocation"]) == ("device-plugin", None)
    assert "| GPU allocation | device-plugin |" in (tmp / "report" / "readiness.md").read_text()
    assert "| vfio | `vm_passthrough` | gpu-p01.example.net, gpu-p02.example.net |" in (tmp / "report" / "readiness.md").read_text()


@lab
def test_a_stage_with_no_host_is_reported(tmp_path, roots_dir):
    res = site(tmp_path, roots_dir, "--limit", "all:localhost:!vm_passthrough")
    assert res.returncode == 0, res.stdout[-4000:]
    assert "vfio (vfio.yml, hosts: vm_passthrough): NO HOST" in res.stdout
    assert "STAGE WILL RUN ON NO HOST: vfio (vfio.yml: no host matches" in res.stdout
    assert recap(res)["localhost"]["ignored"] == 1  # in the play recap
    assert re.search(r"vfio\s+vm_passthrough\s+NO HOST -- the stage ran on no host", res.stdout)  # readiness report
    # not wanted: listed as such, no warning
    res = site(tmp_path, roots_dir, "--limit", "all:localhost:!vm_passthrough", "-e", '{"gpuops_skip_stages": ["vfio"]}')
    assert res.returncode == 0 and "STAGE WILL RUN ON NO HOST" not in res.stdout
    assert "vfio (vfio.yml, hosts: vm_passthrough): NO HOST -- not requested" in res.stdout
    # strict: stops before any stage
    res = site(tmp_path, roots_dir, "--limit", "all:localhost:!vm_passthrough", "-e", "gpuops_empty_stage=fail")
    assert res.returncode != 0 and "STAGE WILL RUN ON NO HOST: vfio" in res.stdout
    assert FIRST_STAGE_PLAY not in res.stdout


# the first words of each stage's play (preflight: site.yml's first play; report: report.yml's last)
STAGE_PLAYS = {"preflight": "Preflight", "discovery": "Discover GPUs", "driver": "NVIDIA driver",
               "mig": "MIG layouts", "container_toolkit": "NVIDIA container toolkit", "vfio": "VM-passthrough nodes",
               "vgpu": "NVIDIA vGPU hosts", "cluster": "GPU cluster components", "report": "Print the fleet readiness"}


def stages_that_ran(stdout):
    """The stages whose play ran a task on a host (ok or changed; a task that tags filter out is not printed,
    one that `when` skips says skipping, an include that only loads a role says included)."""
    tasks, play = {}, None
    for line in stdout.splitlines():
        if line.startswith("PLAY [") and not line.startswith("PLAY RECAP"):
            play = line[6:line.rfind("]")]
            tasks.setdefault(play, 0)
        elif line.startswith(("ok: [", "changed: [")) and play is not None:
            tasks[play] += 1
    return {st for st, first in STAGE_PLAYS.items() if any(p.startswith(first) and n for p, n in tasks.items())}


@lab
def test_a_stage_tag_runs_that_stage_with_preflight_discovery_and_report(tmp_path, roots_dir):
    res = site(tmp_path, roots_dir, "--tags", "vfio", "-e", "gpuops_report_dir=%s" % (tmp_path / "report"))
    assert res.returncode == 0, res.stdout[-4000:]
    assert stages_that_ran(res.stdout) == {"preflight", "discovery", "vfio", "report"}, res.stdout[-6000:]
    assert "VFIO not applied" in res.stdout               # the stage's own task, on the example's vfio hosts
    assert (tmp_path / "report" / "readiness.json").exists()


@lab
def test_skip_tags_leaves_one_stage_out(tmp_path, roots_dir):
    res = site(tmp_path, roots_dir, "--skip-tags", "vfio")
    assert res.returncode == 0, res.stdout[-4000:]
    assert stages_that_ran(res.stdout) == set(STAGE_PLAYS) - {"vfio"}, res.stdout[-6000:]


BAD = {
    "vm-passthrough outside vm_passthrough": (
        {"all": {"hosts": {"gpu-c01.example.net": {"gpu_workload": "vm-passthrough"}}}},
        "gpu-c01.example.net: gpu_workload is vm-passthrough but the host is not in group vm_passthrough"),
    "unknown workload": (
        {"all": {"hosts": {"gpu-c02.example.net": {"gpu_workload": "vm-pasthrough"}}}},
        'gpu-c02.example.net: unknown gpu_workload "vm-pasthrough"'),
    "vm-vgpu without vGPU config": (
        {"all": {"hosts": {"gpu-g01.example.net": {"gpuops_vgpu_device_manager_config": None}}}},
        "gpu-g01.example.net: vm-vgpu host without a vGPU config"),
    "vm-vgpu selecting an undefined config": (
        {"all": {"hosts": {"gpu-g01.example.net": {"gpuops_k8s_node_labels": {"nvidia.com/vgpu.config": "a10-2q"}}}}},
        'gpu-g01.example.net: vm-vgpu host selects vGPU config "a10-2q", which gpuops_vgpu_device_manager_config'),
    "GPU host in no workload group": (
        {"all": {"children": {"gpu_nodes": {"hosts": {"gpu-x01.example.net": {"gpu_facts_root": "/nonexistent"}}}}}},
        "gpu-x01.example.net: a GPU host (group gpu_nodes) in no workload group"),
    "two workload groups": (
        {"all": {"children": {"vm_vgpu": {"hosts": {"gpu-c01.example.net": None}}}}},
        "gpu-c01.example.net: in 2 workload groups (gpu_container, vm_vgpu)"),
}


@lab
@pytest.mark.parametrize("case", sorted(BAD))
def test_preflight_refuses_an_inventory_that_makes_no_sense(tmp_path, roots_dir, case):
    overlay, message = BAD[case]
    extra = tmp_path / "bad.yml"
    extra.write_text(yaml.safe_dump(overlay))
    res = site(tmp_path, roots_dir, inventories=(EXAMPLE, LAB, str(extra)))
    assert res.returncode != 0
    assert "Preflight refused the inventory" in res.stdout and message in res.stdout, res.stdout[-3000:]
    assert "nothing was changed" in res.stdout
    assert FIRST_STAGE_PLAY not in res.stdout  # no stage ran


def _hosts_expr(book):
    with open(os.path.join(REPO, "playbooks", book)) as fh:
        return [p["hosts"] for p in yaml.safe_load(fh) if "hosts" in p]


def test_preflight_patterns_are_the_stage_playbooks_hosts():
    with open(os.path.join(REPO, "roles", "preflight", "defaults", "main.yml")) as fh:
        stages = yaml.safe_load(fh)["preflight_stages"]
    assert [s["name"] for s in stages] == STAGES
    with open(os.path.join(REPO, "playbooks", "site.yml")) as fh:
        imported = [p["ansible.builtin.import_playbook"] for p in yaml.safe_load(fh) if "ansible.builtin.import_playbook" in p]
    assert imported == [s["playbook"] for s in stages]
    for s in stages:
        assert s["pattern"] == _hosts_expr(s["playbook"])[0], s


@lab
def test_lab_cluster_nodes_are_the_example_k8s_nodes():
    import json

    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"))
    out = subprocess.run([ansible_command("ansible-inventory"), "-i", EXAMPLE, "-i", LAB,
                          "--list"], env=env, capture_output=True, text=True, check=True).stdout
    inv = json.loads(out)

    def members(group):
        g = inv.get(group, {})
        return set(g.get("hosts", [])).union(*[members(c) for c in g.get("children", [])])

    with open(os.path.join(REPO, "inventories", "lab", "cluster-nodes.yml")) as fh:
        nodes = yaml.safe_load(fh)["nodes"]
    assert {n["name"] for n in nodes} == members("k8s_nodes")
    hv = inv["_meta"]["hostvars"]
    for n in nodes:
        assert hv[n["name"]]["gpu_facts_root"].endswith("/" + n["root"]), n
        assert n.get("workload") == hv[n["name"]].get("gpu_workload"), n
    # every group of site.yml's stages has hosts in the example inventory
    for group in ["gpu_nodes", "gpu_container", "vm_passthrough", "vm_vgpu", "cpu_nodes", "k8s_nodes"]:
        assert members(group), group


@needs("tests/lab/lab_inventory.py")
def test_lab_vm_plays_an_example_host():
    sys.path.insert(0, os.path.join(REPO, "tests", "lab"))
    import lab_inventory

    vm = {"all": {"children": {"vm_passthrough": {
        "hosts": {"gpuvm": {"ansible_host": "127.0.0.1", "ansible_port": 2222, "ansible_user": "root"}},
        "vars": {"gpu_workload": "vm-passthrough", "vfio_devices": ["0000:00:05.0"]}}}}}
    out = lab_inventory.overlay(vm, "gpu-p01.example.net")
    assert list(out["all"]) == ["hosts"]  # host variables only: the example's groups stay as they are
    hv = out["all"]["hosts"]["gpu-p01.example.net"]
    assert hv["ansible_port"] == 2222 and hv["ansible_connection"] == "ssh" and hv["gpuops_stand_in"] is False
    assert hv["gpu_facts_root"] == "/" and hv["vfio_devices"] == ["0000:00:05.0"] and "gpu_workload" not in hv


@lab
@pytest.mark.parametrize("extra, got", [
    ("gpuops_cluster_rollout=sideways", "got present, roles, sideways"),
    ("gpuops_cluster_mode=helm", "got present, helm, together"),
    ("gpuops_cluster_state=latest", "got latest, roles, together"),
])
def test_cluster_play_refuses_unknown_modes_before_anything(tmp_path, roots_dir, extra, got):
    """One assert for the three modes, before the play stops for want of an API server (so no cluster is needed)."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_STDOUT_CALLBACK="default", GPUOPS_LAB_ROOTS=roots_dir)
    cmd = [PLAYBOOK, os.path.join(BOOKS, "cluster.yml"), "-i", EXAMPLE, "-i", LAB,
           "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", "gpuops_k8s_api=false", "-e", extra]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(tmp_path), timeout=600, check=False)
    assert res.returncode != 0
    assert "gpuops_cluster_state must be present|absent, gpuops_cluster_mode roles|operator and " \
           "gpuops_cluster_rollout together|each; " + got in res.stdout, res.stdout[-3000:]
    assert "Cluster components NOT applied" not in res.stdout
