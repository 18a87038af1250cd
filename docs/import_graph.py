# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The collection's import graph, and its layer contract.

Import-graph tools (pydeps, import-linter, farm-studio) cannot follow ``ansible_collections.gpuops.nvidia``
imports without Ansible's collection loader; this reads the source instead (ast, stdlib only).

    python3 docs/import_graph.py            # the graph in Graphviz dot: | dot -Tsvg > imports.svg
    python3 docs/import_graph.py --check    # exit 1 and list every import that breaks the layers

The layers (an arrow is "may import"):

    modules             -> module_utils
    controller plugins  -> plugin_utils, module_utils      (filter, action, lookup, callback, inventory ...)
    plugin_utils        -> plugin_utils, module_utils
    module_utils        -> module_utils                    (runs on targets: nothing from the controller side)
    doc_fragments       -> nothing

and module_utils holds only what runs on targets: each of its files is imported, directly or through other
module_utils, by a module, or is copied to targets by a role (``plugins/module_utils/_x.py`` named in a role's
tasks, as mig_layout does with ``_mig.py``).  Code only filters and action plugins use belongs in plugin_utils.

tests/unit/meta/test_import_layers.py runs the check in ``make test-unit``.
"""
from __future__ import annotations

import ast
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PREFIX = "ansible_collections.gpuops.nvidia.plugins."
CONTROLLER = {"filter", "action", "lookup", "callback", "inventory", "test", "connection", "become", "cache",
              "cliconf", "httpapi", "netconf", "shell", "strategy", "vars"}
ALLOWED = {
    "modules": {"module_utils"},
    "plugin_utils": {"plugin_utils", "module_utils"},
    "module_utils": {"module_utils"},
    "doc_fragments": set(),
}
for _kind in CONTROLLER:
    ALLOWED[_kind] = {"plugin_utils", "module_utils"}


def _layer(dotted):
    """'filter' for ansible_collections.gpuops.nvidia.plugins.filter.k8s_plan."""
    return dotted[len(PREFIX):].split(".", 1)[0]


def _module_name(path, root=REPO):
    rel = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
    return "ansible_collections.gpuops.nvidia." + rel


def edges(root=REPO):
    """[(importer, imported)] for every import of the collection's own plugins."""
    out = []
    for base, _dirs, files in os.walk(os.path.join(root, "plugins")):
        for name in sorted(files):
            if not name.endswith(".py") or name == "__init__.py":
                continue
            path = os.path.join(base, name)
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read(), path)
            me = _module_name(path, root)
            for node in ast.walk(tree):
                targets = []
                if isinstance(node, ast.ImportFrom):
                    if node.level:  # relative: resolve against the importer's package
                        pkg = me.rsplit(".", node.level)[0]
                        mod = pkg + ("." + node.module if node.module else "")
                    else:
                        mod = node.module or ""
                    if mod.startswith(PREFIX) and mod.count(".") == PREFIX.count("."):  # from plugins.X import _y
                        targets = [mod + "." + a.name for a in node.names]
                    elif mod.startswith(PREFIX):
                        targets = [mod]
                elif isinstance(node, ast.Import):
                    targets = [a.name for a in node.names if a.name.startswith(PREFIX)]
                out += [(me, t) for t in targets]
    return sorted(set(out))


def _target_scripts(root=REPO):
    """module_utils files a role copies to targets (named in roles/*/tasks/*.yml)."""
    found = set()
    roles = os.path.join(root, "roles")
    for base, _dirs, files in os.walk(roles) if os.path.isdir(roles) else ():
        for name in files:
            if name.endswith((".yml", ".yaml")) and os.sep + "tasks" in base:
                with open(os.path.join(base, name), encoding="utf-8") as fh:
                    text = fh.read()
                for word in text.replace('"', " ").replace("'", " ").split():
                    if "plugins/module_utils/_" in word and word.endswith(".py"):
                        found.add(PREFIX + "module_utils." + word.rsplit("/", 1)[1][:-3])
    return found


def controller_only(root=REPO):
    """module_utils modules that nothing on a target runs: no module reaches them and no role copies them."""
    graph = {}
    for src, dst in edges(root):
        graph.setdefault(src, set()).add(dst)
    mu_dir = os.path.join(root, "plugins", "module_utils")
    names = sorted(PREFIX + "module_utils." + n[:-3] for n in os.listdir(mu_dir)
                   if n.endswith(".py") and n != "__init__.py") if os.path.isdir(mu_dir) else []
    seen = set()
    todo = [m for m in graph if _layer(m) == "modules"] + sorted(_target_scripts(root))
    seen.update(todo)
    while todo:
        for dst in graph.get(todo.pop(), ()):
            if dst not in seen:
                seen.add(dst)
                todo.append(dst)
    return [n for n in names if n not in seen]


def violations(root=REPO):
    bad = ["%s is in module_utils but no module imports it and no role copies it to targets: controller-only "
           "code belongs in plugin_utils" % m for m in controller_only(root)]
    for src, dst in edges(root):
        a, b = _layer(src), _layer(dst)
        if a == b == "module_utils" or a == b == "plugin_utils":
            continue
        if b not in ALLOWED.get(a, set()):
            bad.append("%s (%s) imports %s (%s): %s may import only %s" % (
                src, a, dst, b, a, ", ".join(sorted(ALLOWED.get(a, set()))) or "nothing"))
    return bad


def dot(root=REPO):
    lines = ["digraph gpuops_nvidia_imports {", "  rankdir=LR; node [shape=box, fontsize=10];"]
    for src, dst in edges(root):
        lines.append('  "%s" -> "%s";' % (src[len(PREFIX):], dst[len(PREFIX):]))
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--check" in argv:
        bad = violations()
        for line in bad:
            print(line)
        print("%d imports checked, %d break the layers" % (len(edges()), len(bad)))  # noqa: T201
        return 1 if bad else 0
    sys.stdout.write(dot())
    return 0


if __name__ == "__main__":
    sys.exit(main())
