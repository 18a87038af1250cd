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


def test_require_gpu_fails_on_a_node_without_nvidia_gpus(capsys, roots):
    rc, out = run(capsys, {"root": roots["no-gpu"], "gather_subset": ["pci"], "require_gpu": True})
    assert rc == 1 and out["failed"] is True
    assert "no NVIDIA GPU was found under %s" % roots["no-gpu"] in out["msg"]
    assert "ansible_facts" not in out


def test_require_gpu_passes_where_a_gpu_is(capsys, roots):
    rc, out = run(capsys, {"root": roots["h200"], "gather_subset": ["iommu"], "require_gpu": True})
    assert rc == 0, out
    assert out["ansible_facts"]["gpu"]["count"] >= 1


def test_require_gpu_without_a_pci_read_is_refused_before_reading(capsys, roots):
    rc, out = run(capsys, {"root": "/nonexistent", "gather_subset": ["kernel", "driver"], "require_gpu": True})
    assert rc == 1
    assert out["msg"] == "require_gpu needs a gather_subset that reads PCI (pci, iommu or all); got kernel, driver"
