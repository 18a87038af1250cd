"""The gpu_facts module boundary: argument handling, check mode, failure messages."""
from __future__ import annotations


from ansible_collections.gpuops.nvidia.plugins.modules import gpu_facts
from conftest import run_module


def run(capsys, args):
    return run_module(capsys, gpu_facts.main, args)


def test_check_mode_gathers_and_changes_nothing(capsys, roots):
    rc, out = run(capsys, {"root": roots["hgx-h100"], "gather_subset": ["pci", "iommu"], "_ansible_check_mode": True})
    assert rc == 0 and out["changed"] is False
    assert out["ansible_facts"]["gpu"]["count"] == 8


def test_unknown_subset_fails_with_message(capsys, roots):
    rc, out = run(capsys, {"root": roots["h200"], "gather_subset": ["pci", "gpus"]})
    assert rc == 1 and out["failed"] is True
    assert "unknown gather_subset gpus" in out["msg"]


def test_no_pynvml_means_note_not_traceback(capsys, roots, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *a, **kw):
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    rc, out = run(capsys, {"root": roots["no-gpu"]})
    assert rc == 0
    gpu = out["ansible_facts"]["gpu"]
    assert "nvml" not in gpu and "pynvml" in gpu["notes"][0]
