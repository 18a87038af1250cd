# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Hostile node files for the corpus: what can sit where a regular sysfs/procfs/state file is expected (a FIFO,
a socket, a character device, a directory, a 700 MB file), and a deadline that turns a blocked read into a test
failure instead of a suite that never ends."""
from __future__ import annotations

import contextlib
import os
import signal
import socket

DEADLINE_S = 5                    # each call takes milliseconds; a blocked read takes forever
HUGE = 700 * 1024 * 1024          # sparse: costs no disk; larger than every bound (the largest is dpkg's 128 MiB)


class Hung(BaseException):
    """A read blocked.  Not an Exception: the code under test catches those (a check must report, never crash)."""


@contextlib.contextmanager
def deadline(seconds=DEADLINE_S):
    """Raise Hung when the body runs longer than ``seconds``: a blocking open() or read() is interrupted."""
    def expire(_signum, _frame):
        raise Hung("still reading after %d s: a read blocked" % seconds)

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _fifo(path):
    os.mkfifo(path)


def _socket(path):
    cwd = os.getcwd()
    os.chdir(os.path.dirname(path))   # AF_UNIX paths are limited to 108 bytes: bind the short name
    try:
        s = socket.socket(socket.AF_UNIX)
        s.bind(os.path.basename(path))
        s.close()
    finally:
        os.chdir(cwd)


def _device(path):
    os.symlink("/dev/null", path)     # a character device, behind a link as sysfs has them


def _directory(path):
    os.mkdir(path)


def _huge(path):
    with open(path, "wb") as f:
        f.truncate(HUGE)


#: kind -> (maker, words the warning or message must carry)
KINDS = {
    "fifo": (_fifo, "a FIFO"),
    "socket": (_socket, "a socket"),
    "device": (_device, "a character device"),
    "directory": (_directory, "a directory"),
    "huge": (_huge, "more than"),
}
ALL = sorted(KINDS)


def hostile(path, kind):
    """Replace ``path`` by a hostile file of ``kind``; return it."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    KINDS[kind][0](path)
    return path
