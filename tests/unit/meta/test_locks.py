# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""A fresh machine installs what CI tested: every environment resolved at build time comes from a lock.

Each ``<name>.lock`` (``make lock``, mk/lock.py) is the resolution of ``<name>.txt``: its first line records the
input's sha256, every entry is ``name==version`` with hashes, and every requirement of the input is satisfied by the
lock's pin. What installs Python packages installs a lock with ``--require-hashes --no-deps`` (the venv, the
newest-core sanity chroot) or versions read from one (the GPU bundle's wheels).
"""
from __future__ import annotations

import hashlib
import os
import re

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import needs

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
pytestmark = needs("requirements-dev.lock", "Makefile", "mk/lock.py", "tests/lab/sanity-newest/requirements.lock")


def _read(rel):
    with open(os.path.join(REPO, rel), encoding="utf-8") as fh:
        return fh.read()


def makefile_locks():
    m = re.search(r"^LOCKS := (.+)$", _read("Makefile"), re.M)
    assert m, "the Makefile names its lock files in LOCKS"
    return m.group(1).split()


def entries(text):
    """{canonical name: (version, hashes)} of a lock; a line that is not a hashed exact pin is an error."""
    out, problems = {}, []
    for block in re.split(r"(?<!\\)\n", text):
        line = block.replace("\\\n", " ").strip()
        if not line or line.startswith("#"):
            continue
        line = re.sub(r"\s+#.*$", "", line)
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)\s*(?:;\s*([^-]+?))?\s*((?:--hash=sha256:[0-9a-f]{64}\s*)*)", line)
        if not m or not m.group(4):
            problems.append(line)
            continue
        out[canonicalize_name(m.group(1))] = (m.group(2), m.group(4).split())
    return out, problems


def requirements(text):
    reqs = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            reqs.append(Requirement(line))
    return reqs


def test_every_lock_file_is_one_make_lock_writes():
    found = []
    for d, dirs, files in os.walk(REPO):
        dirs[:] = [x for x in dirs if not x.startswith(".") and x not in ("build", "__pycache__")]
        found += [os.path.relpath(os.path.join(d, f), REPO) for f in files if f.endswith(".lock")]
    found.sort()
    assert found == sorted(makefile_locks()), "every *.lock is in the Makefile's LOCKS (make lock refreshes it)"


@pytest.mark.parametrize("lock", ["requirements-dev.lock", "tests/lab/sanity-newest/requirements.lock"])
def test_lock_matches_its_input(lock):
    src = lock[:-len(".lock")] + ".txt"
    text = _read(lock)
    first = text.splitlines()[0]
    want = hashlib.sha256(_read(src).encode("utf-8")).hexdigest()
    assert first.startswith("# input sha256: "), "%s: first line records its input's digest (make lock)" % lock
    assert first.split()[3] == want, "%s was resolved from another %s: run `make lock`" % (lock, src)
    pins, problems = entries(text)
    assert not problems, "%s: entries without an exact pin and hashes: %s" % (lock, problems)
    for req in requirements(_read(src)):
        name = canonicalize_name(req.name)
        assert name in pins, "%s: %s of %s is not in the lock (run `make lock`)" % (lock, req.name, src)
        assert req.specifier.contains(pins[name][0], prereleases=True), (
            "%s pins %s==%s, which %s refuses (%s): run `make lock`" % (lock, req.name, pins[name][0], src, req))


def test_the_lock_parser_sees_what_is_wrong():
    # the checks above can fail: an unpinned line, a pin without hashes, a requirement the pin does not meet
    good = "a==1.0 \\\n    --hash=sha256:%s\n" % ("0" * 64)
    assert entries(good) == ({"a": ("1.0", ["--hash=sha256:" + "0" * 64])}, [])
    assert entries("a>=1.0\n")[1] == ["a>=1.0"]
    assert entries("a==1.0\n")[1] == ["a==1.0"]
    assert not Requirement("a==2.0").specifier.contains("1.0")


def test_installers_use_the_locks():
    make = _read("Makefile")
    assert re.search(r"^\$\(VENV\)/\.stamp: requirements-dev\.lock$", make, re.M), "the venv is rebuilt when the lock changes"
    assert "pip install -q --disable-pip-version-check --require-hashes --no-deps -r requirements-dev.lock" in make
    assert not re.search(r"pip install[^\n]*-r requirements-dev\.txt", make), "the venv never resolves the input anew"
    run = _read("tests/lab/sanity-newest/run.sh")
    assert "--require-hashes --no-deps -r \"$VENV/requirements.lock\"" in run
    assert not re.search(r"pip\"? install -q \"ansible-core", run)
    build = _read("tests/lab/gpu/build.sh")
    assert "requirements-dev.lock" in build and "$pins" in build


def test_unit_requirements_pin_what_the_lock_pins():
    # ansible-test units installs tests/unit/requirements.txt (make test-units-galaxy): the same versions as the venv
    pins = entries(_read("requirements-dev.lock"))[0]
    wrong = []
    for req in requirements(_read(os.path.join("tests", "unit", "requirements.txt"))):
        exact = [s.version for s in req.specifier if s.operator == "=="]
        name = canonicalize_name(req.name)
        if len(exact) != 1 or name not in pins or pins[name][0] != exact[0]:
            wrong.append("%s (lock: %s)" % (req, pins.get(name, ("none",))[0]))
    assert wrong == [], "tests/unit/requirements.txt differs from requirements-dev.lock: %s" % wrong
