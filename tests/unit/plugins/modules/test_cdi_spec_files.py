# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""cdi_spec writes its file safely (issue 15, defect 6): the requested ``mode`` is applied (also
when the content does not change, also to a new file whatever the umask), check mode changes nothing.
The spec is written whole (issue 30, defect 11): a symlink at its path is refused, never written through,
and a file there is replaced only when it is a CDI spec of kind nvidia.com/gpu."""
from __future__ import annotations

import os

import pytest
from conftest import run_module

from ansible_collections.gpuops.nvidia.plugins.modules import cdi_spec

VER = "580.159.04"
UUID = "GPU-0b231366-65a0-0fb7-6602-4823e36b7ca8"
#: a spec an earlier run (or nvidia-ctk cdi generate) left: the module's to replace
OLD_SPEC = "---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n"


def _touch(path, content=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(content)


@pytest.fixture
def root(tmp_path):
    """The smallest host tree with one GPU and a driver."""
    r = str(tmp_path / "root")
    _touch(r + "/proc/driver/nvidia/version",
           "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build\n" % VER)
    _touch(r + "/proc/driver/nvidia/gpus/0000:00:06.0/information",
           "Model: \t\t NVIDIA H200\nDevice Minor: \t 0\nGPU UUID: \t %s\nBus Location: \t 0000:00:06.0\n" % UUID)
    _touch(r + "/dev/nvidia0")
    _touch(r + "/dev/nvidiactl")
    _touch(r + "/usr/lib/x86_64-linux-gnu/libcuda.so." + VER, "ELF")
    return r


def cdi(capsys, **kw):
    kw.setdefault("source", "proc")
    return run_module(capsys, cdi_spec.main, kw)


def mode_of(path):
    return os.stat(str(path)).st_mode & 0o7777


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_mode_of_a_new_spec_is_the_requested_one(root, tmp_path, capsys, umask022):
    spec = tmp_path / "cdi" / "nvidia.yaml"
    rc, res = cdi(capsys, root=root, path=str(spec), mode="0600")
    assert rc == 0 and res["changed"] and mode_of(spec) == 0o600, res
    assert res["mode"] == "0600"


def test_mode_is_enforced_when_the_content_does_not_change(root, tmp_path, capsys):
    spec = tmp_path / "cdi" / "nvidia.yaml"
    rc, res = cdi(capsys, root=root, path=str(spec))
    assert res["changed"] and mode_of(spec) == 0o644
    content = spec.read_bytes()
    rc, res = cdi(capsys, root=root, path=str(spec), mode="0640", _ansible_check_mode=True, _ansible_diff=True)
    assert res["changed"] and mode_of(spec) == 0o644                  # check mode: said, not done
    assert "0644" in res["diff"][0]["before_header"] and "0640" in res["diff"][0]["after_header"]
    rc, res = cdi(capsys, root=root, path=str(spec), mode="0640")
    assert rc == 0 and res["changed"] and mode_of(spec) == 0o640 and spec.read_bytes() == content
    rc, res = cdi(capsys, root=root, path=str(spec), mode="0640")
    assert not res["changed"]
    rc, res = cdi(capsys, root=root, path=str(spec), mode=0o600)      # an int works too
    assert res["changed"] and mode_of(spec) == 0o600


def test_mode_is_enforced_when_the_content_changes(root, tmp_path, capsys):
    spec = tmp_path / "cdi" / "nvidia.yaml"
    _touch(str(spec), OLD_SPEC)
    os.chmod(str(spec), 0o644)
    rc, res = cdi(capsys, root=root, path=str(spec), mode="0600")
    assert res["changed"] and mode_of(spec) == 0o600 and "nvidia.com/gpu" in spec.read_text()


def test_owner_is_kept(root, tmp_path, capsys):
    spec = tmp_path / "cdi" / "nvidia.yaml"
    _touch(str(spec), OLD_SPEC)
    os.chown(str(spec), 1234, 2345)
    cdi(capsys, root=root, path=str(spec))
    s = os.stat(str(spec))
    assert (s.st_uid, s.st_gid) == (1234, 2345)


def test_a_symlinked_spec_is_refused_not_written_through(root, tmp_path, capsys):
    real = tmp_path / "specs" / "nvidia.yaml"
    _touch(str(real), OLD_SPEC)
    link = tmp_path / "cdi" / "nvidia.yaml"
    os.makedirs(str(link.parent))
    os.symlink(str(real), str(link))
    rc, res = cdi(capsys, root=root, path=str(link), mode="0640")
    assert res.get("failed") and "symbolic link" in res["msg"] and str(link) in res["msg"], res
    assert os.path.islink(str(link)) and real.read_text() == OLD_SPEC
    assert sorted(os.listdir(str(link.parent))) == ["nvidia.yaml"]


def test_json_and_yaml_specs_of_ours_are_replaced(root, tmp_path, capsys):
    for name in ("nvidia.yaml", "nvidia.json"):
        spec = tmp_path / "cdi" / name
        rc, res = cdi(capsys, root=root, path=str(spec))
        assert res["changed"], res
        written = spec.read_text()
        _touch(str(spec), written.replace("nvidia0", "nvidia9"))       # edited: still a spec of our kind
        rc, res = cdi(capsys, root=root, path=str(spec))
        assert res["changed"] and not res.get("failed") and spec.read_text() == written, res


@pytest.mark.parametrize("bad", ["rw-r--r--", "99", "-1", "017777"])
def test_bad_mode_is_refused(root, tmp_path, capsys, bad):
    spec = tmp_path / "cdi" / "nvidia.yaml"
    rc, res = cdi(capsys, root=root, path=str(spec), mode=bad)
    assert res.get("failed") and "mode" in res["msg"] and not spec.exists()
