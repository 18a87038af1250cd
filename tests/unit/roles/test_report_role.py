# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The report role (issue 33, part 3: "a report people read"): its rows from real node facts (rows.j2), what
its three forms show (report.txt.j2, report.md.j2, report.html.j2, rendered as publish.yml renders them) and
its second run, which changes nothing.

The view's logic is tested in tests/unit/plugins/plugin_utils/test_report_view.py, hostile values in
tests/unit/security/test_reports.py."""
from __future__ import annotations

import json
import re

import pytest
from ansible.template import trust_as_template
from role_render import Role
from test_reports import elements, run_merge

from ansible_collections.gpuops.nvidia.plugins.module_utils import _gpu_facts
from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _report_view

ROLE = Role("report")
RUN = {"time": "2026-12-07T21:30:00Z", "inventory": ["inventories/example/hosts.yml", "inventories/lab/hosts.yml"],
       "limit": "gpu-c01.example.net,localhost", "core": "2.19.14"}
# what the container_toolkit stage registers on a host where it looked for the runtimes' binaries (preflight.yml)
FOUND = {"results": [{"item": {"key": "containerd", "value": "/usr/bin/containerd"}, "stat": {"exists": True}},
                     {"item": {"key": "crio", "value": "/usr/bin/crio"}, "stat": {"exists": False}},
                     {"item": {"key": "docker", "value": "/usr/bin/dockerd"}, "stat": {"exists": False}}]}
SKIPPED = {"results": [{"item": {"key": "containerd", "value": "/usr/bin/containerd"}, "skipped": True}]}
STAGES = [
    {"stage": "discovery", "pattern": "all", "hosts": ["c01", "c02", "p01"], "ran_on_no_host": False, "note": ""},
    {"stage": "container_toolkit", "pattern": "gpu_container", "hosts": ["c01", "c02"], "ran_on_no_host": False, "note": ""},
    {"stage": "vfio", "pattern": "vm_passthrough", "hosts": ["p01"], "ran_on_no_host": False, "note": ""},
    {"stage": "vgpu", "pattern": "vm_vgpu", "hosts": [], "ran_on_no_host": True, "note": ""},
]


def facts(root):
    gpu, _warnings = _gpu_facts.gather(root, ("pci", "iommu", "kernel", "driver"))
    return gpu


@pytest.fixture(scope="module")
def rows(roots):
    hostvars = {
        "c01": {"ansible_facts": {"gpu": facts(roots["h200"])}, "gpu_workload": "container",
                "_container_toolkit_binaries": FOUND},
        "c02": {"ansible_facts": {"gpu": facts(roots["hgx-h100"])}, "gpu_workload": "container",
                "container_toolkit_runtime": "crio", "_container_toolkit_binaries": SKIPPED},
        "p01": {"ansible_facts": {"gpu": facts(roots["passthrough"])}, "gpu_workload": "vm-passthrough"},
    }
    templar = ROLE.templar(report_hosts=list(hostvars), hostvars=hostvars, report_validated_nodes=["c01"],
                           report_validator_targets=["c01", "c02"], report_k8s_nodes=["c01", "c02"],
                           report_stages=STAGES, ansible_search_path=[ROLE.path])
    out = templar.template(trust_as_template("{{ lookup('ansible.builtin.template', 'rows.j2') | ansible.builtin.from_json }}"))
    return json.loads(json.dumps(out)), hostvars


DEFAULT = object()  # render()'s defaults: the module's ROWS, STAGES and RUN (None is a value callers pass)


def render(template, rows, stages=DEFAULT, run=DEFAULT):
    templar = ROLE.templar(report_rows=rows, report_stages=STAGES if stages is DEFAULT else stages,
                           _report_run=RUN if run is DEFAULT else run, ansible_search_path=[ROLE.path])
    return str(templar.template(trust_as_template("{{ lookup('ansible.builtin.template', '%s') }}" % template)))


def test_rows_carry_the_detected_runtime_beside_the_setting(rows):
    rows, _hv = rows
    by = {r["host"]: r for r in rows}
    # c01: the toolkit stage found containerd there; c02: it looked for none (runtime set to crio); p01: never looked
    assert (by["c01"]["runtime"], by["c01"]["runtime_setting"]) == ("containerd", "auto")
    assert (by["c02"]["runtime"], by["c02"]["runtime_setting"]) == (None, "crio")
    assert (by["p01"]["runtime"], by["p01"]["runtime_setting"]) == (None, None)
    for template in ("report.txt.j2", "report.md.j2", "report.html.j2"):
        out = render(template, rows)
        assert "containerd" in out and "not detected" in out, template
        assert "crio" not in out.replace("Runtime setting | crio", "").replace("Runtime setting</th><td>crio", ""), template


def test_rows_carry_label_values(rows):
    rows, hv = rows
    c01 = next(r for r in rows if r["host"] == "c01")
    labels = hv["c01"]["ansible_facts"]["gpu"]["labels"]
    assert c01["label_values"] == labels and len(labels) > 5 and c01["labels"] == len(labels)
    name, value = sorted(labels.items())[0]
    md = render("report.md.j2", rows)
    assert "| %s | %s |" % (name.replace("_", "\\_"), value.replace("_", "\\_")) in md
    page = render("report.html.j2", rows)
    # collapsed by default: a <details> per host, none open, each value in it
    assert page.count("<details class=\"labels\">") == len(rows) and "<details open" not in page
    section = page.split('<h2 id="host-1">', 1)[1].split("</details>", 1)[0]
    assert "<tr><td>%s</td><td>%s</td></tr>" % (name, value) in section
    assert "<summary>%d labels</summary>" % len(labels) in section


def test_ready_sits_with_the_validation_in_every_form(rows):
    rows, _hv = rows
    by = {r["host"]: r for r in rows}
    assert by["c01"]["validated"] is True and by["c02"]["validated"] is False and by["p01"]["validated"] is None
    txt, md, page = (render(t, rows) for t in ("report.txt.j2", "report.md.j2", "report.html.j2"))
    assert re.search(r"^c01 .* (yes|no) \(validated: yes\)", txt, re.M)
    assert re.search(r"^c02 .* no \(validated: no\)", txt, re.M)
    assert re.search(r"^p01 .* (yes|no) \(validated: not run\)", txt, re.M)
    for text in (txt, md, page):  # the word ready as a heading or value never stands without the validation
        assert not re.search(r"\bREADY\b(?! \(VALIDATED\))", text)
        assert not re.search(r"(<th>|\| )Ready(?! \(validated\))", text)
        assert not re.search(r"(<th>|\| )Validated\b", text)  # no separate column, it is in READY's
    assert "| Ready (validated) | no (validated: no) |" in md
    assert re.search(r'<tr><th>Ready \(validated\)</th><td class="notready">no \(validated: no\)</td></tr>', page)


def test_run_details_at_the_top_of_every_form(rows):
    rows, _hv = rows
    version = _report_view.collection_version()
    txt = render("report.txt.j2", rows)
    assert txt.split("\n")[:5] == [
        "GPU fleet readiness", "Generated   2026-12-07 21:30:00 UTC",
        "Collection  gpuops.nvidia %s (ansible-core 2.19.14)" % version,
        "Inventory   inventories/example/hosts.yml, inventories/lab/hosts.yml", "Limit       gpu-c01.example.net,localhost"]
    md = render("report.md.j2", rows)
    assert md.split("\n\n")[1] == "\n".join([
        "| Run | |", "|---|---|", "| Generated | 2026-12-07 21:30:00 UTC |",
        "| Collection | gpuops.nvidia %s (ansible-core 2.19.14) |" % version,
        "| Inventory | inventories/example/hosts.yml, inventories/lab/hosts.yml |",
        "| Limit | gpu-c01.example.net,localhost |"])
    page = render("report.html.j2", rows)
    top = page.split('<h2 id="fleet">', 1)[0]
    assert '<time datetime="2026-12-07T21:30:00Z">2026-12-07 21:30:00 UTC</time>' in top
    assert "<td>gpuops.nvidia %s (ansible-core 2.19.14)</td>" % version in top
    assert "<td>inventories/example/hosts.yml, inventories/lab/hosts.yml</td>" in top
    assert "<td>gpu-c01.example.net,localhost</td>" in top
    assert "Limit       all hosts (no --limit)" in render("report.txt.j2", rows, run=dict(RUN, limit=None))


def test_html_has_the_rollup_charts_and_the_stage_tables(rows):
    rows, _hv = rows
    page = render("report.html.j2", rows)
    fleet = page.split('<h2 id="host-1">', 1)[0]
    assert fleet.count("<svg ") == 3 and "<script" not in page and "src=" not in page and "href=\"http" not in page
    plan = fleet.split('<table id="stage-plan">', 1)[1].split("</table>", 1)[0]
    assert "<tr><td>vfio</td><td><code>vm_passthrough</code></td><td class=\"ran\">p01</td></tr>" in plan
    assert "<tr><td>vgpu</td><td><code>vm_vgpu</code></td><td class=\"notready\">no host</td></tr>" in plan
    matrix = fleet.split('<table id="stage-results">', 1)[1].split("</table>", 1)[0]
    assert "<tr><th>Host</th><th>discovery</th><th>container_toolkit</th><th>vfio</th><th>vgpu</th></tr>" in matrix
    assert re.search(r'<tr><td>p01</td><td class="ran">ok</td><td class="notrun">-</td><td class="ran">\d+/\d+ on vfio-pci</td>'
                     r'<td class="notrun">-</td></tr>', matrix), matrix
    # the same in Markdown, and no stage tables without a stage plan
    md = render("report.md.j2", rows)
    assert "| Host | discovery | container\\_toolkit | vfio | vgpu |" in md
    assert re.search(r"^\| p01 \| ok \| - \| \d+/\d+ on vfio-pci \| - \|$", md, re.M)
    bare = render("report.html.j2", rows, stages=None)
    assert 'id="stage-plan"' not in bare and 'id="stage-results"' not in bare and bare.count("<svg ") == 3
    tags = set(elements(page).tags)
    assert tags >= {"svg", "details", "summary", "time"} and "script" not in tags


# -- the role under ansible-playbook: a rerun over the same fleet changes nothing -------------------------

def _changed(res):
    m = re.search(r"localhost\s+:\s+ok=\d+\s+changed=(\d+)", res.stdout)
    assert m, res.stdout[-3000:] + res.stderr[-2000:]
    return int(m.group(1))


def test_second_run_changes_nothing_though_the_time_moves(tmp_path, rows):
    rows, _hv = rows
    parts = {"gpuops_report_part_aaa": rows}
    first = run_merge(tmp_path, parts)
    assert first.returncode == 0 and _changed(first) >= 1, first.stdout[-3000:]
    out = tmp_path / "out"
    md, page = (out / "readiness.md").read_text(), (out / "readiness.html").read_text()
    stamp = re.search(r"^\| Generated \| (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC \|$", md, re.M)
    assert stamp and ('<time datetime="%sZ">' % stamp.group(1).replace(" ", "T")) in page
    console = re.search(r"Generated\s+(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC", first.stdout)
    assert console and console.group(1) == stamp.group(1)
    second = run_merge(tmp_path, parts)  # at least a second later: its time differs
    assert second.returncode == 0 and _changed(second) == 0, second.stdout[-4000:]
    assert re.search(r"Generated\s+(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC", second.stdout).group(1) != stamp.group(1)
    assert (out / "readiness.md").read_text() == md and (out / "readiness.html").read_text() == page
    # a fleet that changed is written again, with this run's time
    changed = [dict(r, ready=not r["ready"]) for r in rows]
    third = run_merge(tmp_path, {"gpuops_report_part_aaa": changed})
    assert third.returncode == 0 and _changed(third) == 1, third.stdout[-3000:]
    assert (out / "readiness.md").read_text() != md and (out / "readiness.html").read_text() != page


def test_the_runtime_comes_from_discovery_when_it_looked(roots):
    """gpu_facts' runtime subset wins over the toolkit stage's look and the inventory's setting: running first, an
    installed one that is not running said so."""
    gpu = facts(roots["h200"])
    gpu["container_runtimes"] = [
        {"name": "docker", "binary": "/usr/bin/dockerd", "socket": None, "running": False},
        {"name": "containerd", "binary": "/usr/bin/containerd", "socket": "/run/containerd/containerd.sock", "running": True}]
    none_found = dict(facts(roots["passthrough"]), container_runtimes=[])
    hostvars = {"c01": {"ansible_facts": {"gpu": gpu}, "gpu_workload": "container", "container_toolkit_runtime": "crio",
                        "_container_toolkit_binaries": FOUND},
                "p01": {"ansible_facts": {"gpu": none_found}, "gpu_workload": "vm-passthrough",
                        "_container_toolkit_binaries": FOUND}}
    templar = ROLE.templar(report_hosts=list(hostvars), hostvars=hostvars, report_validated_nodes=None,
                           report_validator_targets=[], report_k8s_nodes=[], report_stages=None,
                           ansible_search_path=[ROLE.path])
    out = templar.template(trust_as_template("{{ lookup('ansible.builtin.template', 'rows.j2') | ansible.builtin.from_json }}"))
    by = {r["host"]: r for r in json.loads(json.dumps(out))}
    assert (by["c01"]["runtime"], by["c01"]["runtime_setting"]) == ("containerd, docker (not running)", "crio")
    assert by["p01"]["runtime"] is None  # discovery looked and found none: the toolkit's look does not count
