# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Facts about the world, one data file each, read by the code, the build scripts and the docs.

    python3 docs/render_data.py --write                # rewrite every generated block in the docs
    python3 docs/render_data.py --check                # exit 1 and name every stale block
    python3 docs/render_data.py --get containerd.lane  # one value, for the Makefiles and shell scripts

Data files (pure data, no imports, so this reads them without Ansible's collection loader):

    plugins/module_utils/_containerd_releases.py   containerd release lines, config versions, lane versions
    plugins/plugin_utils/_components.py            the cluster components' images (each role's <role>_image)

Besides the docs' blocks, ``--write`` rewrites each component role's ``<role>_image`` default in
defaults/main.yml and meta/argument_specs.yml from _components.py (the roles' YAML cannot import Python).

A generated block in a doc sits between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``; everything between
the markers is replaced.  ``--get`` keys:

    containerd.lane          the containerd 2.x the lanes build from Go modules (a Go module version, vX.Y.Z)
    containerd.lane.debian   the containerd of the runtime lane's Debian package (observed, not pinned)
    components.<role>        the image version that role pins (nfd, device_plugin, gfd, validator, ...)

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
COMPONENTS_DATA = os.path.join("plugins", "plugin_utils", "_components.py")


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


def render_containerd_releases(data=None, repo=REPO):
    data = data or containerd(repo)
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


def components(repo=REPO):
    return load(COMPONENTS_DATA, repo)


# components.<role>: the image version a component role pins, for every role of _components.py (the lanes build
# NFD, the device plugin, the DRA driver ... at exactly that version)
GETTERS.update({"components." + _role: (lambda r=_role: components().IMAGES[r]["version"])
                for _role in components().IMAGES})


def render_component_images(data=None, repo=REPO):
    data = data or components(repo)
    lines = ["Generated from `%s` by `python docs/render_data.py --write` (GPU Operator %s): edit the data "
             "file, not this table." % (COMPONENTS_DATA, data.OPERATOR_VERSION), ""]
    lines += _table(["role", "image (`<role>_image`)", "ClusterPolicy field"],
                    [["`%s`" % role, "`%s/%s:%s`" % (c["repository"], c["image"], c["version"]),
                      "`spec.%s`" % c["clusterpolicy"] if c["clusterpolicy"] else "—"]
                     for role, c in data.IMAGES.items()])
    return "\n".join(lines) + "\n"


#: (doc, block name) -> renderer
BLOCKS = {
    ("docs/runtime.md", "containerd-releases"): render_containerd_releases,
    ("docs/cluster-lane.md", "component-images"): render_component_images,
}


def _image_block(text, role, image, path):
    """``text`` with the repository/image/version lines under ``<role>_image:`` set to ``image``."""
    pat = re.compile(r"(^[ \t]*%s_image:\n(?:[ \t]+[a-z_]+:.*\n){0,3}?)" % re.escape(role)
                     + r"([ \t]+)repository: .*\n\2image: .*\n\2version: .*\n", re.M)
    found = pat.findall(text)
    if len(found) != 1:
        raise ValueError("%s: expected one %s_image block with repository/image/version lines, found %d"
                         % (path, role, len(found)))
    return pat.sub(lambda m: "%s%srepository: %s\n%simage: %s\n%sversion: %s\n" % (
        m.group(1), m.group(2), image["repository"], m.group(2), image["image"], m.group(2), image["version"]), text)


def rendered_roles(repo=REPO):
    """{role file: (current text, text with its <role>_image default from _components.py)}."""
    out = {}
    for role, c in sorted(components(repo).IMAGES.items()):
        for rel in ("defaults/main.yml", "meta/argument_specs.yml"):
            doc = os.path.join("roles", role, rel)
            with open(os.path.join(repo, doc), encoding="utf-8") as fh:
                text = fh.read()
            out[doc] = (text, _image_block(text, role, c, doc))
    return out


def _splice(text, name, body):
    begin, end = "<!-- %s:begin -->\n" % name, "<!-- %s:end -->" % name
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError("expected one %s...%s pair" % (begin.strip(), end))
    head, rest = text.split(begin)
    _old, tail = rest.split(end)
    return head + begin + body + end + tail


def rendered(repo=REPO, blocks=None, roles=True):
    """{doc path: (current text, text with every block regenerated)}; ``blocks`` (default: all) limits the docs'
    blocks, ``roles`` adds the role files."""
    out = {}
    for (doc, name), render in sorted((blocks or BLOCKS).items()):
        path = os.path.join(repo, doc)
        if doc not in out:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            out[doc] = (text, text)
        try:
            out[doc] = (out[doc][0], _splice(out[doc][1], name, render(repo=repo)))
        except ValueError as e:
            raise ValueError("%s: %s" % (doc, e))
    if roles:
        out.update(rendered_roles(repo))
    return out


def stale(repo=REPO, blocks=None, roles=True):
    """Docs (and role files) whose generated parts differ from the data."""
    return [doc for doc, (cur, new) in sorted(rendered(repo, blocks, roles).items()) if cur != new]


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
