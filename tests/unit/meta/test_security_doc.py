# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""docs/security.md names the tests that prove each row of the threat model: every name there is a test that
exists (``*`` stands for any part of the name), and every test file of the hostile-input corpus
(tests/unit/security) is named by the page."""
from __future__ import annotations

import fnmatch
import glob
import os
import re

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def _read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _test_functions():
    names = set()
    for path in glob.glob(os.path.join(REPO, "tests", "**", "test_*.py"), recursive=True):
        names.update(re.findall(r"^(?:    )?def (test_[A-Za-z0-9_]+)\(", _read(path), re.M))
    return names


def _named(text):
    """Test names in backticks, with an optional file prefix (``file.py::name``) and a trailing ``*``."""
    out = []
    for code in re.findall(r"`([^`]+)`", text):
        for part in code.split(", "):
            m = re.fullmatch(r"(?:[A-Za-z0-9_/]+\.py)?(?:::)?(test_[A-Za-z0-9_*]*)", part.strip())
            if m:
                out.append(m.group(1))
    return out


def test_every_test_the_threat_model_names_exists():
    doc = _read(os.path.join(REPO, "docs", "security.md"))
    names = _named(doc)
    assert len(names) > 40, "docs/security.md names its proving tests in backticks"
    have = _test_functions()
    missing = [n for n in names if not fnmatch.filter(have, n)]
    assert missing == [], "docs/security.md names tests that do not exist: %s" % missing


def test_every_corpus_file_is_in_the_threat_model():
    doc = _read(os.path.join(REPO, "docs", "security.md"))
    files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "tests", "unit", "security", "test_*.py")))
    assert files, "the hostile-input corpus is tests/unit/security"
    assert [f for f in files if f not in doc] == []


def test_the_name_check_can_fail():
    assert _named("`test_a_b`, `test_c_*_e` and `x.py::test_d`, `not_a_test`") == ["test_a_b", "test_c_*_e", "test_d"]
    assert fnmatch.filter({"test_c_x_e"}, "test_c_*_e") and not fnmatch.filter({"test_c_x_f"}, "test_c_*_e")
