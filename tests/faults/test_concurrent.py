# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""Runs at once on one host, editing the same file.

Two ways to start N runs together:

* ``barrier`` -- every run stops right before it takes its first file lock until all N got there (no
  lock is held while waiting), then they go on.  This is the worst interleaving a lost update needs
  (everybody has read the file, nobody has written yet) and makes the outcome deterministic: a
  module that reads under the lock passes every time, one that reads before it loses updates every time;
* ``free`` -- N children forked back to back, several rounds (the real race).

container_runtime: N runs add N runtimes (different ``runtime_name``) to one containerd (v2, v3),
CRI-O or Docker file: all N land, the runtimes already there are kept, the file validates, each rerun
reports changed=false.  kernel_cmdline (N different arguments into the GRUB drop-in) and vfio_pci (two
GPUs bound at once) must not lose an update either.  cdi_spec: the spec is one run's complete output.
"""
from __future__ import annotations

import json
import os
import shutil
import tomllib

import harness as h
import pytest
import scenarios as S
import yaml
from stats import STATS

N = 6
ROUNDS = 3


def _together(sc, arg_list, base, barrier, at=("fcntl.flock", "")):
    bdir = None
    if barrier:
        bdir = os.path.join(base, "barrier")
        shutil.rmtree(bdir, ignore_errors=True)
        os.makedirs(bdir)
    pids = []
    for i, args in enumerate(arg_list):
        w = os.path.join(base, "w%d" % i)
        pids.append((h.run(sc.module, args, w, env=sc.env(), setup=sc.setup(),
                           barrier=(bdir, len(arg_list)) + tuple(at) if barrier else None, wait=False), w))
    return [h.collect(pid, w) for pid, w in pids]


def _runtimes(sc):
    data = h.read_bytes(sc.cfg())
    if sc.runtime == "docker":
        return set(json.loads(data).get("runtimes", {}))
    doc = tomllib.loads(data.decode())
    if sc.runtime == "crio":
        return set(doc["crio"]["runtime"].get("runtimes", {}))
    plugins = doc["plugins"]
    cri = plugins.get("io.containerd.grpc.v1.cri") or plugins.get("io.containerd.cri.v1.runtime")
    return set(cri["containerd"]["runtimes"])


RUNTIME_FILES = [S.ContainerdV2Main, S.ContainerdV3Main, S.Crio, S.Docker]


@pytest.mark.parametrize("mode", ["barrier", "free"])
@pytest.mark.parametrize("cls", [pytest.param(c, id=c.name) for c in RUNTIME_FILES])
def test_container_runtime_all_updates_land(tmp_path, cls, mode):
    rounds = 1 if mode == "barrier" else ROUNDS
    for rnd in range(rounds):
        sc = cls.fresh(str(tmp_path / "root"))
        before = _runtimes(sc) if h.read_bytes(sc.cfg()) else set()
        names = ["nvidia-%d" % i for i in range(N)]
        arg_list = [dict(sc.args(), runtime_name=n, restart_mode="none", set_as_default=False, backup=False)
                    for n in names]
        outs = _together(sc, arg_list, str(tmp_path), mode == "barrier")
        for o in outs:
            assert o.result and not o.failed and not o.traceback and o.changed, o
        got = _runtimes(sc)
        assert set(names) <= got, "round %d: lost updates, %s missing" % (rnd, sorted(set(names) - got))
        assert before <= got, "runtimes that were there are gone: %s" % sorted(before - got)
        assert sc.check() is None, sc.check()
        assert not sc.strays(), sc.strays()
        again = [h.run(sc.module, a, str(tmp_path / "again"), env=sc.env()) for a in arg_list]
        assert all(not a.failed and not a.changed for a in again), again
        STATS.add(sc.label, "concurrent-" + mode, trials=1, runs=2 * N, file_checks=1)
        STATS.file(sc.label, os.path.relpath(sc.cfg(), sc.root))


# kernel_cmdline and vfio_pci read and plan under the per-file locks (defect G, fixed)
def test_kernel_cmdline_concurrent_args_all_land(tmp_path):
    sc = S.Grub.fresh(str(tmp_path / "root"))
    args = ["gpuops_cc%d=1" % i for i in range(4)]
    outs = _together(sc, [{"args": [a], "bootloader": "grub"} for a in args], str(tmp_path), barrier=True)
    STATS.add(sc.label, "concurrent-barrier", trials=1, runs=len(args), file_checks=1)
    STATS.file(sc.label, os.path.relpath(sc.cfg(), sc.root))
    for o in outs:
        assert o.result and not o.failed and not o.traceback, o
    text = h.read_bytes(sc.cfg()).decode()
    missing = [a for a in args + ["intel_iommu=on"] if a not in text]
    assert not missing, "lost updates: %s missing from\n%s" % (missing, text)


def test_vfio_two_gpus_bound_at_once_both_persist(tmp_path):
    sc = S.VfioFirst.fresh(str(tmp_path / "root"))
    gpus = ["0000:41:00.0", "0000:42:00.0"]
    outs = _together(sc, [{"devices": [g], "root": sc.root} for g in gpus], str(tmp_path), barrier=True)
    STATS.add(sc.label, "concurrent-barrier", trials=1, runs=2, file_checks=2)
    for o in outs:
        assert o.result and not o.failed and not o.traceback, o
    state = json.loads(h.read_bytes(sc.p(S.VFIO_FILES[0])))
    rules = h.read_bytes(sc.p(S.VFIO_FILES[1])).decode()
    lost = [g for g in gpus if g not in state["devices"] or g not in rules]
    assert not lost, "persistence lost for %s" % lost


# the regeneration marker's temp file has a name of each run's own (defect H, fixed)
@pytest.mark.parametrize("cls", [pytest.param(S.Grub, id="kernel_cmdline"), pytest.param(S.VfioFirst, id="vfio_pci")])
def test_regeneration_marker_written_by_two_runs_at_once(tmp_path, cls):
    """The regeneration marker is written by two runs at once: both stop right before they move the marker's
    temp file into place, then go on; both must succeed (a fixed temp name shared by both makes one rename
    fail with FileNotFoundError)."""
    sc = cls.fresh(str(tmp_path / "root"))
    if cls is S.Grub:
        arg_list = [{"args": ["gpuops_m%d=1" % i], "bootloader": "grub"} for i in range(2)]
    else:
        arg_list = [{"devices": [g], "root": sc.root} for g in ("0000:41:00.0", "0000:42:00.0")]
    outs = _together(sc, arg_list, str(tmp_path), barrier=True, at=("os.rename", "pending.tmp"))
    STATS.add(sc.label, "concurrent-barrier", trials=1, runs=2, file_checks=0)
    for o in outs:
        assert not o.traceback, "a run ended in a traceback:\n%s" % o.traceback[-600:]
        assert o.result and not o.failed, "a run failed: %s" % (o.result or {}).get("msg")


def test_cdi_spec_concurrent_runs_leave_one_complete_spec(tmp_path):
    variants = [{"device_name_strategy": ["index"]}, {"device_name_strategy": ["uuid"]},
                {"device_name_strategy": ["index", "uuid"]}, {"device_name_strategy": ["index"], "all_device": False}]
    sc = S.Cdi.fresh(str(tmp_path / "root"))
    candidates = []
    for v in variants:            # each variant's output, from clean runs
        out = h.run(sc.module, dict(sc.args(), **v), str(tmp_path / "w"), env=sc.env())
        assert out.result and not out.failed, out
        candidates.append(h.read_bytes(sc.cfg()))
    for mode in ("barrier", "free"):
        sc = S.Cdi.fresh(str(tmp_path / "root"))
        outs = _together(sc, [dict(sc.args(), **v) for v in variants], str(tmp_path), mode == "barrier")
        for o in outs:
            assert o.result and not o.failed and not o.traceback, o
        assert h.read_bytes(sc.cfg()) in candidates, "the spec is no run's complete output"
        assert yaml.safe_load(h.read_bytes(sc.cfg()))["devices"]
        assert not sc.strays(), sc.strays()
        STATS.add(sc.label, "concurrent-" + mode, trials=1, runs=len(variants), file_checks=1)
