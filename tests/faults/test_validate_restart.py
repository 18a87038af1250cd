# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""A validator, a daemon restart or a boot-image regeneration that fails.

container_runtime
  * the validator refuses the candidate (containerd 1.6's own ``config dump`` on a value it cannot
    load; a stand-in ``containerd``/``dockerd`` that exits 1): the module fails with the daemon's
    message, every file keeps its old bytes, no record, no restart, no candidate left behind; the rerun
    with a validator that accepts converges;
  * the restart fails (``restart_command`` exits 1 once): every file is put back byte for byte, the
    daemon is restarted again on the old files (the stand-in logs what it saw), the backups asked for
    exist, hold the old bytes and sit outside every directory the daemon reads; the rerun converges and
    the daemon ends on the new files.  A restart that keeps failing: files restored, the msg says the
    daemon is still down.

kernel_cmdline / vfio_pci
  * update-grub / kernel-install / update-initramfs exits 1: the module fails saying the regeneration
    is retried; the backup asked for holds the old bytes; the rerun regenerates (changed=true) on the
    new file, the next one reports changed=false.
"""
from __future__ import annotations

import os

import harness as h
import pytest
import scenarios as S
from stats import STATS


def _reference(cls, root, w):
    sc = cls.fresh(root)
    out = h.run(sc.module, sc.args(), w, env=sc.env(), setup=sc.setup())
    assert out.result and not out.failed and out.changed, out
    new = sc.snapshot()
    return new, sc.digest(new)


def _converges(sc, w, new, args=None):
    args = args or sc.args()
    first = h.run(sc.module, args, w, env=sc.env(), setup=sc.setup())
    assert first.result and not first.failed and first.changed and not first.traceback, first
    assert sc.snapshot() == new, "the rerun did not converge to a clean run's files"
    second = h.run(sc.module, args, w, env=sc.env(), setup=sc.setup())
    assert second.result and not second.failed and not second.changed, second
    return first


def _count(sc, fault, runs):
    STATS.add(sc.label, fault, trials=1, runs=runs, file_checks=3 * len(sc.files()))
    for f in sc.files():
        STATS.file(sc.label, os.path.relpath(f, sc.root))


def _no_candidates(sc):
    left = [p for p in sc.strays()]
    assert not left, "temp files left: %s" % left


# -- validators ------------------------------------------------------------------------------------------

VALIDATORS = [
    pytest.param(S.ContainerdV2Main, {"binary_path": "TOOL:containerd-bad"}, "containerd rejects",
                 id="containerd-v2-main-standin-exit1"),
    pytest.param(S.ContainerdV2DropInSibling, {"binary_path": "TOOL:containerd-bad"}, "containerd rejects",
                 id="containerd-v2-dropin-standin-exit1"),
    pytest.param(S.ContainerdV2Main, {"runtime_config": {"privileged_without_host_devices": "yes"}},
                 "containerd rejects", id="containerd-v2-main-real-containerd-1.6-rejects",
                 marks=pytest.mark.skipif(not S.HAVE_CONTAINERD, reason="no containerd binary")),
    pytest.param(S.ContainerdV2DropInSibling, {"runtime_config": {"privileged_without_host_devices": "yes"}},
                 "containerd rejects", id="containerd-v2-dropin-real-containerd-1.6-rejects",
                 marks=pytest.mark.skipif(not S.HAVE_CONTAINERD, reason="no containerd binary")),
    pytest.param(S.Docker, {"binary_path": "TOOL:dockerd-bad"}, "dockerd rejects", id="docker-standin-exit1"),
]


@pytest.mark.parametrize("cls,bad,expect", VALIDATORS)
def test_failing_validator_changes_nothing(tmp_path, cls, bad, expect):
    root, w = str(tmp_path / "root"), str(tmp_path / "w")
    new, _digest = _reference(cls, root, w)
    sc = cls.fresh(root)
    old = sc.snapshot()
    args = sc.args()
    for k, v in bad.items():
        args[k] = S.Tools.path(v[5:]) if isinstance(v, str) and v.startswith("TOOL:") else v
    out = h.run(sc.module, args, w, env=sc.env(), setup=sc.setup())
    assert not out.traceback and out.result, out
    assert out.failed and expect in out.result["msg"], out.result
    assert sc.snapshot() == old, "a file changed although the validator refused the candidate"
    assert sc.applied() == [], "the daemon was restarted"
    assert not os.path.isdir(sc.state_dir()) or not [f for f in os.listdir(sc.state_dir()) if f.endswith(".json")], \
        "a state record was written for a change that did not happen"
    _no_candidates(sc)
    _converges(sc, w, new)
    _count(sc, "failing-validator", 4)


# a refused candidate reports changed=false (defect F, fixed)
@pytest.mark.parametrize("cls,bad,expect", VALIDATORS[:2] + VALIDATORS[4:])
def test_refused_candidate_reports_no_change(tmp_path, cls, bad, expect):
    root, w = str(tmp_path / "root"), str(tmp_path / "w")
    sc = cls.fresh(root)
    args = sc.args()
    for k, v in bad.items():
        args[k] = S.Tools.path(v[5:]) if isinstance(v, str) and v.startswith("TOOL:") else v
    out = h.run(sc.module, args, w, env=sc.env(), setup=sc.setup())
    assert out.failed and expect in out.result["msg"], out
    _count(sc, "failing-validator", 1)
    assert out.result.get("changed") is False and out.result.get("changed_files") == [], out.result


# -- restarts --------------------------------------------------------------------------------------------

RESTARTS = [S.ContainerdV2Main, S.ContainerdV2DropInSibling, S.ContainerdV3Main, S.ContainerdV3DropIn, S.Crio,
            S.Docker, S.ContainerdV2Uninstall]


@pytest.mark.parametrize("cls", [pytest.param(c, id=c.name) for c in RESTARTS])
def test_failed_restart_restores_and_keeps_backups(tmp_path, cls):
    root, w = str(tmp_path / "root"), str(tmp_path / "w")
    new, digest_new = _reference(cls, root, w)
    sc = cls.fresh(root)
    old = sc.snapshot()
    args = dict(sc.args(), backup=True)
    with open(sc.fail_flag() + ".once", "w"):
        pass
    out = h.run(sc.module, args, w, env=sc.env(), setup=sc.setup())
    assert not out.traceback and out.result, out
    res = out.result
    assert res.get("failed") and "did not come back healthy" in res["msg"], res
    assert "Original configuration restored" in res["msg"] and "is running again" in res["msg"], res["msg"]
    assert res.get("restored") is True and res.get("changed_files") == [], res
    assert sc.snapshot() == old, "not every file was put back byte for byte"
    assert sc.applied() == [sc.digest(old)], "the daemon was not restarted on the restored files: %s" % sc.applied()
    # backups: present, the old bytes, outside every directory the daemon reads
    backups = res.get("backup_files") or {}
    existing = [f for f in sc.files() if old[f] is not None]
    assert sorted(backups) == sorted(existing), res
    config_dirs = {os.path.dirname(f) for f in sc.files()}
    for path, backup in backups.items():
        assert h.read_bytes(backup) == old[path], "backup %s does not hold the old %s" % (backup, path)
        assert os.path.dirname(backup) not in config_dirs and not sc.daemon_visible(backup), backup
        assert backup.startswith(res["backup_dir"] + "/"), (backup, res["backup_dir"])
    _no_candidates(sc)
    first = _converges(sc, w, new, args)
    assert first.result["restarted"] is True and sc.applied()[-1] == digest_new, sc.applied()
    _count(sc, "failing-restart", 3)


def test_restart_that_keeps_failing_restores_files_and_says_daemon_down(tmp_path):
    root, w = str(tmp_path / "root"), str(tmp_path / "w")
    new, digest_new = _reference(S.ContainerdV2DropInSibling, root, w)
    sc = S.ContainerdV2DropInSibling.fresh(root)
    old = sc.snapshot()
    with open(sc.fail_flag(), "w"):
        pass
    out = h.run(sc.module, sc.args(), w, env=sc.env(), setup=sc.setup())
    assert not out.traceback and out.result and out.failed, out
    assert "Original configuration restored" in out.result["msg"] and "STILL DOWN" in out.result["msg"], out.result
    assert out.result.get("restored") is False and out.result.get("changed") is True, out.result
    assert sc.snapshot() == old
    os.unlink(sc.fail_flag())
    _converges(sc, w, new)
    assert sc.applied()[-1] == digest_new
    _count(sc, "failing-restart", 3)


# -- boot loader / initramfs regeneration -----------------------------------------------------------------

@pytest.mark.parametrize("cls", [pytest.param(c, id=c.name) for c in (S.Grub, S.SystemdBoot, S.VfioFirst)])
def test_failed_regeneration_is_retried(tmp_path, cls):
    root, w = str(tmp_path / "root"), str(tmp_path / "w")
    new, digest_new = _reference(cls, root, w)
    sc = cls.fresh(root)
    old = sc.snapshot()
    with open(sc.fail_flag(), "w"):
        pass
    out = h.run(sc.module, sc.args(), w, env=sc.env(), setup=sc.setup())
    assert not out.traceback and out.result and out.failed, out
    assert "retried on the next run" in out.result["msg"], out.result["msg"]
    if sc.module == "kernel_cmdline":
        # backup=true: the old bytes are kept (next to the file, where the boot loader does not read them)
        backups = [os.path.join(os.path.dirname(sc.cfg()), n) for n in os.listdir(os.path.dirname(sc.cfg()))
                   if n.startswith(os.path.basename(sc.cfg()) + ".") and n.endswith("~")]
        assert len(backups) == 1 and h.read_bytes(backups[0]) == old[sc.cfg()], backups
        assert not sc.daemon_visible(backups[0]), backups[0]
    # a second failure keeps it pending
    again = h.run(sc.module, sc.args(), w, env=sc.env(), setup=sc.setup())
    assert not again.traceback and again.failed and "retried" in again.result["msg"], again
    os.unlink(sc.fail_flag())
    first = _converges(sc, w, new)
    assert first.result.get("regenerated", first.result.get("initramfs_updated")) is True, first.result
    assert sc.applied()[-1] == digest_new, "the last regeneration did not see the new file"
    _no_candidates(sc)
    _count(sc, "failing-regeneration", 4)
