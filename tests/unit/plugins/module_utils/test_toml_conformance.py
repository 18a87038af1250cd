# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""The TOML editor's parser against the official toml-test suite (TOML 1.0 list).

The suite is published as a Go module (github.com/toml-lang/toml-test); its
zip carries tests/valid, tests/invalid and the per-version file lists.
tests/toml_test/fetch.sh brings it into the project cache.  Every file named
by tests/files-toml-1.0.0 is run:

* valid/*.toml must parse, and where a .json expectation sits beside it the
  decoded values must match toml-test's tagged JSON encoding (types included:
  an integer is not a float, a local date-time is not an offset one);
* invalid/*.toml must be rejected with TomlError (never another exception);
* the suite's files, mutated at random (fixed seed), must be accepted or
  rejected exactly as ``tomllib`` does, with the same values (a differential
  check that reaches what the suite's files do not).

The test skips, saying why, only when the suite cannot be fetched.  Set
TOML_TEST_DIR to a folder holding the suite's tests/ tree to use another copy.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import random
import subprocess
import tomllib

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils._toml import TomlError, loads

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
FETCH = os.path.join(REPO, "tests", "toml_test", "fetch.sh")
LIST = "files-toml-1.0.0"


def _suite_dir():
    """Folder whose tests/ holds the suite, or pytest.skip with the reason."""
    env = os.environ.get("TOML_TEST_DIR")
    if env:
        if os.path.isfile(os.path.join(env, "tests", LIST)):
            return env
        pytest.skip("TOML_TEST_DIR=%s has no tests/%s" % (env, LIST))
    if not os.path.isfile(FETCH):
        pytest.skip("toml-test suite: tests/toml_test/fetch.sh is not in the Galaxy tarball (set TOML_TEST_DIR)")
    try:
        proc = subprocess.run(["bash", FETCH], capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip("toml-test suite could not be fetched: %s" % e)
    if proc.returncode != 0:
        pytest.skip("toml-test suite could not be fetched: %s" % (proc.stderr.strip() or proc.returncode))
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def suite():
    root = _suite_dir()
    tests = os.path.join(root, "tests")
    with open(os.path.join(tests, LIST)) as f:
        names = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
    version = os.path.basename(root).rpartition("@")[2] or "?"
    return tests, names, version


# -- toml-test's tagged JSON -> the Python values tomllib would give -------------

def _float(text):
    t = text.lower()
    if t.lstrip("+-") == "nan":
        return float("nan")
    if t.lstrip("+-") == "inf":
        return float("-inf") if t.startswith("-") else float("inf")
    return float(text)


def _frac6(text):
    """Truncate fractional seconds to microseconds (Python's precision)."""
    head, dot, rest = text.partition(".")
    if not dot:
        return text
    digits = ""
    while rest and rest[0].isdigit():
        digits, rest = digits + rest[0], rest[1:]
    return head + "." + digits[:6].ljust(6, "0") + rest


def _datetime(text):
    text = _frac6(text.replace(" ", "T").replace("t", "T").replace("z", "Z"))
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    return datetime.datetime.fromisoformat(text)


def _untag(node):
    if isinstance(node, list):
        return [_untag(x) for x in node]
    if isinstance(node, dict) and set(node) == {"type", "value"} and isinstance(node["value"], str):
        kind, val = node["type"], node["value"]
        if kind == "string":
            return val
        if kind == "integer":
            return int(val)
        if kind == "float":
            return _float(val)
        if kind == "bool":
            return val == "true"
        if kind in ("datetime", "datetime-local"):
            return _datetime(val)
        if kind == "date-local":
            return datetime.date.fromisoformat(val)
        if kind == "time-local":
            return datetime.time.fromisoformat(_frac6(val))
        raise AssertionError("unknown toml-test type %r" % kind)
    return dict((k, _untag(v)) for k, v in node.items())


def _diff(want, have, path="$"):
    """First difference between ``want`` and ``have`` (strict on types), or None."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return "%s: want table, have %r" % (path, have)
        if set(want) != set(have):
            return "%s: keys differ: want %s, have %s" % (path, sorted(want), sorted(have))
        for k in want:
            d = _diff(want[k], have[k], "%s.%s" % (path, k))
            if d:
                return d
        return None
    if isinstance(want, list):
        if not isinstance(have, list) or len(want) != len(have):
            return "%s: want %r, have %r" % (path, want, have)
        for i, (a, b) in enumerate(zip(want, have)):
            d = _diff(a, b, "%s[%d]" % (path, i))
            if d:
                return d
        return None
    if type(want) is not type(have):
        return "%s: want %s %r, have %s %r" % (path, type(want).__name__, want, type(have).__name__, have)
    if isinstance(want, float) and math.isnan(want):
        return None if math.isnan(have) else "%s: want nan, have %r" % (path, have)
    if isinstance(want, datetime.datetime) and want.utcoffset() != have.utcoffset():
        return "%s: want %r, have %r (offsets differ)" % (path, want, have)
    if want != have:
        return "%s: want %r, have %r" % (path, want, have)
    return None


def _report(capsys, line):
    with capsys.disabled():
        print("\n" + line)


def test_valid_files_parse_to_the_expected_values(suite, capsys):
    tests, names, version = suite
    valid = [n for n in names if n.startswith("valid/") and n.endswith(".toml")]
    assert valid, "no valid files listed"
    failures, compared = [], 0
    for name in valid:
        with open(os.path.join(tests, name), "rb") as f:
            raw = f.read()
        try:
            have = loads(raw)
        except Exception as e:  # every failure is reported, not just the first
            failures.append("%s: %s: %s" % (name, type(e).__name__, e))
            continue
        expect = os.path.join(tests, name[:-5] + ".json")
        if os.path.exists(expect):
            compared += 1
            with open(expect, encoding="utf-8") as f:
                d = _diff(_untag(json.load(f)), have)
            if d:
                failures.append("%s: %s" % (name, d))
    _report(capsys, "toml-test %s (%s): valid passed %d/%d (%d compared with their JSON)"
            % (version, LIST, len(valid) - len(failures), len(valid), compared))
    assert not failures, "%d valid files fail:\n%s" % (len(failures), "\n".join(failures))


def test_invalid_files_are_rejected(suite, capsys):
    tests, names, version = suite
    invalid = [n for n in names if n.startswith("invalid/") and n.endswith(".toml")]
    assert invalid, "no invalid files listed"
    failures = []
    for name in invalid:
        with open(os.path.join(tests, name), "rb") as f:
            raw = f.read()
        try:
            loads(raw)
        except TomlError:
            continue
        except Exception as e:
            failures.append("%s: %s instead of TomlError: %s" % (name, type(e).__name__, e))
            continue
        failures.append("%s: accepted" % name)
    _report(capsys, "toml-test %s (%s): invalid rejected %d/%d"
            % (version, LIST, len(invalid) - len(failures), len(invalid)))
    assert not failures, "%d invalid files not rejected with TomlError:\n%s" % (len(failures), "\n".join(failures))


MUTATIONS = 20000
_PIECES = list("[]{}=,.\"'#\n\r\t _-+0123456789:TZezxob\\ufl") + ["\r\n", '"""', "'''", "[[", "]]"]


def _mutate(rnd, text, corpus):
    for _step in range(rnd.randint(1, 3)):
        op, p = rnd.random(), rnd.randint(0, len(text))
        if op < 0.35:
            text = text[:p] + text[p + 1:]
        elif op < 0.7:
            text = text[:p] + rnd.choice(_PIECES) + text[p:]
        elif op < 0.85:
            lines = text.split("\n")
            lines.insert(rnd.randrange(len(lines)), rnd.choice(lines))
            text = "\n".join(lines)
        else:
            other = rnd.choice(corpus)
            q = rnd.randint(0, len(other))
            text = text[:p] + other[q:q + rnd.randint(1, 30)] + text[p:]
    return text


def test_mutated_files_are_judged_like_tomllib(suite, capsys):
    tests, names, version = suite
    corpus = []
    for name in names:
        if name.endswith(".toml"):
            with open(os.path.join(tests, name), "rb") as f:
                try:
                    corpus.append(f.read().decode("utf-8"))
                except UnicodeDecodeError:
                    continue
    rnd = random.Random(15)
    diffs, accepted = [], 0
    for _round in range(MUTATIONS):
        text = _mutate(rnd, rnd.choice(corpus), corpus)
        try:
            want = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            want = None
        try:
            have = loads(text)
        except TomlError:
            have = None
        except Exception as e:
            diffs.append("%r: %s: %s" % (text[:200], type(e).__name__, e))
            continue
        if (want is None) != (have is None):
            diffs.append("%r: tomllib %s, we %s" % (text[:200], "rejects" if want is None else "accepts",
                                                    "reject" if have is None else "accept"))
        elif want is not None:
            accepted += 1
            d = _diff(want, have)
            if d:
                diffs.append("%r: %s" % (text[:200], d))
    _report(capsys, "toml-test %s: %d mutated files judged like tomllib: %d/%d (%d of them valid)"
            % (version, MUTATIONS, MUTATIONS - len(diffs), MUTATIONS, accepted))
    assert not diffs, "%d differences from tomllib:\n%s" % (len(diffs), "\n".join(diffs[:30]))
