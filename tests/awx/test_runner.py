# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The repository as an AWX project, run the way AWX runs it (issue 16, part 3).

AWX updates a project by installing collections/requirements.yml in the project directory, then runs
the job's playbook from the project directory with ansible-runner. Here: the collection is installed
from the project itself (the requirements' `type: dir` entry; kubernetes.core comes from the venv, as
the test has no Galaxy), then ansible-runner runs playbooks/report.yml against the lab's node-root
hosts in two slices (as AWX job slicing splits the inventory) and playbooks/report_merge.yml with the
slices' set_stats artifacts as extra variables (as a workflow hands them on): rc 0, job events, and
the report artifact with typed values, whole again after the join."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import ansible_runner
import pytest
import yaml
from conftest import REPO, VENV_BIN

SITE_PACKAGES = [p for p in sys.path if p.endswith("site-packages")][0]
SLICES = [["sim-h200", "sim-hgx-h100", "sim-l40s", "sim-t4-nouveau"], ["sim-workstation", "sim-a100-vfio", "sim-cpu"]]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("awx")
    with open(os.path.join(REPO, "collections", "requirements.yml")) as fh:
        reqs = yaml.safe_load(fh)["collections"]
    names = {r["name"] for r in reqs}
    assert "kubernetes.core" in names
    local = [r for r in reqs if r.get("type") == "dir"]
    assert local == [{"name": ".", "type": "dir"}]
    req = tmp / "requirements-local.yml"
    req.write_text(yaml.safe_dump({"collections": local}))
    coll = tmp / "collections"
    res = subprocess.run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "install", "--force", "--no-deps",
                          "-r", str(req), "-p", str(coll)], cwd=REPO, capture_output=True, text=True, timeout=300,
                         check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert os.path.isfile(coll / "ansible_collections" / "gpuops" / "nvidia" / "roles" / "report" / "tasks" / "main.yml")
    roots = tmp / "roots"
    subprocess.run([sys.executable, os.path.join(REPO, "tests", "fixtures", "noderoots", "build.py"), "--out", str(roots)],
                   check=True, capture_output=True, timeout=300)
    return {"tmp": tmp, "collections": str(coll), "roots": str(roots)}


def run(project, name, playbook, extravars, limit=None):
    pdd = project["tmp"] / name
    pdd.mkdir()
    env = {"ANSIBLE_COLLECTIONS_PATH": "%s:%s" % (project["collections"], SITE_PACKAGES),
           "PATH": VENV_BIN + ":" + os.environ["PATH"], "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg")}
    return ansible_runner.run(private_data_dir=str(pdd), project_dir=REPO, playbook=playbook,
                              inventory=os.path.join(REPO, "tests", "awx", "lab-fleet.yml"),
                              extravars=extravars, limit=limit, envvars=env, quiet=True, timeout=300)


def stats_artifacts(r):
    stats = [e for e in r.events if e["event"] == "playbook_on_stats"]
    assert len(stats) == 1
    return stats[0]["event_data"]["artifact_data"]


def check_row_types(row):
    assert isinstance(row["host"], str) and isinstance(row["workload"], str)
    for key in ("gpus", "vfio", "labels"):
        assert type(row[key]) is int, (row["host"], key, row[key])
    for key in ("ready", "reboot_pending", "iommu"):
        assert type(row[key]) is bool, (row["host"], key, row[key])
    for key in ("reasons", "problems", "reboot_reasons", "label_names"):
        assert isinstance(row[key], list), (row["host"], key)
    assert row["validated"] is None or type(row["validated"]) is bool
    assert row["secure_boot"] is None or type(row["secure_boot"]) is bool
    assert isinstance(row["stages"], dict)
    for p in row["problems"]:
        assert set(p) == {"id", "severity", "summary", "remediation"} and p["remediation"]


def test_sliced_report_is_whole_again(project):
    parts = {}
    for i, hosts in enumerate(SLICES):
        r = run(project, "slice%d" % i, "playbooks/report.yml",
                {"lab_roots": project["roots"], "gpuops_k8s_api": False}, limit=",".join(hosts + ["localhost"]))
        assert r.rc == 0 and r.status == "successful", r.stdout.read()
        kinds = {e["event"] for e in r.events}
        assert {"playbook_on_start", "playbook_on_play_start", "runner_on_ok", "playbook_on_stats"} <= kinds
        assert glob.glob(os.path.join(r.config.artifact_dir, "job_events", "*.json"))
        art = stats_artifacts(r)
        rows = art["gpuops_report"]
        assert [x["host"] for x in rows] == hosts + ["localhost"]
        for row in rows:
            check_row_types(row)
        summary = art["gpuops_report_summary"]
        assert type(summary["hosts"]) is int and summary["hosts"] == len(rows)
        assert type(summary["ready"]) is int and isinstance(summary["not_ready"], list)
        [(key, part)] = [(k, v) for k, v in art.items() if k.startswith("gpuops_report_part_")]
        assert part == rows and key not in parts
        parts[key] = part
        if i == 0:
            t4 = next(x for x in rows if x["host"] == "sim-t4-nouveau")
            assert t4["ready"] is False and "nouveau-conflict" in t4["reasons"]
            assert any(p["id"] == "nouveau-conflict" and "blacklist" in p["remediation"] for p in t4["problems"])

    out = project["tmp"] / "report"
    r = run(project, "merge", "playbooks/report_merge.yml", dict(parts, gpuops_report_dir=str(out)))
    assert r.rc == 0 and r.status == "successful", r.stdout.read()
    whole = stats_artifacts(r)["gpuops_report"]
    assert [x["host"] for x in whole] == sorted(sum(SLICES, []) + ["localhost"])
    for row in whole:
        check_row_types(row)
    assert json.loads((out / "readiness.json").read_text()) == whole
    md = (out / "readiness.md").read_text()
    html = (out / "readiness.html").read_text()
    for row in whole:
        assert "## %s\n" % row["host"] in md and ">%s</h2>" % row["host"] in html
    assert "| nouveau-conflict | error |" in md and "<td>nouveau-conflict</td>" in html
    assert "%d of %d hosts ready" % (sum(x["ready"] for x in whole), len(whole)) in md


def test_merge_without_parts_says_why(project):
    r = run(project, "merge-empty", "playbooks/report_merge.yml", {})
    assert r.rc != 0
    assert "no gpuops_report_part_* variables" in r.stdout.read()
