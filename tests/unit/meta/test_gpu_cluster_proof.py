"""Versions proven are versions pinned: the GPU cluster lane's last committed result (tests/lab/gpu/results/cluster,
made on the lent GPU by tests/lab/gpu/cluster.sh) against the images the roles pin (plugins/plugin_utils/
_components.py) and against the roles' history.

- The newest result passed every check and names the collection commit it ran.
- Every component the lane deploys ran at the version its role pins -- or the difference is declared in
  tests/lab/gpu/cluster/unproven.yml with both versions and why (a pin that moves, or a proof that catches up,
  makes the declaration wrong and fails here too).
- No such component's role, template or pin changed after the commit the result ran: a change needs a new run.
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
RESULTS = os.path.join(ROOT, "tests", "lab", "gpu", "results", "cluster")
LANE_VARS = os.path.join(ROOT, "tests", "lab", "gpu", "cluster", "vars.yml")
UNPROVEN = os.path.join(ROOT, "tests", "lab", "gpu", "cluster", "unproven.yml")
COMPONENTS = os.path.join(ROOT, "plugins", "plugin_utils", "_components.py")
if not os.path.isdir(os.path.join(ROOT, "tests", "lab")):
    pytest.skip("the collection tarball (ansible-test units) carries no lab lanes or their results", allow_module_level=True)


def _images(source=None):
    """IMAGES of _components.py (pure data), read as a literal: the file now, or its text at another commit."""
    if source is None:
        with open(COMPONENTS, encoding="utf-8") as f:
            source = f.read()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["IMAGES"]:
            return ast.literal_eval(node.value)
    raise AssertionError("no IMAGES table in _components.py")


def _git(*args):
    r = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, check=False)
    return r.returncode, r.stdout.strip()


def _passing():
    """The newest result that passed every check: (folder, summary), or None."""
    runs = []
    for d in sorted(os.listdir(RESULTS)) if os.path.isdir(RESULTS) else []:
        p = os.path.join(RESULTS, d, "summary.json")
        if os.path.isfile(p):
            with open(p, encoding="utf-8") as f:
                s = json.load(f)
            if s.get("checks") and s.get("failed") == []:
                runs.append((d, s))
    if not runs:
        return None
    # folders are named <date>-<commit>-<GPU>: the newest date, then the commit latest in history
    return max(runs, key=lambda r: (r[1]["date"], _git("log", "-1", "--format=%ct", r[1]["commit"])[1]))


def _declared():
    with open(UNPROVEN, encoding="utf-8") as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def newest():
    run = _passing()
    if run is None:
        pytest.skip("no GPU cluster run has passed yet; unproven.yml says why (test_a_passing_run_or_a_reason)")
    return run


def deployed():
    """The components the lane deploys: its vars.yml's, and those a step of the newest passing run added (the
    validator: lane.py adds it to the list for its step)."""
    with open(LANE_VARS, encoding="utf-8") as f:
        comps = list(yaml.safe_load(f)["gpuops_cluster_components"])
    run = _passing()
    comps += [c for c in (run[1].get("components", {}) if run else {}) if c not in comps]
    return [c for c in comps if c in _images()]  # runtime_class has no image


def test_a_passing_run_or_a_reason():
    """A passing result exists, or unproven.yml's no_passing_run says why -- never both."""
    run, why = _passing(), str(_declared().get("no_passing_run") or "").strip()
    assert os.path.isdir(RESULTS) and os.listdir(RESULTS), "no GPU cluster result under %s (docs/gpu-lane.md)" % RESULTS
    if run is None:
        assert why, "no result under %s passed every check, and unproven.yml's no_passing_run gives no reason" % RESULTS
        return
    assert not why, "%s passed: drop no_passing_run from unproven.yml" % run[0]
    name, s = run
    assert len(s["commit"]) >= 7 and s["gpu_uuid"].startswith("GPU-") and s["gpu"], name
    assert s["commit"][:7] in name and s["gpu_uuid"][4:12] in name, "the folder names its commit and GPU: %s" % name


def test_every_result_names_its_commit_and_gpu():
    for d in os.listdir(RESULTS) if os.path.isdir(RESULTS) else []:
        date, commit, gpu = d[:10], d[11:-9], d[-8:]
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date) and re.fullmatch(r"[0-9a-f]{7}", commit) \
            and re.fullmatch(r"[0-9a-f]{8}", gpu), "results/cluster/%s: <date>-<commit>-<GPU UUID's first 8>" % d
        assert os.path.isfile(os.path.join(RESULTS, d, "checks.tsv")), d
        assert _git("rev-parse", "--verify", "--quiet", commit + "^{commit}")[0] == 0 or not os.path.isdir(
            os.path.join(ROOT, ".git")), "%s: commit %s is not in this history" % (d, commit)


def _lane_versions():
    """What the lane runs when no passing result says what ran: the image versions its vars override (none now:
    it builds every component at its pin) and, for the rest, the pins."""
    with open(LANE_VARS, encoding="utf-8") as f:
        v = yaml.safe_load(f)
    out = {c: _images()[c]["version"] for c in deployed()}
    out.update({c: v["%s_image" % c]["version"] for c in deployed() if "%s_image" % c in v})
    return out


def test_every_deployed_component_ran_at_its_pin_or_the_gap_is_declared():
    run = _passing()
    name, s = run if run else ("the lane's vars.yml (no passing run yet)", {"components": _lane_versions()})
    declared = {g["component"]: g for g in _declared()["unproven"]}
    images = _images()
    problems = []
    for c in deployed():
        pinned, ran = images[c]["version"], s["components"].get(c)
        gap = declared.get(c)
        if ran is None:
            problems.append("%s: not in the result's components" % c)
        elif ran == pinned and gap:
            problems.append("%s: proven at its pin %s, yet declared unproven: drop it from unproven.yml" % (c, pinned))
        elif ran != pinned and not gap:
            problems.append("%s: pinned %s, the GPU run proved %s (%s)" % (c, pinned, ran, name))
        elif ran != pinned and (gap["pinned"], gap["proven"]) != (pinned, ran):
            problems.append("%s: unproven.yml says pinned %s / proven %s, the tree says %s / %s"
                            % (c, gap["pinned"], gap["proven"], pinned, ran))
        elif gap and not str(gap.get("why", "")).strip():
            problems.append("%s: a declared gap needs its reason" % c)
    stale = sorted(set(declared) - set(deployed()))
    assert not problems and not stale, problems + ["declared but not deployed by the lane: %s" % stale]


def test_no_component_changed_after_the_run(newest):
    name, s = newest
    rc = _git("rev-parse", "--verify", "--quiet", s["commit"] + "^{commit}")[0]
    if rc:
        pytest.skip("no git history here (a tarball): the proof's age cannot be read")  # CI clones with history
    rc, log = _git("log", "--format=%h %s", s["commit"] + "..HEAD", "--", *["roles/%s" % c for c in deployed()])
    assert rc == 0 and not log, "roles changed since the GPU run at %s (%s); run the lane again:\n%s" % (
        s["commit"][:7], name, log)
    rc, source = _git("show", "%s:plugins/plugin_utils/_components.py" % s["commit"])
    then, now = _images(source), _images()
    moved = {c: (then.get(c), now[c]) for c in deployed() if then.get(c) != now[c]}
    assert not moved, "image pins changed since the GPU run at %s: %s" % (s["commit"][:7], moved)
