"""The import-layer contract (issue 17): modules -> module_utils; controller plugins -> plugin_utils ->
module_utils; module_utils never reaches up.  docs/import_graph.py reads the source with ast, so the check
and the graph need neither Ansible's collection loader nor an installed copy."""
from __future__ import annotations

import importlib.util
import os
import textwrap

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SPEC = importlib.util.spec_from_file_location("import_graph", os.path.join(REPO, "docs", "import_graph.py"))
graph = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(graph)


def test_the_collection_keeps_its_layers():
    assert len(graph.edges()) > 30
    assert graph.violations() == []


def test_a_module_utils_file_importing_controller_code_is_caught(tmp_path):
    for d in ("module_utils", "plugin_utils", "filter", "modules"):
        (tmp_path / "plugins" / d).mkdir(parents=True)
    (tmp_path / "plugins" / "module_utils" / "_bad.py").write_text(textwrap.dedent("""\
        from ansible_collections.gpuops.nvidia.plugins.plugin_utils import _upgrade
        from ..filter import k8s_plan
        """))
    (tmp_path / "plugins" / "modules" / "m.py").write_text(
        "from ansible_collections.gpuops.nvidia.plugins.plugin_utils._filters import refusing\n")
    (tmp_path / "plugins" / "filter" / "f.py").write_text(
        "from ansible_collections.gpuops.nvidia.plugins.module_utils import _mig\n"
        "from ansible_collections.gpuops.nvidia.plugins.plugin_utils._filters import refusing\n")
    bad = graph.violations(str(tmp_path))
    assert len(bad) == 4, bad
    assert any(b.startswith("ansible_collections.gpuops.nvidia.plugins.module_utils._bad is in module_utils but no "
                            "module imports it") for b in bad)
    assert any("module_utils._bad (module_utils) imports ansible_collections.gpuops.nvidia.plugins.plugin_utils._upgrade" in b
               for b in bad)
    assert any("plugins.filter.k8s_plan (filter)" in b for b in bad)
    assert any("plugins.modules.m (modules)" in b for b in bad)


def test_module_utils_holds_only_what_runs_on_targets(tmp_path):
    """A module_utils file only filters use is caught; one a module reaches through another, or a role copies to
    targets, is not."""
    for d in ("module_utils", "filter", "modules"):
        (tmp_path / "plugins" / d).mkdir(parents=True)
    (tmp_path / "roles" / "r" / "tasks").mkdir(parents=True)
    mu = tmp_path / "plugins" / "module_utils"
    (mu / "_direct.py").write_text("from ansible_collections.gpuops.nvidia.plugins.module_utils import _indirect\n")
    (mu / "_indirect.py").write_text("X = 1\n")
    (mu / "_copied.py").write_text("X = 1\n")
    (mu / "_filters_only.py").write_text("X = 1\n")
    (tmp_path / "plugins" / "modules" / "m.py").write_text(
        "from ansible_collections.gpuops.nvidia.plugins.module_utils import _direct\n")
    (tmp_path / "plugins" / "filter" / "f.py").write_text(
        "from ansible_collections.gpuops.nvidia.plugins.module_utils import _filters_only\n")
    (tmp_path / "roles" / "r" / "tasks" / "main.yml").write_text(
        "- ansible.builtin.copy:\n    src: \"{{ role_path }}/../../plugins/module_utils/_copied.py\"\n")
    assert graph.controller_only(str(tmp_path)) == ["ansible_collections.gpuops.nvidia.plugins.module_utils._filters_only"]
    assert graph.controller_only() == []
