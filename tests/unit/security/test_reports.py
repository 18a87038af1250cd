# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Hostile-input corpus: the readiness report (roles/report) with host names, GPU names, labels and
problem texts that carry markup, cell delimiters, line breaks and templates.

Who controls them: host names and stage patterns the operator's inventory; GPU names, labels and what the
doctor quotes from a node's files the node; the rows of ``playbooks/report_merge.yml`` whoever produced the
AWX job slices' ``set_stats`` artifacts (extra variables of the merge job).  Where they reach:
``readiness.md`` (Markdown, rendered with its inline HTML), ``readiness.html``, and - for the merge job's
extra variables, which Ansible trusts as templates - Jinja on the controller.

The real templates are rendered the way the role renders them (the template lookup) and the output is
parsed: every Markdown table row has as many cell delimiters as its header, nothing but the report's own
lines exist, the Markdown renders (markdown-it, GitHub's table rules) to no element of the data's making;
the HTML parses to the report's own elements only, with each value as text; its inline SVG charts parse as
XML to the charts' own elements and attributes only, every value a text node; the console text keeps each
host on one line.  The merge playbook runs under
ansible-playbook with the parts in an extra-vars file, as AWX passes them."""
from __future__ import annotations

import html.parser
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from ansible.template import trust_as_template
from conftest import ansible_command
from role_render import Role

from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _report

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
BOOK = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "nvidia", "playbooks", "report_merge.yml")
ROLE = Role("report")

HOSTILE = [
    "<script>alert(1)</script>",
    "a|b",
    "two\nlines\n| forged | row |",
    "cr\r\n## heading",
    "{{ 6 * 7 }}",
    "`code` and ``more``",
    "[link](javascript:alert(1))",
    "<img src=x onerror=alert(1)>",
    "trailing\\",
    "back\\|slash",
    "*bold* _em_ ~~gone~~ # hash",
    "&lt;entity&gt; &amp;",
    "tab\there\x00nul\x1b[31mesc\u2028ls\x85nel",
    "{% if true %}jinja{% endif %} {%- raw %}{{ x }}{% endraw %} {# note #}",
    "quote\" apos' ]]> <![CDATA[x]]> <!-- c -->",
]
RUN = {"time": "2026-12-07T21:30:00Z", "inventory": ["inventories/example/hosts.yml", HOSTILE[0]], "limit": HOSTILE[4],
       "core": "2.19.14"}


def hostile_row(i, text):
    return {
        "host": "h%02d-%s" % (i, text), "node": text, "workload": text, "gpus": text, "product": text,
        "driver": text, "module": text, "iommu": True, "iommu_vendor": text, "vfio": text, "secure_boot": None,
        "runtime": text, "runtime_setting": text, "allocation": text, "labels": text,
        "label_names": [text, "nvidia.com/gpu.product"], "label_values": {text: text, "nvidia.com/gpu.product": text},
        "reboot_pending": True,
        "reboot_reasons": [text], "validated": False, "ready": False, "reasons": [text, "x"],
        "stages": {"discovery": text, text: "ok"},
        "problems": [{"id": text, "severity": "error", "summary": text, "remediation": text}],
        "stages_run": ["discovery"],
    }


ROWS = [hostile_row(i, t) for i, t in enumerate(HOSTILE)]
STAGES = [{"stage": t, "pattern": t, "hosts": [t, "h1"], "ran_on_no_host": False, "note": t} for t in HOSTILE] + [
    {"stage": "vfio", "pattern": "vm_passthrough", "hosts": ["gpu-p01.example.net"], "ran_on_no_host": False, "note": ""}]


DEFAULT = object()  # render()'s defaults: the module's ROWS, STAGES and RUN (None is a value callers pass)


def render(template, rows=DEFAULT, stages=DEFAULT, run=DEFAULT):
    """The template as publish.yml renders it: the template lookup, found through the role's path."""
    templar = ROLE.templar(report_rows=ROWS if rows is DEFAULT else rows, report_stages=STAGES if stages is DEFAULT else stages,
                           _report_run=RUN if run is DEFAULT else run, ansible_search_path=[ROLE.path])
    return str(templar.template(trust_as_template("{{ lookup('ansible.builtin.template', '%s') }}" % template)))


def _cells(line):
    """A table row's cells, split on the pipes GitHub's table rule splits on (not ones escaped by '\\')."""
    cells, cur, i = [], "", 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line):
            cur += line[i:i + 2]
            i += 2
            continue
        if line[i] == "|":
            cells.append(cur)
            cur = ""
        else:
            cur += line[i]
        i += 1
    return cells + [cur]


def markdown_problems(md):
    """Lines the template did not make, and table rows whose cell count differs from their table's header."""
    problems, header = [], None
    own = re.compile(r"(# GPU fleet readiness|## .+|\d+ of \d+ hosts ready; cluster validation: \d+ yes, \d+ no, \d+ not run\."
                     r"|No problems found\.|\|.*\||)")
    for n, line in enumerate(md.split("\n"), 1):
        if not own.fullmatch(line):
            problems.append("line %d is not the report's own: %r" % (n, line))
        if line.startswith("|"):
            if header is None:
                header = len(_cells(line))
            elif len(_cells(line)) != header:
                problems.append("line %d has %d cells, its table %d: %r" % (n, len(_cells(line)), header, line))
        else:
            header = None
    # outside code spans (the report shows a plain stage pattern as one) and the report's own bold "no"
    outside = re.sub(r"\*\*no \(validated: (yes|no|not run)\)\*\*", "", _outside_code_spans(md)).replace("**no host**", "")
    for ch in "<>`[]*~":
        bare = [m.start() for m in re.finditer(re.escape(ch), outside) if not _escaped(outside, m.start())]
        if bare:
            problems.append("%r unescaped at %s" % (ch, bare[:5]))
    return problems


def _outside_code_spans(md):
    """The text with every code span (an unescaped backtick to the next backtick, on one line) taken out."""
    out, i = [], 0
    while i < len(md):
        if md[i] == "`" and not _escaped(md, i):
            end = md.find("`", i + 1)
            if end > 0 and "\n" not in md[i:end]:
                i = end + 1
                continue
        out.append(md[i])
        i += 1
    return "".join(out)


def _escaped(text, pos):
    """Whether the character at ``pos`` follows an odd number of backslashes."""
    n = 0
    while pos - n - 1 >= 0 and text[pos - n - 1] == "\\":
        n += 1
    return n % 2 == 1


class _Elements(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def elements(text):
    p = _Elements()
    p.feed(text)
    p.close()
    return p


# -- readiness.md ----------------------------------------------------------------------------------

def table(md, header):
    """The body lines of the Markdown table whose header line starts with ``header``."""
    lines = md.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    body = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        body.append(line)
    return body


def test_markdown_report_keeps_every_row_whole():
    md = render("report.md.j2")
    assert not markdown_problems(md), "\n".join(markdown_problems(md))
    assert md.count("\n## ") == len(ROWS)
    # the table of the fleet: one line per host, each with the header's 10 cells (12 pieces around its pipes)
    fleet = table(md, "| Host | Workload |")
    assert len(fleet) == len(ROWS) and all(len(_cells(x)) == 12 for x in fleet)
    # which stage ran on which host: a line per host, a cell per stage
    matrix = table(md, "| Host | %s |" % _report.markdown_cell(STAGES[0]["stage"]))
    assert len(matrix) == len(ROWS) and all(len(_cells(x)) == len(STAGES) + 3 for x in matrix)
    assert "| vfio | `vm_passthrough` | gpu-p01.example.net |" in md  # a plain pattern is still a code span
    # every label with its value, a line each
    labels = [line for line in md.split("\n") if line.startswith("| nvidia.com/gpu.product |")]
    assert len(labels) == len(ROWS) and all(len(_cells(x)) == 4 for x in labels)


def test_markdown_report_renders_to_text_only():
    markdown_it = pytest.importorskip("markdown_it")
    page = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough").render(render("report.md.j2"))
    found = elements(page)
    assert set(found.tags) <= {"h1", "h2", "p", "table", "thead", "tbody", "tr", "th", "td", "strong", "code"}, sorted(set(found.tags))
    text = "".join(found.text)
    for t in HOSTILE:  # each value shows as its text (control characters as spaces)
        assert re.sub("[\x00-\x1f\x7f-\x9f\u2028\u2029]+", " ", t) in text, t


# -- readiness.html --------------------------------------------------------------------------------

OWN_HTML = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "table", "tr", "th", "td", "a", "code", "time",
            "div", "figure", "figcaption", "details", "summary"} | {"svg", "g", "rect", "text"}
# attributes beyond id and class, and what their values may be
OWN_ATTRS = {"time": {"datetime": r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"},
             "svg": {"xmlns": r"http://www\.w3\.org/2000/svg", "width": r"\d+", "height": r"\d+", "viewbox": r"0 0 \d+ \d+",
                     "role": "img", "font-family": "sans-serif", "font-size": r"\d+"},
             "rect": {"x": r"[\d.]+", "y": r"[\d.]+", "width": r"[\d.]+", "height": r"\d+", "fill": r"#[0-9a-f]{6}"},
             "text": {"x": r"[\d.]+", "y": r"[\d.]+", "fill": r"#[0-9a-f]{6}", "font-weight": "bold"}}


def html_problems(page, rows):
    found = elements(page)
    problems = ["element <%s> is not the report's" % t for t in sorted(set(found.tags) - OWN_HTML)]
    links = [a for tag, a in found.attrs if tag == "a"]
    if len(links) != len(rows) or any(set(a) != {"href"} or not re.fullmatch("#host-[0-9]+", a["href"]) for a in links):
        problems.append("links: %s" % links)
    problems += ["attributes %s on <%s>" % (a, tag) for tag, a in found.attrs if tag not in ("a", "meta", "html")
                 and any(k not in ("id", "class") and not re.fullmatch(OWN_ATTRS.get(tag, {}).get(k, "(?!)"), v or "")
                         for k, v in a.items())]
    text = _spaced("".join(found.text))
    problems += ["%r not shown as text" % t for t in HOSTILE if _spaced(t) not in text]
    return problems


def _spaced(text):
    return re.sub("[\\s\x00-\x1f\x7f-\x9f\u2028\u2029]+", " ", text)


def test_html_report_shows_every_value_as_text():
    page = render("report.html.j2")
    assert not html_problems(page, ROWS), "\n".join(html_problems(page, ROWS))
    # the run's details are values too: inventory sources and the limit come from the command line
    assert "<tr><th>Limit</th><td>{{ 6 * 7 }}</td></tr>" in page
    assert "<tr><th>Inventory</th><td>inventories/example/hosts.yml, &lt;script&gt;alert(1)&lt;/script&gt;</td></tr>" in page


SVG = "{http://www.w3.org/2000/svg}"
SVG_TAGS = {"svg", "title", "g", "rect", "text"}


def chart_problems(page):
    """Each inline <svg> of the page parsed as XML (which it must be): only the charts' own elements, attributes
    of fixed names with numbers and fixed words, and text nodes; returns (problems, the text of every title)."""
    problems, titles = [], []
    charts = re.findall(r"<svg\b.*?</svg>", page, re.S)
    if len(charts) != 3:
        problems.append("%d charts" % len(charts))
    for svg in charts:
        try:
            root = ET.fromstring(svg)
        except ET.ParseError as e:
            problems.append("a chart is not well-formed XML: %s" % e)
            continue
        for el in root.iter():
            tag = el.tag.replace(SVG, "")
            if tag not in SVG_TAGS:
                problems.append("element <%s> in a chart" % tag)
            allowed = dict(OWN_ATTRS.get(tag, {}), **{"class": "chart"} if tag == "svg" else {})
            allowed = {k.replace("viewbox", "viewBox"): v for k, v in allowed.items()}
            for k, v in el.attrib.items():
                if not re.fullmatch(allowed.get(k, "(?!)"), v):
                    problems.append("attribute %s=%r on <%s>" % (k, v, tag))
            if tag == "title":
                titles.append(el.text or "")
    return problems, titles


@pytest.mark.parametrize("part", [slice(0, 8), slice(8, None)])
def test_html_charts_are_svg_with_values_as_text(part):
    rows = ROWS[part]  # a chart has 12 bars at most: the corpus in two reports
    page = render("report.html.j2", rows=rows)
    problems, titles = chart_problems(page)
    assert not problems, "\n".join(problems)
    shown = _spaced(" ".join(titles))
    for t in HOSTILE[part]:  # the workload kind, the problem and the driver version of each row, whole, in a tooltip
        assert shown.count(_spaced(t).strip()) >= 3, t


def test_console_report_keeps_each_host_on_one_line():
    text = render("report.txt.j2")
    lines = text.split("\n")
    hosts = [line for line in lines if line.startswith("h") and re.match(r"h\d\d-", line)]
    assert len(hosts) == len(ROWS), "\n".join(lines)
    assert not [line for line in lines if line != line.rstrip()], "trailing spaces"
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]", text)


def test_every_html_output_is_escaped():
    """Every expression of the HTML template ends in `| e` (Ansible's templating has no autoescape), but the
    charts: SVG markup that report_view builds, whose values are escaped there (test_html_charts_...)."""
    with open(os.path.join(ROLE.path, "templates", "report.html.j2")) as fh:
        src = fh.read()
    charts = {"v.charts.workloads", "v.charts.problems", "v.charts.drivers"}
    bare = []
    for expr in re.findall(r"\{\{(.*?)\}\}", src, re.S):
        if expr.strip() in charts:
            continue
        m = re.fullmatch(r"(.*?)\s*\|\s*e", expr.strip(), re.S)
        if not m or re.search(r" if | or | and |~|\+", _top_level(m.group(1))):
            bare.append(expr.strip())
    assert not bare, bare


def test_every_markdown_output_is_escaped():
    """Every expression of the Markdown template ends in markdown_cell, but for counts and fixed words."""
    with open(os.path.join(ROLE.path, "templates", "report.md.j2")) as fh:
        src = fh.read()
    fixed = {"'' if d.ready_ok else '**'",
             "'**no host**' if s.ran_on_no_host else ((s.hosts | map('gpuops.nvidia.markdown_cell') | join(', ')) ~ "
             "((' -- ' ~ (s.note | gpuops.nvidia.markdown_cell)) if s.note else ''))"}
    bare = []
    for expr in re.findall(r"\{\{(.*?)\}\}", src, re.S):
        m = re.fullmatch(r"(.*?)\s*\|\s*gpuops\.nvidia\.markdown_cell(\(code=true\))?", expr.strip(), re.S)
        if expr.strip() not in fixed and (not m or re.search(r" if | or | and |~|\+", _top_level(m.group(1)))):
            bare.append(expr.strip())
    assert not bare, bare


def _top_level(expr):
    """The expression without its string literals and parenthesized parts."""
    expr = re.sub(r"'[^']*'|\"[^\"]*\"", "''", expr)
    while True:
        shorter = re.sub(r"\([^()]*\)", "", expr)
        if shorter == expr:
            return expr
        expr = shorter


# -- playbooks/report_merge.yml: parts from extra variables -----------------------------------------------

def run_merge(tmp_path, parts):
    varsfile = tmp_path / "extravars.json"
    varsfile.write_text(json.dumps(dict(parts, gpuops_report_dir=str(tmp_path / "out"))))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"), ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0",
               ANSIBLE_STDOUT_CALLBACK="default")
    cmd = [ansible_command("ansible-playbook"), "-i", "localhost,", BOOK, "-e", "ansible_python_interpreter=%s" % sys.executable,
           "-e", "@%s" % varsfile]  # as ansible-runner passes a job's extra variables
    return subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(tmp_path), timeout=300, check=False)


def test_merged_report_keeps_data_as_data(tmp_path):
    marker = tmp_path / "template-ran"
    code = "{{ lookup('ansible.builtin.pipe', 'touch %s') }}" % marker
    rows = [hostile_row(i, t) for i, t in enumerate(HOSTILE + [code])]
    res = run_merge(tmp_path, {"gpuops_report_part_aaa": rows[:7], "gpuops_report_part_bbb": rows[7:]})
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert not marker.exists(), "a template in a report part ran on the controller"
    out = tmp_path / "out"
    joined = json.loads((out / "readiness.json").read_text())
    assert joined == sorted(rows, key=lambda r: r["host"])  # every value as it was given, templates included
    md = (out / "readiness.md").read_text()
    assert not markdown_problems(md), "\n".join(markdown_problems(md))
    page = (out / "readiness.html").read_text()
    assert not html_problems(page, rows), "\n".join(html_problems(page, rows))


def test_merge_refuses_a_part_that_is_not_rows(tmp_path):
    res = run_merge(tmp_path, {"gpuops_report_part_aaa": "{{ 6 * 7 }}"})
    assert res.returncode != 0 and "gpuops_report_part_aaa must be a list of report rows" in res.stdout, res.stdout[-3000:]
    res = run_merge(tmp_path, {"gpuops_report_part_aaa": [{"gpus": 1}]})
    assert res.returncode != 0 and "gpuops_report_part_aaa[0] must be a report row" in res.stdout, res.stdout[-3000:]


# -- the escaping itself ----------------------------------------------------------------------------------

@pytest.mark.parametrize("value, code, expect", [
    ("gpu-c01.example.net", False, "gpu-c01.example.net"),
    ("a|b", False, "a\\|b"),
    ("x\\|y", False, "x\\\\\\|y"),                   # the value's backslash cannot escape the added one
    ("<b>&amp;</b>", False, "&lt;b&gt;&amp;amp;&lt;/b&gt;"),
    ("l1\nl2\r\nl3\u2028l4", False, "l1 l2 l3 l4"),
    ("[x](y) `c` *s* _u_ ~t~ #", False, "\\[x\\](y) \\`c\\` \\*s\\* \\_u\\_ \\~t\\~ \\#"),
    (None, False, ""),
    (3, False, "3"),
    ("vm_passthrough", True, "`vm_passthrough`"),
    ("all:!gpu_*", True, "`all:!gpu_*`"),
    ("a`b", True, "a\\`b"),
    ("a|b", True, "a\\|b"),
    ("<b>", True, "&lt;b&gt;"),
    ("", True, ""),
])
def test_markdown_cell(value, code, expect):
    assert _report.markdown_cell(value, code=code) == expect
