# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""cdi_spec writes its file safely (issue 15, defect 6): the requested ``mode`` is applied (also
when the content does not change, also to a new file whatever the umask), check mode changes nothing.
The spec is written whole (issue 30, defect 11): a symlink at its path is refused, never written through,
and a file there is replaced only when it is a CDI spec of kind nvidia.com/gpu."""
from __future__ import annotations

import os
import pathlib

import pytest
from conftest import run_module, tree_bytes

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


def on_host(root, path):
    """The host's view of a file in the node tree ``root``: what ``path`` names."""
    return "/" + os.path.relpath(str(path), root)


def mode_of(path):
    return os.stat(str(path)).st_mode & 0o7777


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_mode_of_a_new_spec_is_the_requested_one(root, tmp_path, capsys, umask022):
    spec = pathlib.Path(root) / "etc" / "cdi" / "nvidia.yaml"
    rc, res = cdi(capsys, root=root, path=on_host(root, spec), mode="0600")
    assert rc == 0 and res["changed"] and mode_of(spec) == 0o600, res
    assert res["mode"] == "0600"


def test_mode_is_enforced_when_the_content_does_not_change(root, tmp_path, capsys):
    spec = pathlib.Path(root) / "etc" / "cdi" / "nvidia.yaml"
    rc, res = cdi(capsys, root=root, path=on_host(root, spec))
    assert res["changed"] and mode_of(spec) == 0o644
    content = spec.read_bytes()
    rc, res = cdi(capsys, root=root, path=on_host(root, spec), mode="0640", _ansible_check_mode=True, _ansible_diff=True)
    assert res["changed"] and mode_of(spec) == 0o644                  # check mode: said, not done
    assert "0644" in res["diff"][0]["before_header"] and "0640" in res["diff"][0]["after_header"]
    rc, res = cdi(capsys, root=root, path=on_host(root, spec), mode="0640")
    assert rc == 0 and res["changed"] and mode_of(spec) == 0o640 and spec.read_bytes() == content
    rc, res = cdi(capsys, root=root, path=on_host(root, spec), mode="0640")
    assert not res["changed"]
    rc, res = cdi(capsys, root=root, path=on_host(root, spec), mode=0o600)      # an int works too
    assert res["changed"] and mode_of(spec) == 0o600


def test_mode_is_enforced_when_the_content_changes(root, tmp_path, capsys):
    spec = pathlib.Path(root) / "etc" / "cdi" / "nvidia.yaml"
    _touch(str(spec), OLD_SPEC)
    os.chmod(str(spec), 0o644)
    rc, res = cdi(capsys, root=root, path=on_host(root, spec), mode="0600")
    assert res["changed"] and mode_of(spec) == 0o600 and "nvidia.com/gpu" in spec.read_text()


def test_owner_is_kept(root, tmp_path, capsys):
    spec = pathlib.Path(root) / "etc" / "cdi" / "nvidia.yaml"
    _touch(str(spec), OLD_SPEC)
    os.chown(str(spec), 1234, 2345)
    cdi(capsys, root=root, path=on_host(root, spec))
    s = os.stat(str(spec))
    assert (s.st_uid, s.st_gid) == (1234, 2345)


def test_a_symlinked_spec_is_refused_not_written_through(root, tmp_path, capsys):
    real = tmp_path / "specs" / "nvidia.yaml"
    _touch(str(real), OLD_SPEC)
    link = pathlib.Path(root) / "etc" / "cdi" / "nvidia.yaml"
    os.makedirs(str(link.parent))
    os.symlink(str(real), str(link))
    rc, res = cdi(capsys, root=root, path=on_host(root, link), mode="0640")
    assert res.get("failed") and "symbolic link" in res["msg"] and str(link) in res["msg"], res
    assert os.path.islink(str(link)) and real.read_text() == OLD_SPEC
    assert sorted(os.listdir(str(link.parent))) == ["nvidia.yaml"]


def test_json_and_yaml_specs_of_ours_are_replaced(root, tmp_path, capsys):
    for name in ("nvidia.yaml", "nvidia.json"):
        spec = pathlib.Path(root) / "etc" / "cdi" / name
        rc, res = cdi(capsys, root=root, path=on_host(root, spec))
        assert res["changed"], res
        written = spec.read_text()
        _touch(str(spec), written.replace("nvidia0", "nvidia9"))       # edited: still a spec of our kind
        rc, res = cdi(capsys, root=root, path=on_host(root, spec))
        assert res["changed"] and not res.get("failed") and spec.read_text() == written, res


@pytest.mark.parametrize("bad", ["rw-r--r--", "99", "-1", "017777"])
def test_bad_mode_is_refused(root, tmp_path, capsys, bad):
    spec = pathlib.Path(root) / "etc" / "cdi" / "nvidia.yaml"
    rc, res = cdi(capsys, root=root, path=on_host(root, spec), mode=bad)
    assert res.get("failed") and "mode" in res["msg"] and not spec.exists()


# -- root: the node tree is read there and the spec written there (issue 33), as vfio_pci and sriov_vfs do ----------


def test_the_spec_is_written_under_root_with_host_paths_inside(root, tmp_path, capsys):
    outside = tmp_path / "etc" / "cdi" / "nvidia.yaml"          # where the spec went before: path itself
    rc, res = cdi(capsys, root=root, path="/etc/cdi/nvidia.yaml", _ansible_diff=True)
    spec = pathlib.Path(root) / "etc" / "cdi" / "nvidia.yaml"
    assert rc == 0 and res["changed"] and res["path"] == str(spec), res
    assert spec.is_file() and not outside.exists()
    text = spec.read_text()
    assert "path: /dev/nvidia0" in text and "/usr/lib/x86_64-linux-gnu/libcuda.so." + VER in text
    assert root not in text                                       # the spec names the host's paths, not the tree's
    assert res["diff"][0]["after_header"].startswith(str(spec))
    # a rerun: nothing to do; check mode with another naming: said, not written
    rc, res = cdi(capsys, root=root, path="/etc/cdi/nvidia.yaml")
    assert rc == 0 and not res["changed"]
    before = spec.read_bytes()
    rc, res = cdi(capsys, root=root, path="/etc/cdi/nvidia.yaml", device_name_strategy=["uuid"],
                  _ansible_check_mode=True)
    assert rc == 0 and res["changed"] and spec.read_bytes() == before
    # absent removes the spec under root, and only it
    rc, res = cdi(capsys, root=root, path="/etc/cdi/nvidia.yaml", state="absent")
    assert rc == 0 and res["changed"] and res["path"] == str(spec) and not spec.exists()
    assert (pathlib.Path(root) / "dev" / "nvidia0").exists()


def test_a_json_path_under_root_is_json(root, capsys):
    import json

    rc, res = cdi(capsys, root=root, path="/var/run/cdi/nvidia.json")
    assert rc == 0 and res["changed"]
    with open(os.path.join(root, "var/run/cdi/nvidia.json")) as fh:
        assert json.load(fh)["kind"] == "nvidia.com/gpu"


def test_hook_path_and_library_dirs_are_read_under_root(root, capsys):
    rc, res = cdi(capsys, root=root, path="/etc/cdi/nvidia.yaml", hook_path="/usr/bin/nvidia-cdi-hook")
    assert res.get("failed") and "hook_path /usr/bin/nvidia-cdi-hook does not exist under root %s" % root in res["msg"]
    assert not os.path.exists(os.path.join(root, "etc/cdi"))
    _touch(root + "/usr/bin/nvidia-cdi-hook", "ELF")
    rc, res = cdi(capsys, root=root, path="/etc/cdi/nvidia.yaml", hook_path="/usr/bin/nvidia-cdi-hook",
                  library_dirs=["/usr/lib/x86_64-linux-gnu"])
    assert rc == 0 and res["hook"] == "/usr/bin/nvidia-cdi-hook" and res["library_dir"] == "/usr/lib/x86_64-linux-gnu"


@pytest.mark.parametrize("state", ["present", "absent"])
def test_a_root_that_is_no_directory_is_refused(tmp_path, capsys, state):
    rc, res = cdi(capsys, root=str(tmp_path / "missing"), path="/etc/cdi/nvidia.yaml", state=state)
    assert res.get("failed") and "root %s is not a directory" % (tmp_path / "missing") in res["msg"]
    assert "nothing was changed" in res["msg"] and os.listdir(str(tmp_path)) == []


def test_source_nvml_with_a_root_is_refused_not_quietly_read_from_proc(root, capsys):
    before = tree_bytes(root)
    rc, res = cdi(capsys, root=root, path="/etc/cdi/nvidia.yaml", source="nvml")
    assert res.get("failed") and "source=nvml reads the running driver" in res["msg"], res
    assert "use source=proc" in res["msg"] and tree_bytes(root) == before
    # auto with a root reads /proc, and says so
    rc, res = cdi(capsys, root=root, path="/etc/cdi/nvidia.yaml", source="auto")
    assert rc == 0 and res["source"] == "proc"
