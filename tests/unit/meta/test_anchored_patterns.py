# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Validation patterns match whole strings.

Python's ``$`` matches at the end of the string *and* just before a final newline, so
``re.match(r"^[a-z]+$", "ok\\n")`` succeeds, and so does Ansible's ``match`` test (``re.match``) with
``'^...$'``: a value with a trailing newline passes the check and reaches a unit file, a command line or a
path.  The one way the collection checks a whole string:

- Python: ``re.fullmatch`` (or ``pattern.fullmatch``), with no ``$`` in the pattern (a pattern that ends
  in ``\\Z`` is matched whole as well);
- roles and playbooks: the collection's Jinja test ``is gpuops.nvidia.fullmatch('...')``, with no anchors.

This scans every Python file, YAML file and template under roles/, playbooks/ and plugins/ and fails on
any ``$`` anchor in a pattern given to Python's ``re`` functions, and on any end anchor (``$`` or ``\\Z``)
in a pattern of a Jinja ``match``/``search``/``regex`` test or ``regex_search``/``regex_findall`` filter
(or a variable named ``*_re``/``*_regex``/``*_pattern`` holding one).  The only exceptions are in
ALLOWED: patterns that do not check an input's form (line parsing with ``re.M``, recognising a known
path), each with the reason.  Nothing is skipped by path."""
from __future__ import annotations

import ast
import os
import re

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCANNED = ("roles", "playbooks", "plugins")
RE_FUNCTIONS = {"compile", "match", "search", "fullmatch", "findall", "finditer", "split", "sub", "subn"}

#: (path, pattern) -> why the ``$`` in it is not a whole-string check.  Keep it short and justified.
ALLOWED = {
    ("plugins/module_utils/_container_runtime.py", r"/var/lib/rancher/(k3s|rke2)/agent/etc/containerd/config(-v3)?\.toml$"):
        "recognises k3s/RKE2's generated config by its path to refuse editing it, no check of an input's form",
    ("plugins/plugin_utils/_doctor.py", r"/var/lib/rancher/(k3s|rke2)/agent/etc/containerd/config(-v3)?\.toml(\.tmpl)?$"):
        "recognises k3s/RKE2's generated config by its path for a finding, no check of an input's form",
}


def _files(exts):
    for top in SCANNED:
        for base, dirs, files in os.walk(os.path.join(REPO, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(exts):
                    path = os.path.join(base, name)
                    yield os.path.relpath(path, REPO), path


def _anchors(pattern):
    """The end anchors in a regular expression: '$' and '\\Z' outside character classes."""
    found, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if not in_class and pattern[i + 1:i + 2] == "Z":
                found.append("\\Z")
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            if pattern[i + 1:i + 2] == "^":
                i += 1
            if pattern[i + 1:i + 2] == "]":  # a ']' first in a class is literal
                i += 1
        elif c == "$":
            found.append("$")
        i += 1
    return found


def _literal(node):
    """The pattern text of a call's first argument, when it is written in the call: a str or bytes
    constant, also as the left side of '%' formatting."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        node = node.left
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
        return node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
    return None


def python_findings(rel, source):
    out = []
    for node in ast.walk(ast.parse(source, rel)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
            continue
        if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "re" and node.func.attr in RE_FUNCTIONS):
            continue
        pattern = _literal(node.args[0])
        if pattern is not None and "$" in _anchors(pattern) and (rel, pattern) not in ALLOWED:
            out.append("%s:%d: re.%s(%r): '$' also matches before a final newline; use re.fullmatch (or "
                       "pattern.fullmatch) with no '$'" % (rel, node.lineno, node.func.attr, pattern))
    return out


_LIT = r"""'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*\""""
_JINJA_PATTERNS = [
    # `x is match('...')`, `x is search(...)`, `x is regex(...)`, `x is gpuops.nvidia.fullmatch(...)`
    re.compile(r"\b(?:match|search|regex|fullmatch)\(\s*(%s)" % _LIT),
    # the test by name: select('match', '...'), rejectattr('a', 'search', '...')
    re.compile(r"""['"](?:[\w.]+\.)?(?:match|search|regex|fullmatch)['"]\s*,\s*(%s)""" % _LIT),
    re.compile(r"\bregex_(?:search|findall)\(\s*(%s)" % _LIT),
    # a pattern kept in a variable for the tests above
    re.compile(r"\bset\s+\w*(?:_re|_regex|_pattern)\s*=\s*(%s)" % _LIT),
    re.compile(r"^\s*\w*(?:_re|_regex|_pattern):\s*(%s)" % _LIT, re.M),
]


def jinja_findings(rel, text):
    out = []
    for rx in _JINJA_PATTERNS:
        for m in rx.finditer(text):
            pattern = m.group(1)[1:-1]
            anchors = _anchors(pattern)
            if anchors and (rel, pattern) not in ALLOWED:
                line = text.count("\n", 0, m.start(1)) + 1
                out.append("%s:%d: %s: an end anchor (%s) in a Jinja pattern; write `is gpuops.nvidia.fullmatch('...')` "
                           "with no anchors (match's '$' lets a trailing newline through)" % (rel, line, m.group(1), ", ".join(anchors)))
    return out


def test_no_dollar_anchored_validation_in_python():
    found = []
    for rel, path in _files((".py",)):
        with open(path, encoding="utf-8") as fh:
            found += python_findings(rel, fh.read())
    assert not found, "\n".join(found)


def test_no_end_anchored_patterns_in_roles_and_playbooks():
    found = []
    for rel, path in _files((".yml", ".yaml", ".j2")):
        with open(path, encoding="utf-8") as fh:
            found += jinja_findings(rel, fh.read())
    assert not found, "\n".join(found)


def test_every_allowed_pattern_is_still_there():
    """An exception whose pattern is gone is removed from ALLOWED (the list stays the set in use)."""
    stale = []
    for rel, pattern in ALLOWED:
        with open(os.path.join(REPO, rel), encoding="utf-8") as fh:
            source = fh.read()
        literals = {_literal(n.args[0]) for n in ast.walk(ast.parse(source, rel))
                    if isinstance(n, ast.Call) and n.args} if rel.endswith(".py") else set()
        if pattern not in literals and pattern not in source:
            stale.append("%s: %r" % (rel, pattern))
    assert not stale, "\n".join(stale)


# -- the scanner itself --------------------------------------------------------------------------

@pytest.mark.parametrize("pattern, anchors", [
    (r"^[a-z]+$", ["$"]),
    (r"[a-z]+\Z", ["\\Z"]),
    (r"^[$a-z]+\$", []),          # '$' in a class, an escaped '$'
    (r"[]$]+", []),               # ']' first in a class is literal, so '$' is in the class
    (r"[^]$]x", []),
    (r"^(a$|b)", ["$"]),
    (r"^/", []),
])
def test_anchors(pattern, anchors):
    assert _anchors(pattern) == anchors


def test_scanner_finds_each_form():
    py = 'import re\nA = re.compile(r"^x$")\nre.match("^%s$" % y, v)\nre.fullmatch(r"x", v)\nre.search(r"x$", t, re.M)\n'
    assert [f.split(":")[1] for f in python_findings("plugins/x.py", py)] == ["2", "3", "5"]
    yml = ("- assert:\n    that:\n      - a is match('^[0-9]+$')\n      - b is not search(\"x\\Z\")\n"
           "      - c | reject('match', '^u[.]service$') | list == []\n      - d is gpuops.nvidia.fullmatch('[0-9]+')\n"
           "      - e is match('^/')\n  vars:\n    _unit_re: '^[a-z]+$'\n"
           "{% set path_re = '^(/[a-z]+)+$' %}{{ f | regex_search('^v$') }}{{ g | regex_replace('$', '/x') }}\n")
    lines = sorted(int(f.split(":")[1]) for f in jinja_findings("roles/x/tasks/main.yml", yml))
    assert lines == [3, 4, 5, 9, 10, 10]
