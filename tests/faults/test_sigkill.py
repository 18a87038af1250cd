# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""SIGKILL at every kill point of every file-editing module's write path (see harness.py, killloop.py).

For each scenario the loop runs once per session (a few hundred kill points in all); the tests below
each assert one promise over all of its kill points:

* ``old_or_new``      -- right after the kill every managed file is the old or the new content byte for
                         byte (never partial or missing), in a combination the daemon may see (the main
                         containerd config never imports a missing or stale drop-in);
* ``daemon_config_valid`` -- what the daemon (or boot loader) would load right after the kill is usable:
                         containerd 1.6's own ``config dump`` for version-2 configs (imports included), a
                         TOML/JSON/YAML/shell parse of every file the daemon reads otherwise;
* ``converges``       -- a rerun succeeds (changed=true unless the killed run had finished its work), leaves
                         every file byte-identical to a clean run's, and a second rerun reports
                         changed=false (vfio_pci: the functions are on vfio-pci);
* ``applied``         -- after the rerun, the last daemon restart / boot-loader regeneration / initramfs
                         rebuild saw the new files (a stand-in tool logs what it saw), so nothing keeps
                         running the old configuration while the module reports "ok";
* ``no_daemon_visible_temp`` -- no temp file is left (after the kill and a rerun) where the daemon loads
                         configuration (CRI-O: every file of crio.conf.d; containerd: what ``imports`` globs
                         match, dot files included; GRUB: grub.d/*.cfg; udev/modprobe: *.rules/*.conf);
* ``uninstall``       -- container_runtime: after the rerun, state=absent gives back the pristine files
                         byte for byte.

Temp files left anywhere are counted and reported in the summary (``strays@kill``).
"""
from __future__ import annotations

import json

import killloop
import pytest
import scenarios as S

# Defects the suite found, as {(scenario, property): reason} strict xfails until fixed.  Empty: defects A (restart
# pending after a kill), B (validation candidates in the drop-in directory), C (write_atomic temp files in
# crio.conf.d) and I (vfio_pci bound before the state file) are fixed (docs/reliability.md).
DEFECTS = {}


def _old_or_new(r):
    return r["status"] == "killed" and "other" not in r["states"] and r["pair_ok"]


def _valid(r):
    return r["check"] is None


def _converges(r):
    rerun = r["rerun"]
    return (not rerun["failed"] and not rerun["traceback"] and (rerun["changed"] or r["was_new"])
            and all(s in ("new", "same") for s in r["rerun_files"])
            and not r["rerun2"]["changed"] and not r["rerun2"]["failed"] and r["runtime"] is None)


def _applied(r):
    return r["applied_ok"]


def _no_temp(r):
    return not r["strays_daemon"] and not r["strays_daemon_after_rerun"]


def _uninstall(r):
    return r["uninstall_ok"] is not False


PROPERTIES = {"old_or_new": _old_or_new, "daemon_config_valid": _valid, "converges": _converges,
              "applied": _applied, "no_daemon_visible_temp": _no_temp, "uninstall": _uninstall}


def _params():
    out = []
    for cls in S.KILL_SCENARIOS:
        for prop in PROPERTIES:
            if prop == "uninstall" and not cls.uninstall:
                continue
            if prop == "applied" and not cls.has_apply:
                continue
            marks = ()
            if (cls.name, prop) in DEFECTS:
                marks = pytest.mark.xfail(strict=True, reason=DEFECTS[(cls.name, prop)])
            out.append(pytest.param(cls.name, prop, marks=marks, id="%s-%s" % (cls.name, prop)))
    return out


_LOOPS = {}


@pytest.fixture(scope="session")
def loops(tmp_path_factory):
    def get(name):
        if name not in _LOOPS:
            _LOOPS[name] = killloop.kill_loop(S.BY_NAME[name], str(tmp_path_factory.mktemp("kill-" + name)))
        return _LOOPS[name]
    return get


def _show(r):
    keep = ("k", "point", "status", "where", "traceback", "states", "partial", "pair_ok", "check", "strays_daemon",
            "strays_daemon_after_rerun", "rerun", "rerun_diff", "rerun2", "runtime", "applied_last", "uninstall_ok",
            "uninstall_msg")
    return json.dumps({k: r.get(k) for k in keep if r.get(k) not in (None, [], {})}, default=str)[:1500]


@pytest.mark.parametrize("scenario,prop", _params())
def test_sigkill(loops, scenario, prop):
    ref, records = loops(scenario)
    assert len(records) >= 10, "only %d kill points traced for %s" % (len(records), scenario)
    bad = [r for r in records if not PROPERTIES[prop](r)]
    assert not bad, "%s: %d of %d kill points break %r; first ones:\n%s" % (
        scenario, len(bad), len(records), prop, "\n".join(_show(r) for r in bad[:3]))
