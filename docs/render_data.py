# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Facts about the world, one data file each, read by the code, the build scripts and the docs.

    python3 docs/render_data.py --write                # rewrite every generated block in the docs
    python3 docs/render_data.py --check                # exit 1 and name every stale block
    python3 docs/render_data.py --get containerd.lane  # one value, for the Makefiles and shell scripts

Data files (pure data, no imports, so this reads them without Ansible's collection loader):

    plugins/module_utils/_containerd_releases.py   containerd release lines, config versions, lane versions

A generated block in a doc sits between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``; everything between
the markers is replaced.  ``--get`` keys:

    containerd.lane          the containerd 2.x the lanes build from Go modules (a Go module version, vX.Y.Z)
    containerd.lane.debian   the containerd of the runtime lane's Debian package (observed, not pinned)

tests/unit/meta/test_containerd_releases.py runs the check in ``make test-unit`` and fails when any other
tracked file names a lane version itself.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CONTAINERD_DATA = os.path.join("plugins", "module_utils", "_containerd_releases.py")


def load(rel, repo=REPO):
    """The data module at ``rel`` (a path under the repository), executed on its own."""
    spec = importlib.util.spec_from_file_location("gpuops_data_" + os.path.splitext(os.path.basename(rel))[0].lstrip("_"),
                                                  os.path.join(repo, rel))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def containerd(repo=REPO):
    return load(CONTAINERD_DATA, repo)


def lane(name, data=None):
    """The RELEASES row whose lane is ``name`` ("go", "debian")."""
    rows = [r for r in (data or containerd()).RELEASES if r["lane"] and r["lane"]["name"] == name]
    if len(rows) != 1:
        raise ValueError("%s: %d release lines with lane %r, expected 1" % (CONTAINERD_DATA, len(rows), name))
    return rows[0]


def lane_versions(data=None):
    """{lane name: exact version}: the strings no file but the data file may name."""
    return {r["lane"]["name"]: r["lane"]["version"] for r in (data or containerd()).RELEASES if r["lane"]}


GETTERS = {
    "containerd.lane": lambda: lane("go")["lane"]["version"],
    "containerd.lane.debian": lambda: lane("debian")["lane"]["version"],
}


# -- renderers ----------------------------------------------------------------------------------------------

def _table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _h in head) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def _key(path):
    """A TOML dotted key as containerd's docs write it: plugins."io.containerd.grpc.v1.cri"."""
    return ".".join(p if re.match(r"^[A-Za-z0-9_-]+$", p) else '"%s"' % p for p in path)


def render_containerd_releases(data=None):
    data = data or containerd()
    versions = {c["version"]: c for c in data.CONFIG_VERSIONS}
    cdi = {"none": "none", "enable_cdi": "`enable_cdi = true` needed", "default": "on by default"}
    imports = {"replace": "replace the importing file's", "merge": "merge into the importing file's"}
    lines = ["Generated from `%s` by `python docs/render_data.py --write`: edit the data file, not this table."
             % CONTAINERD_DATA, ""]
    lines += _table(
        ["containerd", "config `version` it writes", "CRI plugin table", "plugin tables from `imports`", "CDI", "test lane"],
        [[r["release"], r["config_version"], "`%s`" % _key(versions[r["config_version"]]["cri_plugin"]),
          imports[r["imports"]], cdi[r["cdi"]],
          "%s (%s)" % (r["lane"]["version"], r["lane"]["source"]) if r["lane"] else "—"]
         for r in data.RELEASES])
    lines += ["", "A release reads every config version up to the one it writes. What the module does per version:", ""]
    writers = {}
    for r in data.RELEASES:
        writers.setdefault(r["config_version"], []).append(r["release"])
    lines += _table(
        ["config `version`", "CRI plugin table", "`drop_in_path`", "`enable_cdi: true` writes `enable_cdi`", "written by"],
        [[c["version"], "`%s`" % _key(c["cri_plugin"]), "yes" if c["drop_in"] else "refused",
          "yes" if c["enable_cdi"] else "no (CDI is on by default)",
          ", ".join(writers.get(c["version"], [])) or "older releases (a file without `version` is read as 1)"]
         for c in data.CONFIG_VERSIONS])
    return "\n".join(lines) + "\n"


#: (doc, block name) -> renderer
BLOCKS = {
    ("docs/runtime.md", "containerd-releases"): render_containerd_releases,
}


def _splice(text, name, body):
    begin, end = "<!-- %s:begin -->\n" % name, "<!-- %s:end -->" % name
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError("expected one %s...%s pair" % (begin.strip(), end))
    head, rest = text.split(begin)
    _old, tail = rest.split(end)
    return head + begin + body + end + tail


def rendered(repo=REPO):
    """{doc path: (current text, text with every block regenerated)}."""
    out = {}
    for (doc, name), render in sorted(BLOCKS.items()):
        path = os.path.join(repo, doc)
        if doc not in out:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            out[doc] = (text, text)
        try:
            out[doc] = (out[doc][0], _splice(out[doc][1], name, render()))
        except ValueError as e:
            raise ValueError("%s: %s" % (doc, e))
    return out


def stale(repo=REPO):
    """Docs whose generated blocks differ from the data."""
    return [doc for doc, (cur, new) in sorted(rendered(repo).items()) if cur != new]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true", help="rewrite the generated blocks")
    g.add_argument("--check", action="store_true", help="exit 1 when a generated block is stale")
    g.add_argument("--get", metavar="KEY", choices=sorted(GETTERS), help="print one value: %s" % ", ".join(sorted(GETTERS)))
    args = ap.parse_args(argv)
    if args.get:
        print(GETTERS[args.get]())
        return 0
    if args.check:
        bad = stale()
        for doc in bad:
            print("%s: generated block is stale; run: python docs/render_data.py --write" % doc, file=sys.stderr)
        return 1 if bad else 0
    for doc, (cur, new) in sorted(rendered().items()):
        if cur != new:
            with open(os.path.join(REPO, doc), "w", encoding="utf-8") as fh:
                fh.write(new)
            print("rewrote %s" % doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
