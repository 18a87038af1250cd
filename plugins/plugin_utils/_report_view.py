# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""What the readiness report shows, computed once for its three forms (roles/report: the console text,
readiness.md and readiness.html; controller side only).

``view(rows, stages, run)`` -> a mapping:

* ``run``: the run's details - when the report was made, the collection's version (read from the collection
  this code is part of), the inventory sources and the ``--limit``;
* ``hosts``: per row, the texts every form shows the same way: READY always beside the cluster validation
  (``yes (validated: not run)``), the runtime the host was found to have (``not detected`` when nothing
  found one), labels with their values;
* ``rollup``: the fleet at a glance - hosts ready by workload kind (with their validation), hosts by
  problem, GPU hosts by driver version - and ``charts``, the same as inline SVG (``_report_svg``);
* ``matrix``: which stage of site.yml ran on which host, with the stage's result there (null without a
  stage plan);
* ``text``: the console report, its tables aligned by display width (wide characters take two columns).

Rows come from ``rows.j2`` or, in a merged report, from job slices' parts: every field is read defensively
(a part from an older collection lacks the newer fields) and every value is data, never markup - the
templates escape what they print and the SVG escapes its text.

PRIVATE: may change at any time; not for use outside gpuops.nvidia.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

from ansible_collections.gpuops.nvidia.plugins.plugin_utils._report import ReportInputError
from ansible_collections.gpuops.nvidia.plugins.plugin_utils._report_svg import bar_chart, clip, display_width

COLLECTION = "gpuops.nvidia"
# the collection's root: plugins/plugin_utils/<this file> -> ../../..
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKLOADS = ("container", "vm-passthrough", "vm-vgpu", "cpu")
# row["stages"] keys where site.yml's stage has another name
STAGE_RESULT = {"container_toolkit": "toolkit"}
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
_ISO = re.compile(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)Z")
_GALAXY_VERSION = re.compile(r"^version:[ \t]*['\"]?([^'\"\s#]+)", re.M)
CONSOLE_CELL = 40    # display columns of a console cell but the last (md and html show the whole value)


def collection_version(root=ROOT):
    """The version of the collection at ``root``: MANIFEST.json (an installed collection) or galaxy.yml
    (a checkout); ``unknown`` when neither says."""
    try:
        with open(os.path.join(root, "MANIFEST.json"), encoding="utf-8") as fh:
            return "%s" % json.load(fh)["collection_info"]["version"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        with open(os.path.join(root, "galaxy.yml"), encoding="utf-8") as fh:
            m = _GALAXY_VERSION.search(fh.read())
    except OSError:
        m = None
    return m.group(1) if m else "unknown"


def _text(value, none="-"):
    """A value as one line of text (control characters as a space); ``none`` for None and ''."""
    if value is None or value == "":
        return none
    return _CONTROL.sub(" ", "%s" % (value,)).strip() or none


def _count(value):
    """A count from a row (an int; anything else 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _list(value):
    return list(value) if isinstance(value, (list, tuple)) else []


def _version_key(version):
    """``580.95.05`` -> (580, 95, 5): versions compared as numbers."""
    return tuple(int(n) for n in re.findall(r"\d+", version)[:6])


def validation_text(validated):
    """The cluster validation of a row: ``yes``, ``no`` or ``not run`` (the validator did not run there)."""
    return "not run" if validated is None else ("yes" if validated is True else "no")


def ready_text(row):
    """READY never alone: ``yes (validated: yes)``, ``no (validated: not run)``."""
    return "%s (validated: %s)" % ("yes" if row.get("ready") is True else "no", validation_text(row.get("validated")))


def run_details(run):
    """The run's details from the role (``time`` as ``YYYY-MM-DDTHH:MM:SSZ``, ``inventory`` a list of sources or
    one, ``limit`` the run's --limit or null, ``core`` ansible-core's version) and this collection's version."""
    run = run or {}
    if not isinstance(run, Mapping):
        raise ReportInputError("the run details must be a mapping, got a %s" % type(run).__name__)
    time = _text(run.get("time"), "")
    m = _ISO.fullmatch(time)
    inventory = run.get("inventory")
    inventory = [inventory] if isinstance(inventory, str) else _list(inventory)
    limit = run.get("limit")
    core = _text(run.get("core"), "")
    return {
        "time": time,
        "time_text": "%s %s UTC" % m.groups() if m else (time or "-"),
        "collection": "%s %s" % (COLLECTION, collection_version()),
        "core": ("ansible-core %s" % core) if core else "-",
        "inventory": [_text(i) for i in inventory],
        "limit": _text(limit, "all hosts (no --limit)"),
    }


def host_view(row):
    """The texts of one row, as all three forms show them (``row``: the row itself)."""
    driver = _text(row.get("driver"))
    module = row.get("module")
    labels = row.get("label_values")
    if isinstance(labels, Mapping):
        pairs = sorted(("%s" % k, _text(v, "")) for k, v in labels.items())
    else:  # a part from before label values were reported: the names alone
        pairs = sorted(("%s" % k, "") for k in _list(row.get("label_names")))
    reboot = row.get("reboot_pending") is True
    return {
        "row": row,
        "host": _text(row.get("host")),
        "workload": _text(row.get("workload")),
        "gpus": _text(row.get("gpus"), "0"),
        "product": _text(row.get("product")),
        "driver": driver,
        "module": _text(module),
        "driver_text": driver + ((" (%s)" % _text(module)) if module else ""),
        "runtime": _text(row.get("runtime"), "not detected"),
        "runtime_setting": _text(row.get("runtime_setting")),
        "allocation": _text(row.get("allocation")),
        "iommu": ("on (%s)" % _text(row.get("iommu_vendor"))) if row.get("iommu") is True else "off",
        "vfio": _text(row.get("vfio"), "0"),
        "labels": _text(row.get("labels"), "0"),
        "label_values": [{"name": k, "value": v} for k, v in pairs],
        "reboot": "yes" if reboot else "no",
        "reboot_text": ("yes: %s" % "; ".join(_text(r, "") for r in _list(row.get("reboot_reasons")))) if reboot else "no",
        "validated": validation_text(row.get("validated")),
        "ready": ready_text(row),
        "ready_ok": row.get("ready") is True,
        "why": ", ".join(_text(r) for r in _list(row.get("reasons"))) or "-",
        "stages": [{"stage": _text(k), "result": _text(v)} for k, v in (row.get("stages") or {}).items()]
        if isinstance(row.get("stages"), Mapping) else [],
        "problems": [p for p in _list(row.get("problems")) if isinstance(p, Mapping)],
    }


def _validation_note(counts):
    parts = ["%d %s" % (counts[k], k) for k in ("yes", "no", "not run") if counts[k]]
    return "validated: %s" % (", ".join(parts) or "none")


def rollup(rows):
    """The fleet at a glance: hosts ready by workload kind (with their validation), hosts by problem,
    GPU hosts by driver version."""
    kinds, problems, drivers = {}, {}, {}
    validation = {"yes": 0, "no": 0, "not run": 0}
    for row in rows:
        kind = _text(row.get("workload"), "cpu")
        k = kinds.setdefault(kind, {"kind": kind, "hosts": 0, "ready": 0, "validation": {"yes": 0, "no": 0, "not run": 0}})
        k["hosts"] += 1
        k["ready"] += row.get("ready") is True
        k["validation"][validation_text(row.get("validated"))] += 1
        validation[validation_text(row.get("validated"))] += 1
        severity = {}
        for p in _list(row.get("problems")):
            if isinstance(p, Mapping):
                pid = _text(p.get("id"))
                if severity.get(pid) != "error":
                    severity[pid] = "error" if p.get("severity") == "error" else "warning"
        for reason in _list(row.get("reasons")):  # reboot-pending, not-validated: not findings, but not ready
            severity.setdefault(_text(reason), "error")
        for pid, sev in severity.items():
            p = problems.setdefault(pid, {"id": pid, "severity": sev, "hosts": 0})
            p["hosts"] += 1
            if sev == "error":
                p["severity"] = "error"
        if _count(row.get("gpus")) > 0 or row.get("driver"):
            version = _text(row.get("driver"), "none")
            drivers[version] = drivers.get(version, 0) + 1
    order = {k: i for i, k in enumerate(WORKLOADS)}
    workloads = sorted(kinds.values(), key=lambda k: (order.get(k["kind"], len(order)), k["kind"]))
    for k in workloads:
        k["note"] = "%d of %d ready (%s)" % (k["ready"], k["hosts"], _validation_note(k["validation"]))
    return {
        "hosts": len(rows),
        "ready": sum(1 for r in rows if r.get("ready") is True),
        "validation": validation,
        "validation_text": "cluster validation: %d yes, %d no, %d not run" % (
            validation["yes"], validation["no"], validation["not run"]),
        "workloads": workloads,
        "problems": sorted(problems.values(), key=lambda p: (p["severity"] != "error", -p["hosts"], p["id"])),
        # most hosts first; among as many, the newest version first; hosts without a driver last
        "drivers": [{"version": v, "hosts": n} for v, n in
                    sorted(sorted(drivers.items(), key=lambda vn: (_version_key(vn[0]), vn[0]), reverse=True),
                           key=lambda vn: (vn[0] == "none", -vn[1]))],
    }


def charts(summary):
    """The rollup as three inline SVG bar charts."""
    return {
        "workloads": bar_chart("Hosts ready by workload kind", [
            {"label": k["kind"], "value": k["hosts"], "note": k["note"],
             "parts": [(k["ready"], "good"), (k["hosts"] - k["ready"], "bad")]} for k in summary["workloads"]],
            empty="no hosts"),
        "problems": bar_chart("Hosts by problem", [
            {"label": p["id"], "value": p["hosts"], "note": "%s, %d host%s" % (p["severity"], p["hosts"], "" if p["hosts"] == 1 else "s"),
             "parts": [(p["hosts"], "bad" if p["severity"] == "error" else "warn")]} for p in summary["problems"]],
            empty="no problems found"),
        "drivers": bar_chart("GPU hosts by driver version", [
            {"label": d["version"], "value": d["hosts"], "note": "%d host%s" % (d["hosts"], "" if d["hosts"] == 1 else "s"),
             "parts": [(d["hosts"], "none" if d["version"] == "none" else "info")]} for d in summary["drivers"]],
            empty="no GPU hosts"),
    }


def check_stages(stages):
    if stages is None:
        return None
    if not isinstance(stages, (list, tuple)) or not all(isinstance(s, Mapping) for s in stages):
        raise ReportInputError("the stage plan must be a list of stages (mappings), got %r" % (stages,))
    return list(stages)


def stage_plan(stages):
    """site.yml's stage plan as text: each stage, its host pattern, where it ran."""
    out = []
    for s in stages:
        hosts = [_text(h) for h in _list(s.get("hosts"))]
        out.append({
            "stage": _text(s.get("stage")),
            "pattern": _text(s.get("pattern")),
            "hosts": hosts,
            "ran_on_no_host": s.get("ran_on_no_host") is True,
            "note": _text(s.get("note"), ""),
            "ran_on": "NO HOST -- the stage ran on no host" if s.get("ran_on_no_host") is True
            else (_text(s.get("note"), "") or "%d host(s)" % len(hosts)),
        })
    return out


def stage_matrix(rows, stages):
    """Which stage ran on which host, with its result there: ``{stages: [names], hosts: [{host, cells}]}``;
    a cell is the stage's result on the host (``ran`` where the row has none), ``-`` where it did not run."""
    names = [_text(s.get("stage")) for s in stages]
    ran = [{"%s" % h for h in _list(s.get("hosts"))} for s in stages]
    hosts = []
    for row in rows:
        results = row.get("stages") if isinstance(row.get("stages"), Mapping) else {}
        cells = []
        for name, where in zip(names, ran):
            if row.get("host") in where:
                cells.append(_text(results.get(STAGE_RESULT.get(name, name)), "ran"))
            else:
                cells.append("-")
        hosts.append({"host": _text(row.get("host")), "cells": cells})
    return {"stages": names, "hosts": hosts}


def _cell(text, limit=CONSOLE_CELL):
    return clip(_CONTROL.sub(" ", text), limit)


def text_table(header, lines, right=(), last_free=True):
    """Rows of cells as aligned console lines: each column as wide as its widest cell in display columns
    (wide characters count two); cells cut at CONSOLE_CELL columns but the last column's; columns in
    ``right`` right-aligned; no trailing spaces."""
    table = [[_cell(c) if i < len(header) - 1 or not last_free else _CONTROL.sub(" ", c) for i, c in enumerate(line)]
             for line in [header] + lines]
    widths = [max(display_width(line[i]) for line in table) for i in range(len(header))]
    out = []
    for line in table:
        cells = []
        for i, c in enumerate(line):
            pad = " " * (widths[i] - display_width(c))
            last = i == len(line) - 1
            cells.append(pad + c if i in right else (c if last else c + pad))
        out.append("  ".join(cells).rstrip())
    return out


def console(run, summary, hosts, plan):
    """The console report."""
    lines = ["GPU fleet readiness"]
    lines += text_table(["Generated", run["time_text"]], [
        ["Collection", "%s (%s)" % (run["collection"], run["core"])],
        ["Inventory", ", ".join(run["inventory"]) or "-"],
        ["Limit", run["limit"]]], last_free=True)
    lines += ["", "%d of %d hosts ready; %s" % (summary["ready"], summary["hosts"], summary["validation_text"])]
    workloads = [[k["kind"], "%d" % k["hosts"], k["note"]] for k in summary["workloads"]]
    lines += ["  " + line for line in text_table(["WORKLOAD", "HOSTS", "READY (VALIDATED)"], workloads, right=(1,))]
    if summary["problems"]:
        problems = [[p["id"], p["severity"], "%d" % p["hosts"]] for p in summary["problems"]]
        lines += ["  " + line for line in text_table(["PROBLEM", "SEVERITY", "HOSTS"], problems, right=(2,))]
    if summary["drivers"]:
        drivers = [[d["version"], "%d" % d["hosts"]] for d in summary["drivers"]]
        lines += ["  " + line for line in text_table(["DRIVER", "GPU HOSTS"], drivers, right=(1,))]
    lines.append("")
    lines += text_table(
        ["HOST", "WORKLOAD", "GPUS", "PRODUCT", "DRIVER", "MODULE", "RUNTIME", "IOMMU", "VFIO", "LABELS", "REBOOT",
         "READY (VALIDATED)", "WHY"],
        [[h["host"], h["workload"], h["gpus"], h["product"], h["driver"], h["module"], h["runtime"], h["iommu"],
          h["vfio"], h["labels"], h["reboot"], h["ready"], h["why"]] for h in hosts],
        right=(2, 8, 9))
    if plan is not None:
        lines += ["", "STAGES"]
        lines += text_table(["STAGE", "HOSTS (PATTERN)", "RAN ON"], [[s["stage"], s["pattern"], s["ran_on"]] for s in plan])
    return "\n".join(lines)


def check_rows(rows):
    if not isinstance(rows, (list, tuple)):
        raise ReportInputError("the report rows must be a list, got a %s" % type(rows).__name__)
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping) or not isinstance(row.get("host"), str):
            raise ReportInputError("report row %d must be a mapping with a host name, got %r" % (i, row))
    return list(rows)


def view(rows, stages=None, run=None):
    """Everything the report's three forms show (see the module's docstring)."""
    rows = check_rows(rows)
    stages = check_stages(stages)
    details = run_details(run)
    summary = rollup(rows)
    hosts = [host_view(r) for r in rows]
    plan = stage_plan(stages) if stages is not None else None
    return {
        "run": details,
        "hosts": hosts,
        "rollup": summary,
        "charts": charts(summary),
        "plan": plan,
        "matrix": stage_matrix(rows, stages) if stages is not None else None,
        "text": console(details, summary, hosts, plan),
    }
