# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""container_runtime never leaves a node worse than it found it (issue 15, defects 1, 2, 5, 6, 7).

Through the real AnsibleModule (argument spec, check mode, diff), on real files:

1. a drop-in that is the main file (same path, ``..``, relative, symlink, hard link) is refused;
2. the drop-in is written before the main file that imports it, and any failed write or restart
   puts both files back byte for byte (a drop-in that did not exist is deleted);
5. backups never land in a directory the daemon reads configs from;
6. symlinked configs are edited through the link; mode and owner are kept;
7. two runs at once on one file both land (a lock per file).
"""
from __future__ import annotations

import errno
import io
import json
import multiprocessing
import os
import sys
import tomllib

import pytest
from conftest import run_module, runtime_args as args_for, runtime_fixture as fx

try:
    from conftest import module_context
except ImportError:      # older conftest: the module's warnings simply go elsewhere
    import contextlib
    module_context = contextlib.nullcontext

from ansible_collections.gpuops.nvidia.plugins.modules import container_runtime as mod

V2 = "io.containerd.grpc.v1.cri"
V3 = "io.containerd.cri.v1.runtime"


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    """Lock files of this test's runs (and its child processes) in a directory of its own."""
    d = str(tmp_path / "locks")
    monkeypatch.setenv("GPUOPS_LOCK_DIR", d)
    return d


def call(capsys, args):
    from ansible.module_utils.common import warnings as ansible_warnings
    ansible_warnings._global_warnings.clear()
    return run_module(capsys, mod.main, args)


def ok(capsys, args, check=False, diff=False):
    if check:
        args = dict(args, _ansible_check_mode=True)
    if diff:
        args = dict(args, _ansible_diff=True)
    rc, res = call(capsys, args)
    assert rc == 0 and not res.get("failed"), res
    return res


def records(state_dir):
    return sorted(f for f in os.listdir(state_dir) if f.endswith(".json")) if os.path.isdir(state_dir) else []


def tree(d):
    """Every file under ``d`` (relative names) with its bytes."""
    out = {}
    for base, _dirs, files in os.walk(str(d)):
        for f in files:
            p = os.path.join(base, f)
            out[os.path.relpath(p, str(d))] = open(p, "rb").read()
    return out


# -- 1: drop_in_path that is the main file ----------------------------------------------------

@pytest.mark.parametrize("form", ["same", "dotdot", "symlink", "symlinked-dir", "hardlink", "relative-cwd",
                                  "relative-to-config-dir"])
@pytest.mark.parametrize("state", ["present", "absent"])
def test_drop_in_that_is_the_main_file_is_refused(runtime_host, capsys, monkeypatch, tmp_path, form, state):
    d, st = runtime_host
    cfg = d / "config.toml"
    original = fx("containerd", "v2-custom.toml")
    cfg.write_bytes(original)
    (d / "conf.d").mkdir()
    if form == "same":
        drop = str(cfg)
    elif form == "dotdot":
        drop = str(d / "conf.d" / ".." / "config.toml")
    elif form == "symlink":
        os.symlink(str(cfg), str(d / "conf.d" / "99-nvidia.toml"))
        drop = str(d / "conf.d" / "99-nvidia.toml")
    elif form == "symlinked-dir":
        os.symlink(str(d), str(tmp_path / "etc-link"))
        drop = str(tmp_path / "etc-link" / "config.toml")
    elif form == "hardlink":
        os.link(str(cfg), str(d / "conf.d" / "99-nvidia.toml"))
        drop = str(d / "conf.d" / "99-nvidia.toml")
    elif form == "relative-cwd":
        monkeypatch.chdir(str(d / "conf.d"))
        drop = "../config.toml"
    else:   # containerd resolves a relative import against the main file's directory
        monkeypatch.chdir(str(tmp_path))
        drop = "config.toml"
    rc, res = call(capsys, args_for(cfg, st, drop_in_path=drop, state=state))
    assert res.get("failed"), res
    assert "same file" in res["msg"] and "drop_in_path" in res["msg"], res["msg"]
    assert not res.get("changed")
    assert cfg.read_bytes() == original and records(st) == []


def test_drop_in_next_to_the_main_file_still_works(runtime_host, capsys):
    d, st = runtime_host
    cfg = d / "config.toml"
    cfg.write_bytes(fx("containerd", "v2-custom.toml"))
    res = ok(capsys, args_for(cfg, st, drop_in_path=str(d / "nvidia.toml")))
    assert res["changed"] and (d / "nvidia.toml").exists()


# -- 2: write order and restore on any failure ------------------------------------------------

class FailOnce(object):
    """Make the next rename onto a file called ``name`` fail once (disk full), log every rename."""

    def __init__(self, monkeypatch, name=None):
        self.name = name
        self.log = []
        self.failed = False
        self.rename, self.replace = os.rename, os.replace
        monkeypatch.setattr(os, "rename", lambda s, d, **kw: self._do(self.rename, s, d, **kw))
        monkeypatch.setattr(os, "replace", lambda s, d, **kw: self._do(self.replace, s, d, **kw))

    def _do(self, real, src, dst, **kw):
        base = os.path.basename(os.fsdecode(dst))
        if not self.failed and base == self.name:
            self.failed = True
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        if not base.endswith(".json"):
            self.log.append(base)
        return real(src, dst, **kw)


def test_drop_in_is_written_before_the_main_file(runtime_host, capsys, monkeypatch):
    d, st = runtime_host
    cfg = d / "config.toml"
    cfg.write_bytes(fx("containerd", "v3-custom.toml"))
    spy = FailOnce(monkeypatch)
    ok(capsys, args_for(cfg, st, drop_in_path=str(d / "conf.d" / "99-nvidia.toml")))
    assert spy.log == ["99-nvidia.toml", "config.toml"]


@pytest.mark.parametrize("failing", ["99-nvidia.toml", "config.toml"])
@pytest.mark.parametrize("drop_in_existed", [False, True])
def test_a_failed_write_restores_both_files(runtime_host, capsys, monkeypatch, failing, drop_in_existed):
    d, st = runtime_host
    cfg = d / "config.toml"
    drop = d / "conf.d" / "99-nvidia.toml"
    cfg.write_bytes(fx("containerd", "v2-custom.toml"))
    if drop_in_existed:
        ok(capsys, args_for(cfg, st, drop_in_path=str(drop)))
        # a package upgrade put its own config.toml back: both files change on the next run
        cfg.write_text(fx("containerd", "v2-custom.toml").decode().replace("oom_score = -999", "oom_score = -998"))
    before = tree(d)
    recs = {r: open(os.path.join(st, r), "rb").read() for r in records(st)}
    a = args_for(cfg, st, drop_in_path=str(drop), set_as_default=True)
    assert sorted(ok(capsys, a, check=True)["changed_files"]) == sorted([str(cfg), str(drop)])   # both would change
    FailOnce(monkeypatch, failing)
    rc, res = call(capsys, dict(a, _ansible_diff=True))
    assert res.get("failed") and rc != 0, res
    assert res["changed_files"] == [] and res["restored"] is True
    assert "No space left on device" in res["msg"] and "restored" in res["msg"], res["msg"]
    assert res["changed"] is False
    assert tree(d) == before                       # both files byte for byte, nothing left over
    assert drop.exists() is drop_in_existed
    assert {r: open(os.path.join(st, r), "rb").read() for r in records(st)} == recs
    # the failure was transient: a rerun converges
    res = ok(capsys, args_for(cfg, st, drop_in_path=str(drop), set_as_default=True))
    assert res["changed"] and drop.exists()
    assert tomllib.loads(drop.read_text())["plugins"][V2]["containerd"]["default_runtime_name"] == "nvidia"


def test_a_failed_write_of_a_single_file_fails_cleanly(runtime_host, capsys, monkeypatch):
    d, st = runtime_host
    cfg = d / "daemon.json"
    original = fx("docker", "daemon.json")
    cfg.write_bytes(original)
    FailOnce(monkeypatch, "daemon.json")
    rc, res = call(capsys, args_for(cfg, st))
    assert res.get("failed") and "No space left on device" in res["msg"] and res["changed"] is False
    assert cfg.read_bytes() == original and records(st) == []


def test_absent_removes_the_import_before_the_drop_in(runtime_host, capsys, monkeypatch):
    d, st = runtime_host
    cfg = d / "config.toml"
    drop = d / "conf.d" / "99-nvidia.toml"
    original = fx("containerd", "v3-custom.toml")
    cfg.write_bytes(original)
    ok(capsys, args_for(cfg, st, drop_in_path=str(drop)))
    written = tree(d)
    FailOnce(monkeypatch, "config.toml")
    rc, res = call(capsys, args_for(cfg, st, state="absent"))
    assert res.get("failed") and "restored" in res["msg"] and res["changed"] is False
    assert tree(d) == written                      # drop-in still there, main still imports it
    res = ok(capsys, args_for(cfg, st, state="absent"))
    assert cfg.read_bytes() == original and not drop.exists()


def _script(path, body):
    path.write_text("#!/bin/sh\n" + body)
    os.chmod(str(path), 0o755)
    return str(path)


def test_a_failed_restart_restores_both_files_of_the_drop_in_mode(runtime_host, capsys, tmp_path):
    import socket
    d, st = runtime_host
    cfg = d / "config.toml"
    drop = d / "conf.d" / "99-nvidia.toml"
    original = fx("containerd", "v2-custom.toml")
    cfg.write_bytes(original)
    sock = str(tmp_path / "d.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sock)
    s.listen(4)
    try:
        ctr = _script(tmp_path / "ctr", "echo 'TYPE ID PLATFORMS STATUS'\necho 'io.containerd.grpc.v1 cri linux/amd64 ok'\n")
        restart = _script(tmp_path / "restart", "[ ! -e %s/fail-next ] || { rm %s/fail-next; exit 1; }\n"
                          % (tmp_path, tmp_path))
        (tmp_path / "fail-next").write_text("")
        rc, res = call(capsys, args_for(cfg, st, drop_in_path=str(drop), restart_mode="command",
                                        restart_command=[restart], socket=sock, restart_timeout=1,
                                        ctr_path=ctr))
    finally:
        s.close()
    assert res.get("failed") and res["restored"] is True and "restart command failed" in res["msg"]
    assert cfg.read_bytes() == original and not drop.exists() and records(st) == []


# -- 5: backups never where the daemon reads configs --------------------------------------------

def test_crio_backup_goes_outside_the_drop_in_directory(runtime_host, capsys):
    d, st = runtime_host
    confd = d / "crio.conf.d"
    confd.mkdir()
    drop = confd / "99-nvidia.toml"
    original = b"# site\n[crio.runtime]\nlog_level = \"info\"\n"
    drop.write_bytes(original)
    (confd / "10-site.toml").write_text("[crio]\n")
    res = ok(capsys, dict(runtime="crio", config_path=str(drop), state_dir=st, restart_mode="none",
                          backup=True, set_as_default=True))
    assert sorted(os.listdir(str(confd))) == ["10-site.toml", "99-nvidia.toml"]      # nothing else for CRI-O to load
    bk = res["backup_files"][str(drop)]
    assert not os.path.realpath(bk).startswith(os.path.realpath(str(confd)) + os.sep)
    assert open(bk, "rb").read() == original
    assert os.path.realpath(bk).startswith(os.path.realpath(res["backup_dir"]) + os.sep)


def test_containerd_backups_of_both_files_go_to_backup_dir(runtime_host, capsys, tmp_path):
    d, st = runtime_host
    cfg = d / "config.toml"
    drop = d / "conf.d" / "99-nvidia.toml"
    original = fx("containerd", "v3-custom.toml")
    cfg.write_bytes(original)
    ok(capsys, args_for(cfg, st, drop_in_path=str(drop)))
    drop_before = drop.read_bytes()
    main_before = cfg.read_bytes()
    cfg.write_bytes(main_before + b"# site note\n")
    bdir = str(tmp_path / "bk")
    res = ok(capsys, args_for(cfg, st, drop_in_path=str(drop), backup=True, backup_dir=bdir, set_as_default=True))
    assert sorted(os.listdir(str(d / "conf.d"))) == ["99-nvidia.toml"]
    assert sorted(os.listdir(str(d))) == ["conf.d", "config.toml"]
    assert res["backup_dir"] == bdir
    assert open(res["backup_files"][str(drop)], "rb").read() == drop_before
    assert all(p.startswith(bdir + os.sep) for p in res["backup_files"].values())


@pytest.mark.parametrize("where", ["crio.conf.d", "crio.conf.d/sub"])
def test_backup_dir_inside_the_drop_in_directory_is_refused(runtime_host, capsys, where):
    d, st = runtime_host
    confd = d / "crio.conf.d"
    confd.mkdir()
    drop = confd / "99-nvidia.toml"
    drop.write_text("[crio.runtime]\n")
    rc, res = call(capsys, dict(runtime="crio", config_path=str(drop), state_dir=st, restart_mode="none",
                                backup=True, backup_dir=str(d / where)))
    assert res.get("failed") and "backup_dir" in res["msg"] and not res.get("changed")
    assert drop.read_text() == "[crio.runtime]\n" and sorted(os.listdir(str(confd))) == ["99-nvidia.toml"]


# -- 6: symlinks, mode and owner ----------------------------------------------------------------

@pytest.mark.parametrize("runtime,name,original", [
    ("containerd", "config.toml", fx("containerd", "v2-custom.toml")),
    ("crio", "99-nvidia.toml", b"[crio.runtime]\nlog_level = \"info\"\n"),
    ("docker", "daemon.json", fx("docker", "daemon.json")),
])
def test_a_symlinked_config_is_edited_through_the_link(runtime_host, capsys, tmp_path, runtime, name, original):
    d, st = runtime_host
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    real = real_dir / name
    real.write_bytes(original)
    os.chmod(str(real), 0o640)
    os.chown(str(real), 1234, 2345)
    link = d / name
    os.symlink("../real/" + name, str(link))
    a = dict(runtime=runtime, config_path=str(link), state_dir=st, restart_mode="none", validate=False)
    res = ok(capsys, dict(a, set_as_default=True))
    assert res["changed"]
    assert os.path.islink(str(link)) and os.readlink(str(link)) == "../real/" + name
    assert b"nvidia-container-runtime" in real.read_bytes()
    st_ = os.stat(str(real))
    assert (st_.st_mode & 0o7777, st_.st_uid, st_.st_gid) == (0o640, 1234, 2345)
    assert sorted(os.listdir(str(real_dir))) == [name] and sorted(os.listdir(str(d))) == [name]
    assert not ok(capsys, dict(a, set_as_default=True))["changed"]
    res = ok(capsys, dict(a, state="absent"))
    assert os.path.islink(str(link)) and real.read_bytes() == original
    st_ = os.stat(str(real))
    assert (st_.st_mode & 0o7777, st_.st_uid, st_.st_gid) == (0o640, 1234, 2345)


def test_mode_and_owner_of_a_plain_config_are_kept(runtime_host, capsys):
    d, st = runtime_host
    cfg = d / "config.toml"
    cfg.write_bytes(fx("containerd", "v3-custom.toml"))
    os.chmod(str(cfg), 0o600)
    os.chown(str(cfg), 1234, 2345)
    ok(capsys, args_for(cfg, st, drop_in_path=str(d / "conf.d" / "99-nvidia.toml")))
    s = os.stat(str(cfg))
    assert (s.st_mode & 0o7777, s.st_uid, s.st_gid) == (0o600, 1234, 2345)


# -- 7: concurrent runs ---------------------------------------------------------------------------

def _child(args, delay, barrier, out):
    """One module run in a process of its own (like two ansible-playbook runs on one host)."""
    from ansible.module_utils.testing import patch_module_args
    real_plan = mod.plan

    def slow_plan(*a, **kw):      # a busy host: time passes between reading the file and writing it
        r = real_plan(*a, **kw)
        import time
        time.sleep(delay)
        return r
    mod.plan = slow_plan
    sys.stdout = io.StringIO()
    barrier.wait()
    rc = None
    try:
        with module_context(), patch_module_args(args):
            mod.main()
    except SystemExit as e:
        rc = e.code
    except BaseException as e:   # pragma: no cover - reported to the parent
        out.put((99, {"msg": repr(e)}))
        return
    out.put((rc, json.loads(sys.stdout.getvalue() or "{}")))


def test_two_concurrent_runs_both_land(runtime_host, lock_dir):
    d, st = runtime_host
    ctx = multiprocessing.get_context("fork")
    trials = 20
    for trial in range(trials):
        cfg = d / ("config-%d.toml" % trial)
        cfg.write_bytes(fx("containerd", "v2-custom.toml"))
        barrier, out = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_child, args=(args_for(cfg, st, runtime_name=name), 0.05, barrier, out))
                 for name in ("nvidia-a", "nvidia-b")]
        for p in procs:
            p.start()
        results = [out.get(timeout=60) for _p in procs]
        for p in procs:
            p.join(60)
        assert all(rc == 0 and not r.get("failed") for rc, r in results), results
        rts = tomllib.loads(cfg.read_text())["plugins"][V2]["containerd"]["runtimes"]
        assert {"nvidia-a", "nvidia-b"} <= set(rts), "trial %d of %d lost an update: %s" % (trial + 1, trials, sorted(rts))
        rec = [json.load(open(os.path.join(st, r))) for r in records(st)]
        assert [r["runtime_names"] for r in rec if r["path"] == str(cfg)] == [["nvidia-a", "nvidia-b"]]
    assert len(os.listdir(lock_dir)) == trials          # one lock per config file, keyed by its real path
