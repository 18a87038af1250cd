# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The documents a user reads link to each other, and every link lands; runs are named by commit and date.

- README.md, CONTRIBUTING.md, docs/*.md, benchmarks/*/README.md: every relative Markdown link resolves to a file
  or folder of the tree; the README names no document of docs/ as plain code where a link belongs.
- Those documents, the result folders of the GPU lanes and the tests name a run by its commit and date, never by
  the number of the working session or CI stop that made it (a number nobody outside can look up).
"""
from __future__ import annotations

import glob
import os
import re

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
if not os.path.exists(os.path.join(REPO, "README.md")):  # the Galaxy tarball's tests run without the README
    pytest.skip("no README.md here", allow_module_level=True)

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SESSION = re.compile(r"\b[Ss]essions? ?\d+\b|\b[Ss]ession\d|\b[Ss]ession's\b|\bstop \d+\b|\bCI stop\b")


def documents():
    names = ["README.md", "CONTRIBUTING.md"] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    names += sorted(glob.glob(os.path.join(REPO, "benchmarks", "*", "README.md")))
    return [os.path.relpath(os.path.join(REPO, n), REPO) for n in names]


def read(rel):
    with open(os.path.join(REPO, rel), encoding="utf-8") as fh:
        return fh.read()


def links(text):
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold commands, not links
    return LINK.findall(text)


def test_link_pattern_finds_links():
    assert links("see [DRA](docs/dra.md) and [x](https://e.org) `[no](a.md)`\n```\n[n](b.md)\n```") == [
        "docs/dra.md", "https://e.org", "a.md"]


@pytest.mark.parametrize("doc", documents())
def test_every_relative_link_lands(doc):
    bad = []
    for target in links(read(doc)):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = os.path.normpath(os.path.join(REPO, os.path.dirname(doc), target.split("#")[0]))
        if not os.path.exists(path):
            bad.append(target)
    assert not bad, "%s links to what the tree does not have: %s" % (doc, bad)


def test_the_readme_links_its_documents():
    text = re.sub(r"```.*?```", "", read("README.md"), flags=re.S)
    plain = re.findall(r"(?<!\[)`(docs/[^`]+\.md)`", text)
    assert not plain, "README.md names these as code, not links: %s" % plain
    linked = {os.path.normpath(t) for t in links(text)}
    for name in ("docs/architecture.md", "docs/security.md", "docs/testing.md", "docs/timings.md", "CONTRIBUTING.md"):
        assert name in linked, "README.md does not link %s" % name


def test_session_pattern():
    for bad in ("session 13", "Session 2 (2026-12-02)", "in sessions 12-13", "session6", "session's",
                "CI run of stop 21"):
        assert SESSION.search(bad), bad
    for good in ("a6fc6fe, 2026-12-04", "this SSH session", "the run of 78e8d5e", "stop the daemon"):
        assert not SESSION.search(good), good


def test_runs_are_named_by_commit_and_date():
    files = documents()
    for pattern in ("tests/**/*.py", "tests/**/*.sh", "tests/lab/**/results/**/*.md", "benchmarks/**/*.py",
                    "docs/*.py", "Makefile", "mk/*.mk"):
        files += [os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, pattern), recursive=True)]
    this = os.path.relpath(__file__, REPO)
    found = []
    for rel in sorted(set(files) - {this}):
        for n, line in enumerate(read(rel).splitlines(), 1):
            if SESSION.search(line):
                found.append("%s:%d: %s" % (rel, n, line.strip()[:120]))
    assert not found, "name these runs by commit and date:\n" + "\n".join(found)


@pytest.mark.parametrize("folder", ["tests/lab/h200/results", "tests/lab/gpu/results/cluster"])
def test_result_folders_carry_date_and_commit(folder):
    path = os.path.join(REPO, folder)
    names = [n for n in os.listdir(path) if os.path.isdir(os.path.join(path, n))]
    assert names
    bad = [n for n in names if not re.fullmatch(r"\d{4}-\d{2}-\d{2}-[0-9a-f]{7,40}-[A-Za-z0-9-]+", n)]
    assert not bad, "result folders not named <date>-<commit>-<what>: %s" % bad
