# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""SIGKILL at every kill point of a module run, then rerun: the loop behind test_sigkill.py.

For a scenario the loop first makes a clean, traced run (the *reference*: its kill points, the
*new* content of every managed file), then for every kill point N = 1..len(trace) it rebuilds the
starting tree in the same place (file contents can hold their own paths), runs the module with
SIGKILL at point N and records what a daemon would find and how a rerun behaves.  Tests assert over
the records; each record is a plain dict (see :func:`trial`).
"""
from __future__ import annotations

import os
import shutil

import harness as h
from stats import STATS


def _state(now, old, new):
    """'old', 'new', 'same' (the run does not change this file, and it is as it was) or 'other'."""
    if now == old == new:
        return "same"
    if now == new:
        return "new"
    if now == old:
        return "old"
    return "other"


def reference(cls, base):
    sc = cls.fresh(os.path.join(base, "root"))
    old = sc.snapshot()
    w = os.path.join(base, "w")
    out = h.run(sc.module, sc.args(), w, env=sc.env(), setup=sc.setup(), trace=True)
    assert out.result and not out.failed and out.changed and not out.traceback, out
    new = sc.snapshot()
    assert new != old, "the reference run changed nothing"
    again = h.run(sc.module, sc.args(), w, env=sc.env(), setup=sc.setup())
    assert again.result and not again.failed and not again.changed, again
    ref = {"old": old, "new": new, "trace": out.trace, "applied": sc.applied(), "result": out.result,
           "digest_new": sc.digest(new), "runtime": sc.runtime_ok()}
    if sc.uninstall:
        gone = h.run(sc.module, sc.absent_args(), w, env=sc.env(), setup=sc.setup())
        assert gone.result and not gone.failed and gone.changed, gone
        assert sc.snapshot() == old, "uninstall is not byte-identical in the reference run"
    return ref


def trial(cls, base, ref, k):
    """Kill at point ``k``, inspect, rerun twice (and uninstall); returns the record."""
    sc = cls.fresh(os.path.join(base, "root"))
    assert sc.snapshot() == ref["old"], "the starting tree is not reproducible"
    w = os.path.join(base, "w")
    rec = {"k": k, "point": ref["trace"][k - 1]}
    runs = 1
    out = h.run(sc.module, sc.args(), w, env=sc.env(), setup=sc.setup(), kill_at=k)
    rec["status"] = out.status
    rec["where"] = out.where
    rec["traceback"] = out.traceback
    after = sc.snapshot()
    rec["states"] = [_state(after[f], ref["old"][f], ref["new"][f]) for f in sc.files()]
    rec["partial"] = {os.path.relpath(f, sc.root): len(after[f]) for f, s in zip(sc.files(), rec["states"]) if s == "other"
                      and after[f] is not None}
    rec["pair_ok"] = sc.pair_ok(rec["states"])
    rec["check"] = sc.check()
    strays = sc.strays()
    rec["strays"] = [os.path.relpath(p, sc.root) for p in strays]
    rec["strays_daemon"] = [os.path.relpath(p, sc.root) for p in strays if sc.daemon_visible(p)]
    for p in strays:
        STATS.stray(cls.label, os.path.relpath(p, sc.root), sc.daemon_visible(p))
    rec["was_new"] = all(s in ("new", "same") for s in rec["states"])

    first = h.run(sc.module, sc.args(), w, env=sc.env(), setup=sc.setup())
    second = h.run(sc.module, sc.args(), w, env=sc.env(), setup=sc.setup())
    runs += 2
    rec["rerun"] = {"failed": first.failed, "changed": first.changed, "traceback": first.traceback,
                    "msg": (first.result or {}).get("msg")}
    rec["rerun_files"] = [_state(h.read_bytes(f), ref["old"][f], ref["new"][f]) for f in sc.files()]
    rec["rerun_diff"] = {os.path.relpath(f, sc.root): h.read_bytes(f).decode("utf-8", "replace")
                         if h.read_bytes(f) is not None else None
                         for f, s in zip(sc.files(), rec["rerun_files"]) if s not in ("new", "same")}
    rec["rerun2"] = {"failed": second.failed, "changed": second.changed, "msg": (second.result or {}).get("msg")}
    rec["runtime"] = sc.runtime_ok()
    applied = sc.applied()
    rec["applied_last"] = applied[-1] if applied else None
    # the daemon restart / boot-loader regeneration of the reference run ran on the new files: after the
    # rerun, the last one must have too (else the daemon or the next boot runs the old configuration)
    rec["applied_ok"] = not ref["applied"] or rec["applied_last"] == ref["digest_new"]
    rec["strays_daemon_after_rerun"] = [os.path.relpath(p, sc.root) for p in sc.strays() if sc.daemon_visible(p)]
    rec["uninstall_ok"] = None
    if sc.uninstall and not first.failed:
        gone = h.run(sc.module, sc.absent_args(), w, env=sc.env(), setup=sc.setup())
        runs += 1
        rec["uninstall_ok"] = (not gone.failed) and sc.snapshot() == ref["old"]
        rec["uninstall_msg"] = (gone.result or {}).get("msg")
    STATS.add(cls.label, "sigkill", kill_points=1, trials=1, runs=runs, file_checks=3 * len(sc.files()),
              stray_temp=len(strays), stray_daemon=len(rec["strays_daemon"]))
    for f in sc.files():
        STATS.file(cls.label, os.path.relpath(f, sc.root))
    return rec


def kill_loop(cls, base):
    ref = reference(cls, base)
    STATS.add(cls.label, "sigkill-reference", trials=1, runs=3 + (1 if cls.uninstall else 0))
    records = [trial(cls, base, ref, k) for k in range(1, len(ref["trace"]) + 1)]
    shutil.rmtree(os.path.join(base, "root"), ignore_errors=True)
    return ref, records
