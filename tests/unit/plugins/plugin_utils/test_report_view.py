# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""What the readiness report shows (issue 33, part 3: "a report people read"), from the rows as the role makes
them: plugin_utils/_report_view.py and _report_svg.py, through the filter report_view.

Run details, READY always beside the validation, the detected runtime, labels with values, the fleet roll-up
and its SVG charts, the stage matrix, and the console tables aligned by display width.  The hostile-value
corpus over the real templates is tests/unit/security/test_reports.py; the role itself is
tests/unit/roles/test_report_role.py."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.filter import report_view as f
from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _report_svg, _report_view
from ansible_collections.gpuops.nvidia.plugins.plugin_utils._report import ReportInputError

RUN = {"time": "2026-12-07T21:30:00Z", "inventory": ["inventories/example/hosts.yml", "inventories/lab/hosts.yml"],
       "limit": None, "core": "2.19.14"}


def row(host, workload="container", ready=True, validated=None, driver="580.95.05", gpus=1, problems=(), reasons=(),
        runtime=None, labels=None, stages=None, **extra):
    labels = {"nvidia.com/gpu.present": "true"} if labels is None else labels
    out = {"host": host, "node": host, "workload": workload, "gpus": gpus, "product": "NVIDIA H200", "driver": driver,
           "module": "open" if driver else None, "iommu": True, "iommu_vendor": "intel", "vfio": 0, "secure_boot": False,
           "runtime": runtime, "runtime_setting": "auto" if workload == "container" else None,
           "allocation": "device-plugin" if workload == "container" else None, "labels": len(labels),
           "label_names": sorted(labels), "label_values": labels, "reboot_pending": False, "reboot_reasons": [],
           "validated": validated, "ready": ready, "reasons": list(reasons),
           "stages": stages or {"discovery": "ok", "driver": "loaded %s" % driver if driver else "not loaded",
                                "toolkit": "no problem found" if workload == "container" else "n/a", "vfio": "n/a",
                                "cluster": "n/a" if validated is None else ("validated" if validated else "not validated")},
           "problems": [dict(p) for p in problems], "stages_run": None}
    out.update(extra)
    return out


NOUVEAU = {"id": "nouveau-conflict", "severity": "error", "summary": "nouveau holds the GPU", "remediation": "blacklist it"}
HEADERS = {"id": "kernel-headers-missing", "severity": "warning", "summary": "no headers", "remediation": "install them"}
FLEET = [
    row("gpu-c01", validated=True, runtime="containerd"),
    row("gpu-c02", driver="570.172.08", ready=False, validated=False, reasons=["not-validated"]),
    row("gpu-p01", workload="vm-passthrough", driver=None, vfio=2, gpus=2),
    row("gpu-g01", workload="vm-vgpu", ready=False, driver=None, problems=[NOUVEAU, HEADERS], reasons=["nouveau-conflict"]),
    row("cpu-01", workload="cpu", gpus=0, driver=None, labels={}),
]


def test_run_details_name_time_version_inventory_and_limit():
    run = _report_view.run_details(RUN)
    assert run["time_text"] == "2026-12-07 21:30:00 UTC" and run["time"] == "2026-12-07T21:30:00Z"
    assert run["collection"] == "gpuops.nvidia %s" % _report_view.collection_version()
    assert re.fullmatch(r"gpuops\.nvidia \d+\.\d+\.\d+\S*", run["collection"]), run["collection"]
    assert run["core"] == "ansible-core 2.19.14"
    assert run["inventory"] == RUN["inventory"] and run["limit"] == "all hosts (no --limit)"
    one = _report_view.run_details({"time": "soon", "inventory": "/runner/inventory/hosts", "limit": "gpu-c01,localhost"})
    assert one["inventory"] == ["/runner/inventory/hosts"] and one["limit"] == "gpu-c01,localhost"
    assert one["time_text"] == "soon" and one["core"] == "-"
    assert _report_view.run_details(None)["time_text"] == "-"
    with pytest.raises(ReportInputError):
        _report_view.run_details(["not", "a", "mapping"])


def test_collection_version_from_the_manifest_else_galaxy_yml(tmp_path):
    (tmp_path / "galaxy.yml").write_text("namespace: gpuops\nname: nvidia\nversion: '1.2.3'  # released\n")
    assert _report_view.collection_version(str(tmp_path)) == "1.2.3"
    (tmp_path / "MANIFEST.json").write_text(json.dumps({"collection_info": {"version": "2.0.0"}}))
    assert _report_view.collection_version(str(tmp_path)) == "2.0.0"
    (tmp_path / "MANIFEST.json").write_text("{broken")
    assert _report_view.collection_version(str(tmp_path)) == "1.2.3"
    assert _report_view.collection_version(str(tmp_path / "nowhere")) == "unknown"


@pytest.mark.parametrize("ready, validated, text", [
    (True, True, "yes (validated: yes)"), (True, None, "yes (validated: not run)"),
    (False, False, "no (validated: no)"), (False, None, "no (validated: not run)"),
])
def test_ready_is_never_shown_without_the_validation(ready, validated, text):
    assert _report_view.ready_text({"ready": ready, "validated": validated}) == text
    assert _report_view.host_view(row("h", ready=ready, validated=validated))["ready"] == text


def test_console_shows_ready_only_beside_the_validation():
    text = f.report_view(FLEET, None, RUN)["text"]
    assert "READY (VALIDATED)" in text and not re.search(r"READY(?! \(VALIDATED\))", text)
    host_lines = [line for line in text.split("\n") if re.match(r"(gpu|cpu)-", line)]
    assert len(host_lines) == len(FLEET)
    assert all(re.search(r"\b(yes|no) \(validated: (yes|no|not run)\)", line) for line in host_lines)


def test_runtime_is_the_one_detected_or_says_not_detected():
    views = f.report_view(FLEET, None, RUN)["hosts"]
    assert [v["runtime"] for v in views] == ["containerd", "not detected", "not detected", "not detected", "not detected"]
    assert views[0]["runtime_setting"] == "auto" and views[2]["runtime_setting"] == "-"


def test_labels_with_their_values_sorted_and_older_parts_by_name():
    v = _report_view.host_view(row("h", labels={"b/x": "2", "a/y": "1\nforged"}))
    assert v["label_values"] == [{"name": "a/y", "value": "1 forged"}, {"name": "b/x", "value": "2"}]
    old = row("h")
    del old["label_values"]
    assert _report_view.host_view(old)["label_values"] == [{"name": "nvidia.com/gpu.present", "value": ""}]


def test_rollup_by_workload_problem_and_driver():
    r = _report_view.rollup(FLEET)
    assert (r["hosts"], r["ready"]) == (5, 3)
    assert r["validation"] == {"yes": 1, "no": 1, "not run": 3}
    assert [(k["kind"], k["hosts"], k["ready"]) for k in r["workloads"]] == [
        ("container", 2, 1), ("vm-passthrough", 1, 1), ("vm-vgpu", 1, 0), ("cpu", 1, 1)]
    assert r["workloads"][0]["note"] == "1 of 2 ready (validated: 1 yes, 1 no)"
    # errors first, then by hosts; a readiness reason that is no finding counts as an error
    assert [(p["id"], p["severity"], p["hosts"]) for p in r["problems"]] == [
        ("not-validated", "error", 1), ("nouveau-conflict", "error", 1), ("kernel-headers-missing", "warning", 1)]
    # hosts with GPUs by driver version; a GPU host without a driver is "none", a CPU host is not counted
    assert r["drivers"] == [{"version": "580.95.05", "hosts": 1}, {"version": "570.172.08", "hosts": 1},
                            {"version": "none", "hosts": 2}]
    more = _report_view.rollup(FLEET + [row("gpu-c03", driver="570.172.08"), row("gpu-c04", driver="90.1")])
    assert [d["version"] for d in more["drivers"]] == ["570.172.08", "580.95.05", "90.1", "none"]


def _svg(markup):
    root = ET.fromstring(markup)  # well-formed XML, or this fails
    ns = "{http://www.w3.org/2000/svg}"
    return root, [(el.tag.replace(ns, ""), el) for el in root.iter()]


def test_charts_are_self_contained_svg_with_bars_to_scale():
    charts = f.report_view(FLEET, None, RUN)["charts"]
    assert set(charts) == {"workloads", "problems", "drivers"}
    for markup in charts.values():
        assert not re.search(r"script|style|href|foreignObject|url\(|on[a-z]+=", markup, re.I), markup
        _root, elements = _svg(markup)
        assert {tag for tag, _el in elements} <= {"svg", "title", "g", "rect", "text"}
    _root, elements = _svg(charts["workloads"])
    rects = [(float(el.get("width")), el.get("fill")) for tag, el in elements if tag == "rect"]
    # container: 1 ready (green) + 1 not ready (red) = the longest bar; each single host half of it
    good, bad = _report_svg.TONES["good"], _report_svg.TONES["bad"]
    half = _report_svg.BAR_W / 2
    assert rects[:2] == [(half, good), (half, bad)]
    assert rects[2:] == [(half, good), (half, bad), (half, good)]
    texts = [el.text for tag, el in elements if tag == "text"]
    assert "1 of 2 ready (validated: 1 yes, 1 no)" in texts
    _root, elements = _svg(charts["drivers"])
    assert [el.text for tag, el in elements if tag == "text"][1::2] == ["580.95.05", "570.172.08", "none"]
    empty = _report_view.charts(_report_view.rollup([]))
    assert "no problems found" in empty["problems"] and "no GPU hosts" in empty["drivers"]


def test_svg_text_is_escaped_and_labels_are_cut_by_width():
    hostile = "</text><script>alert(1)</script>&amp;\"'\x00"
    markup = _report_svg.bar_chart(hostile, [{"label": hostile, "value": 1, "note": hostile}])
    _root, elements = _svg(markup)
    assert "<script" not in markup and "&lt;script&gt;" in markup
    titles = [el.text for tag, el in elements if tag == "title"]
    shown = hostile.replace("\x00", " ")
    assert titles == [shown, "%s: %s" % (shown, shown)]
    assert _report_svg.clip("x" * 40, 10) == "x" * 9 + "\u2026"
    assert _report_svg.clip("\u30db" * 10, 10) == "\u30db" * 4 + "\u2026"   # wide: two columns each
    assert _report_svg.display_width("\u30db\u30b9\u30c8") == 6 and _report_svg.display_width("e\u0301") == 1


def test_a_long_chart_ends_in_a_count_of_the_rest():
    bars = [{"label": "p%02d" % i, "value": 1} for i in range(20)]
    _root, elements = _svg(_report_svg.bar_chart("t", bars, most=5))
    assert len([el for tag, el in elements if tag == "rect"]) == 4
    assert [el.text for tag, el in elements if tag == "text"][-1] == "and 16 more (see the tables)"
    _root, elements = _svg(_report_svg.bar_chart("t", bars[:5], most=5))
    assert len([el for tag, el in elements if tag == "rect"]) == 5


def _columns(line, cells):
    """Display columns at which each of ``cells`` starts in ``line`` (found in order)."""
    out, pos = [], 0
    for cell in cells:
        pos = line.index(cell, pos)
        out.append(_report_svg.display_width(line[:pos]))
        pos += len(cell)
    return out


def test_console_table_aligns_by_display_width():
    wide = [row("\u30db\u30b9\u30c8-01", validated=True),            # katakana: two columns a character
            row("e\u0301cole-02", workload="vm-passthrough"),         # a combining accent: none
            row("plain-host-03", workload="cpu", gpus=0, driver=None)]
    text = f.report_view(wide, None, RUN)["text"]
    lines = text.split("\n")
    header = next(i for i, line in enumerate(lines) if line.startswith("HOST "))
    table = lines[header:header + 4]
    starts = [_columns(line, [line.split()[0], cells]) for line, cells in zip(
        table, ["WORKLOAD", "container", "vm-passthrough", "cpu"])]
    assert len({s[1] for s in starts}) == 1, "\n".join(table)
    # the READY column too (counted in characters, the katakana row would start it 3 columns early)
    ready = [_report_svg.display_width(line[:line.index(m)]) for line, m in
             zip(table, ["READY", "yes (validated: yes)", "yes (validated: not run)", "yes (validated: not run)"])]
    assert len(set(ready)) == 1, "\n".join(table)
    assert all(line == line.rstrip() for line in lines)


def test_text_table_cuts_long_cells_but_the_last():
    out = _report_view.text_table(["A", "B", "WHY"], [["x" * 60, "1", "y" * 80]], right=(1,))
    assert out[1] == "x" * 39 + "\u2026" + "  1  " + "y" * 80
    assert out[0] == "A" + " " * 39 + "  B  WHY"


def test_stage_matrix_shows_results_where_a_stage_ran():
    stages = [{"stage": "discovery", "pattern": "all", "hosts": ["gpu-c01", "gpu-p01"], "ran_on_no_host": False},
              {"stage": "container_toolkit", "pattern": "gpu_container", "hosts": ["gpu-c01"], "ran_on_no_host": False},
              {"stage": "vfio", "pattern": "vm_passthrough", "hosts": ["gpu-p01"], "ran_on_no_host": False},
              {"stage": "vgpu", "pattern": "vm_vgpu", "hosts": [], "ran_on_no_host": True}]
    p01 = row("gpu-p01", workload="vm-passthrough", driver=None)
    p01["stages"]["vfio"] = "2/2 on vfio-pci"
    v = f.report_view([FLEET[0], p01], stages, RUN)
    assert v["matrix"] == {"stages": ["discovery", "container_toolkit", "vfio", "vgpu"], "hosts": [
        {"host": "gpu-c01", "cells": ["ok", "no problem found", "-", "-"]},
        {"host": "gpu-p01", "cells": ["ok", "-", "2/2 on vfio-pci", "-"]}]}
    assert [s["ran_on"] for s in v["plan"]] == ["2 host(s)", "1 host(s)", "1 host(s)", "NO HOST -- the stage ran on no host"]
    assert re.search(r"^vgpu\s+vm_vgpu\s+NO HOST -- the stage ran on no host$", v["text"], re.M)
    assert f.report_view([FLEET[0]], None, RUN)["matrix"] is None


@pytest.mark.parametrize("rows, stages, run", [
    (None, None, None), ("rows", None, None), ([{"gpus": 1}], None, None), ([["h"]], None, None),
    (FLEET, "stages", None), (FLEET, [1, 2], None), (FLEET, None, "run"),
])
def test_bad_input_is_refused_by_name(rows, stages, run):
    with pytest.raises(AnsibleFilterError, match="report_view: "):
        f.report_view(rows, stages, run)
