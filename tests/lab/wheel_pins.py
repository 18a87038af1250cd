#!/usr/bin/env python3
"""Pins (name==version) of distributions and everything they require, as installed in the interpreter that
runs this (the project's .venv: the versions requirements-dev.lock resolved), evaluated for a target machine
of another Python (default 3.12: the lent GPU machine).  The lanes that carry wheels there download these.

    .venv/bin/python tests/lab/wheel_pins.py [--python 3.12] ansible-core kubernetes ...
"""
from __future__ import annotations

import argparse
from importlib.metadata import distribution

from packaging.requirements import Requirement


def pins(roots, python="3.12"):
    env = {"extra": "", "python_version": python, "python_full_version": python + ".0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "os_name": "posix"}
    seen, todo = {}, list(roots)
    while todo:
        d = distribution(todo.pop())
        key = d.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen[key] = d.version
        for r in d.requires or []:
            req = Requirement(r)
            if req.marker is None or req.marker.evaluate(env):
                todo.append(req.name)
    return ["%s==%s" % kv for kv in sorted(seen.items())]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default="3.12")
    ap.add_argument("roots", nargs="+")
    a = ap.parse_args()
    print("\n".join(pins(a.roots, a.python)))
