# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""Fault-injection suite (issue 15): disk full, read-only files and directories, failing validators and
restarts, SIGKILL at every kill point of a write, concurrent runs -- for every module that edits a file.

Runs against the collection installed by ``make install`` (``.collections``), like tests/unit, but each
module run is a child process (see harness.py).  Needs root (tmpfs and bind mounts, chattr).  The
counts (kill points, trials, module runs, byte-for-byte checks, files) are printed at the end of the
run and written to tests/output/faults-summary.json.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import harness as h  # noqa: E402
from stats import STATS  # noqa: E402

if not os.path.isdir(os.path.join(h.COLLECTIONS, "ansible_collections", "gpuops", "nvidia")):
    raise RuntimeError("run `make install` first: %s has no gpuops.nvidia" % h.COLLECTIONS)
h.import_modules()

import scenarios  # noqa: E402

@pytest.fixture(scope="session", autouse=True)
def tools():
    scenarios.Tools.start()
    yield scenarios.Tools
    scenarios.Tools.stop()


class Mounts(object):
    """Mounts, immutable flags and fillers a test put in place, undone at teardown (in reverse)."""

    def __init__(self):
        self.undo = []

    def tmpfs(self, directory, size="512k"):
        """Put ``directory`` (with its current content) on a tmpfs of ``size``."""
        saved = directory + ".saved"
        os.rename(directory, saved)
        os.makedirs(directory)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0755" % size, "tmpfs", directory], check=True)
        self.undo.append(lambda: subprocess.run(["umount", "-l", directory], check=False))
        subprocess.run(["cp", "-a", saved + "/.", directory], check=True)
        subprocess.run(["rm", "-rf", saved], check=True)
        return directory

    def fill(self, directory):
        filler = h.fill(directory)
        return filler

    def read_only(self, directory):
        """A read-only bind mount of ``directory`` over itself."""
        subprocess.run(["mount", "--bind", directory, directory], check=True)
        self.undo.append(lambda: subprocess.run(["umount", "-l", directory], check=False))
        subprocess.run(["mount", "-o", "remount,bind,ro", directory], check=True)

    def immutable(self, path):
        subprocess.run(["chattr", "+i", path], check=True)
        self.undo.append(lambda: subprocess.run(["chattr", "-i", path], check=False))

    def release(self):
        while self.undo:
            self.undo.pop()()


@pytest.fixture
def mounts():
    m = Mounts()
    yield m
    m.release()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = STATS.lines()
    if not lines:
        return
    terminalreporter.section("gpuops fault-injection counts")
    for line in lines:
        terminalreporter.write_line(line)
    out = os.path.join(h.REPO, "tests", "output", "faults-summary.json")
    try:
        STATS.dump(out)
        terminalreporter.write_line("(also in %s)" % os.path.relpath(out, h.REPO))
    except OSError:
        pass
