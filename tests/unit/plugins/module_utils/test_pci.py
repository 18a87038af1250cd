"""_pci's node-file reader: regular files only, never blocking, never more than a bound."""
from __future__ import annotations

import os
import signal

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils import _errors, _pci


@pytest.fixture(autouse=True)
def deadline():
    """A read that blocks fails the test after 5 s instead of hanging the suite."""
    def expire(_signum, _frame):
        raise AssertionError("a node file read blocked")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, 5)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)


def _file(path, data):
    with open(str(path), "wb") as f:
        f.write(data)
    return str(path)


def test_a_file_up_to_the_limit_is_read_whole(tmp_path):
    assert _pci.read_node_file(_file(tmp_path / "a", b"x" * 100), limit=100) == b"x" * 100


def test_one_byte_over_the_limit_is_refused_naming_the_file(tmp_path):
    path = _file(tmp_path / "a", b"x" * 101)
    with pytest.raises(_pci.NodeFileError, match=r"a holds more than 100 bytes"):
        _pci.read_node_file(path, limit=100)


def test_a_prefix_read_takes_the_first_bytes_of_a_longer_file(tmp_path):
    assert _pci.read_node_file(_file(tmp_path / "a", b"abcdef"), limit=4, prefix=True) == b"abcd"


def test_the_size_read_decides_not_st_size(tmp_path):
    """procfs reports st_size 0 and sysfs 4096 whatever they hold: a sparse file stands for both."""
    path = str(tmp_path / "sparse")
    with open(path, "wb") as f:
        f.truncate(10 ** 9)
    with pytest.raises(_pci.NodeFileError, match="more than %d bytes" % _pci.ATTR_LIMIT):
        _pci.read_node_file(path)


def test_absent_is_none(tmp_path):
    assert _pci.read_node_file(str(tmp_path / "none")) is None
    assert _pci.read_node_file(str(tmp_path / "none" / "deeper")) is None


def test_a_link_to_a_regular_file_is_followed(tmp_path):
    """sysfs device directories and /etc/os-release are links: the checks apply to what a link leads to."""
    target = _file(tmp_path / "os-release", b"ID=debian\n")
    os.symlink(target, str(tmp_path / "link"))
    assert _pci.read_node_file(str(tmp_path / "link")) == b"ID=debian\n"


@pytest.mark.parametrize("target,kind", [("/dev/zero", "a character device"), ("/dev/null", "a character device")])
def test_a_device_node_is_never_read(tmp_path, target, kind):
    os.symlink(target, str(tmp_path / "attr"))
    with pytest.raises(_pci.NodeFileError, match="attr is %s, not a regular file" % kind):
        _pci.read_node_file(str(tmp_path / "attr"))


def test_a_fifo_is_refused_without_blocking(tmp_path):
    path = str(tmp_path / "fifo")
    os.mkfifo(path)
    with pytest.raises(_pci.NodeFileError, match="fifo is a FIFO"):
        _pci.read_node_file(path)


def test_a_file_swapped_for_a_fifo_after_the_check_is_still_refused(tmp_path, monkeypatch):
    """stat() said regular; by open() it is a FIFO: the open does not block (O_NONBLOCK) and fstat refuses it."""
    path = _file(tmp_path / "attr", b"1\n")
    real_open = os.open

    def swapping_open(p, flags, *a):
        if p == path:
            os.unlink(path)
            os.mkfifo(path)
        return real_open(p, flags, *a)

    monkeypatch.setattr(os, "open", swapping_open)
    with pytest.raises(_pci.NodeFileError, match="attr is a FIFO"):
        _pci.read_node_file(path)


def test_the_error_is_of_the_family_and_an_os_error():
    assert issubclass(_pci.NodeFileError, _errors.HostError) and issubclass(_pci.NodeFileError, OSError)


def test_read_node_text_turns_a_refusal_into_a_warning(tmp_path):
    path = str(tmp_path / "fifo")
    os.mkfifo(path)
    warnings = []
    assert _pci.read_node_text(path, warnings) is None
    assert warnings == ["%s is a FIFO, not a regular file; not read" % path]
    assert _pci.read_node_text(str(tmp_path / "none"), warnings) is None and len(warnings) == 1


def test_read_node_text_replaces_bytes_that_are_not_utf8(tmp_path):
    assert _pci.read_node_text(_file(tmp_path / "a", b"NVIDIA \xff\n")) == "NVIDIA \ufffd\n"


def test_read_attr_strips_and_bounds(tmp_path):
    warnings = []
    assert _pci.read_attr(_file(tmp_path / "vendor", b"0x10de\n"), warnings) == "0x10de"
    assert _pci.read_attr(_file(tmp_path / "big", b"x" * (_pci.ATTR_LIMIT + 1)), warnings) is None
    assert len(warnings) == 1 and "big holds more than" in warnings[0]
