# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Self-check of the MIG data files in tests/unit/fixtures/mig/.

The profile tables (one per GPU model: NVIDIA's published figures, or the real H200 capture) must be
consistent with the rules mig-parted and NVML follow:

* profile names are what go-nvlib derives from NVML's numbers (pkg/nvlib/device/mig_profile.go,
  getMigMemorySizeGB): memory fraction rounded up to eighths, times the total framebuffer in whole GiB
  (rounded up), rounded half away from zero; the "Ng" prefix is the slice count; the suffix follows the
  NVML profile constant (+me, -me, +me.all, +gfx);
* placements lie inside the memory slices, aligned to their size, and a profile's memory never exceeds
  the share of the framebuffer its placement covers;
* a profile's instance count is the number of its placements that fit side by side, except for the
  media-extension (+me) profiles, of which there is one;
* the A100 (both sizes), H100 and H200 share one geometry (IDs, slices, instances, placements).

The layout files (examples.yaml, bad-layouts.yaml, good-layouts.yaml) are checked with
placements_check.py, a stdlib reference checker whose placement search is exhaustive.
"""
from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import shutil

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
MIG = os.path.join(os.path.dirname(HERE), "fixtures", "mig")


def _load(name):
    spec = importlib.util.spec_from_file_location("mig_" + name, os.path.join(MIG, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pc = _load("placements_check")
from_capture = _load("from_capture")

TABLE_FILES = sorted(f for f in os.listdir(MIG) if f.endswith(".json"))
TABLES = dict((f, pc.load_table(os.path.join(MIG, f))) for f in TABLE_FILES)
MIG_TABLES = dict((f, t) for f, t in TABLES.items() if t.get("mig_capable", True))
PROFILES = [(f, p["name"]) for f, t in sorted(MIG_TABLES.items()) for p in t["gi_profiles"]]

HEADER = ["product", "pci_device_id", "memory_total_bytes", "compute_slices", "memory_slices", "sources", "notes", "gi_profiles"]
PROFILE_KEYS = ["profile_index", "id", "name", "slices", "instances", "memory_mib", "multiprocessors",
                "copy_engines", "decoders", "encoders", "jpegs", "ofas", "placements"]
# NVML_GPU_INSTANCE_PROFILE_* constant -> compute slices (nvml.h / pynvml)
INDEX_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6, 7: 1, 8: 2, 9: 1, 10: 1, 11: 2, 12: 4, 13: 1, 14: 2, 15: 1, 16: 2, 17: 3}
SUFFIX = {7: "+me", 8: "+me", 13: "-me", 14: "-me", 15: "+me.all", 16: "+me.all", 10: "+gfx", 11: "+gfx", 12: "+gfx", 17: "+gfx"}
MEDIA_EXTENSION = (7, 8)
GIB = 2 ** 30
MIB = 2 ** 20


def mig_parted_name(profile_index, slices, memory_mib, total_bytes):
    """The GPU-instance profile name mig-parted (go-nvlib) derives from NVML's numbers."""
    fraction = float(memory_mib) * MIB / float(total_bytes)
    fraction = math.ceil(fraction * 8) / 8
    total_gb = float((total_bytes + GIB - 1) // GIB)
    gb = int(math.floor(fraction * total_gb + 0.5))  # Go math.Round: half away from zero (values are > 0)
    return "%dg.%dgb%s" % (slices, gb, SUFFIX.get(profile_index, ""))


def profile(table_file, name):
    return pc.profiles_by_name(TABLES[table_file])[name]


def read_yaml(name):
    with open(os.path.join(MIG, name)) as f:
        return yaml.safe_load(f)


# --- the rule itself -------------------------------------------------------------------------------

@pytest.mark.parametrize("args, expected", [
    ((0, 1, 16384, 150754820096), "1g.18gb"),    # H200: 0.114 -> 1/8 of 141 = 17.6 -> 18
    ((2, 3, 71424, 150754820096), "3g.71gb"),    # 4/8 of 141 = 70.5 -> 71 (half away from zero, not to even)
    ((9, 1, 33280, 150754820096), "1g.35gb"),    # 0.23 -> 2/8 of 141 = 35.25 -> 35
    ((7, 1, 16384, 150754820096), "1g.18gb+me"),
    ((13, 1, 16384, 150754820096), "1g.18gb-me"),
    ((15, 1, 16384, 150754820096), "1g.18gb+me.all"),
    ((17, 3, 71424, 150754820096), "3g.71gb+gfx"),
    ((0, 1, 4864, 40537 * MIB), "1g.5gb"),       # driver 450's 40537 MiB total: ceil to 40 GiB all the same
    ((2, 3, 40192, 81251 * MIB), "3g.40gb"),     # driver 495's 81251 MiB total (mig-parted#31)
])
def test_naming_rule(args, expected):
    assert mig_parted_name(*args) == expected


def test_naming_rule_can_disagree():
    # 1 MiB more than 3/8 of the board rounds up to 4/8: a table with a wrong memory figure gets a wrong name
    assert mig_parted_name(2, 3, 30584, 81559 * MIB) == "3g.30gb"   # just under 3/8 of 81559 MiB
    assert mig_parted_name(2, 3, 30585, 81559 * MIB) == "3g.40gb"   # just over: rounds up to 4/8
    assert mig_parted_name(0, 1, 9984, 81559 * MIB) != mig_parted_name(0, 1, 9984, 150754820096)


# --- the tables ------------------------------------------------------------------------------------

@pytest.mark.parametrize("table_file", TABLE_FILES)
def test_table_shape(table_file):
    table = TABLES[table_file]
    keys = [k for k in table if k != "mig_capable"]
    assert keys == HEADER
    assert isinstance(table.get("mig_capable", True), bool)
    assert table["pci_device_id"][:2] == "0x" and table["pci_device_id"].endswith("10DE") and len(table["pci_device_id"]) == 10
    int(table["pci_device_id"], 16)
    assert table["sources"] and all(isinstance(s, str) and s for s in table["sources"])
    profiles = table["gi_profiles"]
    for p in profiles:
        assert list(p) == PROFILE_KEYS, p["name"]
        assert all(isinstance(p[k], int) and not isinstance(p[k], bool) for k in PROFILE_KEYS if k not in ("name", "placements"))
    for key in ("profile_index", "id", "name"):
        assert len(set(p[key] for p in profiles)) == len(profiles), key
    assert [p["profile_index"] for p in profiles] == sorted(p["profile_index"] for p in profiles)


def test_no_mig_stub():
    table = TABLES["l40s-48gb.json"]
    assert table["mig_capable"] is False and table["gi_profiles"] == []
    assert (table["compute_slices"], table["memory_slices"]) == (0, 0)


@pytest.mark.parametrize("table_file, name", PROFILES)
def test_name_follows_mig_parted_rule(table_file, name):
    table = TABLES[table_file]
    p = profile(table_file, name)
    assert mig_parted_name(p["profile_index"], p["slices"], p["memory_mib"], table["memory_total_bytes"]) == name


@pytest.mark.parametrize("table_file, name", PROFILES)
def test_slices_match_nvml_profile_constant(table_file, name):
    p = profile(table_file, name)
    assert INDEX_SLICES[p["profile_index"]] == p["slices"]
    assert name.startswith("%dg." % p["slices"])


@pytest.mark.parametrize("table_file, name", PROFILES)
def test_placements_inside_memory_slices(table_file, name):
    table = TABLES[table_file]
    placements = profile(table_file, name)["placements"]
    assert placements
    sizes = set(pl["size"] for pl in placements)
    assert len(sizes) == 1
    size = sizes.pop()
    assert size & (size - 1) == 0  # a power of two
    starts = [pl["start"] for pl in placements]
    assert starts == sorted(set(starts))
    for start in starts:
        assert start % size == 0 and 0 <= start and start + size <= table["memory_slices"]


@pytest.mark.parametrize("table_file, name", PROFILES)
def test_memory_within_its_slices(table_file, name):
    table = TABLES[table_file]
    p = profile(table_file, name)
    share = table["memory_total_bytes"] * p["placements"][0]["size"] // table["memory_slices"]
    assert p["memory_mib"] * MIB <= share


def max_disjoint(placements):
    best = 0
    for n in range(1, len(placements) + 1):
        for combo in itertools.combinations(placements, n):
            cells = [s for pl in combo for s in range(pl["start"], pl["start"] + pl["size"])]
            if len(cells) == len(set(cells)):
                best = n
    return best


@pytest.mark.parametrize("table_file, name", PROFILES)
def test_instances_match_placements(table_file, name):
    p = profile(table_file, name)
    if p["profile_index"] in MEDIA_EXTENSION:
        # "A single 1g profile can include media extensions" (MIG User Guide): one instance, many placements
        assert p["instances"] == 1 < len(p["placements"])
    else:
        assert p["instances"] == max_disjoint(p["placements"])


@pytest.mark.parametrize("table_file", sorted(MIG_TABLES))
def test_slice_totals(table_file):
    table = TABLES[table_file]
    profiles = table["gi_profiles"]
    assert table["compute_slices"] == max(p["slices"] for p in profiles)
    assert table["memory_slices"] == max(pl["start"] + pl["size"] for p in profiles for pl in p["placements"])
    full = [p for p in profiles if p["slices"] == table["compute_slices"]]
    assert len(full) == 1 and full[0]["placements"] == [{"start": 0, "size": table["memory_slices"]}]
    for a, b in itertools.product(profiles, profiles):
        if a["slices"] < b["slices"]:
            assert a["multiprocessors"] < b["multiprocessors"], (a["name"], b["name"])


def geometry(table_file):
    return dict((p["profile_index"], (p["id"], p["slices"], p["instances"], p["placements"])) for p in TABLES[table_file]["gi_profiles"])


@pytest.mark.parametrize("table_file", ["a100-sxm4-80gb.json", "a100-sxm4-40gb.json", "h100-sxm5-80gb.json"])
def test_seven_slice_boards_share_the_h200_geometry(table_file):
    assert geometry(table_file) == geometry("h200-141gb.json")


def test_h200_table_is_generated_from_the_capture():
    with open(os.path.join(MIG, "h200-141gb.json")) as f:
        assert f.read() == from_capture.render(from_capture.build())


def test_generator_refuses_a_capture_that_disagrees(tmp_path):
    capture = str(tmp_path / "capture")
    shutil.copytree(from_capture.CAPTURE, capture)
    path = os.path.join(capture, "nvidia-smi-mig-lgip.txt")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("32.50      No     26", "32.25      No     26"))
    with pytest.raises(SystemExit, match="profile ID 15 GiB"):
        from_capture.build(capture)


# --- the layouts -----------------------------------------------------------------------------------

def entries_for(config, table, index=0):
    return [e for e in config if pc.matches(e, table, index)]


def test_examples_are_valid_mig_parted_v1():
    assert pc.validate_config(read_yaml("examples.yaml")) == []


# Configs without a device-filter whose profile names also exist on boards they are not meant for.
INTENDED = {"custom-config": ("a100-sxm4-80gb.json", "h100-sxm5-80gb.json")}


def test_examples_fit_where_they_apply():
    configs = read_yaml("examples.yaml")["mig-configs"]
    for cname, config in sorted(configs.items()):
        applied = 0
        for tfile, table in sorted(MIG_TABLES.items()):
            if tfile not in INTENDED.get(cname, (tfile,)):
                continue
            names = set(pc.profiles_by_name(table))
            for index in range(4):
                for entry in entries_for(config, table, index):
                    md = entry.get("mig-devices") or {}
                    if not entry["mig-enabled"] or not set(md) <= names:
                        continue
                    verdict = pc.check(table, md)
                    assert verdict.ok, (cname, tfile, index, verdict)
                    applied += 1
        assert applied or cname == "all-disabled", cname


@pytest.mark.parametrize("cname", sorted(c for c in read_yaml("examples.yaml")["mig-configs"] if c.startswith("all-")
                                         and c not in ("all-disabled", "all-enabled", "all-balanced")))
def test_all_profile_configs_fill_the_gpu(cname):
    """all-<profile>: named after the profile (+ written as .) and asking for all its instances."""
    config = read_yaml("examples.yaml")["mig-configs"][cname]
    seen = 0
    for entry in config:
        ((name, count),) = entry["mig-devices"].items()
        assert cname == "all-" + name.replace("+", ".")
        for table in MIG_TABLES.values():
            by_name = pc.profiles_by_name(table)
            if name in by_name and pc.matches(entry, table, 0):
                assert count == by_name[name]["instances"], (cname, table["product"])
                seen += 1
    assert seen


def test_unfiltered_custom_config_is_a_trap_on_a_40gb_board():
    """1g.10gb exists on both A100 sizes: 7 instances on 80GB, 4 (the 2-memory-slice profile) on 40GB."""
    (entry,) = entries_for(read_yaml("examples.yaml")["mig-configs"]["custom-config"], TABLES["a100-sxm4-40gb.json"], 0)
    assert pc.check(TABLES["a100-sxm4-40gb.json"], entry["mig-devices"]).reason == "instance-limit"


def test_all_balanced_covers_every_mig_table_once():
    config = read_yaml("examples.yaml")["mig-configs"]["all-balanced"]
    for tfile, table in MIG_TABLES.items():
        entries = entries_for(config, table)
        assert len(entries) == 1, tfile
        assert pc.check(table, entries[0]["mig-devices"]).ok, tfile


BAD = read_yaml("bad-layouts.yaml")
GOOD = read_yaml("good-layouts.yaml")
REFUSALS = {"spec", "count", "unknown-profile", "instance-limit", "compute-slices", "no-placement", "not-mig-capable"}


def test_layout_names_unique():
    names = [c["name"] for c in BAD + GOOD]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("case", BAD, ids=[c["name"] for c in BAD])
def test_bad_layout_is_refused_for_the_stated_reason(case):
    assert set(case) <= {"name", "gpu", "layout", "why", "refusal", "version"} and case["why"]
    assert case["refusal"] in REFUSALS
    table = TABLES[case["gpu"]]
    doc = {"version": case.get("version", "v1"), "mig-configs": {case["name"]: case["layout"]}}
    problems = pc.validate_config(doc)
    if case["refusal"] == "spec":
        assert problems
        return
    if case["refusal"] == "count":
        assert problems  # mig-parted refuses bad counts when it reads the file
    else:
        assert problems == []
    entries = entries_for(case["layout"], table)
    assert len(entries) == 1
    if case["refusal"] == "not-mig-capable":
        assert entries[0]["devices"] != "all"  # mig-parted skips non-MIG GPUs selected by `devices: all`
    verdict = pc.check(table, entries[0]["mig-devices"])
    assert not verdict.ok and verdict.reason == case["refusal"], verdict


def test_no_placement_cases_are_minimal_and_proven_by_the_script():
    cases = dict((c[0], c) for c in pc.CASES)
    for case in BAD:
        if case["refusal"] != "no-placement":
            continue
        name, gpu, layout, expected = cases[case["name"]][:4]
        assert (gpu + ".json", layout, expected) == (case["gpu"], case["layout"][0]["mig-devices"], "no-placement")
        assert layout in pc.enumerate_no_placement(pc.load_table(gpu))  # removing any one instance makes it fit
    assert sorted(c[0] for c in pc.CASES if c[3] == "no-placement") == sorted(
        c["name"] for c in BAD if c["refusal"] == "no-placement")


def test_no_layout_of_the_a30_lacks_a_placement():
    assert pc.enumerate_no_placement(TABLES["a30-24gb.json"]) == []


@pytest.mark.parametrize("case", GOOD, ids=[c["name"] for c in GOOD])
def test_good_layout_fits_and_greedy_claims_hold(case):
    table = TABLES[case["gpu"]]
    assert pc.validate_config({"version": "v1", "mig-configs": {case["name"]: case["layout"]}}) == []
    (entry,) = entries_for(case["layout"], table)
    layout = entry["mig-devices"]
    assert pc.check(table, layout).ok
    # the witness: the right instances, each at one of its profile's placements, none overlapping
    cells = []
    for w in case["placements"]:
        assert {"start": w["start"], "size": w["size"]} in profile(case["gpu"], w["profile"])["placements"]
        cells.extend(range(w["start"], w["start"] + w["size"]))
    assert len(cells) == len(set(cells))
    counts = dict((n, len(list(g))) for n, g in itertools.groupby(sorted(w["profile"] for w in case["placements"])))
    assert counts == layout
    # greedy_fails lists exactly the failing orders, and some order works
    assert sorted(tuple(o) for o in case["greedy_fails"]) == pc.failing_orders(table, layout)
    flat = [n for n in sorted(layout) for _i in range(layout[n])]
    assert any(pc.greedy(table, list(o))[1] is None for o in set(itertools.permutations(flat)))


def test_good_cases_match_the_script():
    cases = dict((c[0], c) for c in pc.CASES)
    for case in GOOD:
        name, gpu, layout, expected, order = cases[case["name"]]
        assert (gpu + ".json", layout, expected) == (case["gpu"], case["layout"][0]["mig-devices"], "ok")
        assert (order is None) == (not case["greedy_fails"])
        if order:
            assert order in case["greedy_fails"]


def test_script_proves_its_cases(capsys):
    assert pc.prove() == 0
    assert "<--" not in capsys.readouterr().out


def test_json_tables_are_rendered_consistently():
    for tfile in TABLE_FILES:
        with open(os.path.join(MIG, tfile)) as f:
            text = f.read()
        assert text == from_capture.render(json.loads(text)), tfile
