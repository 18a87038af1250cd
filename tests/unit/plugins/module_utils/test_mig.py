"""MIG layouts (module_utils/_mig.py) against the stateful NVML simulator, built from the real H200
capture and NVIDIA's published A100/H100 profile tables."""
from __future__ import annotations

import collections
import json
import os
import re
import sys

import pytest
import yaml

from ansible_collections.gpuops.nvidia.plugins.module_utils import _mig

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import nvml_sim  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MIG_FIXTURES = os.path.join(REPO, "tests", "unit", "fixtures", "mig")
LGIP = os.path.join(REPO, "tests", "fixtures", "nodes", "h200-ubuntu2404-vm", "nvidia-smi-mig-lgip.txt")
TABLES = {"h200": "h200-141gb", "a100": "a100-sxm4-80gb", "h100": "h100-sxm5-80gb", "l40s": "l40s-48gb"}


def host(*gpus, **kw):
    """A simulated host: gpus are table keys (or dicts of _Gpu keyword arguments)."""
    spec = []
    for g in gpus:
        g = {"table": g} if isinstance(g, str) else dict(g)
        g["table"] = nvml_sim.load_table(TABLES[g["table"]])
        spec.append(dict(g, **kw))
    return nvml_sim.NvmlSim(spec)


def load_yaml(name):
    with open(os.path.join(MIG_FIXTURES, name), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def instances(sim, index):
    """Collection of profile names (CI-prefixed when the CI is smaller) on one simulated GPU."""
    gis = sim.state(index)[2]
    table = sim._gpus[index].table
    slices = {p["name"]: p["slices"] for p in table["gi_profiles"]}
    out = collections.Counter()
    for name, _start, cis in gis:
        assert len(cis) == 1, gis
        out[name if cis[0] == slices[name] else "%dc.%s" % (cis[0], name)] += 1
    return out


# ---------------------------------------------------------------------------------------------
# the config file's shape


@pytest.mark.parametrize("doc, expect", [
    ({"version": "v2", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}}, "version must be v1"),
    ({"version": "v1", "mig-configs": {}}, "mig-configs must map"),
    ({"version": "v1", "extra": 1, "mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}}, "unknown keys extra"),
    ({"version": "v1", "mig-configs": {"a": []}}, "at least one entry"),
    ({"version": "v1", "mig-configs": {"a": [{"mig-enabled": False}]}}, "devices is required"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": [0, 0], "mig-enabled": False}]}}, "lists a GPU twice"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": [-1], "mig-enabled": False}]}}, "list of GPU indexes"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": "yes"}]}}, "must be true or false"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True}]}}, "mig-devices is required"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False, "mig-devices": {"1g.10gb": 1}}]}},
     "must be empty when mig-enabled is false"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"9g.999gb": -3}}]}},
     "'9g.999gb': count must be a positive integer, got -3"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 0}}]}},
     "count must be a positive integer, got 0"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": True}}]}},
     "count must be a positive integer, got True"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": "2"}}]}},
     "count must be a positive integer, got '2'"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"big": 1}}]}},
     "'big' is not a MIG profile name"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False, "device-filter": "10de:2335"}]}},
     "device-filter must be 0x<DEVICE><VENDOR>"),
    ({"version": "v1", "mig-configs": {"x; reboot": [{"devices": "all", "mig-enabled": False}]}},
     "becomes the nvidia.com/mig.config label value"),
    ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False, "mig_enabled": True}]}},
     "unknown keys mig_enabled"),
])
def test_config_shape_refused_with_the_key_named(doc, expect):
    with pytest.raises(_mig.MigError) as exc:
        _mig.validate_config(doc)
    assert expect in str(exc.value)


def test_example_configs_are_valid():
    doc = load_yaml("examples.yaml")
    names = _mig.validate_config(doc)
    for wanted in ("all-disabled", "all-enabled", "all-balanced", "all-1g.18gb", "all-7g.80gb"):
        assert wanted in names


# ---------------------------------------------------------------------------------------------
# the GPU's own table


def test_profile_names_from_nvml_numbers_equal_nvidia_smis_on_the_real_h200():
    """Names computed from the captured NVML numbers (no name field) are the ones nvidia-smi printed."""
    with open(LGIP, encoding="utf-8") as fh:
        smi = {m.group(2): m.group(1) for m in re.finditer(r"MIG (\S+)\s+(\d+)\s", fh.read())}
    sim = host("h200")
    sim.nvmlInit()
    gpu = _mig.read_gpu(sim, 0)
    assert {str(p["id"]): p["name"] for p in gpu["profiles"]} == smi
    assert gpu["device_id"] == "0x233510DE" and gpu["mig"] == {"current": False, "pending": False}


def test_names_from_nvmls_v2_name_field_are_used_when_present():
    sim = host({"table": "h200", "profile_names": True})
    sim.nvmlInit()
    assert "1g.18gb+me" in [p["name"] for p in _mig.read_gpu(sim, 0)["profiles"]]


# ---------------------------------------------------------------------------------------------
# mig-parted's example layouts, applied and re-applied


def expected_for(doc, name, gpu_tables):
    """What each GPU should hold: {index: (enabled, Counter)} for the entries that match it
    (devices, device-filter), as mig-parted selects them; GPUs without MIG are skipped."""
    out = {}
    for i, t in enumerate(gpu_tables):
        table = nvml_sim.load_table(TABLES[t])
        for spec in doc["mig-configs"][name]:
            flt = spec.get("device-filter")
            flts = [f.upper() for f in (flt if isinstance(flt, list) else [flt])] if flt else None
            if spec["devices"] != "all" and i not in spec["devices"]:
                continue
            if flts and table["pci_device_id"].upper() not in [f.split(":")[0] for f in flts]:
                continue
            if not table.get("mig_capable", True) or not table.get("gi_profiles"):
                continue
            out[i] = (spec["mig-enabled"], collections.Counter(spec.get("mig-devices") or {}))
    return out


MODELS = ["a100", "a100-40", "a30", "h100", "h200"]
TABLES.update({"a100-40": "a100-sxm4-40gb", "a30": "a30-24gb"})
EXAMPLES = sorted(load_yaml("examples.yaml")["mig-configs"]) if os.path.exists(os.path.join(MIG_FIXTURES, "examples.yaml")) else []


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_layout_applies_and_reapplies_with_no_change(name):
    """Each of mig-parted's example configs on four GPUs of each model: where the model has the
    profiles it applies (re-apply: changed=0, no NVML write); where not, it is refused with no write."""
    doc = load_yaml("examples.yaml")
    applied_somewhere = False
    for model in MODELS:
        gpus = [model] * 4
        sim = host(*gpus)
        want = expected_for(doc, name, gpus)
        names = {p["name"] for p in nvml_sim.load_table(TABLES[model])["gi_profiles"]}
        unknown = {re.sub(r"^\d+c\.", "", k) for _enabled, lay in want.values() for k in lay} - names
        if unknown:
            with pytest.raises(_mig.MigError) as exc:
                _mig.run(sim, doc, name)
            assert "has no MIG profile" in str(exc.value) and sim.writes() == [], (name, model)
            continue
        first = _mig.run(sim, doc, name)
        applied_somewhere = applied_somewhere or bool(want)
        for index, (enabled, layout) in want.items():
            current, pending = sim.state(index)[:2]
            assert (current, pending) == (enabled, enabled), (name, model, index)
            assert instances(sim, index) == layout, (name, model, index)
        for index in set(range(4)) - set(want):  # not matched: untouched
            assert sim.state(index) == (False, False, []), (name, model, index)
        assert first["changed"] is any(e for e, _layout in want.values()), (name, model)
        assert all(g.get("verified", True) for g in first["gpus"])
        writes = len(sim.writes())
        second = _mig.run(sim, doc, name)
        assert second["changed"] is False and len(sim.writes()) == writes, "a re-apply made NVML write calls"
        assert second["diff"]["before"] == second["diff"]["after"] == first["diff"]["after"]
    assert applied_somewhere, "%s applies to none of %s" % (name, MODELS)


def test_every_pair_of_h200_layouts_converges_and_keeps_what_matches():
    doc = load_yaml("examples.yaml")
    h200 = {p["name"] for p in nvml_sim.load_table(TABLES["h200"])["gi_profiles"]}
    names = [n for n in sorted(doc["mig-configs"]) if 0 in expected_for(doc, n, ["h200"])
             and set(expected_for(doc, n, ["h200"])[0][1]) <= h200
             and all(e["devices"] == "all" for e in doc["mig-configs"][n])]
    assert len(names) >= 6
    for a in names:
        for b in names:
            sim = host("h200")
            _mig.run(sim, doc, a)
            before = sim.state(0)[2]
            result = _mig.run(sim, doc, b)
            enabled, layout = expected_for(doc, b, ["h200"])[0]
            assert sim.state(0)[0] is enabled and instances(sim, 0) == layout, (a, b)
            kept = result["gpus"][0]["keep"]
            # what was kept is still there at the same placement
            for item in kept:
                prof, start = item.split("@")
                assert any(n == prof and s == int(start) for n, s, _cis in before), (a, b, item)


def test_only_the_instances_that_differ_are_destroyed():
    doc = {"version": "v1", "mig-configs": {
        "balanced": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}}],
        "split": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 2, "2g.35gb": 1, "1g.35gb": 2}}]}}
    sim = host("h200")
    _mig.run(sim, doc, "balanced")
    n = len(sim.calls)
    result = _mig.run(sim, doc, "split")
    calls = [c[0] for c in sim.calls[n:] if c[0] in nvml_sim.WRITE_CALLS]
    assert calls.count("nvmlGpuInstanceDestroy") == 1 and calls.count("nvmlComputeInstanceDestroy") == 1
    assert result["gpus"][0]["destroy"] == ["3g.71gb@4"]
    assert sorted(result["gpus"][0]["keep"]) == ["1g.18gb@2", "1g.18gb@3", "2g.35gb@0"]
    assert instances(sim, 0) == collections.Counter({"1g.18gb": 2, "2g.35gb": 1, "1g.35gb": 2})


GOOD = load_yaml("good-layouts.yaml") if os.path.exists(os.path.join(MIG_FIXTURES, "good-layouts.yaml")) else []


@pytest.mark.parametrize("case", GOOD, ids=[c["name"] for c in GOOD])
def test_feasible_layouts_that_need_search_apply(case):
    """Layouts that first-fit in the written order would miss; the search must find a placement."""
    table = case["gpu"].replace(".json", "")
    key = next(k for k, v in TABLES.items() if v == table)
    sim = host(key)
    doc = {"version": "v1", "mig-configs": {"good": case["layout"]}}
    result = _mig.run(sim, doc, "good")
    want = collections.Counter()
    for entry in case["layout"]:
        want.update(entry.get("mig-devices") or {})
    assert instances(sim, 0) == want and result["gpus"][0]["verified"] is True
    assert _mig.run(sim, doc, "good")["changed"] is False


def test_a_users_hand_made_instance_with_two_compute_instances_is_rebuilt():
    import pynvml

    sim = host("h200")
    sim.nvmlInit()
    h = sim.nvmlDeviceGetHandleByIndex(0)
    sim.nvmlDeviceSetMigMode(h, 1)
    info = sim.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE)
    pl = pynvml.c_nvmlGpuInstancePlacement_t()
    pl.start, pl.size = 0, 2
    gi = sim.nvmlDeviceCreateGpuInstanceWithPlacement(h, info.id, pl)
    sim.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    sim.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    sim.nvmlShutdown()
    doc = {"version": "v1", "mig-configs": {"one": [{"devices": "all", "mig-enabled": True, "mig-devices": {"2g.35gb": 1}}]}}
    result = _mig.run(sim, doc, "one")
    assert result["changed"] and instances(sim, 0) == collections.Counter({"2g.35gb": 1})
    assert _mig.run(sim, doc, "one")["changed"] is False


def test_compute_instance_profiles_smaller_than_their_gpu_instance():
    doc = {"version": "v1", "mig-configs": {"ci": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1c.3g.71gb": 2}}]}}
    sim = host("h200")
    result = _mig.run(sim, doc, "ci")
    assert instances(sim, 0) == collections.Counter({"1c.3g.71gb": 2})
    assert sorted(result["gpus"][0]["create"]) == ["1c.3g.71gb@0", "1c.3g.71gb@4"]
    assert _mig.run(sim, doc, "ci")["changed"] is False


# ---------------------------------------------------------------------------------------------
# refusals: nothing written


BAD = load_yaml("bad-layouts.yaml") if os.path.exists(os.path.join(MIG_FIXTURES, "bad-layouts.yaml")) else []


@pytest.mark.parametrize("case", BAD, ids=[c["name"] for c in BAD])
def test_bad_layout_refused_before_any_nvml_write(case):
    table = case["gpu"].replace(".json", "")
    key = next(k for k, v in TABLES.items() if v == table)
    sim = host(key)
    doc = {"version": case.get("version", "v1"), "mig-configs": {"bad": case["layout"]}}
    with pytest.raises(_mig.MigError) as exc:
        _mig.run(sim, doc, "bad")
    assert sim.writes() == [], case["name"]
    msg = str(exc.value)
    if case["refusal"] in ("unknown-profile", "instance-limit", "compute-slices", "no-placement", "not-mig-capable"):
        assert "GPU 0 (" in msg or "is not a MIG profile name" in msg, msg  # refused against the GPU: the GPU is named
    if case["refusal"] in ("unknown-profile", "instance-limit"):
        assert any(repr(k) in msg for k in case["layout"][0]["mig-devices"]), msg  # and the profile
    if case["refusal"] == "no-placement":
        assert "no valid placement" in msg, msg
    if case["refusal"] in ("spec", "count"):
        assert "MIG config" in msg and "GPU 0 (" not in msg, msg


def test_unknown_profile_names_the_gpu_profile_and_what_it_has():
    doc = {"version": "v1", "mig-configs": {"x": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 1}}]}}
    sim = host("h200")
    with pytest.raises(_mig.MigError) as exc:
        _mig.run(sim, doc, "x")
    assert "GPU 0 (NVIDIA H200" in str(exc.value) and "'1g.10gb'" in str(exc.value) and "1g.18gb" in str(exc.value)
    assert sim.writes() == []


def test_one_bad_gpu_stops_every_gpu():
    doc = {"version": "v1", "mig-configs": {"x": [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.18gb": 7}},
        {"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb": 8}}]}}
    sim = host("h200", "a100")
    with pytest.raises(_mig.MigError) as exc:
        _mig.run(sim, doc, "x")
    assert "GPU 1 (" in str(exc.value) and "'1g.10gb'" in str(exc.value)
    assert sim.writes() == []


def test_enabling_mig_on_a_gpu_without_mig():
    doc = {"version": "v1", "mig-configs": {
        "named": [{"devices": [1], "mig-enabled": True, "mig-devices": {}}],
        "all": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]}}
    sim = host("h200", "l40s")
    with pytest.raises(_mig.MigError, match=r"GPU 1 \(.*\) is not MIG-capable"):
        _mig.run(sim, doc, "named")
    assert sim.writes() == []
    result = _mig.run(sim, doc, "all")  # devices: all skips it, as mig-parted does
    assert sim.state(0)[0] is True and any("not MIG-capable" in n for n in result["notes"])


def test_gpus_the_host_does_not_have_and_a_gpu_matched_twice():
    doc = {"version": "v1", "mig-configs": {
        "missing": [{"devices": [3], "mig-enabled": False}],
        "twice": [{"devices": "all", "mig-enabled": False}, {"devices": [0], "mig-enabled": True, "mig-devices": {}}]}}
    sim = host("h200")
    with pytest.raises(_mig.MigError, match="names GPU 3; this host has GPU 0"):
        _mig.run(sim, doc, "missing")
    with pytest.raises(_mig.MigError, match="already matched by entry 0"):
        _mig.run(sim, doc, "twice")
    with pytest.raises(_mig.MigError, match="'nope' is not in the file"):
        _mig.run(sim, doc, "nope")
    assert sim.writes() == []


# ---------------------------------------------------------------------------------------------
# MIG mode changes that need a reset


def test_reset_is_per_gpu_and_a_blocked_reset_is_reported_pending():
    doc = {"version": "v1", "mig-configs": {"on": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]}}
    sim = host({"table": "a100", "needs_reset": True, "reset_blocked": True}, {"table": "a100", "needs_reset": True})
    resets = []

    def reset(gpu):
        resets.append(gpu["index"])
        return sim.reset(gpu["index"])[1]

    result = _mig.run(sim, doc, "on", reset=reset)
    # NVML's own activation succeeded on GPU 1; only GPU 0 is still pending: only it is reset, never "all"
    assert resets == [0]
    assert result["reset_pending"] == [0]
    assert sim.state(0) == (False, True, [])           # pending, nothing created there
    assert instances(sim, 1) == collections.Counter({"3g.40gb": 2})
    assert "in use" in result["gpus"][0]["reset_output"]
    sim._gpus[0].reset_blocked = False
    again = _mig.run(sim, doc, "on", reset=reset)
    assert again["reset_pending"] == [] and instances(sim, 0) == collections.Counter({"3g.40gb": 2})
    assert _mig.run(sim, doc, "on", reset=reset)["changed"] is False


def test_without_reset_the_change_stays_pending():
    doc = {"version": "v1", "mig-configs": {"on": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]}}
    sim = host({"table": "a100", "needs_reset": True, "reset_blocked": True})
    result = _mig.run(sim, doc, "on", reset=None)
    assert result["reset_pending"] == [0] and result["changed"] is True
    assert "pending a reset" in _mig.run(sim, doc, "on", check_mode=True)["diff"]["before"]


def test_after_a_reboot_the_layout_is_reapplied():
    doc = load_yaml("examples.yaml")
    sim = host("h200")
    _mig.run(sim, doc, "all-balanced")
    sim.reboot()  # MIG mode persists, instances do not
    assert sim.state(0)[0] is True and sim.state(0)[2] == []
    result = _mig.run(sim, doc, "all-balanced")
    assert result["changed"] and result["gpus"][0]["set_mig_mode"] is None
    assert instances(sim, 0) == collections.Counter({"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1})


# ---------------------------------------------------------------------------------------------
# check mode and diff


def test_check_mode_plans_with_no_write_and_predicts_the_result():
    doc = load_yaml("examples.yaml")
    sim = host("h200")
    planned = _mig.run(sim, doc, "all-balanced", check_mode=True)
    assert sim.writes() == [] and planned["changed"] is True
    applied = _mig.run(sim, doc, "all-balanced")
    assert applied["diff"]["after"] == planned["diff"]["after"]
    assert _mig.run(sim, doc, "all-balanced", check_mode=True)["changed"] is False


# ---------------------------------------------------------------------------------------------
# the boot-time entry point


def test_boot_entry_point(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(load_yaml("examples.yaml")))
    sim = host("h200")
    assert _mig.main(["--config", str(path), "--name", "all-balanced", "--check"], lib=sim) == 0
    assert json.loads(capsys.readouterr().out)["changed"] is True and sim.writes() == []
    assert _mig.main(["--config", str(path), "--name", "all-balanced"], lib=sim) == 0
    assert json.loads(capsys.readouterr().out)["changed"] is True
    assert _mig.main(["--config", str(path), "--name", "no-such"], lib=sim) == 1
    assert "not in the file" in json.loads(capsys.readouterr().out)["msg"]
    blocked = host({"table": "a100", "needs_reset": True, "reset_blocked": True})
    assert _mig.main(["--config", str(path), "--name", "all-enabled", "--no-reset"], lib=blocked) == 3


# -- pynvml on the host (issue 33): the boot-time apply and the role's check say how to install it -----------------

def test_boot_apply_without_pynvml_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(load_yaml("examples.yaml")))
    monkeypatch.setitem(sys.modules, "pynvml", None)          # `import pynvml` fails
    assert _mig.main(["--config", str(path), "--name", "all-balanced"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] is True and "pynvml is not importable by %s" % sys.executable in out["msg"]
    assert "`%s -m pip install nvidia-ml-py`" % sys.executable in out["msg"] and "nothing was changed" in out["msg"]


def test_nvml_check_in_process(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert _mig.main(["--nvml-check"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["python"] == sys.executable and out["pynvml"] is None
    assert "-m pip install nvidia-ml-py" in out["msg"]
    monkeypatch.setitem(sys.modules, "pynvml", host("h200"))  # bindings with every MIG call
    assert _mig.main(["--nvml-check"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True


def test_nvml_check_of_the_copied_script_with_and_without_site_packages(tmp_path):
    """What the mig_layout role runs: _mig.py copied alone, run by a Python with (-I) and without (-S, no
    site-packages) the real nvidia-ml-py of the test environment."""
    import shutil
    import subprocess

    pytest.importorskip("pynvml")
    script = tmp_path / "mig_apply.py"
    shutil.copy(_mig.__file__, str(script))
    seen = {}
    for flag in ("-I", "-S"):
        res = subprocess.run([sys.executable, flag, str(script), "--nvml-check"], capture_output=True, text=True,
                             timeout=60, check=False)
        assert res.returncode == 0, res.stderr
        seen[flag] = json.loads(res.stdout)
    assert seen["-I"]["ok"] is True and seen["-I"]["pynvml"].endswith("pynvml.py")
    assert seen["-S"]["ok"] is False and "No module named 'pynvml'" in seen["-S"]["msg"]


def test_nvml_problem_names_the_missing_mig_calls():
    class Old:
        __version__ = "7.352.0"
        nvmlInit = nvmlDeviceGetCount = staticmethod(lambda *a: 0)

    assert _mig.nvml_problem(host("h200"), None, "/usr/bin/python3") is None
    problem = _mig.nvml_problem(Old(), None, "/usr/bin/python3")
    assert "is too old for MIG" in problem and "7.352.0" in problem
    assert all(name in problem for name in _mig.NVML_MIG_CALLS)
    assert "`/usr/bin/python3 -m pip install nvidia-ml-py`" in problem
