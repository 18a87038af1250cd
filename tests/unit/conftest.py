"""Unit-test set-up: find the collection to import, install Ansible's collection loader over it, and
build node root trees once.

Which copy of the collection is tested (``COLLECTIONS``, a directory holding
``ansible_collections/gpuops/nvidia``), first match wins:

1. ``$GPUOPS_COLLECTIONS``: ``make test-unit`` sets it to ``.collections``, where it has just installed the
   built tarball (what Galaxy users get);
2. the ``ansible_collections`` tree these tests sit in, when the collection root is
   ``<dir>/ansible_collections/gpuops/nvidia``: an installed copy, e.g. under ``ansible-test units``
   (``make test-units-galaxy``);
3. a plain checkout: the working tree itself, through a symlink
   ``<tmp>/gpuops-pytest-<uid>-<hash of the checkout path>/ansible_collections/gpuops/nvidia`` -> the checkout,
   so that ``pytest tests/unit`` needs no ``make install`` and tests what is being edited (never a stale
   ``.collections``).

The choice is written back to ``os.environ["GPUOPS_COLLECTIONS"]``, so that the helpers and test modules
that read it at import (tests/unit/roles/role_render.py, ...) and the ansible-playbook runs they start
agree with it.  Test equipment the Galaxy tarball ships: tests/unit, tests/fixtures (node captures, the
node-root builder ``tests/fixtures/noderoots``, the NVML stand-in); tests that need pieces it leaves out
(galaxy.yml build_ignore: the lab inventory, tests/lab, requirements-dev.txt, ...) skip, naming the piece
(``needs``).

Process-wide state that tests share, set here once so that no test depends on which others ran:

* the import of ``ansible_collections.*``: Ansible's collection loader (the same one ansible-playbook
  and ansible-test's unit runner install) is put in place before any test module is imported.  A
  collection imported as a plain namespace package first (through sys.path) has no collection
  metadata, and once the loader is installed later (tests/unit/roles/role_render.py needs it for the
  collection's filters) every further import under it fails ("collection metadata was not loaded",
  "No filter named 'gpuops.nvidia....' found").  Under ansible-test its pytest plugin has installed
  the loader already (and imports this file as ``ansible_collections.gpuops.nvidia.tests.unit.conftest``).
* controller vs. module context: loading the collection loader (or just importing ``ansible.errors``,
  as every filter plugin does) marks the process as the Ansible controller, where module_utils'
  ``warn()``/``deprecate()`` go to the controller's display instead of the module result;
  ``run_module`` runs a module as on a target (see ``module_context``)."""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
COLLECTION = ("ansible_collections", "gpuops", "nvidia")


def _has_collection(path):
    return os.path.isdir(os.path.join(path, *COLLECTION))


def _checkout_tree(repo):
    """<tmp>/gpuops-pytest-<uid>-<hash>/ansible_collections/gpuops/nvidia -> ``repo`` (made once, reused)."""
    real = os.path.realpath(repo)
    base = os.path.join(tempfile.gettempdir(), "gpuops-pytest-%d-%s" % (os.getuid(), hashlib.sha256(real.encode()).hexdigest()[:12]))
    link = os.path.join(base, *COLLECTION)
    if os.path.realpath(link) != real:
        os.makedirs(os.path.dirname(link), exist_ok=True)
        tmp = "%s.%d" % (link, os.getpid())
        os.symlink(real, tmp)
        os.replace(tmp, link)  # atomic: runs started at once from the same checkout agree
    return base


def find_collections(repo=REPO, environ=None):
    """(directory holding ansible_collections/gpuops/nvidia, why that one): the rule in this file's docstring."""
    given = (os.environ if environ is None else environ).get("GPUOPS_COLLECTIONS")
    if given:
        given = os.path.abspath(given)
        if not _has_collection(given):
            raise RuntimeError("GPUOPS_COLLECTIONS=%s has no ansible_collections/gpuops/nvidia (run `make install`?)" % given)
        return given, "GPUOPS_COLLECTIONS"
    parts = os.path.abspath(repo).split(os.sep)
    if tuple(parts[-3:]) == COLLECTION:
        return os.sep.join(parts[:-3]) or os.sep, "the ansible_collections tree the tests sit in"
    return _checkout_tree(repo), "this checkout (symlinked)"


COLLECTIONS, COLLECTIONS_WHY = find_collections()
os.environ["GPUOPS_COLLECTIONS"] = COLLECTIONS
# Test equipment imported by plain name (as pytest's rootdir-relative import does for a plain checkout;
# ansible-test imports test modules as ansible_collections.gpuops.nvidia.tests.unit.*, so say it here).
for _path in (os.path.join(REPO, "tests", "fixtures", "noderoots"), os.path.join(HERE, "plugins", "module_utils"),
              os.path.join(HERE, "roles"), os.path.join(HERE, "security"), HERE):
    if _path not in sys.path:
        sys.path.insert(0, _path)
sys.modules.setdefault("conftest", sys.modules[__name__])  # `from conftest import ...`: this module, not a copy


def _install_collection_loader():
    """Ansible's collection finder over COLLECTIONS (+ the configured collections paths), once."""
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    if AnsibleCollectionConfig.collection_finder is not None:
        return  # ansible-test's plugin did it (its module/module_utils runs have no ansible.plugins at all)
    from ansible.plugins.loader import init_plugin_loader

    early = sorted(m for m in sys.modules if m == "ansible_collections" or m.startswith("ansible_collections."))
    if early:  # imported without collection metadata: would break the loader's later imports
        raise RuntimeError("ansible_collections imported before the collection loader: %s" % ", ".join(early))
    init_plugin_loader([COLLECTIONS])


_install_collection_loader()

H200_CAPTURE = os.path.join(REPO, "tests", "fixtures", "nodes", "h200-ubuntu2404-vm")


def pytest_report_header(config):
    return "gpuops.nvidia under test: %s (%s)" % (os.path.join(COLLECTIONS, *COLLECTION), COLLECTIONS_WHY)


def needs(*rel):
    """skipif mark for a test that reads repository files the Galaxy tarball leaves out (galaxy.yml build_ignore)."""
    missing = [p for p in rel if not os.path.exists(os.path.join(REPO, p))]
    return pytest.mark.skipif(bool(missing), reason="needs %s, not in the Galaxy tarball (galaxy.yml build_ignore)"
                              % ", ".join(missing))


def ansible_command(name):
    """An Ansible CLI: the one beside this Python (a virtualenv's bin), else the one on PATH (ansible-test
    puts its own entry points first)."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    return beside if os.path.exists(beside) else (shutil.which(name) or beside)


@pytest.fixture(scope="session")
def roots(tmp_path_factory):
    """Every node root tree (real H200 replay + synthetic nodes), built once."""
    import noderoots

    return noderoots.build_all(str(tmp_path_factory.mktemp("roots")))


@pytest.fixture
def h200_nvml():
    from nvml_standin import NVMLStandIn

    return NVMLStandIn(H200_CAPTURE)


@contextlib.contextmanager
def module_context():
    """Run module code as it runs on a target, in a process of its own: not in the controller's
    context (where module_utils' warn()/deprecate() go to the display, not to the result), and with
    empty module-global warning/deprecation collectors, before and after."""
    from ansible.module_utils import _internal
    from ansible.module_utils.common import warnings as ansible_warnings

    def clear():
        ansible_warnings._global_warnings.clear()
        ansible_warnings._global_deprecations.clear()

    was_controller = _internal.is_controller
    _internal.is_controller = False
    clear()
    try:
        yield
    finally:
        clear()
        _internal.is_controller = was_controller


def run_module(capsys, main, args):
    """Run a module's main() with ``args``; return (exit code, parsed JSON result)."""
    import json

    from ansible.module_utils.testing import patch_module_args

    with module_context(), patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            main()
    return exc.value.code, json.loads(capsys.readouterr().out)


# -- container_runtime module tests (tests/unit/plugins/modules/test_container_runtime_*.py) ----------------

RUNTIME_FIXTURES = os.path.join(HERE, "fixtures", "runtime")


def runtime_fixture(*parts):
    """The bytes of a runtime config under tests/unit/fixtures/runtime."""
    with open(os.path.join(RUNTIME_FIXTURES, *parts), "rb") as f:
        return f.read()


def runtime_args(cfg, state_dir, **kw):
    """container_runtime's arguments for the config ``cfg`` (docker for a .json, containerd otherwise), without
    restart or validation; ``kw`` added."""
    a = {"runtime": "docker" if str(cfg).endswith(".json") else "containerd", "config_path": str(cfg),
         "state_dir": state_dir, "restart_mode": "none", "validate": False}
    a.update(kw)
    return a


@pytest.fixture
def runtime_host(tmp_path):
    """A config dir and a state dir of their own: (etc directory, state_dir path)."""
    d = tmp_path / "etc"
    d.mkdir()
    return d, str(tmp_path / "state")


def tree_bytes(top):
    """{path relative to top: bytes} of every file under top: a tree compared before and after a run."""
    out = {}
    for d, _dirs, files in os.walk(str(top)):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                out[os.path.relpath(os.path.join(d, f), str(top))] = fh.read()
    return out
