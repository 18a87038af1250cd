# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""_files: the one way modules write files (issue 15, defects 5, 6, 7).

Atomic, through symlinks, mode/owner kept (or a requested mode enforced), backups where asked,
one lock per file around read-modify-write, and the API its other users (kernel_cmdline,
vfio_pci, cdi_spec) call unchanged."""
from __future__ import annotations

import multiprocessing
import os
import shutil
import time

import pytest

from ansible_collections.gpuops.nvidia.plugins.module_utils import _files
from ansible_collections.gpuops.nvidia.plugins.module_utils._files import (
    ensure_file,
    file_lock,
    read_text,
    remove_file,
)


class FakeModule(object):
    def __init__(self, check_mode=False, diff=False):
        self.check_mode = check_mode
        self._diff = diff

    def atomic_move(self, src, dst, unsafe_writes=False):
        shutil.move(src, dst)

    def backup_local(self, path):
        dst = "%s.%d.bak~" % (path, os.getpid())
        shutil.copy2(path, dst)
        return dst


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    d = str(tmp_path / "locks")
    monkeypatch.setenv("GPUOPS_LOCK_DIR", d)
    return d


def mode_of(path):
    return os.stat(str(path)).st_mode & 0o7777


def test_existing_api_still_works(tmp_path):
    m = FakeModule(diff=True)
    p = tmp_path / "d" / "f.cfg"
    r = ensure_file(m, str(p), "a\n", mode=0o644)
    assert r["changed"] and p.read_text() == "a\n" and r["diff"]["before_header"].endswith("(absent)")
    assert read_text(str(p)) == "a\n" and read_text(str(tmp_path / "none")) is None
    r = ensure_file(m, str(p), "a\n", mode=0o644, backup=True)
    assert not r["changed"] and "backup_file" not in r
    r = ensure_file(m, str(p), "b\n", mode=0o644, backup=True, diff_label="label")
    assert r["changed"] and open(r["backup_file"]).read() == "a\n" and r["diff"]["after_header"] == "label"
    r = remove_file(m, str(p), backup=True)
    assert r["changed"] and not p.exists() and open(r["backup_file"]).read() == "b\n"
    assert not remove_file(m, str(p))["changed"]
    assert [f for f in os.listdir(str(p.parent)) if f.startswith(".gpuops-")] == []


def test_check_mode_writes_nothing(tmp_path, lock_dir):
    m = FakeModule(check_mode=True)
    p = tmp_path / "f.cfg"
    assert ensure_file(m, str(p), "a\n")["changed"] and not p.exists()
    p.write_text("a\n")
    os.chmod(str(p), 0o644)
    assert ensure_file(m, str(p), "a\n", mode=0o600, enforce_mode=True)["changed"] and mode_of(p) == 0o644
    assert not os.path.exists(lock_dir)


def test_symlink_is_written_through(tmp_path):
    real = tmp_path / "real" / "f.cfg"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "f.cfg"
    os.symlink("real/f.cfg", str(link))
    r = ensure_file(FakeModule(), str(link), "new\n")
    assert r["changed"] and os.path.islink(str(link)) and os.readlink(str(link)) == "real/f.cfg"
    assert real.read_text() == "new\n"
    # a dangling link: the target is created, the link stays
    os.symlink("real/g.cfg", str(tmp_path / "g.cfg"))
    ensure_file(FakeModule(), str(tmp_path / "g.cfg"), "g\n")
    assert os.path.islink(str(tmp_path / "g.cfg")) and (tmp_path / "real" / "g.cfg").read_text() == "g\n"


def test_mode_and_owner_kept_unless_enforced(tmp_path):
    p = tmp_path / "f.cfg"
    p.write_text("old\n")
    os.chmod(str(p), 0o600)
    os.chown(str(p), 1234, 2345)
    ensure_file(FakeModule(), str(p), "new\n", mode=0o644)          # mode= is for a new file
    s = os.stat(str(p))
    assert (s.st_mode & 0o7777, s.st_uid, s.st_gid) == (0o600, 1234, 2345)
    r = ensure_file(FakeModule(), str(p), "new\n", mode=0o640, enforce_mode=True)
    s = os.stat(str(p))
    assert r["changed"] and (s.st_mode & 0o7777, s.st_uid, s.st_gid) == (0o640, 1234, 2345)
    assert not ensure_file(FakeModule(), str(p), "new\n", mode=0o640, enforce_mode=True)["changed"]


def test_new_file_gets_the_mode_whatever_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        ensure_file(FakeModule(), str(tmp_path / "f.cfg"), "x\n", mode=0o644)
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "f.cfg") == 0o644


def test_backup_dir_keeps_backups_out_of_the_config_directory(tmp_path):
    confd = tmp_path / "conf.d"
    confd.mkdir()
    p = confd / "99.toml"
    p.write_text("old\n")
    bdir = str(tmp_path / "backups")
    r = ensure_file(FakeModule(), str(p), "new\n", backup=True, backup_dir=bdir)
    assert os.listdir(str(confd)) == ["99.toml"]
    assert r["backup_file"].startswith(bdir + os.sep) and open(r["backup_file"]).read() == "old\n"
    r = remove_file(FakeModule(), str(p), backup=True, backup_dir=bdir)
    assert os.listdir(str(confd)) == [] and open(r["backup_file"]).read() == "new\n"


def test_file_lock_is_reentrant_and_keyed_by_real_path(tmp_path, lock_dir):
    p = tmp_path / "f.cfg"
    os.symlink("f.cfg", str(tmp_path / "link.cfg"))
    with file_lock(str(p)):
        with file_lock(str(tmp_path / "link.cfg")):       # same file: no self-deadlock
            pass
    assert len(os.listdir(lock_dir)) == 1
    assert oct(os.stat(lock_dir).st_mode & 0o777) == oct(0o700)


def _append(path, line, barrier, delay):
    barrier.wait()

    def add(before):
        time.sleep(delay)          # a slow read-modify-write
        return (before or "") + line + "\n"
    ensure_file(FakeModule(), path, add)


def test_concurrent_read_modify_write_loses_nothing(tmp_path):
    ctx = multiprocessing.get_context("fork")
    for trial in range(20):
        p = str(tmp_path / ("f-%d.cfg" % trial))
        barrier = ctx.Barrier(2)
        procs = [ctx.Process(target=_append, args=(p, line, barrier, 0.03)) for line in ("a", "b")]
        for pr in procs:
            pr.start()
        for pr in procs:
            pr.join(30)
            assert pr.exitcode == 0
        assert sorted(open(p).read().split()) == ["a", "b"], "trial %d lost an update" % trial


def test_lock_dir_falls_back_when_the_default_is_unusable(tmp_path, monkeypatch):
    monkeypatch.delenv("GPUOPS_LOCK_DIR")
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(_files, "LOCK_DIRS", (str(blocker / "gpuops"), str(tmp_path / "fallback")))
    with file_lock(str(tmp_path / "x")):
        pass
    assert len(os.listdir(str(tmp_path / "fallback"))) == 1


# --- files a module writes whole (owned) ------------------------------------------------------------------------

HEADER = "# Managed by gpuops.nvidia.test -- do not edit.\n"


def test_owned_file_is_never_written_through_a_link(tmp_path):
    fstab = tmp_path / "fstab"
    fstab.write_text("UUID=x / ext4 defaults 0 1\n")
    link = tmp_path / "rules.d" / "40-ours.rules"
    link.parent.mkdir()
    os.symlink(str(fstab), str(link))
    for check in (True, False):
        with pytest.raises(_files.ForeignFileError, match="is a symbolic link"):
            ensure_file(FakeModule(check_mode=check), str(link), HEADER + "rule\n", owned=HEADER)
        with pytest.raises(_files.ForeignFileError, match="is a symbolic link"):
            remove_file(FakeModule(check_mode=check), str(link), owned=HEADER)
    assert fstab.read_text() == "UUID=x / ext4 defaults 0 1\n" and os.path.islink(str(link))
    # a dangling link too: the module would create a file it never wrote somewhere else
    os.unlink(str(link))
    os.symlink(str(tmp_path / "elsewhere"), str(link))
    assert "symbolic link" in _files.target_problem(str(link), owned=True)
    with pytest.raises(_files.ForeignFileError):
        ensure_file(FakeModule(), str(link), HEADER, owned=True)
    assert not (tmp_path / "elsewhere").exists()


def test_owned_file_of_someone_else_is_refused_unless_identical(tmp_path):
    p = tmp_path / "ours.conf"
    p.write_text("options mine=1\n")
    assert "not written by gpuops.nvidia" in _files.target_problem(str(p), owned=HEADER, content=HEADER + "x\n")
    with pytest.raises(_files.ForeignFileError, match="its first line is not"):
        ensure_file(FakeModule(), str(p), HEADER + "x\n", owned=HEADER)
    with pytest.raises(_files.ForeignFileError):
        remove_file(FakeModule(), str(p), owned=HEADER)
    assert p.read_text() == "options mine=1\n"
    # byte-identical to what the module would write: as good as its own
    assert _files.target_problem(str(p), owned=HEADER, content="options mine=1\n") is None
    assert not ensure_file(FakeModule(), str(p), "options mine=1\n", owned=HEADER)["changed"]
    # its own (header first): replaced and removed
    p.write_text(HEADER + "old\n")
    assert ensure_file(FakeModule(), str(p), HEADER + "new\n", owned=HEADER)["changed"]
    assert remove_file(FakeModule(), str(p), owned=HEADER)["changed"] and not p.exists()


def test_owned_by_path_or_by_kind(tmp_path):
    state = tmp_path / "state.json"
    state.write_bytes(b"\xff\xfe not text")
    # owned=True: the module's own by its path (its parser checks the content): replaced, even when not text
    assert ensure_file(FakeModule(), str(state), "{}\n", owned=True)["changed"] and state.read_text() == "{}\n"

    def is_spec(text):
        """a spec of kind test"""
        return "kind: test" in text.splitlines()
    spec = tmp_path / "spec.yaml"
    spec.write_text("a: b\n")
    with pytest.raises(_files.ForeignFileError, match="it is not a spec of kind test"):
        ensure_file(FakeModule(), str(spec), "kind: test\n", owned=is_spec)
    spec.write_text("kind: test\nold: 1\n")
    assert ensure_file(FakeModule(), str(spec), "kind: test\n", owned=is_spec)["changed"]


def test_owned_write_replaces_the_file_in_its_real_directory(tmp_path):
    """A link above the file (a directory) is the host's layout and is followed; the file itself is replaced."""
    real_dir = tmp_path / "real-rules.d"
    real_dir.mkdir()
    os.symlink(str(real_dir), str(tmp_path / "rules.d"))
    r = ensure_file(FakeModule(), str(tmp_path / "rules.d" / "40-ours.rules"), HEADER + "x\n", owned=HEADER)
    assert r["changed"] and (real_dir / "40-ours.rules").read_text() == HEADER + "x\n"


def test_files_not_owned_still_follow_links(tmp_path):
    """The user's own configs (containerd, CRI-O, /etc/kernel/cmdline) are edited through their links, as before."""
    real = tmp_path / "real.toml"
    real.write_text("old\n")
    os.symlink(str(real), str(tmp_path / "config.toml"))
    assert _files.target_problem(str(tmp_path / "config.toml")) is None
    assert ensure_file(FakeModule(), str(tmp_path / "config.toml"), "new\n")["changed"]
    assert real.read_text() == "new\n" and os.path.islink(str(tmp_path / "config.toml"))
