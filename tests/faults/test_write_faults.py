# Copyright: gpuops.nvidia contributors
# Apache License 2.0
"""Disk full and read-only targets, for every file a module edits.

For each target directory (a daemon's config directory, a drop-in directory, container_runtime's
state and backup directories, the GRUB drop-in directory, /etc/kernel, vfio_pci's state and udev
directories) and each fault:

* ``disk-full``      -- the directory is put on a small tmpfs, filled until a write fails (ENOSPC);
* ``immutable-file`` -- ``chattr +i`` on the file the module edits there (rename over it: EPERM);
* ``immutable-dir``  -- ``chattr +i`` on the directory (no temp file can be created: EPERM);
* ``read-only``      -- a read-only bind mount of the directory over itself (EROFS);

the module must fail with a ``msg`` (no traceback), every file it manages must keep its old content
byte for byte (files the module writes in one transaction -- container_runtime's main config and
drop-in -- included), and nothing may be left behind in the directory.  Once the fault is removed
(space freed, flag cleared, mount gone) a rerun must converge: changed, the files byte-identical to a
clean run's, then changed=false.
"""
from __future__ import annotations

import os
import shutil

import harness as h
import pytest
import scenarios as S
from stats import STATS

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (tmpfs and bind mounts, chattr)")
KINDS = ("disk-full", "immutable-file", "immutable-dir", "read-only")

# defects D (backup next to the file), E (containerd validation, truncated backup) and I (vfio_pci state
# file after the bind) are fixed; a known defect goes into Target(defect={kind or "*": reason}).


class Target(object):
    def __init__(self, name, cls, directory, keep=None, extra=None, kinds=KINDS, defect=None):
        self.name = name
        self.cls = cls
        self.directory = directory      # relative to the root
        self.keep = keep                # files (relative) that must stay old; None: every managed file
        self.extra = extra or {}        # extra module arguments ({root} is replaced)
        self.kinds = kinds
        self.defect = defect            # {kind or "*": reason} of known defects

    def args(self, sc):
        a = sc.args()
        for k, v in self.extra.items():
            a[k] = v.replace("{root}", sc.root) if isinstance(v, str) else v
        return a


_ALL_BUT_FILE = ("disk-full", "immutable-dir", "read-only")
_NOVAL = {"validate": False}
TARGETS = [
    Target("containerd-v2-main", S.ContainerdV2Main, "etc/containerd"),
    Target("containerd-v2-main:novalidate", S.ContainerdV2Main, "etc/containerd", extra=_NOVAL),
    Target("containerd-v2-dropin:main-dir", S.ContainerdV2DropInSibling, "etc/containerd"),
    Target("containerd-v2-dropin:main-dir:novalidate", S.ContainerdV2DropInSibling, "etc/containerd", extra=_NOVAL),
    Target("containerd-v2-dropin:dropin-dir", S.ContainerdV2DropInSibling, "etc/containerd-dropins",
           kinds=_ALL_BUT_FILE),
    Target("containerd-v2-dropin:dropin-dir:novalidate", S.ContainerdV2DropInSibling, "etc/containerd-dropins",
           kinds=_ALL_BUT_FILE, extra=_NOVAL),
    Target("containerd-v3-main", S.ContainerdV3Main, "etc/containerd"),
    Target("containerd-v3-dropin:main-dir", S.ContainerdV3DropIn, "etc/containerd"),
    Target("crio-dropin", S.Crio, "etc/crio/crio.conf.d"),
    Target("docker-daemon-json", S.Docker, "etc/docker"),
    Target("container_runtime:state_dir", S.ContainerdV2Main, "var/lib/gpuops/container_runtime", kinds=_ALL_BUT_FILE),
    Target("container_runtime:backup_dir", S.ContainerdV2Main, "var/backups/gpuops",
           extra={"backup_dir": "{root}/var/backups/gpuops"}, kinds=_ALL_BUT_FILE),
    Target("cdi-spec", S.Cdi, "host/etc/cdi"),
    Target("kernel-cmdline-grub", S.Grub, "etc/default/grub.d"),
    Target("kernel-cmdline-systemd-boot", S.SystemdBoot, "etc/kernel"),
    Target("vfio-pci:state-dir", S.Vfio, "etc/gpuops", keep=["etc/gpuops/vfio-pci.json"]),
    Target("vfio-pci:udev-dir", S.Vfio, "etc/udev/rules.d", keep=["etc/udev/rules.d/40-gpuops-vfio-pci.rules"]),
]


def _params():
    out = []
    for t in TARGETS:
        for kind in t.kinds:
            reason = (t.defect or {}).get(kind) or (t.defect or {}).get("*")
            marks = [needs_root]
            if reason:
                marks.append(pytest.mark.xfail(strict=True, reason=reason))
            out.append(pytest.param(t, kind, marks=marks, id="%s-%s" % (t.name, kind)))
    return out


def _files_under(d):
    return {os.path.relpath(os.path.join(b, n), d) for b, _dirs, names in os.walk(d) for n in names}


def reference_new(target, root):
    """The files after a clean run from the same starting tree (at the same path)."""
    sc = target.cls.fresh(root)
    out = h.run(sc.module, target.args(sc), os.path.join(os.path.dirname(root), "w"), env=sc.env(), setup=sc.setup())
    assert out.result and not out.failed and out.changed, out
    new = sc.snapshot()
    shutil.rmtree(root)
    return new


@pytest.mark.parametrize("target,kind", _params())
def test_write_fault(tmp_path, mounts, target, kind):
    root = str(tmp_path / "root")
    w = str(tmp_path / "w")
    new = reference_new(target, root)
    sc = target.cls.fresh(root)
    old = sc.snapshot()
    keep = [sc.p(f) for f in target.keep] if target.keep else sc.files()
    d = sc.p(target.directory)
    os.makedirs(d, exist_ok=True)
    edited = [f for f in sc.files() if os.path.dirname(f) == d and old[f] is not None]

    filler = None
    if kind == "disk-full":
        mounts.tmpfs(d, size="256k")
        filler = mounts.fill(d)
    elif kind == "immutable-file":
        assert edited, "no existing file in %s to make immutable" % d
        for f in edited:
            mounts.immutable(f)
    elif kind == "immutable-dir":
        mounts.immutable(d)
    else:
        mounts.read_only(d)
    listing = _files_under(d)

    out = h.run(sc.module, target.args(sc), w, env=sc.env(), setup=sc.setup())
    runs = 1
    problems = []
    if out.traceback or out.result is None:
        problems.append("no msg, a traceback:\n%s" % (out.traceback or out.stderr or "")[-1200:])
    elif not out.failed or not isinstance(out.result.get("msg"), str) or not out.result["msg"].strip():
        problems.append("the module did not fail with a msg: %r" % (out.result,))
    after = sc.snapshot()
    changed_files = [os.path.relpath(f, root) for f in keep if after[f] != old[f]]
    if changed_files:
        problems.append("not the old content byte for byte: %s" % changed_files)
    # files left in the directory: a temp file, a truncated backup (a complete backup of the old content
    # is what backup=true asks for, and is kept)
    left = {}
    for rel in sorted(_files_under(d) - listing):
        data = h.read_bytes(os.path.join(d, rel))
        if not (rel.endswith("~") and data in [old[f] for f in edited + keep]):
            left[rel] = "%d bytes" % len(data or b"")
    if left:
        problems.append("left behind in %s: %s" % (target.directory, left))

    # remove the fault, rerun: converge
    if filler:
        os.unlink(filler)
    else:
        mounts.release()
    first = h.run(sc.module, target.args(sc), w, env=sc.env(), setup=sc.setup())
    second = h.run(sc.module, target.args(sc), w, env=sc.env(), setup=sc.setup())
    runs += 2
    if first.failed or first.traceback or not first.changed:
        problems.append("rerun without the fault: %r" % (first,))
    got = sc.snapshot()
    differs = [os.path.relpath(f, root) for f in sc.files() if got[f] != new[f]]
    if differs:
        problems.append("rerun does not converge to a clean run's files: %s" % {
            f: (got[sc.p(f)] or b"<missing>").decode("utf-8", "replace")[:400] for f in differs})
    if second.failed or second.changed:
        problems.append("second rerun: %r" % (second,))
    mounts.release()
    STATS.add(sc.label, kind, trials=1, runs=runs + 1, file_checks=len(keep) + 2 * len(sc.files()))
    for f in sc.files():
        STATS.file(sc.label, os.path.relpath(f, root))
    assert not problems, "%s / %s:\n- %s" % (target.name, kind, "\n- ".join(problems))
