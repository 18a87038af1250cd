"""Unit-test set-up: import the collection as Galaxy users get it (the tarball
installed into .collections by `make install`), and build node root trees once."""
from __future__ import annotations

import os
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
if not os.path.isdir(os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "nvidia")):
    raise RuntimeError("run `make install` first: %s has no gpuops.nvidia" % COLLECTIONS)
sys.path.insert(0, COLLECTIONS)
sys.path.insert(0, os.path.join(REPO, "tests", "lab", "noderoots"))

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


def run_module(capsys, main, args):
    """Run a module's main() with ``args``; return (exit code, parsed JSON result)."""
    import json

    from ansible.module_utils.testing import patch_module_args

    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            main()
    return exc.value.code, json.loads(capsys.readouterr().out)
