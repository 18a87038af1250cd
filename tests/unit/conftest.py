"""Unit-test set-up: import the collection as Galaxy users get it (the tarball
installed into .collections by `make install`), and build node root trees once.

Process-wide state that tests share, set here once so that no test depends on which others ran:

* the import of ``ansible_collections.*``: Ansible's collection loader (the same one ansible-playbook
  and ansible-test's unit runner install) is put in place before any test module is imported.  A
  collection imported as a plain namespace package first (through sys.path) has no collection
  metadata, and once the loader is installed later (tests/unit/roles/role_render.py needs it for the
  collection's filters) every further import under it fails ("collection metadata was not loaded",
  "No filter named 'gpuops.nvidia....' found").
* controller vs. module context: loading the collection loader (or just importing ``ansible.errors``,
  as every filter plugin does) marks the process as the Ansible controller, where module_utils'
  ``warn()``/``deprecate()`` go to the controller's display instead of the module result;
  ``run_module`` runs a module as on a target (see ``module_context``)."""
from __future__ import annotations

import contextlib
import os
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
if not os.path.isdir(os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "nvidia")):
    raise RuntimeError("run `make install` first: %s has no gpuops.nvidia" % COLLECTIONS)
sys.path.insert(0, os.path.join(REPO, "tests", "lab", "noderoots"))


def _install_collection_loader():
    """Ansible's collection finder over COLLECTIONS (+ the configured collections paths), once."""
    from ansible.plugins.loader import init_plugin_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    if AnsibleCollectionConfig.collection_finder is not None:
        return
    early = sorted(m for m in sys.modules if m == "ansible_collections" or m.startswith("ansible_collections."))
    if early:  # imported without collection metadata: would break the loader's later imports
        raise RuntimeError("ansible_collections imported before the collection loader: %s" % ", ".join(early))
    init_plugin_loader([COLLECTIONS])


_install_collection_loader()

H200_CAPTURE = os.path.join(REPO, "tests", "fixtures", "nodes", "h200-ubuntu2404-vm")


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
