"""House rules (issue 17): one family of errors, turned into module failures in one place, and one diff shape.

The rules are read from the source and the imported classes, so a new module or error class that breaks them
fails here rather than in review."""
from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils import _diff, _errors

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PKG = "ansible_collections.gpuops.nvidia.plugins"
MEANINGS = (_errors.InputError, _errors.HostError, _errors.ApplyError)


def _sources(kind):
    d = os.path.join(REPO, "plugins", kind)
    return sorted(n[:-3] for n in os.listdir(d) if n.endswith(".py") and n != "__init__.py")


def _defined_exceptions():
    """(dotted module, class) for every exception class the collection's own code defines."""
    out = []
    for kind in ("module_utils", "plugin_utils", "filter"):
        for name in _sources(kind):
            mod = importlib.import_module("%s.%s.%s" % (PKG, kind, name))
            out += [(mod.__name__, obj) for _n, obj in inspect.getmembers(mod, inspect.isclass)
                    if issubclass(obj, BaseException) and obj.__module__ == mod.__name__]
    return out


def test_every_error_class_is_of_the_family_with_one_meaning():
    found = _defined_exceptions()
    assert len(found) > 20
    for where, cls in found:
        if where.endswith("._errors"):
            continue
        assert issubclass(cls, _errors.GpuopsError), "%s.%s is outside the error family" % (where, cls.__name__)
        assert any(issubclass(cls, m) for m in MEANINGS), "%s.%s says neither input, host nor apply" % (
            where, cls.__name__)


def test_no_two_error_classes_share_a_name():
    names = {}
    for where, cls in _defined_exceptions():
        names.setdefault(cls.__name__, []).append(where)
    assert {n: w for n, w in names.items() if len(w) > 1} == {}


def _handler_names(handler):
    t = handler.type
    nodes = t.elts if isinstance(t, ast.Tuple) else [t] if t is not None else []
    return {n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", "") for n in nodes}


def test_modules_turn_the_family_into_failures_through_errors_fail_only():
    family = {cls.__name__ for _w, cls in _defined_exceptions()}
    offenders, through_fail = [], 0
    for name in _sources("modules"):
        path = os.path.join(REPO, "plugins", "modules", name + ".py")
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in ast.walk(tree):
            if not isinstance(node, ast.ExceptHandler) or not (_handler_names(node) & family):
                continue
            calls = [c for c in ast.walk(node) if isinstance(c, ast.Call)]
            if any(isinstance(c.func, ast.Attribute) and c.func.attr == "fail_json" for c in calls):
                offenders.append("%s:%d" % (name, node.lineno))
            through_fail += any(isinstance(c.func, ast.Name) and c.func.id == "fail" for c in calls)
    assert offenders == []
    assert through_fail >= 15


class _Module:
    def __init__(self):
        self.failed = None

    def fail_json(self, **kw):
        self.failed = kw
        raise SystemExit(1)


def test_fail_carries_msg_errors_remediation_and_the_class_fields():
    from ansible_collections.gpuops.nvidia.plugins.module_utils._driver import DriverPlanError
    from ansible_collections.gpuops.nvidia.plugins.module_utils._mig import MigError
    from ansible_collections.gpuops.nvidia.plugins.module_utils._vgpu import VgpuApplyError

    m = _Module()
    with pytest.raises(SystemExit):
        _errors.fail(m, MigError(["GPU 0: unknown profile 9g.999gb", "GPU 0: count -3"]))
    assert m.failed == {"msg": "GPU 0: unknown profile 9g.999gb; GPU 0: count -3",
                        "errors": ["GPU 0: unknown profile 9g.999gb", "GPU 0: count -3"]}
    with pytest.raises(SystemExit):
        _errors.fail(m, DriverPlanError("unsupported OS x 1", "use Ubuntu"), msg="prefix: x", changed=False)
    assert m.failed == {"msg": "prefix: x", "remediation": "use Ubuntu", "changed": False}
    err = VgpuApplyError("write failed", changed=True)
    err.result_fields = ("changed",)
    with pytest.raises(SystemExit):
        _errors.fail(m, err, changed=False, msg=None)
    assert m.failed == {"msg": "write failed", "changed": False}  # the module's own keys win
    with pytest.raises(SystemExit):
        _errors.fail(m, ValueError("plain"))
    assert m.failed == {"msg": "plain"}


def test_input_errors_stay_value_errors_and_file_errors_stay_os_errors():
    from ansible_collections.gpuops.nvidia.plugins.module_utils._files import FileError, FileLockTimeout

    assert issubclass(_errors.InputError, ValueError) and issubclass(_errors.VerifyError, _errors.ApplyError)
    e = FileLockTimeout(110, "held")
    assert isinstance(e, OSError) and isinstance(e, _errors.HostError) and e.errno == 110 and e.errors == ()
    assert issubclass(FileError, OSError)


def test_diff_entries_have_one_shape():
    assert _diff.entries(None, _diff.entry("f", None, "a\n"), [_diff.entry("g", "b", "c", after_header="g (x)")]) == [
        {"before": "", "after": "a\n", "before_header": "f", "after_header": "f"},
        {"before": "b", "after": "c", "before_header": "g", "after_header": "g (x)"}]
    with pytest.raises(ValueError, match="before_header"):
        _diff.entries({"before": "", "after": ""})


def test_every_module_builds_its_diff_result_through_diff_entries():
    seen = 0
    for name in _sources("modules"):
        path = os.path.join(REPO, "plugins", "modules", name + ".py")
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "exit_json"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "_diff"):
                seen += 1       # _diff.exit_json: the result's diff through _diff.entries
                continue
            if not isinstance(node, ast.Assign):
                continue
            for t in node.targets:
                if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == "result"
                        and isinstance(t.slice, ast.Constant) and t.slice.value == "diff"):
                    seen += 1
                    v = node.value
                    assert (isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "entries"
                            ), "%s:%d sets result['diff'] without _diff.entries" % (name, node.lineno)
    assert seen >= 8


def _module_utils_closure(start):
    spec = importlib.util.spec_from_file_location("import_graph", os.path.join(REPO, "docs", "import_graph.py"))
    graph = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(graph)
    edges = {}
    for src, dst in graph.edges():
        edges.setdefault(src, set()).add(dst)
    todo, seen = [PKG + ".module_utils." + start], set()
    while todo:
        for dst in edges.get(todo.pop(), ()):
            if dst not in seen:
                seen.add(dst)
                todo.append(dst)
    return {d.rsplit(".", 1)[1] + ".py" for d in seen} | {start + ".py"}


def test_vgpu_host_copies_every_module_utils_file_its_apply_script_imports():
    with open(os.path.join(REPO, "roles", "vgpu_host", "vars", "main.yml"), encoding="utf-8") as fh:
        copied = set(yaml.safe_load(fh)["_vgpu_host_py_files"])
    assert _module_utils_closure("_vgpu") <= copied
