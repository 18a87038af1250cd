#!/usr/bin/env python3
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Resolve each ``<name>.txt`` into ``<name>.lock``: every distribution pinned with its hashes (``make lock``).

    python mk/lock.py [--upgrade] requirements-dev.lock tests/lab/sanity-newest/requirements.lock

The input names what is used (exact pins where a version matters to a test, ranges or bare names elsewhere);
the lock is uv's universal resolution of it with ``--generate-hashes``, which ``pip install --require-hashes
--no-deps -r <lock>`` installs exactly. Without ``--upgrade`` the pins already in a lock are kept where the
input still allows them, so an edit of the input moves only what it has to. A line ``# lock-python: X.Y`` in
the input says which Python the lock is for (default 3.11, this repository's controller Python).

The first line of a lock records the sha256 of its input; tests/unit/meta/test_locks.py fails when they
disagree (an input edited without ``make lock``) or when a pin does not satisfy the input.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIGEST_PREFIX = "# input sha256: "


def digest(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def input_of(lock):
    if not lock.endswith(".lock"):
        raise SystemExit("%s: a lock file's name ends in .lock" % lock)
    return lock[:-len(".lock")] + ".txt"


def python_of(text):
    m = re.search(r"^# lock-python: ([0-9]+\.[0-9]+)[ \t]*$", text, re.M)
    return m.group(1) if m else "3.11"


def uv():
    exe = os.path.join(os.path.dirname(sys.executable), "uv")
    if not os.access(exe, os.X_OK):
        raise SystemExit("no uv beside %s: run `make venv` (requirements-dev.txt pins it)" % sys.executable)
    return exe


def lock(path, upgrade):
    src = input_of(path)
    with open(os.path.join(ROOT, src), encoding="utf-8") as fh:
        text = fh.read()
    out = os.path.join(ROOT, path)
    tmp = out + ".new"
    if os.path.exists(out) and not upgrade:
        with open(out, encoding="utf-8") as fh, open(tmp, "w", encoding="utf-8") as new:
            new.write(fh.read())  # uv keeps the pins of the file it writes to
    cmd = [uv(), "pip", "compile", src, "--universal", "--python-version", python_of(text), "--generate-hashes",
           "--quiet", "--custom-compile-command", "make lock", "-o", tmp]
    if upgrade:
        cmd.append("--upgrade")
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=600)
    with open(tmp, encoding="utf-8") as fh:
        body = fh.read()
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write("%s%s (%s)\n" % (DIGEST_PREFIX, digest(os.path.join(ROOT, src)), src) + body)
    os.replace(tmp, out)
    print("%s <- %s (Python %s)" % (path, src, python_of(text)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upgrade", action="store_true", help="resolve every pin anew (default: keep what still fits)")
    ap.add_argument("locks", nargs="+")
    args = ap.parse_args(argv)
    for path in args.locks:
        lock(path, args.upgrade)


if __name__ == "__main__":
    main()
