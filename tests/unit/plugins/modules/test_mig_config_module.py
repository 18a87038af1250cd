"""The mig_config module boundary: bad input refused with a message and no NVML write, check mode and
diff, no pynvml on the host."""
from __future__ import annotations

import os
import sys

from ansible_collections.gpuops.nvidia.plugins.modules import mig_config
from conftest import run_module

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import nvml_sim  # noqa: E402

CONFIG = {"version": "v1", "mig-configs": {
    "all-balanced": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}}],
    "nonsense": [{"devices": "all", "mig-enabled": True, "mig-devices": {"9g.999gb": 3}}]}}


def with_sim(monkeypatch, **kw):
    sim = nvml_sim.NvmlSim([dict({"table": nvml_sim.load_table("h200-141gb")}, **kw)])
    monkeypatch.setattr(mig_config, "load_nvml", lambda: (sim, None))
    return sim


def test_check_mode_and_diff_then_apply_then_idempotent(capsys, monkeypatch):
    sim = with_sim(monkeypatch)
    rc, out = run_module(capsys, mig_config.main, {"config": CONFIG, "name": "all-balanced",
                                                   "_ansible_check_mode": True, "_ansible_diff": True})
    assert rc == 0 and out["changed"] is True and sim.writes() == []
    assert [d["before_header"] for d in out["diff"]] == ["MIG layout"]
    assert "MIG disabled" in out["diff"][0]["before"] and "3g.71gb@4" in out["diff"][0]["after"]
    rc, out = run_module(capsys, mig_config.main, {"config": CONFIG, "name": "all-balanced"})
    assert rc == 0 and out["changed"] is True and out["gpus"][0]["verified"] is True and "diff" not in out
    rc, out = run_module(capsys, mig_config.main, {"config": CONFIG, "name": "all-balanced"})
    assert rc == 0 and out["changed"] is False


def test_nonsense_layout_is_refused_naming_gpu_and_profile(capsys, monkeypatch):
    sim = with_sim(monkeypatch)
    rc, out = run_module(capsys, mig_config.main, {"config": CONFIG, "name": "nonsense"})
    assert rc == 1 and "nothing changed" in out["msg"]
    assert "GPU 0 (NVIDIA H200" in out["msg"] and "'9g.999gb'" in out["msg"]
    assert sim.writes() == []


def test_bad_shape_and_unknown_name_before_nvml_is_touched(capsys, monkeypatch):
    sim = with_sim(monkeypatch)
    bad = {"version": "v1", "mig-configs": {"x": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": -3}}]}}
    rc, out = run_module(capsys, mig_config.main, {"config": bad, "name": "x"})
    assert rc == 1 and "count must be a positive integer, got -3" in out["msg"]
    rc, out = run_module(capsys, mig_config.main, {"config": CONFIG, "name": "all-1g.18gb"})
    assert rc == 1 and "is not in the config" in out["msg"]
    assert sim.calls == []


def test_reset_never_reports_pending(capsys, monkeypatch):
    sim = with_sim(monkeypatch, needs_reset=True, reset_blocked=True)
    rc, out = run_module(capsys, mig_config.main, {"config": CONFIG, "name": "all-balanced", "reset": "never"})
    assert rc == 0 and out["reset_pending"] == [0] and out["changed"] is True
    assert "pending a GPU reset" in str(out.get("warnings")), out
    assert sim.state(0) == (False, True, [])


def test_no_pynvml(capsys, monkeypatch):
    monkeypatch.setattr(mig_config, "load_nvml", lambda: (None, "pynvml is not importable on this host"))
    rc, out = run_module(capsys, mig_config.main, {"config": CONFIG, "name": "all-balanced"})
    assert rc == 1 and "nvidia-ml-py" in out["msg"]


def test_pynvml_hidden_the_message_says_how_to_install_it(capsys, monkeypatch):
    """The module's own import of pynvml, with pynvml hidden (None in sys.modules makes `import pynvml` fail):
    refused before any NVML call, naming this Python and the commands that install it."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    for check_mode in (True, False):
        rc, out = run_module(capsys, mig_config.main, {"config": CONFIG, "name": "all-balanced",
                                                       "_ansible_check_mode": check_mode})
        assert rc == 1 and out["msg"].startswith("cannot apply MIG layouts, nothing changed: pynvml is not importable by "
                                                 + sys.executable), out
        assert "ImportError" in out["msg"] or "ModuleNotFoundError" in out["msg"]
        assert "`%s -m pip install nvidia-ml-py`" % sys.executable in out["msg"]
        assert "python3-pynvml" in out["msg"] and "mig_layout_nvml_install" in out["msg"]
        assert out["remediation"].startswith("install NVIDIA's nvidia-ml-py for " + sys.executable)
        assert out["errors"] and "pynvml is not importable" in out["errors"][0]


def test_pynvml_without_the_mig_calls_is_refused_as_too_old(capsys, monkeypatch):
    """Bindings older than NVML's MIG API (Ubuntu 22.04's python3-pynvml 7.352) are refused before any call."""
    sim = with_sim(monkeypatch)

    class OldBindings:
        __version__ = "7.352.0"
        __file__ = "/usr/lib/python3/dist-packages/pynvml.py"

        def __getattr__(self, name):
            if name in ("nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlDeviceGetGpuInstancePossiblePlacements"):
                raise AttributeError(name)
            return getattr(sim, name)

    monkeypatch.setattr(mig_config, "load_nvml", lambda: (OldBindings(), None))
    rc, out = run_module(capsys, mig_config.main, {"config": CONFIG, "name": "all-balanced"})
    assert rc == 1 and "is too old for MIG" in out["msg"] and "7.352.0" in out["msg"], out
    assert "nvmlDeviceGetGpuInstancePossiblePlacements, nvmlDeviceCreateGpuInstanceWithPlacement" in out["msg"]
    assert sim.calls == []
